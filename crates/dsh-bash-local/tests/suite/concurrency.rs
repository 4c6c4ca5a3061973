//! 200 concurrent background tasks: started, read, killed and awaited.

use std::time::{Duration, Instant};

use dsh_bash::{BashExecutor, TaskStatus};

use super::fixture::{executor, gone, pids, spec};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_tasks_started_read_killed_and_awaited() {
    let executor = executor();
    let fds_before = open_fds();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..200 {
        tasks.push(
            executor
                .start(spec(&executor, "echo $$; exec sleep 60"))
                .await
                .unwrap(),
        );
    }
    let start_time = started.elapsed();
    // Every task prints its pid once it runs.
    let mut shell_pids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for task in &tasks {
        let pid = loop {
            let read = executor.read_output(&task.id, None).unwrap();
            if let Some(pid) = pids(&read.delta).first() {
                break *pid;
            }
            assert!(
                Instant::now() < deadline,
                "{} never printed its pid",
                task.id
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        shell_pids.push(pid);
    }
    assert_eq!(executor.list().len(), 200);
    let kills = tasks.iter().map(|task| executor.kill(&task.id));
    let mut killed = 0;
    for kill in kills {
        killed += usize::from(kill.await.unwrap());
    }
    assert_eq!(killed, 200);
    for task in &tasks {
        assert_eq!(task.settled().await.status, TaskStatus::Killed);
    }
    for pid in shell_pids {
        assert!(gone(pid).await, "{pid} survived its kill");
    }
    executor.shutdown().await;
    let fds_after = open_fds();
    println!(
        "200 tasks: started in {start_time:?}, all killed and settled after {:?}; fds before {fds_before}, after {fds_after}",
        started.elapsed()
    );
    // Other tests run in this process at the same time and hold fds of their
    // own; 200 leaked tasks would hold at least 600.
    assert!(
        fds_after < fds_before + 100,
        "fds leaked: {fds_before} -> {fds_after}"
    );
}
