//! SBX-27..34: background facts, stamped before anybody sees completion.

use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use dsh_bash::{BashExecRequest, BashExecutor, SandboxMode, TaskStatus};

use super::fixture::{backends, executor, runner_executor};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_are_stamped_before_listeners_and_per_task() {
    for backend in backends().await {
        let root = tempfile::tempdir().unwrap();
        let executor = executor(backend.clone(), SandboxMode::ReadOnly, root.path());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let _listener = executor.on_task_done(Arc::new(move |task| {
            record
                .lock()
                .unwrap()
                .push((task.id.to_string(), task.sandbox.clone()));
        }));
        let denied = executor
            .start(
                executor
                    .resolve(BashExecRequest::new("echo x > f"))
                    .unwrap(),
            )
            .await
            .unwrap();
        let mut wide = BashExecRequest::new("echo x > g");
        wide.sandbox_mode = Some(SandboxMode::WorkspaceWrite);
        let allowed = executor
            .start(executor.resolve(wide).unwrap())
            .await
            .unwrap();
        let denied = denied.settled().await;
        let allowed = allowed.settled().await;
        let facts = denied
            .sandbox
            .clone()
            .expect("stamped before waiters see it");
        assert!(facts.denied, "{backend:?}");
        assert_eq!(facts.mode, SandboxMode::ReadOnly);
        let wide_facts = allowed.sandbox.clone().unwrap();
        assert!(!wide_facts.denied);
        assert_eq!(wide_facts.mode, SandboxMode::WorkspaceWrite);
        // A later task settling proves the listener ran for both.
        executor
            .start(executor.resolve(BashExecRequest::new("true")).unwrap())
            .await
            .unwrap()
            .settled()
            .await;
        let seen = seen.lock().unwrap().clone();
        let denied_seen = seen
            .iter()
            .find(|(id, _)| *id == denied.id.to_string())
            .unwrap();
        assert!(
            denied_seen.1.as_ref().unwrap().denied,
            "the listener saw unstamped facts"
        );
        executor.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_runner_failure_settles_runner_failed() {
    let dir = tempfile::tempdir().unwrap();
    let runner = dir.path().join("runner");
    std::fs::write(
        &runner,
        "#!/bin/sh\necho 'runner: fatal: no namespaces' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
    let executor = runner_executor(&runner, dir.path());
    let task = executor
        .start(executor.resolve(BashExecRequest::new("true")).unwrap())
        .await
        .unwrap();
    let facts = task.settled().await.sandbox.unwrap();
    assert!(facts.runner_failed);
    assert!(!facts.denied);
    assert_eq!(facts.mode, SandboxMode::ReadOnly);
    assert!(facts.enforcement.is_some());
}

/// A task that never ran for a reason of its own (a missing working
/// directory) settles `failed_to_start` with the reason, and is no runner
/// failure: the provider keeps what it decided about this host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_workdir_is_missing_is_no_runner_failure() {
    use dsh_bash_sandbox::SandboxConfig;

    use super::fixture::{local, Recorder};

    let root = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder {
        runner: Some(dsh_sandbox::RunnerOutcome::Started),
        ..Recorder::default()
    });
    let executor = dsh_bash_sandbox::sandboxed(
        SandboxConfig {
            local: local(),
            mode: SandboxMode::ReadOnly,
            workspace_root: Some(root.path().to_path_buf()),
            ..SandboxConfig::default()
        },
        Arc::clone(&recorder) as Arc<dyn dsh_sandbox::SandboxProvider>,
    )
    .unwrap();
    let gone = root.path().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let mut request = BashExecRequest::new("true");
    request.workdir = Some(gone.clone());
    let spec = executor.resolve(request).unwrap();
    std::fs::remove_dir(&gone).unwrap();
    let task = executor.start(spec).await.unwrap().settled().await;
    assert_eq!(task.status, TaskStatus::FailedToStart);
    let facts = task.sandbox.unwrap();
    assert!(!facts.runner_failed, "{facts:?}");
    assert_eq!(
        recorder
            .runner_failures
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    let read = executor.read_output(&task.id, None).unwrap();
    assert!(read.stderr.contains("does not exist"), "{}", read.stderr);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_task_is_never_a_denial_and_shutdown_kills_wrapped_tasks() {
    for backend in backends().await {
        let root = tempfile::tempdir().unwrap();
        let executor = executor(backend.clone(), SandboxMode::ReadOnly, root.path());
        let task = executor
            .start(
                executor
                    .resolve(BashExecRequest::new("echo x > f; sleep 30"))
                    .unwrap(),
            )
            .await
            .unwrap();
        let other = executor
            .start(executor.resolve(BashExecRequest::new("sleep 30")).unwrap())
            .await
            .unwrap();
        assert!(executor.kill(&task.id).await.unwrap());
        let killed = task.settled().await;
        assert_eq!(killed.status, TaskStatus::Killed);
        assert!(!killed.sandbox.unwrap().denied);
        executor.shutdown().await;
        assert_eq!(
            other.settled().await.status,
            TaskStatus::Killed,
            "{backend:?}"
        );
    }
}
