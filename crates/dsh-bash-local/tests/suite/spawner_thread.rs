//! SPEC §9.7 and the PDEATHSIG pitfall: a command must not die because the
//! runtime thread that asked for it retired.

use std::time::{Duration, Instant};

use dsh_bash::{BashExecutor, TaskStatus};

use super::fixture::{executor, spec};

#[test]
fn a_retired_blocking_thread_does_not_kill_its_command() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_keep_alive(Duration::from_millis(1))
        .enable_all()
        .build()
        .unwrap();
    let executor = executor();
    let handle = runtime.handle().clone();
    let (task, tid) = runtime.block_on({
        let executor = executor.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let task = handle.block_on(executor.start(spec(&executor, "sleep 30")));
                (task.unwrap(), tid)
            })
            .await
            .unwrap()
        }
    });
    // Wait until the blocking thread that started the task has exited.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::path::Path::new(&format!("/proc/self/task/{tid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "the blocking thread never retired"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    runtime.block_on(async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(executor.get(&task.id).unwrap().status, TaskStatus::Running);
        executor.shutdown().await;
    });
}
