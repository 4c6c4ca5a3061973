//! `dsh-bash mcp`: the tools over the Model Context Protocol on stdio.
//!
//! One connection is one session (its own owner token and cwd). Escalation
//! approval asks the person through MCP elicitation when the client
//! declares it, else it is unavailable and fails closed. Background
//! completion is announced as a log-message notification; `bash_output`
//! polling works without it. A client's cancellation kills a foreground
//! command; a progress token gets a heartbeat while it runs. Closing stdin,
//! SIGTERM or SIGINT stops every command before the process exits.

// MCP log-message notifications are deprecated only from protocol
// 2026-07-28 on; the clients this server talks to negotiate earlier versions,
// where they are the standard way to tell a person something.
#![allow(deprecated)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dsh_bash::BoxFuture;
use dsh_tool_bash::{
    ApprovalOutcome, ApprovalRequest, ApprovalService, BashTools, CallContext, Session,
    STANDING_INSTRUCTION,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, Implementation, ListToolsResult, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, SetLevelRequestParams, Tool, ToolAnnotations,
};
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientResult, ElicitRequest, ServerRequest,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};

use crate::compose::{self, ExecutorArgs};

/// Arguments of `mcp`.
#[derive(clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    executor: ExecutorArgs,
    /// Default foreground timeout in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 120_000.0)]
    timeout: f64,
    /// Cap on any requested timeout in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 600_000.0)]
    max_timeout: f64,
    /// Bytes of each output stream kept in memory (the rest goes to a spill file).
    #[arg(long, value_name = "BYTES", default_value_t = 64_000)]
    max_output_bytes: u64,
}

/// Asks the person through MCP elicitation.
struct Elicitation {
    peer: Peer<RoleServer>,
}

fn client_elicits(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

impl ApprovalService for Elicitation {
    /// Asks the person: Accept means yes, Decline or Cancel means no; the
    /// command, the mode and the justification are in the message, and
    /// there is nothing to fill in. A question whose call is cancelled is
    /// withdrawn (`notifications/cancelled` for the elicitation request).
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalOutcome> {
        Box::pin(async move {
            if !client_elicits(&self.peer) {
                return ApprovalOutcome::Unavailable;
            }
            let Ok(schema) = ElicitationSchema::builder().build() else {
                return ApprovalOutcome::Unavailable;
            };
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: format!(
                    "Allow this one command to run with {} file access?\n\n{}\n\nReason: {}\n\nAccept to allow it once; decline to refuse.",
                    request.mode, request.command, request.reason
                ),
                requested_schema: schema,
            };
            let question = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            let handle = match self
                .peer
                .send_request_with_option(question, PeerRequestOptions::no_options())
                .await
            {
                Ok(handle) => handle,
                Err(err) => {
                    tracing::warn!(%err, "elicitation failed");
                    return ApprovalOutcome::Unavailable;
                }
            };
            let id = handle.id.clone();
            let asked = tokio::select! {
                asked = handle.await_response() => asked,
                () = request.cancel.cancelled() => {
                    let withdrawn = CancelledNotification::new(CancelledNotificationParam::new(
                        Some(id),
                        Some("the tool call that asked was cancelled".into()),
                    ));
                    if let Err(err) = self.peer.send_notification(withdrawn.into()).await {
                        tracing::debug!(%err, "cannot withdraw an approval question");
                    }
                    return ApprovalOutcome::Cancelled;
                }
            };
            match asked {
                Ok(ClientResult::ElicitResult(answer)) => match answer.action {
                    ElicitationAction::Accept => ApprovalOutcome::AllowedOnce,
                    ElicitationAction::Decline => ApprovalOutcome::Rejected,
                    // Cancel, and any action a newer protocol adds: not a yes.
                    _ => ApprovalOutcome::Cancelled,
                },
                Ok(other) => {
                    tracing::warn!(?other, "unexpected answer to an elicitation");
                    ApprovalOutcome::Unavailable
                }
                Err(err) => {
                    tracing::warn!(%err, "elicitation failed");
                    ApprovalOutcome::Unavailable
                }
            }
        })
    }
}

/// The MCP face of one session.
struct BashServer {
    tools: Arc<BashTools>,
    session: Arc<Session>,
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    /// The least severe log level the client wants (`logging/setLevel`);
    /// completion notices are `info`.
    level: Arc<AtomicU8>,
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

fn to_mcp(tool: dsh_tool_bash::Tool) -> Tool {
    let schema = match tool.parameters {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    let mut annotations = ToolAnnotations::default();
    annotations.read_only_hint = Some(tool.annotations.read_only);
    annotations.destructive_hint = Some(tool.annotations.destructive);
    annotations.idempotent_hint = Some(tool.annotations.idempotent);
    annotations.open_world_hint = Some(true);
    let mut mcp = Tool::new(tool.name, tool.description, Arc::new(schema));
    mcp.annotations = Some(annotations);
    if let serde_json::Value::Object(output) = tool.output_schema {
        mcp.output_schema = Some(Arc::new(output));
    }
    mcp
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

impl ServerHandler for BashServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        let mut identity = Implementation::from_build_env();
        identity.name = "dsh-bash".into();
        identity.version = env!("CARGO_PKG_VERSION").into();
        ServerConfig::new(capabilities)
            .with_server_info(identity)
            .with_instructions(STANDING_INSTRUCTION)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.level.store(rank(request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let _ = self.peer.set(context.peer);
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
        let _ = self.peer.set(context.peer.clone());
        let args = request.arguments.map_or(
            serde_json::Value::Object(Default::default()),
            serde_json::Value::Object,
        );
        // rmcp cancels the request token both on the client's cancellation
        // and after the handler returns; only the former may reach the
        // command (a background task must outlive the call that started it).
        let cancel = tokio_util::sync::CancellationToken::new();
        let forward = tokio::spawn({
            let (client, cancel) = (context.ct.clone(), cancel.clone());
            async move {
                client.cancelled().await;
                cancel.cancel();
            }
        });
        let ctx = CallContext {
            session: Some(Arc::clone(&self.session)),
            call_id: serde_json::to_string(&context.id).unwrap_or_default(),
            cancel,
            approvals: Some(Arc::new(Elicitation {
                peer: context.peer.clone(),
            })),
        };
        let beat = heartbeat(&context);
        let outcome = self.tools.call(&request.name, args, &ctx).await;
        forward.abort();
        if let Some(beat) = beat {
            beat.abort();
        }
        Ok(match outcome {
            Ok(output) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(output.text)]);
                result.structured_content = Some(output.structured);
                result
            }
            Err(err) => CallToolResult::error(vec![ContentBlock::text(err.to_string())]),
        }
        .into())
    }
}

/// Serves one MCP connection on stdio until it closes or a signal arrives,
/// then stops every command it started.
pub async fn serve(args: McpArgs) -> anyhow::Result<ExitCode> {
    let mut local = compose::local_config(&args.executor);
    local.default_timeout_ms = args.timeout.min(args.max_timeout);
    local.max_timeout_ms = args.max_timeout;
    local.max_output_bytes = args.max_output_bytes;
    // The session's full-output paths mean nothing once it ends.
    local.discard_spill_on_shutdown = true;
    let cwd = local.cwd.clone().or_else(|| std::env::current_dir().ok());
    let executor = compose::executor(&args.executor, local)?;
    let tools = Arc::new(BashTools::new(Arc::clone(&executor)));

    let peer: Arc<OnceLock<Peer<RoleServer>>> = Arc::default();
    let notices = Arc::clone(&peer);
    let level = Arc::new(AtomicU8::new(rank(LoggingLevel::Debug)));
    let wanted = Arc::clone(&level);
    let session_id = format!(
        "mcp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let session = Arc::new(Session::new(session_id, cwd).with_notices(Arc::new(
        move |text: &str| {
            if wanted.load(Ordering::Relaxed) > rank(LoggingLevel::Info) {
                return;
            }
            let Some(peer) = notices.get().cloned() else {
                return;
            };
            let message =
                LoggingMessageNotificationParam::new(LoggingLevel::Info, serde_json::json!(text))
                    .with_logger("dsh-bash");
            tokio::spawn(async move {
                let _ = peer.notify_logging_message(message).await;
            });
        },
    )));

    let server = BashServer {
        tools: Arc::clone(&tools),
        session: Arc::clone(&session),
        peer,
        level,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let (stdin, stdout) = rmcp::transport::stdio();
    let (lines, outgoing) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(crate::wire::write_lines(outgoing, stdout));
    let stdin = crate::wire::Inbound::new(stdin, lines.clone(), stop.clone());
    let service = server
        .serve((stdin, crate::wire::Outbound::new(lines)))
        .await?;
    let cancel = service.cancellation_token();
    let interrupts = crate::run::cancel_on_interrupt(stop.clone());
    tokio::select! {
        closed = service.waiting() => {
            if let Err(err) = closed {
                tracing::warn!(%err, "the MCP connection ended with an error");
            }
        }
        () = stop.cancelled() => cancel.cancel(),
    }
    interrupts.abort();
    session.end();
    executor.shutdown().await;
    // Lines already handed to the writer go out; a reader still blocked on
    // stdin keeps its sender alive, so the wait is bounded.
    let _ = tokio::time::timeout(Duration::from_millis(200), writer).await;
    Ok(ExitCode::SUCCESS)
}
