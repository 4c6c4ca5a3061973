use std::ffi::OsString;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::{SandboxEnforcement, SandboxMode};

/// A boxed, sendable future, so provider and executor traits stay
/// object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A restriction applied in the child between fork and exec (for example
/// `landlock_restrict_self` on a ruleset prepared in the parent).
///
/// It runs after `fork` in a possibly multi-threaded process, so it must
/// only make raw async-signal-safe syscalls: no allocation, no locks, no
/// logging.
pub type PreExec = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

/// What a command may touch: the mode and the workspace root it refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// The mode to enforce.
    pub mode: SandboxMode,
    /// The absolute workspace root (writable under `workspace-write`).
    pub workspace_root: PathBuf,
}

/// How to run one exact argv confined.
#[derive(Clone)]
pub struct Confinement {
    /// The argv to spawn instead of the caller's (the caller's own argv when
    /// the restriction is applied by `pre_exec` alone). First element is the
    /// program.
    pub argv: Vec<OsString>,
    /// A restriction to apply between fork and exec, if the backend needs one.
    pub pre_exec: Option<PreExec>,
    /// Which backend confines it (`bwrap`, `landlock`, `runner`).
    pub backend: String,
    /// How completely the backend enforces the mode on this host.
    pub enforcement: SandboxEnforcement,
    /// Case-insensitive stderr substrings that this backend's denials produce.
    pub denial_signatures: Vec<String>,
    /// Case-insensitive stderr substrings that mean the runner itself failed
    /// and the command never ran.
    pub runner_failure_signatures: Vec<String>,
}

impl fmt::Debug for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confinement")
            .field("argv", &self.argv)
            .field("pre_exec", &self.pre_exec.is_some())
            .field("backend", &self.backend)
            .field("enforcement", &self.enforcement)
            .field("denial_signatures", &self.denial_signatures)
            .field("runner_failure_signatures", &self.runner_failure_signatures)
            .finish()
    }
}

/// True if and only if `stderr` contains one of `signatures`, ignoring case.
pub(crate) fn mentions(stderr: &str, signatures: &[String]) -> bool {
    let stderr = stderr.to_lowercase();
    signatures
        .iter()
        .filter(|s| !s.trim().is_empty())
        .any(|s| stderr.contains(&s.to_lowercase()))
}

impl Confinement {
    /// True if and only if `stderr` carries one of this backend's denial phrases.
    pub fn denial_in(&self, stderr: &str) -> bool {
        mentions(stderr, &self.denial_signatures)
    }

    /// True if and only if `stderr` says the runner itself failed.
    pub fn runner_failure_in(&self, stderr: &str) -> bool {
        mentions(stderr, &self.runner_failure_signatures)
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
}

/// A confined mode was asked for and nothing on this host can enforce it.
/// Nothing ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxUnavailable {
    mode: SandboxMode,
    detail: Option<String>,
}

impl SandboxUnavailable {
    /// The refusal for `mode`, with the runner's own line when there is one.
    pub fn new(mode: SandboxMode, detail: Option<String>) -> Self {
        SandboxUnavailable { mode, detail }
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
        write!(
            f,
            "sandbox mode \"{}\" is unavailable on this host, refusing to run it unconfined: \
             install bubblewrap (bwrap) or use a Linux kernel with Landlock enabled (5.13 or newer), \
             or choose sandbox mode \"danger-full-access\" to run without confinement",
            self.mode
        )?;
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

    #[test]
    fn signatures_match_case_insensitively_and_ignore_blanks() {
        let confinement = Confinement {
            argv: vec![],
            pre_exec: None,
            backend: "bwrap".into(),
            enforcement: SandboxEnforcement::Full,
            denial_signatures: vec!["read-only file system".into()],
            runner_failure_signatures: vec!["  ".into(), "bwrap:".into()],
        };
        assert!(confinement.denial_in("touch: x: Read-Only File System"));
        assert!(!confinement.denial_in("Permission denied"));
        assert!(confinement.runner_failure_in("BWRAP: cannot mount"));
        assert!(!confinement.runner_failure_in("anything else"));
    }
}
