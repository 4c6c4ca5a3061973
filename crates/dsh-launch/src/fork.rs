//! A fork without exec, for a process that still has one thread: the
//! host-death watchdog forked from `main` before any runtime starts, so it
//! costs a copy-on-write fork instead of executing the 16 MB binary again
//! (its dynamic loader, its relocations, its start). With one thread there
//! is no other thread whose lock (the allocator's, stdio's) the child could
//! inherit held, so the child may run ordinary Rust code; with more than
//! one, [`fork_alone`] refuses and the caller executes a program instead.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Which side of [`fork_alone`] this process is on.
#[derive(Debug, PartialEq, Eq)]
pub enum Forked {
    /// The caller; the child's pid.
    Parent(libc::pid_t),
    /// The new process.
    Child,
}

/// How many threads this process has (the entries of `/proc/self/task`).
fn threads() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// Forks this process if it has exactly one thread; refuses otherwise
/// (`ErrorKind::Unsupported`, saying how many it has), since a child forked
/// from a threaded process may only make async-signal-safe calls.
pub fn fork_alone() -> io::Result<Forked> {
    let threads = threads()?;
    if threads != 1 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this process has {threads} threads; a fork that runs on needs one"),
        ));
    }
    // SAFETY: the process has one thread (checked above, and nothing in it
    // starts one concurrently), so the child inherits no lock held by
    // another thread and may run ordinary code.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// Detaches a forked child from what its parent holds: a process group of
/// its own (a Ctrl-C or a group kill aimed at the parent's group does not
/// reach it), `input` as its stdin, `null` as stdout and stderr, every
/// other descriptor closed (so it keeps no pipe of the parent's caller
/// open), `name` as its name, and its command line overwritten with
/// `title` (as much as fits; the rest zeroed).
pub fn detach(input: OwnedFd, null: OwnedFd, name: &CStr, title: &[u8]) -> io::Result<()> {
    // SAFETY: setpgid(0, 0) on this process; no pointers.
    if unsafe { libc::setpgid(0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for (from, to) in [(&input, 0), (&null, 1), (&null, 2)] {
        // SAFETY: dup2 between descriptors this process owns.
        if unsafe { libc::dup2(from.as_raw_fd(), to) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: closes every descriptor from 3 up; `input` and `null` are
    // among them and are forgotten right after, so nothing closes their
    // numbers a second time.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(input);
    std::mem::forget(null);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string we own.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
    if let Some((start, end)) = crate::launch::command_line() {
        let room = end - start - 1;
        let shown = title.len().min(room);
        // SAFETY: [start, end) is this process's own argument area (from
        // /proc/self/stat), writable memory of its stack; nothing in this
        // process reads its arguments any more.
        unsafe {
            std::ptr::write_bytes(start as *mut u8, 0, end - start);
            std::ptr::copy_nonoverlapping(title.as_ptr(), start as *mut u8, shown);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threaded_process_is_refused() {
        // The test harness runs this on a thread of its own: more than one.
        let refused = fork_alone().unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::Unsupported, "{refused}");
        assert!(refused.to_string().contains("threads"), "{refused}");
    }
}
