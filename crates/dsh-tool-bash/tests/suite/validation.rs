//! VAL-01..09, GRD-01..03: validation errors run nothing; only named
//! arguments reach the executor.

use serde_json::json;

use dsh_tool_bash::BashTools;

use super::fixture::{bash, call, ctx, session, Recording};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_never_reach_the_executor() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let ctx = ctx(Some(session("s1")));
    for (args, message) in [
        (
            json!({"command": "", "description": "x"}),
            "invalid command: expected a non-empty string",
        ),
        (
            json!({"command": "ls", "description": ""}),
            "invalid description: expected a non-empty string",
        ),
        (
            json!({"command": "ls", "description": "d", "timeoutMs": -1}),
            "invalid timeoutMs: expected a positive integer number of milliseconds, got -1",
        ),
    ] {
        let err = call(&tools, "bash", args, &ctx).await.unwrap_err();
        assert_eq!(err.text(), message);
        assert_eq!(err.to_string(), format!("Error: {message}"));
    }
    let err = call(&tools, "bash_output", json!({"task_id": " "}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.text(), "invalid task_id: expected a non-empty string");
    assert!(recording.requests.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_supplied_env_and_stdin_never_arrive() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let mut args = bash("echo \"[$INJECTED]\"; cat");
    args["env"] = json!({"INJECTED": "yes"});
    args["stdin"] = json!("fed");
    args["owner"] = json!("someone-else");
    // Not arguments at all: the call is refused, naming them, and nothing
    // reaches the executor.
    let err = call(&tools, "bash", args, &ctx(Some(session("s1"))))
        .await
        .unwrap_err();
    assert_eq!(
        err.text(),
        "unknown arguments \"env\", \"owner\", \"stdin\"; allowed: command, description, timeoutMs, workdir, run_in_background, tty, yieldMs"
    );
    assert!(recording.requests.lock().unwrap().is_empty());
    // Without them the same command runs with no owner and nothing fed.
    let out = call(
        &tools,
        "bash",
        bash("echo \"[$INJECTED]\"; cat"),
        &ctx(Some(session("s1"))),
    )
    .await
    .unwrap();
    assert_eq!(out.text, "[]\n");
    let request = recording.last();
    assert_eq!(request.env, None);
    assert_eq!(request.stdin, None);
    assert_eq!(request.owner, None, "foreground requests carry no owner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workdir_follows_the_session_cwd() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let here = std::sync::Arc::new(dsh_tool_bash::Session::new(
        "a",
        Some(dir.path().to_owned()),
    ));
    let ctx_a = ctx(Some(here));
    assert_eq!(
        call(&tools, "bash", bash("pwd"), &ctx_a)
            .await
            .unwrap()
            .text,
        format!("{}\n", dir.path().display())
    );
    let mut relative = bash("pwd");
    relative["workdir"] = json!("sub");
    assert_eq!(
        call(&tools, "bash", relative, &ctx_a).await.unwrap().text,
        format!("{}\n", dir.path().join("sub").display())
    );
    let mut absolute = bash("pwd");
    absolute["workdir"] = json!("/");
    assert_eq!(
        call(&tools, "bash", absolute, &ctx_a).await.unwrap().text,
        "/\n"
    );
    let other = ctx(Some(std::sync::Arc::new(dsh_tool_bash::Session::new(
        "b",
        Some("/usr".into()),
    ))));
    assert_eq!(
        call(&tools, "bash", bash("pwd"), &other)
            .await
            .unwrap()
            .text,
        "/usr\n"
    );
    // No session cwd: the executor default decides.
    call(&tools, "bash", bash("true"), &ctx(None))
        .await
        .unwrap();
    assert_eq!(recording.last().workdir, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_are_named() {
    let tools = BashTools::new(Recording::new(None));
    let err = call(&tools, "shell", bash("ls"), &ctx(None))
        .await
        .unwrap_err();
    assert_eq!(
        err.text(),
        "unknown tool \"shell\": expected bash, bash_output, bash_write or bash_kill"
    );
}
