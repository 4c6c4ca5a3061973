//! The sandbox seam of dsh-bash: the vocabulary every sandbox backend and
//! every consumer agrees on.
//!
//! A sandbox mode says what a command may change on disk:
//!
//! | mode | may write |
//! |---|---|
//! | [`SandboxMode::ReadOnly`] | `/dev/null` only |
//! | [`SandboxMode::WorkspaceWrite`] | also the workspace root (but its [`ProtectedPaths`]), its own private temporary directory and the sandbox's own tool caches ([`SandboxCaches`]) |
//! | [`SandboxMode::DangerFullAccess`] | anything the user can (no confinement) |
//!
//! Beside it a [`NetworkPolicy`] says whether the command may use the
//! network (`off` by default in the confining modes).
//!
//! Every confining mode also keeps the command away from processes,
//! capabilities, descriptors and IPC outside the sandbox (the threat model
//! is written down in `dsh-sandbox-local`). How completely a backend keeps
//! those promises on this host is reported as [`SandboxEnforcement`] plus
//! the [`SandboxGap`]s it cannot close: `full` exactly when there are none.
//!
//! A [`SandboxProvider`] turns the exact argv of a command and a
//! [`SandboxPolicy`] (mode, [`Workspace`] resolved once, private temporary
//! directory) into a [`Confinement`]: what to spawn instead, the
//! [`Restriction`] the launcher applies between fork and exec — described as
//! data (a Landlock ruleset fd, a seccomp program, a capability drop,
//! descriptors to keep), never as code that would run in the forked child —
//! environment changes, and the facts a consumer reports (backend,
//! enforcement, gaps, a structural [`RunnerReport`]). With no usable backend
//! it fails closed with [`SandboxUnavailable`]: a confined mode never
//! silently runs unconfined.
//!
//! # Example
//!
//! ```
//! use dsh_sandbox::{SandboxMode, SandboxUnavailable};
//!
//! let mode: SandboxMode = "workspace-write".parse().unwrap();
//! assert!(mode.is_wider_than(SandboxMode::ReadOnly));
//! assert_eq!(mode.to_string(), "workspace-write");
//!
//! let refused = SandboxUnavailable::new(SandboxMode::ReadOnly, None);
//! assert_eq!(refused.code(), "SANDBOX_UNAVAILABLE");
//! assert!(refused.to_string().contains("refusing to run it unconfined"));
//! ```
//!
//! # Platform support
//!
//! This crate is data and traits; it compiles on every Unix (descriptors
//! are `std::os::fd`).
//!
//! # Caveats
//!
//! The seam contains no process code; confinement itself lives in provider
//! crates.
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

mod caches;
mod gap;
mod hidden;
mod hosts;
mod mode;
mod network;
mod protect;
mod provider;
mod workspace;

pub use caches::{
    CacheDir, CacheValue, HostDirs, HostPlace, SandboxCaches, ToolCache, TOOL_CACHES,
};
pub use gap::SandboxGap;
pub use hidden::{
    homes, is_control_socket, mount_aliases, HiddenPath, HiddenPaths, HideError, CONTROL_SOCKETS,
    CREDENTIAL_FILES, MAX_HIDDEN,
};
pub use hosts::{is_internal, HostPattern, HostPreset, HostRules, HostVerdict, ParseHostError};
pub use mode::{ParseModeError, SandboxBackend, SandboxEnforcement, SandboxMode};
pub use network::{NetworkPolicy, ParseNetworkError};
pub use protect::{
    stand_in_contents, ProtectError, Protected, ProtectedPaths, ProtectedState, Resolution,
    DEFAULT_PROTECTED_PATHS, HOME_PROTECTED_DIRS, HOME_PROTECTED_PATHS, ROOT_PROTECTED_SUFFIXES,
    STAND_IN_PREFIX,
};
pub use provider::{
    BoxFuture, BpfInstruction, Confinement, DenialWitness, Entry, Exposed, Held, Invocation,
    NetworkLog, Restriction, RunnerOutcome, RunnerReport, SandboxPolicy, SandboxProvider,
    SandboxUnavailable, SpawnObserver,
};
pub use workspace::{Workspace, WorkspaceError};

/// Variables a wrapping runner's dynamic loader or C library acts on as it
/// starts, before any confinement exists (glibc's list for secure
/// execution, plus `GLIBC_TUNABLES`): nothing but the caller may set them
/// for a confined command.
pub fn acts_before_the_sandbox(name: &str) -> bool {
    name.starts_with("LD_")
        || name.starts_with("MALLOC_")
        || [
            "GCONV_PATH",
            "GETCONF_DIR",
            "GLIBC_TUNABLES",
            "HOSTALIASES",
            "LOCALDOMAIN",
            "LOCPATH",
            "NIS_PATH",
            "NLSPATH",
            "RESOLV_HOST_CONF",
            "RES_OPTIONS",
            "TZDIR",
        ]
        .contains(&name)
}
