//! EXE-41..47: shutdown kills and awaits every task and foreground run.

use std::time::Duration;

use dsh_bash::{BashError, BashExecutor, TaskStatus};

use super::fixture::{executor, gone, pids, spec};

/// The pid a background shell prints first (it is running once printed).
async fn pid_of(executor: &dsh_bash_local::LocalBashExecutor, id: &dsh_bash::BashTaskId) -> i32 {
    loop {
        let read = executor.read_output(id, None).unwrap();
        if let Some(pid) = pids(&read.delta).first() {
            return *pid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_tasks_and_foreground_runs_then_empties_the_registry() {
    let executor = executor();
    let finished = executor.start(spec(&executor, "exit 3")).await.unwrap();
    finished.settled().await;
    let plain = executor
        .start(spec(&executor, "echo $$; sleep 30"))
        .await
        .unwrap();
    let stubborn = executor
        .start(spec(&executor, "trap '' TERM; echo $$; sleep 30 & wait"))
        .await
        .unwrap();
    let foreground = tokio::spawn({
        let executor = executor.clone();
        async move { executor.run(spec(&executor, "sleep 30")).await }
    });
    let plain_pid = pid_of(&executor, &plain.id).await;
    let stubborn_pid = pid_of(&executor, &stubborn.id).await;

    executor.shutdown().await;

    assert!(!super::fixture::alive(plain_pid));
    assert!(!super::fixture::alive(stubborn_pid));
    assert!(gone(plain_pid).await && gone(stubborn_pid).await);
    let stubborn = stubborn.settled().await;
    assert_eq!(stubborn.status, TaskStatus::Killed);
    assert_eq!(stubborn.signal.as_deref(), Some("SIGKILL"));
    assert_eq!(plain.settled().await.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(
        finished.refresh().exit_code,
        Some(3),
        "a finished task is left alone"
    );
    let run = foreground.await.unwrap().unwrap();
    assert!(run.aborted);
    assert!(executor.list().is_empty());
    assert!(matches!(
        executor.run(spec(&executor, "true")).await,
        Err(BashError::ShutDown)
    ));
}
