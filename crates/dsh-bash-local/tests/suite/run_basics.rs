//! EXE-10..16, EXE-25, EXE-27: what a plain run returns and when it is an error.

use dsh_bash::{BashError, BashExecRequest, BashExecutor};
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use tokio_util::sync::CancellationToken;

use super::fixture::{config, executor, run, spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_is_exact() {
    let executor = executor();
    let result = run(&executor, "printf 'hello\\nworld\\n'").await;
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.signal, None);
    assert_eq!(result.stdout.text, "hello\nworld\n");
    assert!(!result.stdout.truncated);
    assert_eq!(result.stderr.text, "");
    assert!(!result.timed_out && !result.aborted);
    assert_eq!(result.timeout_ms, 120_000);
    assert_eq!(result.leftovers_stopped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_separate_and_exit_codes_are_results() {
    let executor = executor();
    let result = run(&executor, "echo out; echo err >&2; exit 42").await;
    assert_eq!(result.exit_code, Some(42));
    assert_eq!(result.stdout.text, "out\n");
    assert_eq!(result.stderr.text, "err\n");
    // A shell exiting 128+n reports an exit code, not a signal.
    let result = run(&executor, "exit 143").await;
    assert_eq!((result.exit_code, result.signal), (Some(143), None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_a_fresh_non_login_shell() {
    let executor = executor();
    run(&executor, "export CARRIED=1; cd /; shopt -s extglob").await;
    let result = run(&executor, "echo \"[${CARRIED:-}]\"; shopt -q login_shell && echo login; shopt -q extglob && echo ext; echo $-").await;
    let lines: Vec<&str> = result.stdout.text.lines().collect();
    assert_eq!(lines[0], "[]");
    assert!(!lines.contains(&"login") && !lines.contains(&"ext"));
    assert!(!lines[1].contains('i'), "interactive shell: {}", lines[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_session_and_process_group() {
    let executor = executor();
    let result = run(&executor, "cut -d' ' -f5,6 /proc/$$/stat; echo $$").await;
    let lines: Vec<&str> = result.stdout.text.lines().collect();
    let pid = lines[1];
    assert_eq!(
        lines[0],
        format!("{pid} {pid}"),
        "pgrp and session must be the shell's own pid"
    );
    let me = std::process::id().to_string();
    assert_ne!(pid, me);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_workdir_is_an_error_in_words() {
    let executor = executor();
    let mut request = BashExecRequest::new("true");
    request.workdir = Some("/definitely/not/here".into());
    let err = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, BashError::WorkdirMissing { .. }));
    assert_eq!(
        err.to_string(),
        "workdir /definitely/not/here does not exist"
    );
    let mut file = BashExecRequest::new("true");
    file.workdir = Some("/etc/hostname".into());
    let err = executor
        .run(executor.resolve(file).unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "workdir /etc/hostname is not a directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_shell_is_a_spawn_error() {
    let executor = LocalBashExecutor::new(LocalConfig {
        shell: "/nonexistent/bash".into(),
        ..config()
    })
    .unwrap();
    let err = executor.run(spec(&executor, "true")).await.unwrap_err();
    assert!(matches!(err, BashError::Spawn { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("/nonexistent/bash"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_before_spawn_runs_nothing() {
    let executor = executor();
    let marker = super::fixture::spill_parent().join("must-not-exist");
    let token = CancellationToken::new();
    token.cancel();
    let mut request = BashExecRequest::new(format!("touch {}", marker.display()));
    request.cancel = Some(token);
    let err = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, BashError::AbortedBeforeSpawn));
    assert_eq!(err.to_string(), "aborted before spawn");
    assert!(!marker.exists());
}
