//! The Landlock backend: a ruleset built in the parent (through the
//! workspace handle opened at resolution), a syscall filter, and a
//! capability drop, all applied to the child by the launcher between fork
//! and exec without any helper binary.
//!
//! Handled accesses are the write-type ones of ABI 5 (write, truncate,
//! remove, make-*, refer, device ioctl), best effort downgraded to the
//! running kernel; reads are never restricted. Scopes (ABI 6) confine
//! signals and abstract unix sockets to the sandbox. Devices can never be
//! created (`MAKE_CHAR`/`MAKE_BLOCK` are granted nowhere).
//!
//! | mode | writable | gaps |
//! |---|---|---|
//! | read-only | `/dev/null`, `/dev/tty` (no device ioctls) | none on ABI ≥ 6 |
//! | workspace-write | also the workspace, the command's private `TMPDIR` and the sandbox's caches (named to the tools by their variables) | `metadata` (chmod, chown, times outside the workspace) |
//!
//! Older kernels add `truncate` (ABI < 3) and `signals` +
//! `abstract-sockets` (ABI < 6); an architecture without a filter adds
//! `syscalls` (and `metadata` in read-only).
//!
//! Protected paths: Landlock only ever allows (a rule grants rights beneath
//! a directory, nothing takes them back lower down), so a read-only hole
//! in the writable workspace cannot be expressed. Granting the workspace's
//! entries one by one instead would refuse every new top-level file, and
//! still leave the root's own `MAKE_*` rights, which cover any name. So in
//! `workspace-write` with protected paths the result names the
//! `protected-paths` gap; bubblewrap keeps them.
//!
//! Network `off`: the syscall filter refuses every socket but `AF_UNIX`
//! and `AF_NETLINK` (TCP, UDP, raw, SCTP, packet, vsock, ...), and TCP
//! `bind` and `connect` are handled with no port allowed (ABI 4) as a
//! second layer. Without a filter the result names the `tcp` and `udp`
//! gaps (Landlock alone does not see the port a bare `listen` picks, nor
//! any other protocol). Loopback is cut too: unlike under bubblewrap, a
//! command cannot serve itself on TCP.
//!
//! Network `allow`: TCP `connect` to the proxy door's loopback port only
//! and no `bind`, the filter refusing every socket but `AF_UNIX`,
//! `AF_NETLINK` and TCP; gap `proxy-port` (see [`crate::network`]).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};

use dsh_sandbox::{
    BpfInstruction, Confinement, Invocation, NetworkPolicy, Restriction, SandboxGap, SandboxMode,
    SandboxPolicy,
};
use landlock::{
    AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope, ABI,
};

use crate::error::SandboxError;

/// The backend's name in results.
pub(crate) const NAME: &str = "landlock";
/// What a Landlock denial looks like on stderr.
pub(crate) const DENIAL: &str = "permission denied";

fn handled() -> BitFlags<AccessFs> {
    AccessFs::from_write(ABI::V5)
}

/// Everything a writable tree allows: all handled rights but devices.
fn writable() -> BitFlags<AccessFs> {
    handled() & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

fn file_write() -> BitFlags<AccessFs> {
    AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
}

fn ruleset(policy: &SandboxPolicy, proxy_port: Option<u16>) -> Result<OwnedFd, SandboxError> {
    let ruleset = |step: &'static str| {
        move |err: landlock::RulesetError| SandboxError::Landlock {
            step,
            detail: err.to_string(),
        }
    };
    let mut base = Ruleset::default()
        .handle_access(handled())
        .and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        .map_err(ruleset("create the ruleset"))?;
    if policy.network != NetworkPolicy::On {
        // Off: no port is ever allowed, every TCP bind and connect is
        // refused; on an allow-list, only a connect to the proxy's port
        // (best effort: ignored below ABI 4, where the gap says so).
        base = base
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(ruleset("handle TCP"))?;
    }
    let mut created = base.create().map_err(ruleset("create the ruleset"))?;
    if let (NetworkPolicy::Allow, Some(port)) = (policy.network, proxy_port) {
        created = created
            .add_rule(landlock::NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(ruleset("allow the proxy's port"))?;
    }
    let dev_null = PathFd::new("/dev/null").map_err(|err| SandboxError::Landlock {
        step: "open /dev/null",
        detail: err.to_string(),
    })?;
    created = created
        .add_rule(PathBeneath::new(dev_null, file_write()))
        .map_err(ruleset("allow /dev/null"))?;
    // A command's own controlling terminal, if it has one (bash opens it at
    // start-up; without a terminal the open fails with ENXIO either way):
    // writable, without device ioctls. Absent on some hosts: skipped.
    if let Ok(dev_tty) = PathFd::new("/dev/tty") {
        created = created
            .add_rule(PathBeneath::new(dev_tty, AccessFs::WriteFile))
            .map_err(ruleset("allow /dev/tty"))?;
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        created = created
            .add_rule(PathBeneath::new(policy.workspace.handle(), writable()))
            .map_err(ruleset("allow the workspace"))?;
        if let Some(tmp) = &policy.private_tmp {
            let fd = PathFd::new(tmp).map_err(|err| SandboxError::Landlock {
                step: "open the private TMPDIR",
                detail: err.to_string(),
            })?;
            created = created
                .add_rule(PathBeneath::new(fd, writable()))
                .map_err(ruleset("allow the private TMPDIR"))?;
        }
        // The sandbox's caches (a directory gone meanwhile is left out:
        // its tool fails on it, nothing else).
        for root in &policy.caches.roots {
            if let Ok(fd) = PathFd::new(root) {
                created = created
                    .add_rule(PathBeneath::new(fd, writable()))
                    .map_err(ruleset("allow the sandbox's caches"))?;
            }
        }
    }
    Option::<OwnedFd>::from(created).ok_or(SandboxError::LandlockUnsupported)
}

/// A ruleset that handles no file access and only scopes signals and
/// abstract unix sockets to the sandbox: what bubblewrap's namespaces leave
/// open while the network namespace is shared. `None` before ABI 6.
pub(crate) fn scope_only() -> Option<OwnedFd> {
    let created = Ruleset::default()
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .and_then(Ruleset::create)
        .ok()?;
    Option::<OwnedFd>::from(created)
}

/// What Landlock cannot govern for `policy` on a kernel of ABI `abi`, with
/// or without the syscall filter.
pub(crate) fn gaps(policy: &SandboxPolicy, abi: i64, filtered: bool) -> Vec<SandboxGap> {
    let mode = policy.mode;
    let mut gaps = Vec::new();
    if mode == SandboxMode::WorkspaceWrite || !filtered {
        gaps.push(SandboxGap::Metadata);
    }
    if abi < 3 {
        gaps.push(SandboxGap::Truncate);
    }
    if abi < 6 {
        gaps.push(SandboxGap::Signals);
        gaps.push(SandboxGap::AbstractSockets);
    }
    if !filtered {
        gaps.push(SandboxGap::Syscalls);
    }
    // (The provider empties `protected` when nothing resolves in the
    // workspace: the classes resolve to nothing once each member is
    // unprotected by name.)
    if mode == SandboxMode::WorkspaceWrite && !policy.protected.is_empty() {
        gaps.push(SandboxGap::ProtectedPaths);
    }
    // The filter refuses every Internet socket; without it Landlock's TCP
    // rules (ABI 4) still leave a bare `listen` and every other protocol.
    if policy.network == NetworkPolicy::Off && !filtered {
        gaps.push(SandboxGap::Tcp);
        gaps.push(SandboxGap::Udp);
    }
    // On an allow-list the kernel knows the proxy's port, not the host.
    if policy.network == NetworkPolicy::Allow {
        gaps.push(SandboxGap::ProxyPort);
        if !filtered {
            gaps.push(SandboxGap::Udp);
        }
    }
    gaps
}

/// What does not change from one command to the next, built once per
/// provider: the syscall filter of each mode and network policy, and the
/// read-only rulesets (a ruleset fd can be enforced any number of times).
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    filters: [OnceLock<Option<Arc<[BpfInstruction]>>>; 6],
    read_only: [OnceLock<Arc<OwnedFd>>; 2],
}

impl Prepared {
    fn filter(&self, mode: SandboxMode, network: NetworkPolicy) -> Option<Arc<[BpfInstruction]>> {
        let net = match network {
            NetworkPolicy::Off => 0,
            NetworkPolicy::Allow => 1,
            _ => 2,
        };
        let slot = usize::from(mode == SandboxMode::WorkspaceWrite) * 3 + net;
        self.filters[slot]
            .get_or_init(|| crate::seccomp::filter(mode, network).map(Arc::from))
            .clone()
    }

    fn ruleset(
        &self,
        policy: &SandboxPolicy,
        proxy_port: Option<u16>,
    ) -> Result<Arc<OwnedFd>, SandboxError> {
        // A workspace or a proxy port of its own: built for this command.
        if policy.mode != SandboxMode::ReadOnly || policy.network == NetworkPolicy::Allow {
            return ruleset(policy, proxy_port).map(Arc::new);
        }
        let slot = &self.read_only[usize::from(policy.network == NetworkPolicy::Off)];
        if let Some(cached) = slot.get() {
            return Ok(Arc::clone(cached));
        }
        let built = Arc::new(ruleset(policy, None)?);
        Ok(Arc::clone(slot.get_or_init(|| built)))
    }
}

/// Confines `argv` with a launcher-applied Landlock restriction; on an
/// allow-list, `proxy_port` is the one TCP port it may connect to.
pub(crate) fn confine(
    argv: &[OsString],
    policy: &SandboxPolicy,
    abi: i64,
    prepared: &Prepared,
    proxy_port: Option<u16>,
) -> Result<Confinement, SandboxError> {
    let ruleset = prepared.ruleset(policy, proxy_port)?;
    let filter = prepared.filter(policy.mode, policy.network);
    let gaps = gaps(policy, abi, filter.is_some());
    let mut environment = crate::provider::environment();
    if let (SandboxMode::WorkspaceWrite, Some(tmp)) = (policy.mode, &policy.private_tmp) {
        environment.push(("TMPDIR".into(), Some(tmp.clone().into_os_string())));
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        environment.extend(policy.caches.environment(std::path::Path::to_path_buf));
    }
    // The kernel's account of its denials, where the host gives one.
    let watch = (abi >= 7)
        .then(crate::audit::Listener::get)
        .flatten()
        .and_then(|listener| listener.watch());
    Ok(Confinement {
        invocation: Invocation {
            argv: argv.to_vec(),
            restriction: Restriction {
                drop_capabilities: true,
                landlock_ruleset: Some(ruleset),
                landlock_audit_name: watch.as_ref().map(crate::audit::Watch::name),
                seccomp_filter: filter,
                keep_fds: Vec::new(),
            },
            environment,
            held: Vec::new(),
            takes_terminal: false,
        },
        backend: NAME.into(),
        enforcement: SandboxGap::enforcement(&gaps),
        gaps,
        denial_signatures: vec![DENIAL.into()],
        runner_report: None,
        witness: watch.map(|watch| Arc::new(watch) as Arc<dyn dsh_sandbox::DenialWitness>),
        protected: Vec::new(),
        network: policy.network,
        network_log: None,
        held: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: SandboxMode, network: NetworkPolicy, protected: bool) -> SandboxPolicy {
        let dir = std::env::temp_dir();
        let workspace = dsh_sandbox::Workspace::open(&dir).unwrap();
        SandboxPolicy {
            mode,
            protected: if protected {
                dsh_sandbox::ProtectedPaths::default()
            } else {
                dsh_sandbox::ProtectedPaths::none()
            },
            workspace,
            private_tmp: None,
            readable: Vec::new(),
            hidden: Vec::new(),
            network,
            caches: Default::default(),
            hosts: Default::default(),
            terminal: false,
        }
    }

    #[test]
    fn gaps_are_honest_about_mode_abi_filter_protection_and_network() {
        let ro = policy(SandboxMode::ReadOnly, NetworkPolicy::On, false);
        let rw = policy(SandboxMode::WorkspaceWrite, NetworkPolicy::On, false);
        assert!(gaps(&ro, 6, true).is_empty());
        assert_eq!(gaps(&rw, 7, true), [SandboxGap::Metadata]);
        assert_eq!(
            gaps(&ro, 5, true),
            [SandboxGap::Signals, SandboxGap::AbstractSockets]
        );
        assert_eq!(
            gaps(&ro, 2, true),
            [
                SandboxGap::Truncate,
                SandboxGap::Signals,
                SandboxGap::AbstractSockets
            ]
        );
        assert_eq!(
            gaps(&ro, 6, false),
            [SandboxGap::Metadata, SandboxGap::Syscalls]
        );
        let protected = policy(SandboxMode::WorkspaceWrite, NetworkPolicy::On, true);
        assert_eq!(
            gaps(&protected, 7, true),
            [SandboxGap::Metadata, SandboxGap::ProtectedPaths]
        );
        let offline = policy(SandboxMode::ReadOnly, NetworkPolicy::Off, false);
        assert!(gaps(&offline, 6, true).is_empty());
        assert!(
            gaps(&offline, 3, true).len() == 2,
            "signals, abstract sockets"
        );
        assert_eq!(
            gaps(&offline, 6, false),
            [
                SandboxGap::Metadata,
                SandboxGap::Syscalls,
                SandboxGap::Tcp,
                SandboxGap::Udp
            ]
        );
    }

    #[test]
    fn devices_are_never_writable() {
        assert!(!writable().contains(AccessFs::MakeChar));
        assert!(!writable().contains(AccessFs::MakeBlock));
        assert!(writable().contains(AccessFs::MakeReg));
    }
}
