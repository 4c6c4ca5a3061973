//! Platforms other than Linux: `LocalBashExecutor` exists with the same
//! API, so the seams, the tools and front ends compile, and building one is
//! [`ConfigError::Unsupported`]. No value of it can exist (it holds an
//! uninhabited field), so its methods are never called.

use std::convert::Infallible;

use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashExecutor, BashRunResult, BashTask, BashTaskId,
    BashTaskRead, BoxFuture, ListenerHandle, OwnerToken, SandboxMode, TaskListener,
};

use crate::{ConfigError, LaunchHook, LocalConfig};

/// Runs bash commands locally — on Linux; here [`LocalBashExecutor::new`]
/// says this platform is unsupported.
#[derive(Clone, Debug)]
pub struct LocalBashExecutor {
    never: Infallible,
}

impl LocalBashExecutor {
    /// Checks `config`, then refuses: this platform is not Linux.
    pub fn new(config: LocalConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Err(ConfigError::Unsupported {
            os: std::env::consts::OS,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &LocalConfig {
        match self.never {}
    }

    /// Whether results list what changed in the workspace.
    pub fn tracks_changes(&self) -> Result<bool, String> {
        match self.never {}
    }

    /// The writable workspace root of its hook's confinement.
    pub fn workspace_root(&self) -> Option<&std::path::Path> {
        match self.never {}
    }

    /// Checks `config`, then refuses: this platform is not Linux.
    pub fn with_hook(
        config: LocalConfig,
        _hook: std::sync::Arc<dyn LaunchHook>,
    ) -> Result<Self, ConfigError> {
        Self::new(config)
    }
}

impl BashExecutor for LocalBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        match self.never {}
    }

    fn resolve(&self, _request: BashExecRequest) -> Result<BashExecSpec, BashError> {
        match self.never {}
    }

    fn run(&self, _spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>> {
        match self.never {}
    }

    fn start(&self, _spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>> {
        match self.never {}
    }

    fn get(&self, _id: &BashTaskId) -> Option<BashTask> {
        match self.never {}
    }

    fn owner_of(&self, _id: &BashTaskId) -> Option<OwnerToken> {
        match self.never {}
    }

    fn list(&self) -> Vec<BashTask> {
        match self.never {}
    }

    fn read_output(
        &self,
        _id: &BashTaskId,
        _since: Option<dsh_bash::OutputCursor>,
    ) -> Result<BashTaskRead, BashError> {
        match self.never {}
    }

    fn kill<'a>(&'a self, _id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        match self.never {}
    }

    fn on_task_done(&self, _listener: TaskListener) -> ListenerHandle {
        match self.never {}
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn building_one_says_which_platform_and_what_to_do() {
        let err = LocalBashExecutor::new(LocalConfig::default()).unwrap_err();
        assert!(matches!(err, ConfigError::Unsupported { .. }));
        let text = err.to_string();
        assert!(
            text.contains(std::env::consts::OS) && text.contains("dsh-bash-remote"),
            "{text}"
        );
    }
}

/// Sweeps what dead hosts left: nothing here, where no host runs commands.
pub fn sweep_dead_hosts(_config: &LocalConfig) {}

/// Runs the host-death watchdog if asked: never here (no host runs
/// commands), so it returns.
pub fn run_watchdog_if_asked() {}

/// Forks the watchdog: nothing to watch here.
///
/// # Errors
///
/// Never.
pub fn fork_watchdog() -> std::io::Result<()> {
    Ok(())
}

/// Names the watchdog program: nothing to watch here.
pub fn use_watchdog_program(_program: impl Into<std::path::PathBuf>) {}

/// Shell snapshots need Linux.
///
/// # Errors
///
/// Always [`crate::SnapshotError::Unsupported`].
pub async fn take_shell_snapshot(
    _executor: &LocalBashExecutor,
    _source: &crate::SnapshotSource,
    _timeout: std::time::Duration,
    _sandbox: Option<&dyn dsh_sandbox::SandboxProvider>,
) -> Result<crate::ShellSnapshot, crate::SnapshotError> {
    Err(crate::SnapshotError::Unsupported)
}
