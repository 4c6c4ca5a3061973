//! BG-18..24: listeners run exactly once, are contained, can be removed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dsh_bash::{BashExecutor, TaskStatus};

use super::fixture::{executor, spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_for_completed_and_killed_and_contained() {
    let executor = executor();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let _panicky = executor.on_task_done(Arc::new(|_| panic!("listener failure")));
    let _recorder = executor.on_task_done(Arc::new(move |task| {
        record
            .lock()
            .unwrap()
            .push((task.id.to_string(), task.status));
    }));
    let done = executor.start(spec(&executor, "true")).await.unwrap();
    let killed = executor.start(spec(&executor, "sleep 30")).await.unwrap();
    done.settled().await;
    assert!(executor.kill(&killed.id).await.unwrap());
    // Listeners run after a task's settle is published (a waiter may wake
    // first): wait, bounded, until both were heard, then for a later task
    // too, so that a second call would have had its chance.
    let heard = |wanted: &[(&str, TaskStatus)]| {
        let seen = seen.lock().unwrap();
        wanted
            .iter()
            .all(|(id, status)| seen.contains(&((*id).to_owned(), *status)))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let both = [
        ("bash-1", TaskStatus::Completed),
        ("bash-2", TaskStatus::Killed),
    ];
    while !heard(&both) {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    executor
        .start(spec(&executor, "true"))
        .await
        .unwrap()
        .settled()
        .await;
    while !heard(&[("bash-3", TaskStatus::Completed)]) {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|(id, _)| id == "bash-1").count(), 1);
    assert_eq!(seen.iter().filter(|(id, _)| id == "bash-2").count(), 1);
    // The panicking listener did not affect the task either.
    assert_eq!(
        executor.get(&done.id).unwrap().status,
        TaskStatus::Completed
    );
}

/// A listener that counts its calls, and the count.
fn counter() -> (Arc<AtomicUsize>, dsh_bash::TaskListener) {
    let calls = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&calls);
    let listener: dsh_bash::TaskListener = Arc::new(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    });
    (calls, listener)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistered_listeners_are_not_called() {
    let executor = executor();
    let (calls, counting) = counter();
    let handle = executor.on_task_done(counting);
    handle.unregister();
    let task = executor.start(spec(&executor, "true")).await.unwrap();
    task.settled().await;
    executor
        .start(spec(&executor, "true"))
        .await
        .unwrap()
        .settled()
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_after_shutdown() {
    let executor = executor();
    let (calls, counting) = counter();
    let _listener = executor.on_task_done(counting);
    let task = executor.start(spec(&executor, "sleep 30")).await.unwrap();
    executor.shutdown().await;
    assert_eq!(task.settled().await.status, TaskStatus::Killed);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(executor.start(spec(&executor, "true")).await.is_err());
}
