use std::ffi::OsString;
use std::fmt;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::{
    HostRules, NetworkPolicy, ProtectedPaths, SandboxBackend, SandboxCaches, SandboxEnforcement,
    SandboxGap, SandboxMode, Workspace,
};

/// A boxed, sendable future, so provider and executor traits stay
/// object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One classic-BPF instruction of a seccomp program (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BpfInstruction {
    /// The opcode.
    pub code: u16,
    /// Jump offset when true.
    pub jt: u8,
    /// Jump offset when false.
    pub jf: u8,
    /// The operand.
    pub k: u32,
}

/// What the launcher applies to the child between fork and exec, described
/// as data: the launcher's own `sys` code applies it with raw
/// async-signal-safe syscalls, so no caller-supplied code ever runs in the
/// forked child.
///
/// Order of application: every descriptor above 2 except `keep_fds` is
/// closed at exec (for every command, restricted or not); capabilities are
/// dropped; `no_new_privs` is set whenever anything else is asked for; then
/// the Landlock ruleset and finally the seccomp filter are enforced.
#[derive(Clone, Debug, Default)]
pub struct Restriction {
    /// Drop every capability (bounding, ambient, inheritable, permitted,
    /// effective) and lock the securebits, so even a command started as root
    /// holds none and cannot regain any through exec.
    pub drop_capabilities: bool,
    /// A Landlock ruleset to enforce with `landlock_restrict_self`.
    pub landlock_ruleset: Option<Arc<OwnedFd>>,
    /// Ask the kernel to log the ruleset's denials after exec to its audit
    /// log (`LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`, Landlock ABI 7), the
    /// domain's creator named with this thread name (`PR_SET_NAME` just
    /// before `landlock_restrict_self`; at most 15 bytes) so a
    /// [`DenialWitness`] can tell this command's records from any other's.
    pub landlock_audit_name: Option<std::ffi::CString>,
    /// A seccomp filter to install (`SECCOMP_MODE_FILTER`).
    pub seccomp_filter: Option<Arc<[BpfInstruction]>>,
    /// Descriptors that stay open across exec at their current numbers (for
    /// example a status pipe whose number is in the argv).
    pub keep_fds: Vec<Arc<OwnedFd>>,
    /// Enter a session's warm sandbox (its namespaces, held open) before
    /// everything above, in a mount, pid, IPC and cgroup namespace of the
    /// command's own.
    pub enter: Option<Arc<Entry>>,
}

/// How a command enters a session's warm sandbox: the namespaces to join
/// and what is the command's own in the copy of the mount namespace it
/// gets. Applied by the launcher between clone and exec:
///
/// 1. join `namespaces` in order (the user namespace first, which gives
///    every capability inside it until exec);
/// 2. unshare a mount, pid, IPC and cgroup namespace, every mount private;
/// 3. clone each of `exposed` (recursively), then mount the command's
///    `/tmp` (`tmp` bound, or an empty tmpfs), a fresh `/dev/shm` and
///    `/dev/pts`, and put each clone back at its place on top;
/// 4. start the pid namespace's first process, which mounts a fresh
///    `/proc` (`/proc/sys` and the rest read-only), makes a session of its
///    own and waits for the command it starts with the rest of the
///    restriction; it exits with the command's status (128 + the signal
///    of one killed), taking the rest of the namespace with it.
#[derive(Debug)]
pub struct Entry {
    /// Namespace descriptors and their `CLONE_NEW*` type, the user
    /// namespace first.
    pub namespaces: Arc<Vec<(OwnedFd, i32)>>,
    /// A directory, as the sandbox sees it, bound over `/tmp`; `None` for
    /// an empty in-memory `/tmp`.
    pub tmp: Option<std::path::PathBuf>,
    /// Mounts put back on top of the command's `/tmp`: a workspace under
    /// `/tmp`, what must stay readable.
    pub exposed: Vec<Exposed>,
    /// A network namespace of the command's own, only loopback up: an
    /// allow-list's, where its forwarder listens on the door's port.
    pub own_network: bool,
}

/// One mount a command in a warm sandbox sees on top of its `/tmp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exposed {
    /// The path as the sandbox sees it.
    pub from: std::path::PathBuf,
    /// Where the command sees it.
    pub at: std::path::PathBuf,
    /// Read-only there, whatever it is at `from`.
    pub read_only: bool,
}

impl Restriction {
    /// True if and only if nothing beyond closing inherited descriptors is
    /// asked for.
    pub fn is_empty(&self) -> bool {
        !self.drop_capabilities
            && self.landlock_ruleset.is_none()
            && self.seccomp_filter.is_none()
            && self.keep_fds.is_empty()
            && self.enter.is_none()
    }
}

/// What a command may touch: the mode, the workspace it refers to, and the
/// private temporary directory of this one command.
#[derive(Clone, Debug)]
pub struct SandboxPolicy {
    /// The mode to enforce.
    pub mode: SandboxMode,
    /// The workspace root (writable under `workspace-write`).
    pub workspace: Workspace,
    /// An empty private directory for this command's temporary files,
    /// writable under `workspace-write` and presented as `TMPDIR` (as `/tmp`
    /// under bubblewrap). Its owner removes it once the command's tree is
    /// gone. `None`: no writable temporary space.
    pub private_tmp: Option<PathBuf>,
    /// Paths the command must be able to read although a backend would
    /// hide them (for example the directory of earlier full-output files,
    /// under a private `/tmp`): bound read-only where needed.
    pub readable: Vec<PathBuf>,
    /// Files and directories a command must not read (credential files,
    /// the server's own token files), resolved for this command
    /// ([`crate::HiddenPaths::resolve`]): bubblewrap binds an empty one
    /// over each, Landlock grants reads around them. What a backend leaves
    /// readable is named by the gap `hidden-paths`, and the confinement's
    /// `hidden` lists what it did hide.
    pub hidden: Vec<crate::HiddenPath>,
    /// What stays read-only inside the workspace under `workspace-write`
    /// (ignored in the other modes). A backend that keeps them resolves
    /// them against the workspace itself (`dsh_protect::resolve`),
    /// when and where it can afford the file-system walk.
    pub protected: ProtectedPaths,
    /// The sandbox's own caches under `workspace-write` (ignored in the
    /// other modes): directories writable for the command, the variables
    /// that point the tools at them, and the host caches they stand for
    /// (see [`SandboxCaches`]). Empty: none.
    pub caches: Arc<SandboxCaches>,
    /// Whether the command may use the network.
    pub network: NetworkPolicy,
    /// The hosts the network policy `allow` lets the command reach
    /// (ignored under the other policies).
    pub hosts: Arc<HostRules>,
    /// The command runs in a terminal of its own that must stay its
    /// controlling terminal: a wrapping runner starts no new session for
    /// it (^C reaches its foreground job). The terminal is private to the
    /// command, and typing into a terminal (`TIOCSTI`) is refused by the
    /// syscall filter anyway.
    pub terminal: bool,
}

impl SandboxPolicy {
    /// `mode` over `workspace` with nothing else: no private temporary
    /// directory, nothing extra readable, nothing protected, and the
    /// network policy `mode` defaults to.
    pub fn new(mode: SandboxMode, workspace: Workspace) -> Self {
        SandboxPolicy {
            mode,
            workspace,
            private_tmp: None,
            readable: Vec::new(),
            hidden: Vec::new(),
            protected: ProtectedPaths::none(),
            caches: Arc::default(),
            network: NetworkPolicy::default_for(mode),
            hosts: Arc::default(),
            terminal: false,
        }
    }
}

/// Told the pid of a command's first process once the launcher started it
/// (before the command may have done anything, or after: it runs
/// meanwhile).
pub trait SpawnObserver: Send + Sync + fmt::Debug {
    /// The command's first process is `pid` (this process's pid namespace).
    fn started(&self, pid: u32);
}

/// Something a confinement needs in place until the command's whole tree
/// is gone, released by dropping it (for example the stand-ins
/// bubblewrap binds read-only over protected paths that do not exist yet).
pub trait Held: Send + Sync + fmt::Debug {}

impl<T: Send + Sync + fmt::Debug> Held for T {}

/// Whether the sandbox runner started the command, read from a channel the
/// command cannot write to (never from its output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerOutcome {
    /// The runner started the command; whatever the exit, it is the
    /// command's.
    Started,
    /// The runner failed before the command started; nothing ran.
    NeverStarted,
}

/// A runner's structural report (for bubblewrap: its `--json-status-fd`).
pub trait RunnerReport: Send + Sync + fmt::Debug {
    /// The outcome, read once the runner has exited.
    fn outcome(&self) -> RunnerOutcome;
}

/// The kernel's own account of what one confined command was refused (for
/// Landlock: its audit records), as opposed to the stderr guess.
pub trait DenialWitness: Send + Sync + fmt::Debug {
    /// What the kernel refused the command, once every record its
    /// processes caused has arrived (ask after its tree is gone), one
    /// line per refusal (`fs.make_reg on /etc`). `None` when no account
    /// can be had now (audit switched off meanwhile, records that did not
    /// arrive in time): the caller falls back to the guess.
    fn refusals(&self) -> BoxFuture<'_, Option<Vec<String>>>;
}

/// The server's account of the connections one command was refused
/// under the network policy `allow` (its proxy's, per command).
pub trait NetworkLog: Send + Sync + fmt::Debug {
    /// Every `host:port` refused so far, in the order first refused, each
    /// once (as many as the log keeps).
    fn denied(&self) -> Vec<String>;

    /// Of [`NetworkLog::denied`], those refused only for being on no
    /// allow-list entry: a grant of the host could let them through (not
    /// deny-listed, not an internal address).
    fn askable(&self) -> Vec<String> {
        Vec::new()
    }

    /// Refusals past the ones kept.
    fn more(&self) -> u64 {
        0
    }
}

/// How to start one command: the argv to exec, the restriction the
/// launcher applies between fork and exec, and changes to the command's
/// environment. An executor builds the plain one (`<shell> -c <command>`);
/// a sandbox provider returns the confined one inside a [`Confinement`].
#[derive(Clone, Debug, Default)]
pub struct Invocation {
    /// Program and arguments; the first element is the program.
    pub argv: Vec<OsString>,
    /// Applied in the child before exec by the launcher's own code (data,
    /// not a callback). Inherited descriptors above 2 are closed for every
    /// command whatever this says.
    pub restriction: Restriction,
    /// Applied after the credential scrub: `Some` sets, `None` removes.
    pub environment: Vec<(OsString, Option<OsString>)>,
    /// Kept by the executor until the command's whole tree is gone, its
    /// stopped leftovers included (a foreground result may come first),
    /// then dropped: how a confining layer learns the tree is gone (drop
    /// a channel's sender). Dropped on a runtime thread: nothing here may
    /// block as it drops.
    pub held: Vec<Arc<dyn Held>>,
    /// Told the pid of the process the launcher started, as soon as it
    /// exists (the kernel's records name processes by pid).
    pub observers: Vec<Arc<dyn SpawnObserver>>,
    /// The wrapped command takes its terminal as controlling terminal
    /// itself, in a session of its own (a runner that starts a new
    /// session wraps it so): the launcher leaves the terminal nobody's
    /// controlling terminal.
    pub takes_terminal: bool,
}

/// How to run one exact argv confined: the invocation, and the facts about
/// it.
#[derive(Clone, Debug)]
pub struct Confinement {
    /// What to start instead of the caller's argv (the caller's own argv
    /// when the restriction alone confines).
    pub invocation: Invocation,
    /// Which backend confines it.
    pub backend: SandboxBackend,
    /// How completely the backend enforces the mode on this host.
    pub enforcement: SandboxEnforcement,
    /// What is not governed; empty exactly when `enforcement` is `full`.
    pub gaps: Vec<SandboxGap>,
    /// Case-insensitive stderr substrings that this backend's denials
    /// produce (a hint for the `denied` fact, never for runner failure).
    pub denial_signatures: Vec<String>,
    /// The runner's structural report, when the argv wraps a runner.
    pub runner_report: Option<Arc<dyn RunnerReport>>,
    /// The kernel's account of what this confinement refused, where the
    /// host can give one; `denied` then comes from it, not from stderr.
    pub witness: Option<Arc<dyn DenialWitness>>,
    /// The protected paths kept read-only (absolute); the ones the backend
    /// cannot keep are named by the `protected-paths` gap instead.
    pub protected: Vec<PathBuf>,
    /// The files and directories hidden from the command (absolute); what
    /// the backend could not hide is named by the `hidden-paths` gap.
    pub hidden: Vec<PathBuf>,
    /// The network policy in force (its holes, if any, are in `gaps`).
    pub network: NetworkPolicy,
    /// Under the network policy `allow`: the proxy's account of what this
    /// command was refused.
    pub network_log: Option<Arc<dyn NetworkLog>>,
    /// What must stay in place until the command's tree is gone; dropped
    /// after.
    pub held: Vec<Arc<dyn Held>>,
}

impl Confinement {
    /// The command exactly as given, with nothing confined (for
    /// `danger-full-access`).
    pub fn unconfined(argv: &[OsString]) -> Self {
        Confinement {
            invocation: Invocation {
                argv: argv.to_vec(),
                ..Invocation::default()
            },
            backend: SandboxBackend::None,
            enforcement: SandboxEnforcement::Full,
            gaps: Vec::new(),
            denial_signatures: Vec::new(),
            runner_report: None,
            witness: None,
            protected: Vec::new(),
            hidden: Vec::new(),
            network: NetworkPolicy::On,
            network_log: None,
            held: Vec::new(),
        }
    }

    /// True if and only if `stderr` carries one of this backend's denial
    /// phrases (case-insensitive).
    pub fn denial_in(&self, stderr: &str) -> bool {
        let stderr = stderr.to_lowercase();
        self.denial_signatures
            .iter()
            .filter(|s| !s.trim().is_empty())
            .any(|s| stderr.contains(&s.to_lowercase()))
    }

    /// The runner's outcome; a confinement without a runner always starts
    /// the command (a failed restriction is a spawn error, not an outcome).
    pub fn runner_outcome(&self) -> RunnerOutcome {
        self.runner_report
            .as_ref()
            .map_or(RunnerOutcome::Started, |report| report.outcome())
    }
}

/// Confines commands to a [`SandboxPolicy`].
pub trait SandboxProvider: Send + Sync {
    /// How to run exactly `argv` under `policy`. Never returns the caller's
    /// argv unwrapped and unrestricted for a confining mode: with no usable
    /// backend it fails closed.
    fn confine<'a>(
        &'a self,
        argv: &'a [OsString],
        policy: &'a SandboxPolicy,
    ) -> BoxFuture<'a, Result<Confinement, SandboxUnavailable>>;

    /// A confinement this provider gave failed to start its command (the
    /// runner's own report said so): whatever it decided once about this
    /// host may be stale. The default keeps nothing, so does nothing.
    fn runner_failed(&self) {}

    /// The session is ending: let go of what is kept for its commands (a
    /// warm sandbox and its stand-ins; commands still running keep what
    /// they entered until their trees are gone).
    fn release(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// A confined mode was asked for and nothing on this host can enforce it.
/// Nothing ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxUnavailable {
    mode: SandboxMode,
    detail: Option<String>,
    /// The host ran out of a resource the runner needs (descriptors,
    /// processes, memory): the sandbox exists, it could not start now.
    exhausted: bool,
}

impl SandboxUnavailable {
    /// The refusal for `mode`, with the runner's own line when there is one.
    pub fn new(mode: SandboxMode, detail: Option<String>) -> Self {
        SandboxUnavailable {
            mode,
            detail,
            exhausted: false,
        }
    }

    /// The refusal for `mode` when the host ran out of file descriptors,
    /// processes or memory while starting the sandbox: nothing is missing,
    /// and a retry may succeed.
    pub fn exhausted(mode: SandboxMode, detail: Option<String>) -> Self {
        SandboxUnavailable {
            mode,
            detail,
            exhausted: true,
        }
    }

    /// True if the host ran out of a resource (see [`Self::exhausted`]).
    pub fn is_exhausted(&self) -> bool {
        self.exhausted
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        "SANDBOX_UNAVAILABLE"
    }

    /// The mode that was refused.
    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// The runner's own explanation, if any.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
}

impl fmt::Display for SandboxUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exhausted {
            write!(
                f,
                "sandbox mode \"{}\" could not be started now: the host ran out of file descriptors, \
                 processes or memory while starting it; nothing ran; retry when the load drops, or \
                 raise the limit (ulimit -n, pids.max)",
                self.mode
            )?;
        } else {
            write!(
                f,
                "sandbox mode \"{}\" is unavailable on this host, refusing to run it unconfined: \
             install bubblewrap (bwrap) or use a Linux kernel with Landlock enabled (5.13 or newer), \
             or choose sandbox mode \"danger-full-access\" to run without confinement",
                self.mode
            )?;
        }
        if let Some(detail) = self.detail.as_deref().filter(|d| !d.trim().is_empty()) {
            write!(f, " (runner said: {})", detail.trim())?;
        }
        Ok(())
    }
}

impl std::error::Error for SandboxUnavailable {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_says_retry_not_install() {
        let busy = SandboxUnavailable::exhausted(
            SandboxMode::ReadOnly,
            Some("Too many open files (os error 24)".into()),
        );
        let text = busy.to_string();
        assert!(busy.is_exhausted());
        assert!(
            text.contains("could not be started now") && text.contains("retry"),
            "{text}"
        );
        assert!(!text.contains("install bubblewrap"), "{text}");
        assert!(
            text.ends_with("(runner said: Too many open files (os error 24))"),
            "{text}"
        );
    }

    #[test]
    fn unavailable_names_mode_install_and_escape_hatch() {
        let plain = SandboxUnavailable::new(SandboxMode::WorkspaceWrite, None).to_string();
        assert!(plain.contains("\"workspace-write\""));
        assert!(plain.contains("refusing to run it unconfined"));
        assert!(plain.contains("install bubblewrap"));
        assert!(plain.contains("danger-full-access"));
        assert!(!plain.contains("runner said"));
        let detailed = SandboxUnavailable::new(
            SandboxMode::ReadOnly,
            Some("bwrap: No permissions to create new namespace\n".into()),
        );
        assert_eq!(detailed.code(), "SANDBOX_UNAVAILABLE");
        assert!(detailed
            .to_string()
            .ends_with("(runner said: bwrap: No permissions to create new namespace)"));
    }

    #[derive(Debug)]
    struct Never;

    impl RunnerReport for Never {
        fn outcome(&self) -> RunnerOutcome {
            RunnerOutcome::NeverStarted
        }
    }

    #[test]
    fn denials_match_case_insensitively_and_runner_outcome_is_structural() {
        let mut confinement = Confinement::unconfined(&["true".into()]);
        confinement.denial_signatures = vec!["  ".into(), "read-only file system".into()];
        assert!(confinement.denial_in("touch: x: Read-Only File System"));
        assert!(!confinement.denial_in("Permission denied"));
        // Without a runner the command always started; with one, only its
        // report decides (no stderr text is consulted).
        assert_eq!(confinement.runner_outcome(), RunnerOutcome::Started);
        confinement.runner_report = Some(Arc::new(Never));
        assert_eq!(confinement.runner_outcome(), RunnerOutcome::NeverStarted);
        assert!(confinement.invocation.restriction.is_empty());
    }
}
