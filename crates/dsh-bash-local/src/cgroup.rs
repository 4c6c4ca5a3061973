//! cgroup v2 containment, where the host lets us create cgroups.
//!
//! One parent cgroup per host process (`dsh-bash-<pid>`, next to the host's
//! own cgroup in the cgroup2 hierarchy), one child per command (`cmd-<n>`).
//! The command's first process starts inside its cgroup: it is cloned into
//! it (`clone3` with `CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP`, Linux
//! 5.7, x86_64), or, where that is refused once (an older kernel, a seccomp
//! profile), it moves itself there between fork and exec (it writes `0` to
//! the cgroup's `cgroup.procs`). Cloning into it is what a command should
//! cost: moving a process takes the kernel's cgroup-wide write lock, which
//! waits for an RCU grace period, 7–15 ms a command when commands come
//! seconds apart. Every process the command ever starts is inside,
//! whatever session or parent it moves to. Then:
//!
//! - **leftovers** are whatever is still in the cgroup once the shell has
//!   exited (a `server &`, a `setsid` daemon, a double fork alike);
//! - **stopping** is SIGTERM to every member, up to the grace for the cgroup
//!   to empty, then `cgroup.kill`: one atomic SIGKILL of the whole cgroup,
//!   which no fork can outrun;
//! - **settled** means `cgroup.events` says `populated 0`; the cgroup is
//!   then removed;
//! - at **host death** the watchdog writes `cgroup.kill` of the parent.
//!
//! Where no cgroup can be made (not root and no delegated subtree, no
//! cgroup2 mount, a kernel without `cgroup.kill`), the process-tree walk of
//! `tree.rs` is used instead, and results say which one contained them.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::ResourceLimits;
use crate::offload::{Lane, Lanes};
use crate::sys::CgroupEntry as Entry;
use crate::limits::{CommandLimits, LimitHost, Place};
use crate::cgroupfs::{
    dead_hosts, host_dir_name, kill_members, pids_below, populated, remove_tree, signal_all,
};

/// The host's parent cgroup.
#[derive(Debug)]
pub(crate) struct CgroupHost {
    /// The cgroup the host process is in, where every host's parent is.
    base: PathBuf,
    dir: PathBuf,
    next: AtomicU64,
    /// Where each kind of resource limit is applied (see `limits.rs`).
    limits: LimitHost,
}

/// The cgroup2 mount point, from `/proc/self/mountinfo`.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (mount, rest) = line.split_once(" - ")?;
        if rest.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        mount.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// This process's cgroup2 path, from `/proc/self/cgroup` (`0::/path`).
fn own_cgroup(cgroup: &str) -> Option<String> {
    cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|path| path.trim_start_matches('/').to_owned())
}

/// Kills and removes the parents left by hosts that died (their watchdog
/// could not clean up, e.g. killed with their host).
fn sweep(base: &Path) {
    for (pid, dir) in dead_hosts(base) {
        let killed = fs::read_to_string(dir.join("cgroup.events"))
            .is_ok_and(|events| populated(&events));
        let _ = fs::write(dir.join("cgroup.kill"), "1");
        if killed {
            tracing::warn!(cgroup = %dir.display(), "killed the processes a dead host (pid {pid}) left running, and removed its cgroup");
        }
        // Killed processes leave their cgroups in a moment, not at once.
        for _ in 0..100 {
            let events = fs::read_to_string(dir.join("cgroup.events")).unwrap_or_default();
            if !populated(&events) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        remove_tree(&dir);
    }
}

impl CgroupHost {
    /// Makes the host's parent cgroup; `Err` says why cgroups cannot be
    /// used here. What dead hosts left is not touched: see
    /// [`CgroupHost::sweep_dead`].
    pub(crate) fn create() -> Result<CgroupHost, String> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let mount = cgroup2_mount(&mountinfo).ok_or("no cgroup2 mount")?;
        let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let own = own_cgroup(&own).ok_or("this process is in no cgroup2 cgroup")?;
        let base = mount.join(own);
        let dir = base.join(host_dir_name());
        if let Err(err) = fs::create_dir(&dir) {
            if err.kind() != io::ErrorKind::AlreadyExists {
                return Err(format!("cannot create {}: {err}", dir.display()));
            }
        }
        if !dir.join("cgroup.kill").exists() {
            let _ = fs::remove_dir(&dir);
            return Err("the kernel has no cgroup.kill (Linux 5.14 or newer)".into());
        }
        let limits = LimitHost::find(&base, &dir);
        Ok(CgroupHost {
            base,
            dir,
            next: AtomicU64::new(0),
            limits,
        })
    }

    /// Kills and removes the parents left by hosts that died (blocking, up
    /// to a second per stale parent while its processes exit).
    pub(crate) fn sweep_dead(&self) {
        sweep(&self.base);
    }

    /// The parent cgroup's directory (the watchdog kills it at host death).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Finds what no command cgroup holds: processes a command moved into
    /// the parent cgroup itself (SIGKILLed here, each through a pidfd) and
    /// cgroups it made beside its own (returned, to be killed and removed
    /// by [`Strays::remove`], which blocks). Reads only.
    pub(crate) fn strays(&self) -> Strays {
        let mut killed = kill_members(&self.dir);
        let mut cgroups = Vec::new();
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for entry in entries.filter_map(Result::ok) {
                let name = entry.file_name();
                let ours = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("cmd-"))
                    .is_some_and(|n| n.parse::<u64>().is_ok());
                if !ours && entry.file_type().is_ok_and(|t| t.is_dir()) {
                    let dir = entry.path();
                    killed += pids_below(&dir).len();
                    cgroups.push(dir);
                }
            }
        }
        if killed > 0 {
            tracing::warn!(strays = killed, "processes had left their command's cgroup; killed");
        }
        Strays { killed, cgroups }
    }

    /// The host's parent cgroups on the v1 hierarchies (for the limits).
    pub(crate) fn v1_parents(&self) -> impl Iterator<Item = &Path> {
        self.limits.v1_parents()
    }

    /// The resource limits' mechanisms.
    pub(crate) fn limits(&self) -> &LimitHost {
        &self.limits
    }

    /// A new, empty cgroup for one command, under `limits` (its v1 cgroups
    /// those of `place`, where the spawning thread sits), with the paths
    /// the child enters it by; the spawner that `hand_off` reaches removes
    /// it. Blocking (cgroupfs).
    pub(crate) fn command(
        &self,
        limits: &ResourceLimits,
        place: Option<Place>,
        hand_off: HandOff,
    ) -> io::Result<CommandCgroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("cmd-{n}");
        let path = self.dir.join(&name);
        fs::create_dir(&path)?;
        let named = |path: PathBuf| {
            CString::new(path.into_os_string().into_vec())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a cgroup path"))
        };
        match (named(path.clone()), named(path.join("cgroup.procs"))) {
            (Ok(dir), Ok(procs)) => {
                let limits = self.limits.apply(limits, (&path, &name), place);
                Ok(CommandCgroup {
                    path,
                    dir,
                    procs,
                    limits,
                    hand_off,
                    inline_drop: false,
                })
            }
            (Err(err), _) | (_, Err(err)) => {
                let _ = fs::remove_dir(&path);
                Err(err)
            }
        }
    }
}

/// What had left its command's cgroup within the host's parent.
pub(crate) struct Strays {
    killed: usize,
    /// Cgroups a command made beside its own.
    pub(crate) cgroups: Vec<PathBuf>,
}

impl Strays {
    /// How many processes were found.
    pub(crate) fn count(&self) -> usize {
        self.killed
    }

    /// Kills and removes the foreign cgroups. Blocking (cgroupfs).
    pub(crate) fn remove(self) {
        for dir in self.cgroups {
            let _ = fs::write(dir.join("cgroup.kill"), "1");
            remove_tree(&dir);
        }
    }
}

impl CommandCgroup {
    /// How a child enters this cgroup.
    pub(crate) fn entry(&self) -> Entry<'_> {
        Entry {
            dir: &self.dir,
            procs: &self.procs,
            v1: &self.limits.procs,
        }
    }

    /// `RLIMIT_DATA` for its first process, where no controller limits
    /// its memory.
    pub(crate) fn memory_rlimit(&self) -> Option<u64> {
        self.limits.memory_rlimit
    }

    /// The limits it runs under and whether one was hit (the kernel's
    /// counters, read now).
    pub(crate) fn limits(&self) -> Option<dsh_bash::BashLimits> {
        self.limits.facts()
    }
}

/// How a dropped command cgroup reaches the spawner thread that removes
/// it.
#[derive(Clone)]
pub(crate) struct HandOff(pub(crate) Arc<dyn Fn(CommandCgroup) + Send + Sync>);

impl std::fmt::Debug for HandOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandOff")
    }
}

/// One command's cgroup.
#[derive(Debug)]
pub(crate) struct CommandCgroup {
    path: PathBuf,
    /// `<path>`, which the child is cloned into (opened only for the
    /// clone: a host short of descriptors holds none between commands).
    dir: CString,
    /// `<path>/cgroup.procs`, which the child opens and writes `0` to
    /// before exec where it could not be cloned into the cgroup.
    procs: CString,
    /// Its resource limits.
    limits: CommandLimits,
    /// How it reaches the spawner thread that made it, which removes it.
    hand_off: HandOff,
    /// Dropped, it removes itself in place (it was handed to a spawner
    /// thread that is gone).
    inline_drop: bool,
}

impl CommandCgroup {
    /// True while any process is in the cgroup.
    pub(crate) fn populated(&self) -> bool {
        populated(&fs::read_to_string(self.path.join("cgroup.events")).unwrap_or_default())
    }

    /// Waits (at most `within`) for the processes now in the cgroup to
    /// exit; true if it is still populated then. Each is watched through a
    /// pidfd, so one that was only exiting costs its exit, not a polling
    /// period (`cgroup.events` notifications are rate-limited by the
    /// kernel to one per 10 ms).
    pub(crate) async fn lingers(&self, within: std::time::Duration) -> bool {
        if !self.populated() {
            return false;
        }
        let deadline = tokio::time::Instant::now() + within;
        let watched: Vec<_> = self
            .pids()
            .into_iter()
            .filter_map(|pid| crate::sys::pidfd_open(pid).ok())
            .filter_map(|pidfd| crate::sys::readable_fd(pidfd).ok())
            .collect();
        for pidfd in &watched {
            if tokio::time::timeout_at(deadline, pidfd.readable())
                .await
                .is_err()
            {
                break;
            }
        }
        self.populated()
    }

    /// The pids of its processes, sub-cgroups included.
    pub(crate) fn pids(&self) -> Vec<libc::pid_t> {
        pids_below(&self.path)
    }

    /// Sends `signals`, in order, to every process in the cgroup, on a stop
    /// thread (the listing reads cgroupfs, which another cgroup operation
    /// may hold); see [`signal_all`].
    pub(crate) async fn signal_all_off_thread(&self, lanes: &Lanes, signals: &'static [libc::c_int]) {
        let path = self.path.clone();
        // No stop thread (or it panicked): in place.
        if lanes
            .run(Lane::Stop, move || signal_all(&path, signals))
            .await
            .is_err()
        {
            signal_all(&self.path, signals);
        }
    }

    /// [`CommandCgroup::kill`] on a blocking thread: the write takes the
    /// kernel's cgroup mutex, which another cgroup operation may hold.
    pub(crate) async fn kill_off_thread(&self, lanes: &Lanes) {
        let path = self.path.clone();
        // No stop thread (or the write panicked): in place.
        if lanes
            .run(Lane::Stop, move || write_kill(&path))
            .await
            .is_err()
        {
            self.kill();
        }
    }

    /// SIGKILLs everything in the cgroup at once (`cgroup.kill`).
    pub(crate) fn kill(&self) {
        write_kill(&self.path);
    }

    /// Waits (polling `cgroup.events`) until the cgroup is empty, at most
    /// `bound`; true if it emptied.
    pub(crate) async fn emptied(&self, bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now().checked_add(bound);
        let mut pause = Duration::from_millis(1);
        loop {
            if !self.populated() {
                return true;
            }
            if deadline.is_some_and(|deadline| tokio::time::Instant::now() >= deadline) {
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Removes the (empty) cgroup and any sub-cgroups the command made; a
    /// populated one is killed first. Blocking (cgroupfs): the spawner
    /// threads run it (`spawn::remove`).
    pub(crate) fn remove(mut self) {
        if self.populated() {
            self.kill();
            // Killed processes leave in a moment, not at once.
            for _ in 0..100 {
                if !self.populated() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        remove_tree(&self.path);
        self.limits.remove();
        // Forget the path: Drop has nothing left to do.
        self.path = PathBuf::new();
    }
}

impl Drop for CommandCgroup {
    /// An abandoned cgroup (its supervisor dropped, its spawn failed) is
    /// killed at once (one write) and handed to its spawner thread to be
    /// removed once empty: no runtime thread waits, and the spawner has
    /// left its v1 cgroups by then.
    fn drop(&mut self) {
        if self.path.as_os_str().is_empty() {
            return;
        }
        self.kill();
        if self.inline_drop {
            remove_tree(&self.path);
            self.limits.remove();
            return;
        }
        self.hand_over();
    }
}

impl CommandCgroup {
    /// Hands a settled cgroup to the spawner thread that made it, to be
    /// removed there ([`CommandCgroup::remove`]: cgroupfs blocks on the
    /// kernel's cgroup mutex, no runtime thread waits for it, and that
    /// thread has left the command's v1 cgroups by then). Where that
    /// thread is gone, it is removed in place.
    pub(crate) fn hand_back(mut self) {
        self.hand_over();
    }

    /// Moves everything into a copy that removes itself in place when
    /// dropped, and hands that copy over; `self` is left with nothing to
    /// do.
    fn hand_over(&mut self) {
        let handed = CommandCgroup {
            path: std::mem::take(&mut self.path),
            dir: std::mem::take(&mut self.dir),
            procs: std::mem::take(&mut self.procs),
            limits: std::mem::replace(&mut self.limits, CommandLimits::empty()),
            hand_off: self.hand_off.clone(),
            inline_drop: true,
        };
        (self.hand_off.0)(handed);
    }
}

/// Writes `1` to `dir`'s `cgroup.kill`; a failure is logged.
fn write_kill(dir: &Path) {
    if let Err(err) = File::options()
        .write(true)
        .open(dir.join("cgroup.kill"))
        .and_then(|mut f| f.write_all(b"1"))
    {
        tracing::warn!(%err, cgroup = %dir.display(), "cgroup.kill failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_and_own_path() {
        let mountinfo = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                         35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mountinfo),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount("1 2 3:4 / / rw - ext4 /dev/vda rw"), None);
        assert_eq!(
            own_cgroup("4:memory:/x\n0::/user.slice/session-1.scope\n"),
            Some("user.slice/session-1.scope".to_owned())
        );
        assert_eq!(own_cgroup("0::/\n"), Some(String::new()));
        assert!(populated("populated 1\nfrozen 0\n"));
        assert!(!populated("populated 0\nfrozen 0\n"));
    }

    /// Defect 4: the first command (or executor) no longer waits for the
    /// sweep of dead hosts' cgroups, which can take a second per stale
    /// one: making the host's own parent touches none of them; the sweep,
    /// run apart, kills and removes them.
    #[test]
    fn making_the_host_cgroup_leaves_the_sweep_to_its_own_thread() {
        let host = match CgroupHost::create() {
            Ok(host) => host,
            Err(why) => {
                let required = std::env::var("DSH_TEST_REQUIRE_LIMITS").is_ok_and(|v| v == "1");
                assert!(!required, "DSH_TEST_REQUIRE_LIMITS=1 but no host cgroup: {why}");
                eprintln!("SKIPPED: no writable cgroup2 with cgroup.kill here: {why}");
                return;
            }
        };
        let dead = (4_100_000..4_200_000)
            .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            .unwrap_or(4_199_999);
        let stale = host.base.join(format!("dsh-bash-{dead}"));
        fs::create_dir_all(&stale).unwrap();
        let mut survivor = std::process::Command::new("sleep").arg("600").spawn().unwrap();
        fs::write(stale.join("cgroup.procs"), survivor.id().to_string()).unwrap();
        // A second host made now (as a restarted server would) leaves it.
        let again = CgroupHost::create();
        let untouched = survivor.try_wait().unwrap().is_none() && stale.exists();
        host.sweep_dead();
        // The sweep waited for it to empty: our child is a zombie by now.
        let swept = survivor.try_wait().unwrap().is_some();
        if !swept {
            let _ = survivor.kill();
        }
        let _ = survivor.wait();
        let _ = fs::remove_dir(&stale);
        drop(again);
        let _ = fs::remove_dir(&host.dir);
        assert!(untouched, "making a host cgroup swept a dead host's cgroup on the caller's thread");
        assert!(swept, "the sweep left a dead host's process running");
        assert!(!stale.exists(), "the sweep left a dead host's cgroup");
    }
}
