//! BG-01..26, OUT-16..25: background tasks and incremental reads.

use std::time::{Duration, Instant};

use dsh_bash::{BashError, BashExecRequest, BashExecutor, BashTaskId, OwnerToken, TaskStatus};
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use tokio_util::sync::CancellationToken;

use super::fixture::{config, executor, gone, pids, spec};

/// Reads until the accumulated delta satisfies `done` (fail-safe 10 s).
async fn read_until(
    executor: &LocalBashExecutor,
    id: &BashTaskId,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    while !done(&seen) {
        assert!(Instant::now() < deadline, "gave up waiting; saw {seen:?}");
        seen.push_str(&executor.read_output(id, None).unwrap().delta);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_returns_at_once_and_completes() {
    let executor = executor();
    let started = Instant::now();
    let task = executor
        .start(spec(&executor, "sleep 0.3; echo done"))
        .await
        .unwrap();
    println!("start returned after {:?}", started.elapsed());
    assert_eq!(task.status, TaskStatus::Running);
    assert_eq!(task.id.as_str(), "bash-1");
    assert_eq!(executor.get(&task.id).unwrap().status, TaskStatus::Running);
    assert_eq!(executor.list().len(), 1);
    let settled = task.settled().await;
    assert_eq!(settled.status, TaskStatus::Completed);
    assert_eq!(settled.exit_code, Some(0));
    let second = executor.start(spec(&executor, "true")).await.unwrap();
    assert_eq!(second.id.as_str(), "bash-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_never_repeat() {
    let executor = executor();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let command = format!(
        "echo first; while [ ! -e {} ]; do sleep 0.01; done; echo second",
        go.display()
    );
    let task = executor.start(spec(&executor, &command)).await.unwrap();
    let first = read_until(&executor, &task.id, |s| s.contains("first")).await;
    assert_eq!(first, "first\n");
    std::fs::write(&go, "").unwrap();
    task.settled().await;
    let read = executor.read_output(&task.id, None).unwrap();
    assert_eq!(read.delta, "second\n");
    assert!(!read.lossy);
    assert_eq!(read.task.status, TaskStatus::Completed);
    assert_eq!(executor.read_output(&task.id, None).unwrap().delta, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_section_in_reads() {
    let executor = executor();
    let task = executor
        .start(spec(&executor, "printf out; echo err >&2"))
        .await
        .unwrap();
    task.settled().await;
    assert_eq!(
        executor.read_output(&task.id, None).unwrap().delta,
        "out\n[stderr]\nerr\n"
    );
    let only_err = executor
        .start(spec(&executor, "echo err >&2"))
        .await
        .unwrap();
    only_err.settled().await;
    assert_eq!(
        executor.read_output(&only_err.id, None).unwrap().delta,
        "[stderr]\nerr\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slid_offset_makes_the_read_lossy_with_the_spill_path() {
    let executor = LocalBashExecutor::new(LocalConfig {
        max_output_bytes: 100,
        ..config()
    })
    .unwrap();
    let task = executor
        .start(spec(&executor, "echo head; seq 1 1000; echo tail >&2"))
        .await
        .unwrap();
    task.settled().await;
    let read = executor.read_output(&task.id, None).unwrap();
    assert!(read.lossy);
    assert!(read.delta.contains("1000\n"));
    assert!(!read.delta.contains("head"));
    let path = read.stdout_spill_path.expect("stdout spilled");
    assert!(std::fs::read_to_string(path)
        .unwrap()
        .starts_with("head\n1\n"));
    assert_eq!(read.stderr_spill_path, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spill_path_shows_while_the_stream_is_still_open() {
    let executor = LocalBashExecutor::new(LocalConfig {
        max_output_bytes: 100,
        ..config()
    })
    .unwrap();
    let task = executor
        .start(spec(&executor, "seq 1 1000; echo marker; sleep 30"))
        .await
        .unwrap();
    read_until(&executor, &task.id, |s| s.contains("marker")).await;
    let read = executor.read_output(&task.id, None).unwrap();
    assert_eq!(read.task.status, TaskStatus::Running);
    let path = read.stdout_spill_path.expect("path while running");
    assert!(path.exists());
    assert!(executor.kill(&task.id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_once_then_false() {
    let executor = executor();
    let task = executor
        .start(spec(&executor, "echo $$; sleep 30"))
        .await
        .unwrap();
    let pid = pids(&read_until(&executor, &task.id, |s| s.ends_with('\n')).await)[0];
    assert!(executor.kill(&task.id).await.unwrap());
    let settled = executor.get(&task.id).unwrap();
    assert_eq!(settled.status, TaskStatus::Killed);
    assert_eq!(settled.signal.as_deref(), Some("SIGTERM"));
    assert!(!executor.kill(&task.id).await.unwrap());
    assert!(gone(pid).await);
    let done = executor.start(spec(&executor, "true")).await.unwrap();
    done.settled().await;
    assert!(!executor.kill(&done.id).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_are_errors() {
    let executor = executor();
    let id = BashTaskId::new("bash-99");
    let err = executor.read_output(&id, None).unwrap_err();
    assert!(matches!(err, BashError::UnknownTask { .. }));
    assert_eq!(err.to_string(), "unknown bash task \"bash-99\"");
    assert_eq!(
        executor.kill(&id).await.unwrap_err().to_string(),
        "unknown bash task \"bash-99\""
    );
    assert!(executor.get(&id).is_none());
    assert_eq!(executor.owner_of(&id), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_timeout_but_cancellation_kills() {
    let executor = LocalBashExecutor::new(LocalConfig {
        default_timeout: std::time::Duration::from_millis(100),
        ..config()
    })
    .unwrap();
    let token = CancellationToken::new();
    let mut request = BashExecRequest::new("sleep 0.6; echo outlived");
    request.cancel = Some(token.clone());
    let task = executor
        .start(executor.resolve(request).unwrap())
        .await
        .unwrap();
    let settled = task.settled().await;
    assert_eq!(
        settled.status,
        TaskStatus::Completed,
        "a background task has no timeout"
    );
    assert_eq!(
        executor.read_output(&task.id, None).unwrap().delta,
        "outlived\n"
    );

    let mut request = BashExecRequest::new("sleep 30");
    request.cancel = Some(token.clone());
    let task = executor
        .start(executor.resolve(request).unwrap())
        .await
        .unwrap();
    token.cancel();
    let settled = task.settled().await;
    assert_eq!(settled.status, TaskStatus::Killed);
    assert_eq!(settled.signal.as_deref(), Some("SIGTERM"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_failure_settles_failed_to_start_with_the_reason() {
    let executor = executor();
    let mut request = BashExecRequest::new("true");
    request.workdir = Some("/no/such/dir".into());
    let task = executor
        .start(executor.resolve(request).unwrap())
        .await
        .unwrap();
    let settled = task.settled().await;
    assert_eq!(settled.status, TaskStatus::FailedToStart);
    let read = executor.read_output(&task.id, None).unwrap();
    assert!(read.delta.contains("spawn failed"), "{}", read.delta);
    assert!(
        read.delta.contains("/no/such/dir does not exist"),
        "{}",
        read.delta
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_nobody_sent_is_completed_with_that_signal() {
    let executor = executor();
    let task = executor
        .start(spec(&executor, "kill -SEGV $$"))
        .await
        .unwrap();
    let settled = task.settled().await;
    assert_eq!(settled.status, TaskStatus::Completed);
    assert_eq!(settled.signal.as_deref(), Some("SIGSEGV"));
    assert_eq!(settled.exit_code, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_is_stored_verbatim() {
    let executor = executor();
    let mut request = BashExecRequest::new("true");
    request.owner = Some(OwnerToken::new("session-a"));
    let owned = executor
        .start(executor.resolve(request).unwrap())
        .await
        .unwrap();
    let unowned = executor.start(spec(&executor, "true")).await.unwrap();
    assert_eq!(
        executor.owner_of(&owned.id),
        Some(OwnerToken::new("session-a"))
    );
    assert_eq!(executor.owner_of(&unowned.id), None);
    owned.settled().await;
    assert_eq!(
        executor.owner_of(&owned.id),
        Some(OwnerToken::new("session-a"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_tasks_have_bounded_retention() {
    let executor = LocalBashExecutor::new(LocalConfig {
        retain_finished_tasks: 3,
        ..config()
    })
    .unwrap();
    let mut ids = Vec::new();
    for _ in 0..5 {
        let task = executor.start(spec(&executor, "true")).await.unwrap();
        task.settled().await;
        ids.push(task.id);
    }
    // Settling publishes before the registry is trimmed; wait for the trim.
    let deadline = Instant::now() + Duration::from_secs(10);
    while executor.list().len() > 3 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(executor.get(&ids[0]).is_none());
    assert!(executor.get(&ids[4]).is_some());
    assert!(matches!(
        executor.read_output(&ids[1], None),
        Err(BashError::UnknownTask { .. })
    ));
}

/// Retention is per owner: another owner's many finished tasks never make
/// this owner's unread one unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owners_finished_tasks_never_evict_anothers() {
    let executor = LocalBashExecutor::new(LocalConfig {
        retain_finished_tasks: 3,
        ..config()
    })
    .unwrap();
    let owned = |command: &str, owner: &str| {
        let mut request = BashExecRequest::new(command);
        request.owner = Some(OwnerToken::new(owner));
        executor.resolve(request).unwrap()
    };
    let unread = executor.start(owned("echo mine", "a")).await.unwrap();
    unread.settled().await;
    let mut theirs = Vec::new();
    for _ in 0..8 {
        let task = executor.start(owned("true", "b")).await.unwrap();
        task.settled().await;
        theirs.push(task.id);
    }
    // Settling publishes before the registry is trimmed; wait for b's trim.
    let deadline = Instant::now() + Duration::from_secs(10);
    while executor.list().len() > 4 {
        assert!(Instant::now() < deadline, "b's tasks were never trimmed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let read = executor.read_output(&unread.id, None).unwrap();
    assert_eq!(read.delta, "mine\n");
    assert!(executor.get(&theirs[0]).is_none());
    assert!(executor.get(&theirs[7]).is_some());
}
