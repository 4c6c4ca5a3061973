//! Idle time that a stall does not count.
//!
//! A session expires after `--idle-timeout` without a request and without
//! a call in flight. Wall time is the wrong measure while the server cannot
//! run (stopped by SIGSTOP, starved, its machine suspended): its clients'
//! requests wait in the socket, unread, and a timer that fires on resume
//! would end sessions whose clients were busy. So idle time is counted on
//! an [`AwakeClock`] that the reaper advances once a tick by at most two
//! ticks' worth: a stall of any length counts as two ticks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the reaper advances the clock and looks for idle sessions.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// Milliseconds the server has been able to run, as the reaper saw them.
#[derive(Debug, Default)]
pub(crate) struct AwakeClock {
    millis: AtomicU64,
}

impl AwakeClock {
    /// The clock's reading.
    pub(crate) fn now(&self) -> u64 {
        self.millis.load(Ordering::Acquire)
    }

    /// Adds `ran`, the time since the reaper's last advance, at most two
    /// [`TICK`]s of it (the rest was a stall).
    pub(crate) fn advance(&self, ran: Duration) {
        let ran = u64::try_from(ran.min(2 * TICK).as_millis()).unwrap_or(u64::MAX);
        self.millis.fetch_add(ran, Ordering::AcqRel);
    }
}

/// When a session was last asked anything, on the [`AwakeClock`], and how
/// many of its requests are still being answered.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    last: u64,
    in_flight: usize,
}

/// One token's 2025-era sessions, by id.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    seen: Mutex<HashMap<String, Seen>>,
}

impl Activity {
    fn update(&self, id: &str, change: impl FnOnce(&mut Seen)) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        change(seen.entry(id.to_owned()).or_default());
    }

    /// Session `id` was asked something at `now`.
    pub(crate) fn touch(&self, id: &str, now: u64) {
        self.update(id, |seen| seen.last = seen.last.max(now));
    }

    /// A request of session `id` is being answered until the guard drops.
    pub(crate) fn enter(self: &Arc<Self>, id: &str, clock: &Arc<AwakeClock>) -> Busy {
        let now = clock.now();
        self.update(id, |seen| {
            seen.last = seen.last.max(now);
            seen.in_flight += 1;
        });
        Busy {
            activity: Arc::clone(self),
            id: id.to_owned(),
            clock: Arc::clone(clock),
        }
    }

    /// Session `id` is closed.
    pub(crate) fn forget(&self, id: &str) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// The sessions with nothing in flight and no request for longer than
    /// `idle` milliseconds at `now`, forgotten.
    pub(crate) fn expired(&self, now: u64, idle: u64) -> Vec<String> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let gone: Vec<String> = seen
            .iter()
            .filter(|(_, s)| s.in_flight == 0 && now.saturating_sub(s.last) > idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            seen.remove(id);
        }
        gone
    }
}

/// A request in flight; its end counts as activity.
#[derive(Debug)]
pub(crate) struct Busy {
    activity: Arc<Activity>,
    id: String,
    clock: Arc<AwakeClock>,
}

impl Drop for Busy {
    /// Counts the end as activity of a session still known (one closed or
    /// expired meanwhile is not brought back).
    fn drop(&mut self) {
        let now = self.clock.now();
        let mut seen = self
            .activity
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(seen) = seen.get_mut(&self.id) {
            seen.in_flight = seen.in_flight.saturating_sub(1);
            seen.last = seen.last.max(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_counts_as_two_ticks() {
        let clock = AwakeClock::default();
        clock.advance(Duration::from_secs(60));
        assert_eq!(clock.now(), 2_000);
    }

    #[test]
    fn only_sessions_idle_with_nothing_in_flight_expire() {
        let (activity, clock) = (
            Arc::new(Activity::default()),
            Arc::new(AwakeClock::default()),
        );
        let idle = 10_000;
        activity.touch("quiet", 0);
        let busy = activity.enter("busy", &clock);
        assert!(
            activity.expired(10_000, idle).is_empty(),
            "not past idle yet"
        );
        assert_eq!(activity.expired(10_001, idle), ["quiet"]);
        assert!(
            activity.expired(99_000, idle).is_empty(),
            "a call in flight"
        );
        clock.millis.store(5_000, Ordering::Release);
        drop(busy);
        assert!(
            activity.expired(15_000, idle).is_empty(),
            "its end was activity"
        );
        assert_eq!(activity.expired(15_001, idle), ["busy"]);
    }
}
