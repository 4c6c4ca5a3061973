//! TBG-01..11 and NTC-01..05: background tasks through the tools.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use dsh_bash::BashExecutor;
use dsh_tool_bash::BashTools;

use super::fixture::{bash, call, ctx, noticed, output_of, settled, Recording};

fn background(command: &str) -> serde_json::Value {
    let mut args = bash(command);
    args["run_in_background"] = json!(true);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_poll_and_kill() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let (session, notices) = noticed("s1");
    let ctx = ctx(Some(Arc::clone(&session)));

    let started = call(&tools, "bash", background("echo one; echo two >&2"), &ctx)
        .await
        .unwrap();
    assert_eq!(started.text, "started background task bash-1");
    assert_eq!(started.structured["task_id"], "bash-1");
    assert_eq!(recording.last().owner.unwrap().as_str(), "s1");
    settled(&recording, "bash-1").await;
    let read = output_of(&tools, "bash-1", &ctx).await;
    assert_eq!(
        read.text,
        "one\n[stderr]\ntwo\n[status: completed, exit code: 0]"
    );
    let again = output_of(&tools, "bash-1", &ctx).await;
    assert_eq!(
        again.text,
        "(no new output)\n[status: completed, exit code: 0]"
    );
    let kill = call(&tools, "bash_kill", json!({"task_id": "bash-1"}), &ctx)
        .await
        .unwrap();
    assert_eq!(kill.text, "task bash-1 had already finished");

    call(&tools, "bash", background("sleep 30"), &ctx)
        .await
        .unwrap();
    let running = output_of(&tools, "bash-2", &ctx).await;
    assert_eq!(running.text, "(no new output)\n[status: running]");
    let kill = call(&tools, "bash_kill", json!({"task_id": "bash-2"}), &ctx)
        .await
        .unwrap();
    assert_eq!(kill.text, "killed background task bash-2");
    let killed = output_of(&tools, "bash-2", &ctx).await;
    assert_eq!(killed.text, "(no new output)\n[status: killed by SIGTERM]");

    let err = call(&tools, "bash_output", json!({"task_id": "bash-9"}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.text(), "unknown bash task \"bash-9\"");

    // Exactly one notice per task, to the owner.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while notices.lock().unwrap().len() < 2 {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let notices = notices.lock().unwrap().clone();
    assert_eq!(
        notices,
        [
            "background bash task bash-1 finished [status: completed, exit code: 0]. Read its output with bash_output.",
            "background bash task bash-2 finished [status: killed by SIGTERM]. Read its output with bash_output."
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_reads_name_the_spill_files() {
    let recording = Arc::new(Recording {
        inner: dsh_bash_local::LocalBashExecutor::new(dsh_bash_local::LocalConfig {
            max_output_bytes: 100,
            ..dsh_bash_local::LocalConfig::default()
        })
        .unwrap(),
        mode: None,
        requests: Default::default(),
        ran: Default::default(),
    });
    let tools = BashTools::new(recording.clone());
    let ctx = ctx(None);
    call(&tools, "bash", background("seq 1 1000"), &ctx)
        .await
        .unwrap();
    settled(&recording, "bash-1").await;
    let read = output_of(&tools, "bash-1", &ctx).await;
    assert!(
        read.text
            .contains("1000\n[some output was dropped from memory; full output: /"),
        "{}",
        read.text
    );
    assert!(read.text.ends_with("[status: completed, exit code: 0]"));
    assert_eq!(read.structured["lossy"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_starting_call_kills_the_task_and_ended_sessions_get_no_notice() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let (session, notices) = noticed("gone");
    let ctx = ctx(Some(Arc::clone(&session)));
    call(&tools, "bash", background("sleep 30"), &ctx)
        .await
        .unwrap();
    session.end();
    ctx.cancel.cancel();
    let task = recording
        .inner
        .get(&dsh_bash::BashTaskId::new("bash-1"))
        .unwrap();
    assert_eq!(task.settled().await.status, dsh_bash::TaskStatus::Killed);
    // Another task settling proves the listener already ran for bash-1.
    call(
        &tools,
        "bash",
        background("true"),
        &super::fixture::ctx(None),
    )
    .await
    .unwrap();
    settled(&recording, "bash-2").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(notices.lock().unwrap().is_empty());
}

/// A task that never ran says so, with the reason, instead of "killed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_never_started_says_so() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let ctx = ctx(None);
    let mut args = background("true");
    args["workdir"] = json!("/no/such/dir");
    call(&tools, "bash", args, &ctx).await.unwrap();
    settled(&recording, "bash-1").await;
    let read = output_of(&tools, "bash-1", &ctx).await;
    assert_eq!(
        read.text,
        "[stderr]\nspawn failed: workdir /no/such/dir does not exist\n[status: failed to start: the command never ran (its stderr says why)]"
    );
    assert_eq!(read.structured["status"], "failed_to_start");
}

/// Sessions that ended are not remembered forever: each new session
/// prunes the ended ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_sessions_are_forgotten() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    for n in 0..50 {
        let session = super::fixture::session(&format!("s{n}"));
        call(&tools, "bash", bash("true"), &ctx(Some(session)))
            .await
            .unwrap();
    }
    let live = super::fixture::session("live");
    call(&tools, "bash", bash("true"), &ctx(Some(Arc::clone(&live))))
        .await
        .unwrap();
    assert_eq!(tools.remembered_sessions(), 1);
}
