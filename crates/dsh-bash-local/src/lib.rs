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
//! ```
//! use dsh_bash::{BashExecRequest, BashExecutor};
//! use dsh_bash_local::{LocalBashExecutor, LocalConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
//! # runtime.block_on(async {
//! let executor = LocalBashExecutor::new(LocalConfig::default())?;
//! let spec = executor.resolve(BashExecRequest::new("echo hello; exit 3"))?;
//! let result = executor.run(spec).await?;
//! assert_eq!(result.exit_code, Some(3));
//! assert_eq!(result.stdout.text, "hello\n");
//! executor.shutdown().await;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```
//!
//! # A foreground call, end to end
//!
//! ```text
//! MCP tools/call "bash"   dsh-bash-mcp  lib.rs        BashServer::call_tool
//!   -> BashTools::call    dsh-tool-bash tools.rs      arguments, escalation, owner
//!   -> BashExecutor::run  executor.rs   the plain Invocation; with a LaunchHook (the
//!                                       sandbox, hook.rs) the hook's confined one
//!   -> foreground         executor.rs   Invocation -> Launch (argv, env, restriction)
//!   -> supervise          supervise.rs  Capture (streams), Deadlines (timeout, cancel,
//!                                       kill, shutdown), Patience (grace, linger)
//!   -> spawn              spawn.rs      a permanent spawner thread, the command's cgroup
//!   -> dsh_launch::launch dsh-launch    clone(CLONE_VM | CLONE_VFORK); the child applies
//!                                       the restriction with raw syscalls and execs bash
//! <- Spawned              pid, pidfd, Pipes, cgroup
//!   -> Run                lifecycle.rs  the machine: step(phase, event) -> actions over
//!                                       running, lingering, terminating, killing, settled
//!   -> Tree               contain.rs    what an action does: CgroupTree or WalkedTree
//!                                       (the process-tree walk), kill on drop
//! <- Ended                exit status, stop cause, leftovers, containment
//!   -> Settle             hook.rs       one Outcome (ran, stopped, never ran) for runs and
//!                                       tasks alike; the hook's Verdict: facts or unavailable
//! <- BashRunResult        tails, totals, spill paths; rendered by dsh-tool-bash
//! ```
//!
//! # One host per process
//!
//! What every command of a process shares is owned by one object, the host
//! (`host.rs`), started by the first executor and held by each through an
//! `Arc`: the stop and I/O threads, the parent cgroup, the adoption
//! registry, the watchdog, the spawner threads, the command counter. It is
//! the crate's only static, because the kernel keeps the subreaper bit and
//! a spawning thread's death signal per process. Starting it makes the
//! parent cgroup and starts the threads and the watchdog; it sweeps
//! nothing (see below).
//!
//! # Containment: how nothing outlives its task
//!
//! Two mechanisms; every foreground result says which one contained it
//! ([`dsh_bash::BashRunResult::containment`]).
//!
//! **cgroup** (where the executor can create cgroups: root on a cgroup v2
//! or hybrid host, or a delegated subtree it may write): one parent cgroup
//! per host process, one cgroup per command, joined by the command's first
//! process before exec. Leftovers are whatever is still in the cgroup when
//! the shell exits — a `server &`, a `setsid` daemon, a double fork alike —
//! and they are stopped and counted in `leftovers_stopped` (one rule: a
//! process meant to outlive its command belongs in a background task). A
//! stop is SIGTERM to every member, the grace, then `cgroup.kill`: one
//! atomic SIGKILL that no fork (not one made in a SIGTERM handler, not one
//! made while the host is out of descriptors) can outrun. A command is
//! settled when `cgroup.events` says `populated 0`; its cgroup (and any
//! sub-cgroup it made) is then removed. Processes a command moves into
//! another cgroup of the host's parent (beside its own, or the parent
//! itself) are killed and counted as its leftovers too. Stated limit: an
//! unconfined command running as root can write its pid into a cgroup
//! outside the host's parent (the root cgroup, say) and so leave; under a
//! sandbox the cgroup filesystem is not writable. Cost: about 0.2 ms per command over the process-tree walk
//! (`dsh-bash bench`, rows 1a and 1a'); a kill settles in a fraction of a
//! millisecond.
//!
//! **process-tree** (everywhere else, or forced with
//! [`ContainmentChoice::ProcessTree`]): the **shell is a child subreaper**
//! (`PR_SET_CHILD_SUBREAPER`, set between fork and exec; it survives
//! `execve`), so while the shell lives every orphaned descendant is
//! re-parented to it instead of to init and the whole tree stays reachable
//! through parent links. To stop a command we **freeze** the tree: SIGSTOP
//! the shell (so it cannot exit and hand its orphans to init), then walk
//! `/proc` repeatedly, SIGSTOPping every process whose parent is frozen or
//! whose group is the command's, until nothing new appears. Every member is
//! held by a **pidfd**, so no signal reaches a recycled pid. Then SIGTERM +
//! SIGCONT everything, wait for all members up to the grace, freeze again
//! to catch what survivors forked meanwhile, and SIGKILL the rest. When
//! the shell itself exits, its remaining children would go to init; with
//! [`LocalConfig::adopt_orphans`] (the `dsh-bash` binary sets it) the host
//! is their subreaper instead (see `adopt.rs`), so a process forked in the
//! shell's SIGTERM handler during the grace and a `setsid` daemon left at a
//! normal exit are found, stopped and counted like any member; a process
//! that cannot be held by a pidfd (no descriptor left) is stopped by pid
//! under its frozen parent. Stated limit of this fallback: without
//! adoption the two cases above escape.
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
//! All commands are forked from dedicated threads that never exit, so the
//! shell gets SIGKILL exactly when the host process dies. A watchdog (one
//! per host process, in a process group of its own, deaf to SIGHUP: the
//! host forked from `main` while it had one thread ([`fork_watchdog`]), or
//! executed as a named program, or a `bash` loop) waits for EOF on a pipe
//! only the host writes and for the host's exit (a pidfd; the `bash` loop
//! checks every second that the host's pid still names the host), so a
//! process that keeps the pipe open cannot keep it waiting: at host death,
//! even by SIGKILL,
//! it writes `cgroup.kill` of the host's parent cgroup (every process of
//! every task, escapees included, then removes the cgroups) and, for
//! process-tree commands, SIGKILLs every process group recorded for it and
//! every process that still carries the host's environment marker
//! (`DSH_BASH_HOST=<pid>.<start time>`, set on every command and inherited
//! by its descendants; one that clears its environment is not found — a
//! stated limit of the fallback).
//! Parent cgroups of hosts that died without their watchdog are swept when
//! the next host starts: their processes killed (`cgroup.kill`, logged),
//! then the cgroups removed, on a thread [`LocalBashExecutor::new`] starts;
//! a server calls [`sweep_dead_hosts`] itself to finish it before its first
//! request (`dsh-bash mcp` does, within 5 s, before it listens).
//!
//! # Output
//!
//! At most `max_output_bytes` per stream stay in memory (the tail). On the
//! first overflow a spill file is created (mode 0600, exclusive, random
//! name, relative to a handle on a 0700 directory, see `spill.rs`) and
//! receives the stream: the bytes already kept, then every later byte,
//! written from the blocking pool in 1 MiB batches so the reader never
//! blocks a runtime thread. A spill file stops at `max_spill_bytes` (1 GiB
//! by default): the tail keeps updating, the file keeps the first bytes,
//! and [`dsh_bash::CollectedOutput::spill_note`] says "capped at N bytes".
//! A write error (a full disk) keeps the partial file, tracked, with the
//! reason ("No space left on device (os error 28) after N bytes"); output
//! still in memory is never lost. Every result carries the byte total of
//! each stream. Retention bounds the files by count and bytes, running
//! files included. Text is decoded as UTF-8 with replacement; a tail never
//! starts inside a character.
//!
//! # Platform support
//!
//! Linux 5.4 or newer (pidfds, `waitid(P_PIDFD)`), with `bash` on an
//! absolute `PATH` entry (relative entries are skipped: they would name
//! whatever the working directory holds), or configured. Needs a Tokio runtime with IO and time enabled. On other
//! platforms the crate builds with the same API and
//! [`LocalBashExecutor::new`] returns [`ConfigError::Unsupported`] (run the
//! commands on a Linux machine through `dsh-bash-remote` instead); the
//! Linux modules are behind `cfg(target_os = "linux")`. Only Linux targets
//! are built here: `RUSTFLAGS="--cfg dsh_unsupported" cargo check
//! --workspace` builds the other platforms' side on Linux to check it.
//!
//! # Caveats
//!
//! - When the shell exits on its own, leftovers are stopped and counted in
//!   [`dsh_bash::BashRunResult::leftovers_stopped`] (under cgroups:
//!   everything still in the cgroup; under the process-tree walk: its
//!   process group only); the run returns at most `linger` after the exit
//!   even if something holds the pipes open.
//! - Under the process-tree walk, if the host is SIGKILLed, descendants
//!   that left the command's process group survive it; under cgroups they
//!   do not.
//! - Completion listeners run on the runtime; keep them short.
//! - Supervision runs on the Tokio runtime that started the command.
//!   Dropping the executor without [`dsh_bash::BashExecutor::shutdown`]
//!   leaves its tasks running until that runtime shuts down; then each
//!   supervisor's guard kills its whole tree (without a grace). A dropped
//!   foreground `run` future kills its tree the same way.
//! - Spill files outlive the executor (a printed path must stay readable)
//!   unless `discard_spill_on_shutdown` is set (a server: its paths mean
//!   nothing after the session); retention bounds them while it runs, and
//!   the directories of hosts that died are swept when the next executor
//!   makes its own.
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
// Unsafe code lives in the `dsh-launch` crate only (the launcher and every
// raw syscall), used here as `sys`.
#![forbid(unsafe_code)]
// No function over 80 lines (the threshold is in clippy.toml); CI's
// `clippy -D warnings` enforces it.
#![warn(clippy::too_many_lines)]

// The executor proper is Linux's (pidfds, cgroups, `clone`, Landlock);
// elsewhere the same API exists and building an executor is a typed
// error (`ConfigError::Unsupported`). `--cfg dsh_unsupported` builds the
// other platforms' side on Linux, to check it compiles.
macro_rules! linux {
    ($($item:item)*) => {
        $( #[cfg(all(target_os = "linux", not(dsh_unsupported)))] $item )*
    };
}

macro_rules! elsewhere {
    ($($item:item)*) => {
        $( #[cfg(any(not(target_os = "linux"), dsh_unsupported))] $item )*
    };
}

linux! {
    mod adopt;
    mod changes;
    mod cgroup;
    mod cgroupfs;
    mod contain;
    mod drain;
    mod env;
    mod executor;
    mod host;
    mod input;
    mod lifecycle;
    mod limits;
    mod offload;
    mod output;
    mod secrets;
    mod shell_run;
    mod snapshot;
    mod spawn;
    mod spill;
    mod stop;
    mod supervise;
    use dsh_launch as sys;
    mod procfs;
    mod tasks;
    mod tree;
    mod watchdog;
    mod watchdog_main;
    pub use executor::{sweep_dead_hosts, LocalBashExecutor};
    pub use snapshot::take_shell_snapshot;
    pub use host::{fork_watchdog, use_watchdog_program};
    pub use watchdog_main::run_watchdog_if_asked;
}

elsewhere! {
    mod unsupported;
    pub use unsupported::{
        fork_watchdog, run_watchdog_if_asked, sweep_dead_hosts, take_shell_snapshot,
        use_watchdog_program, LocalBashExecutor,
    };
}

mod config;
mod hook;
pub mod scratch;
mod shell;
mod signal;

pub use config::{
    ChangeTracking, ConfigError, ContainmentChoice, LocalConfig, ResourceLimits, ScrubPolicy,
};
pub use dsh_sandbox::Invocation;
pub use hook::{LaunchHook, Launching, NeverRan, Outcome, Settle, Verdict};
pub use shell::{
    ShellSnapshot, SnapshotError, SnapshotSlot, SnapshotSource, SnapshotState, SnapshotSummary,
};
pub use signal::{signal_name, signal_number};

/// Raises this process's soft open-file limit to its hard limit and returns
/// the limit now in force. Every running command holds a pidfd and two
/// pipes (three descriptors), and 1024 is a common soft default: a front
/// end that runs many commands at once calls this once at start.
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    #[cfg(all(target_os = "linux", not(dsh_unsupported)))]
    return sys::raise_open_file_limit();
    #[cfg(any(not(target_os = "linux"), dsh_unsupported))]
    return Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "the open-file limit is raised on Linux only",
    ));
}
