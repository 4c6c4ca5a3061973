use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dsh_sandbox::Restriction;

use dsh_bash::{
    WorkspaceChanges,
    task_channel, BashError, BashExecRequest, BashExecSpec, BashExecutor, BashRunResult, BashTask,
    BashTaskId, BashTaskRead, BoxFuture, ListenerHandle, OutputCursor, OwnerToken, SandboxMode, TaskListener,
    TaskListeners, TaskState, TaskStatus,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{ConfigError, LocalConfig};
use crate::env::child_env;
use crate::host::Host;
use crate::shell_run::ShellRun;
use crate::output::Stream;
use crate::signal::signal_name;
use crate::input::InputSlot;
use crate::spawn::Launch;
use crate::spill::{SpillDir, SpillLimits};
use crate::stop::{Deadlines, Stop, StopCause};
use crate::supervise::{supervise, Capture, Ended, Patience};
use crate::sys::ExitStatus;
use crate::tasks::{Registry, TaskEntry};

/// Runs bash commands as local processes; see the crate docs for the
/// guarantees.
///
/// Cheap to clone: clones share tasks, listeners and the spill directory.
#[derive(Clone)]
pub struct LocalBashExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    /// The process's host: threads, cgroups, adoption, watchdog.
    host: Arc<Host>,
    config: LocalConfig,
    spill: Arc<SpillDir>,
    registry: Mutex<Registry>,
    listeners: TaskListeners,
    next_id: AtomicU64,
    closed: AtomicBool,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// The script of a command that reports its final directory without a
    /// snapshot, made once.
    prologue: std::sync::OnceLock<Option<Arc<std::os::fd::OwnedFd>>>,
    /// The workspace's watch, when changes are tracked; else why not.
    changes: Result<Arc<crate::changes::ChangeWatch>, Option<String>>,
    /// What confines each launch (the sandbox), if anything does.
    hook: Option<Arc<dyn LaunchHook>>,
    /// The host's environment, scrubbed once when the executor was built
    /// and copied into each command's.
    inherited: std::collections::BTreeMap<std::ffi::OsString, std::ffi::OsString>,
}

impl std::fmt::Debug for LocalBashExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBashExecutor")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

pub use dsh_sandbox::Invocation;

use crate::hook::{LaunchHook, Launching, NeverRan, Outcome, Settle, Verdict};

/// Commands up to this size go in the argv; longer ones through a
/// descriptor (one argument may hold at most 128 KiB).
const INLINE_COMMAND_BYTES: usize = 64 * 1024;

/// The longest command accepted: 4 MiB, so that even fully escaped inside
/// a JSON-RPC message it stays under the MCP transport's 16 MiB line limit.
pub const MAX_COMMAND_BYTES: usize = 4 << 20;

fn status_parts(status: ExitStatus) -> (Option<i32>, Option<String>) {
    match status {
        ExitStatus::Exited(code) => (Some(code), None),
        ExitStatus::Signaled(signal) => (None, Some(signal_name(signal))),
    }
}

/// The program an invocation runs, for messages.
/// How many tasks of `owner` that take input are running.
fn interactive_running(registry: &Registry, owner: Option<&OwnerToken>) -> usize {
    registry
        .all()
        .iter()
        .filter(|e| e.input.is_some() && e.owner.as_ref() == owner)
        .filter(|e| !e.publisher.state().is_settled())
        .count()
}

/// Sets `name` in a sorted environment.
fn set_env(env: &mut Vec<(std::ffi::OsString, std::ffi::OsString)>, name: &str, value: &str) {
    match env.binary_search_by(|(k, _)| k.as_os_str().cmp(name.as_ref())) {
        Ok(at) => env[at].1 = value.into(),
        Err(at) => env.insert(at, (name.into(), value.into())),
    }
}

fn program_of(invocation: &Invocation) -> String {
    invocation
        .argv
        .first()
        .map(|p| Path::new(p).display().to_string())
        .unwrap_or_default()
}

fn check_workdir(workdir: &Path) -> Result<(), BashError> {
    match std::fs::metadata(workdir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(BashError::WorkdirNotDirectory {
            path: workdir.to_owned(),
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(BashError::WorkdirMissing {
            path: workdir.to_owned(),
        }),
        Err(cause) => Err(BashError::WorkdirInaccessible {
            path: workdir.to_owned(),
            cause,
        }),
    }
}

/// Sweeps what hosts that died outright (with their watchdog) left for
/// the host `config` describes: their parent cgroups, processes killed
/// first, and their spill directories. Blocking and bounded (a stale
/// cgroup gets a second to empty), once per process;
/// [`LocalBashExecutor::new`] starts it on a thread of its own, and a
/// server calls it too before it takes its first request (a second caller
/// waits for the first).
pub fn sweep_dead_hosts(config: &LocalConfig) {
    match Host::get() {
        Ok(host) => host.sweep_dead(&config.spill_parent()),
        Err(err) => tracing::warn!(%err, "cannot sweep what dead hosts left"),
    }
}

impl LocalBashExecutor {
    /// Builds an executor; fails, naming the field, on an unusable config.
    /// The process's environment is read and scrubbed once, here: every
    /// command starts from that copy (a variable set in the process later
    /// does not reach commands).
    pub fn new(config: LocalConfig) -> Result<Self, ConfigError> {
        Self::build(config, None)
    }

    /// Builds an executor that launches every command through `hook`
    /// (see [`LaunchHook`]).
    pub fn with_hook(config: LocalConfig, hook: Arc<dyn LaunchHook>) -> Result<Self, ConfigError> {
        Self::build(config, Some(hook))
    }

    fn build(config: LocalConfig, hook: Option<Arc<dyn LaunchHook>>) -> Result<Self, ConfigError> {
        config.validate()?;
        // The watchdog, the stop and spawner threads, before the first
        // request (never on the runtime thread that runs it).
        let host = Host::get().map_err(|err| ConfigError::Host {
            why: err.to_string(),
        })?;
        if config.adopt_orphans {
            host.adoption.enable();
        }
        // A host killed outright together with its watchdog leaves its
        // cgroup behind, processes and all, and its spill directory: swept
        // when the next host starts, not at its first command (on a thread
        // of its own: killing a stale tree may take a moment).
        let (swept, spill_parent) = (Arc::clone(&host), config.spill_parent());
        if let Err(err) = std::thread::Builder::new()
            .name("dsh-bash-sweep".into())
            .spawn(move || swept.sweep_dead(&spill_parent))
        {
            tracing::warn!(%err, "cannot sweep what dead hosts left");
        }
        let spill = SpillDir::new(
            config.spill_parent(),
            SpillLimits {
                max_files: config.retain_spill_files,
                max_bytes: config.retain_spill_bytes,
            },
        );
        let changes = match &config.changes {
            None => Err(None),
            Some(tracking) => crate::changes::ChangeWatch::start(tracking)
                .map(Arc::new)
                .map_err(|why| {
                    let why = format!("changes under {} are not tracked: {why}", tracking.root.display());
                    tracing::warn!("{why}");
                    Some(why)
                }),
        };
        let inherited = crate::env::scrubbed(std::env::vars_os(), &config.scrub);
        Ok(LocalBashExecutor {
            inner: Arc::new(Inner {
                host,
                changes,
                config,
                spill: Arc::new(spill),
                registry: Mutex::new(Registry::default()),
                listeners: TaskListeners::default(),
                next_id: AtomicU64::new(0),
                closed: AtomicBool::new(false),
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
                prologue: std::sync::OnceLock::new(),
                hook,
                inherited,
            }),
        })
    }

    /// True if results list what changed in the configured workspace;
    /// `Err` says why changes asked for are not tracked.
    pub fn tracks_changes(&self) -> Result<bool, String> {
        match &self.inner.changes {
            Ok(_) => Ok(true),
            Err(None) => Ok(false),
            Err(Some(why)) => Err(why.clone()),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &LocalConfig {
        &self.inner.config
    }

    /// The writable workspace root its launch hook's confinement keeps;
    /// `None` without a hook.
    pub fn workspace_root(&self) -> Option<&Path> {
        self.inner.hook.as_ref().map(|hook| hook.workspace_root())
    }

    /// The plain invocation of a spec: `<shell> -c -- <command>` (the `--`
    /// keeps a command that starts with `-` or `+` from being read as
    /// options).
    ///
    /// A command too long for one argument (the kernel's limit is 128 KiB)
    /// is handed over in a sealed in-memory file instead, read by a
    /// one-line loader that keeps `bash -c` semantics (`$0`, `exit`, exit
    /// codes, traps, options) and closes the descriptor before the command
    /// runs: `bash -c -- 'eval -- "$(</dev/fd/N)" N<&-'`. One difference
    /// remains, stated: `bash -c` execs its last command, `eval` waits for
    /// it, so a long command whose last command dies of signal n reports
    /// exit code 128+n rather than the signal.
    fn plain_invocation(&self, spec: &BashExecSpec) -> Result<Invocation, BashError> {
        let shell = self.inner.config.shell.clone().into_os_string();
        if spec.command.len() < INLINE_COMMAND_BYTES {
            return Ok(Invocation {
                argv: vec![shell, "-c".into(), "--".into(), spec.command.clone().into()],
                restriction: Restriction::default(),
                environment: Vec::new(),
                held: Vec::new(),
                observers: Vec::new(),
                takes_terminal: false,
            });
        }
        let text =
            crate::sys::sealed_text(spec.command.as_bytes()).map_err(|cause| BashError::Spawn {
                message: format!(
                    "cannot hand over a {}-byte command: {cause}",
                    spec.command.len()
                ),
                cause,
            })?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&text);
        Ok(Invocation {
            argv: vec![
                shell,
                "-c".into(),
                "--".into(),
                format!("eval -- \"$(</dev/fd/{fd})\" {fd}<&-").into(),
            ],
            restriction: Restriction {
                keep_fds: vec![Arc::new(text)],
                enter: None,
                ..Restriction::default()
            },
            environment: Vec::new(),
            held: Vec::new(),
            observers: Vec::new(),
            takes_terminal: false,
        })
    }

    /// What a command must pass before anything is made for it: the
    /// executor open, the call not cancelled.
    fn admit(&self, spec: &BashExecSpec) -> Result<(), BashError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(BashError::ShutDown);
        }
        if spec.cancelled() {
            return Err(BashError::AbortedBeforeSpawn);
        }
        Ok(())
    }

    /// `spec`'s invocation: the plain shell, or what the hook makes of it
    /// (with what settles it).
    async fn launching(
        &self,
        spec: &BashExecSpec,
    ) -> Result<(Invocation, Option<Box<dyn Settle>>), BashError> {
        let plain = self.plain_invocation(spec)?;
        match &self.inner.hook {
            None => Ok((plain, None)),
            Some(hook) => {
                // Later commands are told to read full-output files there.
                let readable = self.inner.spill.current_path().into_iter().collect();
                let Launching { invocation, settle } = hook.confine(spec, plain, readable).await?;
                Ok((invocation, Some(settle)))
            }
        }
    }

    /// Runs `spec` in the foreground: through the hook, if there is one,
    /// whose verdict completes the result.
    async fn run_hooked(&self, spec: BashExecSpec) -> Result<BashRunResult, BashError> {
        self.admit(&spec)?;
        check_workdir(&spec.workdir)?;
        let (invocation, settle) = self.launching(&spec).await?;
        let ran = self.run_invocation(spec, invocation).await;
        let Some(settle) = settle else {
            return ran;
        };
        let outcome = match &ran {
            Ok(result) => Outcome::Ran {
                exit_code: result.exit_code,
                stopped: result.aborted || result.timed_out,
                stderr: result.stderr.text.clone(),
            },
            Err(BashError::Spawn { message, cause }) => Outcome::NeverRan {
                why: NeverRan::of(cause),
                message: message.clone(),
            },
            // Dropped, the settle cleans up all the same.
            Err(_) => return ran,
        };
        match settle.settle(outcome).await {
            Verdict::Ran(facts) => ran.map(|mut result| {
                result.sandbox = facts;
                result
            }),
            Verdict::Unavailable { error, .. } => Err(error),
        }
    }

    /// Runs `spec` in the foreground through `invocation` (the plain shell
    /// or a hook's; a shell snapshot's own).
    pub(crate) async fn run_invocation(
        &self,
        spec: BashExecSpec,
        invocation: Invocation,
    ) -> Result<BashRunResult, BashError> {
        let inner = &self.inner;
        self.admit(&spec)?;
        check_workdir(&spec.workdir)?;
        // Supervised inline (no task hop); the tracker token makes shutdown
        // wait for this run. A caller that drops this future drops the
        // supervisor, whose guard kills the whole tree at once.
        let _in_flight = inner.tracker.token();
        let stop = Stop::default();
        inner.foreground(spec, invocation, &stop).await
    }

    /// Starts `spec` in the background through `invocation`. `settle`
    /// gives the hook's verdict once the task has ended, before anybody
    /// sees it settled.
    fn start_invocation(
        &self,
        spec: BashExecSpec,
        invocation: Invocation,
        settle: Option<Box<dyn Settle>>,
    ) -> Result<BashTask, BashError> {
        let inner = &self.inner;
        self.admit(&spec)?;
        let id = BashTaskId::new(format!(
            "bash-{}",
            inner.next_id.fetch_add(1, Ordering::Relaxed) + 1
        ));
        let (publisher, task) = task_channel(id.clone());
        let cap = usize::try_from(inner.config.max_output_bytes).unwrap_or(usize::MAX);
        let takes_input = spec.terminal.is_some() || spec.interactive;
        let entry = Arc::new(TaskEntry {
            publisher,
            owner: spec.owner.clone(),
            stdout: Stream::with_screen(cap, spec.terminal),
            stderr: Stream::new(cap),
            read_to: Mutex::new(OutputCursor::default()),
            stop: Arc::new(Stop::default()),
            input: takes_input.then(Arc::default),
        });
        {
            // Counted and inserted under one lock: concurrent starts cannot
            // all pass the cap.
            let mut registry = inner.registry();
            if takes_input {
                let running = interactive_running(&registry, spec.owner.as_ref());
                if running >= inner.config.max_interactive_tasks {
                    return Err(BashError::TooManyInteractive { running });
                }
            }
            registry.insert(id, Arc::clone(&entry));
        }
        let runner = Arc::clone(inner);
        inner
            .tracker
            .spawn(async move { runner.background(spec, invocation, entry, settle).await });
        Ok(task)
    }
}

impl Inner {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn entry(&self, id: &BashTaskId) -> Result<Arc<TaskEntry>, BashError> {
        self.registry()
            .get(id)
            .ok_or_else(|| BashError::UnknownTask { id: id.clone() })
    }

    fn launch(&self, spec: &BashExecSpec, invocation: Invocation, shell: &ShellRun) -> Launch {
        let mut argv = invocation.argv.into_iter();
        let program = argv.next().unwrap_or_default();
        let mut env = child_env(&self.inherited, shell.variables(), spec.env.as_ref());
        // Inherited by every descendant that keeps its environment: how the
        // watchdog finds, at host death, what no group or cgroup holds.
        // (Overwritten: a host running inside another one's command has
        // its own.)
        let command = self.host.next_command();
        for (name, value) in [self.host.watchdog.marker(), crate::adopt::command_marker(command)] {
            match env.binary_search_by(|(k, _)| k.as_os_str().cmp(name.as_ref())) {
                Ok(at) => env[at].1 = value.into(),
                Err(at) => env.insert(at, (name.into(), value.into())),
            }
        }
        if spec.terminal.is_some() {
            // A real terminal: full-screen programs draw, prompts prompt.
            set_env(&mut env, "TERM", "xterm-256color");
        }
        for (name, value) in invocation.environment {
            let at = env.binary_search_by(|(k, _)| k.cmp(&name));
            match (at, value) {
                (Ok(i), Some(value)) => env[i].1 = value,
                (Err(i), Some(value)) => env.insert(i, (name, value)),
                (Ok(i), None) => {
                    env.remove(i);
                }
                (Err(_), None) => {}
            }
        }
        Launch {
            exec: crate::sys::Exec {
                program: PathBuf::from(program),
                args: argv.collect(),
                workdir: spec.workdir.clone(),
                workdir_pinned: spec.workdir_pinned,
                env,
                piped_stdin: spec.stdin.is_some() || spec.interactive,
                restriction: invocation.restriction,
                terminal: spec.terminal,
                takes_terminal: invocation.takes_terminal,
            },
            containment: self.config.containment,
            limits: self.config.limits,
            command,
            observers: invocation.observers,
        }
    }

    async fn supervise(
        &self,
        spec: &BashExecSpec,
        mut invocation: Invocation,
        streams: (&Arc<Stream>, &Arc<Stream>),
        timeout: Option<Duration>,
        (stop, input): (&Stop, Option<&Arc<InputSlot>>),
    ) -> std::io::Result<(Ended, Option<dsh_bash::ShellFacts>, Option<WorkspaceChanges>)> {
        let held = std::mem::take(&mut invocation.held);
        let foreground = timeout.is_some();
        let shell = ShellRun::prepare(&self.config, &self.prologue, spec, &mut invocation, foreground)?;
        let launch = self.launch(spec, invocation, &shell);
        let watch = self.changes.as_ref().ok().map(Arc::clone);
        // Off the runtime: the watch's lock may be held while it follows a
        // directory that appeared.
        let mark = match &watch {
            Some(watch) => {
                let watch = Arc::clone(watch);
                self.host.lanes.run(crate::offload::Lane::Io, move || watch.begin())
                    .await
                    .ok()
            }
            None => None,
        };
        let ended = supervise(
            launch,
            Capture {
                stdin: spec.stdin.clone(),
                stdout: Arc::clone(streams.0),
                stderr: Arc::clone(streams.1),
                spill: &self.spill,
                max_spill_bytes: self.config.max_spill_bytes,
                owner: spec.owner.clone(),
                input: input.cloned(),
                host: &self.host,
            },
            Deadlines {
                timeout,
                cancel: spec.cancel.clone(),
                stop,
                shutdown: &self.shutdown,
            },
            Patience {
                grace: self.config.grace,
                shutdown_grace: self.config.shutdown_grace,
                linger: self.config.linger,
                tracker: &self.tracker,
            },
            held,
        )
        .await;
        // The mark is released even when the command could not start.
        let changed = match (watch, mark) {
            (Some(watch), Some(mark)) => {
                self.host.lanes.run(crate::offload::Lane::Io, move || watch.end(mark))
                    .await
                    .ok()
            }
            _ => None,
        };
        Ok((ended?, shell.facts(), changed))
    }

    async fn foreground(
        &self,
        spec: BashExecSpec,
        invocation: Invocation,
        stop: &Stop,
    ) -> Result<BashRunResult, BashError> {
        let cap = usize::try_from(self.config.max_output_bytes).unwrap_or(usize::MAX);
        let (stdout, stderr) = (Stream::new(cap), Stream::new(cap));
        let timeout = spec.timeout;
        let program = program_of(&invocation);
        let (ended, shell, changed) = self
            .supervise(&spec, invocation, (&stdout, &stderr), Some(timeout), (stop, None))
            .await
            .map_err(|cause| BashError::Spawn {
                message: format!(
                    "cannot run {program} in {}: {cause}",
                    spec.workdir.display()
                ),
                cause,
            })?;
        let (exit_code, signal) = status_parts(ended.status);
        Ok(BashRunResult {
            exit_code,
            signal,
            timed_out: ended.cause == Some(StopCause::Timeout),
            aborted: matches!(
                ended.cause,
                Some(StopCause::Cancelled | StopCause::Killed | StopCause::Shutdown)
            ),
            timeout_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
            stdout: stdout.collected(),
            stderr: stderr.collected(),
            leftovers_stopped: u32::try_from(ended.leftovers).unwrap_or(u32::MAX),
            sandbox: None,
            containment: Some(ended.containment),
            limits: ended.limits,
            shell,
            changed,
            claim: None,
        })
    }

    async fn background(
        &self,
        spec: BashExecSpec,
        invocation: Invocation,
        entry: Arc<TaskEntry>,
        settle: Option<Box<dyn Settle>>,
    ) {
        let streams = (&entry.stdout, &entry.stderr);
        let mut never_ran = None;
        let program = program_of(&invocation);
        let ended = match check_workdir(&spec.workdir) {
            Ok(()) => self
                .supervise(&spec, invocation, streams, None, (&entry.stop, entry.input.as_ref()))
                .await
                .map(|(ended, _, changed)| (ended, changed))
                .map_err(|err| (NeverRan::of(&err), format!("cannot run {program}: {err}"))),
            Err(err) => Err((NeverRan::Workdir, err.to_string())),
        };
        let mut state = match ended {
            Ok((ended, changed)) => {
                let (exit_code, signal) = status_parts(ended.status);
                TaskState {
                    status: if ended.cause.is_some() {
                        TaskStatus::Killed
                    } else {
                        TaskStatus::Completed
                    },
                    exit_code,
                    signal,
                    sandbox: None,
                    limits: ended.limits,
                    changed,
                }
            }
            Err((why, reason)) => {
                never_ran = Some((why, reason.clone()));
                if let Some(input) = &entry.input {
                    input.close(&format!("the task never started ({reason})")).await;
                }
                entry
                    .stderr
                    .push(format!("spawn failed: {reason}\n").as_bytes());
                entry.stderr.finish();
                TaskState {
                    status: TaskStatus::FailedToStart,
                    exit_code: None,
                    signal: None,
                    sandbox: None,
                    limits: None,
                    changed: None,
                }
            }
        };
        if let Some(settle) = settle {
            let outcome = match never_ran {
                Some((why, message)) => Outcome::NeverRan { why, message },
                None => Outcome::Ran {
                    exit_code: state.exit_code,
                    stopped: state.status == TaskStatus::Killed,
                    stderr: entry.stderr.collected().text,
                },
            };
            state.sandbox = match settle.settle(outcome).await {
                Verdict::Ran(facts) => facts,
                Verdict::Unavailable { facts, .. } => Some(facts),
            };
        }
        entry.publisher.publish(state);
        let killed_by_shutdown = entry.stop.cause() == Some(StopCause::Shutdown);
        if !killed_by_shutdown && !self.closed.load(Ordering::Acquire) {
            self.listeners.notify(&entry.publisher.snapshot());
        }
        let evicted = self
            .registry()
            .settled(entry.publisher.id(), self.config.retain_finished_tasks);
        let paths: Vec<PathBuf> = evicted.iter().flat_map(|e| e.spill_paths()).collect();
        if !paths.is_empty() {
            let spill = Arc::clone(&self.spill);
            let _ = self.host.lanes.run(crate::offload::Lane::Io, move || spill.discard(&paths)).await;
        }
    }
}

impl BashExecutor for LocalBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.inner.hook.as_ref().map(|hook| hook.sandbox_mode())
    }

    fn network_policy(&self, mode: SandboxMode) -> Option<dsh_bash::NetworkPolicy> {
        self.inner.hook.as_ref().map(|hook| hook.network(None, mode, false))
    }

    fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, BashError> {
        let config = &self.inner.config;
        if request.command.len() > MAX_COMMAND_BYTES {
            return Err(BashError::CommandTooLong {
                bytes: request.command.len(),
                limit: MAX_COMMAND_BYTES,
            });
        }
        let base = match &config.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir().map_err(|_| BashError::WorkdirMissing {
                path: PathBuf::from("."),
            })?,
        };
        let decided = self.inner.hook.as_ref().map(|hook| hook.decide(&request));
        let mut spec = request.into_spec(&dsh_bash::Defaults::unconfined(
            config.default_timeout,
            config.max_timeout,
            base,
        ))?;
        if let Some((mode, network)) = decided {
            spec.sandbox_mode = Some(mode);
            spec.network = Some(network);
        }
        Ok(spec)
    }

    fn run(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>> {
        Box::pin(self.run_hooked(spec))
    }

    fn start(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>> {
        Box::pin(async move {
            self.admit(&spec)?;
            let (invocation, settle) = self.launching(&spec).await?;
            self.start_invocation(spec, invocation, settle)
        })
    }

    fn get(&self, id: &BashTaskId) -> Option<BashTask> {
        self.inner
            .registry()
            .get(id)
            .map(|e| e.publisher.snapshot())
    }

    fn owner_of(&self, id: &BashTaskId) -> Option<OwnerToken> {
        self.inner.registry().get(id).and_then(|e| e.owner.clone())
    }

    fn list(&self) -> Vec<BashTask> {
        self.inner
            .registry()
            .all()
            .iter()
            .map(|e| e.publisher.snapshot())
            .collect()
    }

    fn read_output(
        &self,
        id: &BashTaskId,
        since: Option<OutputCursor>,
    ) -> Result<BashTaskRead, BashError> {
        let entry = self.inner.entry(id)?;
        // Snapshot first: a settled snapshot guarantees all output is read.
        let task = entry.publisher.snapshot();
        let mut last = entry.read_to.lock().unwrap_or_else(PoisonError::into_inner);
        let asked = since.unwrap_or(*last);
        let end = OutputCursor {
            stdout: entry.stdout.end(),
            stderr: entry.stderr.end(),
        };
        if !asked.within(end) {
            return Err(BashError::PositionAhead {
                id: id.clone(),
                asked,
                end,
            });
        }
        let stdout = entry.stdout.read_from(asked.stdout);
        let stderr = entry.stderr.read_from(asked.stderr);
        let to = OutputCursor {
            stdout: stdout.next,
            stderr: stderr.next,
        };
        *last = to;
        Ok(BashTaskRead {
            task,
            delta: dsh_bash::join_streams(&stdout.text, &stderr.text),
            lossy: stdout.lossy || stderr.lossy,
            asked,
            from: OutputCursor {
                stdout: stdout.from,
                stderr: stderr.from,
            },
            to,
            stdout: stdout.text,
            stderr: stderr.text,
            stdout_spill_path: stdout.spill_path,
            stderr_spill_path: stderr.spill_path,
        })
    }

    fn write_input<'a>(
        &'a self,
        id: &'a BashTaskId,
        input: &'a [u8],
    ) -> BoxFuture<'a, Result<(), BashError>> {
        Box::pin(async move {
            let entry = self.inner.entry(id)?;
            let Some(slot) = &entry.input else {
                return Err(BashError::NotInteractive { id: id.clone() });
            };
            slot.write(input)
                .await
                .map_err(|why| BashError::InputClosed { id: id.clone(), why })
        })
    }

    fn screen<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<String, BashError>> {
        let screen = self.inner.entry(id).and_then(|entry| {
            entry
                .stdout
                .screen()
                .ok_or_else(|| BashError::NotInteractive { id: id.clone() })
        });
        Box::pin(async move { screen })
    }

    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        Box::pin(async move {
            let entry = self.inner.entry(id)?;
            if entry.publisher.state().is_settled() {
                return Ok(false);
            }
            let first = entry.stop.request(StopCause::Killed);
            let settled = entry.publisher.snapshot().settled().await;
            Ok(first && settled.status == TaskStatus::Killed)
        })
    }

    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle {
        self.inner.listeners.register(listener)
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let inner = &self.inner;
            inner.closed.store(true, Ordering::Release);
            inner.listeners.close();
            inner.shutdown.cancel();
            inner.tracker.close();
            inner.tracker.wait().await;
            inner.registry().clear();
            if inner.config.discard_spill_on_shutdown {
                let spill = Arc::clone(&inner.spill);
                let _ = self.inner.host.lanes.run(crate::offload::Lane::Io, move || spill.remove()).await;
            }
            if let Some(hook) = &inner.hook {
                hook.shutdown().await;
            }
        })
    }
}
