//! `LocalSandboxProvider`: confines commands on Linux with bubblewrap or
//! Landlock, chosen by functional probes, failing closed when neither works.
//!
//! Selection (`Backend::Auto`) probes bubblewrap first (it governs every
//! file effect through a read-only mount: `full` in both modes), then
//! Landlock (see the enforcement table in the Landlock section below). The
//! verdict, including "unavailable", is computed once per provider, even
//! when the first calls race, and cached. Either backend can be forced; an
//! operator may instead configure a bwrap-shaped runner command, which
//! skips selection and probes.
//!
//! # Landlock
//!
//! The ruleset is built in the parent; between fork and exec the child only
//! calls `prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self` on the
//! prepared fd and, in `read-only`, installs a prepared seccomp filter that
//! refuses chmod/chown/utimes/xattr syscalls (Landlock does not govern
//! them). In `workspace-write` those metadata changes stay possible outside
//! the workspace, so Landlock reports `partial` there.
//!
//! # Example
//!
//! ```no_run
//! use dsh_sandbox::{SandboxMode, SandboxPolicy, SandboxProvider};
//! use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let provider = LocalSandboxProvider::new(LocalSandboxConfig::default())?;
//! let argv = ["bash", "-c", "touch /etc/x"].map(std::ffi::OsString::from);
//! let policy = SandboxPolicy { mode: SandboxMode::ReadOnly, workspace_root: "/src".into() };
//! let confinement = provider.confine(&argv, &policy).await?;
//! println!("{} ({})", confinement.backend, confinement.enforcement);
//! # Ok(())
//! # }
//! ```
//!
//! # Platform support
//!
//! Linux. Landlock needs a 5.13+ kernel with Landlock enabled; bubblewrap
//! needs the `bwrap` binary and user namespaces (or root). Elsewhere every
//! confined mode fails closed without probing.
//!
//! # Caveats
//!
//! Modes govern file effects only: not network access and not process
//! visibility.
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(target_os = "linux")]
mod bwrap;
mod config;
#[cfg(target_os = "linux")]
mod landlock_backend;
#[cfg(target_os = "linux")]
mod probe;
mod provider;
#[cfg(target_os = "linux")]
mod sys;

pub use config::{Backend, ConfigError, LocalSandboxConfig, RunnerCommand};
pub use provider::LocalSandboxProvider;
