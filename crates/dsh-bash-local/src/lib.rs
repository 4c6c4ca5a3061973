//! `LocalBashExecutor`: bash commands as contained local process trees.
//!
//! Each call runs a fresh non-login `bash -c <command>` in a session and
//! process group of its own, with a timeout (foreground), cancellation,
//! SIGTERM → grace → SIGKILL on the whole tree, stdout and stderr collected
//! separately into a bounded in-memory tail with the complete stream in a
//! private spill file, a scrubbed environment, and background tasks with
//! incremental reads and completion listeners.
//!
//! # Example
//!
//! ```no_run
//! use dsh_bash::{BashExecRequest, BashExecutor};
//! use dsh_bash_local::{LocalBashExecutor, LocalConfig};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let executor = LocalBashExecutor::new(LocalConfig::default())?;
//! let spec = executor.resolve(BashExecRequest::new("echo hello; exit 3"))?;
//! let result = executor.run(spec).await?;
//! assert_eq!(result.exit_code, Some(3));
//! assert_eq!(result.stdout.text, "hello\n");
//! executor.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Containment: how nothing outlives its task
//!
//! Killing a process group misses descendants that called `setsid` or
//! double-forked. We make the **shell a child subreaper**
//! (`PR_SET_CHILD_SUBREAPER`, set between fork and exec; it survives
//! `execve`), so while the shell lives every orphaned descendant is
//! re-parented to it instead of to init and the whole tree stays reachable
//! through parent links, without root and without cgroups. To stop a
//! command we **freeze** the tree: SIGSTOP the shell (so it cannot exit and
//! hand its orphans to init), then walk `/proc` repeatedly, SIGSTOPping
//! every process whose parent is frozen or whose group is the command's,
//! until nothing new appears. Every member is held by a **pidfd**, so no
//! signal reaches a recycled pid. Then SIGTERM + SIGCONT everything, wait
//! for all members up to the grace, freeze again to catch what survivors
//! forked meanwhile, and SIGKILL the rest. A cgroup would be stronger but
//! needs a delegated hierarchy; a supervisor process would cost a fork per
//! command.
//!
//! # Descriptors
//!
//! A command starts with stdin, stdout and stderr and nothing else: every
//! descriptor above 2 the host holds (close-on-exec or not) is closed at
//! exec, except those a confining executor's [`dsh_sandbox::Restriction`]
//! keeps on purpose (a runner's status pipe). The restriction itself is
//! data applied by this crate's launcher with raw syscalls between fork and
//! exec (capability drop, `no_new_privs`, a Landlock ruleset, a seccomp
//! program); no caller code runs in the forked child.
//!
//! # Dying with the host
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits.
//! All commands are forked from one dedicated thread that never exits, so
//! the shell gets SIGKILL exactly when the host process dies. A watchdog (a
//! `bash` loop in a process group of its own, one per host process) records the
//! process group of every running command; when the host dies, even by
//! SIGKILL, its pipe reaches EOF and it SIGKILLs every recorded group.
//!
//! # Output
//!
//! At most `max_output_bytes` per stream stay in memory (the tail). On the
//! first overflow a spill file is created (mode 0600, exclusive, random
//! name, in a 0700 directory) and receives everything: the bytes already
//! kept, then every later byte, written from the blocking pool in 1 MiB
//! batches so the reader never blocks a runtime thread. Text is decoded as
//! UTF-8 with replacement; a tail never starts inside a character.
//!
//! # Platform support
//!
//! Linux 5.4 or newer (pidfds, `waitid(P_PIDFD)`), with `bash` on PATH (or
//! configured). Needs a Tokio runtime with IO and time enabled.
//!
//! # Caveats
//!
//! - When the shell exits on its own, leftovers still in its process group
//!   (`server &`) are stopped and counted in
//!   [`dsh_bash::BashRunResult::leftovers_stopped`]; the run returns at most
//!   `linger_ms` after the exit even if something holds the pipes open. A
//!   process that left the group (`setsid`, `nohup setsid`) is treated as a
//!   daemon and left alone, as a terminal would; it is stopped only by a
//!   kill, timeout, cancellation or shutdown while the shell still runs.
//! - If the host is SIGKILLed, descendants that left the command's process
//!   group survive it; the shell and its group do not.
//! - Completion listeners run on the runtime; keep them short.
//! - Supervision runs on the Tokio runtime that started the command.
//!   Dropping the executor without [`dsh_bash::BashExecutor::shutdown`]
//!   leaves its tasks running until that runtime shuts down; then each
//!   supervisor's guard kills its whole tree (without a grace). A dropped
//!   foreground `run` future kills its tree the same way.
//! - Spill files outlive the executor (a printed path must stay readable);
//!   retention bounds them while it runs.
#![deny(unsafe_op_in_unsafe_fn)]

mod config;
mod drain;
mod env;
mod executor;
mod output;
mod spawn;
mod spill;
mod supervise;
mod sys;
mod tasks;
mod tree;

pub use config::{ConfigError, LocalConfig, ScrubPolicy};
pub use executor::{Invocation, LocalBashExecutor, SettleStamp, Settled};
