//! The network allow-list of dsh-bash: a proxy in the server process that
//! a confined command can reach and nothing else, which connects only to
//! the hosts of the command's [`HostRules`] and records every host it
//! refuses.
//!
//! One [`Proxy`] per server; one [`Door`] per command (a unix socket bound
//! into a bubblewrap sandbox, or a loopback TCP port the Landlock ruleset
//! lets the command connect to), so every connection is attributed to its
//! command by the door it came through. Each door speaks, on the same
//! listener:
//!
//! - HTTP `CONNECT host:port` (TLS and anything else tunnelled; the host is
//!   checked from the `CONNECT` line, nothing is intercepted, no
//!   certificate is involved);
//! - absolute-form plain HTTP (`GET http://host/path`), each request
//!   checked on its own;
//! - SOCKS5 `CONNECT` with a domain name or an IP literal (`socks5h://`).
//!
//! Names are resolved by the proxy, and a name that resolves to a
//! loopback, link-local or private address is refused unless an allowing
//! pattern names the address (or `localhost`) literally. A refusal is an
//! HTTP 403 with `x-proxy-error: blocked-by-allowlist`, or SOCKS5 reply 2.
//! Connections, bytes and idle time are bounded per door
//! ([`ProxyLimits`]).
//!
//! Inside a network namespace that holds only loopback, the command reaches
//! its door through [`forward`]: the host's own binary re-executed as a
//! forwarder from `127.0.0.1:3128` to the door's socket.
//!
//! ```
//! use std::sync::Arc;
//! use dsh_net_proxy::{DoorAt, Proxy, ProxyLimits};
//! use dsh_sandbox::{HostRules, NetworkLog};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let rules = HostRules { allow: vec!["pypi.org:443".parse().unwrap()], deny: vec![] };
//! let proxy = Proxy::new(ProxyLimits::default());
//! let door = proxy.door(Arc::new(rules), DoorAt::Loopback)?;
//! println!("HTTPS_PROXY=http://{}", door.address());
//! // ... the command runs; then:
//! assert!(door.log().denied().is_empty());
//! # Ok(())
//! # }
//! ```
#![warn(clippy::too_many_lines)]

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dsh_sandbox::{HostRules, NetworkLog};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub mod forward;
mod http;
mod meter;
mod socks;
mod upstream;

/// What one door allows at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Connections open at once through one door; more wait for a free one.
    pub connections: usize,
    /// Bytes through one door, both directions, all connections together;
    /// past it every connection of the door is cut.
    pub bytes: u64,
    /// A connection with no byte either way for this long is closed.
    pub idle: Duration,
    /// Resolving and connecting to an upstream host, at most.
    pub connect_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            connections: 64,
            bytes: 16 << 30,
            idle: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(30),
        }
    }
}

/// The proxy of one server: its limits, shared by every door it opens.
#[derive(Clone, Debug, Default)]
pub struct Proxy {
    limits: ProxyLimits,
}

/// Where a door listens.
#[derive(Clone, Debug)]
pub enum DoorAt {
    /// A unix socket at this path (bound into a sandbox).
    Unix(PathBuf),
    /// A TCP port on `127.0.0.1` the kernel picks.
    Loopback,
}

/// Where a door listens, once open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DoorAddress {
    /// The unix socket's path.
    Unix(PathBuf),
    /// The loopback address and port.
    Tcp(SocketAddr),
}

impl fmt::Display for DoorAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DoorAddress::Unix(path) => write!(f, "{}", path.display()),
            DoorAddress::Tcp(addr) => write!(f, "{addr}"),
        }
    }
}

/// How many distinct refusals a log keeps.
const MAX_DENIED: usize = 32;

/// The refusals of one door: each `host:port` once, in the order first
/// refused.
#[derive(Debug, Default)]
pub struct Log {
    denied: Mutex<Vec<String>>,
}

impl Log {
    pub(crate) fn deny(&self, host: &str, port: u16) {
        let entry = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        tracing::info!(target: "dsh_net_proxy", "refused {entry}");
        let mut denied = self.denied.lock().unwrap_or_else(PoisonError::into_inner);
        if !denied.contains(&entry) && denied.len() < MAX_DENIED {
            denied.push(entry);
        }
    }
}

impl NetworkLog for Log {
    fn denied(&self) -> Vec<String> {
        self.denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What every connection of one door shares.
#[derive(Debug)]
pub(crate) struct DoorState {
    pub(crate) rules: Arc<HostRules>,
    pub(crate) log: Arc<Log>,
    pub(crate) limits: ProxyLimits,
    /// Bytes still allowed through the door.
    pub(crate) budget: AtomicU64,
    pub(crate) slots: Arc<Semaphore>,
    /// Cancelled when the door closes: every task of the door ends.
    pub(crate) closed: CancellationToken,
}

impl DoorState {
    /// Runs `work` until it ends or the door closes.
    pub(crate) fn spawn<F>(self: &Arc<Self>, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let closed = self.closed.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = closed.cancelled() => {}
                () = work => {}
            }
        });
    }

    /// Takes `n` bytes from the budget; false when it is spent.
    pub(crate) fn spend(&self, n: usize) -> bool {
        let n = n as u64;
        self.budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }
}

/// One command's door into the proxy. Dropping it closes the listener and
/// cuts every connection that came through it.
#[derive(Debug)]
pub struct Door {
    address: DoorAddress,
    state: Arc<DoorState>,
}

impl Door {
    /// Where it listens.
    pub fn address(&self) -> &DoorAddress {
        &self.address
    }

    /// Its refusals so far.
    pub fn log(&self) -> Arc<Log> {
        Arc::clone(&self.state.log)
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.state.closed.cancel();
        if let DoorAddress::Unix(path) = &self.address {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Proxy {
    /// A proxy whose doors allow at most `limits`.
    pub fn new(limits: ProxyLimits) -> Self {
        Proxy { limits }
    }

    /// Opens a door for one command that lets it reach the hosts of
    /// `rules`. Must be called inside a tokio runtime, which serves it.
    pub fn door(&self, rules: Arc<HostRules>, at: DoorAt) -> io::Result<Door> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|err| io::Error::other(format!("the proxy needs a tokio runtime: {err}")))?;
        let _entered = runtime.enter();
        let state = Arc::new(DoorState {
            rules,
            log: Arc::default(),
            limits: self.limits,
            budget: AtomicU64::new(self.limits.bytes),
            slots: Arc::new(Semaphore::new(self.limits.connections.max(1))),
            closed: CancellationToken::new(),
        });
        let address = match at {
            DoorAt::Unix(path) => {
                let listener = std::os::unix::net::UnixListener::bind(&path)?;
                listener.set_nonblocking(true)?;
                let listener = tokio::net::UnixListener::from_std(listener)?;
                state.spawn(accept_unix(listener, Arc::clone(&state)));
                DoorAddress::Unix(path)
            }
            DoorAt::Loopback => {
                let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
                listener.set_nonblocking(true)?;
                let address = listener.local_addr()?;
                let listener = tokio::net::TcpListener::from_std(listener)?;
                state.spawn(accept_tcp(listener, Arc::clone(&state)));
                DoorAddress::Tcp(address)
            }
        };
        Ok(Door { address, state })
    }
}

async fn accept_unix(listener: tokio::net::UnixListener, state: Arc<DoorState>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => admit(stream, &state).await,
            Err(err) => backoff(&err).await,
        }
    }
}

async fn accept_tcp(listener: tokio::net::TcpListener, state: Arc<DoorState>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                admit(stream, &state).await;
            }
            Err(err) => backoff(&err).await,
        }
    }
}

/// Accept failed (out of descriptors, most likely): wait a little rather
/// than spin.
async fn backoff(err: &io::Error) {
    tracing::warn!(target: "dsh_net_proxy", "accept failed: {err}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Serves one connection once a slot is free.
async fn admit<S>(stream: S, state: &Arc<DoorState>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok(slot) = Arc::clone(&state.slots).acquire_owned().await else {
        return;
    };
    let connection = Arc::clone(state);
    state.spawn(async move {
        meter::serve(stream, connection).await;
        drop(slot);
    });
}
