//! Shared set-up: executors with a short grace, process liveness checks.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dsh_bash::{BashExecRequest, BashExecSpec, BashExecutor, BashRunResult};
use dsh_bash_local::{ContainmentChoice, LocalBashExecutor, LocalConfig};

/// One spill parent for the whole test binary, removed by the OS tmp cleaner.
pub fn spill_parent() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap().keep())
        .clone()
}

/// The containment under test: `DSH_TEST_CONTAINMENT=process-tree` runs
/// the whole suite under the process-tree walk (CI runs it both ways).
pub fn containment() -> ContainmentChoice {
    match std::env::var("DSH_TEST_CONTAINMENT").as_deref() {
        Ok("process-tree") => ContainmentChoice::ProcessTree,
        _ => ContainmentChoice::Auto,
    }
}

pub fn config() -> LocalConfig {
    LocalConfig {
        grace: std::time::Duration::from_millis(400),
        spill_parent: Some(spill_parent()),
        containment: containment(),
        ..LocalConfig::default()
    }
}

pub fn executor() -> LocalBashExecutor {
    LocalBashExecutor::new(config()).unwrap()
}

pub fn spec(executor: &LocalBashExecutor, command: &str) -> BashExecSpec {
    executor.resolve(BashExecRequest::new(command)).unwrap()
}

pub async fn run(executor: &LocalBashExecutor, command: &str) -> BashRunResult {
    executor.run(spec(executor, command)).await.unwrap()
}

/// True if and only if `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X") | None)
        }
        Err(_) => false,
    }
}

/// Waits (fail-safe 10 s) until `pid` is gone; true if it went.
pub async fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// The pids printed one per line in `text`.
pub fn pids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Kills leftovers a test deliberately leaves alone (daemons).
pub fn reap(pid: i32) {
    // SAFETY: plain kill(2) on a pid this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}
