//! `dsh-bash mcp` answers every malformed message per JSON-RPC 2.0 instead
//! of leaving the client waiting, and keeps serving afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

#[test]
fn malformed_messages_get_their_json_rpc_errors() {
    let mut server = Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut send = |line: &str| {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    };
    let mut next = || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<serde_json::Value>(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    assert_eq!(next()["id"], 1);
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
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
    ];
    for (line, code, id) in cases {
        send(line);
        let reply = next();
        assert_eq!(reply["error"]["code"], code, "{line} -> {reply}");
        assert_eq!(reply["id"], id, "{line} -> {reply}");
        assert_eq!(reply["jsonrpc"], "2.0");
    }
    // Over the size limit: answered, dropped, and the stream stays in step.
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"ping\",\"params\":{{\"x\":\"{}\"}}}}",
        "x".repeat(16 << 20)
    );
    send(&huge);
    let reply = next();
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert_eq!(reply["id"], serde_json::Value::Null);
    // A byte-order mark is ignored.
    send("\u{feff}{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\"}");
    let reply = next();
    assert_eq!(reply["id"], 11, "{reply}");
    assert!(reply.get("result").is_some(), "{reply}");
    // Still serving.
    send(
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo fine","description":"d"}}}"#,
    );
    let reply = next();
    assert_eq!(reply["id"], 9, "{reply}");
    assert_eq!(
        reply["result"]["structuredContent"]["stdout"]["text"],
        "fine\n"
    );
    drop(stdin);
    assert!(server.wait().unwrap().success());
}
