//! The raw syscalls of this crate: the Landlock ABI query and the runner's
//! status pipe. (Restrictions are applied by the launcher of
//! `dsh-bash-local`, from data.)

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The Landlock ABI version of the running kernel; 0 when unsupported.
pub(crate) fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attr and size 0 the call only returns the ABI version.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    version.max(0)
}

/// A pipe for a runner's status: (read end, non-blocking; write end). Both
/// close-on-exec; the launcher keeps the write end open for the runner only.
pub(crate) fn status_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just handed us these two fds; nobody else owns them.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl F_SETFL on a valid fd with an integer argument.
    if unsafe { libc::fcntl(fds[0], libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((read, write))
}

/// True if and only if the kernel serves the x32 syscall ABI (probed with
/// `getpid` through the x32 entry point).
#[cfg(target_arch = "x86_64")]
pub(crate) fn x32_served() -> bool {
    const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
    // SAFETY: getpid through the x32 entry point: no arguments, no memory.
    let rc = unsafe { libc::syscall(libc::SYS_getpid | X32_SYSCALL_BIT) };
    !(rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
}

/// `flock(2)` on `fd` (`LOCK_SH`, `LOCK_EX`, `| LOCK_NB`).
pub(crate) fn flock(fd: std::os::fd::BorrowedFd<'_>, operation: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor the caller keeps open for the call.
    if unsafe { libc::flock(fd.as_raw_fd(), operation) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The extended attribute that marks a directory as a stand-in.
const STAND_IN_MARKER: &std::ffi::CStr = c"user.dsh-bash.stand-in";

/// Marks the directory `fd` as a stand-in (an error where the filesystem
/// has no user xattrs).
pub(crate) fn mark_stand_in(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fsetxattr on an open descriptor with a NUL-terminated name
    // and a one-byte value we own.
    let rc = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            STAND_IN_MARKER.as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True if and only if the directory `fd` carries the stand-in mark.
pub(crate) fn marked_stand_in(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let mut value = [0u8; 1];
    // SAFETY: fgetxattr on an open descriptor into a buffer we own, its
    // length given.
    let rc = unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            STAND_IN_MARKER.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    rc == 1 && value[0] == b'1'
}
