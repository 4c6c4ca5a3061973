//! OWN-01..08: tasks belong to the session that started them.

use std::sync::Arc;

use serde_json::json;

use dsh_bash::BashExecutor;
use dsh_tool_bash::{BashTools, Session};

use super::fixture::{bash, call, ctx, output_of, settled, Recording};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sessions_can_neither_read_nor_kill() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let owner = ctx(Some(Arc::new(Session::new("alice", None))));
    let intruder = ctx(Some(Arc::new(Session::new("mallory", None))));
    let nobody = ctx(None);
    let mut args = bash("sleep 30");
    args["run_in_background"] = json!(true);
    call(&tools, "bash", args, &owner).await.unwrap();
    for other in [&intruder, &nobody] {
        for tool in ["bash_output", "bash_write", "bash_kill"] {
            let err = call(&tools, tool, json!({"task_id": "bash-1"}), other)
                .await
                .unwrap_err();
            assert_eq!(err.text(), "task bash-1 belongs to another session");
        }
    }
    let task = recording
        .inner
        .get(&dsh_bash::BashTaskId::new("bash-1"))
        .unwrap();
    assert_eq!(
        task.refresh().status,
        dsh_bash::TaskStatus::Running,
        "a foreign kill did something"
    );
    // The same session id from another agent has access.
    let same = ctx(Some(Arc::new(Session::new("alice", None))));
    let kill = call(&tools, "bash_kill", json!({"task_id": "bash-1"}), &same)
        .await
        .unwrap();
    assert_eq!(kill.text, "killed background task bash-1");
    // Ownership outlives completion; unknown ids still say unknown.
    let err = call(
        &tools,
        "bash_output",
        json!({"task_id": "bash-1"}),
        &intruder,
    )
    .await
    .unwrap_err();
    assert_eq!(err.text(), "task bash-1 belongs to another session");
    let err = call(
        &tools,
        "bash_output",
        json!({"task_id": "bash-7"}),
        &intruder,
    )
    .await
    .unwrap_err();
    assert_eq!(err.text(), "unknown bash task \"bash-7\"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unowned_tasks_are_open_to_all() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let mut args = bash("echo open");
    args["run_in_background"] = json!(true);
    call(&tools, "bash", args, &ctx(None)).await.unwrap();
    settled(&recording, "bash-1").await;
    let anyone = ctx(Some(Arc::new(Session::new("bob", None))));
    let read = output_of(&tools, "bash-1", &anyone).await;
    assert_eq!(
        read.text,
        "open\n[status: completed, exit code: 0] [position: 5:0]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_write_types_into_the_owners_terminal_task_and_refuses_others() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let owner = ctx(Some(Arc::new(Session::new("alice", None))));
    let mut args = bash("read -p 'name? ' n; echo \"hi $n\"");
    args["run_in_background"] = json!(true);
    args["tty"] = json!(true);
    call(&tools, "bash", args, &owner).await.unwrap();
    let answered = call(
        &tools,
        "bash_write",
        json!({"task_id": "bash-1", "input": "bob\n", "yieldMs": 10000}),
        &owner,
    )
    .await
    .unwrap();
    assert!(answered.text.contains("hi bob"), "{}", answered.text);
    // A task without a terminal says how to start one that has.
    let mut plain = bash("sleep 30");
    plain["run_in_background"] = json!(true);
    call(&tools, "bash", plain, &owner).await.unwrap();
    let refused = call(
        &tools,
        "bash_write",
        json!({"task_id": "bash-2", "input": "x"}),
        &owner,
    )
    .await
    .unwrap_err();
    assert!(
        refused.text().contains("start the command with tty"),
        "{}",
        refused.text()
    );
    call(&tools, "bash_kill", json!({"task_id": "bash-2"}), &owner)
        .await
        .unwrap();
}
