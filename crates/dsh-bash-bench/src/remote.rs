//! Scenario 8: the latency of one `bash true` through a remote executor —
//! over the stdio of a `dsh-bash mcp` child and over Streamable HTTP to
//! `dsh-bash mcp --listen` on loopback — beside a direct run, per call, as
//! p50 and p99.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use dsh_bash::{BashExecRequest, BashExecutor};
use dsh_bash_local::LocalBashExecutor;
use dsh_bash_remote::RemoteBashExecutor;

use crate::http_client::{Era, PlainHttp};
use crate::measure::{ms, Row, Stats};
use crate::scenarios::Options;

/// The `p`-th percentile (0–100) of sorted `values`, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Per-call latencies of `true` through `executor`, in ms.
async fn latencies(executor: &dyn BashExecutor, n: usize) -> Option<Vec<f64>> {
    let spec = executor.resolve(BashExecRequest::new("true")).ok()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let result = executor.run(spec.clone()).await.ok()?;
        if result.exit_code != Some(0) {
            return None;
        }
        out.push(ms(started.elapsed()));
    }
    out.sort_by(f64::total_cmp);
    Some(out)
}

/// An HTTP server for the scenario; killed when dropped.
struct Listening(Child);

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `dsh-bash mcp --listen 127.0.0.1:0`; its URL and token.
fn listen(binary: &Path, scratch: &Path) -> Option<(Listening, String, String)> {
    let token_file = scratch.join(format!("dsh-bash-bench-token-{}", std::process::id()));
    let _ = std::fs::remove_file(&token_file);
    let mut child = Command::new(binary)
        // No snapshot of the machine's own shell (see `mcp_client.rs`).
        .args([
            "mcp",
            "--shell-snapshot",
            "off",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
        ])
        .arg(&token_file)
        .env_remove("DSH_BASH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let stderr = child.stderr.take()?;
    let server = Listening(child);
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines.next()?.ok()?;
        if let Some(url) = line.strip_prefix("dsh-bash: listening on ") {
            break url.trim().to_owned();
        }
    };
    // Keep draining so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let token = std::fs::read_to_string(&token_file).ok()?.trim().to_owned();
    let _ = std::fs::remove_file(&token_file);
    Some((server, url, token))
}

fn row(scenario: &str, ours: &[f64], direct: &[f64]) -> Row {
    row_beside(scenario, ours, direct, "direct")
}

/// A latency row beside the baseline called `beside`.
fn row_beside(scenario: &str, ours: &[f64], direct: &[f64], beside: &str) -> Row {
    let (p50, p99) = (percentile(ours, 50.0), percentile(ours, 99.0));
    let (d50, d99) = (percentile(direct, 50.0), percentile(direct, 99.0));
    Row {
        scenario: scenario.into(),
        ours: Stats::of(ours.to_vec()),
        baseline: Some(Stats::of(direct.to_vec())),
        unit: "ms/call",
        peak_rss_mib: None,
        note: format!(
            "p50 {p50:.3} / p99 {p99:.3} ms; {beside} p50 {d50:.3} / p99 {d99:.3} ms; added at p50 {:.3} ms",
            p50 - d50
        ),
    }
}

/// Rows 8a (stdio) and 8b (HTTP); none without the binary.
pub async fn remote_latency(options: &Options, direct: &LocalBashExecutor) -> Vec<Row> {
    let Some(binary) = options.mcp_binary.as_ref() else {
        return Vec::new();
    };
    let n = options.rounds * options.commands;
    let mut rows = Vec::new();
    let warm = (options.commands / 10).max(5);

    let mut child = tokio::process::Command::new(binary);
    // No snapshot of the machine's own shell (see `mcp_client.rs`).
    child.args(["mcp", "--shell-snapshot", "off"]);
    match RemoteBashExecutor::over_stdio(child).await {
        Ok(remote) => {
            let _ = latencies(&remote, warm).await;
            let _ = latencies(direct, warm).await;
            if let (Some(ours), Some(base)) =
                (latencies(&remote, n).await, latencies(direct, n).await)
            {
                rows.push(row("8a remote executor over stdio: `true`", &ours, &base));
            }
            remote.shutdown().await;
        }
        Err(err) => eprintln!("warning: row 8a skipped: {err}"),
    }

    let scratch = options.scratch.clone();
    let listener = binary.clone();
    let served = tokio::task::spawn_blocking(move || listen(&listener, &scratch))
        .await
        .ok()
        .flatten();
    let Some((server, url, token)) = served else {
        eprintln!("warning: row 8b skipped: the HTTP server did not start");
        return rows;
    };
    match RemoteBashExecutor::over_http(&url, &token).await {
        Ok(remote) => {
            let _ = latencies(&remote, warm).await;
            if let (Some(ours), Some(base)) =
                (latencies(&remote, n).await, latencies(direct, n).await)
            {
                rows.push(row("8b remote executor over HTTP: `true`", &ours, &base));
            }
            remote.shutdown().await;
        }
        Err(err) => eprintln!("warning: row 8b skipped: {err}"),
    }
    rows.extend(plain_socket_rows(binary.as_path(), &url, &token, n, warm).await);
    drop(server);
    rows
}

/// Per-call latencies of `tools/call bash true` over `dsh-bash mcp`'s
/// stdio, in ms (the baseline of the HTTP rows).
async fn stdio_latencies(binary: &Path, n: usize, warm: usize) -> Option<Vec<f64>> {
    // As the HTTP server it is compared with: no snapshot of the machine's
    // own shell.
    let mut client = crate::mcp_client::McpClient::start(binary, &["--shell-snapshot", "off"])
        .await
        .ok()?;
    let call = serde_json::json!({"name": "bash", "arguments": {"command": "true", "description": "benchmark a trivial command"}});
    let mut out = Vec::with_capacity(n);
    for round in 0..warm + n {
        let started = Instant::now();
        client.request("tools/call", call.clone()).await.ok()?;
        if round >= warm {
            out.push(ms(started.elapsed()));
        }
    }
    client.close().await;
    out.sort_by(f64::total_cmp);
    Some(out)
}

/// Per-call latencies over HTTP from a plain blocking socket client, in
/// ms. Blocking: run it off the runtime.
fn plain_latencies(url: &str, token: &str, era: Era, n: usize, warm: usize) -> Option<Vec<f64>> {
    let mut client = PlainHttp::connect(url, token, era)
        .map_err(|err| eprintln!("warning: plain HTTP client ({era:?}): {err}"))
        .ok()?;
    let mut out = Vec::with_capacity(n);
    for round in 0..warm + n {
        let started = Instant::now();
        client.call("true").ok()?;
        if round >= warm {
            out.push(ms(started.elapsed()));
        }
    }
    out.sort_by(f64::total_cmp);
    Some(out)
}

/// Rows 8c (a 2025-06-18 session) and 8d (2026-07-28, stateless): MCP
/// calls over HTTP from a plain socket client, beside the same calls over
/// stdio.
async fn plain_socket_rows(
    binary: &Path,
    url: &str,
    token: &str,
    n: usize,
    warm: usize,
) -> Vec<Row> {
    let Some(stdio) = stdio_latencies(binary, n, warm).await else {
        eprintln!("warning: rows 8c/8d skipped: the stdio baseline failed");
        return Vec::new();
    };
    let mut rows = Vec::new();
    for (era, scenario) in [
        (
            Era::Session2025,
            "8c MCP over HTTP, 2025-06-18 session, plain socket",
        ),
        (
            Era::Stateless2026,
            "8d MCP over HTTP, 2026-07-28, plain socket",
        ),
    ] {
        let (url, token) = (url.to_owned(), token.to_owned());
        let measured =
            tokio::task::spawn_blocking(move || plain_latencies(&url, &token, era, n, warm))
                .await
                .ok()
                .flatten();
        match measured {
            Some(ours) => rows.push(row_beside(scenario, &ours, &stdio, "stdio")),
            None => eprintln!("warning: row {scenario:?} skipped"),
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_by_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&values, 100.0), 100.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
