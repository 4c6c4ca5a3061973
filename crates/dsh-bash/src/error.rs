use std::path::PathBuf;

use dsh_sandbox::SandboxUnavailable;

use crate::BashTaskId;

/// Why a command could not be resolved, run, started, read or killed.
///
/// Outcomes of a command that ran (exit codes, timeouts, aborts, denials) are
/// never errors; see [`crate::BashRunResult`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BashError {
    /// The requested timeout is zero.
    #[error("invalid timeout: expected a positive duration, got 0")]
    InvalidTimeout,
    /// The command is longer than the executor accepts.
    #[error("the command is {bytes} bytes long; at most {limit} bytes are accepted (write large content with several commands, or from a file)")]
    CommandTooLong {
        /// Its length.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The command contains a NUL byte, which no shell command can hold.
    #[error("the command contains a NUL byte, which no shell command can hold; remove it (write binary data with printf escapes instead)")]
    CommandHasNul,
    /// The workdir does not exist.
    #[error("workdir {} does not exist", path.display())]
    WorkdirMissing {
        /// The workdir asked for.
        path: PathBuf,
    },
    /// The workdir exists (or may) but cannot be looked at or entered.
    #[error("workdir {} cannot be entered: {cause}", path.display())]
    WorkdirInaccessible {
        /// The workdir asked for.
        path: PathBuf,
        /// What the OS said (for example permission denied).
        cause: std::io::Error,
    },
    /// The workdir exists but is not a directory.
    #[error("workdir {} is not a directory", path.display())]
    WorkdirNotDirectory {
        /// The workdir asked for.
        path: PathBuf,
    },
    /// The process could not be spawned (missing shell, exhausted resources…).
    #[error("spawn failed: {message}")]
    Spawn {
        /// What was being spawned and what went wrong, in words (the OS
        /// error included, so it is not chained a second time).
        message: String,
        /// The OS error, for callers that match on its kind.
        cause: std::io::Error,
    },
    /// The cancellation token had already fired; nothing ran.
    #[error("aborted before spawn")]
    AbortedBeforeSpawn,
    /// No task has this id.
    #[error("unknown bash task \"{id}\"")]
    UnknownTask {
        /// The id asked for.
        id: BashTaskId,
    },
    /// A read asked for a position past what the task produced.
    #[error("position {asked} is past the output of task {id}, which ends at {end}; pass a position an earlier read showed ([position: …]), or leave since out to read what is new")]
    PositionAhead {
        /// The task.
        id: BashTaskId,
        /// The position asked for.
        asked: crate::OutputCursor,
        /// Where its output ends now.
        end: crate::OutputCursor,
    },
    /// The executor was shut down; it accepts no new commands.
    #[error("the bash executor has been shut down and accepts no new commands")]
    ShutDown,
    /// An environment entry the request names cannot be given to this
    /// command (for a command confined by a wrapping runner such as
    /// bubblewrap: a variable the runner's dynamic loader or C library would
    /// act on before the sandbox exists).
    #[error("the environment variable {name} cannot be set for this command: {why}")]
    EnvRefused {
        /// The variable.
        name: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// Input was written to a task started without a terminal or an open
    /// stdin.
    #[error("task {id} takes no input: it was started without a terminal or an open stdin; start the command with tty (a terminal) or interactive (an open stdin) to write to it")]
    NotInteractive {
        /// The task.
        id: BashTaskId,
    },
    /// The task's input is closed: it has ended, or closed its terminal
    /// or stdin.
    #[error("cannot write to task {id}: {why}")]
    InputClosed {
        /// The task.
        id: BashTaskId,
        /// What happened.
        why: String,
    },
    /// The caller has as many interactive tasks running as allowed.
    #[error("{running} interactive tasks are running for this session, the most allowed; stop one with bash_kill (or let one finish) first")]
    TooManyInteractive {
        /// How many are running.
        running: usize,
    },
    /// This executor cannot run what the request asks for.
    #[error("{what} is not available through this executor: {why}")]
    Unsupported {
        /// What was asked for (`a terminal`).
        what: &'static str,
        /// Why, and where it is available.
        why: String,
    },
    /// A remote executor's server refused the call; the text is the
    /// server's (the variant itself where one fits, see
    /// [`crate::wire::ErrorFacts::into_error`]).
    #[error("{message}")]
    Remote {
        /// The server's code (`INVALID_WORKDIR`, `NOT_OWNER`, …).
        code: String,
        /// The server's text.
        message: String,
    },
    /// A remote executor lost (or never had) its connection to the server;
    /// what was in flight is unknown to have run or not.
    #[error("the remote dsh-bash server is unreachable: {message}")]
    Unreachable {
        /// What failed, in words (the transport's error, the server's
        /// stderr).
        message: String,
    },
    /// A confined mode was asked for and no sandbox can enforce it (or the
    /// sandbox runner failed); nothing ran.
    #[error(transparent)]
    SandboxUnavailable(#[from] SandboxUnavailable),
}

impl BashError {
    /// A stable machine-readable code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            BashError::InvalidTimeout => "INVALID_TIMEOUT",
            BashError::PositionAhead { .. } => "INVALID_POSITION",
            BashError::CommandTooLong { .. } => "COMMAND_TOO_LONG",
            BashError::CommandHasNul => "INVALID_COMMAND",
            BashError::WorkdirMissing { .. }
            | BashError::WorkdirNotDirectory { .. }
            | BashError::WorkdirInaccessible { .. } => "INVALID_WORKDIR",
            BashError::Spawn { .. } => "SPAWN_FAILED",
            BashError::AbortedBeforeSpawn => "ABORTED",
            BashError::UnknownTask { .. } => "UNKNOWN_TASK",
            BashError::ShutDown => "SHUT_DOWN",
            BashError::SandboxUnavailable(refused) => refused.code(),
            BashError::Unreachable { .. } => "UNREACHABLE",
            BashError::EnvRefused { .. } => "INVALID_ENV",
            BashError::NotInteractive { .. } => "NOT_INTERACTIVE",
            BashError::InputClosed { .. } => "INPUT_CLOSED",
            BashError::TooManyInteractive { .. } => "TOO_MANY_INTERACTIVE",
            BashError::Unsupported { .. } => "UNSUPPORTED",
            BashError::Remote { code, .. } => match code.as_str() {
                "COMMAND_TOO_LONG" => "COMMAND_TOO_LONG",
                "INVALID_COMMAND" => "INVALID_COMMAND",
                "INVALID_WORKDIR" => "INVALID_WORKDIR",
                "SPAWN_FAILED" => "SPAWN_FAILED",
                "NOT_OWNER" => "NOT_OWNER",
                "ESCALATION" => "ESCALATION",
                "INVALID_ARGUMENTS" => "INVALID_ARGUMENTS",
                "INVALID_ENV" => "INVALID_ENV",
                "INVALID_POSITION" => "INVALID_POSITION",
                "SHUT_DOWN" => "SHUT_DOWN",
                "TOO_MANY_COMMANDS" => "TOO_MANY_COMMANDS",
                "SANDBOX_UNAVAILABLE" => "SANDBOX_UNAVAILABLE",
                "NOT_INTERACTIVE" => "NOT_INTERACTIVE",
                "INPUT_CLOSED" => "INPUT_CLOSED",
                "TOO_MANY_INTERACTIVE" => "TOO_MANY_INTERACTIVE",
                _ => "REMOTE",
            },
        }
    }
}
