//! The host: what one process that runs commands keeps for all of them,
//! owned by one object and passed by `Arc` to every executor it serves.
//!
//! - the **lanes** (`offload.rs`): the threads every stop and spill runs
//!   on, started before the first command so a fork bomb cannot keep a
//!   stop from running;
//! - the **cgroup host** (`cgroup.rs`): the parent cgroup of every command,
//!   where cgroups can be made;
//! - the **adoption registry** (`adopt.rs`): the children the host keeps
//!   for itself, and the gate between spawns and scans;
//! - the **watchdog** (`watchdog.rs`): the process that kills what the
//!   commands left should the host die, and the writer that feeds it;
//! - the **spawner threads** (`spawn.rs`): the permanent threads every
//!   command is cloned from;
//! - the command counter (`DSH_BASH_COMMAND`) and the directories already
//!   swept of what dead hosts left.
//!
//! Starting it does no more than a host needs before its first command:
//! the parent cgroup is made, not the dead hosts' swept (that can take a
//! second per stale cgroup: [`Host::sweep_dead`], which
//! [`crate::LocalBashExecutor::new`] runs on a thread of its own).
//!
//! There is one host per process, and this module's cell holding it is
//! the crate's only static: the kernel keeps the subreaper bit and a
//! spawning thread's death signal per process, so two hosts in one process
//! would take each other's shells for orphans.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::adopt::Adoption;
use crate::cgroup::CgroupHost;
use crate::offload::Lanes;
use crate::spawn::{Reach, Spawners};
use crate::watchdog::{Forked, Watchdog, Watched};

/// Everything one process that runs commands keeps for all of them (see
/// the module docs); [`Host::get`] gives the process's one.
pub struct Host {
    pub(crate) lanes: Lanes,
    pub(crate) cgroups: Option<Arc<CgroupHost>>,
    pub(crate) adoption: Arc<Adoption>,
    pub(crate) watchdog: Watchdog,
    pub(crate) spawners: Spawners,
    /// The last command number handed out.
    commands: AtomicU64,
    /// Spill parents already swept (held while sweeping: a second caller
    /// waits for the first instead of sweeping again).
    swept: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("cgroup", &self.cgroups.as_deref().map(CgroupHost::dir))
            .field("adoption", &self.adoption.enabled())
            .finish_non_exhaustive()
    }
}

/// The process's host, through its life.
enum Process {
    /// Not started; the watchdog program named so far, and the watchdog
    /// forked for it if one was.
    Unstarted {
        watchdog_program: Option<PathBuf>,
        forked: Option<Forked>,
    },
    Started(Arc<Host>),
    /// It could not start (no thread could be made): why.
    Failed(String),
}

/// The process's one host (see the module docs for why it is one).
static PROCESS: Mutex<Process> = Mutex::new(Process::Unstarted {
    watchdog_program: None,
    forked: None,
});

fn process() -> std::sync::MutexGuard<'static, Process> {
    PROCESS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the host-death watchdog as `program` (executed with `argv[0]` set
/// to the watchdog's name; it must call [`crate::run_watchdog_if_asked`]
/// first thing in `main`, as `dsh-bash` does: pass `/proc/self/exe` from a
/// binary that does) instead of the `bash` loop: it blocks on a pidfd of
/// the host instead of polling, and costs no shell at the host's death.
/// Call it before the host starts (before the first executor is built);
/// later calls are ignored.
pub fn use_watchdog_program(program: impl Into<PathBuf>) {
    if let Process::Unstarted {
        watchdog_program, ..
    } = &mut *process()
    {
        *watchdog_program = Some(program.into());
    }
}

/// Forks the host-death watchdog now, for the host this process will
/// start: a copy-on-write fork of this process that runs the Rust watchdog
/// without executing anything (no second dynamic loading and start of the
/// binary; the host is told its cgroups by message once it makes them).
/// Call it from `main` while the process has one thread, before any
/// runtime or thread starts, in a process that will run commands (the
/// `dsh-bash` binary does, for `run` and `mcp`). Refused (an error saying
/// why) when the process has more than one thread, and then the host
/// starts its watchdog as before; a no-op once a watchdog is forked or the
/// host started.
///
/// # Errors
///
/// The process has more than one thread, or the pipe or the fork failed.
pub fn fork_watchdog() -> io::Result<()> {
    if let Process::Unstarted { forked, .. } = &mut *process() {
        if forked.is_none() {
            *forked = Some(Forked::start()?);
        }
    }
    Ok(())
}

impl Host {
    /// The process's host, started by the first call (blocking: it makes
    /// the parent cgroup and starts the watchdog and the threads); `Err`
    /// says why it could not start, and every later call says the same.
    pub fn get() -> io::Result<Arc<Host>> {
        let mut process = process();
        let started = match &mut *process {
            Process::Started(host) => return Ok(Arc::clone(host)),
            Process::Failed(why) => return Err(io::Error::other(why.clone())),
            Process::Unstarted {
                watchdog_program,
                forked,
            } => Host::start(watchdog_program.clone(), forked.take()),
        };
        match started {
            Ok(host) => {
                let host = Arc::new(host);
                *process = Process::Started(Arc::clone(&host));
                Ok(host)
            }
            Err(err) => {
                let why = format!("cannot start the host's threads: {err}");
                *process = Process::Failed(why.clone());
                Err(io::Error::new(err.kind(), why))
            }
        }
    }

    fn start(watchdog_program: Option<PathBuf>, forked: Option<Forked>) -> io::Result<Host> {
        // The threads every stop runs on, before any command can take them.
        let lanes = Lanes::start()?;
        let cgroups = match CgroupHost::create() {
            Ok(host) => Some(Arc::new(host)),
            Err(why) => {
                tracing::debug!(%why, "cgroup containment unavailable; using the process-tree walk");
                None
            }
        };
        let adoption = Arc::new(Adoption::default());
        // The watchdog runs from the start: with cgroups it is never told
        // anything, yet kills the host's parent cgroup at host death.
        let watched = Watched {
            cgroup: cgroups.as_deref().map(|host| host.dir().to_owned()),
            v1: cgroups
                .as_deref()
                .into_iter()
                .flat_map(CgroupHost::v1_parents)
                .map(ToOwned::to_owned)
                .collect(),
        };
        let watchdog = Watchdog::start(watched, watchdog_program, forked, Arc::clone(&adoption));
        let spawners = Spawners::start(&Reach {
            cgroups: cgroups.clone(),
            adoption: Arc::clone(&adoption),
            watchdog: watchdog.clone(),
        })?;
        Ok(Host {
            lanes,
            cgroups,
            adoption,
            watchdog,
            spawners,
            commands: AtomicU64::new(0),
            swept: Mutex::new(Vec::new()),
        })
    }

    /// A new command's number (from 1), unique in this host.
    pub(crate) fn next_command(&self) -> u64 {
        self.commands.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Sweeps what hosts that died outright (with their watchdog) left:
    /// their parent cgroups, processes killed first, and their spill
    /// directories under `spill_parent`. Blocking and bounded (a stale
    /// cgroup gets a second to empty); the cgroups once per process, each
    /// spill parent once (a second caller waits for the first).
    pub fn sweep_dead(&self, spill_parent: &Path) {
        let mut swept = self.swept.lock().unwrap_or_else(PoisonError::into_inner);
        if swept.is_empty() {
            if let Some(cgroups) = &self.cgroups {
                cgroups.sweep_dead();
            }
        }
        if !swept.iter().any(|done| done == spill_parent) {
            crate::scratch::sweep_dead(spill_parent, crate::scratch::SPILL_PREFIX);
            swept.push(spill_parent.to_owned());
        }
    }
}
