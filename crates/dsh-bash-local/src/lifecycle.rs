//! A command's life after its spawn as a state machine: a pure
//! [`step`]`(phase, event) -> (phase, actions)` over named [`Phase`]s, and
//! one driver ([`Run`]) that turns what happens to a [`Tree`] into events
//! and the machine's actions into calls on it.
//!
//! ```text
//!            shell exited                  nothing left
//! Running ─────────────────▶ Lingering ──────────────────────────▶ Settled
//!    │                           │ something left (result goes out)    ▲
//!    │ stop (cause)              ▼                                     │
//!    └──────────────────▶ Terminating ── grace over ──▶ Killing ───────┤
//!                            │  shell reaped and tree emptied          │
//!                            └─────────────────────────────────────────┘
//! ```
//!
//! The machine, not the code around it, decides when the result may go out
//! ([`Action::Report`]) and that the tree is released ([`Action::Release`]:
//! the watchdog forgets the group, the cgroup is removed, what had to
//! outlive the tree goes): every path to [`Phase::Settled`] emits it once,
//! after the shell was reaped and the tree emptied (or the kill's bound
//! passed), also for a tree that turned out to hold nothing but a zombie.
//! A stop's cause only rises ([`StopCause`]'s order). The cgroup and the
//! process-tree walk are two [`Tree`]s (`contain.rs`); the machine is
//! tested here with neither, under a paused clock.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use crate::stop::{Deadlines, StopCause};
use crate::sys::ExitStatus;

/// How long processes get to go once they were killed before the stop is
/// given up on (a process stuck in the kernel), logged.
pub(crate) const KILL_BOUND: Duration = Duration::from_secs(10);

/// What the settle window found once the shell exited on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Left {
    /// Processes left running, to count in the result.
    pub(crate) count: usize,
    /// Whether anything is left to stop and wait for: also true with no
    /// process counted (a process group kept only by a zombie), which must
    /// still be released.
    pub(crate) any: bool,
}

/// What is left once what a stop found has gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Emptied {
    /// Nothing.
    All,
    /// Something the stop had not found.
    Survivors,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The shell exited and was reaped.
    ShellExited(ExitStatus),
    /// A stop was asked for.
    Stop(StopCause),
    /// The settle window is over: what the shell left.
    Settled(Left),
    /// Nothing of the tree is left (the shell aside).
    Emptied,
    /// What the stop found has gone, yet something of the tree survives
    /// it (a process it had not seen, an orphan, a group a zombie keeps):
    /// killed at once, as the grace would end in the same kill.
    Survived,
    /// The grace of a stop is over.
    GraceOver,
    /// The kill's bound passed with processes still there.
    KillBoundOver,
}

/// What the driver does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Forget the reaped shell's pid (adoption): it may be reused now.
    Forget,
    /// Wait out the settle window, then say what the shell left.
    Settle,
    /// SIGTERM (and SIGCONT) to everything.
    Terminate,
    /// Start the grace for a stop for this cause.
    Grace(StopCause),
    /// Kill everything now and start the kill's bound.
    Kill,
    /// Release the tree: the group, the cgroup, what outlives the tree.
    Release,
    /// The result may go out.
    Report(Report),
}

/// What the result says of how the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) status: ExitStatus,
    pub(crate) cause: Option<StopCause>,
    pub(crate) leftovers: usize,
}

/// A stop under way: of the command (for a cause) or of what its shell
/// left (no cause, the result out already).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ending {
    pub(crate) cause: Option<StopCause>,
    /// The shell's status, once reaped.
    pub(crate) shell: Option<ExitStatus>,
    /// Whether the tree has emptied.
    pub(crate) emptied: bool,
}

/// Where a command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The shell runs.
    Running,
    /// The shell exited on its own; the settle window decides what
    /// lingers.
    Lingering(ExitStatus),
    /// SIGTERM went to everything; the grace runs.
    Terminating(Ending),
    /// Everything was killed; the kill's bound runs.
    Killing(Ending),
    /// Released; nothing is left to do.
    Settled,
}

/// The machine: where `phase` goes on `event`, and what to do.
pub(crate) fn step(phase: Phase, event: Event) -> (Phase, Vec<Action>) {
    match (phase, event) {
        (Phase::Running, Event::ShellExited(status)) => {
            (Phase::Lingering(status), vec![Action::Forget, Action::Settle])
        }
        (Phase::Running, Event::Stop(cause)) => {
            let ending = Ending {
                cause: Some(cause),
                shell: None,
                emptied: false,
            };
            let actions = vec![Action::Terminate, Action::Grace(cause)];
            (Phase::Terminating(ending), actions)
        }
        (Phase::Lingering(status), Event::Settled(left)) => lingered(status, left),
        (Phase::Terminating(ending), event) => ending.on(event, false),
        (Phase::Killing(ending), event) => ending.on(event, true),
        // Anything else changes nothing: a stop asked while the settle
        // window runs (the result is due), an event after the release.
        (phase, _) => (phase, Vec::new()),
    }
}

/// The settle window is over: settled if nothing lingers; else the result
/// goes out and what lingers is stopped (a kill's grace).
fn lingered(status: ExitStatus, left: Left) -> (Phase, Vec<Action>) {
    // Processes a command moved beside its cgroup were killed already:
    // counted, with nothing left to wait for.
    let report = Report {
        status,
        cause: None,
        leftovers: left.count,
    };
    if !left.any {
        return (Phase::Settled, vec![Action::Release, Action::Report(report)]);
    }
    let ending = Ending {
        cause: None,
        shell: Some(status),
        emptied: false,
    };
    // The result first: a leftover's grace does not delay it.
    let actions = vec![
        Action::Report(report),
        Action::Terminate,
        Action::Grace(StopCause::Killed),
    ];
    (Phase::Terminating(ending), actions)
}

impl Ending {
    /// An event while terminating (`killed` false) or killing.
    fn on(mut self, event: Event, killed: bool) -> (Phase, Vec<Action>) {
        let mut actions = Vec::new();
        match event {
            Event::ShellExited(status) if self.shell.is_none() => {
                self.shell = Some(status);
                actions.push(Action::Forget);
            }
            Event::Emptied => self.emptied = true,
            Event::GraceOver | Event::Survived if !killed => {
                return (Phase::Killing(self), vec![Action::Kill]);
            }
            Event::KillBoundOver if killed => {
                tracing::warn!("processes survived the kill for {KILL_BOUND:?}");
                self.emptied = true;
            }
            // Only rises; a stop of what lingers (no cause) keeps none.
            Event::Stop(cause) => self.cause = self.cause.map(|was| was.max(cause)),
            _ => {}
        }
        let (Some(status), true) = (self.shell, self.emptied) else {
            let phase = if killed {
                Phase::Killing(self)
            } else {
                Phase::Terminating(self)
            };
            return (phase, actions);
        };
        actions.push(Action::Release);
        // A stop of the command reports now; a stop of what it left (no
        // cause) was reported when the settle window closed.
        if self.cause.is_some() {
            actions.push(Action::Report(Report {
                status,
                cause: self.cause,
                leftovers: 0,
            }));
        }
        (Phase::Settled, actions)
    }
}

/// What holds a command's processes, as the machine drives it: the cgroup
/// or the process-tree walk (`contain.rs`), a fake one in the tests.
pub(crate) trait Tree {
    /// Which mechanism it is.
    fn containment(&self) -> dsh_bash::Containment;
    /// The limits it runs under and whether it hit one so far (the
    /// kernel's counters, read now).
    fn limits(&self) -> Option<dsh_bash::BashLimits>;
    /// The shell's exit, reaped.
    fn shell_exit(&self) -> impl Future<Output = io::Result<ExitStatus>> + Send;
    /// The shell's status if it has exited already (reaped then).
    fn shell_exited(&self) -> Option<ExitStatus>;
    /// Forgets the reaped shell's pid.
    fn forget(&mut self);
    /// Waits out the settle window after the shell exited on its own.
    fn settle(&mut self) -> impl Future<Output = Left> + Send;
    /// SIGTERM and SIGCONT to everything.
    fn terminate(&mut self) -> impl Future<Output = ()> + Send;
    /// Completes once what the stop found has gone: with
    /// [`Emptied::All`] when nothing of the tree is left (the shell aside),
    /// [`Emptied::Survivors`] when something it had not found survives.
    fn emptied(&self) -> impl Future<Output = Emptied> + Send;
    /// Kills everything now.
    fn kill(&mut self) -> impl Future<Output = ()> + Send;
    /// Releases the tree (see [`Action::Release`]).
    fn release(&mut self) -> impl Future<Output = ()> + Send;
}

/// A timer the driver waits on.
pub(crate) type Timer = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The grace of a stop for a cause.
pub(crate) type GraceFor = Box<dyn Fn(StopCause) -> Timer + Send + Sync>;

/// What woke the driver while a stop runs.
enum Woke {
    Shell(io::Result<ExitStatus>),
    Emptied(Emptied),
    Timer,
}

/// One command's machine and its tree, driven.
pub(crate) struct Run<T> {
    pub(crate) tree: T,
    phase: Phase,
    grace_for: GraceFor,
    /// The grace or the kill's bound, whichever the phase waits for.
    timer: Option<Timer>,
    /// The limits and whether the command hit one, read as it ended
    /// (before a stop: what the command itself hit).
    pub(crate) limits: Option<dsh_bash::BashLimits>,
}

impl<T: Tree> Run<T> {
    pub(crate) fn new(tree: T, grace_for: GraceFor) -> Run<T> {
        Run {
            tree,
            phase: Phase::Running,
            grace_for,
            timer: None,
            limits: None,
        }
    }

    /// True once released.
    pub(crate) fn settled(&self) -> bool {
        self.phase == Phase::Settled
    }

    /// Drives until the result may go out; `Err` when the shell cannot be
    /// waited for (dropping the tree then kills it).
    pub(crate) async fn until_report(&mut self, ends: &Deadlines<'_>) -> io::Result<Report> {
        loop {
            let event = match self.phase {
                Phase::Running => {
                    let event = running(&self.tree, ends).await?;
                    self.limits = self.tree.limits();
                    event
                }
                _ => self.next_event().await?,
            };
            if let Some(report) = self.apply(event).await {
                return Ok(report);
            }
        }
    }

    /// Drives on until released: what the shell left, stopped after the
    /// result went out.
    pub(crate) async fn until_settled(&mut self) {
        while !self.settled() {
            match self.next_event().await {
                Ok(event) => {
                    self.apply(event).await;
                }
                // The shell cannot be waited for: dropping the tree kills.
                Err(_) => return,
            }
        }
    }

    /// What happens next while the settle window or a stop runs.
    async fn next_event(&mut self) -> io::Result<Event> {
        let (shell_known, emptied) = match self.phase {
            Phase::Terminating(e) | Phase::Killing(e) => (e.shell.is_some(), e.emptied),
            _ => (true, true),
        };
        let tree = &self.tree;
        let timer = self.timer.as_mut();
        let woke = tokio::select! {
            biased;
            status = tree.shell_exit(), if !shell_known => Woke::Shell(status),
            left = tree.emptied(), if !emptied => Woke::Emptied(left),
            () = async {
                match timer {
                    Some(timer) => timer.await,
                    None => std::future::pending().await,
                }
            } => Woke::Timer,
        };
        Ok(match woke {
            Woke::Shell(status) => Event::ShellExited(status?),
            Woke::Emptied(Emptied::All) => Event::Emptied,
            Woke::Emptied(Emptied::Survivors) => Event::Survived,
            Woke::Timer => {
                self.timer = None;
                match self.phase {
                    Phase::Killing(_) => Event::KillBoundOver,
                    _ => Event::GraceOver,
                }
            }
        })
    }

    /// Steps the machine and does what it says (the settle window's
    /// verdict is the next event); the report, if it said to send one.
    async fn apply(&mut self, event: Event) -> Option<Report> {
        let mut next = Some(event);
        let mut report = None;
        while let Some(event) = next.take() {
            let (phase, actions) = step(self.phase, event);
            self.phase = phase;
            for action in actions {
                match action {
                    Action::Forget => self.tree.forget(),
                    Action::Settle => next = Some(Event::Settled(self.tree.settle().await)),
                    Action::Terminate => self.tree.terminate().await,
                    Action::Grace(cause) => self.timer = Some((self.grace_for)(cause)),
                    Action::Kill => {
                        self.tree.kill().await;
                        self.timer = Some(Box::pin(tokio::time::sleep(KILL_BOUND)));
                    }
                    Action::Release => self.tree.release().await,
                    Action::Report(sent) => report = Some(sent),
                }
            }
        }
        report
    }
}

/// The first of the shell's exit, its timeout, its caller's
/// cancellation, a kill and the executor's shutdown.
async fn running<T: Tree>(tree: &T, ends: &Deadlines<'_>) -> io::Result<Event> {
    let cause = tokio::select! {
        biased;
        status = tree.shell_exit() => return status.map(Event::ShellExited),
        // Its exit and its deadline both due (the host could not run
        // in between: stopped, starved): it exited in time.
        () = sleep_or_never(ends.timeout) => match tree.shell_exited() {
            Some(status) => return Ok(Event::ShellExited(status)),
            None => StopCause::Timeout,
        },
        () = cancelled_or_never(ends.cancel.as_ref()) => StopCause::Cancelled,
        () = ends.stop.cancelled() => ends.stop.cause().unwrap_or(StopCause::Killed),
        () = ends.shutdown.cancelled() => StopCause::Shutdown,
    };
    ends.stop.request(cause);
    Ok(Event::Stop(ends.stop.cause().unwrap_or(cause)))
}

async fn sleep_or_never(timeout: Option<Duration>) {
    match timeout {
        Some(timeout) => tokio::time::sleep(timeout).await,
        None => std::future::pending().await,
    }
}

async fn cancelled_or_never(cancel: Option<&tokio_util::sync::CancellationToken>) {
    match cancel {
        Some(cancel) => cancel.cancelled().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXITED: ExitStatus = ExitStatus::Exited(0);
    const KILLED: ExitStatus = ExitStatus::Signaled(libc::SIGKILL);

    fn run(events: &[Event]) -> (Phase, Vec<Action>) {
        let mut phase = Phase::Running;
        let mut all = Vec::new();
        for event in events {
            let (next, actions) = step(phase, *event);
            phase = next;
            all.extend(actions);
        }
        (phase, all)
    }

    fn report(status: ExitStatus, cause: Option<StopCause>, leftovers: usize) -> Action {
        Action::Report(Report {
            status,
            cause,
            leftovers,
        })
    }

    #[test]
    fn an_exit_with_nothing_left_is_released_then_reported() {
        let nothing = Left {
            count: 0,
            any: false,
        };
        let (phase, actions) = run(&[Event::ShellExited(EXITED), Event::Settled(nothing)]);
        assert_eq!(phase, Phase::Settled);
        assert_eq!(
            actions,
            [
                Action::Forget,
                Action::Settle,
                Action::Release,
                report(EXITED, None, 0)
            ]
        );
    }

    /// Defect 2: a process group kept only by a zombie (no member counted)
    /// is still stopped and released, so the watchdog forgets its number.
    #[test]
    fn a_group_kept_by_a_zombie_is_still_stopped_and_released() {
        let zombie = Left {
            count: 0,
            any: true,
        };
        let (phase, actions) = run(&[Event::ShellExited(EXITED), Event::Settled(zombie)]);
        assert!(matches!(phase, Phase::Terminating(_)));
        assert_eq!(
            actions[2..],
            [
                report(EXITED, None, 0),
                Action::Terminate,
                Action::Grace(StopCause::Killed)
            ]
        );
        let (phase, actions) = step(phase, Event::Emptied);
        assert_eq!((phase, actions), (Phase::Settled, vec![Action::Release]));
    }

    /// Defect 7: what outlives the tree is released only once the shell is
    /// reaped and the tree emptied, whichever comes last; the kill comes
    /// only after the grace.
    #[test]
    fn a_stop_releases_only_once_the_shell_is_reaped_and_the_tree_emptied() {
        let (phase, actions) = run(&[Event::Stop(StopCause::Timeout), Event::Emptied]);
        assert!(matches!(phase, Phase::Terminating(_)));
        assert_eq!(actions, [Action::Terminate, Action::Grace(StopCause::Timeout)]);
        let (phase, actions) = step(phase, Event::GraceOver);
        assert!(matches!(phase, Phase::Killing(_)));
        assert_eq!(actions, [Action::Kill]);
        let (phase, actions) = step(phase, Event::ShellExited(KILLED));
        assert_eq!(phase, Phase::Settled);
        assert_eq!(
            actions,
            [
                Action::Forget,
                Action::Release,
                report(KILLED, Some(StopCause::Timeout), 0)
            ]
        );
    }

    #[test]
    fn a_stops_cause_only_rises_and_the_result_names_the_highest() {
        let (phase, _) = run(&[
            Event::Stop(StopCause::Timeout),
            Event::Stop(StopCause::Killed),
            Event::Stop(StopCause::Cancelled),
            Event::ShellExited(KILLED),
        ]);
        let (_, actions) = step(phase, Event::Emptied);
        assert_eq!(actions.last(), Some(&report(KILLED, Some(StopCause::Killed), 0)));
    }

    /// What the stop had not found (an orphan, a group a zombie keeps)
    /// is killed as soon as what it found has gone, not after the grace.
    #[test]
    fn survivors_are_killed_at_once() {
        let (phase, actions) = run(&[Event::Stop(StopCause::Killed), Event::Survived]);
        assert!(matches!(phase, Phase::Killing(_)));
        assert_eq!(actions.last(), Some(&Action::Kill));
        let (phase, actions) = run(&[
            Event::Stop(StopCause::Killed),
            Event::Survived,
            Event::Emptied,
            Event::ShellExited(KILLED),
        ]);
        assert_eq!(phase, Phase::Settled);
        assert_eq!(actions.iter().filter(|a| **a == Action::Kill).count(), 1);
    }

    /// The kill's bound gives up on the tree (a process stuck in the
    /// kernel), never on the shell's status.
    #[test]
    fn the_kill_bound_gives_up_on_the_tree_not_on_the_shell() {
        let (phase, actions) = run(&[
            Event::Stop(StopCause::Shutdown),
            Event::GraceOver,
            Event::KillBoundOver,
        ]);
        assert!(matches!(phase, Phase::Killing(_)));
        assert!(!actions.contains(&Action::Release));
        let (phase, actions) = step(phase, Event::ShellExited(KILLED));
        assert_eq!(phase, Phase::Settled);
        assert!(actions.contains(&Action::Release));
    }

    /// Every sequence of up to six events: the tree is released at most
    /// once, and exactly once if settled, never before the shell's exit
    /// was seen and the tree known empty (or given up on); one report at
    /// most; the kill only after SIGTERM; the shell forgotten once.
    #[test]
    fn no_sequence_of_events_skips_or_repeats_a_release() {
        let events = [
            Event::ShellExited(EXITED),
            Event::Stop(StopCause::Timeout),
            Event::Stop(StopCause::Shutdown),
            Event::Settled(Left { count: 1, any: true }),
            Event::Settled(Left { count: 0, any: false }),
            Event::Emptied,
            Event::Survived,
            Event::GraceOver,
            Event::KillBoundOver,
        ];
        let mut sequence = vec![0usize; 6];
        let total = events.len().pow(6);
        for mut n in 0..total {
            for slot in &mut sequence {
                *slot = n % events.len();
                n /= events.len();
            }
            check(&sequence.iter().map(|i| events[*i]).collect::<Vec<_>>());
        }
    }

    fn check(events: &[Event]) {
        let mut phase = Phase::Running;
        let (mut released, mut reports, mut forgets, mut terminated) = (0, 0, 0, false);
        let (mut exited, mut empty) = (false, false);
        for event in events {
            match event {
                Event::ShellExited(_) => exited = true,
                Event::Emptied | Event::KillBoundOver => empty = true,
                Event::Settled(left) if !left.any => empty = true,
                _ => {}
            }
            let (next, actions) = step(phase, *event);
            for action in &actions {
                match action {
                    Action::Release => {
                        assert!(exited && empty, "released early: {events:?}");
                        released += 1;
                    }
                    Action::Report(_) => reports += 1,
                    Action::Forget => {
                        assert!(exited, "forgot a running shell: {events:?}");
                        forgets += 1;
                    }
                    Action::Terminate => terminated = true,
                    Action::Kill => assert!(terminated, "killed without SIGTERM: {events:?}"),
                    _ => {}
                }
            }
            phase = next;
        }
        assert!(released <= 1 && reports <= 1 && forgets <= 1, "{events:?}");
        assert_eq!(phase == Phase::Settled, released == 1, "{events:?}");
    }

    mod driven {
        use super::*;
        use std::sync::{Arc, Mutex};
        use tokio::sync::watch;

        use crate::stop::Stop;

        /// A tree of no process: what the machine asked of it, in order;
        /// a shell that exits when killed (or on SIGTERM, if told to).
        struct Fake {
            calls: Arc<Mutex<Vec<&'static str>>>,
            shell: (watch::Sender<Option<ExitStatus>>, watch::Receiver<Option<ExitStatus>>),
            empty: (watch::Sender<bool>, watch::Receiver<bool>),
            exits_on_term: bool,
            left: Left,
        }

        impl Fake {
            fn new(exits_on_term: bool, left: Left) -> (Fake, Arc<Mutex<Vec<&'static str>>>) {
                let calls = Arc::new(Mutex::new(Vec::new()));
                let fake = Fake {
                    calls: Arc::clone(&calls),
                    shell: watch::channel(None),
                    empty: watch::channel(false),
                    exits_on_term,
                    left,
                };
                (fake, calls)
            }

            fn record(&self, call: &'static str) {
                self.calls.lock().unwrap().push(call);
            }

            fn end(&self, status: ExitStatus) {
                self.shell.0.send_if_modified(|shell| shell.replace(status).is_none());
                self.empty.0.send_replace(true);
            }
        }

        impl Tree for Fake {
            fn containment(&self) -> dsh_bash::Containment {
                dsh_bash::Containment::ProcessTree
            }

            fn limits(&self) -> Option<dsh_bash::BashLimits> {
                None
            }

            async fn shell_exit(&self) -> io::Result<ExitStatus> {
                let mut shell = self.shell.1.clone();
                let status = *shell.wait_for(Option::is_some).await.map_err(io::Error::other)?;
                Ok(status.unwrap_or(KILLED))
            }

            fn shell_exited(&self) -> Option<ExitStatus> {
                *self.shell.1.borrow()
            }

            fn forget(&mut self) {
                self.record("forget");
            }

            async fn settle(&mut self) -> Left {
                self.record("settle");
                self.left
            }

            async fn terminate(&mut self) {
                self.record("terminate");
                if self.exits_on_term {
                    self.end(ExitStatus::Signaled(libc::SIGTERM));
                }
            }

            async fn emptied(&self) -> Emptied {
                let _ = self.empty.1.clone().wait_for(|empty| *empty).await;
                Emptied::All
            }

            async fn kill(&mut self) {
                self.record("kill");
                self.end(KILLED);
            }

            async fn release(&mut self) {
                self.record("release");
            }
        }

        const GRACE: Duration = Duration::from_secs(5);

        fn machine(tree: Fake) -> Run<Fake> {
            Run::new(tree, Box::new(|_| Box::pin(tokio::time::sleep(GRACE))))
        }

        /// What ends a run: `timeout`, a stop, a shutdown; no caller's
        /// cancellation.
        fn ends<'a>(
            timeout: Option<Duration>,
            stop: &'a Stop,
            shutdown: &'a tokio_util::sync::CancellationToken,
        ) -> Deadlines<'a> {
            Deadlines {
                timeout,
                cancel: None,
                stop,
                shutdown,
            }
        }

        fn calls(calls: &Arc<Mutex<Vec<&'static str>>>) -> Vec<&'static str> {
            calls.lock().unwrap().clone()
        }

        #[tokio::test(start_paused = true)]
        async fn a_timeout_waits_out_the_grace_then_kills_and_releases_after_the_reap() {
            let nothing = Left { count: 0, any: false };
            let (tree, log) = Fake::new(false, nothing);
            let (stop, shutdown) = (Stop::default(), tokio_util::sync::CancellationToken::new());
            let ends = ends(Some(Duration::from_secs(1)), &stop, &shutdown);
            let began = tokio::time::Instant::now();
            let mut run = machine(tree);
            let report = run.until_report(&ends).await.unwrap();
            assert_eq!(began.elapsed(), Duration::from_secs(1) + GRACE);
            assert_eq!(report.cause, Some(StopCause::Timeout));
            assert_eq!(report.status, KILLED);
            assert!(run.settled());
            assert_eq!(calls(&log), ["terminate", "kill", "forget", "release"]);
            assert_eq!(stop.cause(), Some(StopCause::Timeout));
        }

        #[tokio::test(start_paused = true)]
        async fn a_shell_that_ends_on_sigterm_is_never_killed() {
            let nothing = Left { count: 0, any: false };
            let (tree, log) = Fake::new(true, nothing);
            let (stop, shutdown) = (Stop::default(), tokio_util::sync::CancellationToken::new());
            let ends = ends(None, &stop, &shutdown);
            stop.request(StopCause::Killed);
            let began = tokio::time::Instant::now();
            let report = machine(tree).until_report(&ends).await.unwrap();
            assert_eq!(began.elapsed(), Duration::ZERO);
            assert_eq!(report.cause, Some(StopCause::Killed));
            assert_eq!(calls(&log), ["terminate", "forget", "release"]);
        }

        /// What lingers after the shell exited: the result goes out at
        /// once, counting it; it is stopped (grace, kill) and released
        /// after.
        #[tokio::test(start_paused = true)]
        async fn the_result_goes_out_before_what_lingers_is_stopped() {
            let lingering = Left { count: 2, any: true };
            let (tree, log) = Fake::new(false, lingering);
            tree.shell.0.send_replace(Some(EXITED));
            let (stop, shutdown) = (Stop::default(), tokio_util::sync::CancellationToken::new());
            let ends = ends(Some(Duration::from_secs(60)), &stop, &shutdown);
            let began = tokio::time::Instant::now();
            let mut run = machine(tree);
            let report = run.until_report(&ends).await.unwrap();
            assert_eq!((report.status, report.leftovers, report.cause), (EXITED, 2, None));
            assert_eq!(began.elapsed(), Duration::ZERO);
            assert_eq!(calls(&log), ["forget", "settle", "terminate"]);
            run.until_settled().await;
            assert_eq!(began.elapsed(), GRACE);
            assert_eq!(calls(&log), ["forget", "settle", "terminate", "kill", "release"]);
        }
    }
}
