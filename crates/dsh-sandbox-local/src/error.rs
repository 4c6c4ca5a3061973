use std::io;

/// Why a backend could not confine a command (turned into
/// `SANDBOX_UNAVAILABLE` with this text as the detail; nothing runs).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A Landlock ruleset step failed.
    #[error("landlock: cannot {step}: {detail}")]
    Landlock {
        /// What was being done.
        step: &'static str,
        /// What the landlock crate or the kernel said.
        detail: String,
    },
    /// The kernel has no Landlock.
    #[error("landlock: not supported by this kernel")]
    LandlockUnsupported,
    /// A descriptor for the runner could not be prepared.
    #[error("cannot prepare the {what} for the sandbox runner: {cause}")]
    Descriptor {
        /// Which descriptor.
        what: &'static str,
        /// What the OS said.
        cause: io::Error,
    },
    /// A protected path could not be opened beneath the workspace (it or
    /// a directory on its way is a symlink now, or it vanished).
    #[error("cannot keep the protected path {path} read-only ({cause}); if it must not be protected, leave it out with --unprotect")]
    Protect {
        /// The path, relative to the workspace.
        path: std::path::PathBuf,
        /// What the OS said.
        cause: io::Error,
    },
    /// A stand-in for a missing protected path could not be created.
    #[error("cannot create the read-only stand-in {path} for a protected path ({cause}); if it must not be protected, leave it out with --unprotect")]
    StandIn {
        /// The stand-in.
        path: std::path::PathBuf,
        /// What the OS said.
        cause: io::Error,
    },
    /// The session's warm sandbox could not be built.
    #[error("cannot build the session's warm sandbox: {detail}")]
    Warm {
        /// What went wrong, with what bwrap said.
        detail: String,
    },
    /// Preparing the confinement was interrupted (the runtime is shutting
    /// down).
    #[error("preparing the sandbox was interrupted: {detail}")]
    Interrupted {
        /// What the runtime said.
        detail: String,
    },
    /// A command asked for a terminal under bubblewrap, and no util-linux
    /// `setsid` (with `--ctty` and `--wait`) is installed to give it one.
    #[error("a terminal under bubblewrap needs util-linux setsid (with --ctty and --wait) on an absolute PATH entry, and none was found; install util-linux, or use the Landlock backend")]
    NoSetsid,
    /// The network allow-list's proxy door could not be opened.
    #[error("cannot open the network proxy for the allow-list: {cause}")]
    Door {
        /// What the OS said.
        cause: io::Error,
    },
    /// The network allow-list under bubblewrap needs the host's own binary
    /// as the forwarder inside the namespace, and the host named none.
    #[error("the network allow-list under bubblewrap needs a forwarder program (LocalSandboxConfig::forwarder, the dsh-bash binary itself); none was configured, so the command is refused rather than run without its allow-list")]
    NoForwarder,
    /// The network allow-list under Landlock needs its TCP rules (ABI 4):
    /// below that the kernel would let every connect through.
    #[error("the network allow-list under Landlock needs Landlock ABI 4 (Linux 6.7) for its TCP rules; this kernel has ABI {abi}, where a command could connect anywhere, so it is refused: use bubblewrap (--sandbox-backend bwrap), or network off or on")]
    AllowListNeedsTcpRules {
        /// The kernel's Landlock ABI.
        abi: i64,
    },
    /// A probe showed the backend does not confine here.
    #[error("{backend}: {reason}")]
    Probe {
        /// The backend probed.
        backend: &'static str,
        /// What the probe saw.
        reason: String,
    },
}

/// No backend can confine commands on this host: what each probe said.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no usable sandbox backend: {reasons}")]
pub struct NoBackend {
    pub(crate) reasons: String,
}

impl NoBackend {
    /// What each backend's probe said, `; `-separated.
    pub fn reasons(&self) -> &str {
        &self.reasons
    }
}
