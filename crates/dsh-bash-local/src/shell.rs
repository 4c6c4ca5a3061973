//! The user's own shell as every command sees it: a snapshot of what their
//! login shell's start-up files set up (exported variables, functions,
//! aliases, glob options), taken once in the background
//! ([`crate::take_shell_snapshot`]) and applied to every command after it
//! is ready.
//!
//! A snapshot has two parts:
//!
//! - its **variables**, merged into each command's environment above the
//!   scrubbed inherited one and below the caller's explicit entries and
//!   the sandbox's own (a proxy, a private `TMPDIR`), already scrubbed by
//!   the same credential rules;
//! - its **script** (aliases, options, and a one-line stub per function
//!   that loads the function's definition from a second sealed file the
//!   first time it is called: parsing 40 KB of definitions costs bash
//!   about 2.5 ms, a stub a few microseconds), a sealed in-memory file
//!   that bash sources through `BASH_ENV=/dev/fd/N` before the command's
//!   own text, with the text itself untouched (`bash -c` keeps its `$0`,
//!   its exit codes and its exec of the last command). No command can
//!   change it (the memfd is sealed, no path names it), the script unsets
//!   `BASH_ENV` and closes its descriptor first, so nested shells do not
//!   source it again.
//!
//! ```
//! use dsh_bash_local::{SnapshotSlot, SnapshotState};
//! let slot = SnapshotSlot::pending();
//! assert!(matches!(slot.state(), SnapshotState::Pending));
//! assert!(slot.current().is_none()); // commands run without one meanwhile
//! ```

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

/// Where a snapshot comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotSource {
    /// The user's login shell (bash or zsh), reading its start-up files as
    /// an interactive login shell would; retried without its rc file when
    /// that does not finish in time.
    Login {
        /// The shell (`$SHELL`).
        shell: PathBuf,
    },
    /// A bash file the operator prepared, sourced by bash.
    File(PathBuf),
}

/// One taken snapshot, ready to apply.
#[derive(Debug)]
pub struct ShellSnapshot {
    pub(crate) vars: Vec<(OsString, OsString)>,
    #[cfg_attr(any(not(target_os = "linux"), dsh_unsupported), allow(dead_code))]
    pub(crate) script: Arc<OwnedFd>,
    /// The functions' definitions, loaded one by one by their stubs.
    #[cfg_attr(any(not(target_os = "linux"), dsh_unsupported), allow(dead_code))]
    pub(crate) definitions: Option<Arc<OwnedFd>>,
    pub(crate) summary: SnapshotSummary,
}

impl ShellSnapshot {
    /// What it holds.
    pub fn summary(&self) -> &SnapshotSummary {
        &self.summary
    }

    /// Its variables, as they are merged into a command's environment.
    pub fn variables(&self) -> &[(OsString, OsString)] {
        &self.vars
    }
}

/// What a snapshot holds and what was left out of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotSummary {
    /// The shell it was taken of (or the file it was read from).
    pub source: String,
    /// Variables that differ from the server's own environment.
    pub variables: usize,
    /// Functions kept.
    pub functions: usize,
    /// Aliases kept.
    pub aliases: usize,
    /// The size in bytes of the script every command sources.
    pub script_bytes: usize,
    /// The size in bytes of the functions' definitions, each loaded the
    /// first time a command calls it.
    pub definition_bytes: usize,
    /// Variables left out as credentials, by name.
    pub scrubbed: Vec<String>,
    /// Functions and aliases left out, each with why (bash cannot parse
    /// it, it carries a credential).
    pub dropped: Vec<String>,
    /// The rc file could not be read in time: only the profile was.
    pub without_rc: bool,
    /// The shell ran confined (nothing in the home writable); false where
    /// no sandbox could run it here.
    pub confined: bool,
}

/// Why no snapshot could be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The sandbox cannot confine the shell here (it then runs
    /// unconfined).
    #[error("the shell snapshot cannot be confined here: {detail}")]
    Unconfinable {
        /// Why.
        detail: String,
    },
    /// The shell is not one whose state can be carried to bash.
    #[error("shell snapshots are taken of bash and zsh; {shell} is neither (set SHELL, or --shell-snapshot FILE with a bash file)")]
    UnsupportedShell {
        /// The shell asked for.
        shell: String,
    },
    /// The login shell did not finish in time, with or without its rc file.
    #[error("{shell} did not finish reading its start-up files within {secs} s, neither with its rc file nor without it; commands run without a snapshot (make the start-up files faster, or --shell-snapshot off)")]
    TimedOut {
        /// The shell.
        shell: String,
        /// The bound of each attempt.
        secs: u64,
    },
    /// The login shell failed before writing its state.
    #[error("{shell} exited ({status}) before its state was written: {stderr}")]
    Failed {
        /// The shell.
        shell: String,
        /// How it ended.
        status: String,
        /// The end of what it printed on stderr.
        stderr: String,
    },
    /// Running the shell, or reading or keeping what it wrote, failed.
    #[error("cannot take the shell snapshot: {detail}")]
    Io {
        /// What failed.
        detail: String,
    },
    /// Sourcing the finished script failed in bash.
    #[error("the shell snapshot does not source cleanly in bash: {detail}")]
    Invalid {
        /// What bash said.
        detail: String,
    },
    /// Not on this platform.
    #[error("shell snapshots need Linux")]
    Unsupported,
}

/// Where a snapshot stands.
#[derive(Clone, Debug)]
pub enum SnapshotState {
    /// Being taken: commands run without one meanwhile.
    Pending,
    /// Taken: every command sources it.
    Ready(Arc<ShellSnapshot>),
    /// None could be taken, and why.
    Unavailable(String),
}

/// The snapshot an executor applies, set once it is taken
/// ([`crate::LocalConfig::shell_snapshot`]).
#[derive(Debug)]
pub struct SnapshotSlot {
    state: RwLock<SnapshotState>,
}

impl SnapshotSlot {
    /// A slot whose snapshot is still being taken.
    pub fn pending() -> Arc<SnapshotSlot> {
        Arc::new(SnapshotSlot {
            state: RwLock::new(SnapshotState::Pending),
        })
    }

    /// Settles the slot with what taking the snapshot gave.
    pub fn settle(&self, taken: Result<ShellSnapshot, SnapshotError>) {
        let state = match taken {
            Ok(snapshot) => SnapshotState::Ready(Arc::new(snapshot)),
            Err(err) => SnapshotState::Unavailable(err.to_string()),
        };
        *self.state.write().unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// Where it stands.
    pub fn state(&self) -> SnapshotState {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The snapshot, once taken.
    pub fn current(&self) -> Option<Arc<ShellSnapshot>> {
        match &*self.state.read().unwrap_or_else(PoisonError::into_inner) {
            SnapshotState::Ready(snapshot) => Some(Arc::clone(snapshot)),
            _ => None,
        }
    }
}

/// What every snapshot script begins with, and all a script is when a
/// command's final directory is asked for without a snapshot: `BASH_ENV`
/// unset and its descriptor closed (plain `exec`: under `builtin` the
/// redirection would be undone; no function can be defined yet), so
/// nested shells do not source it again; and, when `DSH_CWD_FD` names a
/// descriptor, an `EXIT` trap that writes `$PWD` to it, NUL-terminated (a
/// builtin: a user's function changes nothing; the reader resolves it to
/// a physical directory).
#[cfg_attr(any(not(target_os = "linux"), dsh_unsupported), allow(dead_code))]
pub(crate) const PROLOGUE: &str = r#"__dsh_fd=${BASH_ENV#/dev/fd/}
builtin unset BASH_ENV
case $__dsh_fd in ''|*[!0-9]*) ;; *) exec {__dsh_fd}<&- ;; esac
builtin unset __dsh_fd
case ${DSH_CWD_FD-} in
  ''|*[!0-9]*) ;;
  *) builtin trap "builtin printf '%s\\0' \"\$PWD\" >&$DSH_CWD_FD" EXIT ;;
esac
builtin unset DSH_CWD_FD
"#;
