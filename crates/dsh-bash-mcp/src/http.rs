//! `dsh-bash mcp --listen ADDR`: the same server over MCP's Streamable
//! HTTP transport, for harnesses on another machine.
//!
//! Every request passes, in this order:
//!
//! 1. `Origin`: a request carrying one that is not `--allow-origin`ed is
//!    refused with 403 (a web page must not drive the server: DNS
//!    rebinding), as is a `Host` that is not the server's (loopback names,
//!    plus `--allow-http-host`);
//! 2. the bearer token (`Authorization: Bearer …`), compared in constant
//!    time against each configured token: missing or wrong is 401;
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

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use rmcp::model::ProtocolVersion;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{
    SessionManager as _, StreamableHttpServerConfig, StreamableHttpService,
};
use tokio_util::sync::CancellationToken;

use super::idle::{Activity, AwakeClock};
use super::{BashServer, Hub, SessionState};

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

/// What routing needs from a JSON-RPC message, read without building it
/// (everything else is skipped, allocation-free).
#[derive(serde::Deserialize)]
struct Routing<'a> {
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    params: Option<RoutingParams>,
}

#[derive(serde::Deserialize)]
struct RoutingParams {
    #[serde(rename = "_meta")]
    meta: Option<RoutingMeta>,
}

#[derive(serde::Deserialize)]
struct RoutingMeta {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    version: Option<serde::de::IgnoredAny>,
}

impl Routing<'_> {
    /// A request carrying its protocol version in `_meta` (2026-07-28,
    /// served without a session).
    fn per_request_version(&self) -> bool {
        self.params
            .as_ref()
            .and_then(|p| p.meta.as_ref())
            .is_some_and(|m| m.version.is_some())
    }

    fn opens_a_session(&self) -> bool {
        self.method.as_deref() == Some("initialize")
    }
}

/// The shortest token accepted from a file or the environment.
const MIN_TOKEN_LEN: usize = 16;

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

/// A bearer token, compared in constant time.
struct Token(Vec<u8>);

impl Token {
    /// True if `presented` is this token; the time taken depends only on
    /// the lengths.
    fn matches(&self, presented: &[u8]) -> bool {
        if presented.len() != self.0.len() {
            return false;
        }
        let difference = self
            .0
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(difference) == 0
    }
}

/// A token nobody can guess: 244 random bits (two v4 UUIDs), as hex.
fn generate_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl Listening {
    /// The file holding the tokens, if one does: what confined commands
    /// must not read.
    pub fn token_file(&self) -> Option<&Path> {
        self.token_file.as_deref()
    }
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

/// Where the tokens came from (what a non-loopback address requires).
enum TokenSource {
    File,
    Environment,
    /// Generated into this private file.
    Generated(PathBuf),
}

fn check_token(token: &str, whence: &str) -> anyhow::Result<()> {
    if token.len() < MIN_TOKEN_LEN {
        anyhow::bail!(
            "the token {whence} is {} characters; at least {MIN_TOKEN_LEN} are needed (e.g. `openssl rand -hex 32`)",
            token.len()
        );
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        anyhow::bail!(
            "the token {whence} has characters other than printable ASCII without spaces"
        );
    }
    Ok(())
}

/// Writes `token` to a new file at `path`, readable by its owner only.
fn write_new_token(path: &Path, token: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create the token file {}", path.display()))?;
    writeln!(file, "{token}")
        .with_context(|| format!("cannot write the token file {}", path.display()))
}

/// The configured tokens, where they came from, and the file that holds
/// them (canonical), if one does.
fn load_tokens(args: &HttpOptions) -> anyhow::Result<(Vec<Token>, TokenSource, Option<PathBuf>)> {
    let (tokens, source) = read_tokens(args)?;
    let file = match source {
        TokenSource::File => args.token_file.clone(),
        TokenSource::Generated(ref path) => Some(path.clone()),
        TokenSource::Environment => None,
    };
    let file = file.map(|path| std::fs::canonicalize(&path).unwrap_or(path));
    Ok((tokens, source, file))
}

fn read_tokens(args: &HttpOptions) -> anyhow::Result<(Vec<Token>, TokenSource)> {
    if let Some(path) = &args.token_file {
        // Opened once: the mode checked is the mode of the file read.
        return match std::fs::File::open(path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let token = generate_token();
                write_new_token(path, &token)?;
                eprintln!(
                    "dsh-bash: generated a bearer token into {} (mode 0600)",
                    path.display()
                );
                Ok((vec![Token(token.into_bytes())], TokenSource::File))
            }
            Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
            Ok(mut file) => {
                use std::io::Read as _;
                use std::os::unix::fs::PermissionsExt as _;
                let meta = file
                    .metadata()
                    .with_context(|| format!("cannot read {}", path.display()))?;
                use std::os::unix::fs::MetadataExt as _;
                // Ours, like ssh wants its keys (the owner of /proc/self is
                // this process's user).
                if let Ok(me) = std::fs::metadata("/proc/self") {
                    if meta.uid() != me.uid() {
                        anyhow::bail!(
                            "the token file {} belongs to uid {}, not to this server's user (uid {}); whoever owns it can change the token",
                            path.display(),
                            meta.uid(),
                            me.uid()
                        );
                    }
                }
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    anyhow::bail!(
                        "the token file {} is readable by others (mode {mode:o}); run `chmod 600 {}`",
                        path.display(),
                        path.display()
                    );
                }
                let mut text = String::new();
                file.read_to_string(&mut text)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let mut tokens = Vec::new();
                for (n, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    check_token(line, &format!("on line {} of {}", n + 1, path.display()))?;
                    tokens.push(Token(line.as_bytes().to_vec()));
                }
                if tokens.is_empty() {
                    anyhow::bail!("the token file {} holds no token", path.display());
                }
                Ok((tokens, TokenSource::File))
            }
        };
    }
    if let Ok(token) = std::env::var(TOKEN_ENV) {
        let token = token.trim().to_owned();
        check_token(&token, &format!("in ${TOKEN_ENV}"))?;
        return Ok((vec![Token(token.into_bytes())], TokenSource::Environment));
    }
    let token = generate_token();
    let dir = tempfile::Builder::new()
        .prefix("dsh-bash-token-")
        .tempdir()
        .context("cannot create a private directory for the generated token")?
        .keep();
    let path = dir.join("token");
    write_new_token(&path, &token)?;
    eprintln!(
        "dsh-bash: bearer token (generated; also in {}, mode 0600): {token}",
        path.display()
    );
    Ok((
        vec![Token(token.into_bytes())],
        TokenSource::Generated(path),
    ))
}

/// A checked `--listen`: the address, its tokens and its policy.
pub struct Listening {
    address: SocketAddr,
    tokens: Vec<Token>,
    /// The file the tokens were read from, canonical (a secret no command
    /// may read).
    token_file: Option<PathBuf>,
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
    ) -> anyhow::Result<Self> {
        if args.max_sessions == 0 {
            anyhow::bail!("--max-sessions must be at least 1");
        }
        if args.idle_timeout == 0 {
            anyhow::bail!("--idle-timeout must be at least 1 second");
        }
        if args.max_sessions_per_token == 0 {
            anyhow::bail!("--max-sessions-per-token must be at least 1");
        }
        if args.max_connections == 0 {
            anyhow::bail!("--max-connections must be at least 1");
        }
        for origin in &args.allow_origin {
            if !(origin.starts_with("http://") || origin.starts_with("https://"))
                || origin.ends_with('/')
            {
                anyhow::bail!(
                    "--allow-origin {origin:?} is not an origin; expected scheme://host[:port], e.g. https://app.example.com"
                );
            }
        }
        let (tokens, source, token_file) = load_tokens(args)?;
        let loopback = address.ip().is_loopback();
        if !loopback && matches!(source, TokenSource::Generated(_)) {
            anyhow::bail!(
                "refusing to listen on {address}, which is not a loopback address, without a configured token: give --token-file FILE or ${TOKEN_ENV}"
            );
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
            allowed_origins: args.allow_origin.clone(),
            allowed_hosts,
            max_sessions: args.max_sessions,
            max_sessions_per_token: args.max_sessions_per_token.min(args.max_sessions),
            max_connections: args.max_connections,
            idle,
        })
    }
}

type Body = BoxBody<Bytes, Infallible>;
type Endpoint = StreamableHttpService<BashServer, LocalSessionManager>;

/// The shared executor session of one token's 2026-07-28 requests.
struct Shared {
    state: Arc<SessionState>,
    /// When a request last used it, on the gate's [`AwakeClock`].
    used: u64,
}

/// One token's endpoints.
struct Door {
    token: Token,
    /// Sessions of protocol versions up to 2025-11-25.
    sessions: Endpoint,
    /// Their manager, which knows this token's session ids.
    manager: Arc<LocalSessionManager>,
    /// This token's sessions alive (its 2026 one included).
    live: Arc<std::sync::atomic::AtomicUsize>,
    /// 2026-07-28 requests, which have no session.
    stateless: Endpoint,
    shared: Arc<Mutex<Option<Shared>>>,
    /// When this token's 2025-era sessions were last asked anything.
    activity: Arc<Activity>,
    /// This token's share of the body budget ([`TOKEN_BODY_BUDGET`]).
    budget: tokio::sync::Semaphore,
}

/// The token's shared (2026-07-28) session in `slot`, touched; opened
/// within the caps (`max` in all, `token.1` for the token whose count is
/// `token.0`) if there is none. `None` at a cap.
fn shared_session(
    slot: &Mutex<Option<Shared>>,
    hub: &Hub,
    (max, clock): (usize, &AwakeClock),
    token: (&Arc<std::sync::atomic::AtomicUsize>, usize),
) -> Option<Arc<SessionState>> {
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(current) = slot.as_mut() {
        current.used = clock.now();
        return Some(Arc::clone(&current.state));
    }
    let state = hub.try_open(max, true, Some(token))?;
    *slot = Some(Shared {
        state: Arc::clone(&state),
        used: clock.now(),
    });
    Some(state)
}

/// What every connection's requests go through.
struct Gate {
    doors: Vec<Door>,
    hub: Arc<Hub>,
    allowed_origins: Vec<String>,
    max_sessions: usize,
    max_sessions_per_token: usize,
    /// Request-body bytes that may be held at once ([`BODY_BUDGET`]).
    budget: tokio::sync::Semaphore,
    /// Idle time, which a stall does not count.
    clock: Arc<AwakeClock>,
}

/// A request refused before it reaches rmcp: the answer, boxed (it is
/// large beside what an admitted request carries on).
type Refusal = Box<Response<Body>>;

/// A body's share of its token's body budget and of everyone's.
type BodyPermits<'a> = (
    tokio::sync::SemaphorePermit<'a>,
    tokio::sync::SemaphorePermit<'a>,
);

fn refusal(status: StatusCode, text: impl Into<String>) -> Refusal {
    Box::new(plain(status, text))
}

fn plain(status: StatusCode, text: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text.into())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The origin of a header value, normalised for comparison
/// (`scheme://host:port`, the default port made explicit).
fn normal_origin(origin: &str) -> String {
    let origin = origin.trim().to_ascii_lowercase();
    let default_port = if origin.starts_with("https://") {
        ":443"
    } else if origin.starts_with("http://") {
        ":80"
    } else {
        return origin;
    };
    let host = origin.split_once("://").map_or("", |(_, rest)| rest);
    // An IPv6 literal's colons are inside brackets.
    let has_port = host
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        && !host.ends_with(']');
    if has_port {
        origin
    } else {
        format!("{origin}{default_port}")
    }
}

/// Why a request's authority cannot be judged, if it cannot: an
/// absolute-form target (`POST http://evil.example/mcp`: which host is meant
/// would be a guess between it and `Host`), or a `Host` carrying userinfo
/// (`evil@127.0.0.1`) or a list (`127.0.0.1:80,evil.example`): parsers
/// disagree on which part is the host.
fn authority_refused<B>(request: &Request<B>) -> Option<&'static str> {
    if request.uri().scheme().is_some() || request.uri().authority().is_some() {
        return Some("Bad Request: give the request target in origin form (POST /mcp), not as an absolute URL");
    }
    let host = request.headers().get(hyper::header::HOST);
    if host.is_some_and(|host| host.as_bytes().contains(&b',')) {
        return Some(
            "Bad Request: a Host header names one host (no comma-separated list): give host[:port]",
        );
    }
    let userinfo = host.is_some_and(|host| host.as_bytes().contains(&b'@'));
    userinfo.then_some("Bad Request: a Host header carries no userinfo (user@): give host[:port]")
}

impl Gate {
    fn origin_allowed(&self, origin: &str) -> bool {
        let origin = normal_origin(origin);
        self.allowed_origins
            .iter()
            .any(|allowed| normal_origin(allowed) == origin)
    }

    /// The door of the presented bearer token, if any. Every token is
    /// compared, whichever matches.
    fn door(&self, request: &Request<hyper::body::Incoming>) -> Option<&Door> {
        let presented = request
            .headers()
            .get(hyper::header::AUTHORIZATION)?
            .as_bytes();
        // The scheme is case-insensitive (RFC 7235).
        let (scheme, presented) = presented.split_at_checked(7)?;
        if !scheme.eq_ignore_ascii_case(b"bearer ") {
            return None;
        }
        let mut found = None;
        for door in &self.doors {
            if door.token.matches(presented) {
                found = Some(door);
            }
        }
        found
    }

    fn too_many_sessions(&self) -> Response<Body> {
        plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "Service Unavailable: {} sessions are open, the most this server allows (--max-sessions); close one (HTTP DELETE with its Mcp-Session-Id) or wait for an idle one to expire",
                self.max_sessions
            ),
        )
    }

    async fn handle(&self, request: Request<hyper::body::Incoming>) -> Response<Body> {
        if request.uri().path() == "/healthz" {
            return plain(StatusCode::OK, "ok\n");
        }
        let door = match self.admit(&request) {
            Ok(door) => door,
            Err(refused) => return *refused,
        };
        // The body is read here, within a deadline and a size cap (a body
        // trickled forever would hold its connection), and looked at to
        // route the request.
        let (parts, body) = request.into_parts();
        let (body, _budget) = match self.read_body(door, &parts, body).await {
            Ok(read) => read,
            Err(refused) => return *refused,
        };
        let routing: Option<Routing<'_>> = serde_json::from_slice(&body).ok();
        let per_request_version = routing.as_ref().is_some_and(Routing::per_request_version);
        let opens = routing.as_ref().is_some_and(Routing::opens_a_session);
        drop(routing);
        let request = Request::from_parts(parts, Full::new(body));
        self.route(door, request, per_request_version, opens).await
    }

    /// The token's door, if the request may go on: one `Host` whose
    /// authority can be judged, an allowed `Origin`, a token, the endpoint.
    fn admit(&self, request: &Request<hyper::body::Incoming>) -> Result<&Door, Refusal> {
        // Two `Host`s: which one is checked would be a guess.
        if request
            .headers()
            .get_all(hyper::header::HOST)
            .iter()
            .count()
            > 1
        {
            return Err(refusal(
                StatusCode::BAD_REQUEST,
                "Bad Request: more than one Host header",
            ));
        }
        if let Some(refused) = authority_refused(request) {
            return Err(refusal(StatusCode::BAD_REQUEST, refused));
        }
        if let Some(origin) = request.headers().get(hyper::header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            if !self.origin_allowed(origin) {
                return Err(refusal(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Forbidden: Origin {origin:?} is not allowed (the server's --allow-origin)"
                    ),
                ));
            }
        }
        let Some(door) = self.door(request) else {
            let mut response = plain(
                StatusCode::UNAUTHORIZED,
                "Unauthorized: send the server's token as `Authorization: Bearer <token>`",
            );
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer realm=\"dsh-bash\""),
            );
            return Err(Box::new(response));
        };
        if request.uri().path() != ENDPOINT {
            return Err(refusal(
                StatusCode::NOT_FOUND,
                format!("Not Found: the MCP endpoint is {ENDPOINT}"),
            ));
        }
        Ok(door)
    }

    /// The request's body, read within [`BODY_DEADLINE`] and
    /// [`MAX_BODY_BYTES`], and its share of the token's and everyone's
    /// body budget, held until the request is answered.
    async fn read_body<'a>(
        &'a self,
        door: &'a Door,
        parts: &hyper::http::request::Parts,
        body: hyper::body::Incoming,
    ) -> Result<(Bytes, Option<BodyPermits<'a>>), Refusal> {
        let declared = parts
            .headers
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
            // Before any `100 Continue`: nothing is uploaded to be refused.
            return Err(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "Payload Too Large: a request body may hold at most {MAX_BODY_BYTES} bytes"
                ),
            ));
        }
        if parts.method != hyper::Method::POST {
            return Ok((Bytes::new(), None));
        }
        self.collect_body(door, body, declared).await
    }

    /// Takes `more` bytes of budget (its token's and everyone's) on top of
    /// `held`. When they are not free at once, what is held goes back and
    /// the whole body's worth (`wanted` so far, or all of what it declared)
    /// is waited for in one request: bodies of one token that each hold a
    /// part and wait for more would otherwise wait for each other until
    /// their deadline.
    async fn take_budget<'a>(
        &'a self,
        door: &'a Door,
        mut held: Option<BodyPermits<'a>>,
        more: usize,
        (wanted, declared): (usize, Option<usize>),
        deadline: tokio::time::Instant,
    ) -> Result<Option<BodyPermits<'a>>, Refusal> {
        let n = |bytes: usize| u32::try_from(bytes).unwrap_or(u32::MAX);
        // What was waited for in one request already covers these bytes.
        let have = held.as_ref().map_or(0, |(mine, _)| mine.num_permits());
        let more = more.min(wanted.saturating_sub(have));
        if more == 0 {
            return Ok(held);
        }
        if let Ok(token) = door.budget.try_acquire_many(n(more)) {
            if let Ok(all) = self.budget.try_acquire_many(n(more)) {
                match held.as_mut() {
                    Some((mine, everyone)) => {
                        mine.merge(token);
                        everyone.merge(all);
                    }
                    None => held = Some((token, all)),
                }
                return Ok(held);
            }
        }
        drop(held);
        let whole = n(declared.unwrap_or(wanted).clamp(wanted, MAX_BODY_BYTES));
        let both = async {
            let token = door.budget.acquire_many(whole).await?;
            let all = self.budget.acquire_many(whole).await?;
            Ok::<_, tokio::sync::AcquireError>((token, all))
        };
        match tokio::time::timeout_at(deadline, both).await {
            Ok(Ok(permits)) => Ok(Some(permits)),
            _ => Err(refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: too many request bodies are being read; retry",
            )),
        }
    }

    /// Reads a POST body frame by frame, within [`BODY_DEADLINE`] and
    /// [`MAX_BODY_BYTES`], taking each frame's bytes from its token's
    /// budget and from everyone's as they arrive (not what `Content-Length`
    /// promises): a body that trickles or never comes holds only what it
    /// sent. The permits are held until the request is answered (rmcp
    /// parses the body again meanwhile).
    async fn collect_body<'a>(
        &'a self,
        door: &'a Door,
        mut body: hyper::body::Incoming,
        declared: Option<usize>,
    ) -> Result<(Bytes, Option<BodyPermits<'a>>), Refusal> {
        let deadline = tokio::time::Instant::now() + BODY_DEADLINE;
        let too_large = || {
            refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "Payload Too Large: a request body may hold at most {MAX_BODY_BYTES} bytes"
                ),
            )
        };
        let late = || {
            refusal(
                StatusCode::REQUEST_TIMEOUT,
                format!("Request Timeout: the body did not arrive within {BODY_DEADLINE:?}"),
            )
        };
        let mut collected = bytes::BytesMut::new();
        let mut held: Option<BodyPermits<'a>> = None;
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(late()),
                Ok(None) => break,
                Ok(Some(Err(err))) => {
                    return Err(refusal(
                        StatusCode::BAD_REQUEST,
                        format!("Bad Request: the body could not be read: {err}"),
                    ))
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if collected.len() + data.len() > MAX_BODY_BYTES {
                return Err(too_large());
            }
            let wanted = collected.len() + data.len();
            held = self
                .take_budget(door, held, data.len(), (wanted, declared), deadline)
                .await?;
            collected.extend_from_slice(&data);
        }
        Ok((collected.freeze(), held))
    }

    /// Routes an admitted request with its body to the token's endpoints.
    async fn route(
        &self,
        door: &Door,
        mut request: Request<Full<Bytes>>,
        per_request_version: bool,
        opens: bool,
    ) -> Response<Body> {
        let headers = request.headers();
        let session = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // 2026-07-28 has no sessions, whatever id a request carries: its
        // requests (known by their header, or by the per-request protocol
        // version in `_meta`, which is how rmcp tells them) share the
        // token's session and its caps; so does any request but
        // `initialize` that names no session.
        let modern = headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == ProtocolVersion::V_2026_07_28.as_str())
            || per_request_version;

        let sessionless = session.is_none() && request.method() == hyper::Method::POST && !opens;
        if modern || sessionless {
            if self.share(door).is_none() {
                return self.too_many_sessions();
            }
            return door.stateless.handle(request).await;
        }
        let Some(session) = session else {
            // An `initialize` opens a session; the session endpoint counts
            // it against the caps in one step (see `serve`), this is the
            // early answer.
            if opens {
                if self.hub.live() >= self.max_sessions {
                    return self.too_many_sessions();
                }
                let mine = door.live.load(std::sync::atomic::Ordering::Acquire);
                if mine >= self.max_sessions_per_token {
                    return plain(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("Service Unavailable: this token has {mine} sessions open, the most one token may (--max-sessions-per-token); close one (HTTP DELETE with its Mcp-Session-Id) or wait for an idle one to expire"),
                    );
                }
            }
            let response = door.sessions.handle(request).await;
            if let Some(id) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                door.activity.touch(id, self.clock.now());
            }
            return response;
        };
        // Only sessions the manager holds are tracked (an unknown id gets
        // rmcp's 404 and leaves nothing behind).
        let known = door
            .manager
            .sessions
            .read()
            .await
            .contains_key(session.as_str());
        // Closing a session this token does not have: nothing to close.
        let closing = request.method() == hyper::Method::DELETE;
        if closing && !known {
            return plain(StatusCode::NOT_FOUND, "Not Found: no such session");
        }
        // A call whose client goes away is told so (its result is kept);
        // the session is busy until the answer ends.
        let departure = super::departure::Departure::default();
        let watched = request.method() == hyper::Method::POST;
        if watched {
            request.extensions_mut().insert(departure.clone());
        }
        let busy = known.then(|| door.activity.enter(&session, &self.clock));
        let mut response = door.sessions.handle(request).await;
        if closing {
            door.activity.forget(&session);
        } else if watched {
            response = response.map(|body| super::departure::Watched::wrap(body, departure, busy));
        }
        // A session closed by DELETE: 200, which every client takes as
        // done (the Python SDK warns about rmcp's 202).
        if closing && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        response
    }

    /// The token's shared session, opened if there is none; `None` at the
    /// cap.
    fn share(&self, door: &Door) -> Option<Arc<SessionState>> {
        shared_session(
            &door.shared,
            &self.hub,
            (self.max_sessions, &self.clock),
            (&door.live, self.max_sessions_per_token),
        )
    }

    /// Ends every session idle for longer than `idle` on the awake clock:
    /// a 2025-era session with no request and no call in flight for that
    /// long, a token's shared session with no request.
    fn expire(&self, idle: Duration) {
        let now = self.clock.now();
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        for door in &self.doors {
            for id in door.activity.expired(now, idle_ms) {
                tracing::info!(session = %id, "a session expired after {idle:?} idle");
                // Closed on a task of its own: a session whose worker is
                // stuck writing to a client that stopped reading must not
                // stall every other expiry (nor the clock).
                let manager = Arc::clone(&door.manager);
                tokio::spawn(async move {
                    let id: Arc<str> = id.into();
                    if let Err(err) = manager.close_session(&id).await {
                        tracing::debug!(%err, "an expired session was already closed");
                    }
                });
            }
            let mut shared = door.shared.lock().unwrap_or_else(PoisonError::into_inner);
            if shared
                .as_ref()
                .is_some_and(|s| now.saturating_sub(s.used) > idle_ms)
            {
                tracing::info!("a token's shared session expired after {idle:?} idle");
                *shared = None;
            }
        }
    }

    /// Ends every shared session (shutdown).
    fn close(&self) {
        for door in &self.doors {
            *door.shared.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }
}

/// Serves until `shutdown` is cancelled (the binary cancels it at SIGTERM,
/// SIGINT or SIGHUP, see [`crate::stop_on_signals`]; the library installs
/// no handler): then stops accepting, ends every session, stops every
/// command and returns.
pub async fn serve(
    listening: Listening,
    hub: Arc<Hub>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listening.address)
        .await
        .with_context(|| format!("cannot listen on {}", listening.address))?;
    let bound = listener.local_addr()?;
    let stop = shutdown.child_token();
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .disable_allowed_origins();
    config = if listening.allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(listening.allowed_hosts.clone())
    };
    let clock = Arc::new(AwakeClock::default());
    let doors = listening
        .tokens
        .into_iter()
        .map(|token| {
            let shared: Arc<Mutex<Option<Shared>>> = Arc::default();
            // Sessions expire by the gate's awake clock, not rmcp's timer
            // (which a stall would fire).
            let mut manager = LocalSessionManager::default();
            manager.session_config.keep_alive = None;
            let manager = Arc::new(manager);
            // The cap is exact here (checked and counted in one step); the
            // gate's check before it only answers early with a 503.
            let (max_sessions, per_token) =
                (listening.max_sessions, listening.max_sessions_per_token);
            let live: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
            let sessions = StreamableHttpService::new(
                {
                    let (hub, live) = (Arc::clone(&hub), Arc::clone(&live));
                    move || {
                        hub.try_open(max_sessions, false, Some((&live, per_token)))
                            .map(|state| hub.server(state))
                            .ok_or_else(|| {
                                std::io::Error::other(format!(
                                    "the session cap is reached ({max_sessions} in all, --max-sessions; {per_token} per token, --max-sessions-per-token)"
                                ))
                            })
                    }
                },
                Arc::clone(&manager),
                config.clone(),
            );
            let stateless = StreamableHttpService::new(
                {
                    let (hub, shared, live, clock) = (
                        Arc::clone(&hub),
                        Arc::clone(&shared),
                        Arc::clone(&live),
                        Arc::clone(&clock),
                    );
                    // Opened by the gate; opened again (within the caps)
                    // if it expired in between.
                    move || {
                        shared_session(&shared, &hub, (max_sessions, &clock), (&live, per_token))
                            .map(|state| hub.server(state))
                            .ok_or_else(|| {
                                std::io::Error::other(format!(
                                    "the session cap is reached ({max_sessions} in all, --max-sessions; {per_token} per token, --max-sessions-per-token)"
                                ))
                            })
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
        })
        .collect();
    let gate = Arc::new(Gate {
        doors,
        hub: Arc::clone(&hub),
        allowed_origins: listening.allowed_origins,
        max_sessions: listening.max_sessions,
        max_sessions_per_token: listening.max_sessions_per_token,
        budget: tokio::sync::Semaphore::new(BODY_BUDGET),
        clock,
    });
    eprintln!("dsh-bash: listening on http://{bound}{ENDPOINT}");
    let reaper = tokio::spawn({
        let (gate, idle) = (Arc::clone(&gate), listening.idle);
        async move {
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
    });
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
            Ok((stream, _)) => {
                // A result is one small write after the SSE priming event:
                // without this it waits for the peer's delayed ACK (~40 ms).
                if let Err(err) = stream.set_nodelay(true) {
                    tracing::debug!(%err, "cannot set TCP_NODELAY");
                }
                stream
            }
            Err(err) => {
                // Out of descriptors, say: the next accept may succeed.
                tracing::warn!(%err, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let gate = Arc::clone(&gate);
        connections.spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |request| {
                let gate = Arc::clone(&gate);
                async move {
                    let mut response = gate.handle(request).await;
                    // Clients that honour it stop reusing an idle
                    // connection well before the server closes it (so a
                    // request is never sent on a connection being closed).
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
        });
        // Reap finished connections as we go.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    reaper.abort();
    gate.close();
    hub.executor().shutdown().await;
    connections.abort_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
