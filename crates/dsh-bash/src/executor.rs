use std::sync::Arc;

pub use dsh_sandbox::BoxFuture;

use crate::{
    BashError, BashExecRequest, BashExecSpec, BashRunResult, BashTask, BashTaskId, BashTaskRead,
    NetworkPolicy, OutputCursor, OwnerToken, SandboxMode,
};

/// Called exactly once when a background task settles (completed or killed).
///
/// A listener that panics is contained: the panic is logged and neither the
/// task nor other listeners are affected.
pub type TaskListener = Arc<dyn Fn(&BashTask) + Send + Sync>;

/// Returned by [`BashExecutor::on_task_done`]; unregisters the listener.
pub struct ListenerHandle {
    unregister: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl ListenerHandle {
    /// Wraps the executor's way of unregistering one listener.
    pub fn new(unregister: impl FnOnce() + Send + Sync + 'static) -> Self {
        ListenerHandle {
            unregister: Some(Box::new(unregister)),
        }
    }

    /// Unregisters the listener; it is not called for tasks settling later.
    pub fn unregister(mut self) {
        if let Some(unregister) = self.unregister.take() {
            unregister();
        }
    }
}

impl std::fmt::Debug for ListenerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerHandle").finish_non_exhaustive()
    }
}

/// The completion listeners of one executor: registered, told once per
/// settled task, closed for good at shutdown. A listener that panics is
/// logged (`tracing`) and the others still run.
#[derive(Clone, Default)]
pub struct TaskListeners {
    registry: Arc<std::sync::Mutex<Registry>>,
}

#[derive(Default)]
struct Registry {
    next: u64,
    listeners: Vec<(u64, TaskListener)>,
    closed: bool,
}

impl std::fmt::Debug for TaskListeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskListeners").finish_non_exhaustive()
    }
}

impl TaskListeners {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds `listener`; the handle removes it (what
    /// [`BashExecutor::on_task_done`] returns).
    pub fn register(&self, listener: TaskListener) -> ListenerHandle {
        let key = {
            let mut registry = self.lock();
            registry.next += 1;
            let key = registry.next;
            registry.listeners.push((key, listener));
            key
        };
        let registry = Arc::downgrade(&self.registry);
        ListenerHandle::new(move || {
            if let Some(registry) = registry.upgrade() {
                registry
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .listeners
                    .retain(|(k, _)| *k != key);
            }
        })
    }

    /// Calls every listener once for `task` (none once closed).
    pub fn notify(&self, task: &BashTask) {
        let current: Vec<TaskListener> = {
            let registry = self.lock();
            if registry.closed {
                return;
            }
            registry
                .listeners
                .iter()
                .map(|(_, l)| Arc::clone(l))
                .collect()
        };
        for listener in current {
            let call = std::panic::AssertUnwindSafe(|| listener(task));
            if std::panic::catch_unwind(call).is_err() {
                tracing::error!(task = %task.id, "a task completion listener panicked");
            }
        }
    }

    /// Drops every listener and refuses to notify from now on (shutdown).
    pub fn close(&self) {
        let mut registry = self.lock();
        registry.closed = true;
        registry.listeners.clear();
    }
}

/// Runs bash commands: the seam every backend (local, sandboxed, remote…)
/// implements and every consumer talks to.
pub trait BashExecutor: Send + Sync {
    /// The default mode of a confining executor; `None` for one that never
    /// confines.
    fn sandbox_mode(&self) -> Option<SandboxMode>;

    /// The network policy a call under `mode` gets when it names none;
    /// `None` for an executor that never confines (the default).
    fn network_policy(&self, mode: SandboxMode) -> Option<NetworkPolicy> {
        let _ = mode;
        None
    }

    /// Applies defaults and caps: the request becomes a spec with every knob
    /// explicit. Fails on an invalid timeout.
    fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, BashError>;

    /// Runs a command in the foreground until it exits, times out or is
    /// cancelled. Non-zero exits, timeouts and aborts are results; only
    /// "could not run" is an error.
    ///
    /// Grandchildren: when the shell exits, whatever it left running in
    /// its containment (a `server &`, a `setsid` daemon) is stopped and
    /// counted in `leftovers_stopped` — a process meant to outlive the
    /// command belongs in [`Self::start`]. Held pipes: a leftover that keeps
    /// stdout or stderr open delays the result by at most the executor's
    /// linger, never indefinitely. A timeout or cancellation stops the
    /// whole tree (SIGTERM, then SIGKILL after the grace). Dropping the
    /// future kills the command.
    fn run(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>>;

    /// Starts a background task and returns at once. No timeout applies;
    /// cancellation of the spec's token still kills it. A spawn failure
    /// yields a task that settles `killed` with the reason in its stderr.
    fn start(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>>;

    /// A snapshot of one task, `None` for an unknown id.
    fn get(&self, id: &BashTaskId) -> Option<BashTask>;

    /// The owner stored at start, verbatim; `None` for unknown or ownerless
    /// tasks.
    fn owner_of(&self, id: &BashTaskId) -> Option<OwnerToken>;

    /// Snapshots of every retained task, oldest first.
    fn list(&self) -> Vec<BashTask>;

    /// The output produced from `since` on, or, without it, since the
    /// previous read of this task (its [`BashTaskRead::to`]); either way the
    /// next read without `since` starts where this one ends. A position
    /// that slid out of memory reads from the first byte still held
    /// (`lossy`); one past what the task produced is
    /// [`BashError::PositionAhead`].
    fn read_output(
        &self,
        id: &BashTaskId,
        since: Option<OutputCursor>,
    ) -> Result<BashTaskRead, BashError>;

    /// Writes `input` to a running task started with a terminal (its
    /// keyboard: `\r` is Enter, `\x03` is Ctrl-C) or with an open stdin;
    /// [`BashError::NotInteractive`] for any other task. Returns once the
    /// bytes are written (not read).
    fn write_input<'a>(
        &'a self,
        id: &'a BashTaskId,
        input: &'a [u8],
    ) -> BoxFuture<'a, Result<(), BashError>> {
        let _ = input;
        Box::pin(async move {
            match self.get(id) {
                Some(_) => Err(BashError::NotInteractive { id: id.clone() }),
                None => Err(BashError::UnknownTask { id: id.clone() }),
            }
        })
    }

    /// The current contents of a terminal task's screen, as text (rows
    /// without trailing blanks); [`BashError::NotInteractive`] for a task
    /// without a terminal.
    fn screen<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<String, BashError>> {
        Box::pin(async move {
            match self.get(id) {
                Some(_) => Err(BashError::NotInteractive { id: id.clone() }),
                None => Err(BashError::UnknownTask { id: id.clone() }),
            }
        })
    }

    /// Kills a task and waits until it has settled. `Ok(true)` if this call
    /// killed it, `Ok(false)` if it had already finished (or another kill is
    /// already under way).
    ///
    /// The whole tree goes, grandchildren included (also those that left
    /// the process group): SIGTERM, then SIGKILL after the grace, so a
    /// process that ignores SIGTERM or forks in its handler delays the
    /// settle by at most the grace. Output already produced stays readable.
    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>>;

    /// Registers a listener called exactly once per settled task.
    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle;

    /// Kills every running task and foreground run, waits until all have
    /// ended, and refuses new commands from then on. No listener is called
    /// for what shutdown kills or for anything later.
    ///
    /// Every tree goes whole, with the executor's shutdown grace (shorter
    /// than a kill's) between SIGTERM and SIGKILL; pipes still held by a
    /// dying process do not delay it past that.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}
