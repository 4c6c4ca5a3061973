//! EXE-18, EXE-19: cancellation kills; the first cause wins; dropping the
//! run future kills too.

use std::time::Duration;

use dsh_bash::{BashExecRequest, BashExecutor};
use tokio_util::sync::CancellationToken;

use super::fixture::{executor, gone, pids};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_mid_run_aborts() {
    let executor = executor();
    let token = CancellationToken::new();
    let mut request = BashExecRequest::new("echo $$; sleep 30");
    request.cancel = Some(token.clone());
    let spec = executor.resolve(request).unwrap();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        token.cancel();
    });
    let result = executor.run(spec).await.unwrap();
    canceller.await.unwrap();
    assert!(result.aborted);
    assert!(!result.timed_out);
    assert_eq!(result.signal.as_deref(), Some("SIGTERM"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_first_then_cancel_stays_a_timeout() {
    // The shell ignores TERM, so the kill takes the whole 3 s grace;
    // cancelling during it must not turn the timeout into an abort.
    let executor = dsh_bash_local::LocalBashExecutor::new(dsh_bash_local::LocalConfig {
        grace: std::time::Duration::from_millis(3_000),
        ..super::fixture::config()
    })
    .unwrap();
    let token = CancellationToken::new();
    let mut request = BashExecRequest::new("trap '' TERM; sleep 30 & wait");
    request.cancel = Some(token.clone());
    request.timeout = Some(std::time::Duration::from_millis(100));
    let spec = executor.resolve(request).unwrap();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        token.cancel();
    });
    let result = executor.run(spec).await.unwrap();
    canceller.await.unwrap();
    assert!(result.timed_out);
    assert!(!result.aborted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_future_kills_the_command() {
    let executor = executor();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let command = format!("echo $$ > {}; exec sleep 30", pidfile.display());
    let spec = executor.resolve(BashExecRequest::new(command)).unwrap();
    let run = executor.run(spec);
    // Poll the run until the command has written its pid, then drop it.
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::pin!(run);
        loop {
            tokio::select! {
                _ = &mut run => panic!("sleep 30 ended early"),
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            if let Ok(text) = std::fs::read_to_string(&pidfile) {
                if text.ends_with('\n') {
                    return pids(&text)[0];
                }
            }
        }
    })
    .await
    .expect("the command never started");
    assert!(gone(waited).await, "dropping the run left {waited} running");
}
