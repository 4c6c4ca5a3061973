use std::path::PathBuf;
use std::sync::Arc;

use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashExecutor, BashRunResult, BashSandboxInfo,
    BashTask, BashTaskId, BashTaskRead, BoxFuture, ListenerHandle, OwnerToken, SandboxMode,
    TaskListener, TaskState, TaskStatus,
};
use dsh_bash_local::{ConfigError, Invocation, LocalBashExecutor, LocalConfig};
use dsh_sandbox::{Confinement, SandboxPolicy, SandboxProvider, SandboxUnavailable};

/// The local configuration plus the sandbox defaults.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Everything the local executor needs.
    pub local: LocalConfig,
    /// The mode for requests that name none. Default `read-only`.
    pub mode: SandboxMode,
    /// The workspace root; `None` = the local cwd, else the process cwd.
    pub workspace_root: Option<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            local: LocalConfig::default(),
            mode: SandboxMode::ReadOnly,
            workspace_root: None,
        }
    }
}

/// Runs bash commands confined by a [`SandboxProvider`].
#[derive(Clone)]
pub struct SandboxBashExecutor {
    local: LocalBashExecutor,
    provider: Arc<dyn SandboxProvider>,
    mode: SandboxMode,
    workspace_root: PathBuf,
}

impl std::fmt::Debug for SandboxBashExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxBashExecutor")
            .field("mode", &self.mode)
            .field("workspace_root", &self.workspace_root)
            .finish_non_exhaustive()
    }
}

/// A command as the provider confines it.
struct Confined {
    confinement: Confinement,
    invocation: Invocation,
    wrapped: bool,
}

/// The first line of `stderr` (the runner's own explanation).
fn first_line(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_owned)
}

/// True if and only if the command failed on its own terms: a non-zero exit
/// that is not a signal death. A wrapping runner (bwrap) reports its
/// child's death by signal n as exit 128+n, so those count as signals too.
fn failed(exit_code: Option<i32>, wrapped: bool) -> bool {
    match exit_code {
        Some(0) | None => false,
        Some(code) => !(wrapped && code > 128),
    }
}

fn facts(mode: SandboxMode, confinement: &Confinement) -> BashSandboxInfo {
    BashSandboxInfo {
        mode,
        backend: Some(confinement.backend.clone()),
        denied: false,
        enforcement: Some(confinement.enforcement),
        runner_failed: false,
    }
}

impl SandboxBashExecutor {
    /// Builds the executor. The workspace root is made absolute now.
    pub fn new(
        config: SandboxConfig,
        provider: Arc<dyn SandboxProvider>,
    ) -> Result<Self, ConfigError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let base = config
            .local
            .cwd
            .clone()
            .map_or(cwd.clone(), |dir| cwd.join(dir));
        let workspace_root = config
            .workspace_root
            .clone()
            .map_or(base.clone(), |root| base.join(root));
        Ok(SandboxBashExecutor {
            local: LocalBashExecutor::new(config.local)?,
            provider,
            mode: config.mode,
            workspace_root,
        })
    }

    /// The absolute workspace root writable under `workspace-write`.
    pub fn workspace_root(&self) -> &std::path::Path {
        &self.workspace_root
    }

    fn mode_of(&self, spec: &BashExecSpec) -> SandboxMode {
        spec.sandbox_mode.unwrap_or(self.mode)
    }

    /// Asks the provider how to run `spec` under `mode`: the confinement,
    /// the invocation to hand to the local executor, and whether the argv
    /// was wrapped by a runner (whose exit 128+n means a signal death).
    async fn confine(&self, spec: &BashExecSpec, mode: SandboxMode) -> Result<Confined, BashError> {
        let plain = self.local.invocation(spec);
        let policy = SandboxPolicy {
            mode,
            workspace_root: self.workspace_root.clone(),
        };
        let confinement = self.provider.confine(&plain.argv, &policy).await?;
        Ok(Confined {
            wrapped: confinement.argv != plain.argv,
            invocation: Invocation {
                argv: confinement.argv.clone(),
                pre_exec: confinement.pre_exec.clone(),
            },
            confinement,
        })
    }

    async fn run_confined(&self, spec: BashExecSpec) -> Result<BashRunResult, BashError> {
        let mode = self.mode_of(&spec);
        if !mode.confines() {
            let mut result = self.local.run(spec).await?;
            result.sandbox = Some(BashSandboxInfo {
                mode,
                backend: None,
                denied: false,
                enforcement: None,
                runner_failed: false,
            });
            return Ok(result);
        }
        let Confined {
            confinement,
            invocation,
            wrapped,
        } = self.confine(&spec, mode).await?;
        let mut result = match self.local.run_invocation(spec, invocation).await {
            Ok(result) => result,
            // The runner could not even start (missing binary, a pre-exec
            // restriction the kernel refused): nothing ran.
            Err(BashError::Spawn { message, .. }) => {
                return Err(SandboxUnavailable::new(mode, Some(message)).into())
            }
            Err(other) => return Err(other),
        };
        let stderr = &result.stderr.text;
        let nonzero = result.exit_code.is_some_and(|code| code != 0);
        if nonzero && confinement.runner_failure_in(stderr) {
            return Err(SandboxUnavailable::new(mode, first_line(stderr)).into());
        }
        let mut info = facts(mode, &confinement);
        info.denied = failed(result.exit_code, wrapped) && confinement.denial_in(stderr);
        result.sandbox = Some(info);
        Ok(result)
    }

    async fn start_confined(&self, spec: BashExecSpec) -> Result<BashTask, BashError> {
        let mode = self.mode_of(&spec);
        if !mode.confines() {
            return self.local.start(spec).await;
        }
        let Confined {
            confinement,
            invocation,
            wrapped,
        } = self.confine(&spec, mode).await?;
        let stamp = Box::new(move |state: &mut TaskState, stderr: &str| {
            let mut info = facts(mode, &confinement);
            let spawn_failed = state.status == TaskStatus::Killed
                && state.exit_code.is_none()
                && state.signal.is_none();
            let nonzero = state.exit_code.is_some_and(|code| code != 0);
            if spawn_failed || (nonzero && confinement.runner_failure_in(stderr)) {
                info.runner_failed = true;
            } else {
                info.denied = failed(state.exit_code, wrapped) && confinement.denial_in(stderr);
            }
            state.sandbox = Some(info);
        });
        self.local.start_invocation(spec, invocation, Some(stamp))
    }
}

impl BashExecutor for SandboxBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        Some(self.mode)
    }

    fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, BashError> {
        let mode = request.sandbox_mode.unwrap_or(self.mode);
        let mut spec = self.local.resolve(request)?;
        spec.sandbox_mode = Some(mode);
        Ok(spec)
    }

    fn run(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>> {
        Box::pin(self.run_confined(spec))
    }

    fn start(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>> {
        Box::pin(self.start_confined(spec))
    }

    fn get(&self, id: &BashTaskId) -> Option<BashTask> {
        self.local.get(id)
    }

    fn owner_of(&self, id: &BashTaskId) -> Option<OwnerToken> {
        self.local.owner_of(id)
    }

    fn list(&self) -> Vec<BashTask> {
        self.local.list()
    }

    fn read_output(&self, id: &BashTaskId) -> Result<BashTaskRead, BashError> {
        self.local.read_output(id)
    }

    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        self.local.kill(id)
    }

    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle {
        self.local.on_task_done(listener)
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        self.local.shutdown()
    }
}
