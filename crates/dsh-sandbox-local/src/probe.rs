//! Functional probes: a backend is usable only if it really confines a
//! short-lived child, started through the same launcher as every command
//! (a write outside the policy must fail while the child still exits 0, and
//! a runner must report that it started the child), within the probe
//! timeout.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_bash::{BashError, BashExecRequest, BashExecSpec, BashExecutor, BoxFuture};
use dsh_bash_local::{
    Invocation, LaunchHook, Launching, LocalBashExecutor, LocalConfig, Outcome, Settle, Verdict,
};
use dsh_sandbox::{Confinement, RunnerOutcome, SandboxMode, SandboxPolicy, Workspace};

use crate::error::SandboxError;

/// The probe command: writes to /dev/null must work, a write to `target`
/// must fail.
fn probe_argv(target: &Path) -> Vec<OsString> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        "echo probe > /dev/null && ! ( : > \"$1\" ) 2>/dev/null".into(),
        "sh".into(),
        target.as_os_str().to_owned(),
    ]
}

fn failed(backend: &'static str, reason: impl Into<String>) -> SandboxError {
    SandboxError::Probe {
        backend,
        reason: reason.into(),
    }
}

/// The probe's launch hook: every command runs as the confinement under
/// test built it (the probe runs one).
struct Probe {
    invocation: Invocation,
    workspace: PathBuf,
}

impl LaunchHook for Probe {
    fn sandbox_mode(&self) -> SandboxMode {
        SandboxMode::ReadOnly
    }

    fn network(
        &self,
        _asked: Option<dsh_sandbox::NetworkPolicy>,
        _mode: SandboxMode,
        _extra_hosts: bool,
    ) -> dsh_sandbox::NetworkPolicy {
        dsh_sandbox::NetworkPolicy::Off
    }

    fn workspace_root(&self) -> &Path {
        &self.workspace
    }

    fn confine<'a>(
        &'a self,
        _spec: &'a BashExecSpec,
        _plain: Invocation,
        _readable: Vec<PathBuf>,
    ) -> BoxFuture<'a, Result<Launching, BashError>> {
        let invocation = self.invocation.clone();
        Box::pin(async move {
            Ok(Launching {
                invocation,
                settle: Box::new(Judged),
            })
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The probe judges its run itself (from the confinement's report).
struct Judged;

impl Settle for Judged {
    fn settle(self: Box<Self>, _outcome: Outcome) -> BoxFuture<'static, Verdict> {
        Box::pin(async { Verdict::Ran(None) })
    }
}

/// Runs the confinement's invocation once in `dir`, within `timeout`.
async fn run(
    backend: &'static str,
    confinement: &Confinement,
    dir: &Path,
    timeout: Duration,
) -> Result<Result<dsh_bash::BashRunResult, BashError>, SandboxError> {
    let hook = Probe {
        invocation: confinement.invocation.clone(),
        workspace: dir.to_owned(),
    };
    let executor = LocalBashExecutor::with_hook(
        LocalConfig {
            cwd: Some(dir.to_owned()),
            default_timeout: timeout,
            max_timeout: timeout,
            ..LocalConfig::default()
        },
        Arc::new(hook),
    )
    .map_err(|err| failed(backend, format!("probe executor: {err}")))?;
    let outcome = async {
        let spec = executor.resolve(BashExecRequest::new("sandbox probe"))?;
        executor.run(spec).await
    }
    .await;
    executor.shutdown().await;
    Ok(outcome)
}

/// Runs the probe command under the confinement `build` makes for a
/// read-only policy; Ok if it confined for real.
pub(crate) async fn check(
    backend: &'static str,
    build: impl FnOnce(&[OsString], &SandboxPolicy) -> Result<Confinement, SandboxError>,
    timeout: Duration,
) -> Result<(), SandboxError> {
    // In the temp dir every scratch of the server's uses (an absolute
    // TMPDIR, else /tmp): a relative one would be resolved in whatever
    // directory the server was started from.
    let scratch = tempfile::Builder::new()
        .prefix("dsh-sandbox-probe-")
        .tempdir_in(dsh_bash_local::scratch::temp_dir())
        .map_err(|err| {
            failed(
                backend,
                format!("cannot create the probe scratch dir: {err}"),
            )
        })?;
    let workspace = Workspace::open(scratch.path())
        .map_err(|err| failed(backend, format!("probe workspace: {err}")))?;
    let target = workspace.path().join("must-not-exist");
    let policy = SandboxPolicy {
        mode: SandboxMode::ReadOnly,
        workspace,
        private_tmp: None,
        readable: Vec::new(),
        hidden: Vec::new(),
        protected: dsh_sandbox::ProtectedPaths::none(),
        // The strictest setup, so a backend that cannot cut the network
        // where it claims to fails here rather than on a real command.
        network: dsh_sandbox::NetworkPolicy::Off,
        caches: Default::default(),
        hosts: Default::default(),
        terminal: false,
    };
    let confinement = build(&probe_argv(&target), &policy)?;
    let outcome = run(backend, &confinement, scratch.path(), timeout).await?;
    let leaked = target.exists();
    let result = outcome.map_err(|err| failed(backend, err.to_string()))?;
    if result.timed_out {
        return Err(failed(
            backend,
            format!("probe timed out after {} ms", timeout.as_millis()),
        ));
    }
    if confinement.runner_outcome() == RunnerOutcome::NeverStarted {
        let line = result.stderr.text.lines().next().unwrap_or("").trim();
        return Err(failed(
            backend,
            if line.is_empty() {
                format!(
                    "the runner did not start the probe (it ended with {})",
                    ended(&result)
                )
            } else {
                line.to_owned()
            },
        ));
    }
    if leaked {
        return Err(failed(backend, "the probe could write outside its policy"));
    }
    if result.exit_code != Some(0) {
        let line = result.stderr.text.lines().next().unwrap_or("").trim();
        return Err(failed(
            backend,
            if line.is_empty() {
                format!("probe exited with {:?}", result.exit_code)
            } else {
                line.to_owned()
            },
        ));
    }
    Ok(())
}

/// How a probe run ended, for a message: its exit code or its signal.
fn ended(result: &dsh_bash::BashRunResult) -> String {
    match (&result.signal, result.exit_code) {
        (Some(signal), _) => signal.clone(),
        (None, Some(code)) => format!("exit code {code}"),
        (None, None) => "no exit status".to_owned(),
    }
}
