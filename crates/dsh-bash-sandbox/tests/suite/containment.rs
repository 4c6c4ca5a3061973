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

/// The host pids of live processes whose command line contains `token`.
fn with_token(token: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(token))
                && alive(*pid)
        })
        .collect()
}

fn backend_tag(backend: &dsh_sandbox_local::Backend) -> u8 {
    match backend {
        dsh_sandbox_local::Backend::Bwrap => 1,
        _ => 2,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_confined_task_stops_its_escapees_and_term_ignorers() {
    for backend in backends().await {
        let root = tempfile::tempdir().unwrap();
        let executor = executor(backend.clone(), SandboxMode::ReadOnly, root.path());
        // Under bwrap the escapees live in a pid namespace of their own, so
        // they are found from the host by a token in their command line.
        let token = format!("1000.{}{}", std::process::id(), backend_tag(&backend));
        let command = format!(
            "trap '' TERM; setsid sleep {token} & ( ( sleep {token} & ) & ); echo end; sleep {token}"
        );
        let task = executor
            .start(executor.resolve(BashExecRequest::new(command)).unwrap())
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut pids = with_token(&token);
        while pids.len() < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "{backend:?}: escapees not running: {pids:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
            pids = with_token(&token);
        }
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
