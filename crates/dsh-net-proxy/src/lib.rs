//! The network allow-list of dsh-bash: a proxy in the server process that
//! a confined command can reach and nothing else, which connects only to
//! the hosts of the command's [`HostRules`] and records every host it
//! refuses.
//!
//! One [`Proxy`] per server; one [`Door`] per command (a socket pair whose
//! far end only the command's forwarder in a bubblewrap sandbox holds, or a
//! loopback TCP port the Landlock ruleset lets the command connect to), so every connection is attributed to its
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
//! forwarder from `127.0.0.1:3128` to the door's far end, which it
//! inherits by descriptor.
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
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![warn(clippy::too_many_lines)]
// Unsafe code lives in `sys` only.
#![deny(unsafe_code)]

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
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
mod splice;
#[allow(unsafe_code)]
mod sys;
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
///
/// Its tunnels are spliced between sockets, and a splice into a socket
/// whose peer has gone raises `SIGPIPE`: the process must ignore it, as
/// every Rust program does from its start.
#[derive(Clone, Debug, Default)]
pub struct Proxy {
    limits: ProxyLimits,
}

/// The environment that points a command's tools at a proxy on
/// `127.0.0.1:port`: HTTP(S) for the tools that speak it, SOCKS5 with
/// remote names for the rest, nothing bypassing it.
pub fn environment(port: u16) -> Vec<(&'static str, String)> {
    let http = format!("http://127.0.0.1:{port}");
    let socks = format!("socks5h://127.0.0.1:{port}");
    let mut set = Vec::new();
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "npm_config_proxy",
        "npm_config_https_proxy",
    ] {
        set.push((name, http.clone()));
    }
    for name in ["ALL_PROXY", "all_proxy"] {
        set.push((name, socks.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        set.push((name, String::new()));
    }
    set
}

/// Where a door listens.
#[derive(Clone, Debug)]
pub enum DoorAt {
    /// One end of a socket pair that only the command's forwarder holds
    /// (by descriptor, never by a path another process could open): it
    /// passes each connection's own socket over it
    /// ([`forward::pass_socket`]), a TCP or a Unix stream socket, served
    /// directly.
    Passed,
    /// A TCP port on `127.0.0.1` the kernel picks.
    Loopback,
    /// A Unix stream socket bound at this path, which must not exist yet
    /// (in a directory only the caller can reach, e.g. one mounted into a
    /// session's container): each connection to it is a forwarder's
    /// channel, over which it passes sockets as through a
    /// [`DoorAt::Passed`] door. Whoever can open the path can use the door;
    /// the caller removes the file.
    Unix(std::path::PathBuf),
}

/// Where a door listens, once open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DoorAddress {
    /// The socket pair's far end ([`Door::far_end`]).
    Passed,
    /// The loopback address and port.
    Tcp(SocketAddr),
    /// The path of the Unix socket.
    Unix(std::path::PathBuf),
}

impl fmt::Display for DoorAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DoorAddress::Passed => f.write_str("a passed descriptor"),
            DoorAddress::Tcp(addr) => write!(f, "{addr}"),
            DoorAddress::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// How many distinct refusals a log keeps.
const MAX_DENIED: usize = 32;

/// Why the proxy refused a host, as its log keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// On no allow-list entry: a grant of the host could let it through.
    Unlisted,
    /// On the deny-list (by name or address).
    Denied,
    /// Resolves to an internal address no literal pattern names.
    Internal,
}

/// The refusals of one door: each `host:port` once, in the order first
/// refused, at most `MAX_DENIED` (the rest counted).
#[derive(Debug, Default)]
pub struct Log {
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    kept: Vec<(String, Refused)>,
    more: u64,
}

/// `host:port` as the log shows it: a host name of letters, digits, `-`,
/// `_` and `.` or an IP literal as given, anything else (a SOCKS5 name is
/// any 255 bytes) replaced by its length, so a command cannot write text
/// of its choosing into the facts.
fn entry(host: &str, port: u16) -> String {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(std::net::IpAddr::V6(v6)) = bare.parse::<std::net::IpAddr>() {
        return format!("[{v6}]:{port}");
    }
    let plain = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain {
        format!("{host}:{port}")
    } else {
        format!("(a malformed name of {} bytes):{port}", host.len())
    }
}

impl Log {
    pub(crate) fn deny(&self, host: &str, port: u16, why: Refused) {
        let entry = entry(host, port);
        tracing::info!(target: "dsh_net_proxy", "refused {entry} ({why:?})");
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.kept.iter().any(|(kept, _)| *kept == entry) {
            return;
        }
        if entries.kept.len() < MAX_DENIED {
            entries.kept.push((entry, why));
        } else {
            entries.more += 1;
        }
    }

    fn with<T>(&self, read: impl FnOnce(&Entries) -> T) -> T {
        read(&self.entries.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl NetworkLog for Log {
    fn denied(&self) -> Vec<String> {
        self.with(|e| e.kept.iter().map(|(entry, _)| entry.clone()).collect())
    }

    fn askable(&self) -> Vec<String> {
        self.with(|e| {
            e.kept
                .iter()
                .filter(|(entry, why)| *why == Refused::Unlisted && !entry.starts_with('('))
                .map(|(entry, _)| entry.clone())
                .collect()
        })
    }

    fn more(&self) -> u64 {
        self.with(|e| e.more)
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
    far_end: Option<Arc<OwnedFd>>,
    state: Arc<DoorState>,
}

impl Door {
    /// Where it listens.
    pub fn address(&self) -> &DoorAddress {
        &self.address
    }

    /// The socket pair's far end of a [`DoorAt::Passed`] door, for the
    /// command's forwarder to inherit (close-on-exec until a launcher keeps
    /// it).
    pub fn far_end(&self) -> Option<Arc<OwnedFd>> {
        self.far_end.clone()
    }

    /// Its refusals so far.
    pub fn log(&self) -> Arc<Log> {
        Arc::clone(&self.state.log)
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.state.closed.cancel();
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
        match at {
            DoorAt::Passed => {
                let (near, far) = std::os::unix::net::UnixStream::pair()?;
                near.set_nonblocking(true)?;
                let near = tokio::net::UnixStream::from_std(near)?;
                state.spawn(accept_passed(near, Arc::clone(&state)));
                Ok(Door {
                    address: DoorAddress::Passed,
                    far_end: Some(Arc::new(OwnedFd::from(far))),
                    state,
                })
            }
            DoorAt::Unix(path) => {
                let listener = tokio::net::UnixListener::bind(&path)?;
                state.spawn(accept_channels(listener, Arc::clone(&state)));
                Ok(Door {
                    address: DoorAddress::Unix(path),
                    far_end: None,
                    state,
                })
            }
            DoorAt::Loopback => {
                let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
                listener.set_nonblocking(true)?;
                let address = listener.local_addr()?;
                let listener = tokio::net::TcpListener::from_std(listener)?;
                state.spawn(accept_tcp(listener, Arc::clone(&state)));
                Ok(Door {
                    address: DoorAddress::Tcp(address),
                    far_end: None,
                    state,
                })
            }
        }
    }
}

/// Serves the sockets the forwarder passes until it lets go of its end
/// (the command's sandbox is gone). What it sends that is not a stream
/// socket is closed unserved, and said once per channel (a command that
/// floods its channel with such messages cannot flood the log).
async fn accept_passed(control: tokio::net::UnixStream, state: Arc<DoorState>) {
    let mut warned = false;
    let mut refuse = |err: &io::Error| {
        if !std::mem::replace(&mut warned, true) {
            tracing::warn!(target: "dsh_net_proxy", "{err} (said once per channel)");
        }
    };
    loop {
        let received = control
            .async_io(tokio::io::Interest::READABLE, || receive_socket(&control))
            .await;
        match received {
            Ok(Some(socket)) => match Passed::take(socket) {
                Ok(Passed::Tcp(stream)) => admit(stream, &state).await,
                Ok(Passed::Unix(stream)) => admit(stream, &state).await,
                Err(err) if err.kind() == io::ErrorKind::InvalidData => refuse(&err),
                Err(err) => backoff(&err).await,
            },
            Ok(None) => return,
            Err(err) if err.kind() == io::ErrorKind::InvalidData => refuse(&err),
            Err(err) => backoff(&err).await,
        }
    }
}

/// A connection the forwarder passed: the TCP socket it accepted, or a
/// Unix stream socket (one end of a pair).
enum Passed {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Passed {
    /// Takes `socket` if it is a stream socket of either family; anything
    /// else (a file, a datagram socket) is refused with `InvalidData` and
    /// closed.
    fn take(socket: OwnedFd) -> io::Result<Passed> {
        use rustix::net::{sockopt, AddressFamily, SocketType};
        let refused = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a door takes TCP or Unix stream sockets; the forwarder passed {what} (closed)"
                ),
            )
        };
        if sockopt::socket_type(&socket).map_err(|_| refused("a descriptor that is no socket"))?
            != SocketType::STREAM
        {
            return Err(refused("a socket of another type"));
        }
        match sockopt::socket_domain(&socket)? {
            AddressFamily::INET | AddressFamily::INET6 => {
                let stream = std::net::TcpStream::from(socket);
                stream.set_nonblocking(true)?;
                let _ = stream.set_nodelay(true);
                Ok(Passed::Tcp(tokio::net::TcpStream::from_std(stream)?))
            }
            AddressFamily::UNIX => {
                let stream = std::os::unix::net::UnixStream::from(socket);
                stream.set_nonblocking(true)?;
                Ok(Passed::Unix(tokio::net::UnixStream::from_std(stream)?))
            }
            _ => Err(refused("a stream socket of another family")),
        }
    }
}

/// One socket passed over `control`; `None` at its end.
fn receive_socket(control: &impl AsFd) -> io::Result<Option<OwnedFd>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let message = rustix::net::recvmsg(
        control,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    if message.bytes == 0 {
        return Ok(None);
    }
    // Anything but one socket (more descriptors, other messages) is
    // closed as the buffer drains.
    let socket = ancillary.drain().find_map(|message| match message {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    socket.map(Some).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the forwarder sent a message without a socket",
        )
    })
}

/// Channels open at once through one [`DoorAt::Unix`] door: a session's
/// forwarder needs one; more are closed at once (each holds a descriptor
/// of the server's).
const MAX_CHANNELS: usize = 8;

/// Serves each forwarder that connects to a [`DoorAt::Unix`] door as a
/// channel of its own, [`MAX_CHANNELS`] at most at once.
async fn accept_channels(listener: tokio::net::UnixListener, state: Arc<DoorState>) {
    let channels = Arc::new(Semaphore::new(MAX_CHANNELS));
    loop {
        match listener.accept().await {
            Ok((channel, _)) => match Arc::clone(&channels).try_acquire_owned() {
                Ok(held) => {
                    let state_of = Arc::clone(&state);
                    state.spawn(async move {
                        accept_passed(channel, state_of).await;
                        drop(held);
                    });
                }
                Err(_) => drop(channel),
            },
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
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + splice::Spliced + Unpin + Send + 'static,
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
