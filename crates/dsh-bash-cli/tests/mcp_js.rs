//! `dsh-bash mcp` driven by a second real client: the official TypeScript
//! SDK (`@modelcontextprotocol/sdk`, with ajv validating every schema and
//! structured result). `.ci/run` installs it (`npm install` in tests/mcp/js);
//! without it the test skips loudly, and fails under
//! `DSH_TEST_REQUIRE_MCP_CLIENT=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn js_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/js"))
}

/// `PATH` with the clients' own Node 22 (the `node` package in
/// tests/mcp/js) first: the Inspector declares Node >= 22, and both
/// clients run on the same one.
fn path_with_node_22() -> std::ffi::OsString {
    let mut dirs = vec![js_dir().join("node_modules/.bin")];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// The major version of the `node` the clients run on, if any.
fn node_major() -> Option<u32> {
    let output = Command::new("node")
        .arg("--version")
        .env("PATH", path_with_node_22())
        .output()
        .ok()?;
    let version = String::from_utf8_lossy(&output.stdout);
    version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()?
        .parse()
        .ok()
}

#[test]
fn the_official_typescript_client_drives_the_server() {
    let dir = js_dir();
    let install = format!("npm install --prefix {}", dir.display());
    let present =
        node_major().is_some() && dir.join("node_modules/@modelcontextprotocol/sdk").is_dir();
    if !common::client_or_skip(present, "the MCP TypeScript SDK", &install) {
        return;
    }
    let node: PathBuf = dir.join("node_modules/.bin/node");
    let node = if node.exists() { node } else { "node".into() };
    common::run_client(
        node.to_str().unwrap(),
        &dir.join("client.mjs"),
        &[
            "schemas compile under ajv strict mode",
            "structured content validates and stands alone",
            "background start, kill and read validate",
            "cancelling a call kills its command",
            "progress arrives while a call runs",
            "logging/setLevel is answered",
            "an unknown argument is an error",
        ],
    );
}

/// The MCP Inspector's CLI mode (the current major version, pinned in
/// tests/mcp/js) lists the tools and calls `bash`: a third client, the one
/// people debug servers with.
#[test]
fn the_mcp_inspector_cli_lists_and_calls_the_tools() {
    let dir = js_dir();
    let inspector = dir.join("node_modules/.bin/mcp-inspector");
    let install = format!("npm install --prefix {}", dir.display());
    let node_22 = node_major().is_some_and(|major| major >= 22);
    if !common::client_or_skip(
        inspector.exists() && node_22,
        "the MCP Inspector on Node >= 22",
        &install,
    ) {
        return;
    }
    let run = |args: &[&str]| -> (serde_json::Value, String) {
        let output = Command::new(&inspector)
            .env("PATH", path_with_node_22())
            .arg("--cli")
            .arg(env!("CARGO_BIN_EXE_dsh-bash"))
            .args(["mcp", "--shell-snapshot", "off"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "inspector {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&output.stdout)));
        (value, String::from_utf8_lossy(&output.stderr).into_owned())
    };
    // The schemas of a sandboxed server (the escalation fields included)
    // pass the Inspector's portability check: `--strict` reports every
    // finding, warnings too, on stderr (and exits 6 on an error).
    let (listed, findings) = run(&[
        "--method",
        "tools/list",
        "--strict",
        "--sandbox",
        "workspace-write",
    ]);
    assert!(
        !findings.to_lowercase().contains("portab") && !findings.contains("warning"),
        "{findings}"
    );
    assert!(
        listed.to_string().contains("sandbox_permissions"),
        "{listed}"
    );
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["bash", "bash_output", "bash_write", "bash_kill"],
        "{listed}"
    );
    let (called, _) = run(&[
        "--method",
        "tools/call",
        "--tool-name",
        "bash",
        "--tool-arg",
        "command=echo hi; exit 3",
        "--tool-arg",
        "description=say hi",
    ]);
    assert_eq!(
        called["content"][0]["text"], "hi\n[exit code: 3]",
        "{called}"
    );
    assert_eq!(called["structuredContent"]["exit_code"], 3, "{called}");
    assert_eq!(called["structuredContent"]["text"], "hi\n[exit code: 3]");
}
