//! Resource limits per command, applied by the strongest mechanism the host
//! has, chosen once with the host's parent cgroup (see `cgroup.rs`):
//!
//! - **cgroup v2 controllers** where the host's parent cgroup can have them
//!   (`pids`, `memory`, `cpu` enabled in its `cgroup.subtree_control`, and,
//!   where they are not yet available to it, in its own parent's when we
//!   may): each command's cgroup gets `pids.max`, `memory.max` with
//!   `memory.swap.max` 0 (swap included in the limit) and `cpu.max` before
//!   its first process is cloned into it;
//! - **the v1 hierarchies of a hybrid host** (`/sys/fs/cgroup/pids`,
//!   `memory`, `cpu`) for the kinds v2 lacks: a parent `dsh-bash-<pid>`
//!   beside the host's own cgroup in each, a `cmd-<n>` per command (the
//!   command's first process joins them before exec), removed with the
//!   command's v2 cgroup;
//! - **`setrlimit`** in the command's first process where no cgroup
//!   controller is available: `RLIMIT_DATA` for memory (per process; not
//!   `RLIMIT_AS`, which runtimes that reserve address space would hit), no
//!   process limit (`RLIMIT_NPROC` counts every process of the user, the
//!   host's threads included) and no CPU limit.
//!
//! A configured limit no mechanism applied is named in the result's
//! `missing` (`partial: true`), never silently absent. Whether a limit was
//! hit is read from the kernel's own counters (`memory.events` `oom_kill`,
//! `memory.oom_control` `oom_kill` on v1, `pids.events` `max`), never
//! guessed from a SIGKILL.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dsh_bash::{BashLimits, LimitMechanism};

use crate::config::ResourceLimits;

/// A kind of limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Processes,
    Memory,
    Cpu,
}

/// What `missing` says when memory is held by `RLIMIT_DATA`, which does not
/// count shared memory.
const SHARED_MEMORY: &str = "shared-memory";

impl Kind {
    const ALL: [Kind; 3] = [Kind::Processes, Kind::Memory, Kind::Cpu];

    /// The cgroup controller that enforces it.
    fn controller(self) -> &'static str {
        match self {
            Kind::Processes => "pids",
            Kind::Memory => "memory",
            Kind::Cpu => "cpu",
        }
    }

    /// Its name in a result's `missing`.
    fn name(self) -> &'static str {
        match self {
            Kind::Processes => "processes",
            Kind::Memory => "memory",
            Kind::Cpu => "cpu",
        }
    }

    fn wanted(self, limits: &ResourceLimits) -> bool {
        match self {
            Kind::Processes => limits.processes.is_some(),
            Kind::Memory => limits.memory_bytes.is_some(),
            Kind::Cpu => limits.cpu_millicores.is_some(),
        }
    }

    /// The files and values that set `limits` of this kind in a cgroup of
    /// this `version`, in the order to write them; the first must succeed,
    /// the others are best effort (`memory.swap.max` and
    /// `memory.memsw.limit_in_bytes` exist only with swap accounting).
    fn settings(self, limits: &ResourceLimits, v1: bool) -> Vec<(&'static str, String)> {
        match (self, v1) {
            (Kind::Processes, _) => limits
                .processes
                .map(|n| vec![("pids.max", n.to_string())])
                .unwrap_or_default(),
            (Kind::Memory, false) => limits
                .memory_bytes
                .map(|b| vec![("memory.max", b.to_string()), ("memory.swap.max", "0".into())])
                .unwrap_or_default(),
            (Kind::Memory, true) => limits
                .memory_bytes
                .map(|b| {
                    vec![
                        ("memory.limit_in_bytes", b.to_string()),
                        ("memory.memsw.limit_in_bytes", b.to_string()),
                    ]
                })
                .unwrap_or_default(),
            (Kind::Cpu, false) => limits
                .cpu_millicores
                .map(|m| vec![("cpu.max", format!("{} {PERIOD_US}", cpu_quota_us(m)))])
                .unwrap_or_default(),
            (Kind::Cpu, true) => limits
                .cpu_millicores
                .map(|m| {
                    vec![
                        ("cpu.cfs_quota_us", cpu_quota_us(m).to_string()),
                        ("cpu.cfs_period_us", PERIOD_US.to_string()),
                    ]
                })
                .unwrap_or_default(),
        }
    }
}

/// The CPU quota period, in microseconds.
const PERIOD_US: u64 = 100_000;

/// Microseconds of CPU per period for `millicores` (at least the kernel's
/// minimum of 1 ms).
fn cpu_quota_us(millicores: u32) -> u64 {
    (u64::from(millicores) * PERIOD_US / 1000).max(1000)
}

/// Where the host can apply each kind of limit.
#[derive(Debug, Default)]
pub(crate) struct LimitHost {
    /// Controllers enabled for the command cgroups under the host's v2
    /// parent.
    v2: Vec<Kind>,
    /// The host's parent cgroup in the v1 hierarchy of each kind v2 lacks.
    v1: Vec<(Kind, PathBuf)>,
    /// Numbers the places prepared on the v1 hierarchies.
    places: std::sync::atomic::AtomicU64,
}

/// The next command's cgroups on the v1 hierarchies, made ahead of it by a
/// spawner thread that already sits in them: a child it clones starts
/// inside (cgroup membership is inherited at fork), so no command waits
/// for a migration (which on v1 takes the cgroup-wide write lock and an
/// RCU grace period, about 10 ms when commands come seconds apart). Until
/// the thread moves on to the next place, right after the clone, it is
/// counted in the command's `pids.current`.
#[derive(Debug)]
pub(crate) struct Place {
    dirs: Vec<(Kind, PathBuf)>,
}

impl Place {
    /// Its `pids` cgroup, if it has one.
    pub(crate) fn processes(&self) -> Option<PathBuf> {
        self.dirs
            .iter()
            .find(|(kind, _)| *kind == Kind::Processes)
            .map(|(_, dir)| dir.clone())
    }
}

/// Sets a `pids` cgroup's limit (after the spawner thread left it).
pub(crate) fn set_processes(dir: &Path, processes: u64) {
    if let Err(err) = fs::write(dir.join("pids.max"), processes.to_string()) {
        tracing::debug!(%err, dir = %dir.display(), "cannot lower a command's pids.max to its limit");
    }
}

impl LimitHost {
    /// Finds the mechanisms for a host whose v2 parent cgroup is `parent`
    /// (made by this host, below `base`): enables what v2 controllers it
    /// can, then makes its parents on the v1 hierarchies for the rest.
    /// Blocking (cgroupfs).
    pub(crate) fn find(base: &Path, parent: &Path) -> LimitHost {
        let v2 = enable_v2(base, parent);
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let v1 = Kind::ALL
            .into_iter()
            .filter(|kind| !v2.contains(kind))
            .filter_map(|kind| {
                let base = v1_base(&mountinfo, &own, kind.controller())?;
                sweep_v1(&base);
                let dir = base.join(crate::cgroupfs::host_dir_name());
                match fs::create_dir(&dir) {
                    Ok(()) => Some((kind, dir)),
                    Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                        Some((kind, dir))
                    }
                    Err(err) => {
                        tracing::debug!(%err, dir = %dir.display(), "no {} limit through cgroup v1", kind.name());
                        None
                    }
                }
            })
            .collect();
        LimitHost {
            v2,
            v1,
            places: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Makes the next place on the v1 hierarchies and moves the calling
    /// thread (a spawner) into it, out of whatever place it was in;
    /// `None` where there are no v1 limits (or making it failed: the
    /// thread is moved back to the host's parents then). Blocking.
    pub(crate) fn prepare(&self) -> Option<Place> {
        if self.v1.is_empty() {
            return None;
        }
        let n = self.places.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tid = rustix::thread::gettid().as_raw_nonzero().to_string();
        let mut dirs: Vec<(Kind, PathBuf)> = Vec::with_capacity(self.v1.len());
        for (kind, parent) in &self.v1 {
            let dir = parent.join(format!("place-{n}"));
            let made = fs::create_dir(&dir).and_then(|()| fs::write(dir.join("tasks"), &tid));
            if let Err(err) = made {
                tracing::debug!(%err, dir = %dir.display(), "cannot prepare a command's v1 cgroup; the command will join it itself");
                self.home();
                remove_v1(&dir);
                for (_, made) in &dirs {
                    remove_v1(made);
                }
                return None;
            }
            dirs.push((*kind, dir));
        }
        Some(Place { dirs })
    }

    /// Leaves `place` unused: the calling thread moves home and its
    /// cgroups are removed. Blocking.
    pub(crate) fn discard(&self, place: Place) {
        self.home();
        for (_, dir) in place.dirs {
            remove_v1(&dir);
        }
    }

    /// Moves the calling thread back to the host's own v1 parents (a
    /// process-tree command must not start inside a place). Blocking.
    pub(crate) fn home(&self) {
        let tid = rustix::thread::gettid().as_raw_nonzero().to_string();
        for (_, parent) in &self.v1 {
            let _ = fs::write(parent.join("tasks"), &tid);
        }
    }

    /// The v1 parents, for the watchdog and removal at exit.
    pub(crate) fn v1_parents(&self) -> impl Iterator<Item = &Path> {
        self.v1.iter().map(|(_, dir)| dir.as_path())
    }

    /// Applies `limits` to the command cgroup `v2_dir` (named `name`) and
    /// its v1 cgroups: those of `place` (where the spawning thread sits),
    /// else new ones its first process joins. Blocking (cgroupfs).
    pub(crate) fn apply(
        &self,
        limits: &ResourceLimits,
        (v2_dir, name): (&Path, &str),
        mut place: Option<Place>,
    ) -> CommandLimits {
        let mut command = CommandLimits::new(*limits);
        command.v2_dir = Some(v2_dir.to_owned());
        for kind in Kind::ALL.into_iter().filter(|k| k.wanted(limits)) {
            if self.v2.contains(&kind) && write_settings(v2_dir, &kind.settings(limits, false)) {
                command.applied(kind, LimitMechanism::CgroupV2);
                continue;
            }
            let placed = place.as_mut().and_then(|place| {
                let at = place.dirs.iter().position(|(k, _)| *k == kind)?;
                Some(place.dirs.swap_remove(at).1)
            });
            if let Some(dir) = placed {
                // Kept (and removed with the command) even should the
                // limit not take: the command starts inside it. The
                // spawning thread counts in it until it moves on (the
                // spawner lowers the limit then).
                let mut inside = *limits;
                inside.processes = limits.processes.map(|n| n.saturating_add(1));
                if write_settings(&dir, &kind.settings(&inside, true)) {
                    command.applied(kind, LimitMechanism::CgroupV1);
                }
                command.v1.push((kind, dir));
                continue;
            }
            let Some((_, parent)) = self.v1.iter().find(|(k, _)| *k == kind) else {
                continue;
            };
            let dir = parent.join(name);
            if fs::create_dir(&dir).is_err() {
                continue;
            }
            let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes());
            match procs {
                Ok(procs) if write_settings(&dir, &kind.settings(limits, true)) => {
                    command.procs.push(procs);
                    command.v1.push((kind, dir));
                    command.applied(kind, LimitMechanism::CgroupV1);
                }
                _ => remove_v1(&dir),
            }
        }
        // What the place holds beyond the configured limits (a kind set
        // to none) stays with the command too: it starts inside them.
        if let Some(place) = place {
            command.v1.extend(place.dirs);
        }
        command.fall_back_to_rlimits();
        command
    }
}

/// What enforces one command's limits, and where their counters are.
#[derive(Debug)]
pub(crate) struct CommandLimits {
    limits: ResourceLimits,
    /// The kinds applied, each with its mechanism.
    applied: Vec<(Kind, LimitMechanism)>,
    v2_dir: Option<PathBuf>,
    v1: Vec<(Kind, PathBuf)>,
    /// The v1 `cgroup.procs` files the command's first process writes `0`
    /// to before exec.
    pub(crate) procs: Vec<CString>,
    /// `RLIMIT_DATA` for the command's first process, where no controller
    /// limits its memory.
    pub(crate) memory_rlimit: Option<u64>,
}

impl CommandLimits {
    /// No limits and no cgroups (what a handed-off cgroup leaves behind).
    pub(crate) fn empty() -> CommandLimits {
        CommandLimits::new(ResourceLimits::NONE)
    }

    fn new(limits: ResourceLimits) -> CommandLimits {
        CommandLimits {
            limits,
            applied: Vec::new(),
            v2_dir: None,
            v1: Vec::new(),
            procs: Vec::new(),
            memory_rlimit: None,
        }
    }

    /// The limits of a command no cgroup holds: `setrlimit` only.
    pub(crate) fn without_cgroup(limits: ResourceLimits) -> CommandLimits {
        let mut command = CommandLimits::new(limits);
        command.fall_back_to_rlimits();
        command
    }

    fn applied(&mut self, kind: Kind, mechanism: LimitMechanism) {
        self.applied.push((kind, mechanism));
    }

    fn has(&self, kind: Kind) -> bool {
        self.applied.iter().any(|(k, _)| *k == kind)
    }

    /// Memory no controller limits gets `RLIMIT_DATA` (per process).
    fn fall_back_to_rlimits(&mut self) {
        if let (Some(bytes), false) = (self.limits.memory_bytes, self.has(Kind::Memory)) {
            self.memory_rlimit = Some(bytes);
            self.applied(Kind::Memory, LimitMechanism::Rlimit);
        }
    }

    /// The facts: what applied, what is missing, and whether a limit was
    /// hit (read from the kernel's counters now). `None` when no limit is
    /// configured.
    pub(crate) fn facts(&self) -> Option<BashLimits> {
        if self.limits.is_none() {
            return None;
        }
        let mechanism = [LimitMechanism::CgroupV2, LimitMechanism::CgroupV1]
            .into_iter()
            .find(|m| self.applied.iter().any(|(_, used)| used == m))
            .unwrap_or(LimitMechanism::Rlimit);
        let mut missing: Vec<String> = Kind::ALL
            .into_iter()
            .filter(|kind| kind.wanted(&self.limits) && !self.has(*kind))
            .map(|kind| kind.name().to_owned())
            .collect();
        // `RLIMIT_DATA` counts a process's private memory only: shared
        // memory (a memfd, POSIX or SysV shm, a shared mapping) is not
        // held to the limit.
        let by_rlimit = (Kind::Memory, LimitMechanism::Rlimit);
        if self.applied.contains(&by_rlimit) {
            missing.push(SHARED_MEMORY.to_owned());
        }
        let applied = |kind: Kind| self.has(kind);
        Some(BashLimits {
            mechanism,
            processes: self.limits.processes.filter(|_| applied(Kind::Processes)),
            memory_bytes: self.limits.memory_bytes.filter(|_| applied(Kind::Memory)),
            cpu_millicores: self.limits.cpu_millicores.filter(|_| applied(Kind::Cpu)),
            partial: !missing.is_empty(),
            missing,
            oom_killed: self.counter(Kind::Memory, "oom_kill") > 0,
            process_limit_hit: self.counter(Kind::Processes, "max") > 0,
        })
    }

    /// The `name` counter of the cgroup that limits `kind` (0 if none).
    fn counter(&self, kind: Kind, name: &str) -> u64 {
        let file = match self.applied.iter().find(|(k, _)| *k == kind) {
            Some((Kind::Memory, LimitMechanism::CgroupV2)) => {
                self.v2_dir.as_ref().map(|d| d.join("memory.events"))
            }
            Some((Kind::Processes, LimitMechanism::CgroupV2)) => {
                self.v2_dir.as_ref().map(|d| d.join("pids.events"))
            }
            Some((Kind::Memory, LimitMechanism::CgroupV1)) => self.v1_dir(kind).map(|d| d.join("memory.oom_control")),
            Some((Kind::Processes, LimitMechanism::CgroupV1)) => {
                self.v1_dir(kind).map(|d| d.join("pids.events"))
            }
            _ => None,
        };
        file.and_then(|file| fs::read_to_string(file).ok())
            .map_or(0, |text| flat_keyed(&text, name))
    }

    fn v1_dir(&self, kind: Kind) -> Option<&Path> {
        self.v1.iter().find(|(k, _)| *k == kind).map(|(_, d)| d.as_path())
    }

    /// Removes the command's v1 cgroups (its processes are gone).
    /// Blocking (cgroupfs).
    pub(crate) fn remove(&mut self) {
        for (_, dir) in self.v1.drain(..) {
            remove_v1(&dir);
        }
    }
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines).
fn flat_keyed(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|line| {
            let (k, v) = line.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0)
}

/// Writes each setting into `dir`; true if the first (the limit itself)
/// took.
fn write_settings(dir: &Path, settings: &[(&str, String)]) -> bool {
    let mut settings = settings.iter();
    let Some((file, value)) = settings.next() else {
        return false;
    };
    if let Err(err) = fs::write(dir.join(file), value) {
        tracing::debug!(%err, "cannot set {file} in {}", dir.display());
        return false;
    }
    for (file, value) in settings {
        let _ = fs::write(dir.join(file), value);
    }
    true
}

/// Enables the `pids`, `memory` and `cpu` controllers for the children of
/// `parent` (a cgroup with no process of its own), first making them
/// available to it through `base` where they are not (which the kernel
/// allows only where `base` is the root or holds no process itself).
/// Returns the kinds enabled.
fn enable_v2(base: &Path, parent: &Path) -> Vec<Kind> {
    let available = |dir: &Path| fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let missing: Vec<&str> = Kind::ALL
        .iter()
        .map(|k| k.controller())
        .filter(|c| !available(parent).split_whitespace().any(|a| a == *c))
        .collect();
    for controller in missing {
        if available(base).split_whitespace().any(|a| a == controller) {
            let _ = fs::write(base.join("cgroup.subtree_control"), format!("+{controller}"));
        }
    }
    let now = available(parent);
    for controller in now.split_whitespace() {
        if Kind::ALL.iter().any(|k| k.controller() == controller) {
            let _ = fs::write(parent.join("cgroup.subtree_control"), format!("+{controller}"));
        }
    }
    let enabled = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    Kind::ALL
        .into_iter()
        .filter(|k| enabled.split_whitespace().any(|c| c == k.controller()))
        .collect()
}

/// This process's cgroup in the v1 hierarchy of `controller`: the mount
/// point (from `mountinfo`, a `cgroup` file system with the controller in
/// its options) joined with the path `/proc/self/cgroup` gives, relative
/// to the part of the hierarchy mounted there.
fn v1_base(mountinfo: &str, own: &str, controller: &str) -> Option<PathBuf> {
    let (root, mount) = mountinfo.lines().find_map(|line| {
        let (fields, rest) = line.split_once(" - ")?;
        let mut rest = rest.split_whitespace();
        if rest.next()? != "cgroup" {
            return None;
        }
        let options = rest.nth(1)?;
        if !options.split(',').any(|o| o == controller) {
            return None;
        }
        let mut fields = fields.split_whitespace();
        let root = fields.nth(3)?;
        let mount = fields.next()?;
        Some((root.to_owned(), PathBuf::from(mount)))
    })?;
    let path = own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_owned())
    })?;
    let relative = path.strip_prefix(root.trim_end_matches('/')).unwrap_or(&path);
    Some(mount.join(relative.trim_start_matches('/')))
}

/// Removes a v1 cgroup, retrying briefly while its last processes finish
/// leaving it.
fn remove_v1(dir: &Path) {
    for _ in 0..20 {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
    tracing::debug!(dir = %dir.display(), "a command's v1 cgroup is still busy; the next host's sweep removes it");
}

/// Removes the v1 parents of hosts that died (their processes were killed
/// through their v2 cgroup; one still inside, in any command's cgroup, is
/// killed by pid first).
fn sweep_v1(base: &Path) {
    for (_, dir) in crate::cgroupfs::dead_hosts(base) {
        for command in fs::read_dir(&dir).into_iter().flatten().filter_map(Result::ok) {
            if command.file_type().is_ok_and(|t| t.is_dir()) {
                crate::cgroupfs::kill_members(&command.path());
                remove_v1(&command.path());
            }
        }
        crate::cgroupfs::kill_members(&dir);
        remove_v1(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_v1_hierarchies_and_own_paths() {
        let mountinfo = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                         36 31 0:33 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                         37 31 0:34 /outer /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
                         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let own = "8:pids:/outer/job\n4:memory:/process_api/59a9\n1:cpu,cpuacct:/\n0::/\n";
        assert_eq!(
            v1_base(mountinfo, own, "memory"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/59a9"))
        );
        assert_eq!(
            v1_base(mountinfo, own, "cpu"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/"))
        );
        assert_eq!(
            v1_base(mountinfo, own, "pids"),
            Some(PathBuf::from("/sys/fs/cgroup/pids/job"))
        );
        assert_eq!(v1_base(mountinfo, own, "blkio"), None);
    }

    #[test]
    fn settings_per_version_and_counters() {
        let limits = ResourceLimits {
            processes: Some(200),
            memory_bytes: Some(256 << 20),
            cpu_millicores: Some(500),
        };
        assert_eq!(
            Kind::Memory.settings(&limits, false),
            vec![("memory.max", "268435456".into()), ("memory.swap.max", "0".into())]
        );
        assert_eq!(
            Kind::Cpu.settings(&limits, false),
            vec![("cpu.max", "50000 100000".into())]
        );
        assert_eq!(
            Kind::Cpu.settings(&limits, true),
            vec![("cpu.cfs_quota_us", "50000".into()), ("cpu.cfs_period_us", "100000".into())]
        );
        assert_eq!(Kind::Processes.settings(&ResourceLimits::NONE, true), Vec::new());
        assert_eq!(flat_keyed("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n", "oom_kill"), 1);
        assert_eq!(flat_keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill"), 2);
        assert_eq!(flat_keyed("max 0\n", "max"), 0);
        assert_eq!(flat_keyed("", "max"), 0);
    }

    #[test]
    fn without_a_cgroup_memory_is_an_rlimit_and_the_rest_is_missing() {
        let limits = ResourceLimits {
            processes: Some(200),
            memory_bytes: Some(256 << 20),
            cpu_millicores: None,
        };
        let command = CommandLimits::without_cgroup(limits);
        assert_eq!(command.memory_rlimit, Some(256 << 20));
        let facts = command.facts().unwrap();
        assert_eq!(facts.mechanism, LimitMechanism::Rlimit);
        assert_eq!(facts.processes, None);
        assert_eq!(facts.memory_bytes, Some(256 << 20));
        assert!(facts.partial);
        // Memory is held per process, and not for shared memory.
        assert_eq!(
            facts.missing,
            vec!["processes".to_owned(), "shared-memory".to_owned()]
        );
        assert!(CommandLimits::without_cgroup(ResourceLimits::NONE).facts().is_none());
    }
}
