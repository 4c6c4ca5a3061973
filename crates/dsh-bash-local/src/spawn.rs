//! Spawning: every command is started from one of a few dedicated threads
//! that live as long as the process (with `clone(CLONE_VM | CLONE_VFORK)`,
//! see the `dsh-launch` crate).
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

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::adopt::Adoption;
use crate::cgroup::{CgroupHost, CommandCgroup, HandOff};
use crate::config::ContainmentChoice;
use crate::limits::{CommandLimits, Place};
use crate::sys::{self, Launcher};
use crate::watchdog::Watchdog;

pub(crate) use crate::sys::Pipes;

/// One command to start: what to exec, and how the host holds it.
pub(crate) struct Launch {
    /// The program, its arguments, environment, streams and restriction.
    pub(crate) exec: sys::Exec,
    pub(crate) containment: ContainmentChoice,
    /// The resource limits it runs under.
    pub(crate) limits: crate::config::ResourceLimits,
    /// The host-unique number in its `DSH_BASH_COMMAND` (see `adopt.rs`).
    pub(crate) command: u64,
    /// Told the child's pid once it exists.
    pub(crate) observers: Vec<Arc<dyn dsh_sandbox::SpawnObserver>>,
}

/// A freshly spawned command: its pid (also its process group), a pidfd
/// holding its identity, our ends of its pipes, and its cgroup.
pub(crate) struct Spawned {
    pub(crate) pid: libc::pid_t,
    pub(crate) pidfd: OwnedFd,
    pub(crate) pipes: Pipes,
    /// The command's own cgroup; `None` under the process-tree walk.
    pub(crate) cgroup: Option<CommandCgroup>,
    /// Its limits where no cgroup holds it (`setrlimit` only).
    pub(crate) rlimits: Option<CommandLimits>,
}

enum Job {
    Spawn(Box<Launch>, oneshot::Sender<io::Result<Spawned>>),
    Release(libc::pid_t),
    Remove(Box<CommandCgroup>),
}

/// How many permanent spawner threads fork in parallel.
const SPAWNER_THREADS: usize = 4;

/// The spawner threads' queues (cheap to clone); one set per host
/// (`host.rs`), started before its first command.
#[derive(Clone)]
pub(crate) struct Spawners {
    queues: Arc<[mpsc::Sender<Job>]>,
    next: Arc<AtomicUsize>,
}

/// What a spawner thread reaches of its host.
#[derive(Clone)]
pub(crate) struct Reach {
    pub(crate) cgroups: Option<Arc<CgroupHost>>,
    pub(crate) adoption: Arc<Adoption>,
    pub(crate) watchdog: Watchdog,
}

impl Spawners {
    /// Starts the spawner threads.
    pub(crate) fn start(reach: &Reach) -> io::Result<Spawners> {
        let mut queues = Vec::with_capacity(SPAWNER_THREADS);
        for index in 0..SPAWNER_THREADS {
            let (jobs, queue) = mpsc::channel::<Job>();
            // A cgroup dropped by its supervisor comes back to the thread
            // that made it.
            let back = jobs.clone();
            let hand_off = HandOff(Arc::new(move |cgroup| {
                let _ = back.send(Job::Remove(Box::new(cgroup)));
            }));
            let reach = reach.clone();
            std::thread::Builder::new()
                .name(format!("dsh-bash-spawner-{index}"))
                .spawn(move || serve(&hand_off, &reach, &queue))
                .map_err(|err| io::Error::other(format!("cannot start a spawner thread: {err}")))?;
            queues.push(jobs);
        }
        Ok(Spawners {
            queues: queues.into(),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn send(&self, job: Job) -> io::Result<()> {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        self.queues[index]
            .send(job)
            .map_err(|_| io::Error::other("the spawner thread is gone"))
    }

    /// Spawns `launch` on a spawner thread.
    pub(crate) async fn spawn(&self, launch: Launch) -> io::Result<Spawned> {
        let (reply, spawned) = oneshot::channel();
        self.send(Job::Spawn(Box::new(launch), reply))?;
        spawned
            .await
            .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
    }

    /// Tells the watchdog that group `pgid` is gone and must not be killed
    /// at host death (its number may be reused).
    pub(crate) fn release(&self, pgid: libc::pid_t) {
        let _ = self.send(Job::Release(pgid));
    }
}

fn serve(hand_off: &HandOff, reach: &Reach, queue: &mpsc::Receiver<Job>) {
    let mut launcher = Launcher::default();
    // The next command's v1 cgroups, with this thread inside (see
    // `limits::Place`); made after each command a cgroup holds, for the
    // next.
    let mut place: Option<Place> = None;
    while let Ok(job) = queue.recv() {
        match job {
            Job::Spawn(launch, reply) => {
                let cgroups = launch.containment != ContainmentChoice::ProcessTree;
                let host = reach.cgroups.as_deref();
                let limits = host.filter(|_| cgroups).map(CgroupHost::limits);
                let taken = match (limits, place.take()) {
                    (Some(_), taken) => taken,
                    // A process-tree command must not start inside a place.
                    (None, Some(left)) => {
                        if let Some(host) = host {
                            host.limits().discard(left);
                        }
                        None
                    }
                    (None, None) => None,
                };
                // While this thread is inside, it counts in `pids.current`:
                // the limit is one higher until it has moved on.
                let lowered = taken.as_ref().and_then(Place::processes).zip(launch.limits.processes);
                let spawned = spawn_now(&launch, &mut launcher, reach, (hand_off, taken));
                if let Ok(spawned) = &spawned {
                    // A cgroup needs no message: the watchdog kills the
                    // host's parent cgroup at host death.
                    if spawned.cgroup.is_none() {
                        reach.watchdog.record(spawned.pid);
                    }
                }
                if let Err(Ok(orphan)) = reply.send(spawned) {
                    // The caller is gone: nobody will supervise this process.
                    sys::pidfd_signal(orphan.pidfd.as_fd(), libc::SIGKILL);
                    sys::signal_group(orphan.pid, libc::SIGKILL);
                }
                // Off the command's path: the next place (which moves this
                // thread out of the command's cgroups), then the limit.
                if let Some(limits) = limits {
                    place = limits.prepare();
                }
                if let Some((pids, processes)) = lowered {
                    crate::limits::set_processes(&pids, processes);
                }
            }
            Job::Release(pgid) => reach.watchdog.forget(pgid),
            Job::Remove(cgroup) => cgroup.remove(),
        }
    }
}

fn spawn_now(
    launch: &Launch,
    launcher: &mut Launcher,
    reach: &Reach,
    (hand_off, place): (&HandOff, Option<Place>),
) -> io::Result<Spawned> {
    let cgroup = match launch.containment {
        ContainmentChoice::ProcessTree => None,
        _ => reach.cgroups.as_deref().and_then(|host| match host.command(&launch.limits, place, hand_off.clone()) {
            Ok(cgroup) => Some(cgroup),
            Err(err) => {
                tracing::warn!(%err, "cannot create a command cgroup; using the process-tree walk");
                None
            }
        }),
    };
    // A child of the host exists from here on: registered before any scan
    // can see it.
    let rlimits = cgroup
        .is_none()
        .then(|| CommandLimits::without_cgroup(launch.limits));
    // Memory no controller limits gets an rlimit, cgroup or not.
    let memory_rlimit = match &cgroup {
        Some(cgroup) => cgroup.memory_rlimit(),
        None => rlimits.as_ref().and_then(|r| r.memory_rlimit),
    };
    let gate = reach.adoption.spawning();
    let entry = cgroup.as_ref().map(CommandCgroup::entry);
    let (pid, pipes) = sys::launch(&launch.exec, entry, memory_rlimit, launcher)?;
    reach.adoption.register(pid);
    drop(gate);
    let pidfd = match sys::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(err) => {
            sys::signal_group(pid, libc::SIGKILL);
            return Err(io::Error::new(
                err.kind(),
                format!("pidfd_open failed (Linux 5.3 or newer is required): {err}"),
            ));
        }
    };
    Ok(Spawned {
        pid,
        pidfd,
        pipes,
        cgroup,
        rlimits,
    })
}
