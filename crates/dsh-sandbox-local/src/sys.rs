//! The raw syscalls of this crate: the Landlock ABI query and the pre-exec
//! restriction (no_new_privs, landlock_restrict_self, seccomp).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

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

/// A seccomp filter, built in the parent; the child only points the kernel at it.
pub(crate) struct SeccompProgram {
    filter: Vec<libc::sock_filter>,
}

const AUDIT_ARCH: u32 = if cfg!(target_arch = "x86_64") {
    0xC000_003E
} else if cfg!(target_arch = "aarch64") {
    0xC000_00B7
} else {
    0
};

/// `setxattrat(2)` and `removexattrat(2)` (Linux 6.13): one number on every
/// architecture, not yet in every libc.
const SYS_SETXATTRAT: libc::c_long = 463;
const SYS_REMOVEXATTRAT: libc::c_long = 466;

/// Syscalls that change file metadata without opening the file for
/// writing; Landlock does not govern them.
fn metadata_syscalls() -> Vec<libc::c_long> {
    let mut calls = vec![
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        libc::SYS_fchmodat2,
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_utimensat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        SYS_SETXATTRAT,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        SYS_REMOVEXATTRAT,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
    ]);
    calls
}

fn statement(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

impl SeccompProgram {
    /// Refuses (EPERM) every syscall that changes file metadata, and every
    /// syscall of a foreign ABI (so 32-bit entry points cannot bypass it).
    pub(crate) fn deny_metadata_changes() -> Option<Self> {
        if AUDIT_ARCH == 0 {
            return None;
        }
        let deny = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32);
        let mut filter = vec![
            // A = arch; foreign ABI → deny.
            statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 4),
            libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                jt: 1,
                jf: 0,
                k: AUDIT_ARCH,
            },
            statement(libc::BPF_RET | libc::BPF_K, deny),
            // A = syscall number; x32 numbers → deny.
            statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
            libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
                jt: 0,
                jf: 1,
                k: 0x4000_0000,
            },
            statement(libc::BPF_RET | libc::BPF_K, deny),
        ];
        for nr in metadata_syscalls() {
            filter.push(libc::sock_filter {
                code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                jt: 0,
                jf: 1,
                k: u32::try_from(nr).ok()?,
            });
            filter.push(statement(libc::BPF_RET | libc::BPF_K, deny));
        }
        filter.push(statement(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ALLOW,
        ));
        Some(SeccompProgram { filter })
    }
}

/// Applies the restriction to the calling (forked) child: no_new_privs,
/// then the Landlock domain, then the seccomp filter.
///
/// Only raw syscalls on memory prepared before the fork: async-signal-safe.
pub(crate) fn restrict_child(
    ruleset: &OwnedFd,
    seccomp: Option<&SeccompProgram>,
) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: landlock_restrict_self takes a ruleset fd we own and no flags.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(program) = seccomp {
        let fprog = libc::sock_fprog {
            len: program.filter.len() as u16,
            filter: program.filter.as_ptr().cast_mut(),
        };
        // SAFETY: fprog points at a filter that outlives this call; the kernel copies it.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
                0,
                0,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Applies `restriction` to a probe child between fork and exec.
pub(crate) fn restrict_before_exec(
    command: &mut tokio::process::Command,
    restriction: dsh_sandbox::PreExec,
) {
    // SAFETY: the restriction makes raw async-signal-safe syscalls only (the
    // contract of `PreExec`).
    unsafe {
        command.pre_exec(move || restriction());
    }
}
