//! The Landlock backend: a ruleset built in the parent (through the
//! workspace handle opened at resolution), a syscall filter, and a
//! capability drop, all applied to the child by the launcher between fork
//! and exec without any helper binary.
//!
//! Handled accesses are the write-type ones of ABI 5 (write, truncate,
//! remove, make-*, refer, device ioctl), best effort downgraded to the
//! running kernel; reads are restricted only to hide credential files (`READ_FILE` granted around them, see [`crate::reads`]). Scopes (ABI 6) confine
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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use dsh_sandbox::{
    BpfInstruction, Confinement, Invocation, NetworkPolicy, Restriction, SandboxGap, SandboxMode,
    SandboxPolicy,
};
use landlock::{
    AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope, ABI,
};

use crate::error::SandboxError;
use crate::reads::Around;

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

fn landlock_error(step: &'static str) -> impl Fn(landlock::RulesetError) -> SandboxError {
    move |err| SandboxError::Landlock {
        step,
        detail: err.to_string(),
    }
}

fn path_fd(path: &Path, step: &'static str) -> Result<PathFd, SandboxError> {
    PathFd::new(path).map_err(|err| SandboxError::Landlock {
        step,
        detail: err.to_string(),
    })
}

/// The trees a command reads whole: the workspace, what must stay
/// readable, and under `workspace-write` its TMPDIR and the caches.
fn read_whole(policy: &SandboxPolicy) -> Vec<&Path> {
    let mut trees = vec![policy.workspace.path()];
    trees.extend(policy.readable.iter().map(PathBuf::as_path));
    if policy.mode == SandboxMode::WorkspaceWrite {
        trees.extend(policy.private_tmp.as_deref());
        trees.extend(policy.caches.roots.iter().map(PathBuf::as_path));
    }
    trees
}

/// The hidden paths Landlock hides: the ones outside every tree the
/// command reads whole.
fn hidden_here(policy: &SandboxPolicy) -> Vec<PathBuf> {
    let whole = read_whole(policy);
    policy
        .hidden
        .iter()
        .map(|hidden| &hidden.path)
        .filter(|path| !whole.iter().any(|tree| path.starts_with(tree)))
        .cloned()
        .collect()
}

fn ruleset(
    policy: &SandboxPolicy,
    proxy_port: Option<u16>,
    around: Option<&Around>,
) -> Result<OwnedFd, SandboxError> {
    let reads = around.map_or(BitFlags::empty(), |_| BitFlags::from(AccessFs::ReadFile));
    let mut base = Ruleset::default()
        .handle_access(handled() | reads)
        .and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        .map_err(landlock_error("create the ruleset"))?;
    if policy.network != NetworkPolicy::On {
        // Off: no port is ever allowed, every TCP bind and connect is
        // refused; on an allow-list, only a connect to the proxy's port
        // (best effort: ignored below ABI 4, where the gap says so).
        base = base
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(landlock_error("handle TCP"))?;
    }
    let mut created = base
        .create()
        .map_err(landlock_error("create the ruleset"))?;
    if let (NetworkPolicy::Allow, Some(port)) = (policy.network, proxy_port) {
        created = created
            .add_rule(landlock::NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(landlock_error("allow the proxy's port"))?;
    }
    let dev_null = path_fd(Path::new("/dev/null"), "open /dev/null")?;
    created = created
        .add_rule(PathBeneath::new(dev_null, file_write() | reads))
        .map_err(landlock_error("allow /dev/null"))?;
    // A command's own controlling terminal, if it has one (bash opens it at
    // start-up; without a terminal the open fails with ENXIO either way):
    // writable, without device ioctls. Absent on some hosts: skipped.
    if let Ok(dev_tty) = PathFd::new("/dev/tty") {
        created = created
            .add_rule(PathBeneath::new(dev_tty, reads | AccessFs::WriteFile))
            .map_err(landlock_error("allow /dev/tty"))?;
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        created = created
            .add_rule(PathBeneath::new(
                policy.workspace.handle(),
                writable() | reads,
            ))
            .map_err(landlock_error("allow the workspace"))?;
        if let Some(tmp) = &policy.private_tmp {
            let fd = path_fd(tmp, "open the private TMPDIR")?;
            created = created
                .add_rule(PathBeneath::new(fd, writable() | reads))
                .map_err(landlock_error("allow the private TMPDIR"))?;
        }
        // The sandbox's caches (a directory gone meanwhile is left out:
        // its tool fails on it, nothing else).
        for root in &policy.caches.roots {
            if let Ok(fd) = PathFd::new(root) {
                created = created
                    .add_rule(PathBeneath::new(fd, writable() | reads))
                    .map_err(landlock_error("allow the sandbox's caches"))?;
            }
        }
    }
    let Some(around) = around else {
        return Option::<OwnedFd>::from(created).ok_or(SandboxError::LandlockUnsupported);
    };
    created = created
        .add_rule(PathBeneath::new(policy.workspace.handle(), reads))
        .map_err(landlock_error("allow reads of the workspace"))?;
    for tree in &policy.readable {
        if let Ok(fd) = PathFd::new(tree) {
            created = created
                .add_rule(PathBeneath::new(fd, reads))
                .map_err(landlock_error("allow reads of a readable path"))?;
        }
    }
    for fd in around.grants() {
        created = created
            .add_rule(PathBeneath::new(fd, reads))
            .map_err(landlock_error("allow reads around a hidden path"))?;
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
/// provider: the syscall filter of each mode and network policy, the reads
/// around the hidden paths (rebuilt when they change, see
/// [`crate::reads`]), and the read-only rulesets built on them (a ruleset
/// fd can be enforced any number of times).
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    filters: [OnceLock<Option<Arc<[BpfInstruction]>>>; 6],
    around: Mutex<Option<Arc<Around>>>,
    read_only: Mutex<[Option<ReadOnly>; 2]>,
}

/// A read-only ruleset and the reads around it was built with.
#[derive(Debug)]
struct ReadOnly {
    around: Option<Arc<Around>>,
    ruleset: Arc<OwnedFd>,
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

    /// The reads around `policy`'s hidden paths, rebuilt off the runtime
    /// threads when they changed; `None` when nothing is hidden.
    pub(crate) async fn around(
        &self,
        policy: &SandboxPolicy,
    ) -> Result<Option<Arc<Around>>, SandboxError> {
        if policy.hidden.is_empty() {
            return Ok(None);
        }
        let current = self
            .around
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(current) = current.filter(|around| around.fits(&policy.hidden)) {
            return Ok(Some(current));
        }
        let hidden = policy.hidden.clone();
        let built = tokio::task::spawn_blocking(move || Around::build(&hidden))
            .await
            .map_err(|err| SandboxError::Landlock {
                step: "read the directories above the hidden paths",
                detail: err.to_string(),
            })?;
        let built = Arc::new(built);
        *self.around.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&built));
        Ok(Some(built))
    }

    fn ruleset(
        &self,
        policy: &SandboxPolicy,
        proxy_port: Option<u16>,
        around: Option<&Arc<Around>>,
    ) -> Result<Arc<OwnedFd>, SandboxError> {
        // A workspace or a proxy port of its own: built for this command.
        if policy.mode != SandboxMode::ReadOnly || policy.network == NetworkPolicy::Allow {
            return ruleset(policy, proxy_port, around.map(Arc::as_ref)).map(Arc::new);
        }
        let index = usize::from(policy.network == NetworkPolicy::Off);
        let same = |cached: &ReadOnly| match (&cached.around, around) {
            (None, None) => true,
            (Some(was), Some(now)) => Arc::ptr_eq(was, now),
            _ => false,
        };
        let mut slots = self
            .read_only
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = slots[index].as_ref().filter(|cached| same(cached)) {
            return Ok(Arc::clone(&cached.ruleset));
        }
        let built = Arc::new(ruleset(policy, None, around.map(Arc::as_ref))?);
        slots[index] = Some(ReadOnly {
            around: around.cloned(),
            ruleset: Arc::clone(&built),
        });
        Ok(built)
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
    (around, audit): (Option<&Arc<Around>>, Option<Arc<crate::audit::Listener>>),
) -> Result<Confinement, SandboxError> {
    let ruleset = prepared.ruleset(policy, proxy_port, around)?;
    let filter = prepared.filter(policy.mode, policy.network);
    let hidden = hidden_here(policy);
    let mut gaps = gaps(policy, abi, filter.is_some());
    // A hidden socket stays reachable: Landlock does not govern
    // connecting to a socket by its path.
    if hidden.len() < policy.hidden.len()
        || hidden
            .iter()
            .any(|path| dsh_sandbox::is_control_socket(path))
    {
        gaps.push(SandboxGap::HiddenPaths);
    }
    let mut environment = crate::environment::environment();
    if let (SandboxMode::WorkspaceWrite, Some(tmp)) = (policy.mode, &policy.private_tmp) {
        environment.push(("TMPDIR".into(), Some(tmp.clone().into_os_string())));
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        environment.extend(policy.caches.environment(std::path::Path::to_path_buf));
    }
    // The kernel's account of its denials, where the host gives one.
    let watch = audit
        .filter(|_| abi >= 7)
        .and_then(|listener| listener.watch())
        .map(Arc::new);
    Ok(Confinement {
        invocation: Invocation {
            argv: argv.to_vec(),
            restriction: Restriction {
                drop_capabilities: true,
                landlock_ruleset: Some(ruleset),
                landlock_audit_name: watch.as_deref().map(crate::audit::Watch::name),
                seccomp_filter: filter,
                keep_fds: Vec::new(),
                enter: None,
            },
            environment,
            held: Vec::new(),
            observers: watch
                .iter()
                .map(|watch| Arc::clone(watch) as Arc<dyn dsh_sandbox::SpawnObserver>)
                .collect(),
            takes_terminal: false,
        },
        backend: NAME.into(),
        enforcement: SandboxGap::enforcement(&gaps),
        gaps,
        denial_signatures: vec![DENIAL.into()],
        runner_report: None,
        witness: watch.map(|watch| watch as Arc<dyn dsh_sandbox::DenialWitness>),
        protected: Vec::new(),
        hidden,
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
