//! A [`BashExecutor`](dsh_bash::BashExecutor) whose commands run in a
//! container of the session's own, made from an image of the user's
//! choosing by a container engine (podman, rootful or rootless; docker).
//!
//! [`ContainerBashExecutor`] makes the container when the session's first
//! command needs it and removes it at shutdown:
//!
//! - the workspace bind-mounted read-write at the same path; the root file
//!   system read-only, `/tmp` a writable tmpfs of the container's own;
//! - no network (`--network none`) unless the configuration turns it on
//!   (the engine's own network) or allows a list of hosts: then the
//!   server's proxy is reached through a door (a Unix socket) mounted into
//!   the container, behind a forwarder on the container's own loopback
//!   (`127.0.0.1:3128`) that the proxy variables of every process there
//!   name;
//! - the session's limits as the container's (`--memory` with the same
//!   swap, `--pids-limit`, `--cpus`): every command of the session
//!   together, reported as the `container` limit mechanism (none under
//!   rootless podman on cgroup v1, which ignores them: reported missing);
//! - no capabilities, `no-new-privileges`, an init as PID 1;
//! - ended with its server: the server holds a lock on a lifeline file
//!   mounted into the container, whose idle process exits when the lock
//!   comes free (the server ended, SIGKILL included), and `--rm` removes
//!   it; labelled with its server (`HOST:BOOT:PIDNS:PID:START`) all the
//!   same, so that what a crashed engine kept is left to the next server's
//!   [`sweep`].
//!
//! Inside, this same binary — mounted read-only from the host, so any image
//! with bash and glibc 2.34 or later serves — runs as `dsh-bash mcp`
//! unconfined (the container is the boundary), keeping its containment,
//! output and spill; the host talks to it through a
//! [`RemoteBashExecutor`](dsh_bash_remote::RemoteBashExecutor) over the
//! engine's `exec` stdio. Results say `sandbox.backend: "container"` with
//! the engine, the image, its digest and the container's name.
//!
//! Limits: one container per executor (a `dsh-bash mcp` over stdio is one
//! session); `oom_killed` and `process_limit_hit` are not observed (the
//! engine's cgroup is not ours to read); background tasks' facts are the
//! server inside's (no `sandbox` facts).
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

mod container;
mod engine;
mod error;
mod executor;
mod idle;
mod leftovers;

pub use container::{sweep, Container};
pub use engine::{check_image, Engine, EngineKind, BINARY_IN_CONTAINER, IDLE, NON_DUMPABLE};
pub use error::ContainerError;
pub use executor::{ContainerBashExecutor, ContainerConfig};
pub use idle::{idle, Lifeline, LIFELINE_IN_CONTAINER};
pub use leftovers::sweep_leftovers;
