//! EXE-17, EXE-19, EXE-20..22: timeouts kill the group, TERM-ignorers get SIGKILL.

use std::time::Instant;

use dsh_bash::{BashExecRequest, BashExecutor};

use super::fixture::{executor, gone, pids};

fn with_timeout(
    executor: &dsh_bash_local::LocalBashExecutor,
    command: &str,
    ms: u64,
) -> dsh_bash::BashExecSpec {
    let mut request = BashExecRequest::new(command);
    request.timeout = Some(std::time::Duration::from_millis(ms));
    executor.resolve(request).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_group_with_sigterm() {
    let executor = executor();
    let result = executor
        .run(with_timeout(&executor, "sleep 30 & echo $!; wait", 300))
        .await
        .unwrap();
    assert!(result.timed_out);
    assert!(!result.aborted);
    assert_eq!(result.timeout_ms, 300);
    assert_eq!(result.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(result.exit_code, None);
    let child = pids(&result.stdout.text)[0];
    assert!(
        gone(child).await,
        "the grandchild {child} survived the timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caught_timeout_can_still_exit_zero() {
    let executor = executor();
    let result = executor
        .run(with_timeout(
            &executor,
            "trap 'echo caught; exit 0' TERM; echo ready; sleep 30 & wait",
            300,
        ))
        .await
        .unwrap();
    assert!(result.timed_out);
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.signal, None);
    assert_eq!(result.stdout.text, "ready\ncaught\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_ignoring_tree_dies_by_sigkill_after_the_grace() {
    let executor = executor(); // grace 400 ms
    let started = Instant::now();
    let result = executor
        .run(with_timeout(
            &executor,
            "trap '' TERM; (trap '' TERM; sleep 30) & echo $!; sleep 30 & echo $!; wait",
            200,
        ))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(result.timed_out);
    assert_eq!(result.signal.as_deref(), Some("SIGKILL"));
    for pid in pids(&result.stdout.text) {
        assert!(gone(pid).await, "{pid} survived SIGKILL");
    }
    println!("TERM-ignoring tree settled after {took:?} (timeout 200 ms + grace 400 ms)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_signals_its_own_shell_is_neither_timed_out_nor_aborted() {
    let executor = executor();
    let result = super::fixture::run(&executor, "kill -TERM $$").await;
    assert_eq!(result.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(result.exit_code, None);
    assert!(!result.timed_out && !result.aborted);
}
