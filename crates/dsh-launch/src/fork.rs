//! A fork without exec, for a process that still has one thread: the
//! host-death watchdog forked from `main` before any runtime starts, so it
//! costs a copy-on-write fork instead of executing the binary again
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
/// reach it), `/` as its directory (it pins no workspace), `input` as its
/// stdin, `null` as stdout and stderr, every other descriptor closed (so
/// it keeps no pipe of the parent's caller open), `name` as its name, and
/// its command line overwritten with `title` (as much as fits; the rest
/// zeroed).
pub fn detach(input: OwnedFd, null: OwnedFd, name: &CStr, title: &[u8]) -> io::Result<()> {
    // SAFETY: setpgid(0, 0) on this process; no pointers.
    if unsafe { libc::setpgid(0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: chdir to a static NUL-terminated path.
    if unsafe { libc::chdir(c"/".as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for (from, to) in [(&input, 0), (&null, 1), (&null, 2)] {
        // SAFETY: dup2 between descriptors this process owns.
        if unsafe { libc::dup2(from.as_raw_fd(), to) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    close_from_three()?;
    // Closed above: forgotten, so nothing closes their numbers again.
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

/// Closes every descriptor from 3 up: `close_range`, or on a kernel
/// before it (5.9) each one `/proc/self/fd` lists (this process has one
/// thread: it may allocate).
fn close_from_three() -> io::Result<()> {
    // SAFETY: close_range with integer arguments only.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } == 0 {
        return Ok(());
    }
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in open {
        // SAFETY: closes a descriptor of this process (the listing's own,
        // already closed, gives EBADF, which is ignored).
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// Moves `fd` above the standard descriptors when it is one of them (a
/// process started with 0, 1 or 2 closed gets them back from its first
/// `open`), close-on-exec.
pub fn above_standard(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    crate::duplicate_from(&fd, 3)
}

/// Ends this process now with `code`: no exit handlers, no unwinding, no
/// flush of what a forked copy's buffers hold of its parent's.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no memory of ours.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threaded_process_is_refused() {
        // A second thread for certain (whatever thread runs the test).
        let (stop, parked) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || parked.recv());
        let refused = fork_alone().unwrap_err();
        drop(stop);
        let _ = other.join();
        assert_eq!(refused.kind(), io::ErrorKind::Unsupported, "{refused}");
        assert!(refused.to_string().contains("threads"), "{refused}");
    }
}
