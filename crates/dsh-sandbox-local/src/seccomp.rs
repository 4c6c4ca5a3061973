//! The syscall filter of the Landlock backend, built with `seccompiler`:
//! what Landlock does not govern, refused with `EPERM` (a foreign
//! architecture's syscall ABI kills the process).
//!
//! Refused in both confining modes:
//! - `io_uring_*` (its operations bypass this filter, e.g. xattr changes);
//! - `ptrace`, `process_vm_readv`/`process_vm_writev`;
//! - `prlimit64`, `setpriority`, `ioprio_set`, `sched_set*` aimed at any
//!   process but the caller (pid/who 0);
//! - filesystem-specific ioctls (inode flags and `chattr`, fs xattrs,
//!   fscrypt policies, inode generations, btrfs subvolumes and snapshots,
//!   ext4/XFS/f2fs commands) but a few read-only ones and reflink clones;
//!   every xattr change;
//! - `mknod`/`mknodat` of character and block devices;
//! - keyrings (`add_key`, `request_key`, `keyctl`), `bpf`,
//!   `perf_event_open`;
//! - SysV IPC (`msg*`, `sem*`, `shm*`) and POSIX message queues (`mq_*`).
//!
//! Refused with the network `off`: every socket but `AF_UNIX` and
//! `AF_NETLINK` (Internet sockets of every type, packet, vsock, ...);
//! Landlock's TCP rules stay as a second layer.
//!
//! Refused in `read-only` only (Landlock cannot say where, so in
//! `workspace-write` they stay possible outside the workspace and the
//! result names the `metadata` gap): chmod, chown and timestamp changes.
//!
//! On x86_64 the x32 entry points of every refused syscall are refused too.

use std::collections::BTreeMap;

use dsh_sandbox::{BpfInstruction, NetworkPolicy, SandboxMode};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

/// The ioctl "type" bytes of filesystem-specific commands, which Landlock
/// does not govern on regular files and directories and which change
/// things on disk through a read-only descriptor: `'f'` (inode flags,
/// fscrypt policies, ext4), `'X'` (fs xattrs, XFS), `'v'` (inode
/// generation), `0x94` (btrfs subvolumes, snapshots, flags), `0xf5`
/// (f2fs), `'r'` (FAT attributes) and `0xbc` (bcachefs subvolumes).
const FILESYSTEM_IOCTL_TYPES: [u64; 7] = [0x66, 0x58, 0x76, 0x94, 0xf5, 0x72, 0xbc];

/// The read-only or content-writing commands of those types that stay
/// allowed: `FS_IOC_GETFLAGS` (both widths), `FS_IOC_FIEMAP`,
/// `FS_IOC_GETVERSION`, `FS_IOC_FSGETXATTR`, and `FICLONE`/`FICLONERANGE`
/// (which write only through a descriptor Landlock let open for writing).
const ALLOWED_FILESYSTEM_IOCTLS: [u64; 7] = [
    0x8008_6601,
    0x8004_6601,
    0xc020_660b,
    0x8008_7601,
    0x801c_581f,
    0x4004_9409,
    0x4020_940d,
];

/// Every filesystem-specific ioctl but the allowed ones (command numbers
/// are 32-bit: compared as such). Each type's rule lists only the allowed
/// commands of that type, which keeps the program short (its length is
/// paid at every spawn: the kernel emulates it per syscall number to build
/// its constant-action cache).
fn filesystem_ioctls() -> Option<Vec<SeccompRule>> {
    let terminal = TERMINAL_IOCTLS.iter().map(|request| {
        let condition =
            SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *request).ok()?;
        SeccompRule::new(vec![condition]).ok()
    });
    FILESYSTEM_IOCTL_TYPES
        .iter()
        .map(|kind| {
            let mut conditions = vec![SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(0xff00),
                kind << 8,
            )
            .ok()?];
            for allowed in ALLOWED_FILESYSTEM_IOCTLS {
                if allowed & 0xff00 == kind << 8 {
                    conditions.push(
                        SeccompCondition::new(
                            1,
                            SeccompCmpArgLen::Dword,
                            SeccompCmpOp::Ne,
                            allowed,
                        )
                        .ok()?,
                    );
                }
            }
            SeccompRule::new(conditions).ok()
        })
        .chain(terminal)
        .collect()
}

/// Terminal requests refused whatever the terminal: `TIOCSTI` (typing
/// into a terminal's input queue, the classic escape into the terminal a
/// sandbox was started from) and `TIOCLINUX` (the console's selection and
/// paste).
const TERMINAL_IOCTLS: [u64; 2] = [0x5412, 0x541c];

/// True if and only if this kernel serves the x32 syscall ABI; without it
/// every x32 call fails with ENOSYS before reaching any handler, so the
/// filter need not list them (and stays half as long). One probe per filter
/// built, and each filter is built once per provider.
#[cfg(target_arch = "x86_64")]
fn x32_served() -> bool {
    crate::sys::x32_served()
}

/// `setxattrat(2)` and `removexattrat(2)` (Linux 6.13): one number on every
/// architecture, not yet in every libc.
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// `IOPRIO_WHO_USER` of `ioprio_set(2)`.
const IOPRIO_WHO_USER: u64 = 3;

/// The x32 syscall bit (x86_64 only).
const X32: i64 = 0x4000_0000;

fn target() -> Option<TargetArch> {
    std::env::consts::ARCH.try_into().ok()
}

fn always() -> Vec<SeccompRule> {
    Vec::new()
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Option<SeccompRule> {
    let condition = SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).ok()?;
    SeccompRule::new(vec![condition]).ok()
}

/// A condition on an `int` argument: the kernel ignores the upper 32 bits,
/// so only the lower ones are compared (a 64-bit `Eq` could be dodged by
/// setting high bits).
fn int_condition(arg: u8, op: SeccompCmpOp, value: u64) -> Option<SeccompRule> {
    let condition = SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).ok()?;
    SeccompRule::new(vec![condition]).ok()
}

/// Refused when argument `arg` names another process (is not 0; compared
/// on all 64 bits, so high bits can only make it refuse more).
fn not_self(arg: u8) -> Option<Vec<SeccompRule>> {
    Some(vec![condition(arg, SeccompCmpOp::Ne, 0)?])
}

/// Refused when the mode argument `arg` makes a character or block device.
fn device_node(arg: u8) -> Option<Vec<SeccompRule>> {
    let format = u64::from(libc::S_IFMT);
    Some(vec![
        condition(
            arg,
            SeccompCmpOp::MaskedEq(format),
            u64::from(libc::S_IFCHR),
        )?,
        condition(
            arg,
            SeccompCmpOp::MaskedEq(format),
            u64::from(libc::S_IFBLK),
        )?,
    ])
}

/// A rule of several conditions on `int` arguments, all of which must hold.
fn all_of(conditions: &[(u8, SeccompCmpOp, u64)]) -> Option<SeccompRule> {
    let conditions = conditions
        .iter()
        .map(|(arg, op, value)| {
            SeccompCondition::new(*arg, SeccompCmpArgLen::Dword, op.clone(), *value).ok()
        })
        .collect::<Option<Vec<_>>>()?;
    SeccompRule::new(conditions).ok()
}

/// `socket()` of any family but `allowed` (compared on the `int` argument).
fn sockets_except(allowed: &[i32]) -> Option<Vec<SeccompRule>> {
    let conditions: Vec<(u8, SeccompCmpOp, u64)> = allowed
        .iter()
        .map(|family| (0, SeccompCmpOp::Ne, *family as u64))
        .collect();
    Some(vec![all_of(&conditions)?])
}

/// What the network `off` refuses: every socket but `AF_UNIX` and
/// `AF_NETLINK`. Internet sockets included, TCP too: Landlock's TCP rules
/// govern `bind` and `connect`, but not the port a bare `listen` picks, so
/// without this a command could still serve the outside.
fn network_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Option<()> {
    rules.insert(
        libc::SYS_socket,
        sockets_except(&[libc::AF_UNIX, libc::AF_NETLINK])?,
    );
    Some(())
}

/// What the network `allow` refuses under Landlock: every socket but
/// `AF_UNIX`, `AF_NETLINK` and TCP ones (stream sockets of the Internet
/// families with protocol 0 or TCP), so no datagram, raw, SCTP or MPTCP
/// socket escapes the ruleset's TCP rules, which allow only the proxy's
/// port.
fn allow_list_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Option<()> {
    let mut refused = sockets_except(&[
        libc::AF_UNIX,
        libc::AF_NETLINK,
        libc::AF_INET,
        libc::AF_INET6,
    ])?;
    let kind = SeccompCmpOp::MaskedEq(0xf);
    for family in [libc::AF_INET, libc::AF_INET6] {
        let family = family as u64;
        for other in [
            libc::SOCK_DGRAM,
            libc::SOCK_RAW,
            libc::SOCK_RDM,
            libc::SOCK_SEQPACKET,
            libc::SOCK_DCCP,
            // SOCK_PACKET, obsolete but still served by the kernel.
            10,
        ] {
            refused.push(all_of(&[
                (0, SeccompCmpOp::Eq, family),
                (1, kind.clone(), other as u64),
            ])?);
        }
        refused.push(all_of(&[
            (0, SeccompCmpOp::Eq, family),
            (1, kind.clone(), libc::SOCK_STREAM as u64),
            (2, SeccompCmpOp::Ne, 0),
            (2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64),
        ])?);
    }
    rules.insert(libc::SYS_socket, refused);
    Some(())
}

/// The filter bubblewrap itself runs under with the network `off`: its
/// network namespace holds the Internet families, not the others (vsock
/// reaches the hypervisor from any namespace), so every socket but
/// `AF_UNIX`, `AF_NETLINK`, `AF_INET` and `AF_INET6` is refused. `None`
/// where `seccompiler` has no target for this architecture.
pub(crate) fn foreign_families() -> Option<Vec<BpfInstruction>> {
    let mut rules = terminal_rules()?;
    let refused = sockets_except(&[
        libc::AF_UNIX,
        libc::AF_NETLINK,
        libc::AF_INET,
        libc::AF_INET6,
    ])?;
    #[cfg(target_arch = "x86_64")]
    if x32_served() {
        rules.insert(libc::SYS_socket | X32, refused.clone());
    }
    rules.insert(libc::SYS_socket, refused);
    compile(rules)
}

/// The filter bubblewrap itself runs under with the network `on`: only the
/// terminal requests of [`TERMINAL_IOCTLS`] are refused.
pub(crate) fn terminal_only() -> Option<Vec<BpfInstruction>> {
    compile(terminal_rules()?)
}

fn terminal_rules() -> Option<Rules> {
    let refused: Option<Vec<SeccompRule>> = TERMINAL_IOCTLS
        .iter()
        .map(|request| {
            let condition =
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *request)
                    .ok()?;
            SeccompRule::new(vec![condition]).ok()
        })
        .collect();
    let refused = refused?;
    let mut rules = BTreeMap::new();
    #[cfg(target_arch = "x86_64")]
    if x32_served() {
        rules.insert(libc::SYS_ioctl | X32, refused.clone());
        rules.insert(514 | X32, refused.clone());
    }
    rules.insert(libc::SYS_ioctl, refused);
    Some(rules)
}

/// Calls refused whatever their arguments: io_uring (it bypasses the
/// filter), tracing and reading other processes, extended attributes,
/// keyrings, BPF and perf, System V and POSIX IPC.
const UNCONDITIONAL: [i64; 35] = [
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmdt,
    libc::SYS_shmctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_notify,
    libc::SYS_mq_getsetattr,
];

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// Scheduling and resource calls allowed on the caller itself only.
fn self_only(rules: &mut Rules) -> Option<()> {
    rules.insert(libc::SYS_prlimit64, not_self(0)?);
    // setpriority(PRIO_USER, 0, ..) and ioprio_set(IOPRIO_WHO_USER, 0, ..)
    // mean "every process of my user": refused whatever `who` says.
    let mut setpriority = not_self(1)?;
    setpriority.push(int_condition(0, SeccompCmpOp::Eq, libc::PRIO_USER as u64)?);
    rules.insert(libc::SYS_setpriority, setpriority);
    let mut ioprio = not_self(1)?;
    ioprio.push(int_condition(0, SeccompCmpOp::Eq, IOPRIO_WHO_USER)?);
    rules.insert(libc::SYS_ioprio_set, ioprio);
    for nr in [
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
    ] {
        rules.insert(nr, not_self(0)?);
    }
    Some(())
}

fn rules(mode: SandboxMode, network: NetworkPolicy) -> Option<Rules> {
    let mut rules: Rules = BTreeMap::new();
    for nr in UNCONDITIONAL {
        rules.insert(nr, always());
    }
    rules.insert(SYS_SETXATTRAT, always());
    rules.insert(SYS_REMOVEXATTRAT, always());
    self_only(&mut rules)?;
    rules.insert(libc::SYS_mknodat, device_node(2)?);
    rules.insert(libc::SYS_ioctl, filesystem_ioctls()?);
    match network {
        NetworkPolicy::Off => network_rules(&mut rules)?,
        NetworkPolicy::Allow => allow_list_rules(&mut rules)?,
        _ => {}
    }
    if mode == SandboxMode::ReadOnly {
        for nr in [
            libc::SYS_fchmod,
            libc::SYS_fchmodat,
            libc::SYS_fchmodat2,
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_utimensat,
        ] {
            rules.insert(nr, always());
        }
    }
    #[cfg(target_arch = "x86_64")]
    legacy_and_x32(&mut rules, mode)?;
    Some(rules)
}

/// x86_64's older calls, and every rule again through the x32 ABI where
/// the kernel serves it.
#[cfg(target_arch = "x86_64")]
fn legacy_and_x32(rules: &mut Rules, mode: SandboxMode) -> Option<()> {
    rules.insert(libc::SYS_mknod, device_node(1)?);
    if mode == SandboxMode::ReadOnly {
        for nr in [
            libc::SYS_chmod,
            libc::SYS_chown,
            libc::SYS_lchown,
            libc::SYS_utime,
            libc::SYS_utimes,
            libc::SYS_futimesat,
        ] {
            rules.insert(nr, always());
        }
    }
    // The same calls through the x32 ABI, where the kernel serves it: the
    // same numbers with the x32 bit, plus the x32-only numbers of ioctl
    // (514), ptrace (521), mq_notify (527), process_vm_readv (539) and
    // process_vm_writev (540).
    if !x32_served() {
        return Some(());
    }
    let native: Vec<(i64, Vec<SeccompRule>)> =
        rules.iter().map(|(nr, r)| (nr | X32, r.clone())).collect();
    rules.extend(native);
    if let Some(ioctl) = rules.get(&libc::SYS_ioctl).cloned() {
        rules.insert(514 | X32, ioctl);
    }
    for nr in [521, 527, 539, 540] {
        rules.insert(nr | X32, always());
    }
    Some(())
}

/// The filter for `mode` and `network` on this architecture; `None` where
/// `seccompiler` has no target for it (the result then names the
/// `syscalls` gap).
pub(crate) fn filter(mode: SandboxMode, network: NetworkPolicy) -> Option<Vec<BpfInstruction>> {
    compile(rules(mode, network)?)
}

/// `rules` as a program refusing what they match with `EPERM`.
fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>) -> Option<Vec<BpfInstruction>> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target()?,
    )
    .ok()?;
    let program: seccompiler::BpfProgram = filter.try_into().ok()?;
    Some(
        program
            .into_iter()
            .map(|i| BpfInstruction {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_modes_build_and_read_only_refuses_more() {
        let read_only = filter(SandboxMode::ReadOnly, NetworkPolicy::On)
            .expect("a filter for this architecture");
        let write = filter(SandboxMode::WorkspaceWrite, NetworkPolicy::On)
            .expect("a filter for this architecture");
        let offline = filter(SandboxMode::ReadOnly, NetworkPolicy::Off)
            .expect("a filter for this architecture");
        assert!(offline.len() > read_only.len());
        assert!(foreign_families().is_some_and(|f| f.len() < 40));
        assert!(
            read_only.len() > write.len(),
            "{} vs {}",
            read_only.len(),
            write.len()
        );
        assert!(read_only.len() < usize::from(u16::MAX));
        // Short enough that attaching it stays cheap (twice as long where
        // the kernel serves x32).
        #[cfg(target_arch = "x86_64")]
        let limit = if crate::sys::x32_served() { 1200 } else { 600 };
        #[cfg(not(target_arch = "x86_64"))]
        let limit = 600;
        assert!(read_only.len() < limit, "{} instructions", read_only.len());
    }
}
