use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::{BashLimits, BashSandboxInfo, BashTaskId};

/// Where a background task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Still running.
    Running,
    /// Ended on its own (normal exit, or a signal nobody on our side sent).
    Completed,
    /// Ended because we killed it (kill, cancellation, shutdown).
    Killed,
    /// Never ran: its process could not be started (out of descriptors,
    /// no shell, a missing working directory). Its stderr says why.
    #[serde(rename = "failed_to_start")]
    FailedToStart,
}

/// The mutable part of a background task, as published by its executor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    /// Running, completed or killed.
    pub status: TaskStatus,
    /// The exit code, once settled by a normal exit.
    pub exit_code: Option<i32>,
    /// The name of the signal that ended the shell, if one did.
    pub signal: Option<String>,
    /// Sandbox facts, stamped by a sandboxing executor once settled and
    /// before anybody sees the settled state.
    pub sandbox: Option<BashSandboxInfo>,
    /// The resource limits it ran under and, once settled, whether it hit
    /// one.
    #[serde(default)]
    pub limits: Option<BashLimits>,
    /// Once settled, what changed in the workspace while it ran (where
    /// the executor watches one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<crate::WorkspaceChanges>,
}

impl TaskState {
    /// The state of a task that has just started.
    pub fn running() -> Self {
        TaskState {
            status: TaskStatus::Running,
            exit_code: None,
            signal: None,
            sandbox: None,
            limits: None,
            changed: None,
        }
    }

    /// True if and only if the task has ended.
    pub fn is_settled(&self) -> bool {
        self.status != TaskStatus::Running
    }
}

/// A snapshot of a background task plus a way to await its completion.
#[derive(Clone, Debug)]
pub struct BashTask {
    /// The task id.
    pub id: BashTaskId,
    /// Running, completed or killed (as of this snapshot).
    pub status: TaskStatus,
    /// The exit code, once settled by a normal exit.
    pub exit_code: Option<i32>,
    /// The name of the signal that ended the shell, if one did.
    pub signal: Option<String>,
    /// Sandbox facts, stamped once settled (sandboxing executors only).
    pub sandbox: Option<BashSandboxInfo>,
    /// The resource limits it ran under; once settled, whether it hit one.
    pub limits: Option<BashLimits>,
    /// Once settled, what changed in the workspace while it ran.
    pub changed: Option<crate::WorkspaceChanges>,
    updates: watch::Receiver<TaskState>,
}

impl BashTask {
    fn from_state(id: BashTaskId, state: TaskState, updates: watch::Receiver<TaskState>) -> Self {
        BashTask {
            id,
            status: state.status,
            exit_code: state.exit_code,
            signal: state.signal,
            sandbox: state.sandbox,
            limits: state.limits,
            changed: state.changed,
            updates,
        }
    }

    /// This snapshot's state.
    pub fn state(&self) -> TaskState {
        TaskState {
            status: self.status,
            exit_code: self.exit_code,
            signal: self.signal.clone(),
            sandbox: self.sandbox.clone(),
            limits: self.limits.clone(),
            changed: self.changed.clone(),
        }
    }

    /// A fresh snapshot of the same task.
    pub fn refresh(&self) -> BashTask {
        let state = self.updates.borrow().clone();
        BashTask::from_state(self.id.clone(), state, self.updates.clone())
    }

    /// Waits until the task has settled and returns the settled snapshot.
    ///
    /// Never fails: if the executor vanished without settling the task, the
    /// last published state is returned with status `killed`.
    pub async fn settled(&self) -> BashTask {
        let mut updates = self.updates.clone();
        let settled = updates
            .wait_for(TaskState::is_settled)
            .await
            .map(|state| state.clone());
        let state = settled.unwrap_or_else(|_| {
            let mut state = updates.borrow().clone();
            if !state.is_settled() {
                state.status = TaskStatus::Killed;
            }
            state
        });
        BashTask::from_state(self.id.clone(), state, self.updates.clone())
    }
}

/// The executor's side of a task: publishes its state to every snapshot.
#[derive(Debug)]
pub struct TaskPublisher {
    id: BashTaskId,
    state: watch::Sender<TaskState>,
}

impl TaskPublisher {
    /// Publishes a new state to every snapshot and waiter.
    pub fn publish(&self, state: TaskState) {
        self.state.send_replace(state);
    }

    /// The task's id.
    pub fn id(&self) -> &BashTaskId {
        &self.id
    }

    /// The current state.
    pub fn state(&self) -> TaskState {
        self.state.borrow().clone()
    }

    /// A snapshot of the task as it is now.
    pub fn snapshot(&self) -> BashTask {
        BashTask::from_state(self.id.clone(), self.state(), self.state.subscribe())
    }
}

/// Creates a running task: the publisher stays with the executor, the
/// snapshot goes to the caller.
pub fn task_channel(id: BashTaskId) -> (TaskPublisher, BashTask) {
    let (state, updates) = watch::channel(TaskState::running());
    let task = BashTask::from_state(id.clone(), TaskState::running(), updates);
    (TaskPublisher { id, state }, task)
}

/// The text of a background read: stdout, then (if any) a line
/// `[stderr]` and stderr.
///
/// ```
/// assert_eq!(dsh_bash::join_streams("out", "err"), "out\n[stderr]\nerr");
/// assert_eq!(dsh_bash::join_streams("out\n", ""), "out\n");
/// ```
pub fn join_streams(stdout: &str, stderr: &str) -> String {
    let mut text = stdout.to_owned();
    if !stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(stderr);
    }
    text
}

/// A position in a background task's output: how many bytes of each
/// stream came before it. Written `STDOUT:STDERR` (`812:0`), which is
/// how a model passes it back as `since`.
///
/// ```
/// use dsh_bash::OutputCursor;
///
/// let at: OutputCursor = "812:0".parse().unwrap();
/// assert_eq!(at, OutputCursor { stdout: 812, stderr: 0 });
/// assert_eq!(at.to_string(), "812:0");
/// assert!("812".parse::<OutputCursor>().is_err());
/// assert!("+1:+0".parse::<OutputCursor>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutputCursor {
    /// Bytes of stdout before the position.
    pub stdout: u64,
    /// Bytes of stderr before the position.
    pub stderr: u64,
}

impl OutputCursor {
    /// True if neither stream of `self` is past `end`'s.
    pub fn within(self, end: OutputCursor) -> bool {
        self.stdout <= end.stdout && self.stderr <= end.stderr
    }
}

impl std::fmt::Display for OutputCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.stdout, self.stderr)
    }
}

impl std::str::FromStr for OutputCursor {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let wrong = || {
            format!("invalid position {text:?}: expected STDOUT:STDERR byte counts as a read's [position: …] shows them (\"812:0\")")
        };
        let (stdout, stderr) = text.split_once(':').ok_or_else(wrong)?;
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        if !digits(stdout) || !digits(stderr) {
            return Err(wrong());
        }
        Ok(OutputCursor {
            stdout: stdout.parse().map_err(|_| wrong())?,
            stderr: stderr.parse().map_err(|_| wrong())?,
        })
    }
}

/// The output a background task produced from a position on: since the
/// previous read, or since the position the caller asked for.
#[derive(Clone, Debug)]
pub struct BashTaskRead {
    /// The task as of this read.
    pub task: BashTask,
    /// New stdout, then (if any) a line `[stderr]` and the new stderr
    /// ([`join_streams`] of the two below).
    pub delta: String,
    /// The new stdout alone.
    pub stdout: String,
    /// The new stderr alone.
    pub stderr: String,
    /// True if and only if some of the output asked for had already slid
    /// out of memory (`from` is past `asked`).
    pub lossy: bool,
    /// The position the read was asked to start from.
    pub asked: OutputCursor,
    /// Where the text starts: `asked`, or the first byte still held when
    /// `asked` had slid out of memory.
    pub from: OutputCursor,
    /// Where the text ends: the position the next read starts from by
    /// default, and the one to ask for again (`since`) should this read's
    /// answer be lost.
    pub to: OutputCursor,
    /// The complete stdout, once it spilled to a file.
    pub stdout_spill_path: Option<PathBuf>,
    /// The complete stderr, once it spilled to a file.
    pub stderr_spill_path: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_sections() {
        assert_eq!(join_streams("out", "err"), "out\n[stderr]\nerr");
        assert_eq!(join_streams("out\n", "err"), "out\n[stderr]\nerr");
        assert_eq!(join_streams("", "err"), "[stderr]\nerr");
        assert_eq!(join_streams("out", ""), "out");
        assert_eq!(join_streams("", ""), "");
    }

    #[tokio::test]
    async fn settled_waits_for_the_publisher() {
        let (publisher, task) = task_channel(BashTaskId::new("bash-1"));
        assert_eq!(task.status, TaskStatus::Running);
        let waiter = tokio::spawn({
            let task = task.clone();
            async move { task.settled().await }
        });
        publisher.publish(TaskState {
            status: TaskStatus::Completed,
            exit_code: Some(3),
            signal: None,
            sandbox: None,
            limits: None,
            changed: None,
        });
        let settled = waiter.await.unwrap();
        assert_eq!(settled.status, TaskStatus::Completed);
        assert_eq!(settled.exit_code, Some(3));
        assert_eq!(task.refresh().exit_code, Some(3));
    }

    #[tokio::test]
    async fn settled_never_fails_when_the_executor_vanishes() {
        let (publisher, task) = task_channel(BashTaskId::new("bash-9"));
        drop(publisher);
        let settled = task.settled().await;
        assert_eq!(settled.status, TaskStatus::Killed);
    }
}
