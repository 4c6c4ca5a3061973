//! SPEC §9.2: a leftover holding stdout open does not hang a foreground run.

use std::time::Instant;

use super::fixture::{executor, gone, pids, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_left_running_does_not_hang_the_call() {
    let executor = executor();
    let started = Instant::now();
    // The leftover inherits stdout and stderr and keeps them open.
    let result = run(&executor, "sleep 1000 & echo $!; echo started").await;
    let took = started.elapsed();
    println!("returned {took:?} after the shell exited with a pipe-holding leftover");
    assert!(
        took.as_secs() < 30,
        "the call waited for the leftover: {took:?}"
    );
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.leftovers_stopped, 1);
    let leftover = pids(&result.stdout.text)[0];
    assert!(result.stdout.text.ends_with("started\n"));
    assert!(
        gone(leftover).await,
        "the leftover {leftover} was not stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipe_holding_daemon_does_not_hang_the_call_either() {
    // A daemon that left the group but still holds our stdout: the run
    // returns after the linger, with what was written.
    let executor = executor();
    let started = Instant::now();
    let result = run(&executor, "setsid sleep 1000 & echo $!; echo done").await;
    let took = started.elapsed();
    println!("returned {took:?} with a daemon holding stdout");
    assert!(took.as_secs() < 30);
    assert!(result.stdout.text.ends_with("done\n"));
    super::fixture::reap(pids(&result.stdout.text)[0]);
}
