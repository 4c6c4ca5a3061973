//! cgroupfs as a file system: the host directories' names, who is in a
//! cgroup, signalling and killing them, removing a tree. What the
//! command cgroups (`cgroup.rs`) and the limits' v1 hierarchies
//! (`limits.rs`) both do, neither through the other.

use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::scratch::Owner;
use crate::sys;

/// The name of this host's parent cgroup under a hierarchy's base:
/// `dsh-bash-<owner>` ([`Owner`]).
pub(crate) fn host_dir_name() -> String {
    format!("dsh-bash-{}", crate::scratch::owner_tag())
}

/// The host a parent cgroup's name records: `dsh-bash-<owner>`, or an
/// older host's `dsh-bash-<pid>` (start unknown: 0).
fn host_of(name: &str) -> Option<Owner> {
    let owner = name.strip_prefix("dsh-bash-")?;
    Owner::parse(owner).or_else(|| {
        Some(Owner {
            pid: owner.parse().ok()?,
            start: 0,
            namespace: None,
        })
    })
}

/// The parents under `base` of hosts that are no longer running, with
/// their pids; v2 and v1 hierarchies alike. A host is dead only if it is
/// proven dead ([`Owner::alive_seen_from`]): a host of another pid namespace never
/// is.
pub(crate) fn dead_hosts(base: &Path) -> Vec<(u32, PathBuf)> {
    let Ok(entries) = fs::read_dir(base) else {
        return Vec::new();
    };
    let here = crate::scratch::own_pid_namespace();
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let host = host_of(entry.file_name().to_str()?)?;
            (!host.alive_seen_from(here)).then(|| (host.pid, entry.path()))
        })
        .collect()
}

/// SIGKILLs every process listed in `dir`'s `cgroup.procs` (each through
/// a pidfd, so a pid that left and was recycled is not hit); how many.
pub(crate) fn kill_members(dir: &Path) -> usize {
    let mut killed = 0;
    for pid in fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
    {
        if let Ok(fd) = sys::pidfd_open(pid) {
            sys::pidfd_signal(fd.as_fd(), libc::SIGKILL);
            killed += 1;
        }
    }
    killed
}

/// Every pid in the cgroup at `dir` and in its descendants (a command may
/// make sub-cgroups of its own and move processes there).
pub(crate) fn pids_below(dir: &Path) -> Vec<libc::pid_t> {
    let mut pids: Vec<libc::pid_t> = fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.filter_map(Result::ok) {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pids.extend(pids_below(&entry.path()));
            }
        }
    }
    pids
}

/// Sends `signals`, in order, to every process in the cgroup at `dir`,
/// each through a pidfd opened after it was listed and kept only if a
/// second listing still has it (a pid that left or was recycled in between
/// is skipped). Two listings in all, however many processes.
pub(crate) fn signal_all(dir: &Path, signals: &[libc::c_int]) {
    let held: Vec<(libc::pid_t, std::os::fd::OwnedFd)> = pids_below(dir)
        .into_iter()
        .filter_map(|pid| sys::pidfd_open(pid).ok().map(|fd| (pid, fd)))
        .collect();
    let still: std::collections::HashSet<libc::pid_t> = pids_below(dir).into_iter().collect();
    for (pid, fd) in &held {
        if still.contains(pid) {
            for signal in signals {
                sys::pidfd_signal(fd.as_fd(), *signal);
            }
        }
    }
}

/// Removes a (killed) cgroup directory and its children, deepest first.
pub(crate) fn remove_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.filter_map(Result::ok) {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

pub(crate) fn populated(events: &str) -> bool {
    events.lines().any(|line| line.trim() == "populated 1")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parent left by a host whose pid now names another process is a
    /// dead host's, swept; this host's own is alive; an older host's name
    /// (no start time) counts as alive while its pid exists; a host of
    /// another pid namespace is never taken for dead.
    #[test]
    fn a_dead_hosts_parent_is_known_by_pid_and_start() {
        let base = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let ours = Owner::this().namespace.expect("/proc shows the pid namespace");
        for name in [
            host_dir_name(),
            format!("dsh-bash-{me}.1"),
            format!("dsh-bash-{me}"),
            "dsh-bash-4194303".to_owned(),
            format!("dsh-bash-4194303.5.{ours}"),
            format!("dsh-bash-4194303.5.{}", ours + 1),
            "dsh-bash-x".to_owned(),
        ] {
            fs::create_dir(base.path().join(name)).unwrap();
        }
        let mut dead: Vec<String> = dead_hosts(base.path())
            .into_iter()
            .map(|(_, path)| path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        dead.sort();
        let mut expected = vec![
            "dsh-bash-4194303".to_owned(),
            format!("dsh-bash-{me}.1"),
            format!("dsh-bash-4194303.5.{ours}"),
        ];
        expected.sort();
        assert_eq!(dead, expected);
    }

    /// Every listed process gets the signals, through the two listings of a
    /// directory laid out as cgroupfs lays one out (a sub-cgroup too); a
    /// listed pid that is no process is skipped.
    #[test]
    fn signal_all_reaches_every_listed_process() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        let mut children: Vec<std::process::Child> = (0..3)
            .map(|_| std::process::Command::new("sleep").arg("30").spawn().unwrap())
            .collect();
        let pids: Vec<String> = children.iter().map(|c| c.id().to_string()).collect();
        fs::write(dir.path().join("cgroup.procs"), format!("{}\n{}\n999999999\n", pids[0], pids[1])).unwrap();
        fs::write(sub.join("cgroup.procs"), format!("{}\n", pids[2])).unwrap();
        signal_all(dir.path(), &[libc::SIGTERM]);
        for child in &mut children {
            let status = child.wait().unwrap();
            assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGTERM));
        }
    }
}
