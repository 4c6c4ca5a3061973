//! The bash tools over the Model Context Protocol, on stdio or over
//! Streamable HTTP (see [`http`]): the server of `dsh-bash mcp`, as a
//! library any Rust program can serve.
//!
//! On stdio one connection is one session (its own owner token and cwd).
//! A session may run at most `--max-commands` commands at once. Calls
//! marked as executor calls (`_meta["io.dsh-bash/executor"]`, from
//! `dsh-bash-remote`) are answered with the executor's exact facts (see
//! the `exec` module). Every
//! protocol version `rmcp` knows is negotiated, from 2024-11-05 to
//! 2026-07-28 (with `initialize` or `server/discover`), and what differs
//! between them is chosen per call:
//!
//! | | up to 2025-11-25 | 2026-07-28 |
//! |---|---|---|
//! | approvals | `elicitation/create` mid-call | input-required result, retried with the answer |
//! | background completion | carried by the next tool result (`notices`), and `notifications/message` (`logging` advertised, `logging/setLevel` honoured) | carried by the next tool result (`notices`), `logging` not advertised |
//!
//! Polling with `bash_output` works in both. A client that declares the
//! tasks extension (`io.modelcontextprotocol/tasks`) gets a foreground
//! `bash` call still running after a second as a task it polls with
//! `tasks/get`; `tasks/cancel` kills the command. A client's cancellation
//! kills a foreground command; a progress token gets a heartbeat while it
//! runs. Closing stdin, SIGTERM or SIGINT stops every command before the
//! process exits.
//!
//! # Example
//!
//! Serving the tools of a local executor on stdin/stdout:
//!
//! ```no_run
//! use std::{sync::Arc, time::Duration};
//! use dsh_bash_local::{LocalBashExecutor, LocalConfig};
//! use dsh_bash_mcp::Hub;
//!
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let executor = Arc::new(LocalBashExecutor::new(LocalConfig::default())?);
//! let hub = Hub::builder(executor)
//!     .timeouts(Duration::from_secs(120), Duration::from_secs(600))
//!     .max_commands(32)
//!     .build();
//! // The caller decides what stops it (here: SIGTERM, SIGINT, SIGHUP).
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! let _signals = dsh_bash_mcp::stop_on_signals(shutdown.clone());
//! dsh_bash_mcp::serve_stdio(Arc::new(hub), shutdown).await?;
//! # Ok(())
//! # }
//! ```
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]
// MCP log-message notifications are deprecated from protocol 2026-07-28 on;
// they are still how a person is told something on the earlier versions,
// and only sent there.
#![allow(deprecated)]

mod approval;
mod departure;
mod error;
mod exec;
pub mod http;
mod idle;
mod task;
mod wire;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use dsh_bash::{BashExecutor, BashTaskId, TaskStatus};
use dsh_tool_bash::{
    ApprovalService, BashTools, CallContext, Session, ToolError, ToolOutput, STANDING_INSTRUCTION,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    DiscoverResult, GetTaskParams, GetTaskResult, Implementation, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ServerCapabilities, ServerConfig, SetLevelRequestParams, Tool,
    ToolAnnotations, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use error::ServeError;

/// What every session of one server shares: the tools over one executor,
/// the session defaults and caps.
pub struct Hub {
    tools: Arc<BashTools>,
    /// A new session's working directory.
    cwd: Option<PathBuf>,
    max_timeout: Duration,
    /// Commands one session may have running at once (foreground calls
    /// in flight plus running background tasks).
    max_commands: usize,
    /// Sessions alive now.
    live: Arc<AtomicUsize>,
    /// What remote executors are told (the `io.dsh-bash/executor`
    /// extension capability).
    facts: serde_json::Map<String, Value>,
}

/// How a [`Hub`] is made: everything it tells the model and every cap it
/// keeps, set before its tools exist (each setter has a default).
#[derive(Clone)]
pub struct HubBuilder {
    executor: Arc<dyn BashExecutor>,
    cwd: Option<PathBuf>,
    default_timeout: Duration,
    max_timeout: Duration,
    max_commands: usize,
    yield_after: Option<Duration>,
    persist_cwd: bool,
    told: dsh_tool_bash::Told,
    rules: Option<Arc<dyn dsh_tool_bash::RuleBook>>,
}

impl std::fmt::Debug for HubBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubBuilder")
            .field("cwd", &self.cwd)
            .field("default_timeout", &self.default_timeout)
            .field("max_timeout", &self.max_timeout)
            .field("max_commands", &self.max_commands)
            .finish_non_exhaustive()
    }
}

impl HubBuilder {
    /// New sessions start in `cwd` (default: the executor's own).
    pub fn cwd(mut self, cwd: Option<PathBuf>) -> Self {
        self.cwd = cwd;
        self
    }

    /// A call's timeout defaults to `default` and is capped at `max`
    /// (default: 120 s and 600 s).
    pub fn timeouts(mut self, default: Duration, max: Duration) -> Self {
        self.default_timeout = default;
        self.max_timeout = max;
        self
    }

    /// A session may run `max` commands at once (default 32).
    pub fn max_commands(mut self, max: usize) -> Self {
        self.max_commands = max;
        self
    }

    /// Every foreground command still running after `after` is handed over
    /// as a background task (`--yield-ms`; a call's `yieldMs` wins).
    /// Default: none.
    pub fn yield_after(mut self, after: Option<Duration>) -> Self {
        self.yield_after = after;
        self
    }

    /// Each session's working directory follows `cd` or not
    /// ([`dsh_tool_bash::BashTools::with_persist_cwd`]). Default: not.
    pub fn persist_cwd(mut self, persist: bool) -> Self {
        self.persist_cwd = persist;
        self
    }

    /// Escalation approvals allowed or not (the escalation fields are
    /// offered only where they are). Default: allowed.
    pub fn escalation(mut self, allowed: bool) -> Self {
        self.told.escalation = allowed;
        self
    }

    /// The model is told that the user's shell snapshot is loaded into
    /// every command (or not). Default: not.
    pub fn snapshot(mut self, loaded: bool) -> Self {
        self.told.snapshot = loaded;
        self
    }

    /// The model is told that results list the files a command changed in
    /// the workspace (or not). Default: not.
    pub fn changes(mut self, tracked: bool) -> Self {
        self.told.changes = tracked;
        self
    }

    /// Every `bash` call is judged by these command rules before anything
    /// runs (see [`BashTools::with_rules`]). Default: none.
    pub fn rules(mut self, rules: Option<Arc<dyn dsh_tool_bash::RuleBook>>) -> Self {
        self.rules = rules;
        self
    }

    /// The hub, its tools built once.
    pub fn build(self) -> Hub {
        let facts = exec::server_facts(
            &*self.executor,
            self.default_timeout,
            self.max_timeout,
            self.cwd.clone(),
        );
        let facts = match serde_json::to_value(facts) {
            Ok(Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        let tools = BashTools::new(self.executor)
            .with_yield(self.yield_after)
            .with_persist_cwd(self.persist_cwd)
            .with_told(self.told)
            .with_rules(self.rules);
        Hub {
            tools: Arc::new(tools),
            facts,
            cwd: self.cwd,
            max_timeout: self.max_timeout,
            max_commands: self.max_commands,
            live: Arc::default(),
        }
    }
}

impl Hub {
    /// How a hub over `executor` is made.
    pub fn builder(executor: Arc<dyn BashExecutor>) -> HubBuilder {
        HubBuilder {
            executor,
            cwd: None,
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            max_commands: 32,
            yield_after: None,
            persist_cwd: false,
            told: dsh_tool_bash::Told::default(),
            rules: None,
        }
    }

    /// The executor every session runs its commands on.
    pub fn executor(&self) -> &Arc<dyn BashExecutor> {
        self.tools.executor()
    }

    /// How many sessions are alive.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// A new session unless `max` are alive already, or `token`'s count
    /// is at its cap (each checked and counted in one step; released when
    /// the session ends).
    pub(crate) fn try_open(
        &self,
        max: usize,
        shared: bool,
        token: Option<(&Arc<AtomicUsize>, usize)>,
    ) -> Option<Arc<SessionState>> {
        let take = |counter: &AtomicUsize, cap: usize| {
            counter
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < cap).then_some(n + 1)
                })
                .is_ok()
        };
        if let Some((counter, cap)) = token {
            if !take(counter, cap) {
                return None;
            }
        }
        if !take(&self.live, max) {
            if let Some((counter, _)) = token {
                counter.fetch_sub(1, Ordering::AcqRel);
            }
            return None;
        }
        let state = self.opened(shared, token.map(|(counter, _)| Arc::clone(counter)));
        Some(state)
    }

    /// A new session: its own owner token, cwd, notices, approvals and
    /// tasks. Its running commands stop when the last handle is dropped.
    pub(crate) fn open(&self) -> Arc<SessionState> {
        self.live.fetch_add(1, Ordering::AcqRel);
        self.opened(false, None)
    }

    /// A session already counted in `live`; `shared` when it is a token's
    /// 2026-07-28 session, which many requests (each with a peer that ends
    /// with it) share.
    fn opened(&self, shared: bool, token_live: Option<Arc<AtomicUsize>>) -> Arc<SessionState> {
        let peer: Arc<OnceLock<Peer<RoleServer>>> = Arc::default();
        let notices = Arc::new(Notices {
            peer: Arc::clone(&peer),
            level: AtomicU8::new(rank(LoggingLevel::Debug)),
            stateless: AtomicBool::new(false),
            kept: Mutex::default(),
            reported: Mutex::default(),
        });
        let sink = Arc::clone(&notices);
        let id = format!("mcp-{}", uuid::Uuid::new_v4().simple());
        let session = Arc::new(
            Session::new(id, self.cwd.clone())
                .with_notices(Arc::new(move |text: &str| sink.deliver(text))),
        );
        Arc::new(SessionState {
            session,
            peer,
            notices,
            questions: approval::Questions::default(),
            tasks: task::Tasks::new(self.max_timeout),
            kept: departure::Kept::default(),
            foreground: Arc::default(),
            executor: Arc::clone(self.tools.executor()),
            live: Arc::clone(&self.live),
            token_live,
            shared,
        })
    }

    /// The MCP face of `state`.
    pub(crate) fn server(&self, state: Arc<SessionState>) -> BashServer {
        BashServer {
            tools: Arc::clone(&self.tools),
            max_commands: self.max_commands,
            facts: self.facts.clone(),
            // Over HTTP the client answering is whoever holds a token, not
            // the person who chose the server's mode: off there unless
            // `--allow-escalation`.
            escalation: self.tools.told().escalation,
            state,
        }
    }
}

/// One executor session: what its calls share, whichever connection or
/// request they arrive on.
pub(crate) struct SessionState {
    session: Arc<Session>,
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    /// Where completion notices go and the log level that lets them out.
    notices: Arc<Notices>,
    /// Approval questions handed out with input-required results.
    questions: approval::Questions,
    /// Foreground calls the client polls as tasks.
    tasks: task::Tasks,
    /// Results of calls whose client went away, until read.
    kept: departure::Kept,
    /// Foreground `bash` calls in flight.
    foreground: Arc<AtomicUsize>,
    executor: Arc<dyn BashExecutor>,
    live: Arc<AtomicUsize>,
    /// Its token's count of sessions (HTTP), released with `live`.
    token_live: Option<Arc<AtomicUsize>>,
    /// A token's 2026-07-28 session over HTTP: notices always ride on
    /// results (no request's peer outlives its request).
    shared: bool,
}

impl SessionState {
    /// Running background tasks this session owns.
    fn running_tasks(&self) -> Vec<BashTaskId> {
        let owner = self.session.owner();
        self.executor
            .list()
            .into_iter()
            .filter(|task| task.status == TaskStatus::Running)
            .filter(|task| self.executor.owner_of(&task.id).as_ref() == Some(&owner))
            .map(|task| task.id)
            .collect()
    }
}

impl Drop for SessionState {
    /// The session is over (closed, expired, or its server stopping): no
    /// more notices, its polled calls and background tasks are stopped.
    fn drop(&mut self) {
        self.session.end();
        self.tasks.shutdown();
        self.live.fetch_sub(1, Ordering::AcqRel);
        if let Some(token_live) = &self.token_live {
            token_live.fetch_sub(1, Ordering::AcqRel);
        }
        let running = self.running_tasks();
        if running.is_empty() {
            return;
        }
        let executor = Arc::clone(&self.executor);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // All at once: each kill may wait out its grace.
                for id in running {
                    let executor = Arc::clone(&executor);
                    runtime.spawn(async move {
                        let _ = executor.kill(&id).await;
                    });
                }
            }
            // Outside the runtime only shutdown is left, which stops them.
            Err(_) => tracing::debug!("session dropped outside the runtime"),
        }
    }
}

/// Counts one foreground call in flight while alive.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(counter))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The MCP face of one session.
pub(crate) struct BashServer {
    tools: Arc<BashTools>,
    max_commands: usize,
    facts: serde_json::Map<String, Value>,
    escalation: bool,
    state: Arc<SessionState>,
}

/// The severity rank of an MCP log level (debug lowest).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// True if the call speaks 2026-07-28 or later: no requests from the
/// server, no unsolicited notifications.
fn stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Background-completion notices of one session: kept and carried by the
/// next tool result on every protocol version (clients such as Codex show
/// the model results, not log messages), and up to 2025-11-25 also sent
/// as a log-message notification for clients that show those (when
/// `logging/setLevel` lets `info` through). Each result carries a notice
/// once, and none carries the notice of a task whose completion it already
/// reports (that task's own `bash_output`).
struct Notices {
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    /// The least severe log level the client wants (`logging/setLevel`);
    /// completion notices are `info`.
    level: AtomicU8,
    /// The client speaks 2026-07-28 or later (as of its latest call).
    stateless: AtomicBool,
    /// Notices waiting for the next tool result.
    kept: Mutex<Vec<String>>,
    /// Tasks whose completion a result already reported (their late
    /// notices are dropped), the newest [`MAX_KEPT_NOTICES`].
    reported: Mutex<std::collections::VecDeque<String>>,
}

impl Notices {
    fn deliver(&self, text: &str) {
        self.keep(text);
        if self.stateless.load(Ordering::Relaxed) {
            return;
        }
        let Some(peer) = self
            .peer
            .get()
            .cloned()
            .filter(|_| self.level.load(Ordering::Relaxed) <= rank(LoggingLevel::Info))
        else {
            return;
        };
        let message =
            LoggingMessageNotificationParam::new(LoggingLevel::Info, serde_json::json!(text))
                .with_logger("dsh-bash");
        tokio::spawn(async move {
            let _ = peer.notify_logging_message(message).await;
        });
    }

    /// Keeps a notice for the next result; past [`MAX_KEPT_NOTICES`] the
    /// oldest goes (a session that never reads results, such as a remote
    /// executor's, must not grow without bound).
    fn keep(&self, text: &str) {
        let reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        if reported
            .iter()
            .any(|id| dsh_tool_bash::notice_is_about(text, id))
        {
            return;
        }
        // Kept while `reported` is held: a result reporting this task
        // cannot register it between the check and the push.
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= MAX_KEPT_NOTICES {
            kept.remove(0);
        }
        kept.push(text.to_owned());
        drop(kept);
        drop(reported);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.kept.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The kept notices for the result of tool `name`: all of them, but
    /// for a result that reports a task's completion itself (a settled
    /// task's `bash_output`, a `bash_kill` that stopped it): that task's
    /// notice is dropped, now and should it come later.
    fn take_for(&self, name: &str, outcome: &Result<ToolOutput, ToolError>) -> Vec<String> {
        let structured = outcome.as_ref().ok().map(|output| &output.structured);
        let reports = structured.is_some_and(|s| match name {
            "bash_output" | "bash_write" => {
                s.get("status").and_then(Value::as_str) != Some("running")
            }
            "bash_kill" => s.get("killed") == Some(&Value::Bool(true)),
            // A yielded run that settled within its yield reports its task.
            "bash" => {
                s.get("task_id").is_some()
                    && !s
                        .get("status")
                        .and_then(Value::as_str)
                        .is_some_and(|status| {
                            status.starts_with("started") || status.starts_with("still running")
                        })
            }
            _ => false,
        });
        let task = structured
            .filter(|_| reports)
            .and_then(|s| s.get("task_id"))
            .and_then(Value::as_str);
        let Some(id) = task else {
            return self.take();
        };
        // Registered and filtered under `reported` (the lock `keep` checks
        // under), so a notice comes before or is dropped after, never both.
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        if reported.len() >= MAX_KEPT_NOTICES {
            reported.pop_front();
        }
        reported.push_back(id.to_owned());
        let kept = self.take();
        drop(reported);
        kept.into_iter()
            .filter(|notice| !dsh_tool_bash::notice_is_about(notice, id))
            .collect()
    }
}

/// Notices kept for the next result, at most.
const MAX_KEPT_NOTICES: usize = 256;

/// The property results carry their kept notices in: background tasks
/// that finished since the previous tool result (for clients on MCP
/// 2026-07-28, which has no unsolicited notifications), also appended to
/// `text`. Undescribed, as every fact: the schema goes with every request.
fn notices_property() -> Value {
    serde_json::json!({
        "type": "array",
        "items": {"type": "string"}
    })
}

fn to_mcp(tool: dsh_tool_bash::Tool) -> Tool {
    let schema = match tool.parameters {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    let mut annotations = ToolAnnotations::default();
    annotations.read_only_hint = Some(tool.annotations.read_only);
    annotations.destructive_hint = Some(tool.annotations.destructive);
    annotations.idempotent_hint = Some(tool.annotations.idempotent);
    annotations.open_world_hint = Some(true);
    let mut mcp = Tool::new(tool.name, tool.description, Arc::new(schema));
    mcp.annotations = Some(annotations);
    if let Value::Object(mut output) = tool.output_schema {
        if let Some(Value::Object(properties)) = output.get_mut("properties") {
            properties.insert("notices".into(), notices_property());
        }
        mcp.output_schema = Some(Arc::new(output));
    }
    mcp
}

/// A tool's outcome as an MCP result, carrying the kept `notices`: appended
/// to the text (in both the text content and `structuredContent.text`) and
/// listed in `structuredContent.notices`.
fn tool_result(outcome: Result<ToolOutput, ToolError>, notices: Vec<String>) -> CallToolResult {
    let (mut text, structured, failed) = match outcome {
        Ok(output) => (output.text, Some(output.structured), false),
        Err(err) => (err.to_string(), None, true),
    };
    if !notices.is_empty() {
        text.push_str("\n\n");
        text.push_str(&notices.join("\n"));
    }
    let content = vec![ContentBlock::text(text.clone())];
    let mut result = if failed {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    if let Some(Value::Object(mut structured)) = structured {
        structured.insert("text".into(), Value::String(text));
        if !notices.is_empty() {
            structured.insert("notices".into(), serde_json::json!(notices));
        }
        result.structured_content = Some(Value::Object(structured));
    }
    result
}

/// Sends a progress heartbeat every second until dropped.
fn heartbeat(context: &RequestContext<RoleServer>) -> Option<tokio::task::JoinHandle<()>> {
    let token = context.meta.get_progress_token()?;
    let peer = context.peer.clone();
    Some(tokio::spawn(async move {
        let started = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        // After a stall, skip missed beats: progress must keep increasing.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tick.tick().await;
        loop {
            tick.tick().await;
            let secs = started.elapsed().as_secs_f64().floor();
            let mut progress = ProgressNotificationParam::new(token.clone(), secs);
            progress.message = Some(format!("running for {secs:.0}s"));
            if peer.notify_progress(progress).await.is_err() {
                return;
            }
        }
    }))
}

/// rmcp cancels the request token both on the client's cancellation and
/// after the handler returns; only the former may reach the command (a
/// background task must outlive the call that started it): a token of the
/// call's own, and the forwarder that cancels it, stopped when dropped.
fn client_cancellation(context: &RequestContext<RoleServer>) -> (CancellationToken, AbortOnDrop) {
    let cancel = CancellationToken::new();
    let forward = AbortOnDrop(tokio::spawn({
        let (client, cancel) = (context.ct.clone(), cancel.clone());
        async move {
            client.cancelled().await;
            cancel.cancel();
        }
    }));
    (cancel, forward)
}

/// Whether a foreground `bash` call is answered as a task: the tasks
/// extension's results exist from 2026-07-28 on, so only for a client that
/// supports them (an earlier session cannot parse them, whatever it
/// declared).
fn runs_as_task(tool: &str, context: &RequestContext<RoleServer>) -> bool {
    tool == "bash"
        && context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks())
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who asks the person about an escalation in one call.
struct Asker {
    service: Arc<dyn ApprovalService>,
    /// On 2026-07-28: where the call's question is kept, to go back with
    /// its result.
    deferral: Option<Arc<approval::Deferral>>,
}

impl Asker {
    fn new(service: impl ApprovalService + 'static) -> Self {
        Asker {
            service: Arc::new(service),
            deferral: None,
        }
    }
}

impl BashServer {
    /// Notices follow how the session began: without `initialize` there
    /// is no standing channel for unsolicited messages, whatever a later
    /// call's own metadata says.
    fn note_channel(&self, context: &RequestContext<RoleServer>) {
        let initialized = !self.state.shared && context.peer.peer_info().is_some();
        self.state
            .notices
            .stateless
            .store(!initialized, Ordering::Relaxed);
        if initialized {
            let _ = self.state.peer.set(context.peer.clone());
        }
    }

    /// The answer to a client that went away mid-call: the result kept,
    /// under the id a client resuming the stream reads it by.
    fn kept_answer(
        &self,
        context: &RequestContext<RoleServer>,
        outcome: Result<ToolOutput, ToolError>,
    ) -> CallToolResponse {
        let id = self.keep_result(context, outcome);
        let text = format!("the result is kept as {id}: read it with bash_output");
        let output = ToolOutput {
            structured: serde_json::json!({"status": "kept", "task_id": id, "text": text}),
            text,
        };
        tool_result(Ok(output), Vec::new()).into()
    }

    /// The result of a call whose client went away, kept for the session
    /// (a notice in the next result names it, for `bash_output`), and said
    /// in the log.
    fn keep_result(
        &self,
        context: &RequestContext<RoleServer>,
        result: Result<ToolOutput, ToolError>,
    ) -> String {
        let id = self.state.kept.keep(result);
        tracing::warn!(call = %serde_json::to_string(&context.id).unwrap_or_default(), kept = %id,
            "the client went away before the result of a bash call; the result is kept");
        self.state.notices.deliver(&format!(
            "a bash call's client went away before its result came back; the result is kept as {id}: read it with bash_output (task_id {id}; the newest {} kept results are kept)",
            departure::MAX_KEPT
        ));
        id
    }

    /// `bash_output` of a kept result: the result as the call would have
    /// given it, handed out once.
    fn kept_result(&self, name: &str, args: &Value) -> Option<CallToolResult> {
        let id = args.get("task_id").and_then(Value::as_str)?;
        if name != "bash_output" || !id.starts_with(departure::KEPT_PREFIX) {
            return None;
        }
        let outcome = self.state.kept.read(id)?;
        Some(tool_result(outcome, self.state.notices.take()))
    }

    /// Who asks the person about an escalation in this call.
    fn asker(
        &self,
        request: &CallToolRequestParams,
        arguments: &Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Asker, String> {
        let elicits = context
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());
        if !elicits || !self.escalation {
            return Ok(Asker::new(approval::NoChannel));
        }
        if !stateless(context) {
            let asks = approval::Elicitation {
                peer: context.peer.clone(),
            };
            return Ok(Asker::new(asks));
        }
        if let Some(state) = &request.request_state {
            let answered = self.state.questions.answer(
                state,
                &request.name,
                arguments,
                request.input_responses.as_ref(),
            )?;
            return Ok(Asker::new(answered));
        }
        let deferral = Arc::new(approval::Deferral::default());
        Ok(Asker {
            service: Arc::clone(&deferral) as Arc<dyn ApprovalService>,
            deferral: Some(deferral),
        })
    }
}

/// The extras of an executor call (`_meta["io.dsh-bash/executor"]`), if
/// the call is one; an entry that cannot be read whole is an error (a
/// narrowing the server did not understand must not run wider).
fn executor_call(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Option<Result<dsh_bash::wire::ExecExtras, String>> {
    let entry = context
        .meta
        .get(dsh_bash::wire::META_KEY)
        .or_else(|| request.meta.as_ref()?.get(dsh_bash::wire::META_KEY))?;
    Some(serde_json::from_value(entry.clone()).map_err(|err| {
        format!("the {} entry of _meta cannot be read: {err}; expected {{stdin?, env?, sandbox_mode?, network?, terminal?, interactive?}}", dsh_bash::wire::META_KEY)
    }))
}

impl BashServer {
    /// Answers an executor call with its [`dsh_bash::wire::Reply`] (in
    /// `_meta`, and as JSON text).
    async fn executor_call(
        &self,
        tool: &str,
        args: Value,
        extras: Result<dsh_bash::wire::ExecExtras, String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        use dsh_bash::wire::{ErrorFacts, Reply};
        let extras = match extras {
            Ok(extras) => extras,
            Err(message) => {
                return Self::reply(Reply::Failed(ErrorFacts {
                    code: "INVALID_ARGUMENTS".into(),
                    message,
                    task: None,
                }))
            }
        };
        let reply = match self.admit(tool) {
            Err(message) => Reply::Failed(ErrorFacts {
                code: "TOO_MANY_COMMANDS".into(),
                message,
                task: None,
            }),
            Ok(_counted) => {
                // Only the client's cancellation reaches the command (see
                // `call_tool`).
                let cancel = tokio_util::sync::CancellationToken::new();
                let _forward = AbortOnDrop(tokio::spawn({
                    let (client, cancel) = (context.ct.clone(), cancel.clone());
                    async move {
                        client.cancelled().await;
                        cancel.cancel();
                    }
                }));
                exec::call(
                    &**self.tools.executor(),
                    &self.state.session,
                    tool,
                    args,
                    extras,
                    cancel,
                )
                .await
            }
        };
        Self::reply(reply)
    }

    /// An executor call's reply as a tool result: in `_meta`, and as JSON
    /// text.
    fn reply(reply: dsh_bash::wire::Reply) -> CallToolResponse {
        let failed = matches!(reply, dsh_bash::wire::Reply::Failed(_));
        let json = serde_json::to_value(&reply).unwrap_or(Value::Null);
        let content = vec![ContentBlock::text(json.to_string())];
        let mut result = if failed {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        let mut meta = rmcp::model::MetaObject::default();
        meta.0.insert(dsh_bash::wire::META_KEY.to_owned(), json);
        result.meta = Some(meta);
        result.into()
    }

    /// Counts a `bash` call against the session's cap on running commands
    /// (foreground calls in flight plus running background tasks); past
    /// it, the call is refused before anything runs.
    fn admit(&self, tool: &str) -> Result<Option<InFlight>, String> {
        if tool != "bash" {
            return Ok(None);
        }
        let counted = InFlight::enter(&self.state.foreground);
        let running =
            self.state.foreground.load(Ordering::Acquire) + self.state.running_tasks().len();
        if running > self.max_commands {
            return Err(format!(
                "this session already runs {} commands, the most it may run at once ({} in all, foreground calls and background tasks; the server's --max-commands); wait for one to finish, or stop a background task with bash_kill",
                running - 1,
                self.max_commands
            ));
        }
        Ok(Some(counted))
    }
}

impl ServerHandler for BashServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .enable_tasks()
            .build();
        let mut capabilities = capabilities;
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(dsh_bash::wire::META_KEY.to_owned(), self.facts.clone());
        let mut identity = Implementation::from_build_env();
        identity.name = "dsh-bash".into();
        identity.version = env!("CARGO_PKG_VERSION").into();
        ServerConfig::new(capabilities)
            .with_server_info(identity)
            .with_instructions(STANDING_INSTRUCTION)
    }

    /// 2026-07-28 discovery: no `logging` (this server sends no log
    /// messages there; notices ride on results).
    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let mut info = self.get_info();
        info.capabilities.logging = None;
        Ok(DiscoverResult::from_server_info(
            ServerHandler::supported_protocol_versions(self).into_owned(),
            info,
        ))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.state
            .notices
            .level
            .store(rank(request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let _ = self.state.peer.set(context.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            self.tools.tools().into_iter().map(to_mcp).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let stateless = stateless(&context);
        self.note_channel(&context);
        let args = request
            .arguments
            .clone()
            .map_or(Value::Object(Default::default()), Value::Object);
        if let Some(extras) = executor_call(&request, &context) {
            return Ok(self
                .executor_call(&request.name, args, extras, &context)
                .await);
        }
        if let Some(kept) = self.kept_result(&request.name, &args) {
            return Ok(kept.into());
        }
        let Asker { service, deferral } = match self.asker(&request, &args, &context) {
            Ok(asker) => asker,
            Err(message) => {
                let outcome = Err(ToolError::from(message));
                return Ok(tool_result(outcome, self.state.notices.take()).into());
            }
        };
        let (cancel, forward) = client_cancellation(&context);
        let ctx = CallContext {
            session: Some(Arc::clone(&self.state.session)),
            call_id: serde_json::to_string(&context.id).unwrap_or_default(),
            cancel: cancel.clone(),
            approvals: Some(service),
        };
        let beat = heartbeat(&context).map(AbortOnDrop);
        let asked_args = deferral.is_some().then(|| args.clone());
        let background = args.get("run_in_background") == Some(&Value::Bool(true));
        let as_task = stateless && !background && runs_as_task(&request.name, &context);
        let counted = match self.admit(&request.name) {
            Ok(counted) => counted,
            Err(message) => {
                let outcome = Err(ToolError::from(message));
                return Ok(tool_result(outcome, self.state.notices.take()).into());
            }
        };
        let call = {
            let (tools, name) = (Arc::clone(&self.tools), request.name.clone());
            async move {
                let _counted = counted;
                tools.call(&name, args, &ctx).await
            }
        };
        let outcome = if as_task {
            match self.state.tasks.run(call, cancel, forward).await {
                task::Ran::Finished(outcome) => outcome,
                task::Ran::Became(created) => return Ok(CallToolResponse::Task(created)),
            }
        } else {
            let outcome = call.await;
            drop(forward);
            outcome
        };
        drop(beat);
        if request.name == "bash" && !background && departure::Departure::of(&context) {
            return Ok(self.kept_answer(&context, outcome));
        }
        if let (Some(asked), Some(args)) = (deferral.and_then(|d| d.take()), asked_args) {
            let question = self.state.questions.ask(&request.name, args, asked);
            return Ok(CallToolResponse::InputRequired(question));
        }
        let notices = self.state.notices.take_for(&request.name, &outcome);
        Ok(tool_result(outcome, notices).into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.state.tasks.get(&request.task_id)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.state.tasks.cancel(&request.task_id)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.state
            .tasks
            .update(&request.task_id, request.input_responses)
    }
}

/// Serves one session on stdin/stdout until stdin closes or `shutdown` is
/// cancelled (the binary cancels it at SIGTERM, SIGINT or SIGHUP, see
/// [`stop_on_signals`]; the library installs no handler), then stops
/// every command it started.
pub async fn serve_stdio(hub: Arc<Hub>, shutdown: CancellationToken) -> Result<(), ServeError> {
    let state = hub.open();
    let server = hub.server(Arc::clone(&state));
    let stop = shutdown.child_token();
    let (stdin, stdout) = rmcp::transport::stdio();
    let (lines, outgoing) = tokio::sync::mpsc::channel(crate::wire::OUTGOING_LINES);
    let in_flight = crate::wire::InFlight::default();
    let writer = tokio::spawn(crate::wire::write_lines(
        outgoing,
        stdout,
        std::sync::Arc::clone(&in_flight),
    ));
    let stdin = crate::wire::Inbound::new(stdin, lines.clone(), stop.clone(), in_flight);
    let service = server
        .serve((stdin, crate::wire::Outbound::new(lines)))
        .await
        .map_err(|err| ServeError::Connection(err.to_string()))?;
    let cancel = service.cancellation_token();
    tokio::select! {
        closed = service.waiting() => {
            if let Err(err) = closed {
                tracing::warn!(%err, "the MCP connection ended with an error");
            }
        }
        () = stop.cancelled() => cancel.cancel(),
    }
    state.session.end();
    state.tasks.shutdown();
    hub.executor().shutdown().await;
    // Lines already handed to the writer go out; a reader still blocked on
    // stdin keeps its sender alive, so the wait is bounded.
    let _ = tokio::time::timeout(Duration::from_millis(200), writer).await;
    Ok(())
}

/// Cancels `stop` at SIGINT, SIGTERM or SIGHUP (a closed terminal would
/// otherwise kill the process outright, leaving the commands' temporary
/// directories and protected-path stand-ins behind).
pub fn stop_on_signals(stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut hangup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
            _ = hangup.recv() => {}
        }
        stop.cancel();
    })
}
