//! `dsh-bash mcp` ends its session when stdin closes, even with a call in
//! flight: the command is stopped (with the short shutdown grace) and the
//! server exits on its own, before a client would kill it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::{alive, RawServer};

#[test]
fn closing_stdin_mid_call_stops_the_command_and_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut server = RawServer::start();
    // A TERM-ignoring command: only the kill after the grace ends it.
    let command = format!(
        "echo $$ > {}; trap '' TERM; sleep 1000 & wait",
        pidfile.display()
    );
    server.send(
        &serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": command, "description": "wait forever"}}})
        .to_string(),
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
    drop(server.stdin.take());
    // Fail-safe bound only; the figure is printed, not asserted.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
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
