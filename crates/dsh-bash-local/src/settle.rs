//! What a confining executor learns when a background task it started
//! ends, and how it amends the settled state.

use dsh_bash::{BoxFuture, TaskState};

/// How a background task ended, as the launcher saw it: what a
/// [`SettleStamp`] decides from.
#[derive(Clone, Debug)]
pub struct Settled {
    /// The collected stderr tail.
    pub stderr: String,
    /// Why nothing ran, when the process could not be started at all;
    /// `None` when it ran.
    pub never_ran: Option<NeverRan>,
}

/// Why a task's process was never started. Only [`NeverRan::Launch`] says
/// anything about a confining runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NeverRan {
    /// Its working directory is missing or cannot be entered: the
    /// request's, not the host's.
    Workdir,
    /// The host ran out of descriptors, processes or memory: busy, not
    /// broken.
    Exhausted,
    /// The launcher (or the runner it starts) could not start it.
    Launch,
}

impl NeverRan {
    /// The kind of a spawn failure with this cause.
    pub fn of(cause: &std::io::Error) -> NeverRan {
        if is_exhaustion(cause) {
            NeverRan::Exhausted
        } else {
            NeverRan::Launch
        }
    }
}

/// True if `cause` says the host ran out of descriptors, processes or
/// memory (`EMFILE`, `ENFILE`, `EAGAIN`, `ENOMEM`).
pub fn is_exhaustion(cause: &std::io::Error) -> bool {
    // Linux's EMFILE and ENFILE, which have no stable `ErrorKind`.
    const EMFILE: i32 = 24;
    const ENFILE: i32 = 23;
    use std::io::ErrorKind;
    matches!(cause.kind(), ErrorKind::OutOfMemory | ErrorKind::WouldBlock)
        || matches!(cause.raw_os_error(), Some(EMFILE | ENFILE))
}

/// Amends the settled state of a background task (sandbox facts) before
/// listeners and waiters see it; it may wait (for the kernel's account of
/// the task's denials), and runs once the task's tree is gone.
pub type SettleStamp = Box<dyn FnOnce(TaskState, Settled) -> BoxFuture<'static, TaskState> + Send>;
