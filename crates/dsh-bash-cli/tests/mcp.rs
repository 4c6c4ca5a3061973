//! `dsh-bash mcp` driven by a real MCP client: the official Python SDK
//! (`pip install mcp`, done by `.ci/run`). Without it the test skips
//! loudly; with `DSH_TEST_REQUIRE_MCP_CLIENT=1` (set by CI) it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

fn python_sdk_present() -> bool {
    Command::new("python3")
        .args(["-c", "import mcp.client.stdio"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_official_python_client_drives_every_scenario() {
    if !python_sdk_present() {
        let required = std::env::var("DSH_TEST_REQUIRE_MCP_CLIENT").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "the MCP Python SDK is required (pip install mcp)"
        );
        eprintln!("SKIP: the MCP Python SDK is not installed (pip install mcp)");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_dsh-bash"))
        .arg(scratch.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the MCP client failed:\n{stdout}\n{stderr}"
    );
    for scenario in [
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
    ] {
        assert!(
            stdout.contains(&format!("ok {scenario}")),
            "scenario {scenario:?} did not pass:\n{stdout}"
        );
    }
}
