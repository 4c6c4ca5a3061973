//! The gate every request passes: origin and host, the token's door, the
//! body budgets, then the token's MCP endpoint.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use rmcp::model::ProtocolVersion;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{SessionManager as _, StreamableHttpService};

use super::tokens::Token;
use super::TOKEN_HEADER;
use super::{BODY_DEADLINE, ENDPOINT, MAX_BODY_BYTES};
use crate::idle::{Activity, AwakeClock};
use crate::{BashServer, Hub, SessionState};

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

type Body = BoxBody<Bytes, Infallible>;
type Endpoint = StreamableHttpService<BashServer, LocalSessionManager>;

/// The shared executor session of one token's 2026-07-28 requests.
pub(super) struct Shared {
    state: Arc<SessionState>,
    /// When a request last used it, on the gate's [`AwakeClock`].
    used: u64,
}

/// One token's endpoints.
pub(super) struct Door {
    pub(super) token: Token,
    /// Sessions of protocol versions up to 2025-11-25.
    pub(super) sessions: Endpoint,
    /// Their manager, which knows this token's session ids.
    pub(super) manager: Arc<LocalSessionManager>,
    /// This token's sessions alive (its 2026 one included).
    pub(super) live: Arc<std::sync::atomic::AtomicUsize>,
    /// 2026-07-28 requests, which have no session.
    pub(super) stateless: Endpoint,
    pub(super) shared: Arc<Mutex<Option<Shared>>>,
    /// When this token's 2025-era sessions were last asked anything.
    pub(super) activity: Arc<Activity>,
    /// This token's share of the body budget ([`super::TOKEN_BODY_BUDGET`]).
    pub(super) budget: tokio::sync::Semaphore,
}

/// The token's shared (2026-07-28) session in `slot`, touched; opened
/// within the caps (`max` in all, `token.1` for the token whose count is
/// `token.0`) if there is none. `None` at a cap.
pub(super) fn shared_session(
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
pub(super) struct Gate {
    pub(super) doors: Vec<Door>,
    pub(super) hub: Arc<Hub>,
    pub(super) allowed_origins: Vec<String>,
    pub(super) max_sessions: usize,
    pub(super) max_sessions_per_token: usize,
    /// Request-body bytes that may be held at once ([`super::BODY_BUDGET`]).
    pub(super) budget: tokio::sync::Semaphore,
    /// Idle time, which a stall does not count.
    pub(super) clock: Arc<AwakeClock>,
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
pub(super) fn normal_origin(origin: &str) -> String {
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

    /// The door of the presented token, if any: the bearer token of
    /// `Authorization`, else the one of [`TOKEN_HEADER`] (what a router
    /// that keeps `Authorization` for itself, such as agent-sandbox's,
    /// passes on). Every token is compared, whichever matches.
    fn door(&self, request: &Request<hyper::body::Incoming>) -> Option<&Door> {
        let bearer = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|value| {
                // The scheme is case-insensitive (RFC 7235).
                let (scheme, presented) = value.as_bytes().split_at_checked(7)?;
                scheme.eq_ignore_ascii_case(b"bearer ").then_some(presented)
            });
        let header = request
            .headers()
            .get(TOKEN_HEADER)
            .map(hyper::header::HeaderValue::as_bytes);
        [bearer, header]
            .into_iter()
            .flatten()
            .find_map(|presented| self.door_of(presented))
    }

    fn door_of(&self, presented: &[u8]) -> Option<&Door> {
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

    pub(super) async fn handle(&self, request: Request<hyper::body::Incoming>) -> Response<Body> {
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
                "Unauthorized: send the server's token as `Authorization: Bearer <token>` (or, through a router that keeps Authorization for itself, as `X-Dsh-Bash-Token: <token>`)",
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
        let departure = crate::departure::Departure::default();
        let watched = request.method() == hyper::Method::POST;
        if watched {
            request.extensions_mut().insert(departure.clone());
        }
        let busy = known.then(|| door.activity.enter(&session, &self.clock));
        let mut response = door.sessions.handle(request).await;
        if closing {
            door.activity.forget(&session);
        } else if watched {
            response = response.map(|body| crate::departure::Watched::wrap(body, departure, busy));
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
    pub(super) fn expire(&self, idle: Duration) {
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
    pub(super) fn close(&self) {
        for door in &self.doors {
            *door.shared.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }
}
