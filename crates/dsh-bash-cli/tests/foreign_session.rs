//! A server whose session's leader lies outside its pid namespace — a
//! server started in a container by a client that made no session of its
//! own (Claude Code starts its MCP servers so), where `getsid` says 0 —
//! runs commands and stops their leftovers, and confines them under each
//! backend as root and as uid 65534, with nothing panicking in its log.
//!
//! The server runs as pid 1 of a new pid namespace (`unshare --pid --fork
//! --mount-proc`), its session inherited from outside; the unconfined
//! test's first command reads the server's session from `/proc/1/stat`
//! and asserts it is 0, so the setup is known to make the case.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::confined::{base, binary, chown_tree, each_backend_and_user, skip, User, NOBODY};
use common::RawServer;
use serde_json::{json, Value};

/// `unshare` that gives the program a pid namespace of its own with a
/// `/proc` to match, or `None` (skipped loudly) where namespaces cannot be
/// made here.
fn unshare_or_skip() -> Option<Command> {
    let mut flags = vec!["--pid", "--fork", "--kill-child", "--mount-proc"];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        flags.extend(["--user", "--map-root-user"]);
    }
    let usable = Command::new("unshare")
        .args(&flags)
        .arg("true")
        .status()
        .is_ok_and(|status| status.success());
    if !usable {
        skip("a server in a pid namespace of its own: `unshare --pid` fails here");
        return None;
    }
    let mut command = Command::new("unshare");
    command.args(&flags);
    Some(command)
}

/// `mcp ARGS` as `user` in a pid namespace of its own, initialized; its
/// log to `log`.
fn start(user: User, args: &[&str], log: &Path) -> Option<RawServer> {
    let mut command = unshare_or_skip()?;
    if user == User::Nobody {
        command.args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ]);
    }
    command
        .arg(binary())
        .arg("mcp")
        .args(args)
        .env("DSH_BASH_SHELL_SNAPSHOT", "off")
        .env("RUST_BACKTRACE", "0");
    let mut server = RawServer::spawn_command(command, std::fs::File::create(log).unwrap());
    server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
    assert_eq!(server.next()["id"], 1);
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    Some(server)
}

/// The reply to `bash` with `command`, as call `id`.
fn bash(server: &mut RawServer, id: u64, command: &str) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": command, "description": "check"}}});
    server.send(&request.to_string());
    loop {
        let reply = server.next();
        if reply["id"] == id {
            return reply["result"].clone();
        }
    }
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}"))
}

fn logged(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// The server's log holds no panic.
fn no_panic(log: &Path, context: &str) {
    let text = logged(log);
    assert!(
        !text.contains("panicked"),
        "{context}: the server panicked:\n{text}"
    );
}

fn workspace(name: &str, user: User) -> PathBuf {
    let root = base().join(name);
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    if user == User::Nobody {
        chown_tree(&root, NOBODY);
    }
    std::fs::canonicalize(&ws).unwrap()
}

#[test]
fn an_unconfined_server_in_a_foreign_session_runs_and_stops_leftovers() {
    let ws = workspace("foreign-session-unconfined", User::Root);
    let log = ws.parent().unwrap().join("server.log");
    let Some(mut server) = start(User::Root, &["--workdir", ws.to_str().unwrap()], &log) else {
        return;
    };
    // An unconfined command sees the server's namespace: pid 1 is the
    // server.
    let first = bash(
        &mut server,
        2,
        "awk '{print $6}' /proc/1/stat; (sleep 300 &)",
    );
    assert!(
        text(&first).starts_with("0\n"),
        "the server's session is not 0 as it sees it, so this test tests nothing: {first}\n{}",
        logged(&log)
    );
    assert_eq!(
        first["structuredContent"]["status"],
        "ok",
        "{first}\n{}",
        logged(&log)
    );
    assert_eq!(
        first["structuredContent"]["leftovers_stopped"],
        1,
        "the leftover sleep was not stopped: {first}\n{}",
        logged(&log)
    );
    let second = bash(&mut server, 3, "echo second");
    assert_eq!(text(&second), "second\n", "{second}\n{}", logged(&log));
    no_panic(&log, "unconfined");
}

#[test]
fn a_sandboxed_server_in_a_foreign_session_confines_its_commands() {
    each_backend_and_user("a server in a foreign session", |user, backend| {
        let ws = workspace(&format!("foreign-session-{backend}-{user:?}"), user);
        let log = ws.parent().unwrap().join("server.log");
        let args = [
            "--workdir",
            ws.to_str().unwrap(),
            "--sandbox",
            "workspace-write",
            "--sandbox-backend",
            backend,
        ];
        let Some(mut server) = start(user, &args, &log) else {
            return;
        };
        let context = format!("{backend} as {user:?}");
        let wrote = bash(
            &mut server,
            2,
            "echo made > made && cat made && touch /etc/dsh-foreign",
        );
        assert!(
            text(&wrote).starts_with("made\n"),
            "{context}: {wrote}\n{}",
            logged(&log)
        );
        assert_eq!(std::fs::read_to_string(ws.join("made")).unwrap(), "made\n");
        assert!(
            !Path::new("/etc/dsh-foreign").exists(),
            "{context}: a write outside the workspace went through: {wrote}"
        );
        let second = bash(&mut server, 3, "echo second");
        assert_eq!(
            text(&second),
            "second\n",
            "{context}: {second}\n{}",
            logged(&log)
        );
        no_panic(&log, &context);
    });
}
