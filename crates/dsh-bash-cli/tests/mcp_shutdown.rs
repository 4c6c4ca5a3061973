//! `dsh-bash mcp` ends its session when stdin closes, even with a call in
//! flight: the command is stopped (with the short shutdown grace) and the
//! server exits on its own, before a client would kill it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next()),
            Some("Z" | "X")
        )
    })
}

#[test]
fn closing_stdin_mid_call_stops_the_command_and_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut server = Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut send = |message: serde_json::Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"id\":1"), "{line}");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // A TERM-ignoring command: only the kill after the grace ends it.
    let command = format!(
        "echo $$ > {}; trap '' TERM; sleep 1000 & wait",
        pidfile.display()
    );
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": command, "description": "wait forever"}}}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let shell: i32 = loop {
        assert!(Instant::now() < deadline, "the command never started");
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let closed = Instant::now();
    drop(stdin);
    // Fail-safe bound only; the figure is printed, not asserted.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server never exited");
        std::thread::sleep(Duration::from_millis(10));
    };
    println!("server exited {:?} after stdin closed", closed.elapsed());
    assert!(
        status.success(),
        "the server did not exit on its own: {status}"
    );
    assert!(!alive(shell), "the command {shell} outlived its session");
}
