//! A [`BashExecutor`] that runs commands on another machine.
//!
//! [`RemoteBashExecutor`] drives a `dsh-bash mcp` server — over Streamable
//! HTTP ([`RemoteBashExecutor::over_http`], a URL and a bearer token) or
//! over the stdio of any command that starts one
//! ([`RemoteBashExecutor::over_stdio`]: `ssh host dsh-bash mcp`,
//! `kubectl exec -i pod -- dsh-bash mcp`, `docker exec -i box dsh-bash
//! mcp`) — and implements the whole trait, so an agent swaps
//! `LocalBashExecutor` for it without touching its tools.
//!
//! It speaks standard MCP: the `bash`, `bash_output` and `bash_kill` tool
//! calls, marked as executor calls by a `_meta` entry and answered with the
//! executor's exact facts (`dsh_bash::wire`), on protocol 2026-07-28.
//!
//! What is different from a local executor:
//!
//! - **Paths are the server's.** Working directories, spill paths and the
//!   sandbox's workspace name files on the machine the server runs on.
//! - **Background output is pulled.** A task's output is fetched by a
//!   poller (every 20 ms while it flows, backing off to 500 ms) into a
//!   local buffer that [`BashExecutor::read_output`] drains, so a read can
//!   trail the remote command by up to one poll. At most
//!   [`RemoteConfig::max_buffered_bytes`] of each stream wait unread here;
//!   beyond that the oldest is dropped and the next read says `lossy`.
//! - **The connection can fail.** A call whose answer does not come is an
//!   error ([`BashError::Unreachable`]) once the connection is gone or its
//!   patience runs out, never a hang; a foreground run waits its timeout
//!   plus [`RemoteConfig::patience`]. Over HTTP a dropped connection is
//!   retried by the next call and the server keeps the background tasks
//!   (they belong to the token, not to one connection); over a command's
//!   stdio the server ends with the connection, and so do its tasks, which
//!   settle here as `killed` with the reason on stderr.
//! - **Nothing wider than the server's mode.** The server's sandbox mode
//!   and network policy are a ceiling: a request for a wider mode is
//!   refused (only a person can widen one, through the model-facing call's
//!   approval).
//! - **Owners are kept here.** The server runs every task under this
//!   connection's session; the owner a request names is recorded on this
//!   side and is what [`BashExecutor::owner_of`] reports.
//!
//! # Example
//!
//! ```no_run
//! // no_run: it needs a dsh-bash server to connect to.
//! use std::sync::Arc;
//! use dsh_bash::{BashExecRequest, BashExecutor};
//! use dsh_bash_remote::RemoteBashExecutor;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut ssh = tokio::process::Command::new("ssh");
//! ssh.args(["build-box", "dsh-bash", "mcp", "--sandbox", "workspace-write"]);
//! let executor: Arc<dyn BashExecutor> = Arc::new(RemoteBashExecutor::over_stdio(ssh).await?);
//! let spec = executor.resolve(BashExecRequest::new("uname -n"))?;
//! let result = executor.run(spec).await?;
//! println!("{}", result.stdout.text);
//! executor.shutdown().await;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

mod link;
mod mirror;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dsh_bash::wire::{ExecExtras, Reply, ServerFacts};
use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashExecutor, BashRunResult, BashTask, BashTaskId,
    BashTaskRead, BoxFuture, ListenerHandle, NetworkPolicy, OwnerToken, SandboxMode, TaskListener,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub use link::ConnectError;
use link::Link;
use mirror::Mirror;

/// How a remote executor waits and buffers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RemoteConfig {
    /// How long a call other than a foreground run waits for its answer,
    /// and how much longer than its timeout a foreground run waits.
    pub patience: Duration,
    /// The shortest wait between two pulls of a task's output (while it
    /// flows).
    pub poll_min: Duration,
    /// The longest wait between two pulls (when a task is quiet).
    pub poll_max: Duration,
    /// Unread bytes of each stream of a task kept here.
    pub max_buffered_bytes: usize,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            patience: Duration::from_secs(30),
            poll_min: Duration::from_millis(20),
            poll_max: Duration::from_millis(500),
            max_buffered_bytes: 1 << 20,
        }
    }
}

/// Runs commands through a `dsh-bash mcp` server elsewhere (see the crate
/// docs for what differs from a local executor).
pub struct RemoteBashExecutor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RemoteBashExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBashExecutor")
            .field("target", &self.inner.link.target)
            .finish_non_exhaustive()
    }
}

type Listeners = Mutex<Vec<(u64, TaskListener)>>;

pub(crate) struct Inner {
    link: Link,
    config: RemoteConfig,
    /// Every task started through this executor, oldest first.
    tasks: Mutex<Vec<Arc<Mirror>>>,
    by_id: Mutex<HashMap<BashTaskId, Arc<Mirror>>>,
    listeners: Listeners,
    next_listener: AtomicU64,
    /// Cancelled by shutdown: pollers stop, runs in flight are abandoned.
    stopping: CancellationToken,
    shut: AtomicBool,
}

impl RemoteBashExecutor {
    /// Connects to a server listening on Streamable HTTP (`dsh-bash mcp
    /// --listen`): `url` is its endpoint (`http://host:8700/mcp`), `token`
    /// its bearer token.
    pub async fn over_http(url: &str, token: &str) -> Result<Self, ConnectError> {
        Ok(Self::with_link(
            Link::http(url, token).await?,
            RemoteConfig::default(),
        ))
    }

    /// Starts `command`, which must run `dsh-bash mcp` with its stdio as
    /// the connection (`ssh host dsh-bash mcp`), and connects through it.
    /// Its stderr is kept for error messages. The server, and what it runs,
    /// ends when this executor shuts down or is dropped.
    pub async fn over_stdio(command: tokio::process::Command) -> Result<Self, ConnectError> {
        Ok(Self::with_link(
            Link::command(command).await?,
            RemoteConfig::default(),
        ))
    }

    /// [`Self::over_http`] with other waits and buffers.
    pub async fn over_http_with(
        url: &str,
        token: &str,
        config: RemoteConfig,
    ) -> Result<Self, ConnectError> {
        Ok(Self::with_link(Link::http(url, token).await?, config))
    }

    /// [`Self::over_stdio`] with other waits and buffers.
    pub async fn over_stdio_with(
        command: tokio::process::Command,
        config: RemoteConfig,
    ) -> Result<Self, ConnectError> {
        Ok(Self::with_link(Link::command(command).await?, config))
    }

    fn with_link(link: Link, config: RemoteConfig) -> Self {
        RemoteBashExecutor {
            inner: Arc::new(Inner {
                link,
                config,
                tasks: Mutex::default(),
                by_id: Mutex::default(),
                listeners: Mutex::default(),
                next_listener: AtomicU64::new(0),
                stopping: CancellationToken::new(),
                shut: AtomicBool::new(false),
            }),
        }
    }

    /// Takes over a background task that this token's session started
    /// through an earlier connection (a client that reconnected to an HTTP
    /// server): from now on its output and state are pulled here, and
    /// `owner` is what [`BashExecutor::owner_of`] reports for it. Fails
    /// with the server's error for a task it does not know or that belongs
    /// to another token's session. Over a command's stdio there is nothing
    /// to take over: that server ended with its connection.
    pub async fn adopt(
        &self,
        id: &BashTaskId,
        owner: Option<OwnerToken>,
    ) -> Result<BashTask, BashError> {
        let inner = &self.inner;
        if inner.shut.load(Ordering::Acquire) {
            return Err(BashError::ShutDown);
        }
        if let Some(mirror) = inner.mirror(id) {
            return Ok(mirror.snapshot());
        }
        let (mirror, task) = Mirror::new(id.clone(), owner, &inner.config);
        let mirror = Arc::new(mirror);
        mirror::pull(inner, &mirror).await?;
        inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&mirror));
        inner
            .by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), Arc::clone(&mirror));
        if !mirror.is_settled() {
            mirror::spawn_poller(Arc::clone(inner), mirror);
        }
        Ok(task.refresh())
    }

    /// What the server said about itself when connecting.
    pub fn server(&self) -> &ServerFacts {
        &self.inner.link.facts
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn unexpected(reply: &Reply) -> BashError {
    BashError::Remote {
        code: "REMOTE".into(),
        message: format!("the server answered with an unexpected reply: {reply:?}"),
    }
}

impl Inner {
    fn mirror(&self, id: &BashTaskId) -> Option<Arc<Mirror>> {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Tells every listener about a settled task; a panicking listener is
    /// contained.
    fn announce(&self, task: &BashTask) {
        if self.shut.load(Ordering::Acquire) {
            return;
        }
        let listeners: Vec<TaskListener> = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, listener)| Arc::clone(listener))
            .collect();
        for listener in listeners {
            let call = std::panic::AssertUnwindSafe(|| listener(task));
            if std::panic::catch_unwind(call).is_err() {
                tracing::error!(task = %task.id, "a task listener panicked");
            }
        }
    }

    fn extras(spec: &BashExecSpec) -> ExecExtras {
        ExecExtras {
            stdin: spec.stdin.clone(),
            env: spec.env.clone(),
            sandbox_mode: spec.sandbox_mode,
            network: spec.network,
        }
    }

    fn arguments(spec: &BashExecSpec, background: bool) -> serde_json::Value {
        json!({
            "command": spec.command,
            "workdir": spec.workdir,
            "timeoutMs": millis(spec.timeout),
            "run_in_background": background,
        })
    }

    async fn run(&self, spec: BashExecSpec) -> Result<BashRunResult, BashError> {
        if self.shut.load(Ordering::Acquire) {
            return Err(BashError::ShutDown);
        }
        let cancel = spec.cancel.clone().unwrap_or_default();
        if cancel.is_cancelled() {
            return Err(BashError::AbortedBeforeSpawn);
        }
        let arguments = Self::arguments(&spec, false);
        let extras = Self::extras(&spec);
        let patience = spec.timeout.saturating_add(self.config.patience);
        let call = self.link.call("bash", arguments, &extras, patience);
        let reply = tokio::select! {
            reply = call => reply?,
            // Dropping the call cancels it at the server, which stops the
            // command; its output stays there.
            () = cancel.cancelled() => return Ok(abandoned(&spec)),
            () = self.stopping.cancelled() => return Ok(abandoned(&spec)),
        };
        match reply {
            Reply::Ran(result) => Ok(result),
            Reply::Failed(facts) => Err(facts.into_error()),
            other => Err(unexpected(&other)),
        }
    }

    async fn start(self: &Arc<Self>, spec: BashExecSpec) -> Result<BashTask, BashError> {
        if self.shut.load(Ordering::Acquire) {
            return Err(BashError::ShutDown);
        }
        if spec
            .cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Err(BashError::AbortedBeforeSpawn);
        }
        let reply = self
            .link
            .call(
                "bash",
                Self::arguments(&spec, true),
                &Self::extras(&spec),
                self.config.patience,
            )
            .await?;
        let facts = match reply {
            Reply::Started(facts) => facts,
            Reply::Failed(facts) => return Err(facts.into_error()),
            other => return Err(unexpected(&other)),
        };
        let (mirror, task) = Mirror::new(facts.id.clone(), spec.owner.clone(), &self.config);
        let mirror = Arc::new(mirror);
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&mirror));
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(facts.id.clone(), Arc::clone(&mirror));
        mirror::spawn_poller(Arc::clone(self), Arc::clone(&mirror));
        if let Some(cancel) = spec.cancel {
            let (inner, id) = (Arc::downgrade(self), facts.id);
            tokio::spawn(async move {
                cancel.cancelled().await;
                if let Some(inner) = inner.upgrade() {
                    let _ = inner.kill(&id).await;
                }
            });
        }
        Ok(task)
    }

    async fn kill(&self, id: &BashTaskId) -> Result<bool, BashError> {
        let mirror = self
            .mirror(id)
            .ok_or_else(|| BashError::UnknownTask { id: id.clone() })?;
        if mirror.is_settled() || mirror.killing.swap(true, Ordering::AcqRel) {
            return Ok(false);
        }
        let reply = self
            .link
            .call(
                "bash_kill",
                json!({ "task_id": id }),
                &ExecExtras::default(),
                self.config.patience,
            )
            .await;
        let killed = match reply {
            Ok(Reply::Killed { killed, .. }) => killed,
            Ok(Reply::Failed(facts)) => {
                mirror.killing.store(false, Ordering::Release);
                return Err(facts.into_error());
            }
            Ok(other) => {
                mirror.killing.store(false, Ordering::Release);
                return Err(unexpected(&other));
            }
            Err(err) => {
                mirror.killing.store(false, Ordering::Release);
                return Err(err);
            }
        };
        // The server has settled it: fetch the rest of its output and its
        // final state before saying so.
        for _ in 0..3 {
            if mirror.is_settled() {
                break;
            }
            mirror::pull(self, &mirror).await?;
        }
        Ok(killed)
    }

    async fn shutdown(&self) {
        if self.shut.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stopping.cancel();
        let running: Vec<Arc<Mirror>> = self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|m| !m.is_settled())
            .cloned()
            .collect();
        for mirror in running {
            let answer = self
                .link
                .call(
                    "bash_kill",
                    json!({ "task_id": mirror.id }),
                    &ExecExtras::default(),
                    self.config.patience,
                )
                .await;
            let note = match answer {
                Ok(_) => "killed by the executor's shutdown".to_owned(),
                Err(err) => format!(
                    "the executor shut down; the server could not be told to kill it: {err}"
                ),
            };
            mirror.settle_here(dsh_bash::TaskStatus::Killed, &note);
        }
        self.link.close().await;
    }
}

/// What a foreground run the caller abandoned (cancellation, shutdown)
/// returns: aborted, with no output (it stayed on the server).
fn abandoned(spec: &BashExecSpec) -> BashRunResult {
    BashRunResult {
        exit_code: None,
        signal: None,
        timed_out: false,
        aborted: true,
        timeout_ms: millis(spec.timeout),
        stdout: Default::default(),
        stderr: Default::default(),
        leftovers_stopped: 0,
        sandbox: None,
        containment: None,
    }
}

impl BashExecutor for RemoteBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.inner.link.facts.sandbox_mode
    }

    fn network_policy(&self, mode: SandboxMode) -> Option<NetworkPolicy> {
        self.inner
            .link
            .facts
            .network
            .iter()
            .find(|(m, _)| *m == mode)
            .map(|(_, policy)| *policy)
    }

    fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, BashError> {
        let facts = &self.inner.link.facts;
        let max = Duration::from_millis(facts.max_timeout_ms);
        let timeout = match request.timeout {
            Some(Duration::ZERO) => return Err(BashError::InvalidTimeout),
            Some(timeout) => timeout.min(max),
            None => Duration::from_millis(facts.default_timeout_ms).min(max),
        };
        if request.command.contains('\0') {
            return Err(BashError::CommandHasNul);
        }
        let workdir = match (request.workdir, &facts.cwd) {
            (Some(dir), Some(cwd)) if dir.is_relative() => cwd.join(dir),
            (Some(dir), _) => dir,
            (None, Some(cwd)) => cwd.clone(),
            (None, None) => std::path::PathBuf::from("/"),
        };
        let sandbox_mode = request.sandbox_mode.or(facts.sandbox_mode);
        let network = request
            .network
            .or_else(|| sandbox_mode.and_then(|mode| self.network_policy(mode)));
        Ok(BashExecSpec {
            command: request.command,
            workdir,
            timeout,
            owner: request.owner,
            sandbox_mode,
            network,
            stdin: request.stdin,
            env: request.env,
            cancel: request.cancel,
        })
    }

    fn run(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>> {
        Box::pin(self.inner.run(spec))
    }

    fn start(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>> {
        Box::pin(self.inner.start(spec))
    }

    fn get(&self, id: &BashTaskId) -> Option<BashTask> {
        Some(self.inner.mirror(id)?.snapshot())
    }

    fn owner_of(&self, id: &BashTaskId) -> Option<OwnerToken> {
        self.inner.mirror(id)?.owner.clone()
    }

    fn list(&self) -> Vec<BashTask> {
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|m| m.snapshot())
            .collect()
    }

    fn read_output(&self, id: &BashTaskId) -> Result<BashTaskRead, BashError> {
        let mirror = self
            .inner
            .mirror(id)
            .ok_or_else(|| BashError::UnknownTask { id: id.clone() })?;
        Ok(mirror.read())
    }

    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        Box::pin(self.inner.kill(id))
    }

    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle {
        let key = self.inner.next_listener.fetch_add(1, Ordering::Relaxed);
        self.inner
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((key, listener));
        let inner = Arc::downgrade(&self.inner);
        ListenerHandle::new(move || {
            if let Some(inner) = inner.upgrade() {
                inner
                    .listeners
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|(k, _)| *k != key);
            }
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.inner.shutdown())
    }
}

impl Drop for RemoteBashExecutor {
    /// Pollers stop; a command child (and so its server) is killed with
    /// the connection.
    fn drop(&mut self) {
        self.inner.stopping.cancel();
    }
}
