//! The bubblewrap backend and the bwrap-shaped operator runner.
//!
//! The profile (both modes): a user namespace even as root (`--unshare-user`,
//! so root inside holds no capability on the host, and `--cap-drop ALL`
//! inside), its own pid namespace and `/proc` (no process outside is
//! visible, so none can be signalled, traced or read through
//! `/proc/<pid>`), its own IPC, UTS and (where possible) cgroup namespaces,
//! a new session, death with its parent, a minimal `/dev`, every bind
//! `nodev`, the host read-only, `/proc/sys`, `/proc/sysrq-trigger` and
//! `/proc/fs` read-only over the fresh `/proc` (root inside is still uid 0
//! to sysctl permission checks), and a private `/tmp`:
//!
//! - read-only: `--ro-bind / /`, an in-memory `--tmpfs /tmp`, and the
//!   workspace bound again read-only through the handle opened at
//!   resolution (`--ro-bind-fd N <workspace>`, so a workspace under `/tmp`
//!   stays visible);
//! - workspace-write: `--bind <private TMPDIR> /tmp` and the workspace bound
//!   writable through its handle (`--bind-fd N <workspace>`); the sandbox's
//!   caches bound writable at their own paths and over each host cache
//!   they stand for that exists (`~/.npm`, `~/.cargo/registry`, ...), so
//!   the host's own caches are not visible inside at all.
//!
//! The host's own `/tmp` is therefore not visible inside, except the
//! workspace.
//!
//! In `workspace-write` the protected paths stay read-only (inside a
//! repository's git directory, only what git runs or reads configuration
//! from, so commits work): each existing
//! one bound read-only over itself, each missing one through a stand-in
//! created for the command's lifetime ([`crate::stand_in`]), and every
//! directory between the workspace root and a nested one (`.vscode` of
//! `.vscode/tasks.json`) bound over itself writable, which makes it a
//! mount point the command cannot rename away. A protected symlink keeps
//! its target read-only, but the link itself cannot be pinned: the result
//! names the `protected-paths` gap.
//!
//! With the network `off` (or on an allow-list, whose proxy door is a
//! socket the forwarder inherits, see [`crate::network`]), `--unshare-net`: a
//! network namespace of its own
//! with only a loopback nobody outside listens on; bwrap (and so the
//! command) also runs under a syscall filter refusing sockets of the
//! families a network namespace does not hold (vsock reaches the
//! hypervisor from any namespace), gap `udp` where it cannot be built. Abstract unix sockets
//! live in the network namespace; with the network `on` it stays shared,
//! and a Landlock scope applied to bwrap itself before exec (ABI 6)
//! confines them; on older kernels the result names the `abstract-sockets`
//! gap.
//!
//! Runner failure is structural: bwrap writes `{"child-pid": N}` on its
//! `--json-status-fd` once the command started; without it the command
//! never ran. Nothing the command prints is consulted.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use std::path::{Path, PathBuf};

use dsh_sandbox::{
    BpfInstruction, Confinement, Held, Invocation, NetworkPolicy, ProtectedState, Restriction,
    RunnerOutcome, RunnerReport, SandboxGap, SandboxMode, SandboxPolicy,
};

use crate::error::SandboxError;
use crate::stand_in::StandIn;

/// The backend's name in results.
pub(crate) const NAME: &str = "bwrap";
/// What a bwrap denial looks like on stderr.
pub(crate) const DENIAL: &str = "read-only file system";
/// What renaming a file over a protected one (a mount point) looks like
/// (git writes `config.lock` and renames it over `config`).
pub(crate) const DENIAL_BUSY: &str = "device or resource busy";

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

/// One bind of a protected path: the path and a descriptor on it, opened
/// beneath the workspace handle without following a symlink, which is what
/// bubblewrap binds (`--bind-fd`/`--ro-bind-fd`): a path swapped for a
/// symlink after it was checked can move where the bind appears, never
/// what it binds.
#[derive(Debug)]
struct Bind {
    path: PathBuf,
    source: Arc<OwnedFd>,
}

/// How the protected paths of a `workspace-write` command are kept.
#[derive(Debug, Default)]
pub(crate) struct Protection {
    /// Directories bound over themselves (writable), outermost first.
    pins: Vec<Bind>,
    /// Paths bound read-only over themselves.
    read_only: Vec<Bind>,
    /// The protected paths kept (for the facts).
    kept: Vec<PathBuf>,
    /// A protected symlink, whose link cannot be pinned.
    symlinked: bool,
    /// Some protected paths were left out (past the resolution's bounds).
    incomplete: bool,
    /// The stand-ins, claimed until the command's tree is gone.
    stand_ins: Vec<StandIn>,
}

/// `path` relative to `root` (empty when it is not beneath).
fn beneath<'p>(root: &Path, path: &'p Path) -> Option<&'p Path> {
    path.strip_prefix(root)
        .ok()
        .filter(|r| !r.as_os_str().is_empty())
}

impl Protection {
    /// [`Protection::of`], resolved again when a path it found vanished
    /// before it was opened or a stand-in was made beneath it: another
    /// command's stand-in removed by its last holder in between (then it
    /// is missing, and gets a stand-in of this command's).
    pub(crate) fn settled(
        policy: &SandboxPolicy,
        handle: &Arc<OwnedFd>,
    ) -> Result<Protection, SandboxError> {
        let mut tries = 0;
        loop {
            match Protection::of(policy, handle) {
                Err(SandboxError::Protect { cause, .. } | SandboxError::StandIn { cause, .. })
                    if cause.kind() == std::io::ErrorKind::NotFound && tries < 8 =>
                {
                    tries += 1;
                }
                outcome => return outcome,
            }
        }
    }

    /// Resolves what to bind, creating stand-ins for missing paths; every
    /// path is opened beneath the workspace handle, none through a
    /// symlink.
    pub(crate) fn of(
        policy: &SandboxPolicy,
        handle: &Arc<OwnedFd>,
    ) -> Result<Protection, SandboxError> {
        let mut protection = Protection::default();
        if policy.mode != SandboxMode::WorkspaceWrite || policy.protected.is_empty() {
            return Ok(protection);
        }
        let root = policy.workspace.path();
        let resolution = dsh_protect::resolve(&policy.protected, &policy.workspace);
        protection.incomplete = !resolution.complete;
        for protected in &resolution.paths {
            let Some(relative) = beneath(root, &protected.path) else {
                continue;
            };
            let bound = match &protected.state {
                ProtectedState::Symlink => {
                    // The link can be replaced (the gap says so); what it
                    // points to inside the workspace is kept read-only.
                    protection.symlinked = true;
                    let target = std::fs::canonicalize(&protected.path).ok();
                    if let Some(target) = target.filter(|t| beneath(root, t).is_some()) {
                        protection.bind_read_only(handle, root, &target)?;
                    }
                    continue;
                }
                // A stand-in of another command on the way (the path itself
                // or a directory above it) is claimed like a missing path,
                // so that it is not removed under this command.
                state => match (stand_in_on_the_way(handle, relative), state) {
                    (Some(stand_in), _) => {
                        let file = root.join(&stand_in).is_file();
                        protection.claim(handle, root, &stand_in, file)?
                    }
                    (None, ProtectedState::Missing { stand_in, file }) => {
                        let Some(relative) = beneath(root, stand_in) else {
                            continue;
                        };
                        protection.claim(handle, root, relative, *file)?
                    }
                    (None, _) => relative.to_path_buf(),
                },
            };
            let mut pin = PathBuf::new();
            let count = bound.components().count();
            for component in bound.components().take(count.saturating_sub(1)) {
                pin.push(component);
                let path = root.join(&pin);
                if !protection.pins.iter().any(|b| b.path == path) {
                    let source = open(handle, &pin)?;
                    protection.pins.push(Bind { path, source });
                }
            }
            protection.bind_read_only(handle, root, &root.join(&bound))?;
            protection.kept.push(protected.path.clone());
        }
        // Outermost first, so an inner bind lands on the pinned directory.
        protection.pins.sort_by_key(|b| b.path.components().count());
        Ok(protection)
    }

    fn bind_read_only(
        &mut self,
        handle: &Arc<OwnedFd>,
        root: &Path,
        path: &Path,
    ) -> Result<(), SandboxError> {
        if self.read_only.iter().any(|b| b.path == path) {
            return Ok(());
        }
        let Some(relative) = beneath(root, path) else {
            return Ok(());
        };
        let source = open(handle, relative)?;
        self.read_only.push(Bind {
            path: path.to_owned(),
            source,
        });
        Ok(())
    }

    /// Claims the stand-in at `relative` (once per confinement); what to
    /// bind, relative to the workspace.
    fn claim(
        &mut self,
        handle: &Arc<OwnedFd>,
        root: &Path,
        relative: &Path,
        file: bool,
    ) -> Result<PathBuf, SandboxError> {
        let path = root.join(relative);
        if !self.stand_ins.iter().any(|p| p.path() == path) {
            let claim = StandIn::claim(handle, relative, &path, file).map_err(|cause| {
                SandboxError::StandIn {
                    path: path.clone(),
                    cause,
                }
            })?;
            self.stand_ins.push(claim);
        }
        Ok(relative.to_owned())
    }

    /// The descriptors bwrap binds from (kept open for it).
    pub(crate) fn sources(&self) -> impl Iterator<Item = &Arc<OwnedFd>> {
        self.pins.iter().chain(&self.read_only).map(|b| &b.source)
    }

    /// Releases the stand-ins patiently (see [`StandIn::release`]): a
    /// session's sandbox let go of. Blocks for a few milliseconds at most.
    pub(crate) fn release_patiently(&mut self) {
        for stand_in in self.stand_ins.drain(..) {
            stand_in.release(20);
        }
    }

    /// The protected paths kept (for the facts).
    pub(crate) fn kept(&self) -> &[PathBuf] {
        &self.kept
    }

    /// Whether every path bound still is the entry that was bound: one
    /// the host renamed over or removed and made again (an editor's
    /// atomic save, `git config`) takes its bind with it in every mount
    /// namespace, so a sandbox kept across commands is built again then.
    pub(crate) fn intact(&self, root: &Path, handle: &OwnedFd) -> bool {
        self.pins.iter().chain(&self.read_only).all(|bind| {
            let Some(relative) = beneath(root, &bind.path) else {
                return true;
            };
            let flags = libc::O_PATH | libc::O_NOFOLLOW;
            let now = crate::sys::open_beneath(handle.as_fd(), relative, flags)
                .ok()
                .and_then(|fd| rustix::fs::fstat(&fd).ok());
            let then = rustix::fs::fstat(&*bind.source).ok();
            matches!((now, then), (Some(now), Some(then))
                if (now.st_dev, now.st_ino) == (then.st_dev, then.st_ino))
        })
    }
}

/// `relative` opened beneath the workspace handle for binding.
fn open(handle: &Arc<OwnedFd>, relative: &Path) -> Result<Arc<OwnedFd>, SandboxError> {
    crate::sys::open_beneath(handle.as_fd(), relative, libc::O_PATH)
        .map(Arc::new)
        .map_err(|cause| SandboxError::Protect {
            path: relative.to_owned(),
            cause,
        })
}

/// The outermost stand-in from the workspace root down to `relative`
/// (inclusive), if any.
fn stand_in_on_the_way(handle: &Arc<OwnedFd>, relative: &Path) -> Option<PathBuf> {
    let mut current = PathBuf::new();
    for component in relative.components() {
        current.push(component);
        if crate::stand_in::is_stand_in(handle.as_fd(), &current) {
            return Some(current);
        }
        crate::sys::open_beneath(handle.as_fd(), &current, libc::O_PATH | libc::O_DIRECTORY)
            .ok()?;
    }
    None
}

/// Where the command sees `path`: the private TMPDIR is its `/tmp`.
fn inside_view(policy: &SandboxPolicy, path: &Path) -> PathBuf {
    match policy
        .private_tmp
        .as_ref()
        .and_then(|tmp| path.strip_prefix(tmp).ok())
    {
        Some(rest) => Path::new("/tmp").join(rest),
        None => path.to_owned(),
    }
}

/// The command's environment: no doors to services outside, its `/tmp`
/// as TMPDIR, and under `workspace-write` the variables that point the
/// tools at the sandbox's caches (as the command sees them).
pub(crate) fn environment(policy: &SandboxPolicy) -> Vec<(OsString, Option<OsString>)> {
    let mut environment = crate::environment::environment();
    environment.push(("TMPDIR".into(), Some("/tmp".into())));
    if policy.mode == SandboxMode::WorkspaceWrite {
        environment.extend(policy.caches.environment(|path| inside_view(policy, path)));
    }
    environment
}

/// The binds of the sandbox's caches under `workspace-write`.
#[derive(Debug, Default)]
pub(crate) struct CacheBinds {
    /// Each root bound writable over itself, from the handle it was opened
    /// by (one in the private TMPDIR is in its `/tmp` already).
    roots: Vec<(Arc<OwnedFd>, PathBuf)>,
    /// Each tool's directory bound over a host cache it stands for that
    /// exists, so a tool with a hard-coded path writes the sandbox's cache
    /// too: by a descriptor opened beneath its root without following a
    /// link (a command may have swapped the directory for a link to
    /// anything its user owns, which bubblewrap would otherwise bind
    /// writable). A host cache that does not exist cannot be mounted over
    /// (`/` is read-only): the variables point the tool away.
    over_host: Vec<(Arc<OwnedFd>, PathBuf)>,
}

impl CacheBinds {
    pub(crate) fn of(policy: &SandboxPolicy) -> CacheBinds {
        let mut binds = CacheBinds::default();
        if policy.mode != SandboxMode::WorkspaceWrite {
            return binds;
        }
        let caches = &policy.caches;
        let in_tmp = |path: &Path| {
            policy
                .private_tmp
                .as_ref()
                .is_some_and(|tmp| path.starts_with(tmp))
        };
        let mut handles = Vec::new();
        for root in &caches.roots {
            // The roots are the server's own (canonical, in directories no
            // command can write): opened by path.
            let Ok(handle) = std::fs::File::open(root).map(|f| Arc::new(OwnedFd::from(f))) else {
                continue;
            };
            if !in_tmp(root) {
                binds.roots.push((Arc::clone(&handle), root.clone()));
            }
            handles.push((root, handle));
        }
        for (host, stand_in) in caches.dirs.iter().flat_map(|dir| &dir.replaces) {
            let beneath = handles
                .iter()
                .find_map(|(root, handle)| Some((handle, stand_in.strip_prefix(root).ok()?)));
            let Some((handle, relative)) = beneath.filter(|_| host.is_dir()) else {
                continue;
            };
            let flags = libc::O_PATH | libc::O_DIRECTORY;
            if let Ok(fd) = crate::sys::open_beneath(handle.as_fd(), relative, flags) {
                binds.over_host.push((Arc::new(fd), host.clone()));
            }
        }
        binds
    }

    /// The descriptors bwrap binds from (kept open for it).
    pub(crate) fn sources(&self) -> impl Iterator<Item = &Arc<OwnedFd>> {
        self.roots.iter().chain(&self.over_host).map(|(fd, _)| fd)
    }

    /// Where the caches are mounted.
    pub(crate) fn mount_points(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.roots
            .iter()
            .chain(&self.over_host)
            .map(|(_, at)| at.clone())
    }
}

/// The profile arguments for `policy`, up to and including `--`, given the
/// cache binds and the numbers of the status pipe and the workspace
/// handle.
pub(crate) fn profile(
    policy: &SandboxPolicy,
    protection: &Protection,
    caches: &CacheBinds,
    status_fd: i32,
    workspace_fd: i32,
) -> Vec<OsString> {
    let mut profile = args(&[
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        // Root inside is host uid 0 to the kernel's sysctl permission check
        // (not a capability check): without these, `core_pattern` and every
        // network sysctl would be writable, and the core helper runs as
        // host root.
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--ro-bind-try",
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
        "--ro-bind-try",
        "/proc/fs",
        "/proc/fs",
    ]);
    // A new session keeps a command from typing into the terminal it was
    // started from. One run in a terminal of its own takes that terminal
    // as controlling terminal inside (`setsid --ctty`, see `confine`), so
    // ^C reaches its foreground job and not bubblewrap.
    profile.push("--new-session".into());
    match (policy.mode, &policy.private_tmp) {
        (SandboxMode::WorkspaceWrite, Some(tmp)) => {
            profile.extend(args(&["--bind"]));
            profile.push(tmp.clone().into_os_string());
            profile.push("/tmp".into());
        }
        _ => profile.extend(args(&["--tmpfs", "/tmp"])),
    }
    // The workspace through its handle, after /tmp: a workspace under
    // /tmp stays visible in the private /tmp.
    profile.push(if policy.mode == SandboxMode::WorkspaceWrite {
        "--bind-fd".into()
    } else {
        "--ro-bind-fd".into()
    });
    profile.push(workspace_fd.to_string().into());
    profile.push(policy.workspace.path().as_os_str().to_owned());
    for (flag, binds) in [
        ("--bind-fd", &protection.pins),
        ("--ro-bind-fd", &protection.read_only),
    ] {
        for bind in binds {
            profile.push(flag.into());
            profile.push(bind.source.as_raw_fd().to_string().into());
            profile.push(bind.path.as_os_str().to_owned());
        }
    }
    // The sandbox's caches: on top of the workspace and the host (a home
    // inside the workspace keeps its own `.npm` read-only beneath).
    for (source, at) in caches.roots.iter().chain(&caches.over_host) {
        profile.push("--bind-fd".into());
        profile.push(source.as_raw_fd().to_string().into());
        profile.push(at.as_os_str().to_owned());
    }
    // Off and on an allow-list alike: a network namespace of its own (the
    // allow-list's door is a socket bound in through `readable`).
    if policy.network != NetworkPolicy::On {
        profile.push("--unshare-net".into());
    }
    // What must stay readable although the private /tmp hides it.
    for path in &policy.readable {
        profile.push("--ro-bind-try".into());
        profile.push(path.as_os_str().to_owned());
        profile.push(path.as_os_str().to_owned());
    }
    // Credential files and the server's secrets, last: an empty file or
    // directory over each, on top of every other bind.
    for hidden in hidden_here(policy) {
        let path = hidden.path.as_os_str();
        if hidden.directory {
            profile.extend(["--tmpfs".into(), path.to_owned()]);
            profile.extend(["--remount-ro".into(), path.to_owned()]);
        } else {
            profile.extend(["--ro-bind".into(), "/dev/null".into(), path.to_owned()]);
        }
    }
    profile.push("--json-status-fd".into());
    profile.push(status_fd.to_string().into());
    profile.push("--".into());
    profile
}

/// What bubblewrap leaves open for `policy`, with or without the scope and
/// the filter.
pub(crate) fn gaps(
    policy: &SandboxPolicy,
    scoped: bool,
    filtered: bool,
    protection: &Protection,
) -> Vec<SandboxGap> {
    let mut gaps = Vec::new();
    // With the network cut, abstract sockets are in the sandbox's own
    // network namespace; otherwise only the scope confines them.
    if !scoped && policy.network == NetworkPolicy::On {
        gaps.push(SandboxGap::AbstractSockets);
    }
    if protection.symlinked || protection.incomplete {
        gaps.push(SandboxGap::ProtectedPaths);
    }
    // The network namespace holds the Internet families; vsock and the
    // rest are refused by a filter bwrap (and so the command) runs under,
    // with the terminal requests (TIOCSTI, TIOCLINUX).
    if policy.network != NetworkPolicy::On && !filtered {
        gaps.push(SandboxGap::Udp);
    }
    gaps
}

/// What to hide that is visible inside at all: the host's `/tmp` is not
/// (but the workspace under it is).
pub(crate) fn hidden_here(
    policy: &SandboxPolicy,
) -> impl Iterator<Item = &dsh_sandbox::HiddenPath> {
    policy.hidden.iter().filter(|hidden| {
        !hidden.path.starts_with("/tmp") || hidden.path.starts_with(policy.workspace.path())
    })
}

/// The runner side of bwrap's `--json-status-fd`, read after it exited.
#[derive(Debug)]
struct StatusPipe {
    read: Mutex<Option<std::fs::File>>,
    seen: Mutex<Vec<u8>>,
}

impl RunnerReport for StatusPipe {
    fn outcome(&self) -> RunnerOutcome {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(mut file) = self
            .read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            // Non-blocking: whatever bwrap wrote before it exited is there.
            let mut buf = [0u8; 4096];
            while let Ok(n) = file.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
        }
        if seen.windows(11).any(|w| w == b"\"child-pid\"") {
            RunnerOutcome::Started
        } else {
            RunnerOutcome::NeverStarted
        }
    }
}

/// `runner profile -- argv`, with the descriptors the runner keeps and its
/// status report. `scope` is the Landlock scope-only ruleset (None when the
/// kernel has no scopes).
/// util-linux `setsid` on an absolute `PATH` entry (the host's view is
/// the sandbox's: `/` is bound read-only); busybox's, which has no long
/// options, does not count.
/// (Looked for once per provider, by its first terminal request.)
pub(crate) fn util_linux_setsid() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("setsid"))
        .find(|candidate| {
            std::fs::canonicalize(candidate)
                .is_ok_and(|real| real.file_name().is_some_and(|name| name == "setsid"))
        })
}

/// What the runner itself runs under: the Landlock scope-only ruleset and
/// its syscall filter; and util-linux `setsid` for a terminal request
/// (`None` where there is none, or none was asked for).
pub(crate) struct Runner {
    pub(crate) scope: Option<Arc<OwnedFd>>,
    pub(crate) filter: Option<Arc<[BpfInstruction]>>,
    pub(crate) setsid: Option<std::path::PathBuf>,
}

pub(crate) fn confine(
    runner: &[OsString],
    policy: &SandboxPolicy,
    argv: &[OsString],
    Runner {
        scope,
        filter,
        setsid,
    }: Runner,
    backend: &str,
) -> Result<Confinement, SandboxError> {
    let (read, write) = crate::sys::status_pipe().map_err(|cause| SandboxError::Descriptor {
        what: "status pipe",
        cause,
    })?;
    // bwrap closes the workspace handle once it has bound it, so it never
    // reaches the command.
    // (The same descriptor is what protected paths are opened beneath.)
    let workspace = Arc::new(
        policy
            .workspace
            .handle()
            .try_clone_to_owned()
            .map_err(|cause| SandboxError::Descriptor {
                what: "workspace handle",
                cause,
            })?,
    );
    let protection = Protection::settled(policy, &workspace)?;
    let caches = CacheBinds::of(policy);
    let mut wrapped = runner.to_vec();
    wrapped.extend(profile(
        policy,
        &protection,
        &caches,
        write.as_raw_fd(),
        workspace.as_raw_fd(),
    ));
    if policy.terminal {
        // bwrap's new session has no controlling terminal: the command's
        // first process makes its own session the terminal's (util-linux
        // `setsid`, waiting to pass the command's exit status on).
        let setsid = setsid.ok_or(SandboxError::NoSetsid)?;
        wrapped.push(setsid.into_os_string());
        wrapped.extend(["--ctty", "--wait"].map(OsString::from));
    }
    wrapped.extend_from_slice(argv);
    let gaps = gaps(policy, scope.is_some(), filter.is_some(), &protection);
    let seccomp_filter = filter;
    let keep_fds: Vec<Arc<OwnedFd>> = [Arc::new(write), workspace]
        .into_iter()
        .chain(protection.sources().cloned())
        .chain(caches.sources().cloned())
        .collect();
    let held: Vec<Arc<dyn Held>> = protection
        .stand_ins
        .into_iter()
        .map(|claim| Arc::new(claim) as Arc<dyn Held>)
        .collect();
    let environment = environment(policy);
    Ok(Confinement {
        invocation: Invocation {
            argv: wrapped,
            restriction: Restriction {
                drop_capabilities: false,
                landlock_ruleset: scope,
                landlock_audit_name: None,
                seccomp_filter,
                keep_fds,
                enter: None,
            },
            environment,
            held: Vec::new(),
            observers: Vec::new(),
            takes_terminal: policy.terminal,
        },
        backend: backend.into(),
        enforcement: SandboxGap::enforcement(&gaps),
        gaps,
        denial_signatures: vec![DENIAL.into(), DENIAL_BUSY.into()],
        runner_report: Some(Arc::new(StatusPipe {
            read: Mutex::new(Some(std::fs::File::from(read))),
            seen: Mutex::new(Vec::new()),
        })),
        // Its refusals are read-only mounts (EROFS), which the kernel does
        // not log: the stderr guess.
        witness: None,
        protected: protection.kept,
        hidden: hidden_here(policy).map(|h| h.path.clone()).collect(),
        network: policy.network,
        network_log: None,
        held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sandbox::Workspace;

    #[test]
    fn a_read_only_profile_isolates_and_binds_the_workspace_by_handle() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(dir.path()).unwrap();
        let read_only = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            workspace: workspace.clone(),
            private_tmp: None,
            readable: vec!["/tmp/dsh-bash-spill".into()],
            hidden: Vec::new(),
            protected: dsh_sandbox::ProtectedPaths::none(),
            network: NetworkPolicy::Off,
            caches: Default::default(),
            hosts: Default::default(),
            terminal: false,
        };
        let profile_ro = profile(
            &read_only,
            &Protection::default(),
            &CacheBinds::default(),
            7,
            8,
        );
        let text: Vec<String> = profile_ro
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for flag in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--new-session",
            "--die-with-parent",
        ] {
            assert!(text.contains(&flag.to_owned()), "{flag} missing: {text:?}");
        }
        assert!(text.windows(2).any(|w| w == ["--cap-drop", "ALL"]));
        assert!(text.windows(2).any(|w| w == ["--tmpfs", "/tmp"]));
        assert!(text.windows(2).any(|w| w == ["--json-status-fd", "7"]));
        let ws = read_only.workspace.path().display().to_string();
        assert!(text
            .windows(3)
            .any(|w| w == ["--ro-bind-fd".to_owned(), "8".into(), ws.clone()]));
        assert!(!text.contains(&"--bind-fd".to_owned()));
        assert!(text.contains(&"--unshare-net".to_owned()));
        assert!(text.windows(3).any(|w| w
            == [
                "--ro-bind-try".to_owned(),
                "/tmp/dsh-bash-spill".into(),
                "/tmp/dsh-bash-spill".into()
            ]));
        assert_eq!(text.last().map(String::as_str), Some("--"));
    }

    #[test]
    fn protected_paths_are_bound_read_only_from_handles_under_pinned_parents() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(dir.path()).unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(dir.path().join(".vscode")).unwrap();
        std::fs::write(dir.path().join(".bashrc"), "").unwrap();
        let mut protected = dsh_sandbox::ProtectedPaths::none();
        for path in [".bashrc", ".vscode/tasks.json"] {
            protected.protect(path).unwrap();
        }
        let write = SandboxPolicy {
            mode: SandboxMode::WorkspaceWrite,
            protected,
            workspace,
            private_tmp: Some(tmp.clone()),
            readable: Vec::new(),
            hidden: Vec::new(),
            network: NetworkPolicy::On,
            caches: Default::default(),
            hosts: Default::default(),
            terminal: true,
        };
        let handle = Arc::new(write.workspace.handle().try_clone_to_owned().unwrap());
        let protection = Protection::of(&write, &handle).unwrap();
        let root = write.workspace.path().to_owned();
        assert!(root.join(".vscode/tasks.json").is_dir(), "the stand-in");
        let text: Vec<String> = profile(&write, &protection, &CacheBinds::default(), 7, 8)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let ws = write.workspace.path().display().to_string();
        assert!(text.windows(3).any(|w| w
            == [
                "--bind".to_owned(),
                tmp.display().to_string(),
                "/tmp".into()
            ]));
        assert!(text
            .windows(3)
            .any(|w| w == ["--bind-fd".to_owned(), "8".into(), ws.clone()]));
        assert!(!text.contains(&"--unshare-net".to_owned()));
        // In a terminal of its own too: a new session (the command takes
        // the terminal inside it through setsid, see `confine`).
        assert!(text.contains(&"--new-session".to_owned()));
        // Bound from descriptors opened beneath the workspace, never by path.
        let at = |flag: &str, path: &Path| {
            let path = path.display().to_string();
            text.windows(3).position(|w| {
                w[0] == flag && w[1].parse::<i32>().is_ok_and(|fd| fd > 2) && w[2] == path
            })
        };
        let pin = at("--bind-fd", &root.join(".vscode")).expect("the parent pinned");
        let inner = at("--ro-bind-fd", &root.join(".vscode/tasks.json")).expect("read-only");
        assert!(pin < inner, "the pin comes first");
        assert!(at("--ro-bind-fd", &root.join(".bashrc")).is_some());
        assert!(!text
            .windows(2)
            .any(|w| w[0] == "--ro-bind" && w[1].ends_with(".bashrc")));
        drop(protection);
        assert!(
            !root.join(".vscode/tasks.json").exists(),
            "the stand-in is gone with its last claim"
        );
    }
}
