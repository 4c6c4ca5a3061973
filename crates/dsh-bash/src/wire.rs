//! The executor's calls and replies as they cross a process boundary.
//!
//! A remote executor (`dsh-bash-remote`) drives a `dsh-bash mcp` server
//! with the standard `bash`, `bash_output`, `bash_write` and `bash_kill` tool calls (and `bash_screen`), and
//! marks them as executor calls with a `_meta` entry under [`META_KEY`]
//! holding [`ExecExtras`]: what a program may say that a model may not
//! (stdin, environment, a narrower sandbox). The server answers such a call
//! with a [`Reply`] under the same key in the result's `_meta`: the exact
//! facts the executor produced, as the types of this crate, so nothing is
//! parsed back from rendered text. The server announces itself with
//! [`ServerFacts`] as the `io.dsh-bash/executor` extension capability.
//!
//! ```
//! use dsh_bash::wire::{ErrorFacts, Reply};
//! use dsh_bash::BashError;
//!
//! let reply = Reply::Failed(ErrorFacts::from(&BashError::InvalidTimeout));
//! let json = serde_json::to_value(&reply).unwrap();
//! let back: Reply = serde_json::from_value(json).unwrap();
//! let Reply::Failed(facts) = back else { unreachable!() };
//! assert!(matches!(facts.into_error(), BashError::InvalidTimeout));
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{
    BashError, BashRunResult, BashTask, BashTaskId, BashTaskRead, NetworkPolicy, OutputCursor,
    SandboxMode, TaskState,
};

/// The `_meta` key of an executor call and of its reply, and the name of
/// the server's extension capability.
pub const META_KEY: &str = "io.dsh-bash/executor";

/// What an executor call adds to the tool's arguments. A server refuses an
/// entry it cannot read whole (an unknown field included): a narrowing it
/// did not understand must not run wider.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecExtras {
    /// Bytes for the command's stdin (absent: `/dev/null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<Vec<u8>>,
    /// Extra environment entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// A sandbox mode no wider than the session's (a wider one needs a
    /// person's approval, which only the model-facing call can ask for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_mode: Option<SandboxMode>,
    /// A network policy no wider than the mode's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPolicy>,
    /// Hosts beside the server's allow-list. The server's list is a
    /// ceiling its operator set: a server refuses any here (only a person
    /// at the model-facing call can widen it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<crate::HostPattern>,
    /// Run the command in a terminal of this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<crate::TerminalSize>,
    /// Keep a background task's stdin open for `bash_write`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
    /// Report the directory the command's shell ended in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub report_cwd: bool,
    /// Refuse to start where a symlink now leads (an approved workdir).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub workdir_pinned: bool,
}

/// What a server tells a remote executor about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerFacts {
    /// The server's default sandbox mode; `None` if it never confines.
    pub sandbox_mode: Option<SandboxMode>,
    /// The network policy of each mode the server confines under.
    pub network: Vec<(SandboxMode, NetworkPolicy)>,
    /// The foreground timeout when a call names none, in milliseconds.
    pub default_timeout_ms: u64,
    /// The cap on any foreground timeout, in milliseconds.
    pub max_timeout_ms: u64,
    /// The session's working directory on the server's machine.
    pub cwd: Option<PathBuf>,
}

/// A background task's id and state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFacts {
    /// The task id (on the server).
    pub id: BashTaskId,
    /// Its state when the reply was made.
    pub state: TaskState,
}

impl From<&BashTask> for TaskFacts {
    fn from(task: &BashTask) -> Self {
        TaskFacts {
            id: task.id.clone(),
            state: task.state(),
        }
    }
}

/// One read of a background task's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadFacts {
    /// The task as of the read (settled only once all output is in).
    pub task: TaskFacts,
    /// New stdout.
    pub stdout: String,
    /// New stderr.
    pub stderr: String,
    /// Some unread output had slid out of the server's memory.
    pub lossy: bool,
    /// The complete stdout on the server's machine, once it spilled.
    pub stdout_spill_path: Option<PathBuf>,
    /// The complete stderr on the server's machine, once it spilled.
    pub stderr_spill_path: Option<PathBuf>,
    /// Where the text starts, in the server's streams.
    #[serde(default)]
    pub from: OutputCursor,
    /// Where the text ends, in the server's streams.
    #[serde(default)]
    pub to: OutputCursor,
}

impl From<&BashTaskRead> for ReadFacts {
    fn from(read: &BashTaskRead) -> Self {
        ReadFacts {
            task: TaskFacts::from(&read.task),
            stdout: read.stdout.clone(),
            stderr: read.stderr.clone(),
            lossy: read.lossy,
            stdout_spill_path: read.stdout_spill_path.clone(),
            stderr_spill_path: read.stderr_spill_path.clone(),
            from: read.from,
            to: read.to,
        }
    }
}

/// Why an executor call failed, as the executor said it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorFacts {
    /// [`BashError::code`], or a code of the server's (`NOT_OWNER`,
    /// `ESCALATION`, `INVALID_ARGUMENTS`).
    pub code: String,
    /// The error's text.
    pub message: String,
    /// The task the error is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<BashTaskId>,
}

impl From<&BashError> for ErrorFacts {
    fn from(err: &BashError) -> Self {
        ErrorFacts {
            code: err.code().to_owned(),
            message: err.to_string(),
            task: match err {
                BashError::UnknownTask { id } => Some(id.clone()),
                _ => None,
            },
        }
    }
}

impl ErrorFacts {
    /// The error on this side: the variant itself where it carries nothing
    /// the text does not, else [`BashError::Remote`] with the code and text
    /// (the server's `SHUT_DOWN` among them: it is the server that stopped,
    /// not the caller's executor).
    pub fn into_error(self) -> BashError {
        match (self.code.as_str(), self.task) {
            ("INVALID_TIMEOUT", _) => BashError::InvalidTimeout,
            ("UNKNOWN_TASK", Some(id)) => BashError::UnknownTask { id },
            ("ABORTED", _) => BashError::AbortedBeforeSpawn,
            _ => BashError::Remote {
                code: self.code,
                message: self.message,
            },
        }
    }
}

/// A server's answer to an executor call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// A foreground run finished (exit, timeout or abort).
    Ran(BashRunResult),
    /// A background task started.
    Started(TaskFacts),
    /// A read of a background task.
    Read(ReadFacts),
    /// A kill: whether this call killed it, and the task after it.
    Killed {
        /// True if this call killed it.
        killed: bool,
        /// The task, settled.
        task: TaskFacts,
    },
    /// Input was written to a task (`bash_write`, the bytes in the
    /// extras' `stdin`).
    Wrote,
    /// A terminal task's screen (`bash_screen`).
    Screen(String),
    /// The call failed; nothing ran.
    Failed(ErrorFacts),
}
