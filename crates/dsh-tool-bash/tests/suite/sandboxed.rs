//! The tools unchanged over the real sandboxing executor: denial and
//! runner-failure markers (RND, TBG), the hint only while escalation is on
//! offer.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use serde_json::json;

use dsh_bash::{BashExecutor, SandboxMode};
use dsh_bash_local::LocalConfig;
use dsh_bash_sandbox::{SandboxBashExecutor, SandboxConfig};
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider, RunnerCommand};
use dsh_tool_bash::BashTools;

use super::fixture::{bash, call, ctx};

fn confined(
    root: &std::path::Path,
    sandbox: LocalSandboxConfig,
    mode: SandboxMode,
) -> Arc<SandboxBashExecutor> {
    Arc::new(
        dsh_bash_sandbox::sandboxed(
            SandboxConfig {
                local: LocalConfig {
                    cwd: Some(root.to_owned()),
                    ..LocalConfig::default()
                },
                mode,
                workspace_root: Some(root.to_owned()),
                ..SandboxConfig::default()
            },
            Arc::new(LocalSandboxProvider::new(sandbox).unwrap()),
        )
        .unwrap(),
    )
}

/// Starts `command` in the background, waits for it, and reads it.
async fn settled_read(
    tools: &BashTools,
    executor: &SandboxBashExecutor,
    command: &str,
    ctx: &dsh_tool_bash::CallContext,
) -> dsh_tool_bash::ToolOutput {
    let mut background = bash(command);
    background["run_in_background"] = json!(true);
    let started = call(tools, "bash", background, ctx).await.unwrap();
    let id = started.structured["task_id"].as_str().unwrap().to_owned();
    executor
        .get(&dsh_bash::BashTaskId::new(&id))
        .unwrap()
        .settled()
        .await;
    call(tools, "bash_output", json!({ "task_id": id }), ctx)
        .await
        .unwrap()
}

async fn usable(executor: &SandboxBashExecutor) -> bool {
    match executor
        .run(
            executor
                .resolve(dsh_bash::BashExecRequest::new("true"))
                .unwrap(),
        )
        .await
    {
        Ok(_) => true,
        Err(err) => {
            let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
            assert!(!required, "no sandbox backend: {err}");
            eprintln!("SKIP: no sandbox backend here: {err}");
            false
        }
    }
}

const GUESS: &str = "[sandbox: stderr looks like a permission error under read-only mode; a guess from the output, not a report from the kernel]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_are_marked_as_guesses_and_never_suggest_lifting_the_sandbox() {
    let root = tempfile::tempdir().unwrap();
    let executor = confined(
        root.path(),
        LocalSandboxConfig::default(),
        SandboxMode::ReadOnly,
    );
    if !usable(&executor).await {
        return;
    }
    let tools = BashTools::new(executor.clone());
    let ctx = ctx(None);
    // A real refusal and one a command prints itself read the same: both
    // are said to be guesses, neither carries a hint to escalate.
    for command in [
        "echo x > file",
        "echo 'cp: x: Read-only file system' >&2; echo 'x: Permission denied' >&2; exit 1",
    ] {
        let out = call(&tools, "bash", bash(command), &ctx).await.unwrap();
        assert!(
            out.text.ends_with(&format!("{GUESS}\n[exit code: 1]")),
            "{command}: {}",
            out.text
        );
        assert!(!out.text.contains("sandbox_permissions"), "{}", out.text);
        assert_eq!(out.structured["sandbox"]["looks_denied"], true);

        let read = settled_read(&tools, executor.as_ref(), command, &ctx).await;
        let tail: Vec<&str> = read.text.lines().rev().take(2).collect();
        assert!(
            tail[0] == GUESS
                && tail[1].starts_with("[status: completed, exit code: 1] [position: 0:"),
            "{command}: {}",
            read.text
        );
        assert!(!read.text.contains("sandbox_permissions"), "{}", read.text);
    }

    // Under danger-full-access there is no sandbox to blame: no marker.
    let open = confined(
        root.path(),
        LocalSandboxConfig::default(),
        SandboxMode::DangerFullAccess,
    );
    let tools = BashTools::new(open);
    let out = call(&tools, "bash", bash("echo x > /proc/version"), &ctx)
        .await
        .unwrap();
    assert!(!out.text.contains("[sandbox:"), "{}", out.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_failure_gets_its_own_marker() {
    let dir = tempfile::tempdir().unwrap();
    let runner = dir.path().join("runner");
    std::fs::write(
        &runner,
        "#!/bin/sh\necho 'runner: fatal: no namespaces' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sandbox = LocalSandboxConfig {
        runner: Some(RunnerCommand {
            command: vec![runner.into_os_string()],
        }),
        ..LocalSandboxConfig::default()
    };
    let executor = confined(dir.path(), sandbox, SandboxMode::ReadOnly);
    let tools = BashTools::new(executor.clone());
    let ctx = ctx(None);
    let err = call(&tools, "bash", bash("true"), &ctx).await.unwrap_err();
    assert!(
        err.text()
            .contains("runner said: runner: fatal: no namespaces"),
        "{}",
        err.text()
    );
    let read = settled_read(&tools, executor.as_ref(), "true", &ctx).await;
    assert!(
        read.text.ends_with(
            "[sandbox: the sandbox runner failed under read-only mode; the command did not run]"
        ),
        "{}",
        read.text
    );
    assert!(!read.text.contains("permission error"));
}
