//! An approved escalation runs where the person was told, through the real
//! binary over stdio MCP, each backend confining the other calls, as root
//! and as uid 65534: a confined call that puts a symlink where the
//! session's followed directory was sends the next call back to the
//! session's own directory (and says so), the question shows the canonical
//! path, and a symlink put on the approved directory's path while the
//! question is open makes the command refuse to start rather than run
//! where the link points.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};

use common::confined::{as_user, base, binary, chown_tree, each_backend_and_user, User, NOBODY};
use common::RawServer;
use serde_json::{json, Value};

/// `mcp` under `workspace-write` in `ws`, as `user`, nothing sent yet.
fn spawn(user: User, backend: &str, ws: &Path) -> RawServer {
    let mut command = as_user(user, binary().to_str().unwrap());
    command
        .args([
            "mcp",
            "--sandbox",
            "workspace-write",
            "--sandbox-backend",
            backend,
        ])
        .arg("--workdir")
        .arg(ws)
        .env("DSH_BASH_SHELL_SNAPSHOT", "off");
    RawServer::spawn_command(command, std::process::Stdio::null())
}

/// A workspace with a `sub` directory and a directory outside it, made
/// for `user`: the workspace's canonical path and the outside one.
fn places(name: &str, user: User) -> (PathBuf, PathBuf) {
    let root = base().join(name);
    let (ws, outside) = (root.join("ws"), root.join("outside"));
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    if user == User::Nobody {
        chown_tree(&root, NOBODY);
    }
    (std::fs::canonicalize(&ws).unwrap(), outside)
}

/// [`spawn`], initialized with elicitation declared (2025-06-18).
fn start(user: User, backend: &str, ws: &Path) -> RawServer {
    let mut server = spawn(user, backend, ws);
    server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"0"}}}"#);
    assert_eq!(server.next()["id"], 1);
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    server
}

fn call(server: &mut RawServer, id: u64, arguments: Value) {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "bash", "arguments": arguments}});
    server.send(&request.to_string());
}

fn text(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply}"))
        .to_owned()
}

fn answer(server: &mut RawServer, asked: &Value, action: &str) {
    let reply = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": action}});
    server.send(&reply.to_string());
}

#[test]
fn an_approved_escalation_runs_where_the_person_was_told() {
    each_backend_and_user("the escalation's working directory", |user, backend| {
        let (ws, outside) = places(&format!("escalation-cwd-{backend}-{user:?}"), user);
        let mut server = start(user, backend, &ws);

        // The session follows `cd d2`; a confined call swaps d2 for a link.
        call(
            &mut server,
            2,
            json!({"command": "mkdir d2 && cd d2", "description": "d"}),
        );
        assert!(text(&server.next()).contains("[cwd:"));
        let swap = format!("rmdir d2 && ln -s {} d2", outside.display());
        call(
            &mut server,
            3,
            json!({"command": swap, "description": "d", "workdir": ws}),
        );
        let swapped = server.next();
        assert!(ws.join("d2").is_symlink(), "{swapped}");

        // The escalation starts back in the workspace, and says why.
        call(
            &mut server,
            4,
            json!({"command": "pwd -P; touch here", "description": "d",
            "sandbox_permissions": "danger-full-access", "justification": "a test"}),
        );
        let asked = server.next();
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        let question = asked["params"]["message"].as_str().unwrap().to_owned();
        let shown = format!("Working directory: {}\n", ws.display());
        assert!(question.contains(&shown), "{question}");
        answer(&mut server, &asked, "accept");
        let ran = text(&server.next());
        assert!(ran.starts_with(&format!("{}\n", ws.display())), "{ran}");
        assert!(ran.contains("a symbolic link was put on its path"), "{ran}");
        assert!(!outside.join("here").exists(), "ran where the link points");

        // A link put on the approved path while the question is open.
        call(
            &mut server,
            5,
            json!({"command": "pwd -P; touch there", "description": "d",
            "workdir": "sub", "sandbox_permissions": "danger-full-access", "justification": "a test"}),
        );
        let asked = server.next();
        let question = asked["params"]["message"].as_str().unwrap().to_owned();
        assert!(
            question.contains(&format!(
                "Working directory: {}\n",
                ws.join("sub").display()
            )),
            "{question}"
        );
        std::fs::rename(ws.join("sub"), ws.join("sub.old")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("sub")).unwrap();
        answer(&mut server, &asked, "accept");
        let refused = server.next();
        let said = refused.to_string();
        assert!(
            said.contains("has a symbolic link on its path since it was approved"),
            "{said}"
        );
        assert!(
            !outside.join("there").exists(),
            "ran where the link points: {said}"
        );
        drop(server.stdin.take());
        let _ = server.child.wait();
    });
}

/// On MCP 2026-07-28 the question goes back with the call's result and the
/// client retries with the answer: a link put on the working directory's
/// path in between makes the answer stale (the question would now read
/// differently), never a yes for where the link points.
#[test]
fn a_retried_answer_counts_only_for_the_question_the_person_read() {
    each_backend_and_user(
        "the 2026-07-28 retry's working directory",
        |user, backend| {
            let (ws, outside) = places(&format!("escalation-retry-{backend}-{user:?}"), user);
            let mut server = spawn(user, backend, &ws);
            let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}});
            let escalated = json!({"command": "pwd -P; touch there", "description": "d",
            "workdir": "sub", "sandbox_permissions": "danger-full-access", "justification": "a test"});
            let send = |server: &mut RawServer, id: u64, params: Value| {
                let mut params = params;
                params["_meta"] = meta.clone();
                server.send(
                    &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
                        .to_string(),
                );
                server.next()
            };
            let asked = send(
                &mut server,
                1,
                json!({"name": "bash", "arguments": escalated}),
            );
            let state = asked["result"]["requestState"]
                .as_str()
                .unwrap_or_else(|| panic!("{asked}"))
                .to_owned();
            assert!(
                asked
                    .to_string()
                    .contains(&format!("Working directory: {}", ws.join("sub").display())),
                "{asked}"
            );
            let swap = format!("mv sub sub.old && ln -s {} sub", outside.display());
            let swapped = send(
                &mut server,
                2,
                json!({"name": "bash", "arguments": {"command": swap, "description": "d"}}),
            );
            assert!(ws.join("sub").is_symlink(), "{swapped}");
            let retried = send(
                &mut server,
                3,
                json!({"name": "bash", "arguments": escalated,
            "requestState": state, "inputResponses": {"approval": {"action": "accept"}}}),
            );
            let said = retried.to_string();
            assert!(said.contains("now reads differently"), "{said}");
            assert!(
                !outside.join("there").exists(),
                "ran where the link points: {said}"
            );
            drop(server.stdin.take());
            let _ = server.child.wait();
        },
    );
}
