//! `dsh-bash mcp` answers every malformed message per JSON-RPC 2.0 instead
//! of leaving the client waiting, and keeps serving afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;

use common::RawServer;
use serde_json::Value;

#[test]
fn malformed_messages_get_their_json_rpc_errors() {
    let mut server = RawServer::start();
    let cases = [
        ("{not json", -32700, serde_json::Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":"\ud800"}}"#,
            -32700,
            serde_json::Value::Null,
        ),
        (
            r#"[{"jsonrpc":"2.0","id":3,"method":"ping"}]"#,
            -32600,
            serde_json::Value::Null,
        ),
        (r#"{"id":5,"method":"ping"}"#, -32600, serde_json::json!(5)),
        (
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"arguments":{}}}"#,
            -32602,
            serde_json::json!("x"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bash","arguments":"text"}}"#,
            -32602,
            serde_json::json!(7),
        ),
        (
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/list","params":"text"}"#,
            -32602,
            serde_json::json!(12),
        ),
        (
            r#"{"jsonrpc":"2.0","id":13,"method":"logging/setLevel","params":{"level":"loud"}}"#,
            -32602,
            serde_json::json!(13),
        ),
        (
            r#"{"jsonrpc":"2.0","id":14,"method":"tasks/get","params":{}}"#,
            -32602,
            serde_json::json!(14),
        ),
        (
            r#"{"jsonrpc":"2.0","id":15,"method":"no/such/method","params":{}}"#,
            -32601,
            serde_json::json!(15),
        ),
    ];
    for (line, code, id) in cases {
        server.send(line);
        let reply = server.next();
        assert_eq!(reply["error"]["code"], code, "{line} -> {reply}");
        assert_eq!(reply["id"], id, "{line} -> {reply}");
        assert_eq!(reply["jsonrpc"], "2.0");
    }
    // Over the size limit: answered, dropped, and the stream stays in step.
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"ping\",\"params\":{{\"x\":\"{}\"}}}}",
        "x".repeat(16 << 20)
    );
    server.send(&huge);
    let reply = server.next();
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert_eq!(reply["id"], serde_json::Value::Null);
    // A byte-order mark is ignored.
    server.send("\u{feff}{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\"}");
    let reply = server.next();
    assert_eq!(reply["id"], 11, "{reply}");
    assert!(reply.get("result").is_some(), "{reply}");
    // Still serving.
    server.send(
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo fine","description":"d"}}}"#,
    );
    let reply = server.next();
    assert_eq!(reply["id"], 9, "{reply}");
    assert_eq!(reply["result"]["structuredContent"]["text"], "fine\n");
    drop(server.stdin.take());
    assert!(server.child.wait().unwrap().success());
}

/// On 2026-07-28 (no `initialize`), a notification or a stray response
/// between `server/discover` and the first real request is dropped, not
/// taken for a failed handshake that ends the connection.
#[test]
fn a_notification_after_discovery_does_not_end_the_session() {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    let mut server = RawServer::spawn();
    server.send(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{meta}}}}}"#
    ));
    let discovered = server.next();
    assert_eq!(discovered["id"], 1, "{discovered}");
    assert!(
        discovered["result"]["capabilities"]
            .get("logging")
            .is_none(),
        "{discovered}"
    );
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#);
    server.send(r#"{"jsonrpc":"2.0","id":77,"result":{}}"#);
    server.send(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{{meta}}}}}"#
    ));
    let listed = server.next();
    assert_eq!(listed["id"], 2, "{listed}");
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 4);
    drop(server.stdin.take());
    assert!(server.child.wait().unwrap().success());
}

/// Ids are unique among requests in flight (JSON-RPC): a second request
/// with the id of one still running is refused, and so is a second
/// `initialize`; once answered (or cancelled) an id is free again.
#[test]
fn an_id_in_flight_and_a_second_initialize_are_refused() {
    let mut server = RawServer::start();
    server.send(
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"sleep 1; echo first","description":"d"}}}"#,
    );
    server.send(
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo second","description":"d"}}}"#,
    );
    let refused = server.next();
    assert_eq!(refused["id"], 5, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let first = server.next();
    assert_eq!(first["id"], 5, "{first}");
    assert_eq!(
        first["result"]["structuredContent"]["text"], "first\n",
        "{first}"
    );
    // Answered: the id is free again.
    server.send(
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo again","description":"d"}}}"#,
    );
    let again = server.next();
    assert_eq!(
        again["result"]["structuredContent"]["text"], "again\n",
        "{again}"
    );
    server.send(r#"{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
    let reinit = server.next();
    assert_eq!(reinit["id"], 6, "{reinit}");
    assert_eq!(reinit["error"]["code"], -32600, "{reinit}");
    drop(server.stdin.take());
    assert!(server.child.wait().unwrap().success());
}

/// The server's own request, `elicitation/create`, announces no progress
/// token: it will send no progress for it (the protocol library stamps one
/// on every request; the wire takes it out).
#[test]
fn an_escalation_question_carries_no_progress_token() {
    if !common::confined::usable_or_skip(&["--sandbox", "read-only"], "the escalation question") {
        return;
    }
    let mut server = RawServer::spawn_with(&["--sandbox", "read-only"]);
    server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"0"}}}"#);
    assert_eq!(server.next()["id"], 1);
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    server.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo wider","description":"d","sandbox_permissions":"danger-full-access","justification":"a test"}}}"#);
    let asked = server.next();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert!(asked["params"]["message"]
        .as_str()
        .unwrap()
        .contains("echo wider"));
    assert!(
        asked["params"]["_meta"].get("progressToken").is_none(),
        "{asked}"
    );
    let answer =
        serde_json::json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "decline"}});
    server.send(&answer.to_string());
    let result = server.next();
    assert_eq!(result["id"], 2, "{result}");
    assert!(result.to_string().contains("rejected"), "{result}");
}

/// The tool definitions (sent with every request of every turn) weigh at
/// most 6 KB together, with everything a server can offer on (a sandbox
/// with escalation, a yield, the session's cwd, the user's snapshot); and
/// `bash`'s description says what this server does: the cwd follows `cd`
/// or it does not, a snapshot is loaded or not, escalation only where a
/// person can be asked.
#[test]
fn the_tools_weigh_at_most_6_kb_and_say_what_this_server_does() {
    fn listed(args: &[&str], snapshot: &str) -> Vec<Value> {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let workdir = dir.path().display().to_string();
        let mut all = vec!["--workdir", workdir.as_str()];
        all.extend_from_slice(args);
        let mut server = RawServer::spawn_in(
            &all,
            &[
                ("DSH_BASH_SHELL_SNAPSHOT", Path::new(snapshot)),
                ("HOME", &home),
            ],
        );
        server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
        assert_eq!(server.next()["id"], 1);
        server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        server.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
        let listed = server.next();
        listed["result"]["tools"].as_array().unwrap().clone()
    }
    let description = |tools: &[Value]| tools[0]["description"].as_str().unwrap().to_owned();
    let widest = listed(&["--sandbox", "read-only", "--yield-ms", "10000"], "auto");
    let bytes: usize = widest
        .iter()
        .map(|tool| serde_json::to_string(tool).unwrap().len())
        .sum();
    eprintln!("the four tool definitions: {bytes} bytes");
    assert!(bytes <= 6 * 1024, "{bytes} bytes: {widest:#?}");
    let said = description(&widest);
    for true_here in [
        "follows `cd`",
        "aliases are loaded",
        "Sandboxed: read-only",
        "network off",
        "sandbox_permissions",
        "becomes a background task",
        "[changed: …]",
    ] {
        assert!(said.contains(true_here), "{true_here}: {said}");
    }
    let plain = description(&listed(&["--no-persist-cwd"], "off"));
    assert!(plain.contains("pass workdir, not `cd`"), "{plain}");
    for not_here in [
        "follows `cd`",
        "aliases",
        "Sandboxed",
        "justification",
        "background task (the result",
    ] {
        assert!(!plain.contains(not_here), "{not_here}: {plain}");
    }
}
