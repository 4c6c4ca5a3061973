//! The MCP server's stdio wire, checked line by line before the protocol
//! library sees it, so that every malformed message gets the JSON-RPC 2.0
//! answer a client can act on instead of silence: `-32700` for text that is
//! not JSON (a lone surrogate included), `-32600` for JSON that is not a
//! request (no `"jsonrpc": "2.0"`, a batch, a non-object), `-32602` for a
//! `tools/call` whose params are not `{name, arguments?}` and for any other
//! request the library knows whose params do not fit its types (a string,
//! a missing `taskId`, an unknown log level). Everything else passes
//! through unchanged (a leading UTF-8 byte-order mark removed); an unknown
//! method gets the library's `-32601`. A message over 15 MiB is answered
//! `-32600` and dropped (the library would drop it silently). Outgoing
//! messages and these answers go through one writer, whole lines at a time,
//! so they never interleave. On stdio, the server's own requests
//! (`elicitation/create`) go out without the `_meta.progressToken` the
//! protocol library stamps on every request: the server sends no progress
//! for them, and a token nobody announced misleads a client. (Over HTTP the
//! library writes them itself and they keep it: a limit.)
//!
//! The reader also reports EOF: a client that closes stdin wants the
//! session over now, even with calls in flight.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, PollSender};

/// What to do with one incoming line.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Hand it to the protocol library; what it is.
    Pass(Kind),
    /// Blank, or malformed where JSON-RPC forbids an answer (a
    /// notification, a response): drop it.
    Skip,
    /// Answer it with this error response and drop it.
    Reject(Value),
}

/// What a passed message is.
#[derive(Debug, PartialEq)]
enum Kind {
    /// A request; `opens` unless it may come before a session exists
    /// (`server/discover`, `ping`); `id` as JSON text.
    Request {
        opens: bool,
        id: String,
        initialize: bool,
    },
    /// `notifications/cancelled` for the request `id` (JSON text).
    Cancelled { id: String },
    /// Another notification, or a response.
    Other,
}

/// The ids (as JSON text) of the client's requests not answered yet.
pub(crate) type InFlight = Arc<Mutex<HashSet<String>>>;

fn error(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The request id if it is a valid one: a string, or an integer that fits
/// a signed 64-bit number (what the library can echo exactly).
fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64(),
        _ => false,
    }
}

/// The id to answer with: the request's own if valid, else null.
fn id_of(message: &serde_json::Map<String, Value>) -> Value {
    match message.get("id") {
        Some(id) if valid_id(id) => id.clone(),
        _ => Value::Null,
    }
}

/// The longest message passed on: below the protocol library's own 16 MiB
/// line limit, over which it would drop a message without an answer.
const MAX_LINE_BYTES: usize = 15 << 20;

/// A UTF-8 byte-order mark, which RFC 8259 lets a reader ignore.
const BOM: &[u8] = b"\xEF\xBB\xBF";

fn check(line: &[u8]) -> Verdict {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    match request_of(line) {
        Ok(request) => request,
        Err(verdict) => verdict,
    }
}

fn reject(id: Value, code: i64, message: impl Into<String>) -> Verdict {
    Verdict::Reject(error(id, code, message.into()))
}

/// The verdict on one line that is not blank: `Ok` for a request that
/// passes, `Err` for everything else (a response, a notification, what is
/// rejected).
fn request_of(line: &[u8]) -> Result<Verdict, Verdict> {
    let message = object_of(line)?;
    let id = id_of(&message);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(reject(
            id,
            -32600,
            "Invalid Request: \"jsonrpc\" must be \"2.0\"",
        ));
    }
    let Some(method) = message.get("method") else {
        return Err(without_method(message, id));
    };
    let Some(method) = method.as_str() else {
        return Err(reject(
            id,
            -32600,
            "Invalid Request: \"method\" must be a string",
        ));
    };
    let Some(raw_id) = message.get("id") else {
        let method = method.to_owned();
        return Err(notification(&method, message));
    };
    if !valid_id(raw_id) {
        return Err(reject(
            Value::Null,
            -32600,
            format!("Invalid Request: \"id\" must be a string or an integer, got {raw_id}"),
        ));
    }
    let opens = !matches!(method, "server/discover" | "ping");
    let request_id = raw_id.to_string();
    let initialize = method == "initialize";
    if method == "tools/call" && !tools_call_fits(message.get("params")) {
        return Err(reject(
            id,
            -32602,
            "Invalid params: tools/call expects {\"name\": <tool name>, \"arguments\": <object>} (and, if given, \"_meta\" and \"inputResponses\" objects, a \"requestState\" string)",
        ));
    }
    if KNOWN_REQUESTS.contains(&method) {
        known_request_fits(method.to_owned(), message, id)?;
    }
    Ok(Verdict::Pass(Kind::Request {
        opens,
        id: request_id,
        initialize,
    }))
}

/// The line as one JSON object (a leading byte-order mark ignored).
fn object_of(line: &[u8]) -> Result<serde_json::Map<String, Value>, Verdict> {
    let line = line.strip_prefix(BOM).unwrap_or(line);
    let value: Value = serde_json::from_slice(line)
        .map_err(|err| reject(Value::Null, -32700, format!("Parse error: {err}")))?;
    match value {
        Value::Object(message) => Ok(message),
        Value::Array(_) => Err(reject(
            Value::Null,
            -32600,
            "Invalid Request: batches are not supported; send one message per line",
        )),
        other => Err(reject(
            Value::Null,
            -32600,
            format!("Invalid Request: expected a JSON object, got {other}"),
        )),
    }
}

/// A message with no method: a response to one of our requests (a
/// malformed one is never answered), else rejected.
fn without_method(message: serde_json::Map<String, Value>, id: Value) -> Verdict {
    if message.contains_key("result") || message.contains_key("error") {
        let parsed = serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(message));
        return if parsed.is_ok() {
            Verdict::Pass(Kind::Other)
        } else {
            Verdict::Skip
        };
    }
    reject(
        id,
        -32600,
        "Invalid Request: a request needs a \"method\", a response a \"result\" or an \"error\"",
    )
}

/// A notification: never answered, a malformed one dropped.
fn notification(method: &str, message: serde_json::Map<String, Value>) -> Verdict {
    let known = KNOWN_NOTIFICATIONS.contains(&method);
    let cancelled = (method == "notifications/cancelled")
        .then(|| message.get("params").and_then(|p| p.get("requestId")))
        .flatten()
        .map(Value::to_string);
    let parsed = serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(message));
    let fits = match parsed {
        Ok(JsonRpcMessage::Notification(notification)) => {
            !known
                || !matches!(
                    notification.notification,
                    ClientNotification::CustomNotification(_)
                )
        }
        _ => false,
    };
    match (fits, cancelled) {
        (true, Some(id)) => Verdict::Pass(Kind::Cancelled { id }),
        (true, None) => Verdict::Pass(Kind::Other),
        (false, _) => Verdict::Skip,
    }
}

/// Whether a `tools/call`'s params have the shape the protocol says:
/// checked field by field, not by a second full parse (this is the hot
/// path, and its arguments may be megabytes of command).
fn tools_call_fits(params: Option<&Value>) -> bool {
    let named = params
        .and_then(|p| p.get("name"))
        .is_some_and(Value::is_string);
    let field = |name: &str, fits: fn(&Value) -> bool| {
        params
            .and_then(|p| p.get(name))
            .is_none_or(|v| v.is_null() || fits(v))
    };
    params.is_some_and(Value::is_object)
        && named
        && field("arguments", Value::is_object)
        && field("_meta", Value::is_object)
        && field("inputResponses", Value::is_object)
        && field("requestState", Value::is_string)
}

/// A known request whose params are not that request's is rejected (the
/// library would take it for a custom request and answer nothing useful).
fn known_request_fits(
    method: String,
    message: serde_json::Map<String, Value>,
    id: Value,
) -> Result<(), Verdict> {
    let parsed = serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(message));
    let fits = matches!(
        &parsed,
        Ok(JsonRpcMessage::Request(request))
            if !matches!(request.request, ClientRequest::CustomRequest(_))
    );
    if fits {
        return Ok(());
    }
    let why = parsed
        .err()
        .map(|err| format!(": {err}"))
        .unwrap_or_default();
    Err(reject(
        id,
        -32602,
        format!("Invalid params: not the params of {method}{why}"),
    ))
}

/// The notifications the protocol library has types for.
const KNOWN_NOTIFICATIONS: &[&str] = &[
    "notifications/cancelled",
    "notifications/initialized",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// The requests the protocol library has types for. Their params are
/// checked against those types here, so that a known method with
/// malformed params gets `-32602` (the library would answer `-32601`, or
/// `-32600` without the request's id).
const KNOWN_REQUESTS: &[&str] = &[
    "initialize",
    "server/discover",
    "ping",
    "completion/complete",
    "logging/setLevel",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// The checked reader (see the module docs).
pub(crate) struct Inbound<R> {
    inner: R,
    /// Bytes of the line being received.
    pending: Vec<u8>,
    /// The line being received is over the limit: drop it up to its end.
    oversized: bool,
    /// Checked lines, handed out from `ready[handed..]`.
    ready: Vec<u8>,
    handed: usize,
    replies: PollSender<Vec<u8>>,
    /// Replies of ours not taken by the writer yet: while there are any,
    /// nothing more is read (a client that stops reading stops us
    /// reading, instead of growing a queue).
    waiting: VecDeque<Vec<u8>>,
    on_eof: CancellationToken,
    eof: bool,
    /// A request that opens the session (anything but `server/discover`
    /// and `ping`) has been passed on: until then notifications and
    /// responses are dropped, since the library takes the first message
    /// after a discovery for the legacy handshake's and ends the
    /// connection on anything else.
    started: bool,
    /// `initialize` has been passed on: a second one is refused.
    initialized: bool,
    /// The client's requests not answered yet (the writer removes what it
    /// answers): an id reused while in flight is refused, as JSON-RPC
    /// requires ids to be unique then (the library would lose track of
    /// the first request's cancellation).
    in_flight: InFlight,
}

impl<R> Inbound<R> {
    pub(crate) fn new(
        inner: R,
        replies: mpsc::Sender<Vec<u8>>,
        on_eof: CancellationToken,
        in_flight: InFlight,
    ) -> Self {
        Inbound {
            inner,
            pending: Vec::new(),
            oversized: false,
            ready: Vec::new(),
            handed: 0,
            replies: PollSender::new(replies),
            waiting: VecDeque::new(),
            on_eof,
            eof: false,
            started: false,
            initialized: false,
            in_flight,
        }
    }

    fn reply(&mut self, reply: &Value) {
        let mut bytes = reply.to_string().into_bytes();
        bytes.push(b'\n');
        self.waiting.push_back(bytes);
    }

    fn judge(&mut self, mut line: Vec<u8>) {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let kind = match check(&line) {
            Verdict::Pass(Kind::Other | Kind::Cancelled { .. }) if !self.started => {
                tracing::debug!("a notification or response before the session began: dropped");
                return;
            }
            Verdict::Pass(kind) => kind,
            Verdict::Skip => return,
            Verdict::Reject(reply) => return self.reply(&reply),
        };
        match kind {
            Kind::Request {
                opens,
                id,
                initialize,
            } => {
                let refusal = if initialize && self.initialized {
                    Some("Invalid Request: the session is already initialized")
                } else if !self
                    .in_flight
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(id.clone())
                {
                    Some("Invalid Request: this id belongs to a request still in flight; ids must be unique among them")
                } else {
                    None
                };
                if let Some(message) = refusal {
                    let id = serde_json::from_str(&id).unwrap_or(Value::Null);
                    return self.reply(&error(id, -32600, message.into()));
                }
                self.started |= opens;
                self.initialized |= initialize;
            }
            Kind::Cancelled { id } => {
                // A cancelled request may get no answer: its id is free.
                self.in_flight
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
            }
            Kind::Other => {}
        }
        let line = line.strip_prefix(BOM).unwrap_or(&line);
        self.ready.extend_from_slice(line);
        self.ready.push(b'\n');
    }

    /// Takes in newly read bytes: complete lines are judged, an oversized
    /// one is dropped (answered once) up to its end. Each byte is scanned
    /// once.
    fn take(&mut self, mut bytes: &[u8]) {
        while let Some(end) = bytes.iter().position(|b| *b == b'\n') {
            let (head, rest) = bytes.split_at(end);
            bytes = &rest[1..];
            if self.oversized {
                self.oversized = false;
                continue;
            }
            let mut line = std::mem::take(&mut self.pending);
            line.extend_from_slice(head);
            if line.len() > MAX_LINE_BYTES {
                self.too_long();
            } else {
                self.judge(line);
            }
        }
        if self.oversized {
            return;
        }
        self.pending.extend_from_slice(bytes);
        if self.pending.len() > MAX_LINE_BYTES {
            self.pending = Vec::new();
            self.oversized = true;
            self.too_long();
        }
    }

    fn too_long(&mut self) {
        self.reply(&error(
            Value::Null,
            -32600,
            format!("Invalid Request: a message may be at most {MAX_LINE_BYTES} bytes long"),
        ));
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Inbound<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            // Our own replies go out first; while the writer cannot take
            // them, the client is not read.
            let this = &mut *self;
            if drain(&mut this.replies, &mut this.waiting, cx)?.is_pending() {
                return Poll::Pending;
            }
            if self.handed < self.ready.len() {
                let n = (self.ready.len() - self.handed).min(buf.remaining());
                let start = self.handed;
                buf.put_slice(&self.ready[start..start + n]);
                self.handed += n;
                if self.handed == self.ready.len() {
                    self.ready.clear();
                    self.handed = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            let mut raw = [0u8; 64 * 1024];
            let mut raw_buf = ReadBuf::new(&mut raw);
            match Pin::new(&mut self.inner).poll_read(cx, &mut raw_buf) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Ready(Ok(())) if raw_buf.filled().is_empty() => {
                    let last = std::mem::take(&mut self.pending);
                    if !self.oversized {
                        self.judge(last);
                    }
                    self.eof = true;
                    self.on_eof.cancel();
                }
                Poll::Ready(Ok(())) => {
                    let filled = raw_buf.filled().to_vec();
                    self.take(&filled);
                }
            }
        }
    }
}

/// Lines waiting for the writer at most: past them, whoever writes waits
/// (a client that stops reading holds the server's answers, not its
/// memory).
pub(crate) const OUTGOING_LINES: usize = 64;

/// Hands `queued` lines to the writer in order; `Pending` while it has no
/// room for the next one.
fn drain(
    lines: &mut PollSender<Vec<u8>>,
    queued: &mut VecDeque<Vec<u8>>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    let gone = || io::Error::from(io::ErrorKind::BrokenPipe);
    while !queued.is_empty() {
        match lines.poll_reserve(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(Err(gone())),
            Poll::Ready(Ok(())) => {
                let Some(line) = queued.pop_front() else {
                    break;
                };
                lines.send_item(line).map_err(|_| gone())?;
            }
        }
    }
    Poll::Ready(Ok(()))
}

/// The writing half handed to the protocol library: whole lines go to the
/// single writer, through a bounded queue.
pub(crate) struct Outbound {
    lines: PollSender<Vec<u8>>,
    partial: Vec<u8>,
    /// Whole lines not taken by the writer yet.
    queued: VecDeque<Vec<u8>>,
}

impl Outbound {
    pub(crate) fn new(lines: mpsc::Sender<Vec<u8>>) -> Self {
        Outbound {
            lines: PollSender::new(lines),
            partial: Vec::new(),
            queued: VecDeque::new(),
        }
    }
}

impl AsyncWrite for Outbound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        // What an earlier write left waits for room first.
        if drain(&mut this.lines, &mut this.queued, cx)?.is_pending() {
            return Poll::Pending;
        }
        this.partial.extend_from_slice(data);
        while let Some(end) = this.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = this.partial.drain(..=end).collect();
            this.queued.push_back(without_progress_token(line));
        }
        // Taken: what has no room yet goes with the next write or flush.
        let _ = drain(&mut this.lines, &mut this.queued, cx)?;
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        drain(&mut this.lines, &mut this.queued, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.partial.is_empty() {
            let rest = std::mem::take(&mut this.partial);
            this.queued.push_back(rest);
        }
        drain(&mut this.lines, &mut this.queued, cx)
    }
}

/// `line` without `params._meta.progressToken` when it is a request (the
/// library writes `{"jsonrpc":"2.0","id":…,"method":…`); responses and
/// notifications, the long lines, pass untouched.
fn without_progress_token(line: Vec<u8>) -> Vec<u8> {
    let head = &line[..line.len().min(96)];
    let is_request = head.starts_with(br#"{"jsonrpc":"2.0","id":"#)
        && head.windows(9).any(|w| w == br#""method":"#);
    if !is_request {
        return line;
    }
    let Ok(mut message) = serde_json::from_slice::<Value>(&line) else {
        return line;
    };
    let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
        return line;
    };
    let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) else {
        return line;
    };
    if meta.remove("progressToken").is_none() {
        return line;
    }
    if meta.is_empty() {
        params.remove("_meta");
    }
    let mut rewritten = message.to_string().into_bytes();
    rewritten.push(b'\n');
    rewritten
}

/// Writes every line it receives to `out`, whole, until all senders are
/// gone.
pub(crate) async fn write_lines(
    mut lines: mpsc::Receiver<Vec<u8>>,
    mut out: impl AsyncWrite + Unpin,
    in_flight: InFlight,
) {
    while let Some(line) = lines.recv().await {
        if let Some(id) = answered(&line) {
            in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        }
        if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
            break;
        }
    }
}

/// The id (as JSON text) a response answers; `None` for anything else.
fn answered(line: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        id: Option<Value>,
        method: Option<serde::de::IgnoredAny>,
    }
    let envelope: Envelope = serde_json::from_slice(line).ok()?;
    match envelope {
        Envelope {
            id: Some(id),
            method: None,
        } => Some(id.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `future` once.
    fn once<F: std::future::Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        let waker = std::task::Waker::noop();
        Pin::new(future).poll(&mut Context::from_waker(waker))
    }

    /// A client that stops reading holds the server's writes once the
    /// queue is full, instead of growing it; reading again lets them on,
    /// in order, none lost.
    #[tokio::test]
    async fn a_client_that_stops_reading_holds_the_writer_not_memory() {
        let (lines, mut outgoing) = mpsc::channel(OUTGOING_LINES);
        let mut out = Outbound::new(lines);
        let line = |n: usize| format!("{{\"jsonrpc\":\"2.0\",\"id\":{n},\"result\":{{}}}}\n");
        let mut written = 0;
        loop {
            let text = line(written);
            let mut write = Box::pin(out.write_all(text.as_bytes()));
            match once(&mut write) {
                Poll::Ready(done) => done.unwrap(),
                Poll::Pending => break,
            }
            let mut flush = Box::pin(out.flush());
            if once(&mut flush).is_pending() {
                written += 1;
                break;
            }
            written += 1;
            assert!(
                written <= OUTGOING_LINES + 1,
                "the queue grew past its bound"
            );
        }
        assert!(written >= OUTGOING_LINES, "{written}");
        // The client reads again: the held flush completes and every line
        // arrives, in order.
        let reading = async {
            let mut got = Vec::new();
            for _ in 0..written {
                got.push(outgoing.recv().await.unwrap());
            }
            got
        };
        let (flushed, got) = tokio::join!(out.flush(), reading);
        flushed.unwrap();
        for (n, got) in got.into_iter().enumerate() {
            assert_eq!(got, line(n).into_bytes(), "line {n}");
        }
        out.write_all(line(written).as_bytes()).await.unwrap();
        out.flush().await.unwrap();
        assert_eq!(outgoing.recv().await.unwrap(), line(written).into_bytes());
    }

    /// A client that sends garbage and never reads our answers stops
    /// being read, instead of queueing answers without limit.
    #[tokio::test]
    async fn a_client_that_never_reads_our_replies_stops_being_read() {
        let (replies, mut outgoing) = mpsc::channel(OUTGOING_LINES);
        let garbage = "{not json\n".repeat(100_000).into_bytes();
        let mut inbound = Inbound::new(
            garbage.as_slice(),
            replies,
            CancellationToken::new(),
            InFlight::default(),
        );
        let mut buf = [0u8; 1024];
        let mut read = Box::pin(tokio::io::AsyncReadExt::read(&mut inbound, &mut buf));
        assert!(once(&mut read).is_pending(), "it kept reading");
        drop(read);
        let consumed = garbage.len() - inbound.inner.len();
        assert!(
            consumed < garbage.len() / 4,
            "{consumed} of {} bytes read",
            garbage.len()
        );
        assert!(
            inbound.waiting.len() <= 64 * 1024 / 10,
            "{}",
            inbound.waiting.len()
        );
        // Reading our replies lets it go on.
        let first = outgoing.recv().await.unwrap();
        assert!(String::from_utf8_lossy(&first).contains("-32700"));
    }

    #[test]
    fn the_servers_own_requests_carry_no_progress_token() {
        let asked = br#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"_meta":{"progressToken":0},"message":"m"}}
"#;
        let out: Value = serde_json::from_slice(&without_progress_token(asked.to_vec())).unwrap();
        assert_eq!(out["params"], json!({"message": "m"}));
        let kept =
            br#"{"jsonrpc":"2.0","id":0,"method":"x","params":{"_meta":{"progressToken":0,"k":1}}}
"#;
        let out: Value = serde_json::from_slice(&without_progress_token(kept.to_vec())).unwrap();
        assert_eq!(out["params"], json!({"_meta": {"k": 1}}));
        // Results pass byte for byte, a progressToken in their text too.
        let result = br#"{"jsonrpc":"2.0","id":3,"result":{"text":"\"method\":\"progressToken\""}}
"#;
        assert_eq!(without_progress_token(result.to_vec()), result.to_vec());
    }

    fn code(verdict: Verdict) -> (i64, Value) {
        match verdict {
            Verdict::Reject(reply) => (
                reply["error"]["code"].as_i64().unwrap_or(0),
                reply["id"].clone(),
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_malformed_message_gets_its_code() {
        assert_eq!(code(check(b"{not json")), (-32700, Value::Null));
        assert_eq!(
            code(check(
                br#"{"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":"\ud800"}}"#
            )),
            (-32700, Value::Null)
        );
        assert_eq!(
            code(check(br#"[{"jsonrpc":"2.0"}]"#)),
            (-32600, Value::Null)
        );
        assert_eq!(code(check(b"42")), (-32600, Value::Null));
        assert_eq!(
            code(check(br#"{"id":5,"method":"ping"}"#)),
            (-32600, json!(5))
        );
        assert_eq!(
            code(check(
                br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"arguments":{}}}"#
            )),
            (-32602, json!("x"))
        );
        assert_eq!(
            code(check(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bash","arguments":"s"}}"#)),
            (-32602, json!(7))
        );
        for malformed in [
            br#"{"jsonrpc":"2.0","id":11,"method":"tools/list","params":"x"}"#.as_slice(),
            br#"{"jsonrpc":"2.0","id":11,"method":"logging/setLevel","params":{"level":"bogus"}}"#,
            br#"{"jsonrpc":"2.0","id":11,"method":"tasks/get","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":11,"method":"ping","params":[1]}"#,
        ] {
            assert_eq!(
                code(check(malformed)),
                (-32602, json!(11)),
                "{}",
                String::from_utf8_lossy(malformed)
            );
        }
        assert!(
            matches!(
                check(br#"{"jsonrpc":"2.0","id":12,"method":"nope/nope","params":{}}"#),
                Verdict::Pass(Kind::Request { opens: true, .. })
            ),
            "an unknown method is the library's -32601"
        );
        assert!(
            matches!(check(br#"{"jsonrpc":"2.0","id":13,"method":"logging/setLevel","params":{"level":"info"}}"#), Verdict::Pass(Kind::Request { opens: true, .. }))
        );
        assert!(matches!(
            check(br#"{"jsonrpc":"2.0","id":14,"method":"tasks/get","params":{"taskId":"t"}}"#),
            Verdict::Pass(Kind::Request { opens: true, .. })
        ));
        assert_eq!(check(b"  "), Verdict::Skip);
        // Notifications and responses are never answered, malformed or not.
        for silent in [
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#.as_slice(),
            br#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#,
            br#"{"jsonrpc":"2.0","id":3,"error":"x"}"#,
        ] {
            assert_eq!(
                check(silent),
                Verdict::Skip,
                "{}",
                String::from_utf8_lossy(silent)
            );
        }
        assert_eq!(
            check(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Verdict::Pass(Kind::Other)
        );
        // An id must be a string or an integer.
        for bad in [
            br#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#.as_slice(),
            br#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#,
            br#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#,
            br#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
            br#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"tools/list"}"#,
        ] {
            assert_eq!(
                code(check(bad)),
                (-32600, Value::Null),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            code(check(br#"{"jsonrpc":"2.0","id":20}"#)),
            (-32600, json!(20))
        );
        // tools/call params of the wrong types.
        for bad in [
            br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"bash","arguments":{},"requestState":5}}"#.as_slice(),
            br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"bash","arguments":{},"inputResponses":"x"}}"#,
        ] {
            assert_eq!(code(check(bad)), (-32602, json!(4)), "{}", String::from_utf8_lossy(bad));
        }
        assert!(
            matches!(
                check(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"),
                Verdict::Pass(Kind::Request { opens: false, .. })
            ),
            "a byte-order mark is ignored"
        );
        assert!(matches!(
            check(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Verdict::Pass(Kind::Request { opens: false, .. })
        ));
        assert_eq!(
            check(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Verdict::Pass(Kind::Other)
        );
        assert!(
            matches!(check(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"x"}}}"#), Verdict::Pass(Kind::Request { opens: true, .. }))
        );
    }
}
