//! The local executor's kill guarantees still hold for confined commands:
//! the runner is the root of the frozen tree, not an escape hatch.

use std::time::Duration;

use dsh_bash::{BashExecRequest, BashExecutor, SandboxMode};

use super::fixture::{backends, executor};

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next()),
            Some("Z" | "X")
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_confined_task_stops_its_escapees_and_term_ignorers() {
    for backend in backends().await {
        let root = tempfile::tempdir().unwrap();
        let executor = executor(backend.clone(), SandboxMode::ReadOnly, root.path());
        // The escapees print their own pids (the profiles share the host's
        // pid namespace, so these are host pids).
        let command = "trap '' TERM; setsid sleep 1000 & echo $!; ( ( sleep 1000 & echo $! ) & ); \
                       echo end; sleep 1000";
        let task = executor
            .start(executor.resolve(BashExecRequest::new(command)).unwrap())
            .await
            .unwrap();
        let mut seen = String::new();
        let numbers = |text: &str| text.lines().filter(|l| l.parse::<i32>().is_ok()).count();
        while !(seen.contains("end") && numbers(&seen) == 2) {
            seen.push_str(&executor.read_output(&task.id).unwrap().delta);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let pids: Vec<i32> = seen.lines().filter_map(|l| l.parse().ok()).collect();
        assert!(
            pids.iter().all(|p| alive(*p)),
            "{backend:?}: escapees not running: {seen}"
        );
        assert!(executor.kill(&task.id).await.unwrap());
        for pid in &pids {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while alive(*pid) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{backend:?}: {pid} survived the kill"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Under Landlock the TERM-ignoring shell itself is the root and needs
        // SIGKILL; under bwrap the runner is the root and dies of SIGTERM.
        let settled = task.settled().await;
        assert_eq!(settled.status, dsh_bash::TaskStatus::Killed);
        assert!(settled.signal.is_some(), "{backend:?}: {settled:?}");
        executor.shutdown().await;
    }
}
