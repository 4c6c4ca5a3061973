//! RND-01..18 with real commands.

use serde_json::json;

use dsh_tool_bash::BashTools;

use super::fixture::{bash, call, ctx, Recording};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_render_as_specified() {
    let tools = BashTools::new(Recording::new(None));
    let ctx = ctx(None);
    let text = |out: Result<dsh_tool_bash::ToolOutput, dsh_tool_bash::ToolError>| out.unwrap().text;
    assert_eq!(
        text(call(&tools, "bash", bash("true"), &ctx).await),
        "(no output)"
    );
    assert_eq!(
        text(call(&tools, "bash", bash("echo hi"), &ctx).await),
        "hi\n"
    );
    assert_eq!(
        text(
            call(
                &tools,
                "bash",
                bash("printf out; echo bad >&2; exit 4"),
                &ctx
            )
            .await
        ),
        "out\n[stderr]\nbad\n[exit code: 4]"
    );
    let mut slow = bash("sleep 30");
    slow["timeoutMs"] = json!(200);
    assert_eq!(
        text(call(&tools, "bash", slow, &ctx).await),
        "(no output)\n[timed out after 200ms]\n[killed by signal: SIGTERM]"
    );
    let out = call(&tools, "bash", bash("kill -KILL $$"), &ctx)
        .await
        .unwrap();
    assert_eq!(out.text, "(no output)\n[killed by signal: SIGKILL]");
    assert_eq!(out.structured["signal"], "SIGKILL");
    assert_eq!(out.structured["exit_code"], serde_json::Value::Null);
    let big = call(&tools, "bash", bash("seq 1 100000"), &ctx)
        .await
        .unwrap();
    // Said first, then the head from the spill file, what was left out,
    // and the tail from a line start to the last line.
    assert!(
        big.text
            .starts_with("[output truncated: 588895 bytes in all, shown: the first "),
        "{}",
        &big.text[..200]
    );
    assert!(
        big.text.contains("; full output: /"),
        "{}",
        &big.text[..200]
    );
    let (head, tail) = big.text.split_once(" bytes left out …]\n").unwrap();
    assert!(head.contains("]\n1\n2\n3\n"), "{head}");
    assert!(tail.ends_with("\n100000\n"), "{}", &tail[tail.len() - 50..]);
    // A whole first line: a fragment ("90858" of "190858") would not be
    // followed by its successor.
    let mut lines = tail.lines().map(|l| l.parse::<u64>().unwrap());
    let (first, second) = (lines.next().unwrap(), lines.next().unwrap());
    assert_eq!(second, first + 1, "{}", &tail[..20]);
    assert!(
        big.structured["output_files"][0].is_string(),
        "{}",
        big.structured
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_and_spawn_failure_are_errors() {
    let tools = BashTools::new(Recording::new(None));
    let cancelled = ctx(None);
    cancelled.cancel.cancel();
    let err = call(&tools, "bash", bash("echo never"), &cancelled)
        .await
        .unwrap_err();
    assert_eq!(err.text(), "command aborted");

    let running = ctx(None);
    let token = running.cancel.clone();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        token.cancel();
    });
    let err = call(&tools, "bash", bash("sleep 30"), &running)
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.text(), "command aborted");

    let mut missing = bash("true");
    missing["workdir"] = json!("/no/such/dir");
    let err = call(&tools, "bash", missing, &ctx(None)).await.unwrap_err();
    assert_eq!(err.text(), "workdir /no/such/dir does not exist");
}
