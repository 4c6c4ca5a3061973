//! The sandbox seam of dsh-bash: the vocabulary every sandbox backend and
//! every consumer agrees on.
//!
//! A sandbox mode governs **file effects only** (not network, not process
//! visibility):
//!
//! | mode | may write |
//! |---|---|
//! | [`SandboxMode::ReadOnly`] | `/dev/null` only |
//! | [`SandboxMode::WorkspaceWrite`] | also the workspace root and a temp area |
//! | [`SandboxMode::DangerFullAccess`] | anything the user can (no confinement) |
//!
//! How strongly a backend enforces a mode is reported as
//! [`SandboxEnforcement`]: `full` when every promised effect is governed,
//! `partial` when the running kernel or backend cannot govern some of them.
//!
//! A [`SandboxProvider`] turns the exact argv of a command and a
//! [`SandboxPolicy`] into a [`Confinement`]: what to spawn instead and/or a
//! restriction applied between fork and exec, plus the facts a consumer
//! needs to classify the outcome (backend, enforcement, denial and runner
//! failure signatures). With no usable backend it fails closed with
//! [`SandboxUnavailable`]: a confined mode never silently runs unconfined.
//!
//! # Example
//!
//! ```
//! use dsh_sandbox::{SandboxMode, SandboxUnavailable};
//!
//! let mode: SandboxMode = "workspace-write".parse().unwrap();
//! assert!(mode.is_wider_than(SandboxMode::ReadOnly));
//! assert_eq!(mode.to_string(), "workspace-write");
//!
//! let refused = SandboxUnavailable::new(SandboxMode::ReadOnly, None);
//! assert_eq!(refused.code(), "SANDBOX_UNAVAILABLE");
//! assert!(refused.to_string().contains("refusing to run it unconfined"));
//! ```
//!
//! # Platform support
//!
//! This crate is pure data and compiles everywhere.
//!
//! # Caveats
//!
//! The seam contains no process code; confinement itself lives in provider
//! crates.
#![forbid(unsafe_code)]

mod mode;
mod provider;

pub use mode::{ParseModeError, SandboxEnforcement, SandboxMode};
pub use provider::{
    BoxFuture, Confinement, PreExec, SandboxPolicy, SandboxProvider, SandboxUnavailable,
};
