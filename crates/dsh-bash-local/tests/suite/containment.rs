//! EXE-21, EXE-23, EXE-24: a kill reaches the whole group, once.

use std::time::Instant;

use dsh_bash::{BashExecutor, TaskStatus};

use super::fixture::{executor, gone, pids, spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_task_reaches_its_grandchildren() {
    let executor = executor();
    let task = executor
        .start(spec(
            &executor,
            "sleep 30 & echo $!; (sleep 30 & echo $!; wait) & wait",
        ))
        .await
        .unwrap();
    let mut seen = String::new();
    while pids(&seen).len() < 2 {
        seen.push_str(&executor.read_output(&task.id, None).unwrap().delta);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    assert!(executor.kill(&task.id).await.unwrap());
    println!("kill -> settled in {:?}", started.elapsed());
    for pid in pids(&seen) {
        assert!(gone(pid).await, "grandchild {pid} survived");
    }
    assert_eq!(task.settled().await.signal.as_deref(), Some("SIGTERM"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_kill_does_not_restart_the_escalation() {
    let executor = executor(); // grace 400 ms
    let task = executor
        .start(spec(&executor, "trap '' TERM; echo ready; sleep 30 & wait"))
        .await
        .unwrap();
    while !executor
        .read_output(&task.id, None)
        .unwrap()
        .delta
        .contains("ready")
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (first, second) = tokio::join!(executor.kill(&task.id), executor.kill(&task.id));
    let results = [first.unwrap(), second.unwrap()];
    assert_eq!(results.iter().filter(|r| **r).count(), 1, "{results:?}");
    let settled = task.settled().await;
    assert_eq!(settled.status, TaskStatus::Killed);
    assert_eq!(settled.signal.as_deref(), Some("SIGKILL"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_result_names_the_containment_in_force() {
    use dsh_bash::Containment;
    let executor = super::fixture::executor();
    let result = super::fixture::run(&executor, "true").await;
    match super::fixture::containment() {
        dsh_bash_local::ContainmentChoice::ProcessTree => {
            assert_eq!(result.containment, Some(Containment::ProcessTree));
        }
        _ => assert!(result.containment.is_some(), "{result:?}"),
    }
    let forced = dsh_bash_local::LocalBashExecutor::new(dsh_bash_local::LocalConfig {
        containment: dsh_bash_local::ContainmentChoice::ProcessTree,
        ..super::fixture::config()
    })
    .unwrap();
    let result = super::fixture::run(&forced, "true").await;
    assert_eq!(result.containment, Some(Containment::ProcessTree));
}
