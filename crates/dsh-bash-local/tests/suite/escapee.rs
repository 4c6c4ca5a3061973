//! SPEC §9.1: descendants that left the process group (setsid, double
//! fork) are still stopped by a kill, a timeout or a cancellation.

use std::time::Duration;

use dsh_bash::{BashExecRequest, BashExecutor};

use super::fixture::{alive, executor, gone, pids, reap, spec};

/// Starts a setsid escapee, a double-forked orphan and a setsid+double-fork
/// daemon with closed pipes, each printing its pid to stdout.
const ESCAPEES: &str = "setsid sleep 1000 & echo $!; \
    ( ( sleep 1000 & echo $! ) & ); \
    ( setsid bash -c 'echo $$ >&3; exec sleep 1000' 3>&1 >/dev/null 2>&1 </dev/null & ); \
    sleep 1000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_task_leaves_no_escapee_running() {
    let executor = executor();
    let task = executor.start(spec(&executor, ESCAPEES)).await.unwrap();
    let mut seen = String::new();
    while pids(&seen).len() < 3 {
        seen.push_str(&executor.read_output(&task.id, None).unwrap().delta);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let escapees = pids(&seen);
    for pid in &escapees {
        assert!(alive(*pid), "{pid} should be running before the kill");
    }
    assert!(executor.kill(&task.id).await.unwrap());
    for pid in escapees {
        assert!(gone(pid).await, "escapee {pid} survived the kill");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_leaves_no_escapee_running() {
    let executor = executor();
    let mut request = BashExecRequest::new(ESCAPEES);
    // Long enough for all three escapees to start on a loaded machine.
    request.timeout = Some(std::time::Duration::from_millis(2_500));
    let result = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap();
    assert!(result.timed_out);
    let escapees = pids(&result.stdout.text);
    assert_eq!(escapees.len(), 3, "{}", result.stdout.text);
    for pid in escapees {
        assert!(gone(pid).await, "escapee {pid} survived the timeout");
    }
}

/// A shell that waits (on a fifo) until a daemon (new session, our pipes
/// closed, double-forked) is set up, then exits 0; the daemon prints its pid.
const DAEMON: &str = "ready=$(mktemp -u); mkfifo $ready; \
     ( setsid bash -c 'echo $$ >&3; echo up > \"$0\"; exec sleep 1000 3>&-' $ready \
       3>&1 >/dev/null 2>&1 </dev/null & ); \
     read _ < $ready; rm $ready";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_rule_for_leftovers_under_cgroups_a_daemon_is_stopped_and_counted() {
    let executor = dsh_bash_local::LocalBashExecutor::new(dsh_bash_local::LocalConfig {
        containment: dsh_bash_local::ContainmentChoice::Auto,
        ..super::fixture::config()
    })
    .unwrap();
    let result = super::fixture::run(&executor, DAEMON).await;
    let daemon = pids(&result.stdout.text)[0];
    if result.containment != Some(dsh_bash::Containment::Cgroup) {
        reap(daemon);
        let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "cgroup containment is required here but unavailable"
        );
        eprintln!(
            "SKIP: no cgroup containment on this host (not root, no delegated cgroup2 subtree)"
        );
        return;
    }
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.leftovers_stopped, 1, "{result:?}");
    assert!(
        gone(daemon).await,
        "the daemon {daemon} outlived its command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_process_tree_walk_a_daemon_that_left_is_a_stated_limit() {
    // Without a cgroup, a daemon that left the group before the shell
    // exited was re-parented to init: nothing links it to the command any
    // more. The crate docs say so; this pins the behaviour.
    let executor = dsh_bash_local::LocalBashExecutor::new(dsh_bash_local::LocalConfig {
        containment: dsh_bash_local::ContainmentChoice::ProcessTree,
        ..super::fixture::config()
    })
    .unwrap();
    let result = super::fixture::run(&executor, DAEMON).await;
    let daemon = pids(&result.stdout.text)[0];
    assert_eq!(result.containment, Some(dsh_bash::Containment::ProcessTree));
    assert_eq!(result.leftovers_stopped, 0);
    assert!(alive(daemon), "the daemon was stopped");
    reap(daemon);
}
