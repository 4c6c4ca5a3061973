//! `dsh-bash mcp` driven by a real MCP client: the official Python SDK
//! (`pip install mcp`, done by `.ci/run`). Without it the test skips
//! loudly; with `DSH_TEST_REQUIRE_MCP_CLIENT=1` (set by CI) it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::process::Command;

fn python_sdk_present() -> bool {
    Command::new("python3")
        .args(["-c", "import mcp.client.stdio"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_official_python_client_drives_every_scenario() {
    if !common::client_or_skip(
        python_sdk_present(),
        "the MCP Python SDK",
        "pip install mcp",
    ) {
        return;
    }
    let script = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py"));
    common::run_client(
        "python3",
        script,
        &[
            "initialize and list tools",
            "logging/setLevel is answered",
            "escalation fields exactly with --sandbox",
            "foreground call with exit code and stderr",
            "structured content stands alone and validates",
            "timeout",
            "an unknown argument is an error naming it",
            "a command over 128 KiB runs",
            "background task polled to completion",
            "background task killed",
            "completion announced by notification",
            "cancelling a long foreground call kills it",
            "escalation approved through elicitation",
            "escalation declined through elicitation",
            "escalation without elicitation fails closed",
            "a cancelled call withdraws its approval question",
            "closing the connection stops background tasks",
            "progress reported while a call runs",
            "SIGTERM stops the server and its commands",
            "the session's spill directory is removed at exit",
            "SIGKILL of the server takes background escapees",
        ],
    );
}
