//! A minimal JSON-RPC client for `dsh-bash mcp` over stdio: enough to
//! initialize and call tools, and nothing that would cost time per call.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A minimal JSON-RPC client for `dsh-bash mcp` over stdio.
pub(crate) struct McpClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
}

impl McpClient {
    /// Starts `binary mcp ARGS…` and initializes the session.
    pub(crate) async fn start(binary: &Path, args: &[&str]) -> std::io::Result<McpClient> {
        let mut child = tokio::process::Command::new(binary)
            .arg("mcp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("no pipes"));
        };
        let mut client = McpClient {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 0,
        };
        client
            .request(
                "initialize",
                serde_json::json!({"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "dsh-bash-bench", "version": "0"}}),
            )
            .await?;
        client
            .send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(client)
    }

    async fn send(&mut self, message: serde_json::Value) -> std::io::Result<()> {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await
    }

    pub(crate) async fn request(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> std::io::Result<serde_json::Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await?;
        while let Some(line) = self.lines.next_line().await? {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if message.get("id").and_then(serde_json::Value::as_u64) == Some(id) {
                return Ok(message);
            }
        }
        Err(std::io::Error::other("the server closed the connection"))
    }

    pub(crate) async fn close(mut self) {
        drop(self.stdin);
        let _ = self.child.wait().await;
    }
}
