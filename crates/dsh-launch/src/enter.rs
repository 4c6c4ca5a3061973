//! Entering a session's warm sandbox between clone and exec (see
//! [`dsh_sandbox::Entry`]): the namespaces a sandbox was built in once are
//! joined by descriptor, and the command gets a mount, pid, IPC and cgroup
//! namespace of its own in them, so what bubblewrap builds per command
//! (the mounts, the protected set, the network namespace) is built once
//! per session, and what is the command's own (`/tmp`, `/proc`, its
//! processes) stays its own.
//!
//! Three processes take part, all made here with raw async-signal-safe
//! syscalls, no allocation:
//!
//! - the cloned child (on the launcher's memory) joins the namespaces,
//!   unshares the command's, mounts its `/tmp` and then clones the pid
//!   namespace's first process as a sibling (`CLONE_PARENT`: the server's
//!   own child, so the server waits for it as for any command) and exits;
//! - that first process mounts the fresh `/proc`, makes a session of its
//!   own and starts the command (`CLONE_VM | CLONE_VFORK`, on the lower
//!   half of the launcher's stack in its copy of the memory); it waits for
//!   it and exits with its status, which takes the rest of the namespace
//!   (background leftovers) with it, as bubblewrap's first process does;
//! - the command applies the rest of the restriction and execs.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::errno;

/// At most this many mounts are put back on top of a command's `/tmp`.
pub const MAX_EXPOSED: usize = 32;

/// `open_tree` flags (`linux/mount.h`).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const AT_RECURSIVE: libc::c_uint = 0x8000;
/// `move_mount` flag: the source is the descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// One mount put back on top of the command's `/tmp`.
struct Exposed {
    from: CString,
    at: CString,
    /// The directories to make on the way to `at`, outermost first.
    parents: Vec<CString>,
    read_only: bool,
}

/// An [`dsh_sandbox::Entry`] in the form the child reads.
pub struct PreparedEntry {
    namespaces: Vec<(RawFd, libc::c_int)>,
    tmp: Option<CString>,
    exposed: Vec<Exposed>,
    own_network: bool,
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

impl PreparedEntry {
    /// Prepares `entry` (allocation happens here, in the parent).
    pub fn new(entry: &dsh_sandbox::Entry) -> io::Result<PreparedEntry> {
        if entry.exposed.len() > MAX_EXPOSED {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} mounts to keep visible over the command's /tmp; at most {MAX_EXPOSED}",
                    entry.exposed.len()
                ),
            ));
        }
        let mut exposed = Vec::new();
        for dsh_sandbox::Exposed {
            from,
            at,
            read_only,
        } in &entry.exposed
        {
            let mut parents = Vec::new();
            let mut ancestors: Vec<&Path> = at
                .ancestors()
                .skip(1)
                .take_while(|a| a.starts_with("/tmp") && *a != Path::new("/tmp"))
                .collect();
            ancestors.reverse();
            for parent in ancestors {
                parents.push(cstring(parent)?);
            }
            exposed.push(Exposed {
                from: cstring(from)?,
                at: cstring(at)?,
                parents,
                read_only: *read_only,
            });
        }
        Ok(PreparedEntry {
            namespaces: entry
                .namespaces
                .iter()
                .map(|(fd, kind)| (fd.as_raw_fd(), *kind))
                .collect(),
            tmp: entry.tmp.as_deref().map(cstring).transpose()?,
            exposed,
            own_network: entry.own_network,
        })
    }
}

/// `mount(2)` with NUL-terminated arguments (null for none).
///
/// # Safety
///
/// Every pointer is null or points at a NUL-terminated string.
unsafe fn mount(
    source: *const libc::c_char,
    target: *const libc::c_char,
    kind: *const libc::c_char,
    flags: libc::c_ulong,
    data: *const libc::c_char,
) -> Result<(), i32> {
    // SAFETY: the caller passes NUL-terminated strings or nulls.
    if unsafe { libc::mount(source, target, kind, flags, data.cast()) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Joins the sandbox's namespaces and unshares the command's own.
///
/// # Safety
///
/// Only in a freshly cloned, single-threaded child with its own file
/// system attributes (no `CLONE_FS`), before exec.
unsafe fn join(entry: &PreparedEntry) -> Result<(), i32> {
    for &(fd, kind) in &entry.namespaces {
        // SAFETY: setns with a descriptor the parent keeps open.
        if unsafe { libc::setns(fd, kind) } != 0 {
            return Err(errno());
        }
    }
    let mut own =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWCGROUP;
    if entry.own_network {
        own |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare with integer flags; we hold every capability in the
    // user namespace just joined.
    if unsafe { libc::unshare(own) } != 0 {
        return Err(errno());
    }
    if entry.own_network {
        loopback_up()?;
    }
    // SAFETY: static NUL-terminated strings.
    unsafe {
        mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    }
}

/// Brings the loopback interface of a new network namespace up (what
/// bubblewrap's `--unshare-net` does): raw syscalls on a stack `ifreq`.
fn loopback_up() -> Result<(), i32> {
    // SAFETY: socket with integer arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: an all-zero `ifreq` is a valid value of the plain C struct.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    // The union's flags member, the one SIOCSIFFLAGS reads.
    request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads the `ifreq` we own; then the socket we
    // opened is closed.
    let set = unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &request) };
    let failed = (set != 0).then(errno);
    // SAFETY: closes the socket opened above.
    unsafe { libc::close(fd) };
    failed.map_or(Ok(()), Err)
}

/// Makes a mount point at `exposed.at` (its directories on the way too),
/// a directory or an empty file as `directory` says.
///
/// # Safety
///
/// In the entering child, before exec.
unsafe fn mount_point(exposed: &Exposed, directory: bool) -> Result<(), i32> {
    for parent in &exposed.parents {
        // SAFETY: mkdir with a NUL-terminated path the parent keeps alive.
        if unsafe { libc::mkdir(parent.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
            return Err(errno());
        }
    }
    if directory {
        // SAFETY: as above.
        if unsafe { libc::mkdir(exposed.at.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
            return Err(errno());
        }
        return Ok(());
    }
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: open/close with a NUL-terminated path the parent keeps alive.
    unsafe {
        let fd = libc::open(exposed.at.as_ptr(), flags, 0o644);
        if fd < 0 {
            return Err(errno());
        }
        libc::close(fd);
    }
    Ok(())
}

/// Clones each of `entry.exposed` (recursively) into `clones`.
///
/// # Safety
///
/// In the entering child, after [`join`], before exec.
unsafe fn clone_exposed(
    entry: &PreparedEntry,
    clones: &mut [RawFd; MAX_EXPOSED],
) -> Result<(), i32> {
    for (at, exposed) in entry.exposed.iter().enumerate() {
        let flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE;
        // SAFETY: open_tree with a NUL-terminated path; returns a descriptor.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                exposed.from.as_ptr(),
                flags,
            )
        };
        if fd < 0 {
            return Err(errno());
        }
        clones[at] = fd as RawFd;
    }
    Ok(())
}

/// The command's `/tmp` (bound, or an empty tmpfs), `/dev/shm` and
/// `/dev/pts`.
///
/// # Safety
///
/// In the entering child, after [`join`], before exec.
unsafe fn own_tmp_and_devices(entry: &PreparedEntry) -> Result<(), i32> {
    let hardened = libc::MS_NOSUID | libc::MS_NODEV;
    let none = std::ptr::null();
    // SAFETY: NUL-terminated strings the parent keeps alive or static ones.
    unsafe {
        match &entry.tmp {
            Some(tmp) => {
                mount(tmp.as_ptr(), c"/tmp".as_ptr(), none, libc::MS_BIND, none)?;
                let remount = libc::MS_REMOUNT | libc::MS_BIND | hardened;
                mount(none, c"/tmp".as_ptr(), none, remount, none)?;
            }
            None => {
                let tmpfs = c"tmpfs".as_ptr();
                mount(
                    tmpfs,
                    c"/tmp".as_ptr(),
                    tmpfs,
                    hardened,
                    c"mode=0755".as_ptr(),
                )?;
            }
        }
        let tmpfs = c"tmpfs".as_ptr();
        mount(
            tmpfs,
            c"/dev/shm".as_ptr(),
            tmpfs,
            hardened,
            c"mode=1777".as_ptr(),
        )?;
        let devpts = c"devpts".as_ptr();
        let pts = c"newinstance,ptmxmode=0666,mode=620".as_ptr();
        mount(
            devpts,
            c"/dev/pts".as_ptr(),
            devpts,
            libc::MS_NOSUID | libc::MS_NOEXEC,
            pts,
        )
    }
}

/// The command's `/tmp`, `/dev/shm` and `/dev/pts`, with `exposed` on
/// top of `/tmp`.
///
/// # Safety
///
/// In the entering child, after [`join`], before exec.
unsafe fn own_mounts(entry: &PreparedEntry) -> Result<(), i32> {
    let mut clones = [-1 as RawFd; MAX_EXPOSED];
    // SAFETY: forwarded from the caller.
    unsafe {
        clone_exposed(entry, &mut clones)?;
        own_tmp_and_devices(entry)?;
    }
    for (at, exposed) in entry.exposed.iter().enumerate() {
        let mut stat = std::mem::MaybeUninit::<libc::stat>::zeroed();
        // SAFETY: fstat on the clone's descriptor into a stack buffer.
        if unsafe { libc::fstat(clones[at], stat.as_mut_ptr()) } != 0 {
            return Err(errno());
        }
        // SAFETY: fstat succeeded.
        let directory = unsafe { stat.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFDIR;
        // SAFETY: in the entering child.
        unsafe { mount_point(exposed, directory) }?;
        // SAFETY: move_mount of a clone we hold onto a NUL-terminated path.
        let moved = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                clones[at],
                c"".as_ptr(),
                libc::AT_FDCWD,
                exposed.at.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        if moved != 0 {
            return Err(errno());
        }
        if exposed.read_only {
            let flags = libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV;
            let none = std::ptr::null();
            // SAFETY: a NUL-terminated path the parent keeps alive.
            unsafe { mount(none, exposed.at.as_ptr(), none, flags, none) }?;
        }
        // SAFETY: closing a descriptor we opened.
        unsafe { libc::close(clones[at]) };
    }
    Ok(())
}

/// Joins the sandbox and makes the command's mounts: what the cloned
/// child does before it starts the pid namespace's first process.
///
/// # Safety
///
/// Only in a freshly cloned, single-threaded child with its own file
/// system attributes, before exec, while the parent keeps `entry` alive.
pub unsafe fn enter(entry: &PreparedEntry) -> Result<(), i32> {
    // SAFETY: forwarded from the caller.
    unsafe {
        join(entry)?;
        own_mounts(entry)
    }
}

/// Closes every descriptor but `kept` (sorted).
pub fn close_all_but(kept: &[RawFd]) {
    let mut from: u32 = 0;
    for &fd in kept {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd > from {
            // SAFETY: close_range with integer arguments only.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32) };
        }
        from = fd.saturating_add(1);
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, u32::MAX, 0u32) };
}

/// The fresh `/proc` of the command's pid namespace, what root inside
/// could write through it read-only (as bubblewrap does).
///
/// # Safety
///
/// In the pid namespace's first process, before it starts the command.
pub unsafe fn mount_proc() -> Result<(), i32> {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // SAFETY: static NUL-terminated strings.
    unsafe {
        mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            flags,
            std::ptr::null(),
        )?;
    }
    for path in [
        c"/proc/sys",
        c"/proc/sysrq-trigger",
        c"/proc/fs",
        c"/proc/irq",
        c"/proc/bus",
    ] {
        // SAFETY: static NUL-terminated strings.
        let bound = unsafe {
            mount(
                path.as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            )
        };
        match bound {
            Ok(()) => {}
            Err(libc::ENOENT) => continue,
            Err(errno) => return Err(errno),
        }
        let remount = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags;
        // SAFETY: as above.
        unsafe {
            mount(
                std::ptr::null(),
                path.as_ptr(),
                std::ptr::null(),
                remount,
                std::ptr::null(),
            )?
        };
    }
    Ok(())
}

/// The pid namespace's first process after starting `command`: reaps
/// every process that ends in the namespace and exits with the command's
/// status once it ends (128 + the signal of a command killed by one; the
/// first process of a pid namespace cannot die of a signal it sends
/// itself). Its exit ends everything left in the namespace.
pub fn wait_for(command: libc::pid_t) -> ! {
    loop {
        let mut status = 0;
        // SAFETY: wait4 on any child into a stack integer.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        let code = if pid == command {
            if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            }
        } else if pid < 0 && errno() != libc::EINTR {
            127
        } else {
            continue;
        };
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(code) };
    }
}
