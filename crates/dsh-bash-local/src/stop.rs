//! What may stop a command before it exits, and why: a [`Stop`] whose
//! [`StopCause`] only rises, and the [`Deadlines`] a supervisor watches.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Why we stopped a command. Order matters: a later cause outranks an
/// earlier one (a kill outranks the caller's cancellation, shutdown
/// outranks everything), and a stop's cause only ever rises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum StopCause {
    /// Its timeout elapsed. (The discriminants are the ranks [`Stop`]
    /// keeps; 0 is "none yet".)
    Timeout = 1,
    /// The caller's cancellation fired (or the caller went away).
    Cancelled,
    /// Somebody killed the task.
    Killed,
    /// The executor shut down.
    Shutdown,
}

impl StopCause {
    const ALL: [StopCause; 4] = [
        StopCause::Timeout,
        StopCause::Cancelled,
        StopCause::Killed,
        StopCause::Shutdown,
    ];
}

/// A stop request whose cause only rises ([`StopCause`]'s order).
#[derive(Debug, Default)]
pub(crate) struct Stop {
    token: CancellationToken,
    /// 0: none yet; else the cause as its discriminant.
    cause: std::sync::atomic::AtomicU8,
}

impl Stop {
    /// Requests a stop for `cause`; true if and only if this raised the
    /// cause (the first request, or one that outranks it).
    pub(crate) fn request(&self, cause: StopCause) -> bool {
        let rank = cause as u8;
        let before = self
            .cause
            .fetch_max(rank, std::sync::atomic::Ordering::AcqRel);
        self.token.cancel();
        before < rank
    }

    /// Completes once a stop was requested.
    pub(crate) fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }

    /// The highest cause requested so far.
    pub(crate) fn cause(&self) -> Option<StopCause> {
        let rank = self.cause.load(std::sync::atomic::Ordering::Acquire);
        StopCause::ALL.into_iter().find(|cause| *cause as u8 == rank)
    }
}

/// What may end a command before it exits: its timeout, its caller's
/// cancellation, a kill, the executor's shutdown.
pub(crate) struct Deadlines<'a> {
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) stop: &'a Stop,
    pub(crate) shutdown: &'a CancellationToken,
}

#[cfg(test)]
mod tests {
    use super::{Stop, StopCause};

    /// The cause only rises, whatever the order of the requests; the token
    /// fires at the first.
    #[test]
    fn a_stops_cause_only_rises() {
        let stop = Stop::default();
        assert_eq!(stop.cause(), None);
        assert!(stop.request(StopCause::Timeout));
        assert!(stop.token.is_cancelled());
        assert!(stop.request(StopCause::Killed));
        assert!(!stop.request(StopCause::Cancelled));
        assert!(!stop.request(StopCause::Killed));
        assert_eq!(stop.cause(), Some(StopCause::Killed));
        assert!(stop.request(StopCause::Shutdown));
        assert!(!stop.request(StopCause::Timeout));
        assert_eq!(stop.cause(), Some(StopCause::Shutdown));
        assert!(StopCause::Timeout < StopCause::Cancelled && StopCause::Killed < StopCause::Shutdown);
    }
}
