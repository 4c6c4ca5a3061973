//! `dsh-bash mcp --listen`: who may call (tokens, `Origin`, `Host`, another
//! token's session), the caps, idle expiry and SIGTERM, spoken as raw
//! HTTP/1.1 so the statuses are exactly what is on the wire.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::listening::{exchange, Listening};
use common::raw_http::{
    bearer, open_session, send, tool_call, tool_call_dropped, Answer, ACCEPT, JSON,
};

/// A `tools/call` of `bash` in `session` with `token` (request id 7).
fn call_bash(
    server: &Listening,
    token: &str,
    session: &str,
    extra: &[(&str, &str)],
    arguments: serde_json::Value,
) -> Answer {
    call_bash_as(server, (token, session), 7, extra, arguments)
}

/// [`call_bash`] with request id `id` (calls in flight at once in one
/// session need ids of their own).
fn call_bash_as(
    server: &Listening,
    (token, session): (&str, &str),
    id: u64,
    extra: &[(&str, &str)],
    arguments: serde_json::Value,
) -> Answer {
    let auth = bearer(token);
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "bash", "arguments": arguments}
    })
    .to_string();
    let mut headers = vec![
        JSON,
        ACCEPT,
        ("Authorization", auth.as_str()),
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    headers.extend_from_slice(extra);
    send(server, "POST", &headers, &body)
}

fn plant(marker: &Path) -> serde_json::Value {
    serde_json::json!({"command": format!("touch {}", marker.display()), "description": "plant a marker"})
}

#[test]
fn only_the_token_its_origin_and_its_own_sessions_get_through() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let (first, second) = (
        "first-token-0123456789abcdef",
        "second-token-0123456789abcdef",
    );
    std::fs::write(&tokens, format!("# two clients\n{first}\n\n{second}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let server = Listening::with_tokens(
        tempfile::tempdir().unwrap(),
        &tokens,
        &["--allow-origin", "https://ide.example"],
    );
    let session = open_session(&server, first);
    let marker = dir.path().join("ran");

    // No token, a wrong one, a prefix of the right one, another scheme.
    for auth in [
        None,
        Some("Bearer nope".to_owned()),
        Some(bearer(&first[..10])),
        Some(format!("Basic {first}")),
    ] {
        let mut headers = vec![JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
        if let Some(auth) = &auth {
            headers.push(("Authorization", auth));
        }
        let body = serde_json::json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":plant(&marker)}}).to_string();
        let answer = send(&server, "POST", &headers, &body);
        assert_eq!(answer.status, 401, "{auth:?}: {}", answer.body);
        assert_eq!(
            answer.header("www-authenticate"),
            Some("Bearer realm=\"dsh-bash\"")
        );
    }
    // The right token from a foreign page, and the allowed page on another port.
    for origin in ["https://evil.example", "https://ide.example:8443", "null"] {
        let answer = call_bash(
            &server,
            first,
            &session,
            &[("Origin", origin)],
            plant(&marker),
        );
        assert_eq!(answer.status, 403, "{origin}: {}", answer.body);
        assert!(answer.body.contains("Origin"), "{}", answer.body);
    }
    // A rebinding name in Host.
    let answer = call_bash(
        &server,
        first,
        &session,
        &[("Host", "attacker.example")],
        plant(&marker),
    );
    assert_eq!(answer.status, 403, "{}", answer.body);
    // Userinfo in Host, where parsers disagree on which side is the host.
    let address = server.base.trim_start_matches("http://").to_owned();
    let userinfo = format!("evil@{address}");
    let answer = call_bash(
        &server,
        first,
        &session,
        &[("Host", userinfo.as_str())],
        plant(&marker),
    );
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(answer.body.contains("userinfo"), "{}", answer.body);
    // A list in Host: which one is meant is a guess.
    let listed = format!("{address},evil.example");
    let answer = call_bash(
        &server,
        first,
        &session,
        &[("Host", listed.as_str())],
        plant(&marker),
    );
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(answer.body.contains("one host"), "{}", answer.body);
    // An absolute-form target naming another host.
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "bash", "arguments": plant(&marker)}
    })
    .to_string();
    let text = exchange(
        &address,
        &format!(
            "POST http://evil.example/mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {first}\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
        Duration::from_secs(30),
    );
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("origin form"), "{text}");
    // The other token presenting this session.
    let answer = call_bash(&server, second, &session, &[], plant(&marker));
    assert_eq!(answer.status, 404, "{}", answer.body);
    assert!(!marker.exists(), "a refused request ran its command");

    // The control: the right token, the allowed origin (default port
    // spelled out), its own session.
    let answer = call_bash(
        &server,
        first,
        &session,
        &[("Origin", "https://ide.example:443")],
        plant(&marker),
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.body.contains("\"isError\":false"), "{}", answer.body);
    assert!(marker.exists(), "the allowed request did not run");

    // The health probe needs no token and says nothing else.
    let address = server.base.trim_start_matches("http://");
    let text = exchange(
        address,
        &format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        Duration::from_secs(30),
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("ok\n"), "{text}");
}

#[test]
fn sessions_and_commands_are_capped_with_a_reason() {
    let server = Listening::start(&["--max-sessions", "1", "--max-commands", "1"]);
    let session = open_session(&server, &server.token);
    let answer = send(
        &server,
        "POST",
        &[JSON, ACCEPT, ("Authorization", &bearer(&server.token))],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert!(answer.body.contains("--max-sessions"), "{}", answer.body);

    let started = call_bash(
        &server,
        &server.token,
        &session,
        &[],
        serde_json::json!({"command": "sleep 60", "description": "hold", "run_in_background": true}),
    );
    assert!(
        started.body.contains("started background task"),
        "{}",
        started.body
    );
    let refused = call_bash(
        &server,
        &server.token,
        &session,
        &[],
        serde_json::json!({"command": "echo second", "description": "one more"}),
    );
    assert!(
        refused.body.contains("\"isError\":true"),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("--max-commands"), "{}", refused.body);
    assert!(!refused.body.contains("second\\n"), "{}", refused.body);
}

#[test]
fn sigterm_stops_every_session_and_its_commands() {
    let mut server = Listening::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let pids: Vec<_> = (0..2)
        .map(|n| {
            let session = open_session(&server, &server.token);
            let file = dir.path().join(format!("pid-{n}"));
            let command = format!("echo $$ > {}; exec sleep 300", file.display());
            let answer = call_bash(
                &server,
                &server.token,
                &session,
                &[],
                serde_json::json!({"command": command, "description": "hold", "run_in_background": true}),
            );
            assert!(answer.body.contains("started background task"), "{}", answer.body);
            common::pid_in(&file)
        })
        .collect();
    assert!(pids.iter().all(|&pid| common::alive(pid)));
    let status = server.terminate();
    assert!(
        status.success(),
        "{status:?}: {}",
        server.stderr.lock().unwrap()
    );
    for pid in pids {
        assert!(common::wait_gone(pid), "{pid} outlived the server");
    }
}

#[test]
fn an_idle_session_expires_and_its_commands_stop() {
    // --idle-timeout is raised to the longest timeout plus 10 s: 11 s here.
    let server = Listening::start(&["--max-timeout", "1000", "--idle-timeout", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let session = open_session(&server, &server.token);
    let file = dir.path().join("pid");
    let command = format!("echo $$ > {}; exec sleep 300", file.display());
    let answer = call_bash(
        &server,
        &server.token,
        &session,
        &[],
        serde_json::json!({"command": command, "description": "hold", "run_in_background": true}),
    );
    assert!(
        answer.body.contains("started background task"),
        "{}",
        answer.body
    );
    let pid = common::pid_in(&file);
    let began = Instant::now();
    let deadline = began + Duration::from_secs(60);
    while common::alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the idle session's command is still running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        began.elapsed() >= Duration::from_secs(5),
        "stopped after {:?}, before the session was idle",
        began.elapsed()
    );
    // The session is gone too.
    let answer = call_bash(
        &server,
        &server.token,
        &session,
        &[],
        serde_json::json!({"command": "true", "description": "x"}),
    );
    assert_eq!(answer.status, 404, "{}", answer.body);
}

#[test]
fn tokens_are_checked_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let loose = dir.path().join("loose");
    std::fs::write(&loose, "a-token-that-is-long-enough\n").unwrap();
    std::fs::set_permissions(&loose, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "short\n").unwrap();
    std::fs::set_permissions(&short, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let cases: [(&[&str], Option<&str>, &str); 4] = [
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--token-file",
                loose.to_str().unwrap(),
            ],
            None,
            "chmod 600",
        ),
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--token-file",
                short.to_str().unwrap(),
            ],
            None,
            "at least 16",
        ),
        (&["--listen", "0.0.0.0:0"], None, "not a loopback address"),
        (
            &["--listen", "127.0.0.1:0"],
            Some("tiny"),
            "DSH_BASH_TOKEN is 4 characters",
        ),
    ];
    // A token file someone else owns (they could change the token).
    let foreign = dir.path().join("foreign");
    std::fs::write(&foreign, "a-token-that-is-long-enough\n").unwrap();
    std::fs::set_permissions(
        &foreign,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let am_root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    if am_root {
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
            .args(["mcp", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(&foreign)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert!(stderr.contains("belongs to uid 65534"), "{stderr}");
    } else {
        eprintln!("SKIP the foreign-owner case: it needs root to chown");
    }
    for (args, env, expected) in cases {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
        command.arg("mcp").args(args).env_remove("DSH_BASH_TOKEN");
        if let Some(token) = env {
            command.env("DSH_BASH_TOKEN", token);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn an_executor_call_the_server_cannot_read_runs_nothing() {
    let server = Listening::start(&[]);
    let session = open_session(&server, &server.token);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let auth = bearer(&server.token);
    let call = |extras: serde_json::Value| {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 9, "method": "tools/call",
            "params": {
                "name": "bash",
                "arguments": {"command": format!("touch {}", marker.display())},
                "_meta": {"io.dsh-bash/executor": extras}
            }
        })
        .to_string();
        send(
            &server,
            "POST",
            &[
                JSON,
                ACCEPT,
                ("Authorization", auth.as_str()),
                ("Mcp-Session-Id", session.as_str()),
                ("MCP-Protocol-Version", "2025-06-18"),
            ],
            &body,
        )
    };
    // A narrowing with a field this server does not know is refused whole.
    for extras in [
        serde_json::json!({"sandbox_mode": "read-only", "sandbox_profile": "strict"}),
        serde_json::json!({"network": "sideways"}),
        serde_json::json!("read-only"),
    ] {
        let answer = call(extras.clone());
        assert!(
            answer.body.contains("INVALID_ARGUMENTS"),
            "{extras}: {}",
            answer.body
        );
        assert!(answer.body.contains("\"isError\":true"), "{}", answer.body);
        assert!(!marker.exists(), "{extras} ran the command");
    }
    // The control: a readable one runs, answered with the exact facts.
    let answer = call(serde_json::json!({}));
    assert!(answer.body.contains("\"ran\""), "{}", answer.body);
    assert!(marker.exists());
}

/// A 2026-07-28 `tools/call` of `bash`, with the headers and `_meta` that
/// version requires, carrying `session` as a (meaningless) session id.
fn call_2026(server: &Listening, session: &str, arguments: serde_json::Value) -> Answer {
    call_2026_with(server, session, arguments, serde_json::json!({}))
}

/// [`call_2026`] from a client with these capabilities.
fn call_2026_with(
    server: &Listening,
    session: &str,
    arguments: serde_json::Value,
    capabilities: serde_json::Value,
) -> Answer {
    let auth = bearer(&server.token);
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": {
            "name": "bash",
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": capabilities
            }
        }
    })
    .to_string();
    send(
        server,
        "POST",
        &[
            JSON,
            ACCEPT,
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "bash"),
            ("Mcp-Session-Id", session),
        ],
        &body,
    )
}

#[test]
fn a_2026_request_cannot_open_sessions_of_its_own_with_an_id() {
    let server = Listening::start(&["--max-commands", "1", "--max-sessions", "2"]);
    let hold = serde_json::json!({"command": "sleep 60", "description": "hold", "run_in_background": true});
    let first = call_2026(&server, "bogus-1", hold.clone());
    assert!(
        first.body.contains("started background task"),
        "{}",
        first.body
    );
    // Another made-up id is the same token's one 2026 session: its cap holds.
    let second = call_2026(&server, "bogus-2", hold);
    assert!(second.body.contains("--max-commands"), "{}", second.body);
}

#[test]
fn closing_and_addressing_what_is_not_there() {
    let server = Listening::start(&[]);
    let auth = bearer(&server.token);
    let answer = send(
        &server,
        "DELETE",
        &[
            ("Authorization", &auth),
            ("Mcp-Session-Id", "no-such-session"),
        ],
        "",
    );
    assert_eq!(answer.status, 404, "{}", answer.body);
    let session = open_session(&server, &server.token);
    let answer = send(
        &server,
        "DELETE",
        &[("Authorization", &auth), ("Mcp-Session-Id", &session)],
        "",
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Two Host headers: which one would be checked is a guess; refused.
    let address = server.base.trim_start_matches("http://").to_owned();
    let answer = send(
        &server,
        "POST",
        &[
            JSON,
            ACCEPT,
            ("Authorization", &auth),
            ("Host", &address),
            ("Host", "attacker.example"),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    assert_eq!(answer.status, 400, "{}", answer.body);
}

#[test]
fn idle_connections_past_the_cap_wait_and_hold_no_descriptor() {
    let server = Listening::start(&["--max-connections", "2"]);
    let address = server.base.trim_start_matches("http://").to_owned();
    let idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&address).unwrap())
        .collect();
    // Two connections hold both slots (whatever they send): the third is
    // not served...
    let mut third = TcpStream::connect(&address).unwrap();
    write!(
        third,
        "GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let mut byte = [0u8; 1];
    let early = third.read(&mut byte);
    assert!(early.is_err(), "answered past the cap: {early:?}");
    // ...until one of them goes.
    drop(idle);
    third
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut text = String::new();
    third.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[test]
fn over_http_the_servers_sandbox_is_a_ceiling_unless_escalation_is_allowed() {
    if !common::confined::usable_or_skip(&["--sandbox", "read-only"], "escalation over HTTP") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("escaped");
    let escalate = serde_json::json!({
        "command": format!("touch {}", marker.display()),
        "description": "write outside",
        "sandbox_permissions": "danger-full-access",
        "justification": "the test asks"
    });
    let elicits = serde_json::json!({"elicitation": {}});
    // A client that can answer questions is not asked: the token holder
    // would approve itself.
    let server = Listening::start(&["--sandbox", "read-only"]);
    let answer = call_2026_with(&server, "any", escalate.clone(), elicits.clone());
    assert!(
        answer.body.contains("no approval channel"),
        "{}",
        answer.body
    );
    assert!(!answer.body.contains("requestState"), "{}", answer.body);
    assert!(!marker.exists());
    drop(server);
    // With --allow-escalation the operator lets clients approve: asked.
    let server = Listening::start(&["--sandbox", "read-only", "--allow-escalation"]);
    let answer = call_2026_with(&server, "any", escalate, elicits);
    assert!(answer.body.contains("requestState"), "{}", answer.body);
    assert!(!marker.exists(), "ran before anybody answered");
}

#[test]
fn a_request_that_says_2026_in_its_body_shares_the_tokens_session() {
    let server = Listening::start(&["--max-commands", "1"]);
    let auth = bearer(&server.token);
    // rmcp serves a request with the 2026 `_meta` without a session,
    // whatever its header says: it must land in the token's one session.
    let call = |command: &str| {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 12, "method": "tools/call",
            "params": {
                "name": "bash",
                "arguments": {"command": command, "description": "x", "run_in_background": true},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2025-11-25",
                    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                    "io.modelcontextprotocol/clientCapabilities": {}
                }
            }
        })
        .to_string();
        send(
            &server,
            "POST",
            &[
                JSON,
                ACCEPT,
                ("Authorization", auth.as_str()),
                ("MCP-Protocol-Version", "2025-11-25"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "bash"),
            ],
            &body,
        )
    };
    let first = call("sleep 60");
    assert!(
        first.body.contains("started background task"),
        "{}",
        first.body
    );
    let second = call("sleep 60");
    assert!(second.body.contains("--max-commands"), "{}", second.body);
}

#[test]
fn one_token_cannot_open_more_sessions_than_its_share_even_at_once() {
    let server = std::sync::Arc::new(Listening::start(&["--max-sessions-per-token", "2"]));
    let threads: Vec<_> = (0..12)
        .map(|_| {
            let server = std::sync::Arc::clone(&server);
            std::thread::spawn(move || {
                let auth = bearer(&server.token);
                send(
                    &server,
                    "POST",
                    &[JSON, ACCEPT, ("Authorization", &auth)],
                    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
                )
            })
        })
        .collect();
    let answers: Vec<Answer> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let opened = answers
        .iter()
        .filter(|a| a.header("mcp-session-id").is_some())
        .count();
    assert_eq!(
        opened,
        2,
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert!(
        answers
            .iter()
            .filter(|a| a.header("mcp-session-id").is_none())
            .all(|a| a.status >= 500 && a.body.contains("per-token")),
        "{:?}",
        answers
            .iter()
            .map(|a| (a.status, a.body.clone()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_body_that_never_arrives_is_cut_off() {
    let server = Listening::start(&[]);
    let address = server.base.trim_start_matches("http://").to_owned();
    let began = Instant::now();
    let text = exchange(
        &address,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{",
            server.token
        ),
        Duration::from_secs(60),
    );
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
}

#[test]
fn no_shell_is_ever_found_in_the_working_directory() {
    // A checkout that ships `bin/bash`, a server started there with a
    // relative PATH entry: neither the host-death watchdog (which runs
    // outside any sandbox) nor a command's shell is that file.
    let checkout = tempfile::tempdir().unwrap();
    let marker = checkout.path().join("planted-bash-ran");
    std::fs::create_dir(checkout.path().join("bin")).unwrap();
    let planted = checkout.path().join("bin/bash");
    std::fs::write(
        &planted,
        format!(
            "#!/bin/sh\ntouch {}\nexec /bin/bash \"$@\"\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &planted,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let cwd = checkout.path().to_owned();
    let server = Listening::launch(dir, &token_file, &[], move |command| {
        command.current_dir(&cwd).env("PATH", "bin:/usr/bin:/bin");
    });
    let session = open_session(&server, &server.token);
    let answer = call_bash(
        &server,
        &server.token,
        &session,
        &[],
        serde_json::json!({"command": "true", "description": "x"}),
    );
    assert!(answer.body.contains("\"isError\":false"), "{}", answer.body);
    assert!(!marker.exists(), "the planted bash ran");
}

#[test]
fn an_oversized_body_is_refused_before_it_is_sent() {
    let server = Listening::start(&[]);
    let address = server.base.trim_start_matches("http://").to_owned();
    let text = exchange(
        &address,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n",
            server.token
        ),
        Duration::from_secs(30),
    );
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(!text.contains("100 Continue"), "{text}");
}

/// No confined command can learn a token: the token file is hidden under
/// each backend (bubblewrap binds an empty file over it, Landlock grants
/// reads around it), as root and as uid 65534, with `--allow-escalation`;
/// under bubblewrap the server's command line is not visible either (its
/// own pid namespace).
#[test]
fn no_confined_command_can_learn_a_token() {
    use common::confined::{usable_as_or_skip, User};
    for backend in ["bwrap", "landlock"] {
        for user in [User::Root, User::Nobody] {
            let probe = ["--sandbox", "read-only", "--sandbox-backend", backend];
            if !usable_as_or_skip(user, &probe, &format!("the hidden token under {backend}")) {
                continue;
            }
            let sandbox = ["--sandbox", "workspace-write", "--sandbox-backend", backend];
            let mut args = sandbox.to_vec();
            args.push("--allow-escalation");
            let server = Listening::start_as(user, &args);
            let token_file = server.dir.path().join("token");
            let beside = server.dir.path().join("beside");
            std::fs::write(&beside, "readable-control\n").unwrap();
            if user == User::Nobody {
                common::confined::chown(&beside, common::confined::NOBODY);
            }
            let session = open_session(&server, &server.token);
            let command = format!(
                "cat {} {}; cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
                token_file.display(),
                beside.display()
            );
            let answer = call_bash(
                &server,
                &server.token,
                &session,
                &[],
                serde_json::json!({"command": command, "description": "look for the token"}),
            );
            let what = format!("{backend} as {user:?}");
            assert_eq!(answer.status, 200, "{what}: {}", answer.body);
            assert!(
                answer.body.contains("readable-control"),
                "{what}: the control file was not read: {}",
                answer.body
            );
            assert!(
                !answer.body.contains(&server.token),
                "{what}: a confined command read the token: {}",
                answer.body
            );
            assert!(
                backend != "bwrap" || !answer.body.contains("--token-file"),
                "{what}: the server's command line was visible: {}",
                answer.body
            );
        }
    }
}

/// Bodies that one token declares and never sends hold that token's share
/// of the body budget, not everyone's: another token is answered while
/// they still hang, and no more of them are admitted than the share holds
/// (hyper answers `100 Continue` only once a body is admitted and read).
#[test]
fn one_tokens_hanging_bodies_do_not_starve_another_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let (first, second) = (
        "first-token-0123456789abcdef",
        "second-token-0123456789abcdef",
    );
    std::fs::write(&tokens, format!("{first}\n{second}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let server = Listening::with_tokens(tempfile::tempdir().unwrap(), &tokens, &[]);
    let address = server.base.trim_start_matches("http://").to_owned();
    // 16 bodies promising 4 MiB each (the whole server-wide budget, were
    // promises reserved) and 4 chunked ones, each trickling 1 KiB and then
    // hanging: budget is taken as bytes arrive, so they hold 20 KiB.
    let kib = "x".repeat(1024);
    let hanging: Vec<TcpStream> = (0..20)
        .map(|n| {
            let mut stream = TcpStream::connect(&address).unwrap();
            let framing = if n < 16 {
                "Content-Length: 4194304"
            } else {
                "Transfer-Encoding: chunked"
            };
            stream
                .write_all(
                    format!(
                        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {first}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .unwrap();
            let part = if n < 16 { kib.clone() } else { format!("400\r\n{kib}\r\n") };
            stream.write_all(part.as_bytes()).unwrap();
            stream
        })
        .collect();
    // The other token's calls, and the first token's own, are answered
    // while those hang: not held behind them (before the fix each waited
    // for the hanging bodies' 10 s deadline). The bound is a fail-safe,
    // not a measurement.
    for token in [second, first] {
        let began = Instant::now();
        let session = open_session(&server, token);
        let answer = call_bash(
            &server,
            token,
            &session,
            &[],
            serde_json::json!({"command": "echo served", "description": "d"}),
        );
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(answer.body.contains("served"), "{}", answer.body);
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "held {:?} behind the hanging bodies",
            began.elapsed()
        );
    }
    drop(hanging);
}

/// Opens the FIFO `go` without blocking and writes a line to its reader;
/// false if it has none (the command that would read it is gone), where a
/// blocking open would wait forever.
fn release(go: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(go)
    {
        Ok(mut fifo) => {
            fifo.write_all(b"go\n").unwrap();
            true
        }
        Err(err) if err.raw_os_error() == Some(libc::ENXIO) => false,
        Err(err) => panic!("opening {}: {err}", go.display()),
    }
}

/// Waits (fail-safe 30 s) until the server's stderr says `line`.
fn await_log(server: &Listening, line: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !server.stderr.lock().unwrap().contains(line) {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never logged {line:?}: {}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A 2025-06-18 client that disconnects mid-call loses nothing: the
/// command keeps its slot while it runs, the session's next result
/// carries a notice naming the kept result, and `bash_output` hands it
/// out once.
#[test]
fn a_client_that_goes_away_mid_call_finds_its_result_kept() {
    let server = Listening::start(&["--max-commands", "1"]);
    let session = open_session(&server, &server.token);
    let dir = tempfile::tempdir().unwrap();
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    assert!(Command::new("mkfifo").arg(&go).status().unwrap().success());
    let command = format!(
        "exec 3<>{}; touch {}; read _ <&3; echo handed-over",
        go.display(),
        started.display()
    );
    // The call, on a connection the client then drops.
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).unwrap();
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": command, "description": "wait"}}
    })
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {}\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {}\r\n\r\n{body}",
        server.token,
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stream);
    await_log(
        &server,
        "a client went away before the answer to its request",
    );
    // Its command still holds its slot.
    let refused = call_bash(
        &server,
        &server.token,
        &session,
        &[],
        serde_json::json!({"command": "true", "description": "d"}),
    );
    assert!(refused.body.contains("--max-commands"), "{}", refused.body);
    // The command ends; its result is kept, and said so in the log.
    assert!(release(&go), "the command was gone before it was released");
    await_log(&server, "the result is kept");
    let next = call_bash(
        &server,
        &server.token,
        &session,
        &[],
        serde_json::json!({"command": "echo next", "description": "d"}),
    );
    assert!(next.body.contains("next"), "{}", next.body);
    assert!(
        next.body.contains("the result is kept as kept-1"),
        "{}",
        next.body
    );
    let read = |id: &str| {
        let auth = bearer(&server.token);
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 12, "method": "tools/call",
            "params": {"name": "bash_output", "arguments": {"task_id": id}}
        })
        .to_string();
        let headers = [
            JSON,
            ACCEPT,
            ("Authorization", auth.as_str()),
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", "2025-06-18"),
        ];
        send(&server, "POST", &headers, &body)
    };
    let kept = read("kept-1");
    assert!(kept.body.contains("handed-over"), "{}", kept.body);
    assert!(kept.body.contains(r#""task_id":"kept-1""#), "{}", kept.body);
    // Read again while kept (a read whose own client went away loses
    // nothing); an id never kept is unknown.
    let again = read("kept-1");
    assert!(again.body.contains("handed-over"), "{}", again.body);
    let never = read("kept-9");
    assert!(never.body.contains("unknown"), "{}", never.body);
}

/// A server stopped (SIGSTOP) for longer than the idle timeout keeps its
/// sessions: idle time counts only while the server can run. The call in
/// flight across the stall gets its answer, the request sent during it
/// is answered, and the session's background task still runs.
#[test]
fn a_stall_longer_than_the_idle_timeout_expires_nothing() {
    // --idle-timeout is raised to the longest timeout plus 10 s: 11 s.
    let server = Listening::start(&["--max-timeout", "1000", "--idle-timeout", "1"]);
    let session = open_session(&server, &server.token);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let hold = format!("echo $$ > {}; exec sleep 300", pid_file.display());
    let started = call_bash(
        &server,
        &server.token,
        &session,
        &[],
        serde_json::json!({"command": hold, "description": "hold", "run_in_background": true}),
    );
    assert!(
        started.body.contains("started background task"),
        "{}",
        started.body
    );
    let task = common::pid_in(&pid_file);
    let (began, go) = (dir.path().join("began"), dir.path().join("go"));
    assert!(Command::new("mkfifo").arg(&go).status().unwrap().success());
    let across = format!(
        // The FIFO is open (read-write: no wait for a writer) before
        // `began` says so, so releasing it never finds no reader.
        "exec 3<>{}; touch {}; read _ <&3; echo across",
        go.display(),
        began.display()
    );
    let in_flight = std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            call_bash(
                &server,
                &server.token,
                &session,
                &[],
                serde_json::json!({"command": across, "description": "across the stall"}),
            )
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while !began.exists() {
            assert!(Instant::now() < deadline, "the call never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = server.child.id() as i32;
        // SAFETY: kill(2) on the server this test started, valid signals.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        // No reader: the call already hit its 1 s timeout on a slow
        // machine; it still owes an answer, which is what is checked.
        let _ = release(&go);
        // The stall itself, longer than the 11 s idle timeout: this sleep
        // is what is tested, not a synchronisation.
        std::thread::sleep(Duration::from_secs(13));
        let during = scope.spawn(|| {
            call_bash_as(&server, (&server.token, &session), 8, &[], serde_json::json!({"command": "echo after", "description": "sent during the stall"}))
        });
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let during = during.join().unwrap();
        assert_eq!(during.status, 200, "{}", during.body);
        assert!(during.body.contains("after\\n"), "{}", during.body);
        call.join().unwrap()
    });
    // An answer, not a dropped stream: the output, or the timeout that
    // the 13 s really were for a call of at most 1 s.
    assert!(
        in_flight.body.contains(r#""id":7"#) && in_flight.body.contains(r#""result""#),
        "{}",
        in_flight.body
    );
    assert!(
        common::alive(task),
        "the session's background task was stopped"
    );
}

#[test]
fn each_session_keeps_the_directory_its_commands_cd_to() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    for sub in ["a", "b"] {
        std::fs::create_dir(ws_path.join(sub)).unwrap();
    }
    let workdir = ws_path.display().to_string();
    let server = Listening::start(&["--workdir", &workdir]);
    let first = open_session(&server, &server.token);
    let second = open_session(&server, &server.token);
    let bash = |session: &str, command: &str| {
        let arguments = serde_json::json!({"command": command, "description": "d"});
        let answer = call_bash(&server, &server.token, session, &[], arguments);
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.body
    };
    let moved = bash(&first, "cd a");
    assert!(moved.contains(&format!("[cwd: {workdir}/a]")), "{moved}");
    let moved = bash(&second, "cd b");
    assert!(moved.contains(&format!("[cwd: {workdir}/b]")), "{moved}");
    let here = bash(&first, "pwd");
    assert!(here.contains(&format!("{workdir}/a\\n")), "{here}");
    assert!(!here.contains("[cwd:"), "unchanged: no line: {here}");
    let here = bash(&second, "pwd");
    assert!(here.contains(&format!("{workdir}/b\\n")), "{here}");
}

/// A `bash_output` whose answer the client dropped is read again by
/// position: the `[position: …]` of the read before it, passed as
/// `since`, brings back exactly what the lost answer held; without it
/// that output would be gone (the next default read says no new output).
/// In both protocol eras.
#[test]
fn a_read_whose_answer_was_dropped_is_read_again_by_position() {
    let server = Listening::start(&[]);
    for era in ["2025-06-18", "2026-07-28"] {
        let session = if era == "2025-06-18" {
            open_session(&server, &server.token)
        } else {
            String::new()
        };
        let dir = tempfile::tempdir().unwrap();
        let (go, done) = (dir.path().join("go"), dir.path().join("done"));
        assert!(Command::new("mkfifo").arg(&go).status().unwrap().success());
        let command = format!(
            "echo alpha; exec 3<>{}; read _ <&3; echo beta; echo gamma >&2; touch {}; exec sleep 60",
            go.display(),
            done.display()
        );
        let started = tool_call(
            &server,
            era,
            &session,
            "bash",
            serde_json::json!({"command": command, "description": "d", "run_in_background": true}),
        );
        let task = started
            .body
            .split_once(r#""task_id":""#)
            .and_then(|(_, rest)| rest.split_once('"'))
            .unwrap_or_else(|| panic!("{era}: {}", started.body))
            .0
            .to_owned();
        let read = |since: Option<&str>| {
            let mut args = serde_json::json!({"task_id": task});
            if let Some(since) = since {
                args["since"] = serde_json::json!(since);
            }
            tool_call(&server, era, &session, "bash_output", args).body
        };
        // The first read, synchronised on its output.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut first = read(None);
        while !first.contains("alpha") {
            assert!(Instant::now() < deadline, "{era}: {first}");
            std::thread::sleep(Duration::from_millis(20));
            first = read(None);
        }
        assert!(first.contains("[position: 6:0]"), "{era}: {first}");
        assert!(release(&go), "{era}: the command was gone");
        while !done.exists() {
            assert!(Instant::now() < deadline, "{era}: never reached done");
            std::thread::sleep(Duration::from_millis(20));
        }
        // This read's answer is lost.
        tool_call_dropped(
            &server,
            era,
            &session,
            "bash_output",
            serde_json::json!({"task_id": task}),
        );
        let after = read(None);
        assert!(after.contains("(no new output)"), "{era}: {after}");
        assert!(!after.contains("beta"), "{era}: {after}");
        // Asked again from the position the read before it showed.
        let again = read(Some("6:0"));
        assert!(
            again.contains(r"beta\n[stderr]\ngamma\n[status: running] [position: 11:6]"),
            "{era}: {again}"
        );
        assert!(again.contains(r#""position":"11:6""#), "{era}: {again}");
        tool_call(
            &server,
            era,
            &session,
            "bash_kill",
            serde_json::json!({"task_id": task}),
        );
    }
}

/// A session that closes stops its background tasks all at once, not one
/// after another each waiting out its grace: the later tasks are told to
/// stop (SIGTERM) while the first, which ignores it, is still alive.
#[test]
fn a_closed_sessions_tasks_are_stopped_together() {
    let server = Listening::start(&["--shell-snapshot", "off"]);
    let session = open_session(&server, &server.token);
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.pid");
    let log = dir.path().join("log");
    let stubborn = format!(
        "trap '' TERM; echo $$ > {}.tmp; mv {0}.tmp {0}; while :; do sleep 0.1; done",
        first.display()
    );
    let witness = |n: usize| {
        format!(
            "trap 'if kill -0 $(cat {first}) 2>/dev/null; then echo alive >> {log}; else echo dead >> {log}; fi; exit 0' TERM; touch {dir}/ready-{n}; while :; do sleep 0.1; done",
            first = first.display(),
            log = log.display(),
            dir = dir.path().display()
        )
    };
    let mut commands = vec![stubborn];
    commands.extend((1..=2).map(witness));
    for command in commands {
        let answer = tool_call(
            &server,
            "2025-06-18",
            &session,
            "bash",
            serde_json::json!({"command": command, "description": "d", "run_in_background": true}),
        );
        assert!(
            answer.body.contains("started background task"),
            "{}",
            answer.body
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(first.exists()
        && dir.path().join("ready-1").exists()
        && dir.path().join("ready-2").exists())
    {
        assert!(Instant::now() < deadline, "the tasks never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let auth = bearer(&server.token);
    let answer = send(
        &server,
        "DELETE",
        &[("Authorization", &auth), ("Mcp-Session-Id", &session)],
        "",
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    while read().lines().count() < 2 {
        assert!(
            Instant::now() < deadline,
            "not every task was stopped: {}",
            read()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        read(),
        "alive\nalive\n",
        "a later task was stopped only after the first was gone"
    );
}
