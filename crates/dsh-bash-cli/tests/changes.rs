//! Through the real server: each result lists what the command created,
//! modified and deleted in the workspace — a foreground call and a
//! background task's settled read, in both protocol eras, under each
//! sandbox backend as root and as uid 65534 — and the description says
//! so exactly when it is tracked.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::confined::{usable_as_or_skip, User, NOBODY};
use common::listening::Listening;
use common::raw_http::{open_session, tool_call};
use common::RawServer;

const ERAS: [&str; 2] = ["2025-06-18", "2026-07-28"];

/// One call and one background task that change the workspace, read in
/// `era`; `what` names the case in failures.
fn changes_are_listed(server: &Listening, era: &str, what: &str) {
    let session = if era == ERAS[0] {
        open_session(server, &server.token)
    } else {
        String::new()
    };
    let tag = era.replace('-', "");
    let command = format!(
        "mkdir -p gen-{tag}/deep; touch gen-{tag}/deep/a made-{tag}; rm -f gone-{tag}; echo ok"
    );
    let answer = tool_call(
        server,
        era,
        &session,
        "bash",
        serde_json::json!({"command": command, "description": "change things"}),
    );
    let line = format!(r"ok\n[changed: created gen-{tag}/, made-{tag}; deleted gone-{tag}]");
    assert!(answer.body.contains(&line), "{what}: {}", answer.body);
    let structured =
        format!(r#""changed":{{"created":["gen-{tag}/","made-{tag}"],"deleted":["gone-{tag}"]}}"#);
    assert!(answer.body.contains(&structured), "{what}: {}", answer.body);

    let started = tool_call(
        server,
        era,
        &session,
        "bash",
        serde_json::json!({"command": format!("echo more >> made-{tag}"), "description": "d", "run_in_background": true}),
    );
    let task = started
        .body
        .split_once(r#""task_id":""#)
        .and_then(|(_, rest)| rest.split_once('"'))
        .unwrap_or_else(|| panic!("{what}: {}", started.body))
        .0
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let read = loop {
        let read = tool_call(
            server,
            era,
            &session,
            "bash_output",
            serde_json::json!({"task_id": task}),
        );
        if read.body.contains("[status: completed") {
            break read;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: never settled: {}",
            read.body
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        read.body
            .contains(&format!(r"\n[changed: modified made-{tag}]")),
        "{what}: {}",
        read.body
    );
}

#[test]
fn each_result_lists_what_changed_in_the_workspace() {
    for backend in ["bwrap", "landlock"] {
        for user in [User::Root, User::Nobody] {
            let probe = ["--sandbox", "read-only", "--sandbox-backend", backend];
            let what = format!("changes under {backend} as {user:?}");
            if !usable_as_or_skip(user, &probe, &what) {
                continue;
            }
            let args = [
                "--sandbox",
                "workspace-write",
                "--sandbox-backend",
                backend,
                "--shell-snapshot",
                "off",
            ];
            let server = Listening::start_as(user, &args);
            let work = server.dir.path().join("work");
            for era in ERAS {
                let gone = work.join(format!("gone-{}", era.replace('-', "")));
                std::fs::write(&gone, "x").unwrap();
                if user == User::Nobody {
                    common::confined::chown(&gone, NOBODY);
                }
                changes_are_listed(&server, era, &format!("{what}, {era}"));
            }
        }
    }
    // Unconfined too.
    let work = tempfile::tempdir().unwrap();
    for era in ERAS {
        std::fs::write(
            work.path().join(format!("gone-{}", era.replace('-', ""))),
            "x",
        )
        .unwrap();
    }
    let server = Listening::start(&[
        "--workdir",
        work.path().to_str().unwrap(),
        "--shell-snapshot",
        "off",
    ]);
    for era in ERAS {
        changes_are_listed(&server, era, &format!("unconfined, {era}"));
    }
}

/// The description mentions the changed line exactly when changes are
/// tracked: not with `--changes-max-dirs 0`, nor for a workspace past the
/// limit (the server says why in its log).
#[test]
fn the_description_says_so_only_when_tracked() {
    let work = tempfile::tempdir().unwrap();
    for sub in ["a", "b", "c"] {
        std::fs::create_dir(work.path().join(sub)).unwrap();
    }
    let workdir = work.path().to_str().unwrap();
    for (args, said) in [
        (vec!["--workdir", workdir], true),
        (vec!["--workdir", workdir, "--changes-max-dirs", "0"], false),
        (vec!["--workdir", workdir, "--changes-max-dirs", "2"], false),
    ] {
        let mut full = args.clone();
        full.extend(["--shell-snapshot", "off"]);
        let mut server = RawServer::spawn_with(&full);
        server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
        assert_eq!(server.next()["id"], 1);
        server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        server.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
        let listed = server.next();
        let bash = listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "bash")
            .unwrap()["description"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(bash.contains("[changed: …]"), said, "{args:?}: {bash}");
        server.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"touch made","description":"d"}}}"#);
        let ran = server.next();
        let text = ran["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            text.contains("[changed: created made]"),
            said,
            "{args:?}: {text}"
        );
        std::fs::remove_file(work.path().join("made")).unwrap();
    }
}
