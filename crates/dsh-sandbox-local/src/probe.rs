//! Functional probes: a backend is usable only if it really confines a
//! short-lived child (a write outside the policy must fail while the child
//! still exits 0), within the probe timeout.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use dsh_sandbox::{Confinement, PreExec, SandboxMode, SandboxPolicy};

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

/// The read-only policy the probes enforce.
pub(crate) fn probe_policy(root: &Path) -> SandboxPolicy {
    SandboxPolicy {
        mode: SandboxMode::ReadOnly,
        workspace_root: root.to_owned(),
    }
}

async fn run(
    argv: Vec<OsString>,
    pre_exec: Option<PreExec>,
    timeout: Duration,
) -> Result<(), String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("empty probe command".into());
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(restrict) = pre_exec {
        crate::sys::restrict_before_exec(&mut command, restrict);
    }
    let child = command
        .spawn()
        .map_err(|err| format!("cannot run {}: {err}", Path::new(program).display()))?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => Err(format!("probe timed out after {} ms", timeout.as_millis())),
        Ok(Err(err)) => Err(format!("probe failed: {err}")),
        Ok(Ok(output)) if output.status.success() => Ok(()),
        Ok(Ok(output)) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let line = stderr.lines().next().unwrap_or("").trim().to_owned();
            Err(if line.is_empty() {
                format!("probe exited with {}", output.status)
            } else {
                line
            })
        }
    }
}

/// Runs `confinement` of the probe command; Ok if it confined for real.
pub(crate) async fn check(
    build: impl FnOnce(&[OsString], &SandboxPolicy) -> Result<Confinement, String>,
    timeout: Duration,
) -> Result<Confinement, String> {
    let scratch = tempfile::Builder::new()
        .prefix("dsh-sandbox-probe-")
        .tempdir()
        .map_err(|err| format!("cannot create the probe scratch dir: {err}"))?;
    let target = scratch.path().join("must-not-exist");
    let policy = probe_policy(scratch.path());
    let confinement = build(&probe_argv(&target), &policy)?;
    let outcome = run(
        confinement.argv.clone(),
        confinement.pre_exec.clone(),
        timeout,
    )
    .await;
    let leaked = target.exists();
    outcome?;
    if leaked {
        return Err("the probe could write outside its policy".into());
    }
    Ok(confinement)
}
