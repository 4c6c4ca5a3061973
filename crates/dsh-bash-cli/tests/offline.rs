//! Through the real server: a command that fails to reach the network
//! the policy keeps off reads as the policy, not an outage — which hosts
//! its output names and how to ask for one — under each backend, as root
//! and as uid 65534, in both protocol eras; with the network on, or a
//! command that succeeds, nothing is said.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::confined::{usable_as_or_skip, User};
use common::listening::Listening;
use common::raw_http::{open_session, tool_call};

const ERAS: [&str; 2] = ["2025-06-18", "2026-07-28"];
const POLICY: &str = "[network: off for sandboxed commands, so this failure is the policy, not an outage (its output names pypi.org); a command that needs a host can run again with allow_hosts: [\\\"host\\\"] and a justification, which a person approves]";

fn bash(server: &Listening, era: &str, session: &str, command: &str) -> String {
    tool_call(
        server,
        era,
        session,
        "bash",
        serde_json::json!({"command": command, "description": "reach the network"}),
    )
    .body
}

#[test]
fn a_network_kept_off_says_so() {
    for backend in ["bwrap", "landlock"] {
        for user in [User::Root, User::Nobody] {
            let probe = ["--sandbox", "read-only", "--sandbox-backend", backend];
            let what = format!("the network off under {backend} as {user:?}");
            if !usable_as_or_skip(user, &probe, &what) {
                continue;
            }
            let sandbox = ["--sandbox", "workspace-write", "--sandbox-backend", backend];
            let off =
                Listening::start_as(user, &[&sandbox[..], &["--shell-snapshot", "off"]].concat());
            let on = Listening::start_as(
                user,
                &[
                    &sandbox[..],
                    &["--network", "on", "--shell-snapshot", "off"],
                ]
                .concat(),
            );
            for era in ERAS {
                let what = format!("{what}, {era}");
                let session = if era == ERAS[0] {
                    open_session(&off, &off.token)
                } else {
                    String::new()
                };
                let body = bash(
                    &off,
                    era,
                    &session,
                    "curl -sS --max-time 10 https://pypi.org/simple/",
                );
                assert!(
                    body.contains("Could not resolve host: pypi.org"),
                    "{what}: {body}"
                );
                assert!(body.contains(POLICY), "{what}: {body}");
                // A command that prints the same and succeeds gets nothing.
                let body = bash(
                    &off,
                    era,
                    &session,
                    "echo 'Could not resolve host: pypi.org' >&2",
                );
                assert!(!body.contains("not an outage"), "{what}: {body}");
                // With the network on, a failure is not the policy's.
                let session = if era == ERAS[0] {
                    open_session(&on, &on.token)
                } else {
                    String::new()
                };
                let body = bash(
                    &on,
                    era,
                    &session,
                    "echo 'curl: (6) Could not resolve host: pypi.org' >&2; exit 6",
                );
                assert!(body.contains("[exit code: 6]"), "{what}: {body}");
                assert!(!body.contains("not an outage"), "{what}: {body}");
            }
        }
    }
}
