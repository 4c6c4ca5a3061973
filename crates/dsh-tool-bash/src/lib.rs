//! The model-facing side of dsh-bash: the `bash`, `bash_output` and
//! `bash_kill` tools as data (name, byte-stable description, closed JSON
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
//! ```no_run
//! use std::sync::Arc;
//! use dsh_bash_local::{LocalBashExecutor, LocalConfig};
//! use dsh_tool_bash::{BashTools, CallContext, Session};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let tools = BashTools::new(Arc::new(LocalBashExecutor::new(LocalConfig::default())?));
//! let ctx = CallContext {
//!     session: Some(Arc::new(Session::new("session-1", Some("/src".into())))),
//!     ..CallContext::default()
//! };
//! let args = serde_json::json!({"command": "ls", "description": "list the project files"});
//! let output = tools.call("bash", args, &ctx).await?;
//! println!("{}", output.text);
//! # Ok(())
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
#![forbid(unsafe_code)]

mod approval;
mod args;
mod render;
mod session;
mod structured;
mod tools;

pub use approval::{ApprovalOutcome, ApprovalRequest, ApprovalService};
pub use args::Escalation;
pub use render::{render_run_result, render_task_read, status_line, ESCALATION_HINT};
pub use session::{
    effective_sandbox_mode, set_sandbox_mode, NoticeSink, Session, SessionEvent, SANDBOX_MODE_EVENT,
};
pub use tools::{
    BashTools, CallContext, Tool, ToolAnnotations, ToolError, ToolOutput, STANDING_INSTRUCTION,
};
