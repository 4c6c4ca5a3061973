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
//! It speaks standard MCP: the `bash`, `bash_output`, `bash_write` and `bash_kill` tool
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
//!   beyond that the oldest is dropped and the next read says `lossy`. Pulls
//!   ask by position (`since`), so a pull whose answer was lost on the way
//!   is asked again from the same place and loses nothing the server still
//!   holds; reads here are by the server's positions too.
//! - **The connection can fail; nothing waits forever.** The handshake and
//!   every call but a foreground run wait [`RemoteConfig::patience`] at
//!   most; a foreground run waits its timeout plus that. A lost connection
//!   is [`BashError::Unreachable`] on what was in flight. A background task
//!   whose server is gone (a closed stdio, or no answer over HTTP for twice
//!   the patience) settles here as `killed`, with the reason on its stderr.
//! - **Over HTTP the server keeps the tasks.** They belong to the token's
//!   session, not to one connection: a client that reconnects takes one
//!   over with [`RemoteBashExecutor::adopt`]. They last until they end or
//!   the session expires (the server's `--idle-timeout` with no request at
//!   all). A `Started` answer lost on the way leaves a task this side never
//!   heard of running there until then. Over a command's stdio the server
//!   ends with the connection, and so do its tasks.
//! - **An abandoned run has no output here.** A foreground run cancelled
//!   or dropped is cancelled at the server (which stops the command) and
//!   returns `aborted` with empty streams; shutdown abandons runs in flight
//!   the same way and kills background tasks with the server's kill grace.
//! - **Nothing wider than the server's mode.** The server's sandbox mode
//!   and network policy are a ceiling: a request for a wider mode, or the
//!   network where it is off, is refused (only a person can widen one,
//!   through the model-facing call's approval), a confined request to a
//!   server that does not confine is refused rather than run open, and
//!   environment entries a sandbox runner's loader would act on
//!   (`LD_PRELOAD` and the like) are refused under bubblewrap.
//! - **Owners are kept here.** The server runs every task under this
//!   connection's session; the owner a request names is recorded on this
//!   side and is what [`BashExecutor::owner_of`] reports. The last 1000
//!   settled tasks are kept for `get`, `list` and a last read.
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
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

mod link;
mod mirror;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dsh_bash::wire::{ExecExtras, Reply, ServerFacts};
use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashExecutor, BashRunResult, BashTask, BashTaskId,
    BashTaskRead, BoxFuture, ListenerHandle, NetworkPolicy, OutputCursor, OwnerToken, SandboxMode,
    TaskListener, TaskListeners, TaskStatus,
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

pub(crate) struct Inner {
    link: Link,
    config: RemoteConfig,
    /// Every task started through this executor, oldest first.
    tasks: Mutex<Vec<Arc<Mirror>>>,
    by_id: Mutex<HashMap<BashTaskId, Arc<Mirror>>>,
    listeners: TaskListeners,
    /// Cancelled by shutdown: pollers stop, runs in flight are abandoned.
    stopping: CancellationToken,
    shut: AtomicBool,
    /// Cancelled when the first shutdown has finished.
    shut_down: CancellationToken,
}

/// Settled tasks kept for `get`, `list` and a last read; the oldest go
/// first past this.
const RETAIN_SETTLED: usize = 1000;

impl RemoteBashExecutor {
    /// Connects to a server listening on Streamable HTTP (`dsh-bash mcp
    /// --listen`): `url` is its endpoint (`http://host:8700/mcp`), `token`
    /// its bearer token.
    pub async fn over_http(url: &str, token: &str) -> Result<Self, ConnectError> {
        Self::over_http_with(url, token, RemoteConfig::default()).await
    }

    /// Starts `command`, which must run `dsh-bash mcp` with its stdio as
    /// the connection (`ssh host dsh-bash mcp`), and connects through it.
    /// Its stderr is kept for error messages. The server, and what it runs,
    /// ends when this executor shuts down or is dropped.
    pub async fn over_stdio(command: tokio::process::Command) -> Result<Self, ConnectError> {
        Self::over_stdio_with(command, RemoteConfig::default()).await
    }

    /// [`Self::over_http`] with other waits and buffers.
    pub async fn over_http_with(
        url: &str,
        token: &str,
        config: RemoteConfig,
    ) -> Result<Self, ConnectError> {
        Ok(Self::with_link(
            Link::http(url, Some(token), &[], config.patience).await?,
            config,
        ))
    }

    /// [`Self::over_http_with`] through a router in front of the server
    /// (agent-sandbox's), which keeps `Authorization` for itself: the
    /// server's `token` goes as `X-Dsh-Bash-Token` (which `dsh-bash mcp
    /// --listen` accepts as well), the router's own token, when it has
    /// one, as `Authorization: Bearer`, and `headers` (name, value) with
    /// every request (what the router routes by: `X-Sandbox-ID`,
    /// `X-Sandbox-Namespace`, `X-Sandbox-Port`). A name or value HTTP
    /// cannot carry fails the connection, naming the header.
    pub async fn over_http_routed(
        url: &str,
        token: &str,
        router_token: Option<&str>,
        headers: &[(String, String)],
        config: RemoteConfig,
    ) -> Result<Self, ConnectError> {
        let mut all = vec![("X-Dsh-Bash-Token".to_owned(), token.to_owned())];
        all.extend(headers.iter().cloned());
        Ok(Self::with_link(
            Link::http(url, router_token, &all, config.patience).await?,
            config,
        ))
    }

    /// [`Self::over_stdio`] with other waits and buffers.
    pub async fn over_stdio_with(
        command: tokio::process::Command,
        config: RemoteConfig,
    ) -> Result<Self, ConnectError> {
        Ok(Self::with_link(
            Link::command(command, config.patience).await?,
            config,
        ))
    }

    fn with_link(link: Link, mut config: RemoteConfig) -> Self {
        // A zero wait would spin against the server; a zero buffer would
        // drop everything.
        config.poll_min = config.poll_min.max(Duration::from_millis(1));
        config.poll_max = config.poll_max.max(config.poll_min);
        config.max_buffered_bytes = config.max_buffered_bytes.max(4096);
        config.patience = config.patience.max(Duration::from_millis(100));
        RemoteBashExecutor {
            inner: Arc::new(Inner {
                link,
                config,
                tasks: Mutex::default(),
                by_id: Mutex::default(),
                listeners: TaskListeners::default(),
                stopping: CancellationToken::new(),
                shut: AtomicBool::new(false),
                shut_down: CancellationToken::new(),
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
        // The id is reserved before the first pull: a second adopt gets
        // this mirror, and a settle announced by the pull finds its owner.
        let mirror = {
            let mut by_id = inner.by_id.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(mirror) = by_id.get(id) {
                if mirror.adopting.load(Ordering::Acquire) {
                    return Err(BashError::Remote {
                        code: "ADOPTING".into(),
                        message: format!("task {id} is being taken over by another call; try again once it returns"),
                    });
                }
                return Ok(mirror.snapshot());
            }
            let (mirror, _) = Mirror::new(id.clone(), owner, &inner.config);
            mirror.adopting.store(true, Ordering::Release);
            let mirror = Arc::new(mirror);
            by_id.insert(id.clone(), Arc::clone(&mirror));
            mirror
        };
        if let Err(err) = mirror::pull(inner, &mirror).await {
            inner
                .by_id
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
            return Err(err);
        }
        mirror.adopting.store(false, Ordering::Release);
        inner.register(&mirror)?;
        Ok(mirror.snapshot())
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
    /// `bash_kill` or `bash_output` of one task at the server, waiting the
    /// patience at most.
    async fn task_call(&self, tool: &str, id: &BashTaskId) -> Result<Reply, BashError> {
        self.link
            .call(
                tool,
                json!({ "task_id": id }),
                &ExecExtras::default(),
                self.config.patience,
            )
            .await
    }

    /// A `bash_output` call reading from `since`.
    async fn read_call(&self, id: &BashTaskId, since: OutputCursor) -> Result<Reply, BashError> {
        self.link
            .call(
                "bash_output",
                json!({ "task_id": id, "since": since.to_string() }),
                &ExecExtras::default(),
                self.config.patience,
            )
            .await
    }

    fn mirror(&self, id: &BashTaskId) -> Option<Arc<Mirror>> {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Tells every listener about a settled task (none once shutdown
    /// began).
    fn announce(&self, task: &BashTask) {
        if !self.shut.load(Ordering::Acquire) {
            self.listeners.notify(task);
        }
    }

    fn extras(spec: &BashExecSpec) -> ExecExtras {
        ExecExtras {
            stdin: spec.stdin.clone(),
            env: spec.env.clone(),
            sandbox_mode: spec.sandbox_mode,
            network: spec.network,
            allow_hosts: spec.allow_hosts.clone(),
            terminal: spec.terminal,
            interactive: spec.interactive,
            report_cwd: spec.report_cwd,
            workdir_pinned: spec.workdir_pinned,
        }
    }

    fn arguments(spec: &BashExecSpec, background: bool) -> serde_json::Value {
        json!({
            "command": spec.command,
            "workdir": spec.workdir.to_string_lossy(),
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
        if spec.cancelled() {
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
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(facts.id.clone(), Arc::clone(&mirror));
        self.register(&mirror)?;
        if let Some(cancel) = spec.cancel {
            let (inner, id, settled) = (Arc::downgrade(self), facts.id, task.clone());
            let stopping = self.stopping.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = cancel.cancelled() => {}
                    _ = settled.settled() => return,
                    () = stopping.cancelled() => return,
                }
                if let Some(inner) = inner.upgrade() {
                    let _ = inner.kill(&id).await;
                }
            });
        }
        Ok(task)
    }

    /// Lists a mirror (already in `by_id`), starts its poller, and drops
    /// the oldest settled ones past [`RETAIN_SETTLED`]. If shutdown began
    /// meanwhile the task is killed at the server and the call refused.
    fn register(self: &Arc<Self>, mirror: &Arc<Mirror>) -> Result<(), BashError> {
        let evicted: Vec<BashTaskId> = {
            let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
            tasks.push(Arc::clone(mirror));
            let settled = tasks.iter().filter(|m| m.is_settled()).count();
            let excess = settled.saturating_sub(RETAIN_SETTLED);
            let mut evicted = Vec::new();
            tasks.retain(|m| {
                if evicted.len() < excess && m.is_settled() {
                    evicted.push(m.id.clone());
                    false
                } else {
                    true
                }
            });
            evicted
        };
        if !evicted.is_empty() {
            let mut by_id = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
            for id in &evicted {
                by_id.remove(id);
            }
        }
        if self.shut.load(Ordering::Acquire) {
            let (inner, id) = (Arc::clone(self), mirror.id.clone());
            mirror.settle_here(TaskStatus::Killed, "the executor shut down as it started");
            tokio::spawn(async move {
                let _ = inner.task_call("bash_kill", &id).await;
            });
            return Err(BashError::ShutDown);
        }
        if !mirror.is_settled() {
            mirror::spawn_poller(Arc::clone(self), Arc::clone(mirror));
        }
        Ok(())
    }

    /// `bash_write` or `bash_screen` of one of our tasks at the server.
    async fn interact(
        &self,
        tool: &str,
        id: &BashTaskId,
        input: &[u8],
    ) -> Result<Reply, BashError> {
        if self.mirror(id).is_none() {
            return Err(BashError::UnknownTask { id: id.clone() });
        }
        let extras = ExecExtras {
            stdin: (tool == "bash_write").then(|| input.to_vec()),
            ..ExecExtras::default()
        };
        let reply = self
            .link
            .call(
                tool,
                json!({ "task_id": id }),
                &extras,
                self.config.patience,
            )
            .await?;
        match reply {
            Reply::Failed(facts) => Err(facts.into_error()),
            reply => Ok(reply),
        }
    }

    async fn kill(&self, id: &BashTaskId) -> Result<bool, BashError> {
        let mirror = self
            .mirror(id)
            .ok_or_else(|| BashError::UnknownTask { id: id.clone() })?;
        if mirror.is_settled() {
            return Ok(false);
        }
        if mirror.killing.swap(true, Ordering::AcqRel) {
            // Another kill is under way: wait for the task to settle, as a
            // kill does.
            let _ = tokio::time::timeout(
                self.config.patience.saturating_mul(2),
                mirror.snapshot().settled(),
            )
            .await;
            return Ok(false);
        }
        // A kill dropped before its answer lets the next one try again.
        let mut killing = KillingFlag(Some(&mirror));
        let reply = self.task_call("bash_kill", id).await?;
        let (killed, task) = match reply {
            Reply::Killed { killed, task } => (killed, task),
            Reply::Failed(facts) => return Err(facts.into_error()),
            other => return Err(unexpected(&other)),
        };
        killing.0 = None;
        // The server has settled it: fetch the rest of its output and its
        // final state before saying so; should that fail, its state as the
        // kill reported it.
        for _ in 0..3 {
            if mirror.is_settled() || mirror::pull(self, &mirror).await.is_err() {
                break;
            }
        }
        if mirror.settle(task.state) {
            self.announce(&mirror.snapshot());
        }
        Ok(killed)
    }

    async fn shutdown(self: &Arc<Self>) {
        if self.shut.swap(true, Ordering::AcqRel) {
            self.shut_down.cancelled().await;
            return;
        }
        // Done when this returns or is dropped half-way: a later shutdown
        // never waits on one that will not finish.
        let _done = self.shut_down.clone().drop_guard();
        self.stopping.cancel();
        self.listeners.close();
        let running: Vec<Arc<Mirror>> = self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|m| !m.is_settled())
            .cloned()
            .collect();
        // Every kill at once, under one deadline.
        let mut kills = tokio::task::JoinSet::new();
        for mirror in running {
            let inner = Arc::clone(self);
            kills.spawn(async move {
                let answer = inner.task_call("bash_kill", &mirror.id).await;
                let note = match answer {
                    Ok(Reply::Killed { .. }) => "killed by the executor's shutdown".to_owned(),
                    Ok(Reply::Failed(facts)) => format!(
                        "the executor shut down; the server refused to kill it: {}",
                        facts.message
                    ),
                    Ok(other) => format!("the executor shut down; the server answered {other:?}"),
                    Err(err) => format!(
                        "the executor shut down; the server could not be told to kill it: {err}"
                    ),
                };
                mirror.settle_here(TaskStatus::Killed, &note);
            });
        }
        while kills.join_next().await.is_some() {}
        self.link.close().await;
    }
}

/// Clears a mirror's `killing` flag when dropped armed (a kill that did not
/// get its answer).
struct KillingFlag<'a>(Option<&'a Mirror>);

impl Drop for KillingFlag<'_> {
    fn drop(&mut self) {
        if let Some(mirror) = self.0 {
            mirror.killing.store(false, Ordering::Release);
        }
    }
}

/// What a foreground run the caller abandoned (cancellation, shutdown)
/// returns: aborted, with no output (it stayed on the server).
fn abandoned(spec: &BashExecSpec) -> BashRunResult {
    BashRunResult::abandoned(spec.timeout)
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
        // The server's defaults: its timeouts, its directory (relative
        // paths are the server's), its mode and the network under each.
        let defaults = dsh_bash::Defaults {
            sandbox_mode: facts.sandbox_mode,
            networks: facts.network.clone(),
            ..dsh_bash::Defaults::unconfined(
                Duration::from_millis(facts.default_timeout_ms),
                Duration::from_millis(facts.max_timeout_ms),
                facts
                    .cwd
                    .clone()
                    .unwrap_or_else(|| std::path::PathBuf::from("/")),
            )
        };
        let spec = request.into_spec(&defaults)?;
        if spec.workdir.to_str().is_none() {
            return Err(BashError::WorkdirInaccessible {
                cause: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the path is not UTF-8, and a remote executor sends paths as text",
                ),
                path: spec.workdir,
            });
        }
        Ok(spec)
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

    fn read_output(
        &self,
        id: &BashTaskId,
        since: Option<OutputCursor>,
    ) -> Result<BashTaskRead, BashError> {
        let mirror = self
            .inner
            .mirror(id)
            .ok_or_else(|| BashError::UnknownTask { id: id.clone() })?;
        mirror.read(since)
    }

    fn write_input<'a>(
        &'a self,
        id: &'a BashTaskId,
        input: &'a [u8],
    ) -> BoxFuture<'a, Result<(), BashError>> {
        Box::pin(async move {
            match self.inner.interact("bash_write", id, input).await? {
                Reply::Wrote => Ok(()),
                other => Err(unexpected(&other)),
            }
        })
    }

    fn screen<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<String, BashError>> {
        Box::pin(async move {
            match self.inner.interact("bash_screen", id, &[]).await? {
                Reply::Screen(screen) => Ok(screen),
                other => Err(unexpected(&other)),
            }
        })
    }

    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        Box::pin(self.inner.kill(id))
    }

    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle {
        self.inner.listeners.register(listener)
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.inner.shutdown())
    }
}

impl Drop for RemoteBashExecutor {
    /// Pollers stop. The connection closes (and a command child is killed,
    /// taking its server and that server's tasks with it) once the calls
    /// in flight have returned, within the patience; over HTTP the server
    /// keeps the tasks (see [`RemoteBashExecutor::adopt`]).
    fn drop(&mut self) {
        self.inner.stopping.cancel();
    }
}
