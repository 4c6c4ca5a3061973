use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{NetworkPolicy, SandboxBackend, SandboxEnforcement, SandboxGap, SandboxMode};

/// One collected output stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectedOutput {
    /// The text, decoded as UTF-8 with replacement. When `truncated`, this
    /// is the TAIL of the stream and never starts inside a multi-byte
    /// character.
    pub text: String,
    /// True if and only if the stream was longer than the in-memory cap.
    pub truncated: bool,
    /// A private file holding the raw stream; set only when the stream was
    /// truncated and the file exists. It holds the COMPLETE stream unless
    /// `spill_note` says otherwise (capped, or cut short by a write error).
    pub spill_path: Option<PathBuf>,
    /// How many bytes the stream produced in all.
    #[serde(default)]
    pub total_bytes: u64,
    /// Why the spill file is not the complete stream, or is missing: "capped
    /// at N bytes", "No space left on device (os error 28) after N bytes",
    /// "cannot create it: ...", "deleted by retention". `None` when the file
    /// is complete or none was needed.
    #[serde(default)]
    pub spill_note: Option<String>,
}

/// What a sandboxing executor reports about one run or task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashSandboxInfo {
    /// The mode the command actually ran under.
    pub mode: SandboxMode,
    /// Which backend confined it (`landlock`, `bwrap`, `runner`); absent for
    /// `danger-full-access`.
    pub backend: Option<SandboxBackend>,
    /// True if and only if the command failed (non-zero exit; never on exit
    /// 0 or signal death) and, by `denial_evidence`, the kernel reported
    /// refusing it something (`refused`), or, where the kernel cannot
    /// tell, its stderr carries this backend's denial text. The second is
    /// a guess: a command can print the same text (`echo "x: Read-only
    /// file system" >&2; exit 1`), so renderers say it looks like one and
    /// suggest nothing on its strength.
    pub denied: bool,
    /// Where `denied` comes from: the kernel's own records, or the stderr
    /// guess.
    #[serde(default)]
    pub denial_evidence: DenialEvidence,
    /// What the kernel refused the command (kernel evidence, failed
    /// commands only), one line each (`fs.make_reg on /etc`), at most
    /// [`MAX_REFUSALS`].
    #[serde(default)]
    pub refused: Vec<String>,
    /// How completely the backend enforced the mode; absent exactly for
    /// `danger-full-access`.
    pub enforcement: Option<SandboxEnforcement>,
    /// True if and only if the sandbox runner itself failed and the command
    /// never ran. Outranks `denied`. Decided structurally (the runner's own
    /// status channel, the launcher's exec report), never from text the
    /// command can print.
    pub runner_failed: bool,
    /// What the backend does not govern on this host; empty exactly when
    /// `enforcement` is `full` (and for `danger-full-access`).
    #[serde(default)]
    pub gaps: Vec<SandboxGap>,
    /// The workspace root as resolved once (canonical path); absent for
    /// `danger-full-access`.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// The network policy in force (`on` for `danger-full-access`) and,
    /// on an allow-list, the hosts refused; what a backend cannot cut of
    /// `off` is in `gaps` (`tcp`, `udp`, `proxy-port`).
    #[serde(default)]
    pub network: Option<NetworkFacts>,
    /// The protected paths kept read-only inside the writable workspace
    /// (absolute; empty outside `workspace-write`, and where the backend
    /// cannot keep them, which `gaps` then names `protected-paths`).
    #[serde(default)]
    pub protected: Vec<PathBuf>,
    /// The credential files (and the server's own token files) hidden from
    /// the command: absolute paths, empty under bubblewrap, refused under
    /// Landlock. What stays readable although the rule names it is named
    /// by the `hidden-paths` gap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathBuf>,
    /// Of a denied command, the paths it was refused (by `denial_evidence`:
    /// the kernel's records, or paths its stderr names beside the denial
    /// text) that the policy really keeps read-only, each with why and what
    /// works instead; a path the command could write is never listed, so a
    /// forged line names nothing. At most [`MAX_BLOCKED`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<BlockedPath>,
    /// Repositories the command made and added to the workspace's index
    /// as gitlinks (absolute paths): the host's next `git status` there
    /// runs their config and hooks. Said whatever the exit; `git -C
    /// <parent> rm -r -f --cached -- <name>` undoes it (the index only; and
    /// a commit, if the command committed it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planted: Vec<PathBuf>,
    /// Under the `container` backend: the engine, the image and the
    /// container that ran the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerFacts>,
}

/// The container a command ran in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerFacts {
    /// The engine (`podman`, `docker`).
    pub engine: String,
    /// The image as given.
    pub image: String,
    /// The image's digest (`sha256:…`, the id of its configuration).
    pub digest: String,
    /// The container's name.
    pub name: String,
}

impl BashSandboxInfo {
    /// The facts of a command under `mode` before anything is known of
    /// how it was confined: no backend, nothing denied, refused, protected,
    /// hidden, blocked or planted; the network unknown.
    pub fn bare(mode: SandboxMode) -> Self {
        BashSandboxInfo {
            mode,
            backend: None,
            denied: false,
            denial_evidence: DenialEvidence::Stderr,
            refused: Vec::new(),
            enforcement: None,
            runner_failed: false,
            gaps: Vec::new(),
            workspace: None,
            network: None,
            protected: Vec::new(),
            hidden: Vec::new(),
            blocked: Vec::new(),
            planted: Vec::new(),
            container: None,
        }
    }
}

/// Paths listed in [`BashSandboxInfo::blocked`] at most.
pub const MAX_BLOCKED: usize = 4;

/// Why a path is read-only for a confined command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum BlockedClass {
    /// A protected path inside the writable workspace: the host runs code
    /// from it.
    Protected,
    /// The host's own cache of a tool; the sandbox has its own.
    HostCache,
    /// Outside the workspace (and the command's TMPDIR and caches).
    OutsideWorkspace,
    /// The call runs `read-only`.
    ReadOnlyMode,
    /// A credential file hidden from confined commands (not readable
    /// either).
    Hidden,
}

/// One path a confined command could not write, explained.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedPath {
    /// The path as refused (absolute).
    pub path: PathBuf,
    /// Why it is read-only, as a class.
    pub class: BlockedClass,
    /// Why, in words (`protected: git hooks run on the host`).
    pub why: String,
    /// What works instead (the sandbox's cache, `--unprotect`, asking for
    /// `sandbox_permissions`); empty when nothing does.
    pub instead: String,
}

/// The network a confined command had.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkFacts {
    /// The policy in force.
    pub mode: NetworkPolicy,
    /// Under `allow`: every `host:port` the proxy refused this command, in
    /// the order first refused, each once (at most 32). Decided by the
    /// server's proxy, never from the command's output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<String>,
    /// Refused hosts past the ones in `denied`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub denied_more: u64,
    /// Of `denied`, those refused only for being on no allow-list entry,
    /// which a grant for one call could let through (not deny-listed, not
    /// an internal address).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub askable: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl NetworkFacts {
    /// `mode` with nothing refused.
    pub fn of(mode: NetworkPolicy) -> Self {
        NetworkFacts {
            mode,
            denied: Vec::new(),
            denied_more: 0,
            askable: Vec::new(),
        }
    }
}

/// How many refusals [`BashSandboxInfo::refused`] lists at most.
pub const MAX_REFUSALS: usize = 8;

/// Where a `denied` fact comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DenialEvidence {
    /// Stderr reads like this backend's denial: a guess (a command can
    /// print anything). Where the kernel cannot tell: bubblewrap, Landlock
    /// without audit, a server without `CAP_AUDIT_READ`.
    #[default]
    Stderr,
    /// The kernel's audit records of the command's own Landlock domain: a
    /// command cannot forge them.
    Kernel,
}

/// How a command's processes were contained (and stopped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Containment {
    /// A cgroup of its own: leftovers are whatever is still in it, a stop
    /// ends in one atomic `cgroup.kill`.
    Cgroup,
    /// The process-tree walk (subreaper, freeze, pidfds): where no cgroup
    /// can be created.
    ProcessTree,
}

/// A finished (or killed) foreground run. Every field is an independent fact:
/// a command that traps SIGTERM and exits 0 after its timeout is
/// `timed_out: true, exit_code: Some(0)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashRunResult {
    /// The exit code; `None` when the shell was killed by a signal.
    pub exit_code: Option<i32>,
    /// The name of the signal that killed the shell (`SIGTERM`), if any. A
    /// shell that exits with 128+n reports an exit code, not a signal.
    pub signal: Option<String>,
    /// True if and only if the timeout fired before any cancellation.
    pub timed_out: bool,
    /// True if and only if cancellation fired before the timeout.
    pub aborted: bool,
    /// The effective timeout after defaulting and capping, in milliseconds.
    pub timeout_ms: u64,
    /// Collected stdout.
    pub stdout: CollectedOutput,
    /// Collected stderr.
    pub stderr: CollectedOutput,
    /// How many leftover processes of the command's process group were still
    /// running when the shell exited and were stopped (for example a
    /// `server &` inside a foreground command). Zero normally.
    pub leftovers_stopped: u32,
    /// Sandbox facts; set only by a sandboxing executor.
    pub sandbox: Option<BashSandboxInfo>,
    /// How the command's processes were contained; `None` from executors
    /// that do not say.
    #[serde(default)]
    pub containment: Option<Containment>,
    /// The resource limits it ran under and whether it hit one; `None`
    /// from executors that apply none.
    #[serde(default)]
    pub limits: Option<crate::BashLimits>,
    /// What the shell itself said: whether the user's shell snapshot was
    /// sourced, the directory it ended in. `None` from executors that do
    /// not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellFacts>,
    /// What changed in the workspace while it ran; `None` where the
    /// executor watches no workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<crate::WorkspaceChanges>,
    /// The claimed sandbox (a Kubernetes agent-sandbox pod) that ran it;
    /// `None` from executors that claim none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimFacts>,
}

/// The sandbox a command ran in, claimed from a Kubernetes warm pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimFacts {
    /// The namespace of the claim and its sandbox.
    pub namespace: String,
    /// The `SandboxClaim`'s name.
    pub claim: String,
    /// The `Sandbox` the claim was bound to.
    pub sandbox: String,
    /// The address the server was reached at (`http://10.1.2.3:8700/mcp`,
    /// a service name's, or the router's).
    pub address: String,
}

impl BashRunResult {
    /// What a foreground run the caller abandoned before it produced
    /// anything returns: aborted, no output, no facts; `timeout` is its
    /// effective timeout.
    pub fn abandoned(timeout: std::time::Duration) -> Self {
        BashRunResult {
            exit_code: None,
            signal: None,
            timed_out: false,
            aborted: true,
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            stdout: CollectedOutput::default(),
            stderr: CollectedOutput::default(),
            leftovers_stopped: 0,
            sandbox: None,
            containment: None,
            limits: None,
            shell: None,
            changed: None,
            claim: None,
        }
    }
}

/// What a command's shell brought and left.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellFacts {
    /// The user's shell snapshot (their start-up files' variables,
    /// functions, aliases and options) was sourced before the command.
    pub snapshot: bool,
    /// The directory the shell ended in (`$PWD` at exit, which a caller resolves), when asked
    /// for ([`crate::BashExecSpec::report_cwd`]) and the shell got to say
    /// so (not when it was killed or `exec`ed another program). The
    /// command could have written it itself: a caller checks it before
    /// using it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_cwd: Option<std::path::PathBuf>,
}
