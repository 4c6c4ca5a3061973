//! SBX-19..26, SBX-35..38: denial and runner failure with real backends.

use std::os::unix::fs::PermissionsExt;

use dsh_bash::{BashError, SandboxEnforcement, SandboxMode};

use super::fixture::{backends, executor, run, runner_executor};

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
        assert_eq!(facts.enforcement, Some(SandboxEnforcement::Full));
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
        assert_eq!(facts.enforcement, Some(SandboxEnforcement::Full));
        let other_phrase = match facts.backend.as_deref() {
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
