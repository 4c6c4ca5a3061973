//! SBX-01..17 with a recording provider: what the provider is asked, when.

use std::ffi::OsString;
use std::sync::Arc;

use dsh_bash::{BashError, BashExecRequest, BashExecutor, SandboxEnforcement, SandboxMode};
use dsh_bash_local::LocalConfig;
use dsh_bash_sandbox::{SandboxBashExecutor, SandboxConfig};

use super::fixture::{local, run, Recorder};

fn over(recorder: &Arc<Recorder>, mode: SandboxMode) -> SandboxBashExecutor {
    dsh_bash_sandbox::sandboxed(
        SandboxConfig {
            local: LocalConfig {
                cwd: Some("/var/tmp".into()),
                ..local()
            },
            mode,
            workspace_root: None,
            ..SandboxConfig::default()
        },
        Arc::clone(recorder) as Arc<dyn dsh_sandbox::SandboxProvider>,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_stamps_the_mode_and_the_default_is_reported() {
    let recorder = Arc::new(Recorder::default());
    let executor = over(&recorder, SandboxMode::ReadOnly);
    assert_eq!(executor.sandbox_mode(), Some(SandboxMode::ReadOnly));
    let spec = executor.resolve(BashExecRequest::new("true")).unwrap();
    assert_eq!(spec.sandbox_mode, Some(SandboxMode::ReadOnly));
    let mut request = BashExecRequest::new("true");
    request.sandbox_mode = Some(SandboxMode::WorkspaceWrite);
    assert_eq!(
        executor.resolve(request).unwrap().sandbox_mode,
        Some(SandboxMode::WorkspaceWrite)
    );
    // SBX-05: the root defaults to the configured cwd, absolute.
    assert_eq!(
        executor.workspace_root(),
        Some(std::path::Path::new("/var/tmp"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_gets_exactly_bash_c_and_the_policy_on_every_run_and_start() {
    let recorder = Arc::new(Recorder::default());
    let executor = over(&recorder, SandboxMode::ReadOnly);
    let result = run(&executor, "echo 'a b' \"c'd\"", None).await;
    assert_eq!(result.stdout.text, "a b c'd\n");
    let task = executor
        .start(executor.resolve(BashExecRequest::new("true")).unwrap())
        .await
        .unwrap();
    task.settled().await;
    run(&executor, "true", Some(SandboxMode::WorkspaceWrite)).await;
    let calls = recorder.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3);
    assert_eq!(
        calls[0].0,
        ["bash", "-c", "--", "echo 'a b' \"c'd\""].map(OsString::from)
    );
    assert_eq!(calls[0].1.mode, SandboxMode::ReadOnly);
    assert_eq!(
        calls[0].1.workspace.path(),
        std::path::Path::new("/var/tmp")
    );
    assert_eq!(calls[2].1.mode, SandboxMode::WorkspaceWrite);
    let facts = result.sandbox.unwrap();
    assert_eq!(facts.mode, SandboxMode::ReadOnly);
    assert_eq!(
        facts
            .backend
            .as_ref()
            .map(dsh_sandbox::SandboxBackend::as_str),
        Some("recorder")
    );
    assert_eq!(facts.enforcement, Some(SandboxEnforcement::Full));
    assert!(!facts.denied && !facts.runner_failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn danger_full_access_never_asks_the_provider() {
    let recorder = Arc::new(Recorder::default());
    let executor = over(&recorder, SandboxMode::DangerFullAccess);
    let result = run(&executor, "exit 1", None).await;
    let facts = result.sandbox.unwrap();
    assert_eq!(facts.mode, SandboxMode::DangerFullAccess);
    assert!(!facts.denied);
    assert_eq!(facts.enforcement, None);
    assert_eq!(facts.backend, None);
    let task = executor
        .start(executor.resolve(BashExecRequest::new("true")).unwrap())
        .await
        .unwrap();
    // One verdict for runs and tasks: the task says what the run says.
    let task_facts = task
        .settled()
        .await
        .sandbox
        .expect("a task carries its facts");
    assert_eq!(task_facts.mode, SandboxMode::DangerFullAccess);
    assert_eq!((task_facts.backend, task_facts.enforcement), (None, None));
    assert!(!task_facts.denied && !task_facts.runner_failed);
    assert!(recorder.calls.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_enforcement_passes_through_and_refusal_runs_nothing() {
    let partial = Arc::new(Recorder {
        enforcement: Some(SandboxEnforcement::Partial),
        ..Recorder::default()
    });
    let result = run(&over(&partial, SandboxMode::ReadOnly), "true", None).await;
    assert_eq!(
        result.sandbox.unwrap().enforcement,
        Some(SandboxEnforcement::Partial)
    );

    let refusing = Arc::new(Recorder {
        refuse: true,
        ..Recorder::default()
    });
    let executor = over(&refusing, SandboxMode::ReadOnly);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let command = format!("touch {}", marker.display());
    let err = executor
        .run(
            executor
                .resolve(BashExecRequest::new(command.clone()))
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, BashError::SandboxUnavailable(_)));
    assert_eq!(err.code(), "SANDBOX_UNAVAILABLE");
    let err = executor
        .start(executor.resolve(BashExecRequest::new(command)).unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SANDBOX_UNAVAILABLE");
    assert!(!marker.exists());
}

/// A temp dir or spill parent inside the writable workspace would let a
/// command rename what the server removes there: `workspace-write` is
/// refused before anything runs, naming both paths; other modes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scratch_places_inside_the_workspace_are_refused() {
    let workspace = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(workspace.path()).unwrap();
    let spill = root.join("spill");
    std::fs::create_dir(&spill).unwrap();
    let config = |mode| SandboxConfig {
        local: LocalConfig {
            cwd: Some(root.clone()),
            spill_parent: Some(spill.clone()),
            ..local()
        },
        mode,
        workspace_root: Some(root.clone()),
        ..SandboxConfig::default()
    };
    let recorder = Arc::new(Recorder::default());
    let provider = || Arc::clone(&recorder) as Arc<dyn dsh_sandbox::SandboxProvider>;
    let err = dsh_bash_sandbox::sandboxed(config(SandboxMode::WorkspaceWrite), provider())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the spill parent {} lies inside the writable workspace {}",
            spill.display(),
            root.display()
        )),
        "{err}"
    );
    // Read-only by default: runs, but a call asking for workspace-write is
    // refused, and the provider is never asked.
    let executor = dsh_bash_sandbox::sandboxed(config(SandboxMode::ReadOnly), provider()).unwrap();
    let mut request = BashExecRequest::new("touch ran");
    request.sandbox_mode = Some(SandboxMode::WorkspaceWrite);
    let spec = executor.resolve(request).unwrap();
    let refused = executor.run(spec).await.unwrap_err();
    assert!(
        matches!(refused, BashError::SandboxUnavailable(_)),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("spill parent"), "{refused}");
    assert!(recorder.calls.lock().unwrap().is_empty());
    assert!(!root.join("ran").exists());
}
