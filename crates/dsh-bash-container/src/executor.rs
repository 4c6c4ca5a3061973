//! The executor: a session's commands in its own container, made when the
//! first command needs it, served inside by this same binary over the
//! engine's exec stdio (a [`RemoteBashExecutor`]), removed at shutdown.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashExecutor, BashLimits, BashRunResult,
    BashSandboxInfo, BashTask, BashTaskId, BashTaskRead, BoxFuture, ContainerFacts, Defaults,
    LimitMechanism, ListenerHandle, NetworkFacts, NetworkPolicy, OutputCursor, OwnerToken,
    SandboxBackend, SandboxEnforcement, SandboxMode, TaskListener, TaskListeners,
};
use dsh_bash_remote::{RemoteBashExecutor, RemoteConfig};
use dsh_sandbox::HostRules;

use crate::container::{self, Container};
use crate::engine::{ContainerSpec, Engine};
use crate::error::ContainerError;

/// What a session's container is made from and how its server runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ContainerConfig {
    /// The engine.
    pub engine: Engine,
    /// The image.
    pub image: String,
    /// The workspace (absolute), mounted read-write at the same path.
    pub workspace: PathBuf,
    /// The commands' default directory, inside the workspace (default:
    /// the workspace).
    pub workdir: Option<PathBuf>,
    /// This binary on the host, mounted read-only into the container.
    pub binary: PathBuf,
    /// The network: `Off` (none), `Allow` (only the hosts of
    /// [`ContainerConfig::hosts`], through the server's proxy, reached
    /// from the container's own loopback) or `On` (the engine's default
    /// network).
    pub network: NetworkPolicy,
    /// Under `Allow`: the hosts commands may reach.
    pub hosts: Arc<HostRules>,
    /// The container's memory, swap included, in bytes.
    pub memory_bytes: Option<u64>,
    /// Processes (threads) at once in the container.
    pub processes: Option<u64>,
    /// CPU per second of wall time, in thousandths of a CPU.
    pub cpu_millicores: Option<u32>,
    /// A foreground command's timeout when it names none.
    pub default_timeout: Duration,
    /// The cap on any foreground timeout.
    pub max_timeout: Duration,
    /// The bound on each engine step (the image looked up, the container
    /// made, removed).
    pub step_bound: Duration,
}

impl ContainerConfig {
    /// A configuration with the defaults: no network, no limits, the
    /// local executor's timeouts, two minutes per engine step.
    pub fn new(engine: Engine, image: String, workspace: PathBuf, binary: PathBuf) -> Self {
        ContainerConfig {
            engine,
            image,
            workspace,
            workdir: None,
            binary,
            network: NetworkPolicy::Off,
            hosts: Arc::default(),
            memory_bytes: None,
            processes: None,
            cpu_millicores: None,
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            step_bound: Duration::from_secs(120),
        }
    }

    /// Checks what cannot work before anything is made.
    pub fn validate(&self) -> Result<(), ContainerError> {
        if !self.workspace.is_absolute() || self.workspace.to_str().is_none() {
            return Err(ContainerError::Config(format!(
                "the workspace {} must be an absolute UTF-8 path",
                self.workspace.display()
            )));
        }
        crate::engine::check_image(&self.image)?;
        if let Some(workdir) = &self.workdir {
            if !workdir.starts_with(&self.workspace) {
                return Err(ContainerError::Config(format!(
                    "the workdir {} is outside the workspace {}, the only directory of the host's the container sees: give a workdir inside it, or --workspace",
                    workdir.display(),
                    self.workspace.display()
                )));
            }
        }
        if self.workspace == std::path::Path::new("/")
            || self.workspace == std::path::Path::new("/tmp")
        {
            return Err(ContainerError::Config(format!(
                "the workspace {} is the container's own {}: give a project directory",
                self.workspace.display(),
                if self.workspace == std::path::Path::new("/") {
                    "root"
                } else {
                    "/tmp"
                }
            )));
        }
        if self.binary.starts_with(&self.workspace) {
            return Err(ContainerError::Config(format!(
                "this binary ({}) lies inside the workspace {}, where a command could replace it before the host runs it again: install dsh-bash outside the workspace",
                self.binary.display(),
                self.workspace.display()
            )));
        }
        for (what, path) in [("workspace", &self.workspace), ("binary", &self.binary)] {
            let text = path.to_string_lossy();
            if text.contains([':', ',']) || text.chars().any(char::is_control) {
                return Err(ContainerError::Config(format!(
                    "the {what} {} cannot be mounted by the engine: its path holds ':', ',' or a control character; use a path without them",
                    path.display()
                )));
            }
        }
        Ok(())
    }
}

/// The container, once made, and the server inside it.
struct Started {
    container: Container,
    remote: RemoteBashExecutor,
    facts: ContainerFacts,
    /// The protected paths mounted read-only, and whether every protected
    /// path could be (a missing one, or one behind a symlink, cannot).
    protected: (Vec<PathBuf>, bool),
    _forwarding: ListenerHandle,
    /// Held while the session lives: the container ends when it is not.
    _lifeline: crate::Lifeline,
    /// Under `allow`: the proxy's door the container's forwarder uses.
    door: Option<SessionDoor>,
}

impl Started {
    /// The door's log now: the refusals it keeps, and those it only
    /// counts (none without a door).
    fn refusals(&self) -> (usize, u64) {
        use dsh_sandbox::NetworkLog as _;
        self.door.as_ref().map_or((0, 0), |door| {
            let log = door.door.log();
            (log.denied().len(), log.more())
        })
    }

    /// The network facts of a command that began when the log stood at
    /// `since`: what was refused since (a task running beside it
    /// included). Nothing is askable: a container's hosts are the
    /// session's, none is added for one call.
    fn network_facts(&self, mode: NetworkPolicy, since: (usize, u64)) -> NetworkFacts {
        use dsh_sandbox::NetworkLog as _;
        let (denied, denied_more) = self.door.as_ref().map_or((Vec::new(), 0), |door| {
            let log = door.door.log();
            let denied = log.denied().into_iter().skip(since.0).collect();
            (denied, log.more().saturating_sub(since.1))
        });
        NetworkFacts {
            mode,
            denied,
            denied_more,
            askable: Vec::new(),
        }
    }
}

/// The session's door into the proxy: a Unix socket in a private
/// directory of the temp dir, mounted into the container; its refusals
/// are the session's (a command's result names those made while it ran).
struct SessionDoor {
    door: dsh_net_proxy::Door,
    /// The socket's directory, removed with it.
    _dir: tempfile::TempDir,
}

impl SessionDoor {
    /// Opens a door for `hosts` in a private directory under `dir` (the
    /// temp dir, [`volume_temp_dir`]).
    fn open(dir: &std::path::Path, hosts: Arc<HostRules>) -> Result<SessionDoor, ContainerError> {
        let failed = |err: std::io::Error| {
            ContainerError::Config(format!(
                "cannot open the proxy's door for the container in {}: {err}",
                dir.display()
            ))
        };
        // 0700 whatever the umask: whoever can open the socket can use
        // the door.
        let private = tempfile::Builder::new()
            .prefix(crate::leftovers::DOOR_PREFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(dir)
            .map_err(failed)?;
        let path = private.path().join(crate::leftovers::DOOR_NAME);
        let door = dsh_net_proxy::Proxy::default()
            .door(hosts, dsh_net_proxy::DoorAt::Unix(path))
            .map_err(failed)?;
        Ok(SessionDoor {
            door,
            _dir: private,
        })
    }

    fn path(&self) -> Option<&std::path::Path> {
        match self.door.address() {
            dsh_net_proxy::DoorAddress::Unix(path) => Some(path),
            _ => None,
        }
    }
}

/// The workspace's protected paths (the local sandbox's default set) that
/// a read-only mount can keep: those that exist, not behind a symlink,
/// with a path a volume flag can hold; and whether that is all of them.
fn protected_mounts(workspace: &std::path::Path) -> (Vec<PathBuf>, bool) {
    let Ok(opened) = dsh_sandbox::Workspace::open(workspace) else {
        return (Vec::new(), false);
    };
    let resolution = dsh_protect::resolve(&dsh_sandbox::ProtectedPaths::default(), &opened);
    let mut complete = resolution.complete;
    let mut mounts = Vec::new();
    for protected in resolution.paths {
        let mountable = !protected.path.to_string_lossy().contains([':', ',']);
        match protected.state {
            dsh_sandbox::ProtectedState::Present if mountable => mounts.push(protected.path),
            _ => complete = false,
        }
    }
    (mounts, complete)
}

/// Runs a session's commands in a container of its own (see the crate
/// docs).
pub struct ContainerBashExecutor {
    config: ContainerConfig,
    /// Made by a task of its own: a caller cancelled meanwhile stops
    /// waiting, never the making (nothing is left half made).
    started: Arc<tokio::sync::OnceCell<Started>>,
    listeners: Arc<TaskListeners>,
    shut: std::sync::atomic::AtomicBool,
    /// Whether the engine ignores the container's limits here.
    limits_ignored: bool,
}

impl ContainerBashExecutor {
    /// An executor for `config`; nothing is made until the first command.
    pub fn new(config: ContainerConfig) -> Result<Self, ContainerError> {
        config.validate()?;
        Ok(ContainerBashExecutor {
            limits_ignored: limits_ignored(config.engine.kind),
            config,
            started: Arc::new(tokio::sync::OnceCell::new()),
            listeners: Arc::new(TaskListeners::default()),
            shut: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The container's facts, once it has been made.
    pub fn container(&self) -> Option<&ContainerFacts> {
        self.started.get().map(|started| &started.facts)
    }

    /// The server inside, for a task it started: none before the
    /// container is made, so no task is known yet.
    fn remote_for(&self, id: &BashTaskId) -> Result<&RemoteBashExecutor, BashError> {
        self.started
            .get()
            .map(|started| &started.remote)
            .ok_or_else(|| BashError::UnknownTask { id: id.clone() })
    }

    /// The container and its server, made by the first caller.
    async fn started(&self) -> Result<&Started, BashError> {
        if self.shut.load(std::sync::atomic::Ordering::Acquire) {
            return Err(BashError::ShutDown);
        }
        if let Some(started) = self.started.get() {
            return Ok(started);
        }
        let cell = Arc::clone(&self.started);
        let config = self.config.clone();
        let listeners = Arc::clone(&self.listeners);
        let ignored = self.limits_ignored;
        let made = tokio::spawn(async move {
            cell.get_or_try_init(|| start(config, ignored, listeners))
                .await
                .map(drop)
                .map_err(|err| err.to_string())
        })
        .await;
        let unreachable = |message: String| BashError::Unreachable { message };
        match made {
            Ok(Ok(())) => self
                .started
                .get()
                .ok_or_else(|| unreachable("the session's container was not kept".into())),
            Ok(Err(message)) => Err(unreachable(message)),
            Err(join) => Err(unreachable(format!(
                "making the session's container failed: {join}"
            ))),
        }
    }

    /// What a command here ran under, as the container gives it: the
    /// protected paths that exist are read-only; one that does not yet (or
    /// sits behind a symlink) is not, and a credential file inside the
    /// workspace is not hidden (the container sees no home of the host's).
    /// Under `allow`, `refusals` (the door's log as the command began:
    /// how many it had kept, and how many more it had only counted) tell
    /// the refusals made while it ran from the session's earlier ones.
    fn facts(&self, started: &Started, refusals: (usize, u64)) -> BashSandboxInfo {
        let config = &self.config;
        let (protected, complete) = &started.protected;
        let mut gaps = vec![dsh_bash::SandboxGap::HiddenPaths];
        if !complete {
            gaps.insert(0, dsh_bash::SandboxGap::ProtectedPaths);
        }
        BashSandboxInfo {
            backend: Some(SandboxBackend::Container),
            enforcement: Some(SandboxEnforcement::Partial),
            gaps,
            protected: protected.clone(),
            workspace: Some(config.workspace.clone()),
            network: Some(started.network_facts(config.network, refusals)),
            container: Some(started.facts.clone()),
            ..BashSandboxInfo::bare(SandboxMode::WorkspaceWrite)
        }
    }

    /// The limits as the container holds them: none of them where the
    /// engine ignores them ([`limits_ignored`], judged once), said as
    /// missing.
    fn limits(&self) -> Option<BashLimits> {
        let config = &self.config;
        let configured = [
            ("processes", config.processes.is_some()),
            ("memory", config.memory_bytes.is_some()),
            ("cpu", config.cpu_millicores.is_some()),
        ];
        if configured.iter().all(|(_, set)| !set) {
            return None;
        }
        let ignored = self.limits_ignored;
        let held = |limit: Option<u64>| limit.filter(|_| !ignored);
        Some(BashLimits {
            mechanism: LimitMechanism::Container,
            processes: held(config.processes),
            memory_bytes: held(config.memory_bytes),
            cpu_millicores: config.cpu_millicores.filter(|_| !ignored),
            partial: ignored,
            missing: if ignored {
                configured
                    .iter()
                    .filter(|(_, set)| *set)
                    .map(|(name, _)| (*name).to_owned())
                    .collect()
            } else {
                Vec::new()
            },
            oom_killed: false,
            process_limit_hit: false,
        })
    }

    /// The spec the server inside runs: unconfined there, the container
    /// being the sandbox.
    fn inner(spec: BashExecSpec) -> Result<BashExecSpec, BashError> {
        if !spec.allow_hosts.is_empty() {
            return Err(BashError::Unsupported {
                what: "allowHosts",
                why: "a container's hosts are the session's (--network allow with --allow-host when the server starts); no host can be added for one call".into(),
            });
        }
        Ok(BashExecSpec {
            sandbox_mode: None,
            network: None,
            ..spec
        })
    }

    async fn run_inside(&self, spec: BashExecSpec) -> Result<BashRunResult, BashError> {
        let inner = Self::inner(spec)?;
        if inner.cancelled() {
            return Err(BashError::AbortedBeforeSpawn);
        }
        // Cancelled while the container is being made: abandoned, as a
        // run cancelled at the server is (what was begun is removed).
        let started = match inner.cancel.clone() {
            Some(cancel) => tokio::select! {
                started = self.started() => started?,
                () = cancel.cancelled() => return Ok(BashRunResult::abandoned(inner.timeout)),
            },
            None => self.started().await?,
        };
        let refusals = started.refusals();
        let mut result = started.remote.run(inner).await?;
        result.sandbox = Some(self.facts(started, refusals));
        result.limits = self.limits();
        Ok(result)
    }
}

/// Makes the container `config` describes and starts the server inside;
/// what each task ends with is told to `listeners`.
async fn start(
    config: ContainerConfig,
    limits_ignored: bool,
    listeners: Arc<TaskListeners>,
) -> Result<Started, ContainerError> {
    let config = &config;
    let temp = volume_temp_dir()?;
    let workspace = config.workspace.clone();
    let lifeline_dir = temp.clone();
    let (protected, lifeline) = tokio::task::spawn_blocking(move || {
        (protected_mounts(&workspace), lifeline_in(&lifeline_dir))
    })
    .await
    .map_err(|err| ContainerError::Config(format!("preparing the container: {err}")))?;
    let lifeline = lifeline?;
    let door = match config.network {
        NetworkPolicy::Allow => Some(SessionDoor::open(&temp, Arc::clone(&config.hosts))?),
        _ => None,
    };
    let mut spec = spec(config, limits_ignored);
    spec.read_only = protected.0.clone();
    spec.lifeline = Some(lifeline.path().to_owned());
    if let Some(door) = &door {
        spec.door = door.path().map(std::path::Path::to_owned);
        spec.env = dsh_net_proxy::environment(dsh_net_proxy::forward::PORT)
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
    }
    let made = Container::create(&config.engine, &spec, config.step_bound).await?;
    let server = made.server_command(&config.workspace, &server_args(config));
    let remote = RemoteBashExecutor::over_stdio_with(server, RemoteConfig::default())
        .await
        .map_err(|err| ContainerError::Inside {
            name: made.name().to_owned(),
            cause: err.to_string(),
        })?;
    let forwarding = remote.on_task_done(Arc::new(move |task: &BashTask| listeners.notify(task)));
    let facts = ContainerFacts {
        engine: config.engine.kind.name().to_owned(),
        image: made.image().to_owned(),
        digest: made.digest().to_owned(),
        name: made.name().to_owned(),
    };
    tracing::info!(container = %facts.name, image = %facts.image, digest = %facts.digest, "the session's container is up");
    Ok(Started {
        container: made,
        remote,
        facts,
        protected,
        _forwarding: forwarding,
        _lifeline: lifeline,
        door,
    })
}

/// Whether the engine ignores the container's resource limits: rootless
/// podman where the cgroups are v1 (or hybrid), which only warns
/// "Resource limits are not supported and ignored on cgroups V1 rootless
/// systems" and runs the container unlimited. (On cgroup v2 a rootless
/// podman without the controllers delegated refuses the container
/// instead; a rootful engine applies them.)
fn limits_ignored(kind: crate::EngineKind) -> bool {
    kind == crate::EngineKind::Podman
        && !rustix::process::geteuid().is_root()
        && !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The container's command line for `config`; no limits where the
/// engine ignores them.
fn spec(config: &ContainerConfig, ignored: bool) -> ContainerSpec {
    let hard = |resource| {
        rustix::process::getrlimit(resource)
            .maximum
            .filter(|&max| max != u64::MAX)
    };
    let euid = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    ContainerSpec {
        name: format!("dsh-bash-{:016x}", random()),
        image: config.image.clone(),
        workspace: config.workspace.clone(),
        binary: config.binary.clone(),
        read_only: Vec::new(),
        lifeline: None,
        door: None,
        env: Vec::new(),
        network: config.network == NetworkPolicy::On,
        // Not passed where the engine would ignore them (and warn).
        memory_bytes: config.memory_bytes.filter(|_| !ignored),
        processes: config.processes.filter(|_| !ignored),
        cpu_millicores: config.cpu_millicores.filter(|_| !ignored),
        open_files: hard(rustix::process::Resource::Nofile)
            .unwrap_or(1 << 16)
            .min(1 << 20),
        // No more than the kernel's pid_max: a higher limit means
        // nothing, and runtimes refuse to set one.
        user_processes: hard(rustix::process::Resource::Nproc)
            .map(|nproc| pid_max().map_or(nproc, |max| nproc.min(max))),
        // docker's containers run as the host's root unless told;
        // podman's root is the server's own user when rootless.
        user: (config.engine.kind == crate::EngineKind::Docker).then(|| format!("{euid}:{egid}")),
        owner: container::owner(),
        kind: config.engine.kind,
    }
}

/// The server inside: unconfined (the container is the boundary), no
/// snapshot of a shell the image may not have, this executor's
/// timeouts.
fn server_args(config: &ContainerConfig) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["mcp".into(), "--workdir".into()];
    args.push(config.workspace.clone().into_os_string());
    args.extend(["--shell-snapshot".into(), "off".into()]);
    args.push("--timeout".into());
    args.push(config.default_timeout.as_millis().to_string().into());
    args.push("--max-timeout".into());
    args.push(config.max_timeout.as_millis().to_string().into());
    args
}

/// The temp dir (an absolute one, else /tmp) where what is mounted into
/// the container is made: refused when a volume flag cannot hold its path
/// (the names made in it are letters and digits).
fn volume_temp_dir() -> Result<PathBuf, ContainerError> {
    let dir = std::env::temp_dir();
    let dir = if dir.is_absolute() {
        dir
    } else {
        PathBuf::from("/tmp")
    };
    if dir.to_string_lossy().contains([':', ',']) {
        return Err(ContainerError::Config(format!(
            "the temp dir {} holds ':' or ',', which a volume flag cannot: set TMPDIR to a path without them",
            dir.display()
        )));
    }
    Ok(dir)
}

/// The session's lifeline, held, in `dir` ([`volume_temp_dir`]).
fn lifeline_in(dir: &std::path::Path) -> Result<crate::Lifeline, ContainerError> {
    crate::Lifeline::hold(dir).map_err(|err| {
        ContainerError::Config(format!(
            "cannot make the session's lifeline in {}: {err}",
            dir.display()
        ))
    })
}

/// The kernel's `pid_max`.
fn pid_max() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// 64 random bits (from the standard library's per-process hash keys).
fn random() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

impl BashExecutor for ContainerBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        Some(SandboxMode::WorkspaceWrite)
    }

    fn network_policy(&self, mode: SandboxMode) -> Option<NetworkPolicy> {
        (mode == SandboxMode::WorkspaceWrite).then_some(self.config.network)
    }

    fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, BashError> {
        let config = &self.config;
        let defaults = Defaults {
            sandbox_mode: Some(SandboxMode::WorkspaceWrite),
            networks: vec![(SandboxMode::WorkspaceWrite, config.network)],
            ..Defaults::unconfined(
                config.default_timeout,
                config.max_timeout,
                config
                    .workdir
                    .clone()
                    .unwrap_or_else(|| config.workspace.clone()),
            )
        };
        let spec = request.into_spec(&defaults)?;
        if spec.sandbox_mode != Some(SandboxMode::WorkspaceWrite) {
            return Err(BashError::Unsupported {
                what: "another sandbox mode",
                why: format!(
                    "{} was asked, and commands run in the session's container, whose mode is workspace-write",
                    spec.sandbox_mode.map_or("none".to_owned(), |m| m.to_string())
                ),
            });
        }
        if spec
            .network
            .is_some_and(|network| network != config.network)
        {
            return Err(BashError::Unsupported {
                what: "another network policy",
                why: format!(
                    "the session's container has the network {}; it cannot change for one call",
                    config.network
                ),
            });
        }
        if spec.workdir.to_str().is_none() {
            return Err(BashError::Unsupported {
                what: "a workdir that is not UTF-8",
                why: format!(
                    "{} cannot be sent to the server inside, which takes paths as text",
                    spec.workdir.display()
                ),
            });
        }
        Ok(spec)
    }

    fn run(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>> {
        Box::pin(self.run_inside(spec))
    }

    fn start(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>> {
        Box::pin(async move {
            let inner = Self::inner(spec)?;
            self.started().await?.remote.start(inner).await
        })
    }

    fn get(&self, id: &BashTaskId) -> Option<BashTask> {
        self.started.get()?.remote.get(id)
    }

    fn owner_of(&self, id: &BashTaskId) -> Option<OwnerToken> {
        self.started.get()?.remote.owner_of(id)
    }

    fn list(&self) -> Vec<BashTask> {
        self.started
            .get()
            .map(|s| s.remote.list())
            .unwrap_or_default()
    }

    fn read_output(
        &self,
        id: &BashTaskId,
        since: Option<OutputCursor>,
    ) -> Result<BashTaskRead, BashError> {
        self.remote_for(id)?.read_output(id, since)
    }

    fn write_input<'a>(
        &'a self,
        id: &'a BashTaskId,
        input: &'a [u8],
    ) -> BoxFuture<'a, Result<(), BashError>> {
        Box::pin(async move { self.remote_for(id)?.write_input(id, input).await })
    }

    fn screen<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<String, BashError>> {
        Box::pin(async move { self.remote_for(id)?.screen(id).await })
    }

    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        Box::pin(async move { self.remote_for(id)?.kill(id).await })
    }

    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle {
        self.listeners.register(listener)
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.shut.store(true, std::sync::atomic::Ordering::Release);
            // A container being made is waited for, then removed with the
            // rest; none is made after this.
            let _ = self
                .started
                .get_or_try_init(|| async { Err::<Started, ()>(()) })
                .await;
            if let Some(started) = self.started.get() {
                started.remote.shutdown().await;
                if let Err(err) = started.container.remove(self.config.step_bound).await {
                    tracing::warn!("the session's container was not removed: {err}");
                }
            }
            self.listeners.close();
        })
    }
}
