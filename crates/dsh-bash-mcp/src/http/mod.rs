//! `dsh-bash mcp --listen ADDR`: the same server over MCP's Streamable
//! HTTP transport, for harnesses on another machine.
//!
//! Every request passes, in this order:
//!
//! 1. `Origin`: a request carrying one that is not `--allow-origin`ed is
//!    refused with 403 (a web page must not drive the server: DNS
//!    rebinding), as is a `Host` that is not the server's (loopback names,
//!    plus `--allow-http-host`);
//! 2. the bearer token (`Authorization: Bearer …`, or `X-Dsh-Bash-Token:
//!    …` where a router in front keeps `Authorization` for itself),
//!    compared in constant time against each configured token: missing
//!    or wrong is 401;
//! 3. the token's own MCP endpoint. Each token has its own session
//!    manager, so a session id is only known to the token that created it:
//!    another token presenting it gets 404 and reaches nothing.
//!
//! Sessions: up to 2025-11-25 one MCP session (`Mcp-Session-Id`) is one
//! executor session. 2026-07-28 has no sessions: the requests of one token
//! share one executor session, which is what lets a client reconnect and
//! still read and kill its background tasks. A session with no request and
//! no call in flight for `--idle-timeout` expires and its commands are
//! stopped, idle time counted only while the server runs (see `idle.rs`);
//! `--max-sessions` caps them (503 past it). A client that goes away
//! mid-call finds the call's result kept (see `departure.rs`).
//!
//! TLS is not terminated here: run behind a reverse proxy that does
//! (README, `deploy/`), or on loopback.

mod gate;
mod tokens;

/// The header a token may come in besides `Authorization: Bearer` (a
/// router such as agent-sandbox's strips `Authorization`, and passes this
/// on).
pub const TOKEN_HEADER: &str = "x-dsh-bash-token";

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use self::gate::{shared_session, Door, Gate, Shared};
use self::tokens::{load_tokens, Loaded, Token, TokenSource};
use super::idle::AwakeClock;
use super::Hub;
use crate::ServeError;

/// The environment variable a token may come from.
pub const TOKEN_ENV: &str = "DSH_BASH_TOKEN";

/// The path the MCP endpoint is served on.
pub const ENDPOINT: &str = "/mcp";

/// How long a connection may wait for a request's headers (an idle
/// keep-alive connection is closed after it).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The idle time after which clients should not reuse a connection: half
/// of [`HEADER_TIMEOUT`].
const KEEP_ALIVE: &str = "timeout=5";

/// How long a request body may take to arrive.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// The largest request body (rmcp's own limit).
const MAX_BODY_BYTES: usize = 4 << 20;

/// Bytes of request bodies held at once, over all connections (each body
/// is parsed here and again by rmcp: the budget bounds what that costs).
const BODY_BUDGET: usize = 64 << 20;

/// The share of [`BODY_BUDGET`] one token's requests may hold at once:
/// bodies that trickle in (or never arrive) under one token wait for that
/// token's share, not for everyone's.
const TOKEN_BODY_BUDGET: usize = BODY_BUDGET / 4;

/// How the HTTP server is gated: its tokens, the origins and hosts it
/// answers, its session and connection caps. The `dsh-bash` binary's
/// flags of the same names (with the `clap` feature).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct HttpOptions {
    /// Bearer tokens, one per line (`#` starts a comment); the file must not
    /// be readable by group or others. A file that does not exist is
    /// created with one generated token (mode 0600). Without this option
    /// the token comes from $DSH_BASH_TOKEN, else it is generated, written
    /// to a private file and printed once on stderr.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub token_file: Option<PathBuf>,
    /// A browser origin allowed to call the server (`https://app.example:443`;
    /// repeatable). A request with any other `Origin` header is refused (403);
    /// requests without one (non-browser clients) are not affected.
    #[cfg_attr(feature = "clap", arg(long = "allow-origin", value_name = "ORIGIN"))]
    pub allow_origin: Vec<String>,
    /// A `Host` the server answers to besides the loopback names
    /// (repeatable; `example.com` or `example.com:8700`). On a non-loopback
    /// address without it, any `Host` is accepted.
    #[cfg_attr(
        feature = "clap",
        arg(long = "allow-http-host", id = "allow_http_host", value_name = "HOST")
    )]
    pub allow_host: Vec<String>,
    /// Sessions alive at once, over all tokens; past it a new session is
    /// refused with 503.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 64))]
    pub max_sessions: usize,
    /// Sessions one token may have alive at once (so one client cannot
    /// take every session); past it 503.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 16))]
    pub max_sessions_per_token: usize,
    /// Let a client approve a call's wider sandbox mode or network (the
    /// `bash` tool's `sandbox_permissions` and `network`). Off by default:
    /// over HTTP the client answering the question is whoever holds a
    /// token, so the server's --sandbox is a ceiling unless this is given.
    #[cfg_attr(feature = "clap", arg(long))]
    pub allow_escalation: bool,
    /// Connections open at once; past it new ones wait to be accepted (so
    /// idle connections cannot exhaust the server's descriptors).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 512))]
    pub max_connections: usize,
    /// Seconds without a request after which a session expires and its
    /// commands are stopped (raised to the longest timeout plus 10 s, so a
    /// foreground call in flight never outlives its session).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "SECS", default_value_t = 1800)
    )]
    pub idle_timeout: u64,
}

impl Default for HttpOptions {
    /// The binary's defaults: tokens from `$DSH_BASH_TOKEN` or generated,
    /// loopback hosts only, 64 sessions (16 per token), 512 connections,
    /// sessions idle for 30 minutes expire, no escalation.
    fn default() -> Self {
        HttpOptions {
            token_file: None,
            allow_origin: Vec::new(),
            allow_host: Vec::new(),
            max_sessions: 64,
            max_sessions_per_token: 16,
            allow_escalation: false,
            max_connections: 512,
            idle_timeout: 1800,
        }
    }
}

impl HttpOptions {
    /// Whether clients may approve escalations (`--allow-escalation`).
    pub fn allows_escalation(&self) -> bool {
        self.allow_escalation
    }
}

/// A checked `--listen`: the address, its tokens and its policy.
pub struct Listening {
    address: SocketAddr,
    tokens: Vec<Token>,
    /// The file the tokens were read from, canonical (a secret no command
    /// may read).
    token_file: Option<PathBuf>,
    /// What the person starting the server must be told (a generated
    /// token), for the caller to print.
    notice: Option<String>,
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
    max_sessions: usize,
    max_sessions_per_token: usize,
    max_connections: usize,
    idle: Duration,
}

impl Listening {
    /// Checks the options and loads (or makes) the tokens.
    pub fn prepare(
        address: SocketAddr,
        args: &HttpOptions,
        max_timeout: Duration,
    ) -> Result<Self, ServeError> {
        for (value, what) in [
            (args.max_sessions, "--max-sessions must be at least 1"),
            (
                args.idle_timeout.try_into().unwrap_or(usize::MAX),
                "--idle-timeout must be at least 1 second",
            ),
            (
                args.max_sessions_per_token,
                "--max-sessions-per-token must be at least 1",
            ),
            (args.max_connections, "--max-connections must be at least 1"),
        ] {
            if value == 0 {
                return Err(ServeError::Option(what.into()));
            }
        }
        for origin in &args.allow_origin {
            if !(origin.starts_with("http://") || origin.starts_with("https://"))
                || origin.ends_with('/')
            {
                return Err(ServeError::Option(format!(
                    "--allow-origin {origin:?} is not an origin; expected scheme://host[:port], e.g. https://app.example.com"
                )));
            }
        }
        let Loaded {
            tokens,
            source,
            file: token_file,
            notice,
        } = load_tokens(args)?;
        let loopback = address.ip().is_loopback();
        if !loopback && matches!(source, TokenSource::Generated(_)) {
            return Err(ServeError::Token(format!(
                "refusing to listen on {address}, which is not a loopback address, without a configured token: give --token-file FILE or ${TOKEN_ENV}"
            )));
        }
        let mut allowed_hosts = Vec::new();
        if loopback || !args.allow_host.is_empty() {
            allowed_hosts.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
            allowed_hosts.extend(args.allow_host.iter().cloned());
        }
        let idle =
            Duration::from_secs(args.idle_timeout).max(max_timeout + Duration::from_secs(10));
        Ok(Listening {
            address,
            tokens,
            token_file,
            notice,
            allowed_origins: args.allow_origin.clone(),
            allowed_hosts,
            max_sessions: args.max_sessions,
            max_sessions_per_token: args.max_sessions_per_token.min(args.max_sessions),
            max_connections: args.max_connections,
            idle,
        })
    }
}

impl Listening {
    /// The file holding the tokens, if one does: what confined commands
    /// must not read.
    pub fn token_file(&self) -> Option<&Path> {
        self.token_file.as_deref()
    }

    /// What the person starting the server must be told, once: a token
    /// generated for them and where it was written. The library prints
    /// nothing; the `dsh-bash` binary prints this on stderr.
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// Binds the address (before anything is served: a caller can say
    /// where the server listens, e.g. when port 0 was asked).
    pub async fn bind(self) -> Result<Bound, ServeError> {
        let listener = tokio::net::TcpListener::bind(self.address)
            .await
            .map_err(|source| ServeError::Listen {
                address: self.address,
                source,
            })?;
        let address = listener.local_addr().map_err(|source| ServeError::Listen {
            address: self.address,
            source,
        })?;
        Ok(Bound {
            listening: self,
            listener,
            address,
        })
    }
}

/// A [`Listening`] whose address is bound, ready to [`serve`].
pub struct Bound {
    listening: Listening,
    listener: tokio::net::TcpListener,
    address: SocketAddr,
}

impl Bound {
    /// The address bound (the port the system chose for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The endpoint's URL: `http://ADDRESS/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{ENDPOINT}", self.address)
    }
}

/// Serves until `shutdown` is cancelled (the binary cancels it at SIGTERM,
/// SIGINT or SIGHUP, see [`crate::stop_on_signals`]; the library installs
/// no handler): then stops accepting, ends every session, stops every
/// command and returns.
pub async fn serve(
    bound: Bound,
    hub: Arc<Hub>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let Bound {
        mut listening,
        listener,
        ..
    } = bound;
    let stop = shutdown.child_token();
    let clock = Arc::new(AwakeClock::default());
    let config = endpoint_config(&listening, &stop);
    let caps = listening_caps(&listening);
    let doors = std::mem::take(&mut listening.tokens)
        .into_iter()
        .map(|token| door(token, &hub, caps, &config, &clock))
        .collect();
    serve_gate(listening, doors, listener, (hub, clock), stop).await;
    Ok(())
}

/// The session caps every door counts against: in all, per token.
#[derive(Clone, Copy)]
struct Caps {
    sessions: usize,
    per_token: usize,
}

fn listening_caps(listening: &Listening) -> Caps {
    Caps {
        sessions: listening.max_sessions,
        per_token: listening.max_sessions_per_token,
    }
}

/// rmcp's endpoint settings: stopped with the server, origins checked by
/// the gate (not rmcp), the allowed `Host`s.
fn endpoint_config(listening: &Listening, stop: &CancellationToken) -> StreamableHttpServerConfig {
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .disable_allowed_origins();
    if listening.allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(listening.allowed_hosts.clone())
    }
}

fn cap_reached(caps: Caps) -> std::io::Error {
    std::io::Error::other(format!(
        "the session cap is reached ({} in all, --max-sessions; {} per token, --max-sessions-per-token)",
        caps.sessions, caps.per_token
    ))
}

/// One token's endpoints: its sessions (protocol versions up to
/// 2025-11-25) and its stateless 2026-07-28 requests' shared session.
fn door(
    token: Token,
    hub: &Arc<Hub>,
    caps: Caps,
    config: &StreamableHttpServerConfig,
    clock: &Arc<AwakeClock>,
) -> Door {
    let shared: Arc<Mutex<Option<Shared>>> = Arc::default();
    // Sessions expire by the gate's awake clock, not rmcp's timer (which a
    // stall would fire).
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    // The cap is exact here (checked and counted in one step); the gate's
    // check before it only answers early with a 503.
    let live: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
    let sessions = StreamableHttpService::new(
        {
            let (hub, live) = (Arc::clone(hub), Arc::clone(&live));
            move || {
                hub.try_open(caps.sessions, false, Some((&live, caps.per_token)))
                    .map(|state| hub.server(state))
                    .ok_or_else(|| cap_reached(caps))
            }
        },
        Arc::clone(&manager),
        config.clone(),
    );
    let stateless = StreamableHttpService::new(
        {
            let (hub, shared, live, clock) = (
                Arc::clone(hub),
                Arc::clone(&shared),
                Arc::clone(&live),
                Arc::clone(clock),
            );
            // Opened by the gate; opened again (within the caps) if it
            // expired in between.
            move || {
                shared_session(
                    &shared,
                    &hub,
                    (caps.sessions, &clock),
                    (&live, caps.per_token),
                )
                .map(|state| hub.server(state))
                .ok_or_else(|| cap_reached(caps))
            }
        },
        Arc::new(LocalSessionManager::default()),
        config.clone().with_legacy_session_mode(false),
    );
    Door {
        token,
        sessions,
        manager,
        live,
        stateless,
        shared,
        activity: Arc::default(),
        budget: tokio::sync::Semaphore::new(TOKEN_BODY_BUDGET),
    }
}

/// Runs the gate over `doors` until `stop`: the idle reaper, the accept
/// loop; then ends every session and stops every command.
async fn serve_gate(
    listening: Listening,
    doors: Vec<Door>,
    listener: tokio::net::TcpListener,
    (hub, clock): (Arc<Hub>, Arc<AwakeClock>),
    stop: CancellationToken,
) {
    let gate = Arc::new(Gate {
        doors,
        hub: Arc::clone(&hub),
        allowed_origins: listening.allowed_origins,
        max_sessions: listening.max_sessions,
        max_sessions_per_token: listening.max_sessions_per_token,
        budget: tokio::sync::Semaphore::new(BODY_BUDGET),
        clock,
    });
    let reaper = tokio::spawn(reap_idle(Arc::clone(&gate), listening.idle));
    let mut connections = tokio::task::JoinSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(listening.max_connections));
    loop {
        // A slot first: past --max-connections, new connections wait in
        // the kernel's backlog instead of taking descriptors.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot,
            () = stop.cancelled() => break,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors, say: the next accept may succeed.
                tracing::warn!(%err, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        connections.spawn(connection(stream, Arc::clone(&gate), slot));
        // Reap finished connections as we go.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    reaper.abort();
    gate.close();
    hub.executor().shutdown().await;
    connections.abort_all();
}

/// Expires idle sessions, advancing the gate's awake clock by the time
/// that passed while the server ran.
async fn reap_idle(gate: Arc<Gate>, idle: Duration) {
    let mut tick = tokio::time::interval(super::idle::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last = std::time::Instant::now();
    loop {
        tick.tick().await;
        let now = std::time::Instant::now();
        gate.clock.advance(now.duration_since(last));
        last = now;
        gate.expire(idle);
    }
}

/// Serves one HTTP/1 connection through the gate, holding its slot.
async fn connection(
    stream: tokio::net::TcpStream,
    gate: Arc<Gate>,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    // A result is one small write after the SSE priming event: without
    // this it waits for the peer's delayed ACK (~40 ms).
    if let Err(err) = stream.set_nodelay(true) {
        tracing::debug!(%err, "cannot set TCP_NODELAY");
    }
    let service = hyper::service::service_fn(move |request| {
        let gate = Arc::clone(&gate);
        async move {
            let mut response = gate.handle(request).await;
            // Clients that honour it stop reusing an idle connection well
            // before the server closes it (so a request is never sent on
            // a connection being closed).
            response.headers_mut().insert(
                hyper::header::HeaderName::from_static("keep-alive"),
                hyper::header::HeaderValue::from_static(KEEP_ALIVE),
            );
            Ok::<_, Infallible>(response)
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    if let Err(err) = connection.await {
        tracing::debug!(%err, "an HTTP connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::gate::normal_origin;
    use super::tokens::Token;

    #[test]
    fn tokens_match_exactly() {
        let token = Token(b"0123456789abcdef".to_vec());
        assert!(token.matches(b"0123456789abcdef"));
        assert!(!token.matches(b"0123456789abcdeF"));
        assert!(!token.matches(b"0123456789abcde"));
        assert!(!token.matches(b""));
    }

    #[test]
    fn origins_compare_with_their_default_ports() {
        assert_eq!(
            normal_origin("https://App.example"),
            "https://app.example:443"
        );
        assert_eq!(normal_origin("http://a:8080"), "http://a:8080");
        assert_eq!(normal_origin("http://[::1]"), "http://[::1]:80");
        assert_eq!(normal_origin("http://[::1]:9"), "http://[::1]:9");
        assert_eq!(normal_origin("null"), "null");
    }
}
