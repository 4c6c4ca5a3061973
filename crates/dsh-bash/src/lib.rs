//! The bash execution seam: what a caller asks for, what an executor runs,
//! what comes back, and the [`BashExecutor`] trait every backend implements.
//!
//! The seam splits a **request** ([`BashExecRequest`], optional knobs, as a
//! model or plugin writes it) from a **spec** ([`BashExecSpec`], every knob
//! resolved by [`BashExecutor::resolve`]): reading a spec, nobody guesses
//! where the workdir or the timeout came from.
//!
//! Outcomes are data: a non-zero exit, a timeout, an abort, a stopped
//! leftover or a sandbox denial are fields of [`BashRunResult`]. `Err`
//! ([`BashError`]) is reserved for "it could not run".
//!
//! # Example
//!
//! A consumer holds any backend as `Arc<dyn BashExecutor>`:
//!
//! ```
//! use std::sync::Arc;
//! use dsh_bash::{BashExecRequest, BashExecutor, BashError, BashRunResult};
//!
//! async fn run_ls(executor: Arc<dyn BashExecutor>) -> Result<BashRunResult, BashError> {
//!     let mut request = BashExecRequest::new("ls -la");
//!     request.timeout = Some(std::time::Duration::from_secs(5));
//!     let spec = executor.resolve(request)?;
//!     executor.run(spec).await
//! }
//! ```
//!
//! # Platform support
//!
//! Pure vocabulary; compiles everywhere. Backends live in sibling crates
//! (`dsh-bash-local`, `dsh-bash-sandbox`).
//!
//! # Caveats
//!
//! Ids are opaque newtypes: a [`BashTaskId`] and an [`OwnerToken`] never
//! convert into each other or from a `String` implicitly. Only the tool
//! layer turns a session id into an [`OwnerToken`].
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

mod changes;
mod error;
mod executor;
mod ids;
mod limits;
mod request;
mod result;
mod task;
pub mod wire;

pub use changes::WorkspaceChanges;
pub use dsh_sandbox::{
    HostPattern, HostRules, NetworkPolicy, SandboxBackend, SandboxEnforcement, SandboxGap,
    SandboxMode,
};
pub use error::BashError;
pub use executor::{BashExecutor, BoxFuture, ListenerHandle, TaskListener, TaskListeners};
pub use ids::{BashTaskId, OwnerToken};
pub use limits::{BashLimits, LimitMechanism};
pub use request::{BashExecRequest, BashExecSpec, Defaults, TerminalSize, MAX_TERMINAL_CELLS};
pub use result::{
    BashRunResult, BashSandboxInfo, BlockedClass, BlockedPath, ClaimFacts, CollectedOutput,
    ContainerFacts, Containment, DenialEvidence, NetworkFacts, ShellFacts, MAX_BLOCKED,
    MAX_REFUSALS,
};
pub use task::{
    join_streams, task_channel, BashTask, BashTaskRead, OutputCursor, TaskPublisher, TaskState,
    TaskStatus,
};
