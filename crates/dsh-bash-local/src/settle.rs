//! What a confining executor learns when a background task it started
//! ends, and how it amends the settled state.

use dsh_bash::{BoxFuture, TaskState};

/// How a background task ended, as the launcher saw it: what a
/// [`SettleStamp`] decides from.
#[derive(Clone, Debug)]
pub struct Settled {
    /// The collected stderr tail.
    pub stderr: String,
    /// False if and only if the process could not be started at all (the
    /// launcher's exec report said so); nothing ran.
    pub spawned: bool,
}

/// Amends the settled state of a background task (sandbox facts) before
/// listeners and waiters see it; it may wait (for the kernel's account of
/// the task's denials), and runs once the task's tree is gone.
pub type SettleStamp = Box<dyn FnOnce(TaskState, Settled) -> BoxFuture<'static, TaskState> + Send>;
