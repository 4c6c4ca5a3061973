//! Containment: finding and stopping every process a command started.
//!
//! The shell is a child subreaper (see [`crate::sys::contain_child`]), so
//! while it lives every descendant, including one that called `setsid` or
//! double-forked, is reachable from it through parent links. Stopping a
//! tree:
//!
//! 1. **freeze**: SIGSTOP the root, then repeatedly scan `/proc` and SIGSTOP
//!    every process whose parent is already frozen or whose process group is
//!    the command's, until two scans in a row find nobody new. A frozen
//!    process can neither fork nor exit, so nothing escapes during the walk.
//!    Every member is held by a pidfd, so no signal can hit a recycled pid;
//! 2. **terminate**: SIGTERM every member and the group, then SIGCONT them;
//! 3. **grace**: wait until every member has exited, at most the grace;
//! 4. **kill**: freeze again (catching what the survivors forked meanwhile)
//!    and SIGKILL everything.

use std::collections::HashSet;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::sys;

/// One line of `/proc/<pid>/stat`, the fields we need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcEntry {
    pub(crate) pid: libc::pid_t,
    pub(crate) ppid: libc::pid_t,
    pub(crate) pgrp: libc::pid_t,
    /// True if and only if the process has exited (a zombie awaiting its reaper).
    pub(crate) exited: bool,
}

/// Parses `/proc/<pid>/stat` (the command name may contain spaces and parens).
pub(crate) fn parse_stat(pid: libc::pid_t, stat: &str) -> Option<ProcEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(ProcEntry {
        pid,
        ppid,
        pgrp,
        exited: matches!(state, "Z" | "X"),
    })
}

/// Every process visible in `/proc` (those that vanish mid-scan are skipped).
pub(crate) fn scan() -> Vec<ProcEntry> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let pid: libc::pid_t = entry.file_name().to_str()?.parse().ok()?;
        let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
        parse_stat(pid, &stat)
    })
    .collect()
}

/// The processes of one command tree, each held by a pidfd.
#[derive(Debug, Default)]
pub(crate) struct Members {
    pids: HashSet<libc::pid_t>,
    fds: Vec<OwnedFd>,
}

impl Members {
    pub(crate) fn len(&self) -> usize {
        self.fds.len()
    }

    fn signal_all(&self, signal: libc::c_int) {
        for fd in &self.fds {
            sys::pidfd_signal(fd.as_fd(), signal);
        }
    }
}

/// What a freeze starts from: the root (if it may still be alive) and the
/// command's process group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tree {
    /// The shell's pid; it is also the process group id.
    pub(crate) pgid: libc::pid_t,
    /// Whether to walk from the shell (false once it has been reaped).
    pub(crate) from_root: bool,
}

/// Freezes every process of `tree` not yet in `members` and adds it there.
/// Blocking (reads `/proc`); run it off the async threads.
pub(crate) fn freeze(tree: Tree, root: Option<&OwnedFd>, members: &mut Members) {
    if let Some(root) = root {
        sys::pidfd_signal(root.as_fd(), libc::SIGSTOP);
    }
    // Members found by an earlier freeze may have been continued since.
    members.signal_all(libc::SIGSTOP);
    let mut quiet_scans = 0;
    while quiet_scans < 2 {
        let mut added = false;
        for entry in scan() {
            // Zombies cannot run, fork or hold anything: nothing to stop.
            if entry.exited || entry.pid == tree.pgid || members.pids.contains(&entry.pid) {
                continue;
            }
            let ours = entry.pgrp == tree.pgid
                || (tree.from_root && entry.ppid == tree.pgid)
                || members.pids.contains(&entry.ppid);
            if !ours {
                continue;
            }
            let Ok(fd) = sys::pidfd_open(entry.pid) else {
                continue;
            };
            sys::pidfd_signal(fd.as_fd(), libc::SIGSTOP);
            members.pids.insert(entry.pid);
            members.fds.push(fd);
            added = true;
        }
        quiet_scans = if added { 0 } else { quiet_scans + 1 };
    }
}

/// Waits until the process behind `fd` has exited.
pub(crate) async fn exited(fd: &AsyncFd<OwnedFd>) {
    // A pidfd polls readable once its process has exited; an error means the
    // fd cannot be polled at all, which we treat as gone.
    let _ = fd.readable().await.map(|mut guard| guard.retain_ready());
}

async fn all_exited(fds: &[AsyncFd<OwnedFd>]) {
    for fd in fds {
        exited(fd).await;
    }
}

fn watchable(fds: &Members) -> Vec<AsyncFd<OwnedFd>> {
    fds.fds
        .iter()
        .filter_map(|fd| fd.try_clone().ok())
        .filter_map(|fd| sys::readable_fd(fd).ok())
        .collect()
}

/// A tree being stopped: frozen, with its members known.
#[derive(Debug)]
pub(crate) struct Stopping {
    tree: Tree,
    root: Option<OwnedFd>,
    members: Members,
}

impl Stopping {
    /// Freezes the tree (step 1). Runs the `/proc` walk on a blocking thread.
    pub(crate) async fn freeze(tree: Tree, root: Option<OwnedFd>) -> Stopping {
        let frozen = tokio::task::spawn_blocking(move || {
            let mut members = Members::default();
            freeze(tree, root.as_ref(), &mut members);
            Stopping {
                tree,
                root,
                members,
            }
        })
        .await;
        match frozen {
            Ok(stopping) => stopping,
            Err(err) => {
                tracing::error!(%err, "freezing a process tree failed; falling back to the group");
                Stopping {
                    tree,
                    root: None,
                    members: Members::default(),
                }
            }
        }
    }

    /// How many processes besides the root were found.
    pub(crate) fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Steps 2–4: SIGTERM, wait up to `grace`, then SIGKILL what is left.
    /// Returns once every member has exited.
    pub(crate) async fn finish(mut self, grace: Duration) {
        self.send(libc::SIGTERM);
        self.send(libc::SIGCONT);
        let mut watched = watchable(&self.members);
        let root_watch = self
            .root
            .as_ref()
            .and_then(|fd| fd.try_clone().ok())
            .and_then(|fd| sys::readable_fd(fd).ok());
        let everything_exited = async {
            if let Some(root) = &root_watch {
                exited(root).await;
            }
            all_exited(&watched).await;
        };
        if tokio::time::timeout(grace, everything_exited).await.is_ok()
            && !sys::group_alive(self.tree.pgid)
        {
            return;
        }
        // Survivors: freeze again (their new children too) and kill.
        let tree = self.tree;
        let refrozen = tokio::task::spawn_blocking(move || {
            freeze(tree, self.root.as_ref(), &mut self.members);
            self
        })
        .await;
        let Ok(stopping) = refrozen else {
            sys::signal_group(tree.pgid, libc::SIGKILL);
            return;
        };
        stopping.send(libc::SIGKILL);
        watched = watchable(&stopping.members);
        // SIGKILL cannot be caught; the bound only guards against processes
        // stuck in uninterruptible sleep.
        if tokio::time::timeout(Duration::from_secs(10), all_exited(&watched))
            .await
            .is_err()
        {
            tracing::warn!(pgid = tree.pgid, "processes survived SIGKILL for 10 s");
        }
    }

    fn send(&self, signal: libc::c_int) {
        if let Some(root) = &self.root {
            sys::pidfd_signal(root.as_fd(), signal);
        }
        self.members.signal_all(signal);
        sys::signal_group(self.tree.pgid, signal);
    }
}

impl Drop for Stopping {
    /// A stop abandoned half-way (its runtime shut down) still kills: no
    /// member may outlive it. After a completed stop this is a no-op.
    fn drop(&mut self) {
        if let Some(root) = &self.root {
            sys::pidfd_signal(root.as_fd(), libc::SIGKILL);
        }
        self.members.signal_all(libc::SIGKILL);
    }
}

/// Kills a whole tree synchronously, without a grace: for a supervisor that
/// is dropped before its command ended. Blocking (reads `/proc`).
pub(crate) fn kill_now(pgid: libc::pid_t, root: &OwnedFd) {
    let mut members = Members::default();
    freeze(
        Tree {
            pgid,
            from_root: true,
        },
        Some(root),
        &mut members,
    );
    sys::pidfd_signal(root.as_fd(), libc::SIGKILL);
    members.signal_all(libc::SIGKILL);
    sys::signal_group(pgid, libc::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_the_name() {
        let entry = parse_stat(42, "42 (we ird) (x) S 7 42 42 0 -1 4194560").unwrap();
        assert_eq!(
            entry,
            ProcEntry {
                pid: 42,
                ppid: 7,
                pgrp: 42,
                exited: false,
            }
        );
        assert!(parse_stat(9, "9 (sh) Z 1 9 9 0").unwrap().exited);
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn scan_sees_this_process() {
        let me = libc::pid_t::try_from(std::process::id()).unwrap();
        assert!(scan().iter().any(|entry| entry.pid == me));
    }
}
