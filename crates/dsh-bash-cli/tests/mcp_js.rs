//! `dsh-bash mcp` driven by a second real client: the official TypeScript
//! SDK (`@modelcontextprotocol/sdk`, with ajv validating every schema and
//! structured result). `.ci/run` installs it (`npm ci` in tests/mcp/js);
//! without it the test skips loudly, and fails under
//! `DSH_TEST_REQUIRE_MCP_CLIENT=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

#[test]
fn the_official_typescript_client_drives_the_server() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/js"));
    let node = Command::new("node").arg("--version").output().is_ok();
    if !node || !dir.join("node_modules/@modelcontextprotocol/sdk").is_dir() {
        let required = std::env::var("DSH_TEST_REQUIRE_MCP_CLIENT").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "the MCP TypeScript SDK is required (npm ci --prefix {})",
            dir.display()
        );
        eprintln!(
            "SKIP: the MCP TypeScript SDK is not installed (npm ci --prefix {})",
            dir.display()
        );
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let output = Command::new("node")
        .arg(dir.join("client.mjs"))
        .arg(env!("CARGO_BIN_EXE_dsh-bash"))
        .arg(scratch.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the TypeScript client failed:\n{stdout}\n{stderr}"
    );
    for scenario in [
        "schemas compile under ajv strict mode",
        "structured content validates and stands alone",
        "background start, kill and read validate",
        "cancelling a call kills its command",
        "progress arrives while a call runs",
        "logging/setLevel is answered",
        "an unknown argument is an error",
    ] {
        assert!(
            stdout.contains(&format!("ok {scenario}")),
            "scenario {scenario:?} did not pass:\n{stdout}"
        );
    }
}
