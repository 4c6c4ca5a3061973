//! Foreground calls as tasks (the MCP tasks extension,
//! `io.modelcontextprotocol/tasks`).
//!
//! A client that declares the extension and makes a foreground `bash` call
//! gets the result inline if the command finishes within [`PROMOTE_AFTER`];
//! past that the call is answered with a task, the command keeps running,
//! and the client polls `tasks/get` for the same result it would have been
//! given. Client-side request timeouts then no longer cut long builds short.
//! `tasks/cancel` kills the command (the task settles `cancelled` once the
//! command is gone); a task dropped by the manager (its TTL, shutdown) kills
//! its command too.

use std::future::Future;
use std::time::Duration;

use dsh_tool_bash::{ToolError, ToolOutput};
use rmcp::model::{CreateTaskResult, GetTaskResult, InputResponses};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::ErrorData as McpError;
use tokio_util::sync::CancellationToken;

use super::{tool_result, AbortOnDrop};

/// How long a foreground call runs before it becomes a task.
pub(super) const PROMOTE_AFTER: Duration = Duration::from_secs(1);

/// How often the client is told to poll.
const POLL_INTERVAL_MS: u64 = 500;

/// A foreground call's outcome, or the task it became.
pub(super) enum Ran {
    Finished(Result<ToolOutput, ToolError>),
    Became(CreateTaskResult),
}

/// The session's tasks.
#[derive(Clone)]
pub(super) struct Tasks {
    manager: TaskManager,
    /// How long a task and its result are kept: the longest a command may
    /// run, and a minute more for the result to be fetched (the task
    /// manager keeps a settled task one more TTL on top).
    ttl_ms: u64,
}

impl Tasks {
    pub(super) fn new(max_timeout: Duration) -> Self {
        let ttl_ms = u64::try_from(max_timeout.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(60_000);
        Tasks {
            manager: TaskManager::new(),
            ttl_ms,
        }
    }

    /// Runs `call`; if it is still running after [`PROMOTE_AFTER`] it
    /// becomes a task. `cancel` kills the command; `forward` (the client's
    /// request cancellation reaching `cancel`) is dropped when the call
    /// becomes a task, whose request is then over.
    pub(super) async fn run(
        &self,
        call: impl Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
        cancel: CancellationToken,
        forward: AbortOnDrop,
    ) -> Ran {
        let mut running = tokio::spawn(call);
        // This future dropped before the call is settled or handed over:
        // the command goes too.
        let abandoned = cancel.clone().drop_guard();
        tokio::select! {
            done = &mut running => {
                drop(forward);
                abandoned.disarm();
                return Ran::Finished(done.unwrap_or_else(|err| Err(format!("the call failed: {err}").into())));
            }
            () = tokio::time::sleep(PROMOTE_AFTER) => {}
        }
        drop(forward);
        abandoned.disarm();
        let options = TaskOptions::new()
            .with_ttl_ms(self.ttl_ms)
            .with_poll_interval_ms(POLL_INTERVAL_MS)
            .with_status_message("the command is running");
        let task = self.manager.spawn(options, move |context| {
            Box::pin(async move {
                // Dropped unfinished (TTL, shutdown): the command goes too.
                let guard = cancel.clone().drop_guard();
                let outcome = tokio::select! {
                    done = &mut running => done,
                    () = context.cancelled() => {
                        cancel.cancel();
                        let _ = running.await;
                        guard.disarm();
                        context.set_status_message("cancelled: the command was stopped");
                        return Err(TaskExit::Cancelled);
                    }
                };
                guard.disarm();
                context.set_status_message("the command finished");
                let outcome =
                    outcome.unwrap_or_else(|err| Err(format!("the call failed: {err}").into()));
                // Notices stay for the next direct result: a task's result
                // may be fetched many times, or never.
                Ok(tool_result(outcome, Vec::new()))
            })
        });
        Ran::Became(CreateTaskResult::new(task))
    }

    pub(super) fn get(&self, task_id: &str) -> Result<GetTaskResult, McpError> {
        self.manager.get_task(task_id).map(GetTaskResult::new)
    }

    /// Acknowledged even for an unknown task (the extension asks for an
    /// empty result either way).
    pub(super) fn cancel(&self, task_id: &str) -> Result<(), McpError> {
        if let Err(err) = self.manager.cancel_task(task_id) {
            tracing::debug!(task_id, %err, "tasks/cancel of an unknown task");
        }
        Ok(())
    }

    /// A bash task asks nothing mid-run (approvals come before it starts);
    /// responses are accepted and ignored, as the extension requires for
    /// keys nobody asked.
    pub(super) fn update(&self, task_id: &str, responses: InputResponses) -> Result<(), McpError> {
        if let Err(err) = self.manager.update_task(task_id, responses) {
            tracing::debug!(task_id, %err, "tasks/update of an unknown task");
        }
        Ok(())
    }

    /// Drops every task (their commands are stopped with the session).
    pub(super) fn shutdown(&self) {
        self.manager.shutdown();
    }
}
