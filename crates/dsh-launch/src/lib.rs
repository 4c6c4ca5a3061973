//! The local executor's launcher and every raw syscall it makes, each
//! `unsafe` block with its SAFETY line: the only unsafe code of
//! `dsh-bash-local`, which uses it as its `sys` module.
//!
//! [`launch`] starts a command with `clone(CLONE_VM | CLONE_VFORK)` (or
//! `clone3` straight into its cgroup), its restriction applied between
//! clone and exec with async-signal-safe syscalls only; the rest are small
//! wrappers (pidfds, reaping, group signals, sealed memory files, reactor
//! registration). Process identity is held as a pidfd wherever it matters,
//! so a signal can never reach a recycled pid.
#![deny(unsafe_op_in_unsafe_fn)]
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// Normal exit with this code.
    Exited(i32),
    /// Killed by this signal number.
    Signaled(i32),
}

/// Runs in the child between fork and exec: async-signal-safe raw syscalls
/// only (no allocation, no locks, no logging).
///
/// - `setsid`: a new session and process group (no controlling terminal);
/// - `PR_SET_CHILD_SUBREAPER`: orphaned descendants (double forks, `setsid`
///   escapees whose parent died) are re-parented to the shell instead of
///   init, so the whole tree stays reachable from it. The attribute survives
///   `execve`;
/// - `PR_SET_PDEATHSIG(SIGKILL)`: the shell dies with the thread that spawned
///   it (a thread that lives as long as the process, see `spawn.rs`); if the
///   parent is already gone, exit at once.
///
/// # Safety
///
/// Must only be called in a freshly forked child before exec.
pub unsafe fn contain_child(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: setsid has no memory-safety preconditions.
    if unsafe { libc::setsid() } < 0 {
        return Err(io::Error::last_os_error());
    }
    become_subreaper()?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        // The parent died between fork and prctl: nobody will supervise us.
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(127) };
    }
    Ok(())
}

/// The host's session id as its pid namespace sees it: 0 when the
/// session's leader lies outside that namespace (a server started in a
/// container by a client that made no session of its own), which is also
/// what `/proc/<pid>/stat` shows for its children in that session.
/// (`rustix::process::getsid` cannot say 0: it asserts a positive pid.)
pub fn own_session() -> libc::pid_t {
    // SAFETY: getsid(0) asks for the caller's session; no pointers.
    let sid = unsafe { libc::getsid(0) };
    sid.max(0)
}

/// Ignores SIGHUP and SIGINT (the watchdog: a closing terminal or a
/// Ctrl-C at the host's must not end it before the host's death does).
pub fn ignore_hangup_and_interrupt() {
    // SAFETY: SIG_IGN dispositions in the watchdog, a single-threaded
    // process, before anything else runs; no handler code is installed.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
}

/// Raises the soft open-file limit to the hard one; the limit reached.
pub fn raise_open_file_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a stack struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit reads a stack struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur)
}

/// Makes this process the subreaper of its descendants' orphans (raw
/// `prctl`, safe between fork and exec).
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's errno (no allocation: safe between fork and exec).
fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Waits for child `pid` to exit and reaps it (blocks: not on a runtime
/// thread).
pub fn wait_pid(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid on one pid, writing into a stack int; retried on EINTR.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
}

/// Reaps child `pid` if it has exited (never blocks).
pub fn reap_pid(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid on one pid with WNOHANG, writing into a stack int.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
}

/// Opens a pidfd for `pid`.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("pidfd out of range"))?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `signal` to the process behind `pidfd`. A process that already
/// exited is not an error.
pub fn pidfd_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) {
    // SAFETY: pidfd_send_signal with a valid fd, a null siginfo and no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            tracing::debug!(%err, signal, "pidfd_send_signal failed");
        }
    }
}

/// Sends `signal` to every process of group `pgid`. Never fails: a pgid
/// below 2 is ignored (`kill(-1)` would mean every process), a vanished
/// group and EPERM are ignored.
pub fn signal_group(pgid: libc::pid_t, signal: libc::c_int) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill with a negative pid signals a process group; no memory involved.
    unsafe { libc::kill(-pgid, signal) };
}

/// Sends `signal` to `pid` (for a process that could not be held by a
/// pidfd and whose parent is frozen). Never signals pid 1 or below.
pub fn signal_pid(pid: libc::pid_t, signal: libc::c_int) {
    if pid <= 1 {
        return;
    }
    // SAFETY: kill with a positive pid; no memory involved.
    unsafe { libc::kill(pid, signal) };
}

/// True if and only if some process still belongs to group `pgid`.
pub fn group_alive(pgid: libc::pid_t) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(-pgid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// True if and only if the process behind `pidfd` has exited (reaped or
/// not); never reaps.
pub fn try_reap_peek(pidfd: BorrowedFd<'_>) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd we own, zero timeout.
    let rc = unsafe { libc::poll(&mut poll, 1, 0) };
    rc > 0 && poll.revents & libc::POLLIN != 0
}

/// Reaps the child behind `pidfd` if it has exited; `None` if still running.
pub fn try_reap(pidfd: BorrowedFd<'_>) -> io::Result<Option<ExitStatus>> {
    let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: waitid writes a siginfo_t into the buffer we own; P_PIDFD takes the fd as id.
    let rc = unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            info.as_mut_ptr(),
            libc::WEXITED | libc::WNOHANG,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: waitid succeeded, so the (zero-initialised) siginfo is valid.
    let info = unsafe { info.assume_init() };
    // SAFETY: si_pid/si_status are valid to read for SIGCHLD siginfo; si_pid 0 means "not yet".
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    Ok(Some(match info.si_code {
        libc::CLD_EXITED => ExitStatus::Exited(status),
        _ => ExitStatus::Signaled(status),
    }))
}

/// `fd` moved to a number at or above 1000 (close-on-exec), where a
/// command's own fixed-number redirections (`exec 9<file`) do not reach
/// it; `fd` itself when the descriptor limit is lower.
pub fn high(fd: OwnedFd) -> OwnedFd {
    duplicate_from(&fd, 1000).unwrap_or(fd)
}

/// A close-on-exec duplicate of `fd` at the lowest free number from
/// `lowest` up.
fn duplicate_from(fd: &OwnedFd, lowest: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl F_DUPFD_CLOEXEC with integer arguments on a descriptor
    // we own; a new descriptor is returned or -1.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, lowest) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just handed us this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// An empty in-memory file (close-on-exec) a child may write to: no path
/// names it, nobody else can open it.
pub fn memory_file() -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a static NUL-terminated name and flags.
    let fd = unsafe {
        libc::memfd_create(
            c"dsh-bash-command".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just handed us this fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `text` in a sealed in-memory file (close-on-exec, positioned at its
/// start): a descriptor a command can read but nobody can change.
pub fn sealed_text(text: &[u8]) -> io::Result<OwnedFd> {
    use std::io::{Seek, Write};
    let mut file = std::fs::File::from(high(memory_file()?));
    file.write_all(text)?;
    file.rewind()?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl F_ADD_SEALS on a memfd we own, with integer flags.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// The effective uid of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Opens `path` as a directory, refusing a symlink in its last component.
pub fn open_directory(path: &std::path::Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    Ok(OwnedFd::from(file))
}

fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut stat = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat writes a stat struct into the buffer we own.
    if unsafe { libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so the struct is initialised.
    Ok(unsafe { stat.assume_init() })
}

/// The owner and permission bits of the file behind `fd`.
pub fn owner_and_mode(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    let stat = fstat(fd)?;
    Ok((stat.st_uid, stat.st_mode & 0o7777))
}

/// True if and only if the directory behind `fd` still exists and `path`
/// (not followed if a symlink) still leads to it.
pub fn same_directory(fd: BorrowedFd<'_>, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(held) = fstat(fd) else {
        return false;
    };
    if held.st_nlink == 0 {
        return false;
    }
    std::fs::symlink_metadata(path)
        .is_ok_and(|meta| meta.is_dir() && meta.ino() == held.st_ino && meta.dev() == held.st_dev)
}

/// Creates `name` in the directory behind `dir` for writing: exclusively,
/// mode 0600, never following a symlink.
pub fn create_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600))?.into())
}

/// Sets the capacity of a pipe (best effort): larger for heavy streams
/// (they wake us less), small for the watchdog's.
pub fn set_pipe_size(fd: BorrowedFd<'_>, bytes: libc::c_int) {
    // SAFETY: fcntl F_SETPIPE_SZ on a valid fd with an integer argument.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes) };
}

/// Fills `buf` with kernel randomness.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: getrandom writes at most rest.len() bytes into the buffer we own.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
            continue;
        }
        filled += n.unsigned_abs();
    }
    Ok(())
}

/// Registers an owned fd (a pidfd) with the Tokio reactor for readability.
pub fn readable_fd(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd stays open and always returns the same raw fd while
    // the AsyncFd owns it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|err| err.into_parts().1)
}

/// [`readable_fd`] that gives the fd back when it cannot be registered
/// (a pidfd must still reap its process).
pub fn readable_or_back(
    fd: OwnedFd,
) -> Result<tokio::io::unix::AsyncFd<OwnedFd>, (OwnedFd, io::Error)> {
    // SAFETY: as for `readable_fd`.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|err| err.into_parts())
}

/// Registers `fd`'s number with the Tokio reactor and lets the
/// registration go unheld: it lasts until the file is closed (the kernel
/// then drops its epoll entry), and meanwhile a second registration of the
/// number is refused (`EEXIST`). How a test makes a registration fail.
pub fn register_unheld(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `fd` is open for this call, and the registration is
    // forgotten before it returns, which ends tokio's contract.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            fd.as_raw_fd(),
            tokio::io::Interest::READABLE,
        )
    }
    .map_err(|err| err.into_parts().1)?;
    std::mem::forget(registered);
    Ok(())
}

/// Registers an owned fd (a terminal's master) with the Tokio reactor for
/// writability.
pub fn writable_fd(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: as for `readable_fd`.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::WRITABLE) }
        .map_err(|err| err.into_parts().1)
}

/// Waits for the child behind `pidfd` to exit and reaps it (blocking).
pub fn reap_blocking(pidfd: BorrowedFd<'_>) {
    let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
    loop {
        // SAFETY: waitid writes a siginfo_t into the buffer we own.
        let rc = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                info.as_mut_ptr(),
                libc::WEXITED,
            )
        };
        if rc == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

mod enter;
mod fork;
mod launch;
mod restrict;

pub use fork::{above_standard, detach, exit_now, fork_alone, Forked};
pub use launch::{launch, pipe, Entry as CgroupEntry, Exec, Launcher, Pipes};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_kill_never_fails() {
        // EXE-37..40: non-positive ids are ignored, a vanished group and a
        // group we may not signal are not errors (and nothing panics).
        signal_group(0, libc::SIGTERM);
        signal_group(-7, libc::SIGTERM);
        signal_group(libc::pid_t::MAX - 1, libc::SIGTERM);
        assert!(!group_alive(0));
        assert!(!group_alive(libc::pid_t::MAX - 1));
        // 1 would become kill(-1): every process. It must be refused.
        signal_group(1, 0);
        assert!(!group_alive(1));
    }

    #[test]
    fn kernel_randomness_fills_the_buffer() {
        let mut a = [0u8; 32];
        let mut b = [0u8; 32];
        random_bytes(&mut a).unwrap();
        random_bytes(&mut b).unwrap();
        assert_ne!(a, b);
    }
}
