use std::path::PathBuf;
use std::sync::Arc;

use dsh_bash::{
    BashError, BashExecSpec, BashSandboxInfo, BoxFuture, DenialEvidence, NetworkFacts, SandboxMode,
};
use dsh_bash_local::{
    ConfigError, Invocation, LaunchHook, Launching, LocalBashExecutor, LocalConfig, NeverRan,
    Outcome, Settle, Verdict,
};
use dsh_sandbox::{
    Confinement, Held, HiddenPath, HiddenPaths, HostRules, NetworkPolicy, ProtectedPaths,
    RunnerOutcome, SandboxCaches, SandboxPolicy, SandboxProvider, SandboxUnavailable, Workspace,
    WorkspaceError,
};
use tokio_util::task::TaskTracker;

use crate::blocked::WriteRights;
use crate::caches::{CacheConfig, CachePlace, Caches};
use crate::planted::IndexWatch;
use crate::private_tmp::{DeadSweep, PrivateTmp};

/// The local configuration plus the sandbox defaults.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Everything the local executor needs.
    pub local: LocalConfig,
    /// The mode for requests that name none. Default `read-only`.
    pub mode: SandboxMode,
    /// The workspace root; `None` = the local cwd, else the process cwd.
    pub workspace_root: Option<PathBuf>,
    /// The network policy for requests that name none; `None` = what the
    /// call's mode defaults to (`off` when it confines).
    pub network: Option<NetworkPolicy>,
    /// What stays read-only inside the workspace under `workspace-write`.
    /// Default [`dsh_sandbox::DEFAULT_PROTECTED_PATHS`].
    pub protected: ProtectedPaths,
    /// What no confined command may read: by default the credential files
    /// of every home ([`dsh_sandbox::CREDENTIAL_FILES`]); the server adds
    /// its own token files. See [`dsh_sandbox::SandboxPolicy::hidden`].
    pub hidden: HiddenPaths,
    /// The hosts the network policy `allow` lets a command reach (and
    /// the ones it never may); a call's approved `allow_hosts` widen it for
    /// that call only.
    pub hosts: HostRules,
    /// Where the sandbox keeps its own caches for `workspace-write`
    /// commands (npm, pip, cargo, ...), and how much of them.
    pub caches: CacheConfig,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            local: LocalConfig::default(),
            mode: SandboxMode::ReadOnly,
            workspace_root: None,
            network: None,
            protected: ProtectedPaths::default(),
            hidden: HiddenPaths::default(),
            hosts: HostRules::default(),
            caches: CacheConfig::default(),
        }
    }
}

/// A sandboxing executor that cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxConfigError {
    /// The local executor's configuration is unusable.
    #[error(transparent)]
    Local(#[from] ConfigError),
    /// The workspace root cannot be resolved, or resolves to `/`.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// Under `workspace-write`, a directory the server removes things from
    /// lies inside the writable workspace, where a command could rename
    /// what it walks.
    #[error("{0}")]
    ScratchInWorkspace(String),
}

/// Runs bash commands confined by a [`SandboxProvider`]: the local
/// executor with the sandbox as its launch hook (built by [`sandboxed`]).
pub type SandboxBashExecutor = LocalBashExecutor;

/// The sandbox as the local executor's launch hook: asks the provider to
/// confine each command, and gives each its sandbox facts once it ended.
struct Sandbox {
    provider: Arc<dyn SandboxProvider>,
    mode: SandboxMode,
    network: Option<NetworkPolicy>,
    protected: ProtectedPaths,
    hidden: Arc<HiddenPaths>,
    hosts: Arc<HostRules>,
    workspace: Workspace,
    /// The sandbox's own caches of this workspace.
    caches: Arc<Caches>,
    /// Why `workspace-write` cannot run here, if it cannot: a scratch
    /// directory of the server inside the writable workspace.
    scratch_inside: Option<String>,
    /// Dead servers' private TMPDIRs, swept once (begun at the start).
    tmp_swept: Arc<DeadSweep>,
    cleanups: TaskTracker,
    /// The caches made and swept at start (when due): shutdown waits for
    /// it, so that even a one-shot run finishes a sweep it began (at most
    /// once an hour) instead of leaving it half done.
    sweeping: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A command as the provider confined it (beside the invocation it runs
/// by), with what it owns until its tree is gone: what its verdict reads.
struct Confined {
    confinement: Confinement,
    /// What the command could write, to explain a refusal.
    rights: WriteRights,
    /// The workspace's index as it was (under `workspace-write`).
    index: Option<IndexWatch>,
    leftovers: Leftovers,
    /// Closed once the command's whole tree is gone (the local executor
    /// drops its sender then).
    gone: tokio::sync::oneshot::Receiver<()>,
}

/// What a command leaves to clean once its tree is gone: its private
/// temporary directory (it may hold anything the command wrote) and what
/// its confinement held (stand-ins for protected paths).
struct Leftovers {
    private_tmp: Option<PrivateTmp>,
    held: Vec<std::sync::Arc<dyn Held>>,
}

impl Leftovers {
    fn clean(mut self) {
        if let Some(dir) = self.private_tmp.take() {
            dir.remove();
        }
        drop(std::mem::take(&mut self.held));
    }
}

impl Drop for Leftovers {
    /// Dropped uncleaned (a run whose future was dropped): the stand-ins'
    /// release touches the file system, so it goes to the blocking pool
    /// (the private TMPDIR sees to itself the same way).
    fn drop(&mut self) {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || drop(held))),
            Err(_) => drop(held),
        }
    }
}

/// A command's private TMPDIR. Making it (and sweeping dead owners'
/// ones, the first time) touches the file system: off the runtime threads.
/// What `hidden` hides now in every home, resolved off the runtime
/// threads; a failure refuses the command rather than run it with
/// credentials readable.
async fn hidden_now(
    hidden: &Arc<HiddenPaths>,
    mode: SandboxMode,
) -> Result<Vec<HiddenPath>, BashError> {
    if hidden.is_empty() || !mode.confines() {
        return Ok(Vec::new());
    }
    let hidden = Arc::clone(hidden);
    tokio::task::spawn_blocking(move || hidden.resolve(&dsh_sandbox::homes()))
        .await
        .map_err(|err| {
            SandboxUnavailable::new(
                mode,
                Some(format!("cannot find the credential files to hide: {err}")),
            )
            .into()
        })
}

/// The command's TMPDIR as the command sees it (bubblewrap shows it as
/// /tmp): what the confinement sets it to, if it does.
fn tmpdir_inside(confinement: &Confinement) -> Option<PathBuf> {
    confinement
        .invocation
        .environment
        .iter()
        .rev()
        .find(|(name, _)| name == "TMPDIR")
        .and_then(|(_, value)| value.clone().map(PathBuf::from))
}

/// Where the user's `~/.npmrc` is hidden, its copy without credentials in
/// the command's private TMPDIR `tmp`, named to npm by
/// `NPM_CONFIG_USERCONFIG` (see [`crate::npmrc`]); nothing when it is not
/// hidden, or cannot be read.
async fn npmrc_copy(policy: &SandboxPolicy, tmp: &std::path::Path, confinement: &mut Confinement) {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
        return;
    };
    let hidden: Vec<PathBuf> = policy
        .hidden
        .iter()
        .filter(|hidden| !hidden.directory)
        .map(|hidden| hidden.path.clone())
        .collect();
    let (dir, wanted) = (tmp.to_owned(), home.join(".npmrc"));
    let written = tokio::task::spawn_blocking(move || {
        let real = std::fs::canonicalize(&wanted).ok()?;
        hidden
            .contains(&real)
            .then(|| crate::npmrc::write_redacted(&real, &dir))
    })
    .await;
    if let Ok(Some(Err(err))) = &written {
        tracing::warn!(%err, "cannot copy ~/.npmrc without its credentials; npm runs without its settings");
    }
    if !matches!(written, Ok(Some(Ok(())))) {
        return;
    }
    let inside = tmpdir_inside(confinement).unwrap_or_else(|| tmp.to_owned());
    confinement.invocation.environment.push((
        "NPM_CONFIG_USERCONFIG".into(),
        Some(inside.join(crate::npmrc::COPY).into_os_string()),
    ));
}

async fn private_tmp(mode: SandboxMode, swept: Arc<DeadSweep>) -> Result<PrivateTmp, BashError> {
    let made = tokio::task::spawn_blocking(move || PrivateTmp::create(&swept))
        .await
        .unwrap_or_else(|err| Err(std::io::Error::other(err.to_string())));
    made.map_err(|err| {
        SandboxUnavailable::new(
            mode,
            Some(format!("cannot create the command's private TMPDIR: {err}")),
        )
        .into()
    })
}

/// A wrapping runner (bubblewrap) is an ordinary dynamically linked
/// program started with the command's environment: what its loader or C
/// library acts on would run before any sandbox exists, so a request
/// naming such a variable is refused.
fn runner_env(spec: &BashExecSpec, confinement: &Confinement) -> Result<(), BashError> {
    if confinement.runner_report.is_none() {
        return Ok(());
    }
    let Some(name) = spec
        .env
        .iter()
        .flat_map(|env| env.keys())
        .find(|name| acts_before_the_sandbox(name))
    else {
        return Ok(());
    };
    let backend = &confinement.backend;
    Err(BashError::EnvRefused {
        name: name.clone(),
        why: format!("{backend} would act on it before the sandbox exists; set it inside the command instead (`{name}=… program`)"),
    })
}

/// Cleans a command's leftovers on the blocking pool, tracked so shutdown
/// waits for it.
fn discard(cleanups: &TaskTracker, leftovers: Leftovers) {
    if tokio::runtime::Handle::try_current().is_ok() {
        cleanups.spawn_blocking(move || leftovers.clean());
    } else {
        leftovers.clean();
    }
}

/// Cleans `leftovers` once the tree is `gone`: when it already is, now and
/// awaited (the result never comes while its TMPDIR or a stand-in is still
/// there); else after its last leftover has been stopped (a daemon in its
/// grace may still use its TMPDIR until then).
async fn clean_when_gone(
    cleanups: &TaskTracker,
    leftovers: Leftovers,
    mut gone: tokio::sync::oneshot::Receiver<()>,
) {
    use tokio::sync::oneshot::error::TryRecvError;
    if gone.try_recv() == Err(TryRecvError::Empty) {
        let later = cleanups.clone();
        cleanups.spawn(async move {
            let _ = gone.await;
            later.spawn_blocking(move || leftovers.clean());
        });
        return;
    }
    let _ = cleanups.spawn_blocking(move || leftovers.clean()).await;
}

/// The first line of `stderr` (the runner's own explanation).
fn first_line(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_owned)
}

use dsh_sandbox::acts_before_the_sandbox;

/// True if and only if the command failed on its own terms: a non-zero
/// exit that is not a signal death. A wrapping runner (bwrap, the one with
/// a status report) reports its child's death by signal n as exit 128+n,
/// so those count as signals too.
fn failed(confinement: &Confinement, exit_code: Option<i32>) -> bool {
    let wrapped = confinement.runner_report.is_some();
    match exit_code {
        Some(0) | None => false,
        Some(code) => !(wrapped && code > 128),
    }
}

/// Decides the `denied` fact of a command whose tree is gone: only a
/// failed command is ever denied; then the kernel's account where the
/// confinement has a witness that can give one now, else the stderr guess.
async fn judge_denial(
    info: &mut BashSandboxInfo,
    confinement: &Confinement,
    exit_code: Option<i32>,
    stderr: &str,
) {
    if !failed(confinement, exit_code) {
        return;
    }
    if let Some(witness) = &confinement.witness {
        if let Some(refused) = witness.refusals().await {
            info.denial_evidence = DenialEvidence::Kernel;
            info.denied = !refused.is_empty();
            info.refused = refused;
            return;
        }
    }
    info.denied = confinement.denial_in(stderr);
}

/// Of a denied command, the paths it was refused that the policy keeps
/// read-only, explained (asks the file system: on the blocking pool).
async fn explain_denial(info: &mut BashSandboxInfo, rights: WriteRights, stderr: &str) {
    if !info.denied {
        // A hidden file's refusal need not read as this backend's denial
        // (bubblewrap's is a plain "Permission denied"): the hidden files a
        // refusal on stderr names, and nothing else.
        if rights.names_hidden(stderr) {
            let stderr = stderr.to_owned();
            info.blocked = tokio::task::spawn_blocking(move || rights.explain_hidden(&stderr))
                .await
                .unwrap_or_default();
        }
        return;
    }
    let (evidence, refused, stderr) = (
        info.denial_evidence,
        info.refused.clone(),
        stderr.to_owned(),
    );
    info.blocked = tokio::task::spawn_blocking(move || rights.explain(evidence, &refused, &stderr))
        .await
        .unwrap_or_default();
}

/// The repositories the command added to the workspace's index as
/// gitlinks, where the backend kept the protected paths (Landlock keeps
/// none, and says so as a gap). Reads the index: on the blocking pool.
async fn note_planted(
    info: &mut BashSandboxInfo,
    index: Option<IndexWatch>,
    confinement: &Confinement,
) {
    let Some(index) = index.filter(|_| !confinement.protected.is_empty()) else {
        return;
    };
    let kept = confinement.protected.clone();
    let (planted, complete) = tokio::task::spawn_blocking(move || index.planted(&kept))
        .await
        .unwrap_or((Vec::new(), false));
    info.planted = planted;
    // Past the bounds, or with an index git reads and the server cannot,
    // a gitlink may have gone unseen: the protection was not whole.
    if !complete && !info.gaps.contains(&dsh_sandbox::SandboxGap::ProtectedPaths) {
        info.gaps.push(dsh_sandbox::SandboxGap::ProtectedPaths);
        info.enforcement = Some(dsh_sandbox::SandboxGap::enforcement(&info.gaps));
    }
}

/// The hosts the proxy refused the command (whatever its exit: a tool
/// may print a warning and go on without the host), once its tree is gone.
fn record_refused_hosts(info: &mut BashSandboxInfo, confinement: &Confinement) {
    if let (Some(log), Some(network)) = (&confinement.network_log, info.network.as_mut()) {
        network.denied = log.denied();
        network.denied_more = log.more();
        network.askable = log.askable();
    }
}

fn facts(mode: SandboxMode, confinement: &Confinement, workspace: &Workspace) -> BashSandboxInfo {
    BashSandboxInfo {
        backend: Some(confinement.backend.clone()),
        enforcement: Some(confinement.enforcement),
        gaps: confinement.gaps.clone(),
        workspace: Some(workspace.path().to_owned()),
        network: Some(NetworkFacts::of(confinement.network)),
        protected: confinement.protected.clone(),
        hidden: confinement.hidden.clone(),
        ..BashSandboxInfo::bare(mode)
    }
}

/// Why `workspace-write` must be refused, if one of the server's scratch
/// `places` (temp dir, spill parent) lies inside the writable workspace.
fn scratch_inside(workspace: &Workspace, places: &[(&str, PathBuf)]) -> Option<String> {
    places.iter().find_map(|(what, path)| {
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        real.starts_with(workspace.path()).then(|| {
            format!(
                "the {what} {} lies inside the writable workspace {}: a command could rename what the server creates and removes there; point it at a directory outside the workspace (e.g. TMPDIR=/tmp) or choose another workspace",
                path.display(),
                workspace.path().display()
            )
        })
    })
}

/// Builds a local executor confined by `provider`: the sandbox as its
/// launch hook. The workspace root is resolved now, once: its canonical
/// path and an open handle (a later symlink swap of the path changes
/// nothing); `/` is refused.
pub fn sandboxed(
    config: SandboxConfig,
    provider: Arc<dyn SandboxProvider>,
) -> Result<LocalBashExecutor, SandboxConfigError> {
    let local = config.local.clone();
    let sandbox = Sandbox::new(config, provider)?;
    Ok(LocalBashExecutor::with_hook(local, Arc::new(sandbox))?)
}

impl Sandbox {
    fn new(
        config: SandboxConfig,
        provider: Arc<dyn SandboxProvider>,
    ) -> Result<Self, SandboxConfigError> {
        config.local.validate()?;
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let base = config
            .local
            .cwd
            .clone()
            .map_or(cwd.clone(), |dir| cwd.join(dir));
        let workspace_root = config
            .workspace_root
            .clone()
            .map_or(base.clone(), |root| base.join(root));
        let workspace = Workspace::open(&workspace_root)?;
        // What a server killed outright left in the temp dir goes before
        // any command (beside the local executor's own sweeps).
        let tmp_swept = Arc::new(DeadSweep::default());
        let sweeping = Arc::clone(&tmp_swept);
        std::thread::spawn(move || sweeping.once());
        let spill_parent = config.local.spill_parent();
        let scratch_inside = scratch_inside(
            &workspace,
            &[
                ("temp dir (TMPDIR)", dsh_bash_local::scratch::temp_dir()),
                ("spill parent", spill_parent),
            ],
        );
        if config.mode == SandboxMode::WorkspaceWrite {
            if let Some(why) = scratch_inside {
                return Err(SandboxConfigError::ScratchInWorkspace(why));
            }
        }
        let persistent = matches!(config.caches.place, CachePlace::Under(_));
        let caches = Arc::new(Caches::new(config.caches, &workspace));
        let mut sweeping = None;
        if config.mode == SandboxMode::WorkspaceWrite && persistent {
            // Made before the first command needs them (which waits for
            // that if it comes sooner), then swept beside the first
            // commands (none waits for the sweep; shutdown does).
            let early = Arc::clone(&caches);
            sweeping = Some(std::thread::spawn(move || {
                let _ = early.prepared();
                early.sweep_and_stamp();
            }));
        }
        Ok(Sandbox {
            caches,
            workspace,
            scratch_inside,
            provider,
            mode: config.mode,
            network: config.network,
            protected: config.protected,
            hidden: Arc::new(config.hidden),
            hosts: Arc::new(config.hosts),
            tmp_swept,
            cleanups: TaskTracker::new(),
            sweeping: std::sync::Mutex::new(sweeping),
        })
    }

    fn mode_of(&self, spec: &BashExecSpec) -> SandboxMode {
        spec.sandbox_mode.unwrap_or(self.mode)
    }

    /// The network policy of a call under `mode` that names `asked`, and
    /// was approved hosts of its own (`extra_hosts`): those open the
    /// allow-list where the network would be off.
    fn network_of(
        &self,
        asked: Option<NetworkPolicy>,
        mode: SandboxMode,
        extra_hosts: bool,
    ) -> NetworkPolicy {
        if !mode.confines() {
            return NetworkPolicy::On;
        }
        let network = asked
            .or(self.network)
            .unwrap_or_else(|| NetworkPolicy::default_for(mode));
        if extra_hosts && network == NetworkPolicy::Off {
            NetworkPolicy::Allow
        } else {
            network
        }
    }

    /// The allow-list of `spec`: the executor's, widened by the call's
    /// approved hosts.
    fn hosts_of(&self, spec: &BashExecSpec) -> Arc<HostRules> {
        if spec.allow_hosts.is_empty() {
            Arc::clone(&self.hosts)
        } else {
            Arc::new(self.hosts.widened(&spec.allow_hosts))
        }
    }

    /// The caches of a `workspace-write` command whose private TMPDIR is
    /// `tmp` (made on the blocking pool; none when even the ephemeral ones
    /// cannot be made, e.g. on a full disk: the tools then fail on the
    /// host's read-only caches, as without this).
    async fn caches_for(&self, tmp: &std::path::Path) -> Arc<SandboxCaches> {
        if let Some(ready) = self.caches.ready() {
            return ready;
        }
        let caches = Arc::clone(&self.caches);
        let tmp = tmp.to_owned();
        let made = tokio::task::spawn_blocking(move || caches.for_command(&tmp))
            .await
            .unwrap_or_else(|err| Err(std::io::Error::other(err.to_string())));
        made.unwrap_or_else(|err| {
            tracing::warn!(%err, "cannot make a command's sandbox caches");
            Arc::default()
        })
    }

    /// A note of the workspace's repository indexes before a command runs,
    /// where the backend keeps the protected paths (so a gitlink it adds
    /// can be told from the ones it found); reads them: on the blocking
    /// pool.
    async fn watch_indexes(&self, confinement: &Confinement) -> Option<IndexWatch> {
        if confinement.protected.is_empty() {
            return None;
        }
        let workspace = self.workspace.clone();
        tokio::task::spawn_blocking(move || IndexWatch::start(&workspace))
            .await
            .ok()
    }

    /// What a command confined by `confinement` under `policy` could
    /// write, to explain a refusal.
    fn rights(
        &self,
        spec: &BashExecSpec,
        policy: &SandboxPolicy,
        confinement: &Confinement,
    ) -> WriteRights {
        WriteRights {
            mode: policy.mode,
            workspace: self.workspace.path().to_owned(),
            protected: confinement.protected.clone(),
            hidden: confinement.hidden.clone(),
            caches: Arc::clone(&policy.caches),
            private_tmp: tmpdir_inside(confinement).or_else(|| policy.private_tmp.clone()),
            workdir: spec.workdir.clone(),
            home: std::env::var_os("HOME").map(PathBuf::from),
            host_caches_bound: confinement.runner_report.is_some(),
        }
    }

    /// Asks the provider how to run `spec` under `mode`: the confinement,
    /// the invocation to hand to the local executor, and the command's
    /// private temporary directory (under `workspace-write`).
    async fn confine(
        &self,
        spec: &BashExecSpec,
        mode: SandboxMode,
        plain: Invocation,
        readable: Vec<PathBuf>,
    ) -> Result<(Invocation, Confined), BashError> {
        if let Some(why) = self
            .scratch_inside
            .as_ref()
            .filter(|_| mode == SandboxMode::WorkspaceWrite)
        {
            return Err(SandboxUnavailable::new(mode, Some(why.clone())).into());
        }
        let private_tmp = if mode == SandboxMode::WorkspaceWrite {
            Some(private_tmp(mode, Arc::clone(&self.tmp_swept)).await?)
        } else {
            None
        };
        let protected = if mode == SandboxMode::WorkspaceWrite {
            self.protected.clone()
        } else {
            ProtectedPaths::none()
        };
        let caches = match &private_tmp {
            Some(tmp) => self.caches_for(tmp.path()).await,
            None => Arc::default(),
        };
        let policy = SandboxPolicy {
            mode,
            workspace: self.workspace.clone(),
            private_tmp: private_tmp.as_ref().map(|dir| dir.path().to_owned()),
            // Full-output paths printed earlier stay readable.
            readable,
            hidden: hidden_now(&self.hidden, mode).await?,
            protected,
            caches,
            network: self.network_of(spec.network, mode, !spec.allow_hosts.is_empty()),
            hosts: self.hosts_of(spec),
            terminal: spec.terminal.is_some(),
        };
        let mut confinement = match self.provider.confine(&plain.argv, &policy).await {
            Ok(confinement) => confinement,
            Err(refused) => {
                discard(
                    &self.cleanups,
                    Leftovers {
                        private_tmp,
                        held: Vec::new(),
                    },
                );
                return Err(refused.into());
            }
        };
        if let Err(refused) = runner_env(spec, &confinement) {
            let held = std::mem::take(&mut confinement.held);
            discard(&self.cleanups, Leftovers { private_tmp, held });
            return Err(refused);
        }
        if let Some(tmp) = &private_tmp {
            npmrc_copy(&policy, tmp.path(), &mut confinement).await;
        }
        let held = std::mem::take(&mut confinement.held);
        let (tree_alive, gone) = tokio::sync::oneshot::channel::<()>();
        let rights = self.rights(spec, &policy, &confinement);
        let index = self.watch_indexes(&confinement).await;
        // The confinement's invocation, keeping what the plain one keeps
        // (a long command's descriptor), and the sender whose drop says
        // the tree is gone.
        // (Nothing reads the confinement's invocation after this.)
        let mut invocation = std::mem::take(&mut confinement.invocation);
        invocation
            .restriction
            .keep_fds
            .extend(plain.restriction.keep_fds);
        invocation.held.push(Arc::new(tree_alive));
        let confined = Confined {
            rights,
            index,
            confinement,
            leftovers: Leftovers { private_tmp, held },
            gone,
        };
        Ok((invocation, confined))
    }
}

/// How a command ended, as the sandbox judges it: one rule for a
/// foreground run and a background task.
#[derive(Debug, PartialEq, Eq)]
enum Class {
    /// It ran (or never ran for a reason of its own, nothing to judge):
    /// denials are judged from its exit.
    Ran { judged: bool },
    /// The runner never started it: the sandbox is unavailable.
    RunnerFailed(Option<String>),
    /// The host ran out of descriptors, processes or memory.
    Exhausted(String),
}

/// Classifies an outcome: a launch failure or a runner that never
/// reported starting the command (unless a stop cut its setup short) is
/// the runner's failure; exhaustion is the host's; a missing working
/// directory is the request's.
fn classify(outcome: &Outcome, runner: RunnerOutcome) -> Class {
    match outcome {
        Outcome::NeverRan {
            why: NeverRan::Exhausted,
            message,
        } => Class::Exhausted(message.clone()),
        Outcome::NeverRan {
            why: NeverRan::Launch,
            message,
        } => Class::RunnerFailed(Some(message.clone())),
        Outcome::NeverRan { .. } => Class::Ran { judged: false },
        Outcome::Ran {
            stopped: false,
            stderr,
            ..
        } if runner == RunnerOutcome::NeverStarted => Class::RunnerFailed(first_line(stderr)),
        Outcome::Ran { .. } => Class::Ran { judged: true },
    }
}

/// What settles one confined command.
struct Settling {
    mode: SandboxMode,
    confined: Confined,
    workspace: Workspace,
    cleanups: TaskTracker,
    provider: Arc<dyn SandboxProvider>,
}

impl Settle for Settling {
    fn settle(self: Box<Self>, outcome: Outcome) -> BoxFuture<'static, Verdict> {
        Box::pin(self.verdict(outcome))
    }
}

impl Settling {
    async fn verdict(self, outcome: Outcome) -> Verdict {
        let Settling {
            mode,
            confined:
                Confined {
                    confinement,
                    rights,
                    index,
                    leftovers,
                    gone,
                },
            workspace,
            cleanups,
            provider,
        } = self;
        // Gone before the verdict is when the tree is (a printed TMPDIR
        // never outlives it, nor a stand-in the workspace did not have);
        // else once its last leftover is.
        clean_when_gone(&cleanups, leftovers, gone).await;
        let mut info = facts(mode, &confinement, &workspace);
        match (classify(&outcome, confinement.runner_outcome()), &outcome) {
            (Class::Exhausted(message), _) => Verdict::Unavailable {
                facts: info,
                error: SandboxUnavailable::exhausted(mode, Some(message)).into(),
            },
            (Class::RunnerFailed(why), _) => {
                provider.runner_failed();
                info.runner_failed = true;
                Verdict::Unavailable {
                    facts: info,
                    error: SandboxUnavailable::new(mode, why).into(),
                }
            }
            (
                Class::Ran { judged: true },
                Outcome::Ran {
                    exit_code, stderr, ..
                },
            ) => {
                judge_denial(&mut info, &confinement, *exit_code, stderr).await;
                explain_denial(&mut info, rights, stderr).await;
                note_planted(&mut info, index, &confinement).await;
                record_refused_hosts(&mut info, &confinement);
                Verdict::Ran(Some(info))
            }
            (Class::Ran { .. }, _) => Verdict::Ran(Some(info)),
        }
    }
}

/// A command under a mode that does not confine: its facts say so.
struct Unconfined(SandboxMode);

impl Settle for Unconfined {
    fn settle(self: Box<Self>, _outcome: Outcome) -> BoxFuture<'static, Verdict> {
        let info = BashSandboxInfo {
            network: Some(NetworkFacts::of(NetworkPolicy::On)),
            ..BashSandboxInfo::bare(self.0)
        };
        Box::pin(async move { Verdict::Ran(Some(info)) })
    }
}

impl LaunchHook for Sandbox {
    fn sandbox_mode(&self) -> SandboxMode {
        self.mode
    }

    fn network(
        &self,
        asked: Option<NetworkPolicy>,
        mode: SandboxMode,
        extra_hosts: bool,
    ) -> NetworkPolicy {
        self.network_of(asked, mode, extra_hosts)
    }

    fn workspace_root(&self) -> &std::path::Path {
        self.workspace.path()
    }

    fn confine<'a>(
        &'a self,
        spec: &'a BashExecSpec,
        plain: Invocation,
        readable: Vec<PathBuf>,
    ) -> BoxFuture<'a, Result<Launching, BashError>> {
        Box::pin(async move {
            let mode = self.mode_of(spec);
            if !mode.confines() {
                return Ok(Launching {
                    invocation: plain,
                    settle: Box::new(Unconfined(mode)),
                });
            }
            let (invocation, confined) = self.confine(spec, mode, plain, readable).await?;
            Ok(Launching {
                invocation,
                settle: Box::new(Settling {
                    mode,
                    confined,
                    workspace: self.workspace.clone(),
                    cleanups: self.cleanups.clone(),
                    provider: Arc::clone(&self.provider),
                }),
            })
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.provider.release().await;
            self.cleanups.close();
            self.cleanups.wait().await;
            let sweeping = self
                .sweeping
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(sweeping) = sweeping {
                let _ = tokio::task::spawn_blocking(move || sweeping.join()).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(stopped: bool) -> Outcome {
        Outcome::Ran {
            exit_code: Some(1),
            stopped,
            stderr: "bwrap: cannot set up\n".into(),
        }
    }

    fn never(why: NeverRan) -> Outcome {
        Outcome::NeverRan {
            why,
            message: "cannot run bwrap".into(),
        }
    }

    /// One rule for both: a runner that never reported starting the
    /// command failed unless a stop cut its setup short; a launch failure
    /// is the runner's, exhaustion the host's, a missing directory the
    /// request's (defect 1: a task that cannot spawn is no runner failure).
    #[test]
    fn one_classification_for_runs_and_tasks() {
        let started = RunnerOutcome::Started;
        let never_started = RunnerOutcome::NeverStarted;
        assert_eq!(classify(&ran(false), started), Class::Ran { judged: true });
        assert_eq!(
            classify(&ran(false), never_started),
            Class::RunnerFailed(Some("bwrap: cannot set up".into()))
        );
        assert_eq!(
            classify(&ran(true), never_started),
            Class::Ran { judged: true }
        );
        assert_eq!(
            classify(&never(NeverRan::Launch), started),
            Class::RunnerFailed(Some("cannot run bwrap".into()))
        );
        assert_eq!(
            classify(&never(NeverRan::Exhausted), never_started),
            Class::Exhausted("cannot run bwrap".into())
        );
        assert_eq!(
            classify(&never(NeverRan::Workdir), never_started),
            Class::Ran { judged: false }
        );
    }
}
