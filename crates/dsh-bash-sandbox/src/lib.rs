//! `SandboxBashExecutor`: runs commands with the local executor's mechanics
//! (process trees, timeouts, SIGTERM→SIGKILL, spill files, tasks) under a
//! [`dsh_sandbox::SandboxProvider`], and reports what happened as facts.
//!
//! - `resolve` stamps the mode: the request's explicit mode, else the
//!   configured default (`read-only` by default);
//! - `danger-full-access` runs unwrapped: foreground results carry
//!   `{mode, denied: false}` and no enforcement, background tasks no facts;
//! - a confined run asks the provider on every call for exactly
//!   `bash -c <command>`; no usable backend → `SANDBOX_UNAVAILABLE`, nothing
//!   runs;
//! - runner failure is classified first, structurally: the launcher's exec
//!   report (a restriction the kernel refused, a missing runner) or the
//!   runner's own status channel (bwrap's `--json-status-fd`) — never text
//!   the command can print (foreground: a `SANDBOX_UNAVAILABLE` error with
//!   the runner's first stderr line; background: `runner_failed`); then
//!   denial (non-zero exit AND this backend's denial phrase on stderr; never
//!   on exit 0 or signal death);
//! - the workspace is resolved once at construction (canonical path and an
//!   open handle; `/` is refused) and reported in every result's facts with
//!   the backend, the enforcement and its gaps;
//! - under `workspace-write` each command gets a private temporary
//!   directory, removed once its tree is gone (before a foreground result
//!   returns; shutdown waits for background ones);
//! - under `workspace-write` the tools' caches (npm, pip, uv, cargo, Go,
//!   Gradle, Maven, `XDG_CACHE_HOME`) are the sandbox's own
//!   ([`CacheConfig`]): persistent per user (build outputs per workspace),
//!   writable for confined commands only, never the host's;
//! - background facts are stamped before listeners and waiters see the task
//!   settled; each task is judged by its own confinement.
//!
//! The confined process is the runner (for bubblewrap) or the shell itself
//! (Landlock, applied between fork and exec), spawned by the local
//! executor, so the containment and kill guarantees of `dsh-bash-local`
//! hold unchanged: the runner is the root of the tree that gets frozen and
//! killed.
//!
//! # Example
//!
//! ```no_run
//! // no_run: confinement needs bubblewrap or a Landlock kernel, which a
//! // doc-test machine may lack.
//! use std::sync::Arc;
//! use dsh_bash::{BashExecRequest, BashExecutor};
//! use dsh_bash_sandbox::{SandboxBashExecutor, SandboxConfig};
//! use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let provider = Arc::new(LocalSandboxProvider::new(LocalSandboxConfig::default())?);
//! let executor = dsh_bash_sandbox::sandboxed(SandboxConfig::default(), provider)?;
//! let result = executor.run(executor.resolve(BashExecRequest::new("touch /etc/x"))?).await?;
//! assert!(result.sandbox.unwrap().denied);
//! # Ok(())
//! # }
//! ```
//!
//! # The server's own walks
//!
//! Everything the server does to a tree a command can write runs
//! unconfined, after or beside a hostile process that may rename anything
//! under it. Each walk, and why it is safe:
//!
//! - **the caches' sweep** (at start) measures and removes directories of
//!   the cache root beneath descriptors, never following a link; the
//!   directories themselves sit in a root no command can write, so only
//!   what is inside them can change under the walk;
//! - **a private TMPDIR's removal** and **the sweep of a dead server's
//!   ones**: descriptor-relative from a handle on the temp dir taken when
//!   the directory was made, `O_NOFOLLOW` all the way down, a swapped-in
//!   link unlinked as a link ([`dsh_bash_local::scratch`]); a temp dir or
//!   spill parent inside the writable workspace is refused outright, so no
//!   other command can write beneath one while it is removed;
//! - **stand-ins** (made, claimed, removed): `openat2` beneath the
//!   workspace handle with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, removal
//!   only of the marked, empty entry whose identity was locked
//!   (`dsh-sandbox-local`'s `stand_in`);
//! - **protected-path binds**: every source opened beneath the workspace
//!   handle without following a link, bound by descriptor;
//! - **protected-path resolution** (`dsh_protect::resolve`:
//!   listing a home's dot-entries, reading git's config files and index):
//!   reads only, by path; a swap can change what is *proposed* for
//!   protection, never what is opened, created or removed, which is
//!   decided by the descriptor-relative steps above;
//! - **spill files**: created with `O_CREAT | O_EXCL | O_NOFOLLOW` relative
//!   to the spill directory's handle, the directory checked to be the one
//!   opened before every use and removed with the standard library's
//!   descriptor-relative `remove_dir_all`; it lies outside every writable
//!   workspace (refused otherwise).
//!
//! # Platform support
//!
//! Wherever the provider can confine; elsewhere confined modes fail closed.
//!
//! # Caveats
//!
//! Denial detection is conservative text matching on the collected stderr
//! tail: a denial whose message was cut from the tail is not reported.
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]
// No function over 80 lines (the threshold is in clippy.toml); CI's
// `clippy -D warnings` enforces it.
#![warn(clippy::too_many_lines)]

mod blocked;
mod caches;
mod executor;
mod npmrc;
mod planted;
mod private_tmp;

pub use caches::{CacheConfig, CachePlace};
pub use executor::{sandboxed, SandboxBashExecutor, SandboxConfig, SandboxConfigError};
