//! What a confining executor learns when a background task it started
//! ends, and how it amends the settled state.

use dsh_bash::TaskState;

/// How a background task ended, as the launcher saw it: what a
/// [`SettleStamp`] decides from.
#[derive(Clone, Copy, Debug)]
pub struct Settled<'a> {
    /// The collected stderr tail.
    pub stderr: &'a str,
    /// False if and only if the process could not be started at all (the
    /// launcher's exec report said so); nothing ran.
    pub spawned: bool,
}

/// Amends the settled state of a background task (sandbox facts) before
/// listeners and waiters see it.
pub type SettleStamp = Box<dyn FnOnce(&mut TaskState, Settled<'_>) + Send>;
