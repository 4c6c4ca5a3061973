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

/// The host's adoption: whether it is on, the gate between spawns and
/// scans, and the children the host registered (counted: a pid reused by
/// a new shell before the old one's registration is dropped stays
/// registered). One per host (`host.rs`); the subreaper bit it sets is
/// the process's.
#[derive(Debug, Default)]
pub(crate) struct Adoption {
    enabled: AtomicBool,
    gate: RwLock<()>,
    known: Mutex<HashMap<libc::pid_t, usize>>,
}

impl Adoption {
    /// Makes the host the subreaper of its commands' orphans (idempotent).
    pub(crate) fn enable(&self) {
        if self.enabled() {
            return;
        }
        match sys::become_subreaper() {
            Ok(()) => self.enabled.store(true, Ordering::Release),
            Err(err) => {
                tracing::warn!(%err, "cannot adopt orphans (PR_SET_CHILD_SUBREAPER); the process-tree containment keeps its stated limits");
            }
        }
    }

    /// True once adoption is on.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Held while a child of the host is created and registered.
    pub(crate) fn spawning(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Held while the host's children are classified (no spawn in between).
    /// Never on a runtime thread: what is done under it reads `/proc` and
    /// waits for every spawn, so it runs on a stop lane or the watchdog's
    /// thread (checked in debug builds, which the tests are).
    pub(crate) fn scanning(&self) -> RwLockWriteGuard<'_, ()> {
        debug_assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "the adoption gate taken on a runtime thread: its /proc reads would block a worker"
        );
        self.gate.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a child the host keeps for itself (a command's shell, the
    /// watchdog).
    pub(crate) fn register(&self, pid: libc::pid_t) {
        *self.known().entry(pid).or_insert(0) += 1;
    }

    /// Forgets a registered child once it has been reaped.
    pub(crate) fn unregister(&self, pid: libc::pid_t) {
        let mut known = self.known();
        if let Some(count) = known.get_mut(&pid) {
            *count -= 1;
            if *count == 0 {
                known.remove(&pid);
            }
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<libc::pid_t, usize>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True if and only if `entry` is an orphan the host adopted from the
    /// command whose session is `session` and whose number is `command`:
    /// still in that session, or (a `setsid` daemon) carrying
    /// `DSH_BASH_COMMAND` of that command. Another command's orphans are
    /// never this one's, so they are never counted (or stopped during
    /// their own grace) as its leftovers. One that clears its environment
    /// after `setsid` is nobody's: a stated limit. Call under
    /// [`Adoption::scanning`].
    pub(crate) fn adopted_by(&self, entry: &ProcEntry, session: libc::pid_t, command: u64) -> bool {
        self.adopted(entry) && (entry.session == session || carries(entry.pid, command))
    }

    /// True if and only if `entry` is an orphan the host adopted: its
    /// child, not one it registered. Call under [`Adoption::scanning`].
    fn adopted(&self, entry: &ProcEntry) -> bool {
        self.enabled()
            && entry.ppid == host()
            && entry.session != sys::own_session()
            && !self.known().contains_key(&entry.pid)
    }

    /// The host's children that may be orphans of its commands, as
    /// `/proc/<pid>/stat` shows them: not registered, and not in the
    /// host's own session (from `/proc/self/task/*/children`: a few small
    /// reads, no scan of every process). Call under
    /// [`Adoption::scanning`].
    fn unregistered_children(&self) -> Vec<ProcEntry> {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return Vec::new();
        };
        let own = sys::own_session();
        let known = self.known();
        tasks
            .filter_map(Result::ok)
            .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
            .flat_map(|list| {
                list.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<libc::pid_t>>()
            })
            .filter(|pid| !known.contains_key(pid))
            .filter_map(crate::procfs::entry)
            .filter(|entry| entry.session != own)
            .collect()
    }

    /// The orphans of the command (`session`, `command`) the host holds
    /// now that are still running (zombies awaiting the reaper excluded;
    /// blocking reads of `/proc/self`).
    pub(crate) fn live_orphans_of(&self, session: libc::pid_t, command: u64) -> Vec<libc::pid_t> {
        if !self.enabled() {
            return Vec::new();
        }
        let _gate = self.scanning();
        self.unregistered_children()
            .into_iter()
            .filter(|entry| !entry.exited)
            .filter(|entry| entry.session == session || carries(entry.pid, command))
            .map(|entry| entry.pid)
            .collect()
    }

    /// Reaps adopted orphans that have exited (blocking).
    pub(crate) fn reap_exited(&self) {
        if !self.enabled() {
            return;
        }
        // Under the gate: no scan classifies while a zombie is reaped.
        let _gate = self.scanning();
        for entry in self.unregistered_children() {
            if entry.exited {
                sys::reap_pid(entry.pid);
            }
        }
    }
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

fn host() -> libc::pid_t {
    libc::pid_t::try_from(std::process::id()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_reused_before_its_old_registration_is_dropped_stays_registered() {
        // The old shell is reaped; a new shell gets its pid and registers
        // before the old registration is dropped.
        let adoption = Adoption::default();
        let pid = 999_983;
        adoption.register(pid);
        adoption.register(pid);
        adoption.unregister(pid);
        assert!(adoption.known().contains_key(&pid), "the new shell lost its registration");
        adoption.unregister(pid);
        assert!(!adoption.known().contains_key(&pid));
        // Not enabled: nothing is ever an orphan.
        let entry = ProcEntry {
            pid: 4242,
            ppid: host(),
            pgrp: 4242,
            session: 4242,
            exited: false,
        };
        assert!(!adoption.adopted(&entry));
    }

    /// Defect 5 of «One owner, one seam, named states»: the orphans' `/proc`
    /// walk ran on a runtime worker under the global gate. The gate now
    /// refuses a runtime thread, so every containment test that settles a
    /// command under the process-tree walk fails if the walk moves back.
    #[cfg(debug_assertions)]
    #[tokio::test]
    #[should_panic(expected = "runtime thread")]
    async fn the_adoption_gate_is_never_taken_on_a_runtime_thread() {
        drop(Adoption::default().scanning());
    }

    /// On a thread of its own (a stop lane's), the gate is taken.
    #[test]
    fn the_adoption_gate_is_taken_off_the_runtime() {
        let adoption = Adoption::default();
        drop(adoption.scanning());
        assert!(adoption.live_orphans_of(1, 1).is_empty(), "not enabled: no orphans");
    }
}
