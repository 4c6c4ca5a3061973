//! SBX-19..26, SBX-35..38: denial and runner failure with real backends.

use std::os::unix::fs::PermissionsExt;

use dsh_bash::{BashError, SandboxMode};

use super::fixture::{backends, default_enforcement, executor, run, runner_executor};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_write_is_denied_and_the_file_never_appears() {
    for backend in backends().await {
        let root = tempfile::tempdir().unwrap();
        let executor = executor(backend.clone(), SandboxMode::ReadOnly, root.path());
        let result = run(
            &executor,
            "echo x > created; echo ok > /dev/null; ls / > /dev/null",
            None,
        )
        .await;
        assert!(!root.path().join("created").exists(), "{backend:?}");
        // The last command succeeded: exit 0 is never a denial.
        assert_eq!(result.exit_code, Some(0));
        assert!(!result.sandbox.as_ref().unwrap().denied);
        let result = run(&executor, "echo x > created", None).await;
        let facts = result.sandbox.unwrap();
        assert_eq!(result.exit_code, Some(1));
        assert!(facts.denied, "{backend:?}: {}", result.stderr.text);
        assert_eq!(facts.mode, SandboxMode::ReadOnly);
        assert_eq!(facts.enforcement, Some(default_enforcement(&backend)));
        assert!(!root.path().join("created").exists());

        // The same command succeeds when retried under workspace-write.
        let retried = run(
            &executor,
            "echo x > created",
            Some(SandboxMode::WorkspaceWrite),
        )
        .await;
        assert_eq!(
            retried.exit_code,
            Some(0),
            "{backend:?}: {}",
            retried.stderr.text
        );
        assert!(root.path().join("created").exists());
        assert_eq!(retried.sandbox.unwrap().mode, SandboxMode::WorkspaceWrite);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_write_allows_the_root_and_denies_a_sibling() {
    for backend in backends().await {
        // Outside /tmp: bwrap gives workspace-write a private /tmp.
        let parent = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = parent.path().join("root");
        let sibling = parent.path().join("sibling");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&sibling).unwrap();
        let executor = executor(backend.clone(), SandboxMode::WorkspaceWrite, &root);
        let result = run(
            &executor,
            &format!("echo in > inside && echo out > {}/x", sibling.display()),
            None,
        )
        .await;
        assert!(root.join("inside").exists(), "{backend:?}");
        assert!(!sibling.join("x").exists(), "{backend:?}");
        assert!(
            result.sandbox.unwrap().denied,
            "{backend:?}: {}",
            result.stderr.text
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posix_permission_failure_unrelated_to_the_backend_phrase_is_not_a_denial() {
    // SBX-22: a 0555 directory under read-only is denied (by the sandbox
    // and by the mode bits), and the other backend's phrase never counts.
    for backend in backends().await {
        let root = tempfile::tempdir().unwrap();
        let locked = root.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
        let executor = executor(backend.clone(), SandboxMode::ReadOnly, root.path());
        let result = run(&executor, "echo x > locked/f", None).await;
        let facts = result.sandbox.unwrap();
        assert!(facts.denied, "{backend:?}: {}", result.stderr.text);
        assert_eq!(facts.enforcement, Some(default_enforcement(&backend)));
        let other_phrase = match facts
            .backend
            .as_ref()
            .map(dsh_sandbox::SandboxBackend::as_str)
        {
            Some("bwrap") => "Permission denied",
            _ => "Read-only file system",
        };
        let fake = run(
            &executor,
            &format!("echo '{other_phrase}' >&2; exit 1"),
            None,
        )
        .await;
        assert!(
            !fake.sandbox.unwrap().denied,
            "{backend:?} counted another backend's phrase"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_death_is_never_a_denial() {
    for backend in backends().await {
        let root = tempfile::tempdir().unwrap();
        let executor = executor(backend.clone(), SandboxMode::ReadOnly, root.path());
        let result = run(&executor, "echo x > f; kill -TERM $$", None).await;
        // bwrap reports its child's signal death as exit 128+n.
        let died = result.signal.as_deref() == Some("SIGTERM") || result.exit_code == Some(143);
        assert!(died, "{backend:?}: {result:?}");
        assert!(!result.sandbox.unwrap().denied, "{backend:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_failure_is_checked_first_and_carries_the_first_stderr_line() {
    let dir = tempfile::tempdir().unwrap();
    let runner = dir.path().join("runner");
    std::fs::write(&runner, "#!/bin/sh\necho 'runner: fatal: Permission denied while mounting' >&2\necho second line >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
    let executor = runner_executor(&runner, dir.path());
    let dsh_bash::BashExecRequest { .. } = dsh_bash::BashExecRequest::new("");
    let err = dsh_bash::BashExecutor::run(
        &executor,
        dsh_bash::BashExecutor::resolve(&executor, dsh_bash::BashExecRequest::new("true")).unwrap(),
    )
    .await
    .unwrap_err();
    let BashError::SandboxUnavailable(refused) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(
        refused.detail(),
        Some("runner: fatal: Permission denied while mounting")
    );
    assert!(err.to_string().contains("runner said: runner: fatal"));

    // A runner that cannot be executed at all is a refusal too.
    let missing = runner_executor(&dir.path().join("absent"), dir.path());
    let err = dsh_bash::BashExecutor::run(
        &missing,
        dsh_bash::BashExecutor::resolve(&missing, dsh_bash::BashExecRequest::new("true")).unwrap(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "SANDBOX_UNAVAILABLE", "{err}");
}

/// A command cannot make its own run look like a sandbox failure: text
/// that mimics a runner error, with a non-zero exit, is the command's own
/// result (its exit code and its stdout), under every real backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_runner_error_is_the_commands_own_result() {
    for backend in backends().await {
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let root = tempfile::tempdir().unwrap();
            let executor = executor(backend.clone(), mode, root.path());
            let result = run(
                &executor,
                "echo kept; echo 'bwrap: Creating new namespace failed: Operation not permitted' >&2; echo 'landlock: fatal' >&2; exit 1",
                None,
            )
            .await;
            assert_eq!(result.exit_code, Some(1), "{backend:?}/{mode}: {result:?}");
            assert_eq!(result.stdout.text, "kept\n", "{backend:?}/{mode}");
            let facts = result.sandbox.unwrap();
            assert!(!facts.runner_failed, "{backend:?}/{mode}");
            assert!(!facts.denied, "{backend:?}/{mode}");
        }
    }
}

/// The runner's structural report alone decides: "never started" is a
/// refusal even with a clean exit, "started" is the command's result even
/// with a runner-looking stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_runner_report_decides_runner_failure() {
    use std::sync::Arc;

    use dsh_bash::BashExecutor;
    use dsh_bash_local::LocalConfig;
    use dsh_bash_sandbox::SandboxConfig;
    use dsh_sandbox::RunnerOutcome;

    use super::fixture::{local, Recorder};

    let over = |outcome| {
        let recorder = Arc::new(Recorder {
            runner: Some(outcome),
            ..Recorder::default()
        });
        dsh_bash_sandbox::sandboxed(
            SandboxConfig {
                local: LocalConfig {
                    cwd: Some("/tmp".into()),
                    ..local()
                },
                mode: SandboxMode::ReadOnly,
                workspace_root: None,
                ..SandboxConfig::default()
            },
            recorder as Arc<dyn dsh_sandbox::SandboxProvider>,
        )
        .unwrap()
    };
    let started = over(RunnerOutcome::Started);
    let result = run(&started, "echo 'runner: fatal' >&2; exit 1", None).await;
    assert_eq!(result.exit_code, Some(1));
    assert!(!result.sandbox.unwrap().runner_failed);

    let never = over(RunnerOutcome::NeverStarted);
    let err = never
        .run(
            never
                .resolve(dsh_bash::BashExecRequest::new("echo 'why it failed' >&2"))
                .unwrap(),
        )
        .await
        .unwrap_err();
    let BashError::SandboxUnavailable(refused) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(refused.detail(), Some("why it failed"));
    let task = never
        .start(
            never
                .resolve(dsh_bash::BashExecRequest::new("true"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(task.settled().await.sandbox.unwrap().runner_failed);
}
