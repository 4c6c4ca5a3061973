//! The host-death watchdog: stalled, it kills nothing and loses nothing;
//! lost, it is reaped, logged and replaced.

use std::time::{Duration, Instant};

use dsh_bash::{BashExecRequest, BashExecutor, TaskStatus};
use dsh_bash_local::{ContainmentChoice, LocalBashExecutor, LocalConfig};

use super::fixture::{alive, config, pids, run};

/// The pid of this process's watchdog (a `bash` whose `$0` names it).
fn watchdog() -> Option<i32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
        (String::from_utf8_lossy(&cmdline).contains("dsh-bash-watchdog")
            && ppid == me
            && alive(pid))
        .then_some(pid)
    })
}

fn process_tree() -> LocalBashExecutor {
    LocalBashExecutor::new(LocalConfig {
        containment: ContainmentChoice::ProcessTree,
        ..config()
    })
    .unwrap()
}

async fn started_watchdog(executor: &LocalBashExecutor) -> i32 {
    run(executor, "true").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = watchdog() {
            return pid;
        }
        assert!(Instant::now() < deadline, "no watchdog is running");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Continues the watchdog whatever happens to the test.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the watchdog this test stopped.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_behaviour() {
    let executor = process_tree();
    let dog = started_watchdog(&executor).await;

    // Stalled: many quick commands fill its (4 KiB) pipe many times over;
    // a running background task must not be killed for it.
    let task = executor
        .start(
            executor
                .resolve(BashExecRequest::new("echo $$; exec sleep 60"))
                .unwrap(),
        )
        .await
        .unwrap();
    let shell = loop {
        if let Some(pid) = pids(&executor.read_output(&task.id, None).unwrap().delta).first() {
            break *pid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    {
        // SAFETY: kill(2) on this process's own watchdog.
        unsafe { libc::kill(dog, libc::SIGSTOP) };
        let _resume = Resume(dog);
        for _ in 0..400 {
            assert_eq!(run(&executor, "true").await.exit_code, Some(0));
        }
        assert!(alive(shell), "a stalled watchdog killed a live task");
        assert_eq!(executor.get(&task.id).unwrap().status, TaskStatus::Running);
    }
    assert_eq!(watchdog(), Some(dog), "a stalled watchdog was replaced");

    // Lost: killed, it is reaped and replaced by one that still knows the
    // running task.
    // SAFETY: kill(2) on this process's own watchdog.
    unsafe { libc::kill(dog, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let replacement = loop {
        run(&executor, "true").await;
        if let Some(pid) = watchdog().filter(|pid| *pid != dog) {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the lost watchdog was not replaced"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        !std::path::Path::new(&format!("/proc/{dog}")).exists(),
        "the lost watchdog {dog} was never reaped"
    );
    assert!(alive(replacement));
    assert!(alive(shell));
    assert!(executor.kill(&task.id).await.unwrap());
    executor.shutdown().await;
}
