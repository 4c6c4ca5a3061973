//! Orphan adoption: closing the holes of the process-tree containment.
//!
//! Under the process-tree walk the shell is a child subreaper, but once the
//! shell itself exits its remaining children go to the next subreaper up,
//! normally init: a process forked in the shell's SIGTERM handler during the
//! grace, or a `setsid` daemon left behind at a normal exit, is out of
//! reach. With adoption enabled ([`crate::LocalConfig::adopt_orphans`]) the
//! host process becomes that next subreaper (`PR_SET_CHILD_SUBREAPER`), so
//! such orphans become the host's children: every host child that is not a
//! command's shell or the watchdog is an orphan of some command, and stops
//! and leftover checks freeze and kill it like any member. The host reaps
//! them.
//!
//! The host's own children are registered as they are spawned; a spawn and
//! a scan exclude each other (a gate), so a shell that has just been cloned
//! is never mistaken for an orphan.
//!
//! A child of the host in the host's own session is never an orphan: every
//! command starts a session of its own (`setsid`), so none of its
//! descendants can join the host's. That keeps the children a program
//! embedding the executor starts itself (the `ssh` of a remote executor
//! over stdio, a `tokio::process` child) out of every stop and every reap.
//! A process the host spawns that starts a session of its own (`setsid`)
//! without our spawner is still taken for an orphan: register it
//! (spawn it through the executor) or leave adoption off.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::sys;
use crate::procfs::ProcEntry;

static ENABLED: AtomicBool = AtomicBool::new(false);
static GATE: RwLock<()> = RwLock::new(());
/// Registered children, counted: a pid reused by a new shell before the
/// old one's registration is dropped stays registered.
static KNOWN: Mutex<Option<HashMap<libc::pid_t, usize>>> = Mutex::new(None);

/// Makes the host the subreaper of its commands' orphans (idempotent).
pub(crate) fn enable() {
    if ENABLED.load(Ordering::Acquire) {
        return;
    }
    match sys::become_subreaper() {
        Ok(()) => ENABLED.store(true, Ordering::Release),
        Err(err) => {
            tracing::warn!(%err, "cannot adopt orphans (PR_SET_CHILD_SUBREAPER); the process-tree containment keeps its stated limits");
        }
    }
}

/// True once adoption is on.
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// Held while a child of the host is created and registered.
pub(crate) fn spawning() -> RwLockReadGuard<'static, ()> {
    GATE.read().unwrap_or_else(PoisonError::into_inner)
}

/// Held while the host's children are classified (no spawn in between).
pub(crate) fn scanning() -> RwLockWriteGuard<'static, ()> {
    GATE.write().unwrap_or_else(PoisonError::into_inner)
}

/// Registers a child the host keeps for itself (a command's shell, the
/// watchdog).
pub(crate) fn register(pid: libc::pid_t) {
    *KNOWN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .entry(pid)
        .or_insert(0) += 1;
}

/// Forgets a registered child once it has been reaped.
pub(crate) fn unregister(pid: libc::pid_t) {
    if let Some(known) = KNOWN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        if let Some(count) = known.get_mut(&pid) {
            *count -= 1;
            if *count == 0 {
                known.remove(&pid);
            }
        }
    }
}

/// True if and only if `entry` is an orphan the host adopted from the
/// command whose session is `session` and whose number is `command`: still
/// in that session, or (a `setsid` daemon) carrying `DSH_BASH_COMMAND` of
/// that command. Another command's orphans are never this one's, so they
/// are never counted (or stopped during their own grace) as its leftovers.
/// One that clears its environment after `setsid` is nobody's: a stated
/// limit. Call under [`scanning`].
pub(crate) fn adopted_by(entry: &ProcEntry, session: libc::pid_t, command: u64) -> bool {
    adopted(entry) && (entry.session == session || carries(entry.pid, command))
}

/// The environment entry that names command `command`.
pub(crate) fn command_marker(command: u64) -> (&'static str, String) {
    ("DSH_BASH_COMMAND", format!("{}.{command}", std::process::id()))
}

/// True if and only if `pid`'s environment names command `command`.
fn carries(pid: libc::pid_t, command: u64) -> bool {
    let (name, value) = command_marker(command);
    let wanted = format!("{name}={value}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(|e| e == wanted.as_bytes()))
}

/// True if and only if `entry` is an orphan the host adopted: its child,
/// not one it registered. Call under [`scanning`].
fn adopted(entry: &ProcEntry) -> bool {
    if !enabled() || entry.ppid != host() || entry.session == sys::own_session() {
        return false;
    }
    !KNOWN
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .is_some_and(|known| known.contains_key(&entry.pid))
}

fn host() -> libc::pid_t {
    libc::pid_t::try_from(std::process::id()).unwrap_or(0)
}

/// The host's children that may be orphans of its commands, as
/// `/proc/<pid>/stat` shows them: not registered, and not in the host's
/// own session (from `/proc/self/task/*/children`: a few small reads, no
/// scan of every process). Call under [`scanning`].
fn unregistered_children() -> Vec<ProcEntry> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let own = sys::own_session();
    let known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<libc::pid_t>>()
        })
        .filter(|pid| !known.as_ref().is_some_and(|k| k.contains_key(pid)))
        .filter_map(crate::procfs::entry)
        .filter(|entry| entry.session != own)
        .collect()
}

/// The orphans of the command (`session`, `command`) the host holds now
/// that are still running (zombies awaiting the reaper excluded; blocking
/// reads of `/proc/self`).
pub(crate) fn live_orphans_of(session: libc::pid_t, command: u64) -> Vec<libc::pid_t> {
    if !enabled() {
        return Vec::new();
    }
    let _gate = scanning();
    unregistered_children()
        .into_iter()
        .filter(|entry| !entry.exited)
        .filter(|entry| entry.session == session || carries(entry.pid, command))
        .map(|entry| entry.pid)
        .collect()
}

/// Reaps adopted orphans that have exited (blocking).
pub(crate) fn reap_exited() {
    if !enabled() {
        return;
    }
    // Under the gate: no scan classifies while a zombie is reaped.
    let _gate = scanning();
    for entry in unregistered_children() {
        if entry.exited {
            sys::reap_pid(entry.pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered(pid: libc::pid_t) -> bool {
        KNOWN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|known| known.contains_key(&pid))
    }

    #[test]
    fn a_pid_reused_before_its_old_registration_is_dropped_stays_registered() {
        // The old shell is reaped; a new shell gets its pid and registers
        // before the old registration is dropped.
        let pid = 999_983;
        register(pid);
        register(pid);
        unregister(pid);
        assert!(registered(pid), "the new shell lost its registration");
        unregister(pid);
        assert!(!registered(pid));
        // Not enabled in this process: nothing is ever an orphan.
        let entry = ProcEntry {
            pid: 4242,
            ppid: host(),
            pgrp: 4242,
            session: 4242,
            exited: false,
        };
        assert!(!adopted(&entry));
    }
}
