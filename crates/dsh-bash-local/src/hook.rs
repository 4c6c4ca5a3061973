//! The launch hook: what a confining executor (the sandbox) does around
//! every launch of the local one. The local executor stays the one
//! executor — tasks, streams, stops, the seed's result facts — and asks
//! its hook, when it has one, for the invocation that runs a command
//! confined ([`LaunchHook::confine`]) and, once the command ended, for its
//! account of it ([`Settle::settle`]): one [`Outcome`] for a foreground
//! run and a background task alike, one [`Verdict`].

use std::path::{Path, PathBuf};

use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashSandboxInfo, BoxFuture, NetworkPolicy,
    SandboxMode,
};

use crate::Invocation;

/// What a confining executor does around each launch.
pub trait LaunchHook: Send + Sync + 'static {
    /// The mode commands run in unless their call asks for another.
    fn sandbox_mode(&self) -> SandboxMode;
    /// The network a command under `mode` gets, given what its call asks
    /// (`asked`; `None`: nothing) and whether it asks for hosts beside
    /// the allow-list (`extra_hosts`).
    fn network(
        &self,
        asked: Option<NetworkPolicy>,
        mode: SandboxMode,
        extra_hosts: bool,
    ) -> NetworkPolicy;
    /// The mode and the network of a command `request` asks for (the
    /// local executor defaults the rest).
    fn decide(&self, request: &BashExecRequest) -> (SandboxMode, NetworkPolicy) {
        let mode = request.sandbox_mode.unwrap_or_else(|| self.sandbox_mode());
        let network = self.network(request.network, mode, !request.allow_hosts.is_empty());
        (mode, network)
    }
    /// The writable workspace root its confinement keeps.
    fn workspace_root(&self) -> &Path;
    /// The invocation that runs `spec` (its plain one is `plain`), and
    /// what settles it once it ended. `readable`: directories the command
    /// must be able to read (the executor's full-output files).
    fn confine<'a>(
        &'a self,
        spec: &'a BashExecSpec,
        plain: Invocation,
        readable: Vec<PathBuf>,
    ) -> BoxFuture<'a, Result<Launching, BashError>>;
    /// Waits for what the hook still does once the executor shut down.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// A command as the hook launches it.
pub struct Launching {
    /// What the local executor launches.
    pub invocation: Invocation,
    /// What gives the command's account once it ended.
    pub settle: Box<dyn Settle>,
}

/// The hook's account of one command, given once it ended; it may wait
/// (for the kernel's account of its denials).
pub trait Settle: Send {
    /// The verdict on a command that ended as `outcome`.
    fn settle(self: Box<Self>, outcome: Outcome) -> BoxFuture<'static, Verdict>;
}

/// How a command ended: the same for a foreground run and a background
/// task.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Its process ran, to its exit or until a stop (timeout,
    /// cancellation, kill, shutdown) ended it.
    Ran {
        /// Its exit code; `None` when a signal ended it.
        exit_code: Option<i32>,
        /// Whether a stop ended it.
        stopped: bool,
        /// The collected stderr tail.
        stderr: String,
    },
    /// It never ran.
    NeverRan {
        /// Why.
        why: NeverRan,
        /// What the launcher said.
        message: String,
    },
}

/// The hook's verdict.
#[derive(Debug)]
pub enum Verdict {
    /// The command ran (or never ran for a reason of its own): its facts.
    Ran(Option<BashSandboxInfo>),
    /// The confinement could not run it (its runner never started; the
    /// host ran out of descriptors, processes or memory): a foreground run
    /// fails with `error`, a task settles with `facts`.
    Unavailable {
        /// The facts a task settles with.
        facts: BashSandboxInfo,
        /// What a foreground run returns.
        error: BashError,
    },
}

/// Why a task's process was never started. Only [`NeverRan::Launch`] says
/// anything about a confining runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NeverRan {
    /// Its working directory is missing or cannot be entered: the
    /// request's, not the host's.
    Workdir,
    /// The host ran out of descriptors, processes or memory: busy, not
    /// broken.
    Exhausted,
    /// The launcher (or the runner it starts) could not start it.
    Launch,
}

impl NeverRan {
    /// The kind of a spawn failure with this cause: the host ran out of
    /// descriptors, processes or memory (`EMFILE`, `ENFILE`, `EAGAIN`,
    /// `ENOMEM`), or the launch failed.
    pub fn of(cause: &std::io::Error) -> NeverRan {
        // Linux's EMFILE and ENFILE, which have no stable `ErrorKind`.
        const EMFILE: i32 = 24;
        const ENFILE: i32 = 23;
        use std::io::ErrorKind;
        let exhausted = matches!(cause.kind(), ErrorKind::OutOfMemory | ErrorKind::WouldBlock)
            || matches!(cause.raw_os_error(), Some(EMFILE | ENFILE));
        if exhausted {
            NeverRan::Exhausted
        } else {
            NeverRan::Launch
        }
    }
}
