use std::ffi::OsString;
use std::path::PathBuf;

/// Which backend confines commands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// The strongest usable one: bubblewrap, else Landlock.
    #[default]
    Auto,
    /// bubblewrap only (fails closed if its probe fails).
    Bwrap,
    /// Landlock only (fails closed if its probe fails).
    Landlock,
}

/// An operator-configured bwrap-shaped runner: it is invoked as
/// `<command…> <bwrap profile…> -- <argv…>` with no selection and no probe.
///
/// The profile includes `--json-status-fd N`: the runner must write bwrap's
/// `{"child-pid": …}` status there once the command started (a wrapper that
/// passes its arguments to bwrap does). Without it every run counts as a
/// runner failure: a runner's failure is never guessed from stderr text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerCommand {
    /// The program and its leading arguments.
    pub command: Vec<OsString>,
}

/// How a [`crate::LocalSandboxProvider`] chooses and checks its backend.
#[derive(Clone, Debug)]
pub struct LocalSandboxConfig {
    /// The backend choice. Default [`Backend::Auto`].
    pub backend: Backend,
    /// The bubblewrap binary. Default `bwrap` (from PATH).
    pub bwrap: PathBuf,
    /// An operator runner that replaces selection and probes.
    pub runner: Option<RunnerCommand>,
    /// The bound on each probe. Default 5 s.
    pub probe_timeout: std::time::Duration,
    /// The host's own binary, which runs [`dsh_net_proxy::forward::run_if_asked`]
    /// first in `main`: re-executed inside bubblewrap's network namespace
    /// as the allow-list's forwarder. `None`: the network policy `allow`
    /// is refused under bubblewrap (Landlock needs none).
    pub forwarder: Option<PathBuf>,
    /// Under bubblewrap, build a session's sandbox once and let each
    /// command enter it (see the crate's `warm` module) instead of one
    /// `bwrap` per command. Default true; a one-shot process that runs a
    /// single command gains nothing from it.
    pub warm: bool,
}

impl Default for LocalSandboxConfig {
    fn default() -> Self {
        LocalSandboxConfig {
            backend: Backend::Auto,
            bwrap: PathBuf::from("bwrap"),
            runner: None,
            probe_timeout: std::time::Duration::from_secs(5),
            forwarder: None,
            warm: true,
        }
    }
}

/// A sandbox configuration that cannot work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The probe timeout is zero.
    #[error("invalid probe_timeout: expected a positive duration, got 0")]
    ProbeTimeout,
    /// The runner command is empty.
    #[error("invalid runner: the command is empty; give the program (and its leading arguments)")]
    EmptyRunner,
    /// The runner's program is neither an absolute path nor found on this
    /// process's PATH (a command's own PATH never chooses it).
    #[error("invalid runner: {program} is not an absolute path and not on this process's PATH; give its absolute path")]
    RunnerNotFound {
        /// The program as configured.
        program: String,
    },
}

impl LocalSandboxConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.probe_timeout.is_zero() {
            return Err(ConfigError::ProbeTimeout);
        }
        if let Some(runner) = &self.runner {
            if runner.command.is_empty() {
                return Err(ConfigError::EmptyRunner);
            }
        }
        Ok(())
    }
}
