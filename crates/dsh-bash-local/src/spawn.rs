//! Spawning: every command is started from one of a few dedicated threads
//! that live as long as the process (with `clone(CLONE_VM | CLONE_VFORK)`,
//! see `sys/launch.rs`).
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
//! not the process. Tokio's worker and blocking threads come and go (a
//! blocking thread retires after 10 s idle, a runtime can be dropped), so
//! forking from them would kill commands at random. The spawner threads never
//! exit, so the death signal fires exactly when the host process dies.
//!
//! The same threads also tell the host-death **watchdog** (see
//! `watchdog.rs`) which process groups to kill should the host die, for
//! commands contained by the process-tree walk.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;

use tokio::sync::oneshot;

use dsh_sandbox::Restriction;

use crate::cgroup::{CgroupHost, CommandCgroup};
use crate::config::ContainmentChoice;
use crate::sys::{self, LaunchPlan, Launcher};
use crate::watchdog;

/// Everything needed to fork and exec one command.
pub(crate) struct Launch {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) workdir: PathBuf,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) piped_stdin: bool,
    pub(crate) restriction: Restriction,
    pub(crate) containment: ContainmentChoice,
}

/// A freshly spawned command: its pid (also its process group), a pidfd
/// holding its identity, and our ends of its pipes.
pub(crate) struct Spawned {
    pub(crate) pid: libc::pid_t,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// The command's own cgroup; `None` under the process-tree walk.
    pub(crate) cgroup: Option<CommandCgroup>,
}

enum Job {
    Spawn(Box<Launch>, oneshot::Sender<io::Result<Spawned>>),
    Release(libc::pid_t),
}

/// How many permanent spawner threads fork in parallel.
const SPAWNER_THREADS: usize = 4;

struct Spawners {
    queues: Vec<mpsc::Sender<Job>>,
    next: AtomicUsize,
}

impl Spawners {
    fn send(&self, job: Job) -> io::Result<()> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        self.queues[index]
            .send(job)
            .map_err(|_| io::Error::other("the spawner thread is gone"))
    }
}

fn spawners() -> io::Result<&'static Spawners> {
    static SPAWNERS: OnceLock<Result<Spawners, String>> = OnceLock::new();
    let spawners = SPAWNERS.get_or_init(|| {
        // The watchdog runs from the first spawn on: with cgroups it is
        // never told anything, yet kills the host's parent cgroup at host
        // death.
        watchdog::ensure_started();
        let mut queues = Vec::with_capacity(SPAWNER_THREADS);
        for index in 0..SPAWNER_THREADS {
            let (jobs, queue) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name(format!("dsh-bash-spawner-{index}"))
                .spawn(move || serve(queue))
                .map_err(|err| format!("cannot start a spawner thread: {err}"))?;
            queues.push(jobs);
        }
        Ok(Spawners {
            queues,
            next: AtomicUsize::new(0),
        })
    });
    spawners
        .as_ref()
        .map_err(|err| io::Error::other(err.clone()))
}

fn serve(queue: mpsc::Receiver<Job>) {
    let mut launcher = Launcher::default();
    while let Ok(job) = queue.recv() {
        match job {
            Job::Spawn(launch, reply) => {
                let spawned = spawn_now(&launch, &mut launcher);
                if let Ok(spawned) = &spawned {
                    // A cgroup needs no message: the watchdog kills the
                    // host's parent cgroup at host death.
                    if spawned.cgroup.is_none() {
                        watchdog::record(spawned.pid);
                    }
                }
                if let Err(Ok(orphan)) = reply.send(spawned) {
                    // The caller is gone: nobody will supervise this process.
                    sys::pidfd_signal(orphan.pidfd.as_fd(), libc::SIGKILL);
                    sys::signal_group(orphan.pid, libc::SIGKILL);
                }
            }
            Job::Release(pgid) => watchdog::forget(pgid),
        }
    }
}

fn spawn_now(launch: &Launch, launcher: &mut Launcher) -> io::Result<Spawned> {
    let cgroup = match launch.containment {
        ContainmentChoice::ProcessTree => None,
        _ => CgroupHost::get().and_then(|host| match host.command() {
            Ok(cgroup) => Some(cgroup),
            Err(err) => {
                tracing::warn!(%err, "cannot create a command cgroup; using the process-tree walk");
                None
            }
        }),
    };
    let plan = LaunchPlan {
        program: &launch.program,
        args: &launch.args,
        env: &launch.env,
        cwd: &launch.workdir,
        piped_stdin: launch.piped_stdin,
        restriction: &launch.restriction,
        cgroup: cgroup.as_ref().map(CommandCgroup::procs),
    };
    // A child of the host exists from here on: registered before any scan
    // can see it.
    let gate = crate::adopt::spawning();
    let launched = sys::launch(&plan, launcher)?;
    crate::adopt::register(launched.pid);
    drop(gate);
    let pidfd = match sys::pidfd_open(launched.pid) {
        Ok(fd) => fd,
        Err(err) => {
            sys::signal_group(launched.pid, libc::SIGKILL);
            return Err(io::Error::new(
                err.kind(),
                format!("pidfd_open failed (Linux 5.3 or newer is required): {err}"),
            ));
        }
    };
    Ok(Spawned {
        pid: launched.pid,
        pidfd,
        stdin: launched.stdin,
        stdout: launched.stdout,
        stderr: launched.stderr,
        cgroup,
    })
}

/// Spawns `launch` on the spawner thread.
pub(crate) async fn spawn(launch: Launch) -> io::Result<Spawned> {
    let (reply, spawned) = oneshot::channel();
    spawners()?.send(Job::Spawn(Box::new(launch), reply))?;
    spawned
        .await
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}

/// Tells the watchdog that group `pgid` is gone and must not be killed at
/// host death (its number may be reused).
pub(crate) fn release(pgid: libc::pid_t) {
    if let Ok(spawners) = spawners() {
        let _ = spawners.send(Job::Release(pgid));
    }
}
