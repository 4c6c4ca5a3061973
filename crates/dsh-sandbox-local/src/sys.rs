//! The raw syscalls of this crate: the Landlock ABI query, the runner's
//! status pipe and the audit netlink socket. (Restrictions are applied by the launcher of
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

/// Takes the stand-in mark off `fd` (an entry the person filled).
pub(crate) fn unmark_stand_in(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fremovexattr on an open descriptor with a NUL-terminated name.
    if unsafe { libc::fremovexattr(fd.as_raw_fd(), STAND_IN_MARKER.as_ptr()) } != 0 {
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

/// Opens `relative` beneath the directory `root` without following any
/// symlink or leaving `root` on the way (`openat2` with `RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`): a path a concurrent
/// command swapped for a symlink fails instead of leading elsewhere.
/// `flags` as for `openat` (`O_CLOEXEC` is added).
pub(crate) fn open_beneath(
    root: std::os::fd::BorrowedFd<'_>,
    relative: &std::path::Path,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let path = if relative.as_os_str().is_empty() {
        std::ffi::CString::new(".")
    } else {
        std::ffi::CString::new(relative.as_os_str().as_bytes())
    }
    .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
    // SAFETY: open_how is a plain C struct; zeroed is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 reads the NUL-terminated path and the open_how we
    // own, with its size; it returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel just handed us this descriptor; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn c_name(name: &std::ffi::OsStr) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the name"))
}

/// Creates the directory `name` in the directory `parent` (mode 0755).
pub(crate) fn mkdir_at(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let name = c_name(name)?;
    // SAFETY: mkdirat reads the NUL-terminated name relative to an open
    // directory descriptor.
    if unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates the empty file `name` in the directory `parent` (mode 0644).
pub(crate) fn create_at(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    contents: &[u8],
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let name = c_name(name)?;
    // SAFETY: openat with O_CREAT|O_EXCL|O_NOFOLLOW creates a new file by a
    // NUL-terminated name relative to an open directory descriptor; the
    // descriptor returned is closed at once.
    let fd = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just created here.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    std::io::Write::write_all(&mut &file, contents)
}

/// Renames `from` to `to` within the directory `parent`, failing if `to`
/// exists (`RENAME_NOREPLACE`).
pub(crate) fn rename_noreplace_at(
    parent: std::os::fd::BorrowedFd<'_>,
    from: &std::ffi::OsStr,
    to: &std::ffi::OsStr,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (from, to) = (c_name(from)?, c_name(to)?);
    // SAFETY: renameat2 reads two NUL-terminated names relative to the same
    // open directory descriptor.
    let rc = unsafe {
        libc::renameat2(
            parent.as_raw_fd(),
            from.as_ptr(),
            parent.as_raw_fd(),
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes `name` from the directory `parent` (a directory with
/// `directory`, which must be empty).
pub(crate) fn remove_at(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    directory: bool,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let name = c_name(name)?;
    let flags = if directory { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: unlinkat reads a NUL-terminated name relative to an open
    // directory descriptor.
    if unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A netlink audit socket bound to `group` (0: none), close-on-exec.
pub(crate) fn audit_socket(group: u32) -> io::Result<OwnedFd> {
    use rustix::net::{netlink, sockopt, AddressFamily, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(netlink::AUDIT),
    )?;
    let groups = if group == 0 { 0 } else { 1 << (group - 1) };
    rustix::net::bind(&fd, &netlink::SocketAddrNetlink::new(0, groups))?;
    // Best effort, either way.
    let _ = if group == 0 {
        // Replies come at once; a second bounds a lost one.
        sockopt::set_socket_timeout(
            &fd,
            sockopt::Timeout::Recv,
            Some(std::time::Duration::from_secs(1)),
        )
    } else {
        // Room for bursts of records (root may exceed rmem_max); without
        // it overruns are still detected.
        sockopt::set_socket_recv_buffer_size_force(&fd, 4 << 20)
    };
    Ok(fd)
}

/// Sends one netlink `message` to the kernel.
pub(crate) fn send_to_kernel(fd: &OwnedFd, message: &[u8]) -> io::Result<()> {
    let kernel = rustix::net::netlink::SocketAddrNetlink::new(0, 0);
    rustix::net::sendto(fd, message, rustix::net::SendFlags::empty(), &kernel)?;
    Ok(())
}

/// Receives one datagram.
pub(crate) fn recv(fd: &OwnedFd, buffer: &mut [u8]) -> io::Result<usize> {
    let (got, _) = rustix::net::recv(fd, buffer, rustix::net::RecvFlags::empty())?;
    Ok(got)
}

/// The user namespace that owns the namespace `fd` refers to
/// (`NS_GET_USERNS`).
pub(crate) fn owning_user_namespace(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    // SAFETY: an ioctl with no argument on a descriptor we borrow; it
    // returns a new descriptor.
    let owner = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_USERNS) };
    if owner < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just handed us this fd; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(owner) })
}

/// Clears `O_NONBLOCK` on `fd`.
pub(crate) fn set_blocking(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor we borrow, integers only.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
