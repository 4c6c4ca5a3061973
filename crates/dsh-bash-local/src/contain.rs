//! Containment: the two [`Tree`]s the lifecycle machine (`lifecycle.rs`)
//! drives, a cgroup of its own ([`CgroupTree`], `cgroup.rs`) and the
//! process-tree walk ([`WalkedTree`], `tree.rs` with `adopt.rs`), each
//! around the command's [`Shell`].
//!
//! Dropped before it was released (its supervisor dropped), a tree kills
//! everything at once, without a grace, never blocking the dropping
//! thread: under a cgroup the kill is one write (`cgroup.kill`); the
//! `/proc` walk and the reaping go to a stop thread, and what had to
//! outlive the tree goes only once the shell is reaped. Blocking cgroupfs
//! writes otherwise run off the runtime threads.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use dsh_bash::{BashLimits, Containment};

use crate::cgroup::CommandCgroup;
use crate::host::Host;
use crate::lifecycle::{Emptied, Left, Tree};
use crate::limits::CommandLimits;
use crate::offload::Lane;
use crate::sys::{self, ExitStatus};
use crate::tree::{self, Stopping};

/// How long processes caught mid-exit get to finish before what remains
/// counts as leftovers: a sandbox runner's own pid-namespace init exits
/// just after the runner has reported the command's status, and must not
/// be reported (and stopped) as something the command left running.
const SETTLE: Duration = Duration::from_millis(50);

/// What must outlive a command's tree (a private TMPDIR, stand-ins).
type Held = Vec<Arc<dyn dsh_sandbox::Held>>;

/// A command's shell (its pid is also its process group) and what must
/// outlive its tree.
pub(crate) struct Shell {
    /// The host it was spawned by (adoption, lanes, spawners).
    host: Arc<Host>,
    pid: libc::pid_t,
    pidfd: AsyncFd<OwnedFd>,
    /// Its number (`DSH_BASH_COMMAND`), for its orphans.
    command: u64,
    /// Dropped only once the tree is gone, on every path.
    held: Held,
    /// Until the tree is released.
    armed: bool,
}

impl Shell {
    /// Holds a freshly spawned shell; one that cannot be held (its pidfd
    /// cannot be polled) is killed with its group and reaped off the
    /// runtime: no zombie stays.
    pub(crate) fn new(
        host: Arc<Host>,
        (pid, pidfd): (libc::pid_t, OwnedFd),
        command: u64,
        held: Held,
    ) -> io::Result<Shell> {
        match sys::readable_or_back(pidfd) {
            Ok(pidfd) => Ok(Shell {
                host,
                pid,
                pidfd,
                command,
                held,
                armed: true,
            }),
            Err((pidfd, err)) => {
                sys::signal_group(pid, libc::SIGKILL);
                let spawners = host.spawners.clone();
                let reaped = host.lanes.submit(Lane::Stop, move || {
                    sys::reap_blocking(pidfd.as_fd());
                    spawners.release(pid);
                    drop(held);
                });
                if let Err(why) = reaped {
                    tracing::warn!(%why, pid, "no stop thread; the unheld command's zombie stays until exit");
                }
                Err(err)
            }
        }
    }

    /// Waits for the shell's exit and reaps it.
    async fn exit(&self) -> io::Result<ExitStatus> {
        loop {
            let mut ready = self.pidfd.readable().await?;
            match sys::try_reap(self.pidfd.get_ref().as_fd())? {
                Some(status) => return Ok(status),
                None => ready.clear_ready(),
            }
        }
    }

    fn exited(&self) -> Option<ExitStatus> {
        sys::try_reap(self.pidfd.get_ref().as_fd()).ok().flatten()
    }

    /// Released: what had to outlive the tree goes; a drop does nothing.
    fn release(&mut self) {
        self.armed = false;
        self.held.clear();
    }

    /// Dropped unreleased: everything is killed now; under the walk
    /// (`walk`) the tree is frozen and killed on a stop thread, where the
    /// shell is reaped and what had to outlive the tree goes after it.
    fn abandon(&mut self, walk: bool) {
        if !self.armed {
            return;
        }
        // Under the walk the root must stay alive (it is the subreaper)
        // until the thread below has frozen the tree.
        let Ok(pidfd) = self.pidfd.get_ref().try_clone() else {
            tracing::warn!(
                pid = self.pid,
                "cannot hand a dropped command to the reaper; its zombie stays until exit"
            );
            return;
        };
        let (pid, command) = (self.pid, self.command);
        let held = std::mem::take(&mut self.held);
        // On a stop thread (started before any command): a drop creates no
        // thread, so a fork bomb cannot keep it from killing.
        let host = Arc::clone(&self.host);
        let reaper = self.host.lanes.submit(Lane::Stop, move || {
            if walk {
                tree::kill_now(&host.adoption, (pid, command), &pidfd);
                host.spawners.release(pid);
            }
            // SIGKILL is immediate; the wait only collects the zombie.
            sys::reap_blocking(pidfd.as_fd());
            host.adoption.unregister(pid);
            drop(held);
        });
        if let Err(err) = reaper {
            sys::signal_group(self.pid, libc::SIGKILL);
            tracing::warn!(%err, pid = self.pid, "no stop thread; the dropped command's group was SIGKILLed, what left it may linger");
        }
    }
}

/// A command in a cgroup of its own: leftovers are whatever is still in
/// it (`server &`, a `setsid` daemon, a double fork) and whatever moved
/// beside it; a stop ends in one `cgroup.kill`.
pub(crate) struct CgroupTree {
    shell: Shell,
    /// Until released (removed then).
    cgroup: Option<CommandCgroup>,
}

impl CgroupTree {
    pub(crate) fn new(shell: Shell, cgroup: CommandCgroup) -> CgroupTree {
        CgroupTree {
            shell,
            cgroup: Some(cgroup),
        }
    }
}

impl Tree for CgroupTree {
    fn containment(&self) -> Containment {
        Containment::Cgroup
    }

    fn limits(&self) -> Option<BashLimits> {
        self.cgroup.as_ref().and_then(CommandCgroup::limits)
    }

    async fn shell_exit(&self) -> io::Result<ExitStatus> {
        self.shell.exit().await
    }

    fn shell_exited(&self) -> Option<ExitStatus> {
        self.shell.exited()
    }

    fn forget(&mut self) {
        self.shell.host.adoption.unregister(self.shell.pid);
    }

    async fn settle(&mut self) -> Left {
        let strays = stop_strays(&self.shell.host).await;
        match &self.cgroup {
            Some(cgroup) if cgroup.lingers(SETTLE).await => Left {
                count: strays + cgroup.pids().len(),
                any: true,
            },
            _ => Left {
                count: strays,
                any: false,
            },
        }
    }

    async fn terminate(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup
                .signal_all_off_thread(&self.shell.host.lanes, &[libc::SIGTERM, libc::SIGCONT])
                .await;
        }
    }

    async fn emptied(&self) -> Emptied {
        if let Some(cgroup) = &self.cgroup {
            cgroup.emptied(Duration::MAX).await;
        }
        Emptied::All
    }

    async fn kill(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            // Whatever is left, including what was forked during the
            // grace: one atomic kill.
            cgroup.kill_off_thread(&self.shell.host.lanes).await;
        }
    }

    async fn release(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.hand_back();
        }
        stop_strays(&self.shell.host).await;
        self.shell.release();
    }
}

impl Drop for CgroupTree {
    /// Unreleased: one immediate `cgroup.kill` (the cgroup itself is
    /// removed as it drops), the shell reaped on a stop thread.
    fn drop(&mut self) {
        if self.shell.armed {
            if let Some(cgroup) = &self.cgroup {
                cgroup.kill();
            }
        }
        self.shell.abandon(false);
    }
}

/// A command held by the process-tree walk: its process group and, with
/// adoption on, the orphans it left the host; a stop freezes the tree
/// first.
pub(crate) struct WalkedTree {
    shell: Shell,
    /// Its limits (`setrlimit` only).
    rlimits: Option<CommandLimits>,
    /// The frozen tree, once a stop (or what lingers) froze it.
    stopping: Option<Stopping>,
}

impl WalkedTree {
    pub(crate) fn new(shell: Shell, rlimits: Option<CommandLimits>) -> WalkedTree {
        WalkedTree {
            shell,
            rlimits,
            stopping: None,
        }
    }
}

impl Tree for WalkedTree {
    fn containment(&self) -> Containment {
        Containment::ProcessTree
    }

    fn limits(&self) -> Option<BashLimits> {
        self.rlimits.as_ref().and_then(CommandLimits::facts)
    }

    async fn shell_exit(&self) -> io::Result<ExitStatus> {
        self.shell.exit().await
    }

    fn shell_exited(&self) -> Option<ExitStatus> {
        self.shell.exited()
    }

    fn forget(&mut self) {
        self.shell.host.adoption.unregister(self.shell.pid);
    }

    /// Its group, if it outlives the settle window, and the orphans it
    /// left, frozen. The shell is reaped: its pid (and, once empty, its
    /// group number) may be reused, so neither is matched unless the
    /// group still has members.
    async fn settle(&mut self) -> Left {
        let (pid, command) = (self.shell.pid, self.shell.command);
        // Dropped during the settle window: the group still goes (its
        // number cannot be reused while it has members).
        let mut settling = KillGroupOnDrop {
            pgid: pid,
            armed: true,
        };
        let group = lingering(|| sys::group_alive(pid)).await;
        settling.armed = false;
        let host = &self.shell.host;
        let adoption = Arc::clone(&host.adoption);
        let orphans = adoption.enabled()
            && host
                .lanes
                .run(Lane::Stop, move || adoption.live_orphans_of(pid, command))
                .await
                .map_or(true, |orphans| !orphans.is_empty());
        if !(group || orphans) {
            return Left {
                count: 0,
                any: false,
            };
        }
        let tree = tree::Tree {
            pgid: pid,
            from_root: false,
            group,
            command,
        };
        let stopping = Stopping::freeze(Arc::clone(host), tree, None).await;
        let count = stopping.member_count();
        self.stopping = Some(stopping);
        // Also with no member found: a group kept only by a zombie must
        // still be stopped and released.
        Left { count, any: true }
    }

    async fn terminate(&mut self) {
        if self.stopping.is_none() {
            let root = self.shell.pidfd.get_ref().try_clone().ok();
            let tree = tree::Tree {
                pgid: self.shell.pid,
                from_root: root.is_some(),
                group: true,
                command: self.shell.command,
            };
            self.stopping = Some(Stopping::freeze(Arc::clone(&self.shell.host), tree, root).await);
        }
        if let Some(stopping) = &self.stopping {
            stopping.terminate();
        }
    }

    async fn emptied(&self) -> Emptied {
        match &self.stopping {
            Some(stopping) => stopping.gone().await,
            None => Emptied::All,
        }
    }

    async fn kill(&mut self) {
        if let Some(stopping) = &mut self.stopping {
            stopping.kill().await;
        }
    }

    async fn release(&mut self) {
        self.stopping = None;
        self.shell.host.spawners.release(self.shell.pid);
        self.shell.release();
    }
}

impl Drop for WalkedTree {
    fn drop(&mut self) {
        self.shell.abandon(true);
    }
}

/// Kills what no command cgroup holds (processes a command moved beside
/// its own cgroup); how many there were. The listing and the pidfd kills
/// do not block; a foreign cgroup is killed and removed off the runtime
/// threads.
async fn stop_strays(host: &Host) -> usize {
    let Some(cgroups) = &host.cgroups else {
        return 0;
    };
    let strays = cgroups.strays();
    let count = strays.count();
    if !strays.cgroups.is_empty() {
        let _ = host.lanes.run(Lane::Stop, move || strays.remove()).await;
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::sync::{mpsc, Mutex};

    use super::*;

    /// Says when it is dropped.
    #[derive(Debug)]
    struct Dropped(Mutex<mpsc::Sender<()>>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            if let Ok(sender) = self.0.lock() {
                let _ = sender.send(());
            }
        }
    }

    /// Defect 9 of «One owner, one seam, named states»: a shell whose pidfd
    /// the reactor refused was killed and forgotten, its zombie left for
    /// the host's lifetime. Now it is killed, reaped off the runtime, its
    /// group released, and what had to outlive it dropped after the reap.
    #[tokio::test]
    async fn a_shell_that_cannot_be_held_is_killed_reaped_and_let_go() {
        let host = Host::get().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("1000")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        let pidfd = sys::pidfd_open(pid).unwrap();
        // The same number already in this reactor: the shell's own
        // registration is refused (EEXIST), as any failed registration.
        sys::register_unheld(pidfd.as_fd()).unwrap();
        let (said, dropped) = mpsc::channel();
        let held: Held = vec![Arc::new(Dropped(Mutex::new(said)))];
        let refused = Shell::new(Arc::clone(&host), (pid, pidfd), 1, held);
        assert!(refused.is_err(), "the second registration must fail");
        tokio::task::spawn_blocking(move || dropped.recv_timeout(Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("what had to outlive the shell is dropped once it is reaped");
        // Reaped by the host: nothing left for its parent to wait for.
        let waited = child.try_wait();
        assert_eq!(
            waited.err().and_then(|err| err.raw_os_error()),
            Some(libc::ECHILD),
            "the shell was reaped"
        );
    }
}
