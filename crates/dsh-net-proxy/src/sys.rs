//! The raw syscalls of this crate, each `unsafe` block with its SAFETY
//! line: the forwarder's fork, its relay leaving the command's session,
//! taking over the inherited door, and asking whether a socket is at its
//! urgent mark.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Which side of a fork this is.
pub(crate) enum Forked {
    /// The new process.
    Child,
    /// The process that forked.
    Parent,
}

/// Forks this process, which must still be single-threaded (checked: a
/// process with more than one thread gets an error, never a child that
/// inherits another thread's locks).
pub(crate) fn fork_single_threaded() -> io::Result<Forked> {
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "cannot fork a process of {threads} threads"
        )));
    }
    // SAFETY: the process has one thread (checked above), so the child
    // is a whole copy of it and may run any code.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        _ => Ok(Forked::Parent),
    }
}

/// Leaves the caller's session and process group and points the standard
/// streams at `/dev/null` (what cannot be opened is left as it was).
pub(crate) fn leave_session_and_streams() {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null");
    // A freshly forked child leads no group: setsid cannot fail.
    let _ = rustix::process::setsid();
    if let Ok(null) = &null {
        let _ = rustix::stdio::dup2_stdin(null);
        let _ = rustix::stdio::dup2_stdout(null);
        let _ = rustix::stdio::dup2_stderr(null);
    }
}

/// Takes descriptor `fd`, handed to this process to own, as an
/// [`OwnedFd`] closed on exec from here on; an error if it is not open.
pub(crate) fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl with integer arguments only; it fails cleanly for a
    // descriptor that is not open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; `fd` is open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is open, was handed to this process to own, and nothing
    // else in it refers to it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `SIOCATMARK` (Linux, every architecture): whether reading a socket has
/// reached its urgent mark.
const SIOCATMARK: libc::Ioctl = 0x8905;

/// True if and only if reading `socket` has reached urgent (out-of-band)
/// data: a splice stops there and only a `recv` moves past it.
pub(crate) fn at_urgent_mark(socket: BorrowedFd<'_>) -> bool {
    let mut at: libc::c_int = 0;
    // SAFETY: SIOCATMARK writes one int into `at`, which we own.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCATMARK, &mut at) };
    rc == 0 && at != 0
}
