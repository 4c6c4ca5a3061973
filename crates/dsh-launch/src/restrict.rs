//! The restriction a command gets between fork and exec, prepared in the
//! parent as plain data and applied in the child with raw
//! async-signal-safe syscalls only: no allocation, no locks, no logging.
//!
//! Every command, confined or not, starts with no inherited descriptor
//! above 2: all of them are marked close-on-exec (`close_range` with
//! `CLOSE_RANGE_CLOEXEC`; on kernels before 5.11 one `fcntl` per possible
//! descriptor up to the soft `RLIMIT_NOFILE`), except the ones the
//! restriction keeps on purpose. Closing on exec rather than at once keeps
//! the exec-status pipe and a Landlock ruleset usable until the very end.

use std::os::fd::{AsRawFd, RawFd};

use dsh_sandbox::Restriction;

use super::errno;

/// Log the domain's denials after exec too (Landlock ABI 7).
const LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON: u32 = 1 << 1;

/// A restriction in the form the child reads: raw numbers and pointers into
/// memory the parent keeps alive until the child has exec'd.
pub struct Prepared {
    drop_capabilities: bool,
    no_new_privs: bool,
    landlock: RawFd,
    /// The thread name set just before, if any (and then the domain logs
    /// its denials after exec too).
    landlock_name: Option<std::ffi::CString>,
    seccomp: Vec<libc::sock_filter>,
    keep: Vec<RawFd>,
    /// The warm sandbox to enter first, if any.
    pub entry: Option<super::enter::PreparedEntry>,
    /// What a process that never execs keeps open for the command: the
    /// standard streams, the report pipe, the ruleset, `keep`; sorted.
    pub inherited: Vec<RawFd>,
}

impl Prepared {
    /// Prepares `restriction` (allocation happens here, in the parent).
    pub fn new(restriction: &Restriction) -> std::io::Result<Self> {
        let seccomp: Vec<libc::sock_filter> = restriction
            .seccomp_filter
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        let entry = restriction
            .enter
            .as_deref()
            .map(super::enter::PreparedEntry::new)
            .transpose()?;
        let mut inherited: Vec<RawFd> = (0..3)
            .chain(
                restriction
                    .landlock_ruleset
                    .as_ref()
                    .map(|fd| fd.as_raw_fd()),
            )
            .chain(restriction.keep_fds.iter().map(|fd| fd.as_raw_fd()))
            .collect();
        inherited.sort_unstable();
        Ok(Prepared {
            inherited,
            entry,
            drop_capabilities: restriction.drop_capabilities,
            no_new_privs: restriction.drop_capabilities
                || restriction.landlock_ruleset.is_some()
                || !seccomp.is_empty(),
            landlock: restriction
                .landlock_ruleset
                .as_ref()
                .map_or(-1, |fd| fd.as_raw_fd()),
            landlock_name: restriction.landlock_audit_name.clone(),
            seccomp,
            keep: restriction
                .keep_fds
                .iter()
                .map(|fd| fd.as_raw_fd())
                .collect(),
        })
    }
}

impl Prepared {
    /// Keeps `fd` open in a process that never execs too.
    pub fn inherit(&mut self, fd: RawFd) {
        let at = self.inherited.partition_point(|&kept| kept < fd);
        self.inherited.insert(at, fd);
    }
}

/// Marks every descriptor from 3 up close-on-exec.
///
/// # Safety
///
/// Only in a freshly cloned child (its own descriptor table) before exec.
unsafe fn close_inherited_on_exec() {
    // SAFETY: close_range with integer arguments only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return;
    }
    let mut limit = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 on ourselves writes into a stack struct.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            libc::RLIMIT_NOFILE,
            std::ptr::null::<libc::rlimit64>(),
            &mut limit as *mut libc::rlimit64,
        )
    };
    let top = if rc == 0 {
        RawFd::try_from(limit.rlim_cur.min(1 << 20)).unwrap_or(1 << 20)
    } else {
        1 << 16
    };
    for fd in 3..top {
        // SAFETY: fcntl on a number that may or may not be open (EBADF is fine).
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_NO_CAP_AMBIENT_RAISE and
/// the lock bits of all of them and of SECBIT_KEEP_CAPS (which stays off).
const LOCKED_SECUREBITS: libc::c_ulong = 0b1110_1111;

/// Drops every capability for good.
///
/// The bounding set and the securebits need `CAP_SETPCAP`: without it
/// (an unprivileged caller) there is nothing to lose, and `no_new_privs`
/// keeps exec from granting anything.
///
/// # Safety
///
/// Only in a freshly cloned child before exec.
unsafe fn drop_capabilities() -> Result<(), i32> {
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            match errno() {
                // Past the last capability this kernel knows.
                libc::EINVAL => break,
                // No CAP_SETPCAP: no capability to drop from the bounding set.
                libc::EPERM => break,
                other => return Err(other),
            }
        }
    }
    // SAFETY: prctl with integer arguments only; EPERM means no CAP_SETPCAP.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, LOCKED_SECUREBITS, 0, 0, 0) } != 0
        && errno() != libc::EPERM
    {
        return Err(errno());
    }
    // SAFETY: prctl with integer arguments only (EINVAL before Linux 4.3,
    // where there is no ambient set).
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    } != 0
        && errno() != libc::EINVAL
    {
        return Err(errno());
    }
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads a header and two data structs from our stack;
    // lowering every set is always permitted.
    if unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    } != 0
    {
        return Err(errno());
    }
    Ok(())
}

/// Applies `prepared` to the calling child; returns the errno of the first
/// step that failed.
///
/// # Safety
///
/// Only in a freshly cloned child (own descriptor table) before exec, while
/// the parent keeps `prepared` alive.
pub unsafe fn apply(prepared: &Prepared) -> Result<(), i32> {
    // SAFETY: we are that child.
    unsafe { close_inherited_on_exec() };
    for &fd in &prepared.keep {
        // SAFETY: fcntl with integer arguments; the fd is one the parent holds.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
            return Err(errno());
        }
    }
    if prepared.drop_capabilities {
        // SAFETY: we are that child.
        unsafe { drop_capabilities() }?;
    }
    // SAFETY: prctl with integer arguments only.
    if prepared.no_new_privs && unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(errno());
    }
    if prepared.landlock >= 0 {
        let mut flags = 0u32;
        if let Some(name) = &prepared.landlock_name {
            // SAFETY: prctl reads a NUL-terminated name the parent keeps
            // alive (reading the pointer allocates nothing); it names only
            // this task, whose exec renames it again.
            if unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) } != 0 {
                return Err(errno());
            }
            flags = LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON;
        }
        // SAFETY: landlock_restrict_self on a ruleset fd the parent keeps open.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, prepared.landlock, flags) } != 0
        {
            return Err(errno());
        }
    }
    if !prepared.seccomp.is_empty() {
        let program = libc::sock_fprog {
            len: u16::try_from(prepared.seccomp.len()).map_err(|_| libc::E2BIG)?,
            filter: prepared.seccomp.as_ptr().cast_mut(),
        };
        // SAFETY: the program points at instructions the parent keeps alive;
        // the kernel copies them.
        if unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
                0,
                0,
            )
        } != 0
        {
            return Err(errno());
        }
    }
    Ok(())
}
