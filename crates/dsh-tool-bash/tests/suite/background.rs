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
        "one\n[stderr]\ntwo\n[status: completed, exit code: 0] [position: 4:4]"
    );
    let again = output_of(&tools, "bash-1", &ctx).await;
    assert_eq!(
        again.text,
        "(no new output)\n[status: completed, exit code: 0] [position: 4:4]"
    );
    let kill = call(&tools, "bash_kill", json!({"task_id": "bash-1"}), &ctx)
        .await
        .unwrap();
    assert_eq!(kill.text, "task bash-1 had already finished");

    call(&tools, "bash", background("sleep 30"), &ctx)
        .await
        .unwrap();
    let running = output_of(&tools, "bash-2", &ctx).await;
    assert_eq!(
        running.text,
        "(no new output)\n[status: running] [position: 0:0]"
    );
    let kill = call(&tools, "bash_kill", json!({"task_id": "bash-2"}), &ctx)
        .await
        .unwrap();
    assert_eq!(kill.text, "killed background task bash-2");
    let killed = output_of(&tools, "bash-2", &ctx).await;
    assert_eq!(
        killed.text,
        "(no new output)\n[status: killed by SIGTERM] [position: 0:0]"
    );

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
    // `seq 1 1000` prints 3,893 bytes; the last 100 are held.
    assert!(
        read.text
            .contains("1000\n[stdout bytes 0 to 3793 are no longer in memory; full output: /"),
        "{}",
        read.text
    );
    assert!(read.text.contains("(from byte 0)]\n"), "{}", read.text);
    assert!(
        read.text
            .ends_with("[status: completed, exit code: 0] [position: 3893:0]"),
        "{}",
        read.text
    );
    assert_eq!(read.structured["lossy"], true);
    assert_eq!(read.structured["position"], "3893:0");
    // A position still held reads exactly from there, and is not lossy.
    let again = call(
        &tools,
        "bash_output",
        json!({"task_id": "bash-1", "since": "3888:0"}),
        &ctx,
    )
    .await
    .unwrap();
    assert_eq!(
        again.text,
        "1000\n[status: completed, exit code: 0] [position: 3893:0]"
    );
    assert_eq!(again.structured.get("lossy"), None);
}

/// A read whose answer was lost can be asked again by position: the same
/// text comes back, whatever was read since, and the default read goes on
/// from the last position handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_can_be_asked_again_by_position() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let ctx = ctx(None);
    let fifo = tempfile::tempdir().unwrap();
    let gate = fifo.path().join("gate");
    nix_mkfifo(&gate);
    let command = format!(
        "echo first; echo oops >&2; cat {} >/dev/null; echo second",
        gate.display()
    );
    call(&tools, "bash", background(&command), &ctx)
        .await
        .unwrap();
    // Wait for the first part (synchronised on output, not time).
    let first = loop {
        let read = output_of(&tools, "bash-1", &ctx).await;
        if read.text.contains("oops") {
            break read;
        }
        assert!(
            read.text.starts_with("first") || read.text.starts_with("(no new output)"),
            "{}",
            read.text
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let _ = first;
    // Open the gate: the task ends.
    std::fs::write(&gate, b"go").unwrap();
    settled(&recording, "bash-1").await;
    let lost = output_of(&tools, "bash-1", &ctx).await;
    assert_eq!(
        lost.text,
        "second\n[status: completed, exit code: 0] [position: 13:5]"
    );
    // That answer is "lost": ask again from where the read before ended.
    let again = call(
        &tools,
        "bash_output",
        json!({"task_id": "bash-1", "since": "6:5"}),
        &ctx,
    )
    .await
    .unwrap();
    assert_eq!(again.text, lost.text);
    // From the start: everything, stdout then stderr.
    let whole = call(
        &tools,
        "bash_output",
        json!({"task_id": "bash-1", "since": "0:0"}),
        &ctx,
    )
    .await
    .unwrap();
    assert_eq!(
        whole.text,
        "first\nsecond\n[stderr]\noops\n[status: completed, exit code: 0] [position: 13:5]"
    );
    // Past the end is refused, saying where the output ends.
    let err = call(
        &tools,
        "bash_output",
        json!({"task_id": "bash-1", "since": "14:0"}),
        &ctx,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.text(),
        "position 14:0 is past the output of task bash-1, which ends at 13:5; pass a position an earlier read showed ([position: …]), or leave since out to read what is new"
    );
    // And the default read goes on from the last position handed out.
    let next = output_of(&tools, "bash-1", &ctx).await;
    assert_eq!(
        next.text,
        "(no new output)\n[status: completed, exit code: 0] [position: 13:5]"
    );
}

fn nix_mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
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
        "[stderr]\nspawn failed: workdir /no/such/dir does not exist\n[status: failed to start: the command never ran (its stderr says why)] [position: 0:50]"
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
