//! The model-facing side of dsh-bash: how results read to a model and to a
//! person. `dsh-bash run` prints exactly the text the `bash` tool returns,
//! because both use [`render_run_result`].
//!
//! # Example
//!
//! ```
//! use dsh_bash::{BashRunResult, CollectedOutput};
//! use dsh_tool_bash::render_run_result;
//!
//! let result = BashRunResult {
//!     exit_code: Some(2),
//!     signal: None,
//!     timed_out: false,
//!     aborted: false,
//!     timeout_ms: 120_000,
//!     stdout: CollectedOutput { text: "partial\n".into(), ..Default::default() },
//!     stderr: CollectedOutput { text: "boom\n".into(), ..Default::default() },
//!     leftovers_stopped: 0,
//!     sandbox: None,
//! };
//! assert_eq!(render_run_result(&result, false), "partial\n[stderr]\nboom\n[exit code: 2]");
//! ```
//!
//! # Platform support
//!
//! Pure text; compiles everywhere.
//!
//! # Caveats
//!
//! The texts are part of the product: models are prompted with them and
//! hosts cache them. Change them only deliberately.
#![forbid(unsafe_code)]

mod render;

pub use render::{render_run_result, ESCALATION_HINT};
