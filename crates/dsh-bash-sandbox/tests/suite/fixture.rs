//! Executors over real backends, and a provider double that records calls.

use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};

use dsh_bash::{BashExecRequest, BashExecutor, BashRunResult, SandboxMode};
use dsh_bash_local::LocalConfig;
use dsh_bash_sandbox::{SandboxBashExecutor, SandboxConfig};
use dsh_sandbox::{
    BoxFuture, Confinement, RunnerOutcome, RunnerReport, SandboxEnforcement, SandboxGap,
    SandboxPolicy, SandboxProvider, SandboxUnavailable,
};
use dsh_sandbox_local::{Backend, LocalSandboxConfig, LocalSandboxProvider, RunnerCommand};

pub fn local() -> LocalConfig {
    LocalConfig {
        grace: std::time::Duration::from_millis(400),
        ..LocalConfig::default()
    }
}

fn over(config: LocalSandboxConfig, mode: SandboxMode, root: &Path) -> SandboxBashExecutor {
    let provider = LocalSandboxProvider::new(config).unwrap();
    dsh_bash_sandbox::sandboxed(
        SandboxConfig {
            local: LocalConfig {
                cwd: Some(root.to_owned()),
                ..local()
            },
            mode,
            workspace_root: Some(root.to_owned()),
            ..SandboxConfig::default()
        },
        Arc::new(provider),
    )
    .unwrap()
}

pub fn executor(backend: Backend, mode: SandboxMode, root: &Path) -> SandboxBashExecutor {
    let config = LocalSandboxConfig {
        backend,
        ..LocalSandboxConfig::default()
    };
    over(config, mode, root)
}

pub fn runner_executor(runner: &Path, root: &Path) -> SandboxBashExecutor {
    let config = LocalSandboxConfig {
        runner: Some(RunnerCommand {
            command: vec![runner.as_os_str().to_owned()],
        }),
        ..LocalSandboxConfig::default()
    };
    over(config, SandboxMode::ReadOnly, root)
}

/// The real backends usable here; a missing one is skipped loudly (and
/// fails under DSH_TEST_REQUIRE_SANDBOX=1).
/// What a default policy's enforcement is under `backend` on this
/// machine: Landlock does not govern connecting to a socket by its path,
/// so a control socket present here (`/run/user`, `/run/docker.sock`, ...)
/// leaves the gap `hidden-paths`.
pub fn default_enforcement(backend: &Backend) -> SandboxEnforcement {
    let present = dsh_sandbox::CONTROL_SOCKETS
        .iter()
        .any(|socket| std::fs::symlink_metadata(socket).is_ok());
    if *backend == Backend::Landlock && present {
        SandboxEnforcement::Partial
    } else {
        SandboxEnforcement::Full
    }
}

pub async fn backends() -> Vec<Backend> {
    let mut usable = Vec::new();
    for backend in [Backend::Bwrap, Backend::Landlock] {
        let provider = LocalSandboxProvider::new(LocalSandboxConfig {
            backend: backend.clone(),
            ..LocalSandboxConfig::default()
        })
        .unwrap();
        match provider.backend().await {
            Ok(_) => usable.push(backend),
            Err(why) => {
                let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
                assert!(!required, "{backend:?} is required but unusable: {why}");
                eprintln!("SKIP {backend:?}: {why}");
            }
        }
    }
    usable
}

pub async fn run(
    executor: &SandboxBashExecutor,
    command: &str,
    mode: Option<SandboxMode>,
) -> BashRunResult {
    let mut request = BashExecRequest::new(command);
    request.sandbox_mode = mode;
    executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap()
}

/// A runner report double with a fixed outcome.
#[derive(Debug)]
pub struct Reported(pub RunnerOutcome);

impl RunnerReport for Reported {
    fn outcome(&self) -> RunnerOutcome {
        self.0
    }
}

/// A provider double: records every (argv, policy) and confines nothing
/// (returns the argv unchanged with fixed facts).
#[derive(Default)]
pub struct Recorder {
    pub calls: Mutex<Vec<(Vec<OsString>, SandboxPolicy)>>,
    pub enforcement: Option<SandboxEnforcement>,
    pub refuse: bool,
    /// When set, the confinement carries a runner report with this outcome.
    pub runner: Option<RunnerOutcome>,
    /// How many times the executor said the runner failed.
    pub runner_failures: std::sync::atomic::AtomicUsize,
}

impl SandboxProvider for Recorder {
    fn confine<'a>(
        &'a self,
        argv: &'a [OsString],
        policy: &'a SandboxPolicy,
    ) -> BoxFuture<'a, Result<Confinement, SandboxUnavailable>> {
        self.calls
            .lock()
            .unwrap()
            .push((argv.to_vec(), policy.clone()));
        Box::pin(async move {
            if self.refuse {
                return Err(SandboxUnavailable::new(policy.mode, None));
            }
            let enforcement = self.enforcement.unwrap_or(SandboxEnforcement::Full);
            Ok(Confinement {
                enforcement,
                gaps: if enforcement == SandboxEnforcement::Full {
                    Vec::new()
                } else {
                    vec![SandboxGap::Metadata]
                },
                backend: "recorder".into(),
                denial_signatures: vec!["permission denied".into()],
                runner_report: self
                    .runner
                    .map(|outcome| Arc::new(Reported(outcome)) as Arc<dyn RunnerReport>),
                ..Confinement::unconfined(argv)
            })
        })
    }

    fn runner_failed(&self) {
        self.runner_failures
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
