//! Containment, the one seam between the supervisor and how a command's
//! tree is held: a cgroup of its own (`cgroup.rs`) or the process-tree walk
//! (`tree.rs`, with `adopt.rs`). The supervisor asks four things of a
//! [`Contained`] command without knowing which it has:
//!
//! - [`Contained::exit`]: the shell's exit (its pidfd);
//! - [`Contained::stop`]: stop the whole tree for a cause (SIGTERM, the
//!   grace, then the kill) and return the shell's status;
//! - [`Contained::left`]: once the shell exited on its own, what it left
//!   running, as [`Leftovers`] to count and stop;
//! - dropping it unsettled: kill everything at once, without a grace.
//!
//! Each operation does its steps in one fixed order: disarm the drop
//! guard, unregister the shell from adoption, release its group from the
//! watchdog, remove the cgroup. Blocking cgroupfs writes (`cgroup.kill`,
//! removing a cgroup) run off the runtime threads; a drop, which cannot
//! wait, writes `cgroup.kill` in place (one write).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use dsh_bash::{BashLimits, Containment};

use crate::cgroup::{CgroupHost, CommandCgroup};
use crate::limits::CommandLimits;
use crate::offload::{self, Lane};
use crate::spawn;
use crate::sys::{self, ExitStatus};
use crate::tree::{self, Stopping, Tree};

/// How long processes caught mid-exit get to finish before what remains
/// counts as leftovers: a sandbox runner's own pid-namespace init exits
/// just after the runner has reported the command's status, and must not
/// be reported (and stopped) as something the command left running.
const SETTLE: Duration = Duration::from_millis(50);

/// A running command and what holds its tree. Dropped before it settled
/// (its supervisor dropped), it kills the whole tree.
pub(crate) struct Contained {
    /// The shell's pid, also its process group.
    pid: libc::pid_t,
    pidfd: AsyncFd<OwnedFd>,
    /// The command's cgroup; `None` under the process-tree walk (and once
    /// handed on).
    cgroup: Option<CommandCgroup>,
    kind: Containment,
    /// Its limits where no cgroup holds it (`setrlimit` only).
    rlimits: Option<CommandLimits>,
    /// Until the shell is reaped and its leftovers are handed on.
    armed: bool,
    /// Its number (`DSH_BASH_COMMAND`), for its orphans.
    command: u64,
    /// What must outlive the tree (a private TMPDIR, stand-ins): dropped
    /// only once the shell is reaped, on every path, or taken back to go
    /// with the leftovers.
    held: Vec<Arc<dyn dsh_sandbox::Held>>,
}

/// What a command left running when its shell exited on its own.
pub(crate) enum Leftovers {
    /// Nothing: the tree is gone.
    None,
    /// Processes still in the command's cgroup.
    Cgroup(CommandCgroup, usize),
    /// A frozen tree (its process group, the orphans the host adopted).
    Tree(Stopping, libc::pid_t),
    /// Processes it had moved beside its own cgroup, killed already.
    Strays(usize),
}

impl Contained {
    /// Holds a freshly spawned command; one that cannot be held (its pidfd
    /// cannot be polled) is killed.
    pub(crate) fn new(
        pid: libc::pid_t,
        pidfd: OwnedFd,
        cgroup: Option<CommandCgroup>,
        rlimits: Option<CommandLimits>,
        command: u64,
        held: Vec<Arc<dyn dsh_sandbox::Held>>,
    ) -> io::Result<Contained> {
        let kind = if cgroup.is_some() {
            Containment::Cgroup
        } else {
            Containment::ProcessTree
        };
        // A cgroup kills what it holds as it drops; the group is killed
        // here, and the shell reaped off the runtime: no zombie stays.
        let pidfd = match sys::readable_or_back(pidfd) {
            Ok(pidfd) => pidfd,
            Err((pidfd, err)) => {
                sys::signal_group(pid, libc::SIGKILL);
                let reaped = offload::submit(Lane::Stop, move || {
                    sys::reap_blocking(pidfd.as_fd());
                    spawn::release(pid);
                    drop(held);
                });
                if let Err(why) = reaped {
                    tracing::warn!(%why, pid, "no stop thread; the unheld command's zombie stays until exit");
                }
                return Err(err);
            }
        };
        Ok(Contained {
            pid,
            pidfd,
            cgroup,
            kind,
            rlimits,
            armed: true,
            command,
            held,
        })
    }

    /// Takes back what must outlive the tree, to drop once the leftovers
    /// are gone.
    pub(crate) fn take_held(&mut self) -> Vec<Arc<dyn dsh_sandbox::Held>> {
        std::mem::take(&mut self.held)
    }

    /// Which mechanism holds the tree.
    pub(crate) fn kind(&self) -> Containment {
        self.kind
    }

    /// The limits it runs under and whether it hit one so far (the
    /// kernel's counters, read now).
    pub(crate) fn limits(&self) -> Option<BashLimits> {
        match &self.cgroup {
            Some(cgroup) => cgroup.limits(),
            None => self.rlimits.as_ref().and_then(CommandLimits::facts),
        }
    }

    /// Waits for the shell's exit and reaps it.
    pub(crate) async fn exit(&self) -> io::Result<ExitStatus> {
        loop {
            let mut ready = self.pidfd.readable().await?;
            match sys::try_reap(self.pidfd.get_ref().as_fd())? {
                Some(status) => return Ok(status),
                None => ready.clear_ready(),
            }
        }
    }

    /// The shell's status if it has exited already (reaped then).
    pub(crate) fn exited(&self) -> Option<ExitStatus> {
        sys::try_reap(self.pidfd.get_ref().as_fd()).ok().flatten()
    }

    /// After the shell exited on its own and was reaped: what it left.
    /// One rule for leftovers: under a cgroup, everything still in it (`server
    /// &`, a `setsid` daemon, a double fork) and whatever moved beside it;
    /// under the walk, its process group and, with adoption on, the orphans
    /// it left the host. A process meant to outlive the command belongs in
    /// a background task.
    pub(crate) async fn left(mut self) -> Leftovers {
        self.armed = false;
        crate::adopt::unregister(self.pid);
        match self.cgroup.take() {
            Some(cgroup) => {
                let strays = stop_strays().await;
                if cgroup.lingers(SETTLE).await {
                    let count = strays + cgroup.pids().len();
                    Leftovers::Cgroup(cgroup, count)
                } else {
                    spawn::remove(cgroup);
                    match strays {
                        0 => Leftovers::None,
                        strays => Leftovers::Strays(strays),
                    }
                }
            }
            None => self.left_in_tree().await,
        }
    }

    async fn left_in_tree(&self) -> Leftovers {
        let pid = self.pid;
        // Dropped during the settle window: the group still goes (its
        // number cannot be reused while it has members).
        let mut settling = KillGroupOnDrop {
            pgid: pid,
            armed: true,
        };
        let group = lingering(|| sys::group_alive(pid)).await;
        settling.armed = false;
        let command = self.command;
        let orphans = crate::adopt::enabled()
            && offload::run(Lane::Stop, move || crate::adopt::live_orphans_of(pid, command))
                .await
                .map_or(true, |orphans| !orphans.is_empty());
        if !(group || orphans) {
            spawn::release(pid);
            return Leftovers::None;
        }
        // The shell is reaped: its pid (and, once empty, its group number)
        // may be reused, so neither is matched unless the group still has
        // members.
        let tree = Tree {
            pgid: pid,
            from_root: false,
            group,
            command,
        };
        Leftovers::Tree(Stopping::freeze(tree, None).await, pid)
    }

    /// Stops the whole tree: SIGTERM to everything, up to `grace_over`,
    /// then the kill; returns the shell's status once it is reaped.
    pub(crate) async fn stop(
        mut self,
        grace_over: impl std::future::Future<Output = ()>,
    ) -> io::Result<ExitStatus> {
        match self.cgroup.take() {
            Some(cgroup) => {
                let status = self.stop_cgroup(&cgroup, grace_over).await;
                // Not reaped: the drop hands the shell to the reaper thread.
                self.armed = status.is_err();
                if status.is_ok() {
                    crate::adopt::unregister(self.pid);
                }
                spawn::remove(cgroup);
                stop_strays().await;
                status
            }
            None => {
                let root = self.pidfd.get_ref().try_clone()?;
                let tree = Tree {
                    pgid: self.pid,
                    from_root: true,
                    group: true,
                    command: self.command,
                };
                let stopping = Stopping::freeze(tree, Some(root)).await;
                let (status, ()) = tokio::join!(self.exit(), stopping.finish(grace_over));
                self.armed = status.is_err();
                if status.is_ok() {
                    crate::adopt::unregister(self.pid);
                }
                spawn::release(self.pid);
                status
            }
        }
    }

    /// SIGTERM to everything inside, up to the grace for the shell to exit
    /// and the cgroup to empty, then `cgroup.kill`. Returns the shell's
    /// status; the emptied cgroup is handed to be removed.
    async fn stop_cgroup(
        &self,
        cgroup: &CommandCgroup,
        grace_over: impl std::future::Future<Output = ()>,
    ) -> io::Result<ExitStatus> {
        cgroup
            .signal_all_off_thread(&[libc::SIGTERM, libc::SIGCONT])
            .await;
        tokio::pin!(grace_over);
        let mut status = None;
        loop {
            match status {
                None => tokio::select! {
                    exited = self.exit() => status = Some(exited),
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
        // Whatever is left, including what was forked during the grace:
        // one atomic kill.
        cgroup.kill_off_thread().await;
        let status = match status {
            Some(exited) => exited,
            None => self.exit().await,
        };
        if !cgroup.emptied(Duration::from_secs(10)).await {
            tracing::warn!("processes survived cgroup.kill for 10 s");
        }
        status
    }
}

impl Drop for Contained {
    /// Never blocks the dropping (runtime) thread: under a cgroup the kill
    /// is one immediate write (the cgroup itself is removed when dropped);
    /// the `/proc` walk of the process-tree mechanism and the reaping are
    /// handed to a thread that may block, as tokio's orphan queue does for
    /// dropped children.
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
        // Under the process-tree walk the root must stay alive (it is the
        // subreaper) until the thread below has frozen the tree.
        let Ok(pidfd) = self.pidfd.get_ref().try_clone() else {
            tracing::warn!(
                pid = self.pid,
                "cannot hand a dropped command to the reaper; its zombie stays until exit"
            );
            return;
        };
        let (pid, walk, command) = (self.pid, self.kind == Containment::ProcessTree, self.command);
        let held = std::mem::take(&mut self.held);
        // On a stop thread (started before any command): a drop creates no
        // thread, so a fork bomb cannot keep it from killing.
        let reaper = offload::submit(Lane::Stop, move || {
            if walk {
                tree::kill_now(pid, command, &pidfd);
                spawn::release(pid);
            }
            // SIGKILL is immediate; the wait only collects the zombie.
            sys::reap_blocking(pidfd.as_fd());
            crate::adopt::unregister(pid);
            // The tree is gone: what had to outlive it goes now.
            drop(held);
        });
        if let Err(err) = reaper {
            sys::signal_group(self.pid, libc::SIGKILL);
            tracing::warn!(%err, pid = self.pid, "no stop thread; the dropped command's group was SIGKILLed, what left it may linger");
        }
    }
}

impl Leftovers {
    /// How many processes were left.
    pub(crate) fn count(&self) -> usize {
        match self {
            Leftovers::None => 0,
            Leftovers::Cgroup(_, count) => *count,
            Leftovers::Tree(stopping, _) => stopping.member_count(),
            Leftovers::Strays(count) => *count,
        }
    }

    /// Stops them (SIGTERM, `grace_over`, the kill); returns once every one
    /// is gone.
    pub(crate) async fn stop(self, grace_over: impl std::future::Future<Output = ()>) {
        match self {
            Leftovers::None | Leftovers::Strays(_) => {}
            Leftovers::Cgroup(cgroup, _) => {
                cgroup.stop(grace_over).await;
                spawn::remove(cgroup);
            }
            Leftovers::Tree(stopping, pgid) => {
                stopping.finish(grace_over).await;
                spawn::release(pgid);
            }
        }
    }
}

/// Kills what no command cgroup holds (processes a command moved beside
/// its own cgroup); how many there were. The listing and the pidfd kills
/// do not block; a foreign cgroup is killed and removed off the runtime
/// threads.
async fn stop_strays() -> usize {
    let Some(host) = CgroupHost::get() else {
        return 0;
    };
    let strays = host.strays();
    let count = strays.count();
    if !strays.cgroups.is_empty() {
        let _ = offload::run(Lane::Stop, move || strays.remove()).await;
    }
    count
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
