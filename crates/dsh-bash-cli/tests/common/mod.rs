//! What several test files of the binary share: process liveness, a raw
//! JSON-RPC connection to `dsh-bash mcp`, and running a real client script.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod audit;
pub mod confined;
pub mod crds;
pub mod listening;
pub mod raw_http;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// True if and only if `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next()),
            Some("Z" | "X")
        )
    })
}

/// Waits (fail-safe 10 s) until `pid` is gone; true if it went.
pub fn wait_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits (fail-safe 30 s) for the pid a command wrote to `file`.
pub fn pid_in(file: &std::path::Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never written",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `dsh-bash mcp` spoken to line by line, initialized.
pub struct RawServer {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl RawServer {
    /// Started and initialized (the handshake of 2025-06-18).
    pub fn start() -> RawServer {
        let mut server = RawServer::spawn();
        server.initialize();
        server
    }

    /// Started, nothing sent yet.
    pub fn spawn() -> RawServer {
        RawServer::spawn_with(&[])
    }

    /// Started with `mcp ARGS`, nothing sent yet.
    pub fn spawn_with(args: &[&str]) -> RawServer {
        RawServer::spawn_in(args, &[])
    }

    /// Started with `mcp ARGS` and the environment variables `envs` set,
    /// nothing sent yet.
    pub fn spawn_in(args: &[&str], envs: &[(&str, &std::path::Path)]) -> RawServer {
        RawServer::spawn_logged(args, envs, Stdio::null())
    }

    /// The same, its stderr (the log) to `stderr`.
    pub fn spawn_logged(
        args: &[&str],
        envs: &[(&str, &std::path::Path)],
        stderr: impl Into<Stdio>,
    ) -> RawServer {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
        command.arg("mcp").args(args).envs(envs.iter().copied());
        RawServer::spawn_command(command, stderr)
    }

    /// `command` (an `mcp` the caller set up) spoken to, its stderr to
    /// `stderr`, nothing sent yet.
    pub fn spawn_command(mut command: Command, stderr: impl Into<Stdio>) -> RawServer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        RawServer {
            child,
            stdin,
            stdout,
        }
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    pub fn next(&mut self) -> serde_json::Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Initializes (the handshake of 2025-06-18) a server spawned with
    /// nothing sent yet.
    pub fn initialize(&mut self) {
        self.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
        assert_eq!(self.next()["id"], 1);
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    /// `bash` with `command` as request `id`; the result's text.
    pub fn bash_text(&mut self, id: u64, command: &str) -> String {
        let request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": command, "description": "d"}}});
        self.send(&request.to_string());
        let reply = self.next();
        assert_eq!(reply["id"], id, "{reply}");
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{reply}"))
            .to_owned()
    }
}

/// Whether a real client is usable; when not, skips loudly (and fails
/// under `DSH_TEST_REQUIRE_MCP_CLIENT=1`) naming how to install it.
pub fn client_or_skip(present: bool, what: &str, install: &str) -> bool {
    if present {
        return true;
    }
    let required = std::env::var("DSH_TEST_REQUIRE_MCP_CLIENT").is_ok_and(|v| v == "1");
    assert!(!required, "{what} is required ({install})");
    eprintln!("SKIP: {what} is not installed ({install})");
    false
}

/// Runs a client `program script binary scratch` and checks it printed
/// `ok <scenario>` for every scenario.
pub fn run_client(program: &str, script: &std::path::Path, scenarios: &[&str]) {
    run_client_with(program, script, &[], scenarios);
}

/// [`run_client`] with `envs` set for the client.
pub fn run_client_with<S: AsRef<str>>(
    program: &str,
    script: &std::path::Path,
    envs: &[(&str, &std::ffi::OsStr)],
    scenarios: &[S],
) {
    let scratch = tempfile::tempdir().unwrap();
    let output = Command::new(program)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_dsh-bash"))
        .arg(scratch.path())
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the client failed:\n{stdout}\n{stderr}"
    );
    for scenario in scenarios.iter().map(AsRef::as_ref) {
        assert!(
            stdout.contains(&format!("ok {scenario}")),
            "scenario {scenario:?} did not pass:\n{stdout}"
        );
    }
}
