//! The model-facing side of dsh-bash: the `bash`, `bash_output`,
//! `bash_write` and `bash_kill` tools as data (name, byte-stable description, closed JSON
//! Schemas generated from the argument types, an output schema for the
//! structured result, annotations) and an async
//! [`BashTools::call`] that validates the model's arguments, applies
//! session ownership and cwd, asks for sandbox escalation, runs through any
//! `Arc<dyn BashExecutor>`, and renders the result text.
//!
//! `dsh-bash run` prints exactly the text the `bash` tool returns, because
//! both use [`render_run_result`].
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use dsh_bash_local::{LocalBashExecutor, LocalConfig};
//! use dsh_tool_bash::{BashTools, CallContext, Session};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
//! # runtime.block_on(async {
//! let project = std::env::temp_dir();
//! let tools = BashTools::new(Arc::new(LocalBashExecutor::new(LocalConfig::default())?));
//! let ctx = CallContext {
//!     session: Some(Arc::new(Session::new("session-1", Some(project)))),
//!     ..CallContext::default()
//! };
//! let args = serde_json::json!({"command": "echo built; exit 2", "description": "pretend to build"});
//! let output = tools.call("bash", args, &ctx).await?;
//! assert_eq!(output.text, "built\n[exit code: 2]");
//! tools.executor().shutdown().await;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```
//!
//! # Platform support
//!
//! Wherever the executor runs.
//!
//! # Caveats
//!
//! - `stdin` and `env` are never taken from model arguments: like any key
//!   the schema does not know, they make the call an error that names them
//!   (and the likely intended argument), and nothing runs.
//! - Every result's structured content carries the rendered text and every
//!   fact behind it, so a host that shows only structured content loses
//!   nothing.
//! - The texts are part of the product: models are prompted with them and
//!   hosts cache the descriptions. Change them only deliberately.
//! - The descriptions never state the current sandbox mode.
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

mod approval;
mod args;
pub mod clean;
mod cwd;
mod describe;
pub mod escalation;
mod render;
mod rules;
mod session;
mod structured;
mod tools;

pub use approval::{ApprovalOutcome, ApprovalRequest, ApprovalService};
pub use args::Escalation;
pub use args::{executor_bash_call, executor_output_call, executor_task_id, ExecutorBashCall};
pub use render::{
    render_run_result, render_run_result_with, render_task_read, status_line, Heads, HEAD_BYTES,
};
pub use rules::RuleBook;
pub use session::{
    effective_sandbox_mode, set_sandbox_mode, NoticeSink, Session, SessionEvent, SANDBOX_MODE_EVENT,
};
pub use tools::{
    completion_notice, notice_is_about, owned_task, session_workdir, BashTools, CallContext, Told,
    Tool, ToolAnnotations, ToolError, ToolOutput, STANDING_INSTRUCTION,
};
