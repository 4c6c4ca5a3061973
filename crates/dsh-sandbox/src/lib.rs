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
//! # Example
//!
//! ```
//! use dsh_sandbox::SandboxMode;
//!
//! let mode: SandboxMode = "workspace-write".parse().unwrap();
//! assert!(mode.is_wider_than(SandboxMode::ReadOnly));
//! assert_eq!(mode.to_string(), "workspace-write");
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

pub use mode::{ParseModeError, SandboxEnforcement, SandboxMode};
