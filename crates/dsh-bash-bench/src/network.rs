//! Group 10: what the network allow-list costs. A command that does not
//! use the network, under `allow` beside `off` (each backend), and a
//! 100 MiB download from a loopback server through the proxy beside the
//! same download direct (bwrap, network `on`), plain HTTP and through a
//! `CONNECT` tunnel.

use dsh_bash::{BashExecutor, NetworkPolicy, SandboxMode};
use dsh_sandbox::HostRules;
use dsh_sandbox_local::Backend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::measure::{time_ms, Row};
use crate::scenarios::{per_command, sandboxed_with, spec, Options, Policy};

/// Bytes of the download.
const DOWNLOAD: u64 = 100 << 20;

/// A loopback HTTP server answering every request with `DOWNLOAD` zero
/// bytes; its port.
async fn origin() -> Option<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.ok()?;
    let port = listener.local_addr().ok()?.port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let header = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {DOWNLOAD}\r\nconnection: close\r\n\r\n"
                );
                if stream.write_all(header.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![0u8; 1 << 20];
                for _ in 0..(DOWNLOAD >> 20) {
                    if stream.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Some(port)
}

fn policy(network: NetworkPolicy) -> Policy {
    Policy {
        network,
        protected: true,
        caches: true,
        warm: true,
    }
}

fn rules(port: u16) -> HostRules {
    HostRules {
        allow: format!("127.0.0.1:{port}").parse().into_iter().collect(),
        deny: Vec::new(),
    }
}

/// `true` under `allow` beside `true` under `off`, same backend.
async fn idle_cost(options: &Options, label: &str, backend: Backend, port: u16) -> Row {
    let mode = SandboxMode::ReadOnly;
    let (Some(allow), Some(off)) = (
        sandboxed_with(
            options,
            backend.clone(),
            mode,
            policy(NetworkPolicy::Allow),
            rules(port),
        ),
        sandboxed_with(
            options,
            backend,
            mode,
            policy(NetworkPolicy::Off),
            HostRules::default(),
        ),
    ) else {
        return Row::skipped(label, "ms", "the backend is not usable");
    };
    if let Err(err) = allow.run(spec(&allow, "true")).await {
        return Row::skipped(label, "ms", err);
    }
    per_command(&off, "true", 5).await;
    let (mut ours, mut base) = (vec![], vec![]);
    for _ in 0..options.rounds {
        ours.push(per_command(&allow, "true", options.commands / 2).await);
        base.push(per_command(&off, "true", options.commands / 2).await);
    }
    allow.shutdown().await;
    off.shutdown().await;
    Row::against(
        label,
        (ours, base),
        "ms/cmd",
        "baseline: the same backend with the network off; target < +0.5 ms".into(),
    )
}

/// The 100 MiB download through the proxy beside the direct one: plain
/// HTTP, or (`tunnel`) through a `CONNECT` tunnel (`curl -p`; with the
/// network on there is no proxy and curl goes direct).
async fn download(options: &Options, port: u16, label: &str, tunnel: bool) -> Row {
    let mode = SandboxMode::ReadOnly;
    let (Some(proxied), Some(direct)) = (
        sandboxed_with(
            options,
            Backend::Bwrap,
            mode,
            policy(NetworkPolicy::Allow),
            rules(port),
        ),
        sandboxed_with(
            options,
            Backend::Bwrap,
            mode,
            policy(NetworkPolicy::On),
            HostRules::default(),
        ),
    ) else {
        return Row::skipped(label, "ms", "bwrap is not usable");
    };
    let tunnelled = if tunnel { " -p" } else { "" };
    let command = format!(
        "test \"$(curl -sS{tunnelled} -o /dev/null -w '%{{size_download}}' http://127.0.0.1:{port}/blob)\" = {DOWNLOAD}"
    );
    let (mut ours, mut base) = (vec![], vec![]);
    for _ in 0..options.rounds {
        match (
            timed(&proxied, &command).await,
            timed(&direct, &command).await,
        ) {
            (Ok(through), Ok(straight)) => {
                ours.push(through);
                base.push(straight);
            }
            (Err(why), _) | (_, Err(why)) => return Row::skipped(label, "ms", why),
        }
    }
    proxied.shutdown().await;
    direct.shutdown().await;
    Row::against(
        label,
        (ours, base),
        "ms",
        "baseline: the same curl with the network on (direct); target >= 0.8x throughput, i.e. <= 1.25x time".into(),
    )
}

/// One download's time, or why it failed.
async fn timed(
    executor: &dsh_bash_sandbox::SandboxBashExecutor,
    command: &str,
) -> Result<f64, String> {
    let (ms, result) = time_ms(executor.run(spec(executor, command))).await;
    match result {
        Ok(result) if result.exit_code == Some(0) => Ok(ms),
        Ok(result) => Err(format!(
            "the download failed: {}",
            result.stderr.text.trim()
        )),
        Err(err) => Err(err.to_string()),
    }
}

/// The rows of group 10.
pub async fn allow_list_rows(options: &Options) -> Vec<Row> {
    let Some(port) = origin().await else {
        return vec![Row::skipped(
            "10 network allow-list",
            "ms",
            "no loopback listener",
        )];
    };
    vec![
        idle_cost(
            options,
            "10a `true` under bwrap (read-only), network allow",
            Backend::Bwrap,
            port,
        )
        .await,
        idle_cost(
            options,
            "10b `true` under Landlock (read-only), network allow",
            Backend::Landlock,
            port,
        )
        .await,
        download(
            options,
            port,
            "10c 100 MiB from loopback through the proxy (bwrap)",
            false,
        )
        .await,
        download(
            options,
            port,
            "10d 100 MiB from loopback through a CONNECT tunnel (bwrap)",
            true,
        )
        .await,
    ]
}
