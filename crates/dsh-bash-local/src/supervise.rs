//! Supervising one command: spawn, read both streams, wait for the exit,
//! the timeout, a cancellation or a kill, stop the whole tree, and return
//! promptly even when a leftover holds the pipes open.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use dsh_bash::Containment;

use crate::cgroup::CommandCgroup;
use crate::drain::Drain;
use crate::output::Stream;
use crate::spawn::{self, Launch};
use crate::spill::SpillDir;
use crate::sys::{self, ExitStatus};
use crate::tree::{self, Stopping, Tree};

/// Why we stopped a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopCause {
    /// Its timeout elapsed.
    Timeout,
    /// The caller's cancellation fired (or the caller went away).
    Cancelled,
    /// Somebody killed the task.
    Killed,
    /// The executor shut down.
    Shutdown,
}

/// A one-shot stop request; the first cause wins.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    token: CancellationToken,
    cause: OnceLock<StopCause>,
}

impl Stop {
    /// Requests a stop; true if and only if this was the first request.
    pub(crate) fn request(&self, cause: StopCause) -> bool {
        let first = self.cause.set(cause).is_ok();
        self.token.cancel();
        first
    }

    pub(crate) fn cause(&self) -> Option<StopCause> {
        self.cause.get().copied()
    }
}

/// A command's streams: the bytes for its stdin, where its output goes.
pub(crate) struct Capture<'a> {
    pub(crate) stdin: Option<Vec<u8>>,
    pub(crate) stdout: Arc<Stream>,
    pub(crate) stderr: Arc<Stream>,
    pub(crate) spill: &'a Arc<SpillDir>,
    pub(crate) max_spill_bytes: u64,
    /// Whose spill budget the files count against.
    pub(crate) owner: Option<dsh_bash::OwnerToken>,
}

/// What may end a command before it exits: its timeout, its caller's
/// cancellation, a kill, the executor's shutdown.
pub(crate) struct Deadlines<'a> {
    pub(crate) timeout: Option<Duration>,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) stop: &'a Stop,
    pub(crate) shutdown: &'a CancellationToken,
}

/// How long stopping and draining wait, and where the stops that outlive
/// a result run.
pub(crate) struct Patience<'a> {
    /// SIGTERM to SIGKILL.
    pub(crate) grace: Duration,
    /// The grace when the executor shuts down (at most `grace`): a server
    /// told to stop must be gone within a second.
    pub(crate) shutdown_grace: Duration,
    /// How long a held pipe may delay a result after the command ended.
    pub(crate) linger: Duration,
    pub(crate) tracker: &'a tokio_util::task::TaskTracker,
}

/// Completes when a stop has waited long enough: `grace`, cut short to
/// `short` once `shutdown` fires (a host told to stop does not wait out a
/// long grace).
async fn grace_over(grace: Duration, short: Duration, shutdown: CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(grace) => {}
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(short.min(grace)).await;
        } => {}
    }
}

impl Patience<'_> {
    /// The grace of a stop for `cause` (see [`grace_over`]); `shutdown`
    /// cuts it short.
    fn grace_over(
        &self,
        cause: StopCause,
        shutdown: &CancellationToken,
    ) -> impl std::future::Future<Output = ()> + 'static {
        let grace = if cause == StopCause::Shutdown {
            self.grace.min(self.shutdown_grace)
        } else {
            self.grace
        };
        grace_over(grace, self.shutdown_grace, shutdown.clone())
    }
}

/// How a supervised command ended.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) status: ExitStatus,
    pub(crate) cause: Option<StopCause>,
    pub(crate) leftovers: usize,
    pub(crate) containment: Containment,
}

/// Kills a process group if dropped armed: what a run future dropped while
/// it waited out the settle window leaves behind.
struct KillGroupOnDrop {
    pgid: libc::pid_t,
    armed: bool,
}

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if self.armed {
            sys::signal_group(self.pgid, libc::SIGKILL);
        }
    }
}

/// How long processes caught mid-exit get to finish before what remains
/// counts as leftovers: a sandbox runner's own pid-namespace init exits
/// just after the runner has reported the command's status, and must not
/// be reported (and stopped) as something the command left running.
const SETTLE: Duration = Duration::from_millis(50);

/// True if `still_there` still holds after the [`SETTLE`] window (polled
/// every millisecond; false at once when it no longer holds).
async fn lingering(mut still_there: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while still_there() {
        if tokio::time::Instant::now() >= deadline {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

async fn wait_exit(pidfd: &AsyncFd<OwnedFd>) -> io::Result<ExitStatus> {
    loop {
        let mut ready = pidfd.readable().await?;
        match sys::try_reap(pidfd.get_ref().as_fd())? {
            Some(status) => return Ok(status),
            None => ready.clear_ready(),
        }
    }
}

async fn sleep_or_never(timeout: Option<Duration>) {
    match timeout {
        Some(timeout) => tokio::time::sleep(timeout).await,
        None => std::future::pending().await,
    }
}

async fn cancelled_or_never(cancel: Option<&CancellationToken>) {
    match cancel {
        Some(cancel) => cancel.cancelled().await,
        None => std::future::pending().await,
    }
}

async fn feed_stdin(fd: OwnedFd, bytes: Vec<u8>) {
    let Ok(mut sender) = pipe::Sender::from_owned_fd(fd) else {
        return;
    };
    // A child that exits without reading gives EPIPE: not our failure.
    let _ = sender.write_all(&bytes).await;
}

/// Kills and reaps the command if the supervisor is dropped before the
/// command was reaped (the runtime shut down, a task was aborted).
struct KillOnDrop<'a> {
    pid: libc::pid_t,
    pidfd: &'a OwnedFd,
    cgroup: Option<&'a CommandCgroup>,
    armed: bool,
}

impl Drop for KillOnDrop<'_> {
    /// Never blocks the dropping (runtime) thread: under a cgroup the kill
    /// is one immediate write; the `/proc` walk of the process-tree
    /// mechanism and the reaping are handed to a thread that may block, as
    /// tokio's orphan queue does for dropped children.
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(cgroup) = self.cgroup {
            // One write kills everything inside; the cgroup itself is
            // removed when its owner drops it.
            cgroup.kill();
        }
        // Under the process-tree walk the root must stay alive (it is the
        // subreaper) until the thread below has frozen the tree.
        let Ok(pidfd) = self.pidfd.try_clone() else {
            tracing::warn!(
                pid = self.pid,
                "cannot hand a dropped command to the reaper; its zombie stays until exit"
            );
            return;
        };
        let (pid, walk) = (self.pid, self.cgroup.is_none());
        let reaper = std::thread::Builder::new()
            .name("dsh-bash-reaper".into())
            .spawn(move || {
                if walk {
                    tree::kill_now(pid, &pidfd);
                    spawn::release(pid);
                }
                // SIGKILL is immediate; the wait only collects the zombie.
                sys::reap_blocking(pidfd.as_fd());
                crate::adopt::unregister(pid);
            });
        if let Err(err) = reaper {
            tracing::warn!(%err, pid = self.pid, "cannot start a reaper thread; the dropped command was SIGKILLed but its descendants may linger");
        }
    }
}

/// Stops a cgroup-contained command: SIGTERM to everything inside, up to
/// the grace for the shell to exit and the cgroup to empty, then
/// `cgroup.kill`. Returns the shell's status.
async fn stop_cgroup(
    cgroup: &CommandCgroup,
    pidfd: &AsyncFd<OwnedFd>,
    grace_over: impl std::future::Future<Output = ()>,
) -> io::Result<ExitStatus> {
    cgroup.signal_all(libc::SIGTERM);
    cgroup.signal_all(libc::SIGCONT);
    tokio::pin!(grace_over);
    let mut status = None;
    loop {
        match status {
            None => tokio::select! {
                exited = wait_exit(pidfd) => status = Some(exited),
                () = &mut grace_over => break,
            },
            Some(exited) => tokio::select! {
                _ = cgroup.emptied(Duration::MAX) => return exited,
                () = &mut grace_over => {
                    status = Some(exited);
                    break;
                }
            },
        }
    }
    // Whatever is left, including what was forked during the grace: one
    // atomic kill.
    cgroup.kill();
    let status = match status {
        Some(exited) => exited,
        None => wait_exit(pidfd).await,
    };
    if !cgroup.emptied(Duration::from_secs(10)).await {
        tracing::warn!("processes survived cgroup.kill for 10 s");
    }
    status
}

/// Runs `launch` to its end: its streams through `capture`, ended early by
/// `ends`, stopped with `patience`; `held` is dropped once the whole tree
/// is gone (after this returns when leftovers are still being stopped).
/// `Err` only when it could not be spawned or supervised.
pub(crate) async fn supervise(
    launch: Launch,
    capture: Capture<'_>,
    ends: Deadlines<'_>,
    patience: Patience<'_>,
    mut held: Vec<Arc<dyn dsh_sandbox::Held>>,
) -> io::Result<Ended> {
    let spawned = spawn::spawn(launch).await?;
    let pid = spawned.pid;
    let linger = CancellationToken::new();
    let drain = |stream: &Arc<Stream>, label| Drain {
        stream: Arc::clone(stream),
        spill: Arc::clone(capture.spill),
        label,
        cap: capture.max_spill_bytes,
        owner: capture.owner.clone(),
        counted: std::sync::atomic::AtomicU64::new(0),
        linger_over: linger.clone(),
    };
    let stdout = pipe::Receiver::from_owned_fd(spawned.pipes.stdout)?;
    let stderr = pipe::Receiver::from_owned_fd(spawned.pipes.stderr)?;
    let readers = [
        tokio::spawn(drain(&capture.stdout, "stdout").run(stdout)),
        tokio::spawn(drain(&capture.stderr, "stderr").run(stderr)),
    ];
    let writer = spawned
        .pipes
        .stdin
        .map(|fd| tokio::spawn(feed_stdin(fd, capture.stdin.clone().unwrap_or_default())));
    let pidfd = sys::readable_fd(spawned.pidfd)?;
    let cgroup = spawned.cgroup;
    let containment = if cgroup.is_some() {
        Containment::Cgroup
    } else {
        Containment::ProcessTree
    };
    let mut guard = KillOnDrop {
        pid,
        pidfd: pidfd.get_ref(),
        cgroup: cgroup.as_ref(),
        armed: true,
    };

    let exited = tokio::select! {
        biased;
        status = wait_exit(&pidfd) => Ok(status),
        // Its exit and its deadline both due (the host could not run in
        // between: stopped, starved): it exited in time, not timed out.
        () = sleep_or_never(ends.timeout) => match sys::try_reap(pidfd.get_ref().as_fd()) {
            Ok(Some(status)) => Ok(Ok(status)),
            _ => Err(StopCause::Timeout),
        },
        () = cancelled_or_never(ends.cancel.as_ref()) => Err(StopCause::Cancelled),
        () = ends.stop.token.cancelled() => Err(ends.stop.cause().unwrap_or(StopCause::Killed)),
        () = ends.shutdown.cancelled() => Err(StopCause::Shutdown),
    };
    let ended = match exited {
        Ok(status) if cgroup.is_some() => {
            let status = status?;
            guard.armed = false;
            drop(guard);
            crate::adopt::unregister(pid);
            // One rule for leftovers: everything still in the command's
            // cgroup (`server &`, a `setsid` daemon, a double fork) is
            // stopped and counted; a process meant to outlive the command
            // belongs in a background task.
            let strays = crate::cgroup::CgroupHost::get().map_or(0, |host| host.stop_strays());
            let populated = match &cgroup {
                Some(cgroup) => cgroup.lingers(SETTLE).await,
                None => false,
            };
            let leftovers = strays
                + match cgroup {
                    Some(cgroup) if populated => {
                        let count = cgroup.pids().len();
                        let grace = patience.grace_over(StopCause::Killed, ends.shutdown);
                        let held = std::mem::take(&mut held);
                        patience.tracker.spawn(async move {
                            cgroup.stop(grace).await;
                            drop(held);
                        });
                        count
                    }
                    Some(cgroup) => {
                        cgroup.remove();
                        0
                    }
                    None => 0,
                };
            Ended {
                status,
                cause: None,
                leftovers,
                containment,
            }
        }
        Ok(status) => {
            let status = status?;
            guard.armed = false;
            // The shell exited on its own. Leftovers still in its process
            // group (a `server &`) are stopped, as a terminal hang-up would;
            // with adoption on, so are the orphans it left (a `setsid`
            // daemon), now the host's children.
            crate::adopt::unregister(pid);
            // Dropped during the settle window: the group still goes (its
            // number cannot be reused while it has members).
            let mut settling = KillGroupOnDrop {
                pgid: pid,
                armed: true,
            };
            let group = lingering(|| sys::group_alive(pid)).await;
            settling.armed = false;
            let orphans = crate::adopt::enabled() && !crate::adopt::live_orphans().is_empty();
            let leftovers = if group || orphans {
                // The shell is reaped: its pid (and, once empty, its group
                // number) may be reused, so neither is matched unless the
                // group still has members.
                let stopping = Stopping::freeze(
                    Tree {
                        pgid: pid,
                        from_root: false,
                        group,
                    },
                    None,
                )
                .await;
                let count = stopping.member_count();
                let grace = patience.grace_over(StopCause::Killed, ends.shutdown);
                let held = std::mem::take(&mut held);
                patience.tracker.spawn(async move {
                    stopping.finish(grace).await;
                    spawn::release(pid);
                    drop(held);
                });
                count
            } else {
                spawn::release(pid);
                0
            };
            Ended {
                status,
                cause: None,
                leftovers,
                containment,
            }
        }
        Err(cause) if cgroup.is_some() => {
            ends.stop.request(cause);
            let cause = ends.stop.cause().unwrap_or(cause);
            let status = match cgroup.as_ref() {
                Some(cgroup) => {
                    stop_cgroup(cgroup, &pidfd, patience.grace_over(cause, ends.shutdown)).await
                }
                None => wait_exit(&pidfd).await,
            };
            guard.armed = status.is_err();
            drop(guard);
            if status.is_ok() {
                // Reaped here; otherwise the reaper thread unregisters it.
                crate::adopt::unregister(pid);
            }
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            if let Some(host) = crate::cgroup::CgroupHost::get() {
                host.stop_strays();
            }
            Ended {
                status: status?,
                cause: Some(cause),
                leftovers: 0,
                containment,
            }
        }
        Err(cause) => {
            ends.stop.request(cause);
            let cause = ends.stop.cause().unwrap_or(cause);
            let root = pidfd.get_ref().try_clone()?;
            let stopping = Stopping::freeze(
                Tree {
                    pgid: pid,
                    from_root: true,
                    group: true,
                },
                Some(root),
            )
            .await;
            let (status, ()) = tokio::join!(
                wait_exit(&pidfd),
                stopping.finish(patience.grace_over(cause, ends.shutdown))
            );
            guard.armed = status.is_err();
            if status.is_ok() {
                crate::adopt::unregister(pid);
            }
            spawn::release(pid);
            Ended {
                status: status?,
                cause: Some(cause),
                leftovers: 0,
                containment,
            }
        }
    };

    // Everything the command wrote before it ended is in the pipes; a
    // leftover or daemon may hold them open, so EOF gets a bounded wait.
    let [out_reader, err_reader] = readers;
    let both = async {
        let _ = out_reader.await;
        let _ = err_reader.await;
    };
    tokio::pin!(both);
    if tokio::time::timeout(patience.linger, &mut both)
        .await
        .is_err()
    {
        linger.cancel();
        both.await;
    }
    if let Some(writer) = writer {
        writer.abort();
    }
    // No leftover is being stopped: the tree is gone now.
    drop(held);
    Ok(ended)
}
