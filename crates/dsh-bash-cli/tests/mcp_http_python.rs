//! `dsh-bash mcp --listen` driven by the official Python SDK over
//! Streamable HTTP, in a legacy session and in the 2026-07-28 mode. Without
//! the SDK the test skips loudly; with `DSH_TEST_REQUIRE_MCP_CLIENT=1` (set
//! by CI) it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::process::Command;

#[test]
fn the_python_client_over_streamable_http() {
    let present = Command::new("python3")
        .args([
            "-c",
            "from mcp import Client; from mcp.client.streamable_http import streamable_http_client",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !common::client_or_skip(present, "the MCP Python SDK 2.x", "pip install 'mcp>=2.3'") {
        return;
    }
    let script = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/mcp/streamable.py"
    ));
    common::run_client(
        "python3",
        script,
        &[
            "a legacy session over HTTP runs a command",
            "a legacy session is told of a finished background task",
            "two legacy sessions are isolated",
            "2026-07-28 over HTTP runs a command",
            "2026-07-28 over HTTP announces a finished task on a later result",
            "2026-07-28 reaches a task again from a new connection",
            "a wrong token is refused",
        ],
    );
}
