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
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;

use crate::adopt::Adoption;
use crate::host::Host;
use crate::lifecycle::Emptied;
use crate::offload::Lane;

use crate::procfs::{scan, ProcEntry};
use crate::sys;

/// What a freeze needs from the system: a table of processes to scan, a
/// way to hold one (so a signal never reaches a recycled pid) and to signal
/// it. The real one is `/proc` + pidfds; tests use a scripted table.
pub(crate) trait ProcessTable {
    /// A held process.
    type Handle;
    /// Every process, as of now.
    fn scan(&mut self) -> Vec<ProcEntry>;
    /// Holds `pid` (fails, e.g., when out of descriptors).
    fn open(&mut self, pid: libc::pid_t) -> io::Result<Self::Handle>;
    /// Signals a held process.
    fn signal(&mut self, handle: &Self::Handle, signal: libc::c_int);
    /// Signals by pid: used only for a process that could not be held and
    /// whose parent is frozen, so it cannot be reaped and its pid cannot be
    /// recycled before the signal lands.
    fn signal_pid(&mut self, pid: libc::pid_t, signal: libc::c_int);
    /// True if and only if `entry` is an orphan the host adopted from
    /// `tree`'s command (see `adopt.rs`): a member whatever its group.
    fn adopted(&mut self, _entry: &ProcEntry, _tree: &Tree) -> bool {
        false
    }
}

/// The system's table: `/proc` and pidfds, with the host's adoption.
pub(crate) struct Proc<'a>(pub(crate) &'a Adoption);

impl ProcessTable for Proc<'_> {
    type Handle = OwnedFd;

    fn scan(&mut self) -> Vec<ProcEntry> {
        scan()
    }

    fn open(&mut self, pid: libc::pid_t) -> io::Result<OwnedFd> {
        sys::pidfd_open(pid)
    }

    fn signal(&mut self, handle: &OwnedFd, signal: libc::c_int) {
        sys::pidfd_signal(handle.as_fd(), signal);
    }

    fn signal_pid(&mut self, pid: libc::pid_t, signal: libc::c_int) {
        sys::signal_pid(pid, signal);
    }

    fn adopted(&mut self, entry: &ProcEntry, tree: &Tree) -> bool {
        self.0.adopted_by(entry, tree.pgid, tree.command)
    }
}

/// The processes of one command tree: each held by a handle where it could
/// be, by pid (under a frozen parent) where it could not.
#[derive(Debug)]
pub(crate) struct Members<H = OwnedFd> {
    pids: HashSet<libc::pid_t>,
    held: Vec<H>,
    unheld: Vec<libc::pid_t>,
}

impl<H> Default for Members<H> {
    fn default() -> Self {
        Members {
            pids: HashSet::new(),
            held: Vec::new(),
            unheld: Vec::new(),
        }
    }
}

impl<H> Members<H> {
    pub(crate) fn len(&self) -> usize {
        self.pids.len()
    }

    fn signal_all<T: ProcessTable<Handle = H>>(&self, table: &mut T, signal: libc::c_int) {
        for handle in &self.held {
            table.signal(handle, signal);
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
    /// Whether the process group is matched and signalled (false once it
    /// is empty and its number may be reused).
    pub(crate) group: bool,
    /// The command's number (`DSH_BASH_COMMAND`): which adopted orphans
    /// that left its session are its own.
    pub(crate) command: u64,
}

/// Freezes every process of `tree` not yet in `members` and adds it there.
/// Blocking (reads the table); run it off the async threads.
///
/// A process that cannot be held (no descriptor left) is still stopped, by
/// pid, when its parent is frozen (the root or a member): a stopped parent
/// cannot reap it, so its pid cannot be recycled. Otherwise it is logged.
pub(crate) fn freeze_in<T: ProcessTable>(
    table: &mut T,
    tree: Tree,
    root: Option<&T::Handle>,
    members: &mut Members<T::Handle>,
) {
    if let Some(root) = root {
        table.signal(root, libc::SIGSTOP);
    }
    // Members found by an earlier freeze may have been continued since.
    members.signal_all(table, libc::SIGSTOP);
    let mut quiet_scans = 0;
    while quiet_scans < 2 {
        let mut added = false;
        for entry in table.scan() {
            // Zombies cannot run, fork or hold anything: nothing to stop.
            if entry.exited || entry.pid == tree.pgid || members.pids.contains(&entry.pid) {
                continue;
            }
            // An orphan the host adopted is the host's child: a member
            // whatever its group (see `adopt.rs`).
            let parent_frozen = (tree.from_root && entry.ppid == tree.pgid)
                || members.pids.contains(&entry.ppid)
                || table.adopted(&entry, &tree);
            if !((tree.group && entry.pgrp == tree.pgid) || parent_frozen) {
                continue;
            }
            match table.open(entry.pid) {
                Ok(handle) => {
                    table.signal(&handle, libc::SIGSTOP);
                    members.held.push(handle);
                }
                Err(err) if table.adopted(&entry, &tree) => {
                    // The host is its parent and does not reap it while the
                    // scan holds the gate: killed now, by pid, while that
                    // pid is surely its own (later it may not be).
                    tracing::debug!(%err, pid = entry.pid, "cannot hold an adopted orphan; killing it by pid");
                    table.signal_pid(entry.pid, libc::SIGKILL);
                    members.pids.insert(entry.pid);
                    added = true;
                    continue;
                }
                Err(err) if parent_frozen => {
                    tracing::debug!(%err, pid = entry.pid, "cannot hold a process; stopping it by pid under its frozen parent");
                    table.signal_pid(entry.pid, libc::SIGSTOP);
                    members.unheld.push(entry.pid);
                }
                Err(err) => {
                    tracing::warn!(%err, pid = entry.pid, "cannot hold a process of a stopping tree; it may survive");
                    continue;
                }
            }
            members.pids.insert(entry.pid);
            added = true;
        }
        quiet_scans = if added { 0 } else { quiet_scans + 1 };
    }
}

/// [`freeze_in`] on the system's table (holding the adoption gate: no
/// spawn, no reaping while it classifies).
pub(crate) fn freeze(adoption: &Adoption, tree: Tree, root: Option<&OwnedFd>, members: &mut Members) {
    let _gate = adoption.enabled().then(|| adoption.scanning());
    freeze_in(&mut Proc(adoption), tree, root, members);
}

/// Kills what a freeze found: every held member, and every unheld one whose
/// parent is still frozen (so its pid is still its own).
pub(crate) fn kill_frozen<T: ProcessTable>(table: &mut T, members: &Members<T::Handle>) {
    members.signal_all(table, libc::SIGKILL);
    for pid in &members.unheld {
        table.signal_pid(*pid, libc::SIGKILL);
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

fn watchable(members: &Members) -> Vec<AsyncFd<OwnedFd>> {
    members
        .held
        .iter()
        .filter_map(|fd| fd.try_clone().ok())
        .filter_map(|fd| sys::readable_fd(fd).ok())
        .collect()
}

/// A tree being stopped: frozen, with its members known.
#[derive(Debug)]
pub(crate) struct Stopping {
    /// The host whose adoption and lanes the stop uses.
    host: Arc<Host>,
    tree: Tree,
    root: Option<OwnedFd>,
    members: Members,
    /// Whether the kill went out: only the members are waited for then.
    killed: bool,
}

impl Stopping {
    /// Freezes the tree (step 1): the root and the group at once, here
    /// (two syscalls: a bomb in the group stops forking now), then the
    /// `/proc` walk for what left the group, on a stop thread.
    pub(crate) async fn freeze(host: Arc<Host>, tree: Tree, root: Option<OwnedFd>) -> Stopping {
        if let Some(root) = &root {
            sys::pidfd_signal(root.as_fd(), libc::SIGSTOP);
        }
        if tree.group {
            sys::signal_group(tree.pgid, libc::SIGSTOP);
        }
        let walker = Arc::clone(&host);
        let frozen = host.lanes.run(Lane::Stop, move || {
            let mut members = Members::default();
            freeze(&walker.adoption, tree, root.as_ref(), &mut members);
            Stopping {
                host: walker,
                tree,
                root,
                members,
                killed: false,
            }
        })
        .await;
        match frozen {
            Ok(stopping) => stopping,
            Err(err) => {
                // Only when the stop threads never started (no command
                // spawns then) or the walk panicked: the group is killed.
                tracing::error!(%err, "freezing a process tree failed; killing its group");
                sys::signal_group(tree.pgid, libc::SIGKILL);
                Stopping {
                    host,
                    tree,
                    root: None,
                    members: Members::default(),
                    killed: false,
                }
            }
        }
    }

    /// How many processes besides the root were found.
    pub(crate) fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Step 2: SIGTERM and SIGCONT to everything (unheld members first,
    /// while every parent is still frozen).
    pub(crate) fn terminate(&self) {
        for signal in [libc::SIGTERM, libc::SIGCONT] {
            for pid in &self.members.unheld {
                sys::signal_pid(*pid, signal);
            }
        }
        self.send(libc::SIGTERM);
        self.send(libc::SIGCONT);
    }

    /// Completes once every member (and the root) has exited: with
    /// `Survivors` when, before the kill, something else is left (the
    /// group, or with adoption an orphan the shell left the host, such as
    /// one forked in its SIGTERM handler), to be frozen and killed.
    pub(crate) async fn gone(&self) -> Emptied {
        let watched = watchable(&self.members);
        let root = self
            .root
            .as_ref()
            .and_then(|fd| fd.try_clone().ok())
            .and_then(|fd| sys::readable_fd(fd).ok());
        if let Some(root) = &root {
            exited(root).await;
        }
        all_exited(&watched).await;
        if self.killed {
            return Emptied::All;
        }
        let group = self.tree.group && sys::group_alive(self.tree.pgid);
        let (pgid, command) = (self.tree.pgid, self.tree.command);
        let adoption = Arc::clone(&self.host.adoption);
        let orphans = !group
            && self
                .host
                .lanes
                .run(Lane::Stop, move || adoption.live_orphans_of(pgid, command))
                .await
            .map_or(true, |orphans| !orphans.is_empty());
        if group || orphans {
            Emptied::Survivors
        } else {
            Emptied::All
        }
    }

    /// Steps 3–4: freezes again what survived (and its new children) and
    /// SIGKILLs it all.
    pub(crate) async fn kill(&mut self) {
        // A reaped root's pid and an empty group's number may be reused:
        // the refreeze matches neither then.
        self.tree.group = self.tree.group && sys::group_alive(self.tree.pgid);
        if let Some(root) = &self.root {
            let exited = sys::try_reap_peek(root.as_fd());
            self.tree.from_root = self.tree.from_root && !exited;
        }
        let tree = self.tree;
        let root = self.root.take();
        let mut members = std::mem::take(&mut self.members);
        let host = Arc::clone(&self.host);
        let refrozen = self.host.lanes.run(Lane::Stop, move || {
            freeze(&host.adoption, tree, root.as_ref(), &mut members);
            (root, members)
        })
        .await;
        self.killed = true;
        let Ok((root, members)) = refrozen else {
            sys::signal_group(tree.pgid, libc::SIGKILL);
            return;
        };
        self.root = root;
        self.members = members;
        // The refreeze stopped everything again: unheld members' parents
        // are frozen, so killing them by pid is safe now.
        kill_frozen(&mut Proc(&self.host.adoption), &self.members);
        self.send(libc::SIGKILL);
    }

    fn send(&self, signal: libc::c_int) {
        if let Some(root) = &self.root {
            sys::pidfd_signal(root.as_fd(), signal);
        }
        self.members.signal_all(&mut Proc(&self.host.adoption), signal);
        if self.tree.group {
            sys::signal_group(self.tree.pgid, signal);
        }
    }
}

impl Drop for Stopping {
    /// A stop abandoned half-way (its runtime shut down) still kills: no
    /// member may outlive it. After a completed stop this is a no-op.
    fn drop(&mut self) {
        if let Some(root) = &self.root {
            sys::pidfd_signal(root.as_fd(), libc::SIGKILL);
        }
        self.members.signal_all(&mut Proc(&self.host.adoption), libc::SIGKILL);
    }
}

/// Kills a whole tree synchronously, without a grace: for a supervisor that
/// is dropped before its command ended. Blocking (reads `/proc`).
pub(crate) fn kill_now(adoption: &Adoption, (pgid, command): (libc::pid_t, u64), root: &OwnedFd) {
    let mut members = Members::default();
    freeze(
        adoption,
        Tree {
            pgid,
            from_root: true,
            group: true,
            command,
        },
        Some(root),
        &mut members,
    );
    kill_frozen(&mut Proc(adoption), &members);
    sys::pidfd_signal(root.as_fd(), libc::SIGKILL);
    sys::signal_group(pgid, libc::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted process table: `forks` run after the given scan (a
    /// process appearing between two scans), `unopenable` pids fail to be
    /// held, signals are recorded and SIGSTOP/SIGKILL change the state.
    #[derive(Default)]
    struct Fake {
        procs: Vec<ProcEntry>,
        stopped: HashSet<libc::pid_t>,
        killed: HashSet<libc::pid_t>,
        unopenable: HashSet<libc::pid_t>,
        forks: Vec<(usize, ProcEntry)>,
        scans: usize,
        by_pid: Vec<(libc::pid_t, libc::c_int)>,
    }

    fn proc(pid: libc::pid_t, ppid: libc::pid_t, pgrp: libc::pid_t) -> ProcEntry {
        ProcEntry {
            pid,
            ppid,
            pgrp,
            session: pgrp,
            exited: false,
        }
    }

    impl Fake {
        fn apply(&mut self, pid: libc::pid_t, signal: libc::c_int) {
            match signal {
                libc::SIGSTOP => {
                    self.stopped.insert(pid);
                }
                libc::SIGKILL => {
                    self.killed.insert(pid);
                }
                _ => {}
            }
        }
    }

    impl ProcessTable for Fake {
        type Handle = libc::pid_t;

        fn scan(&mut self) -> Vec<ProcEntry> {
            self.scans += 1;
            let due: Vec<ProcEntry> = self
                .forks
                .iter()
                .filter(|(after, _)| *after + 1 == self.scans)
                .map(|(_, entry)| *entry)
                .collect();
            // A stopped parent cannot fork: only running ones do.
            for entry in due {
                if !self.stopped.contains(&entry.ppid) {
                    self.procs.push(entry);
                }
            }
            self.procs.clone()
        }

        fn open(&mut self, pid: libc::pid_t) -> io::Result<libc::pid_t> {
            if self.unopenable.contains(&pid) {
                return Err(io::Error::from_raw_os_error(libc::EMFILE));
            }
            Ok(pid)
        }

        fn signal(&mut self, handle: &libc::pid_t, signal: libc::c_int) {
            self.apply(*handle, signal);
        }

        fn signal_pid(&mut self, pid: libc::pid_t, signal: libc::c_int) {
            self.by_pid.push((pid, signal));
            self.apply(pid, signal);
        }
    }

    const TREE: Tree = Tree {
        pgid: 100,
        from_root: true,
        group: true,
        command: 1,
    };

    #[test]
    fn a_fork_between_two_scans_is_caught() {
        // 101 (setsid child of the shell) forks 102 after the first scan,
        // before it is stopped in the same pass.
        let mut table = Fake {
            procs: vec![proc(100, 1, 100), proc(101, 100, 101), proc(7, 1, 7)],
            forks: vec![(1, proc(102, 101, 102))],
            ..Fake::default()
        };
        let mut members = Members::default();
        freeze_in(&mut table, TREE, Some(&100), &mut members);
        let mut found: Vec<_> = members.pids.iter().copied().collect();
        found.sort_unstable();
        assert_eq!(found, [101]);
        // 101 was stopped before the second scan, so 102 never came to be;
        // had it, the quiet-scan rule keeps walking: prove it with a fork
        // scheduled while its parent is still running.
        let mut table = Fake {
            procs: vec![proc(100, 1, 100), proc(101, 100, 101)],
            forks: vec![(0, proc(102, 101, 102))],
            ..Fake::default()
        };
        let mut members = Members::default();
        freeze_in(&mut table, TREE, Some(&100), &mut members);
        assert!(members.pids.contains(&102), "{:?}", members.pids);
        assert!(table.stopped.contains(&102) && table.stopped.contains(&100));
        assert!(!members.pids.contains(&7));
    }

    #[test]
    fn an_unopenable_process_is_still_stopped_and_killed_by_pid() {
        let mut table = Fake {
            procs: vec![proc(100, 1, 100), proc(101, 100, 100), proc(102, 101, 102)],
            unopenable: [102].into(),
            ..Fake::default()
        };
        let mut members = Members::default();
        freeze_in(&mut table, TREE, Some(&100), &mut members);
        assert!(members.pids.contains(&102));
        assert!(table.stopped.contains(&102), "the unopenable child ran on");
        assert_eq!(table.by_pid, [(102, libc::SIGSTOP)]);
        kill_frozen(&mut table, &members);
        assert!(table.killed.contains(&101) && table.killed.contains(&102));
    }

    #[test]
    fn a_zombie_is_never_held_or_counted() {
        let mut zombie = proc(101, 100, 100);
        zombie.exited = true;
        let mut table = Fake {
            procs: vec![proc(100, 1, 100), zombie],
            ..Fake::default()
        };
        let mut members = Members::default();
        freeze_in(&mut table, TREE, Some(&100), &mut members);
        assert_eq!(members.len(), 0);
        assert!(!table.stopped.contains(&101));
    }

    #[test]
    fn what_a_term_ignorer_forked_in_its_handler_is_found_by_the_second_freeze() {
        // After the first freeze and SIGTERM + SIGCONT, member 101 ignores
        // TERM and forks 103 in its handler; the second freeze (before the
        // SIGKILL) must catch 103.
        let mut table = Fake {
            procs: vec![proc(100, 1, 100), proc(101, 100, 100)],
            ..Fake::default()
        };
        let mut members = Members::default();
        freeze_in(&mut table, TREE, Some(&100), &mut members);
        assert_eq!(members.len(), 1);
        table.stopped.clear(); // SIGCONT: everyone runs again
        table.procs.push(proc(103, 101, 103));
        freeze_in(&mut table, TREE, Some(&100), &mut members);
        assert!(members.pids.contains(&103));
        kill_frozen(&mut table, &members);
        assert!(table.killed.contains(&101) && table.killed.contains(&103));
    }
}
