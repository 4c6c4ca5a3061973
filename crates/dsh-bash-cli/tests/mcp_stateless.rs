//! `dsh-bash mcp` on MCP 2026-07-28 (negotiated by `server/discover`, no
//! `initialize`), driven by the official Python SDK's `Client` in its
//! default mode: approvals as input-required results, completion notices
//! riding on results, foreground calls as tasks for a client that declares
//! the tasks extension. Without the SDK the test skips loudly; with
//! `DSH_TEST_REQUIRE_MCP_CLIENT=1` (set by CI) it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::process::Command;

fn python_sdk_speaks_2026() -> bool {
    Command::new("python3")
        .args([
            "-c",
            "import jsonschema; from mcp import Client; from mcp.client import advertise",
        ])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_python_client_on_2026_07_28_drives_every_scenario() {
    if !common::client_or_skip(
        python_sdk_speaks_2026(),
        "the MCP Python SDK 2.x (2026-07-28) with jsonschema",
        "pip install 'mcp>=2.3' jsonschema",
    ) {
        return;
    }
    let script = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/modern.py"));
    common::run_client(
        "python3",
        script,
        &[
            "2026-07-28 negotiated through server/discover, logging not advertised",
            "a foreground call on 2026-07-28",
            "a completion notice rides on the next result, once, with no log message",
            "escalation approved through an input-required result",
            "escalation declined through an input-required result",
            "escalation without elicitation fails closed on 2026-07-28",
            "a forged, swapped or replayed answer approves nothing",
            "network escalation approved through an input-required result",
            "network escalation declined through an input-required result",
            "allow_hosts approved for one call through an input-required result",
            "allow_hosts declined through an input-required result",
            "git status and a commit work under workspace-write, a hook goes through one approved call",
            "a quick call answers inline even with tasks declared",
            "a long call becomes a task polled to its result",
            "tasks/cancel kills the command",
            "without the tasks extension a long call answers inline",
        ],
    );
}
