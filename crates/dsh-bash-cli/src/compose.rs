//! Building the executor a front end uses from command-line options.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_bash::BashExecutor;
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use dsh_bash_sandbox::{CacheConfig, CachePlace, SandboxConfig};
use dsh_policy::values::{limit_count, limit_cpus, limit_size, Limit};
use dsh_sandbox::{
    HiddenPaths, HostPattern, HostPreset, HostRules, NetworkPolicy, ProtectedPaths, SandboxMode,
};
use dsh_sandbox_local::{Backend, LocalSandboxConfig, LocalSandboxProvider};

/// Options shared by `run` and `mcp`.
#[derive(clap::Args, Clone, Debug)]
pub struct ExecutorArgs {
    /// Working directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Confine file effects: read-only, workspace-write or
    /// danger-full-access (default: unconfined, no sandbox at all).
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,
    /// The workspace writable under workspace-write (default: the workdir).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Which sandbox backend to use: auto (the strongest usable), bwrap or
    /// landlock.
    #[arg(long, value_name = "BACKEND",
          value_parser = ["auto", "bwrap", "landlock"])]
    pub sandbox_backend: Option<String>,
    /// Whether confined commands may use the network: off, allow (only the
    /// hosts of --allow-host and --allow-preset, through a proxy of the
    /// server's) or on (default: off under read-only and workspace-write;
    /// allow when a host or preset is given).
    #[arg(long, value_name = "POLICY")]
    pub network: Option<NetworkPolicy>,
    /// Under --network allow, a host commands may reach (repeatable):
    /// files.example.org (that host), *.example.org (its subdomains),
    /// 127.0.0.1 or [::1] (an address), each with an optional :port. A
    /// name that resolves to a loopback or private address is refused
    /// unless the address (or localhost) is given literally.
    #[arg(long = "allow-host", value_name = "PATTERN")]
    pub allow_host: Vec<HostPattern>,
    /// Under --network allow, a host commands may never reach, whatever
    /// --allow-host says (repeatable; same patterns).
    #[arg(long = "deny-host", value_name = "PATTERN")]
    pub deny_host: Vec<HostPattern>,
    /// Under --network allow, a named list of hosts (repeatable): pypi
    /// (pypi.org, files.pythonhosted.org), npm (registry.npmjs.org,
    /// registry.yarnpkg.com), crates (crates.io, index.crates.io,
    /// static.crates.io) or github (github.com, api.github.com,
    /// codeload.github.com and its githubusercontent.com hosts), on port
    /// 443.
    #[arg(long = "allow-preset", value_name = "NAME")]
    pub allow_preset: Vec<HostPreset>,
    /// Also keep this path read-only inside the workspace under
    /// workspace-write (relative to the workspace; repeatable). Protected
    /// by default: what git would run code from in .git (hooks, config;
    /// commits still work), .hg, .envrc, .gitmodules, .githooks, .husky,
    /// .pre-commit-config.yaml, the agents' and editors' own configuration
    /// (.mcp.json, .claude, .codex, .cursor, .gemini, .continue, .zed,
    /// .vscode, .idea, .devcontainer), .dsh-bash, *.code-workspace at the
    /// root, and every dot-entry of a home directory inside the workspace.
    #[arg(long, value_name = "PATH")]
    pub protect: Vec<String>,
    /// Stop protecting this path (one of the protected ones; repeatable),
    /// e.g. --unprotect .vscode to let commands edit the editor's settings.
    #[arg(long, value_name = "PATH")]
    pub unprotect: Vec<String>,
    /// Also hide this file or directory from confined commands (absolute;
    /// repeatable). Hidden by default in every home (the server's HOME,
    /// /root, /home/*): private SSH keys (.ssh/id_*), .aws/credentials
    /// and its SSO and CLI caches, .netrc, .npmrc, .pypirc,
    /// .git-credentials, .config/git/credentials, .config/gh/hosts.yml,
    /// .config/hub, .docker/config.json, .kube/config, gcloud's and
    /// azure's token stores, .cargo/credentials(.toml),
    /// .gnupg/private-keys-v1.d and .terraform.d/credentials.tfrc.json.
    #[arg(long, value_name = "PATH")]
    pub hide: Vec<String>,
    /// Stop hiding this path and what is beneath it (a hidden credential
    /// file, a directory holding some such as ~/.ssh, or a --hide path;
    /// absolute; repeatable).
    #[arg(long, value_name = "PATH")]
    pub unhide: Vec<String>,
    /// Where confined commands keep their tools' caches under
    /// workspace-write (npm, yarn, pnpm, pip, uv, cargo's registry, Go,
    /// Gradle, Maven, XDG_CACHE_HOME): a directory of the sandbox's own,
    /// never the host's caches, which stay read-only (default:
    /// ~/.cache/dsh-bash/sandbox); `per-command` (each command's caches
    /// last as long as it does); or `none` (tools meet the host's caches,
    /// read-only, and fail on them).
    #[arg(long, value_name = "DIR|per-command|none", value_parser = cache_place)]
    pub sandbox_cache: Option<CachePlace>,
    /// At start (at most once an hour per user), the sandbox's caches are
    /// cut to this size by removing the least recently used tool's or
    /// workspace's cache whole (default 10G); a workspace's cache unused
    /// for 30 days goes too.
    #[arg(long, value_name = "SIZE", value_parser = limit_size)]
    pub sandbox_cache_max: Option<Limit>,
    /// Also drop inherited environment variables whose name contains this
    /// (case-insensitive; repeatable). KEY, SECRET, TOKEN, PASSWORD, PASSWD
    /// and CREDENTIAL are always dropped, as are names ending in _PAT, _DSN
    /// or _AUTH, names ending in _PWD unless the value is a directory, and
    /// values that carry a credential (a URL with a password, a connection
    /// string's Password=, a known token shape).
    #[arg(long = "scrub", value_name = "PATTERN")]
    pub scrub: Vec<String>,
    /// Pass this inherited variable even if its name matches a scrub
    /// pattern (exact name; repeatable).
    #[arg(long = "keep-env", value_name = "NAME")]
    pub keep_env: Vec<String>,
    /// The user's own shell for every command: auto (a snapshot of what
    /// $SHELL's start-up files set up, bash or zsh: variables, PATH,
    /// functions, aliases, glob options; credentials scrubbed), off, or a
    /// bash FILE to source instead. Default: auto for mcp (taken in the
    /// background at start, bounded), off for run; the environment
    /// variable DSH_BASH_SHELL_SNAPSHOT when the flag is absent.
    #[arg(long, value_name = "auto|off|FILE", env = "DSH_BASH_SHELL_SNAPSHOT")]
    pub shell_snapshot: Option<String>,
    /// How commands are contained: auto (a cgroup per command where this
    /// host allows, else the process-tree walk) or process-tree.
    #[arg(long, value_name = "HOW", default_value = "auto",
          value_parser = ["auto", "process-tree"])]
    pub containment: String,
    /// Run every command in a container of the session's own, made from
    /// IMAGE when the first command needs it and removed when the session
    /// ends: the workspace mounted read-write at the same path, the root
    /// file system read-only with a writable /tmp, no network unless
    /// --network on (the engine's) or allow (the hosts of --allow-host and
    /// --allow-preset through this server's proxy), no capabilities,
    /// --max-memory, --max-processes and --max-cpu as the container's
    /// limits. This binary serves the commands inside (the image needs
    /// bash and glibc 2.34 or later).
    #[arg(long, value_name = "IMAGE",
          conflicts_with_all = ["sandbox", "sandbox_backend"])]
    pub container: Option<String>,
    /// The engine that makes --container's container: podman or docker
    /// (default: the first of them on PATH).
    #[arg(long, value_name = "ENGINE", requires = "container",
          value_parser = ["podman", "docker"])]
    pub container_engine: Option<String>,
    /// The most bytes one stream's full-output (spill) file may hold; past
    /// it the file keeps the first bytes and the result says so (default
    /// 1073741824).
    #[arg(long, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_spill_bytes: Option<u64>,
    /// The policy file to use in place of the user's
    /// (~/.config/dsh-bash/config.toml); approvals "always" are kept in it.
    /// The system's (/etc/dsh-bash/config.toml) and the workspace's
    /// (.dsh-bash/config.toml) are read too; flags win over every file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Processes (threads count) one command may have at once, or `none`
    /// (default: the larger of 4096 and 64 per CPU). Applied per command
    /// by a cgroup where the host has the controller; a fork past it fails.
    #[arg(long, value_name = "N|none", value_parser = limit_count)]
    pub max_processes: Option<Limit>,
    /// Memory one command may use, swap included where the host allows:
    /// bytes or with K, M, G or T (binary units: 256M, 1.5G), or `none`
    /// (default: the smaller of 8G and half of this machine's memory).
    /// Past it the kernel's OOM killer ends the command.
    #[arg(long, value_name = "SIZE|none", value_parser = limit_size)]
    pub max_memory: Option<Limit>,
    /// CPU one command may use, in CPUs (0.5 is half of one, 2 is two), or
    /// `none` (the default).
    #[arg(long, value_name = "CPUS|none", value_parser = limit_cpus)]
    pub max_cpu: Option<Limit>,
}

fn cache_place(value: &str) -> Result<CachePlace, String> {
    match value {
        "per-command" => Ok(CachePlace::PerCommand),
        "none" => Ok(CachePlace::Nowhere),
        _ if PathBuf::from(value).is_absolute() => Ok(CachePlace::Under(value.into())),
        _ => Err(format!(
            "expected an absolute directory, per-command or none; got {value:?}"
        )),
    }
}

impl ExecutorArgs {
    /// The limits every command runs under: the machine's defaults with
    /// the flags applied.
    fn limits(&self) -> dsh_bash_local::ResourceLimits {
        let mut limits = dsh_bash_local::ResourceLimits::for_this_machine();
        if let Some(Limit(processes)) = self.max_processes {
            limits.processes = processes;
        }
        if let Some(Limit(bytes)) = self.max_memory {
            limits.memory_bytes = bytes;
        }
        if let Some(Limit(millicores)) = self.max_cpu {
            limits.cpu_millicores = millicores.and_then(|m| u32::try_from(m).ok());
        }
        limits
    }
}

/// A duration given in milliseconds on the command line: the one place
/// milliseconds become a `Duration`, and the one check that they are a
/// positive finite number.
pub fn millis(flag: &str, ms: f64) -> anyhow::Result<std::time::Duration> {
    let duration = std::time::Duration::try_from_secs_f64(ms / 1000.0)
        .ok()
        .filter(|d| !d.is_zero());
    duration.ok_or_else(|| {
        anyhow::anyhow!(
            "invalid --{flag}: expected a positive finite number of milliseconds (at most about 1.8e22), got {ms}"
        )
    })
}

/// The local executor's configuration with the options applied (the
/// workdir made absolute, so every spec and session names a full path).
pub fn local_config(args: &ExecutorArgs) -> LocalConfig {
    let mut scrub = dsh_bash_local::ScrubPolicy::default();
    scrub.patterns.extend(args.scrub.iter().cloned());
    scrub.allow.extend(args.keep_env.iter().cloned());
    LocalConfig {
        scrub,
        max_spill_bytes: args.max_spill_bytes.unwrap_or(DEFAULT_SPILL_BYTES),
        max_output_bytes: MODEL_OUTPUT_BYTES,
        containment: match args.containment.as_str() {
            "process-tree" => dsh_bash_local::ContainmentChoice::ProcessTree,
            _ => dsh_bash_local::ContainmentChoice::Auto,
        },
        // This binary has no children of its own besides its commands':
        // it can be the subreaper of their orphans.
        adopt_orphans: true,
        limits: args.limits(),
        cwd: args
            .workdir
            .as_ref()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone())),
        ..LocalConfig::default()
    }
}

/// How long one attempt at a shell snapshot may take.
const SNAPSHOT_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// What `--shell-snapshot` asks for (`default_auto` when it is absent):
/// `auto` is `$SHELL` (else bash), a file must exist.
pub fn snapshot_source(
    args: &ExecutorArgs,
    default_auto: bool,
) -> anyhow::Result<Option<dsh_bash_local::SnapshotSource>> {
    let asked = args.shell_snapshot.as_deref();
    match asked {
        Some("off") => Ok(None),
        None if !default_auto => Ok(None),
        None | Some("auto") => Ok(Some(login_shell())),
        Some(file) => {
            let path = std::path::absolute(file).unwrap_or_else(|_| PathBuf::from(file));
            if !path.is_file() {
                anyhow::bail!(
                    "--shell-snapshot {file}: no such file; expected auto, off or a bash file to source"
                );
            }
            Ok(Some(dsh_bash_local::SnapshotSource::File(path)))
        }
    }
}

/// The user's login shell to snapshot: `$SHELL`, else bash.
pub fn login_shell() -> dsh_bash_local::SnapshotSource {
    let shell = std::env::var_os("SHELL")
        .filter(|shell| !shell.is_empty())
        .map_or_else(|| PathBuf::from("bash"), PathBuf::from);
    dsh_bash_local::SnapshotSource::Login { shell }
}

/// Takes the snapshot of `source` with an executor of its own, the shell
/// confined so that nothing in the home is writable (unconfined, with a
/// warning, where no backend works here), and settles `slot`, logging what
/// it kept or why there is none.
pub async fn take_snapshot(
    backend: Backend,
    local: &LocalConfig,
    source: dsh_bash_local::SnapshotSource,
    slot: Arc<dsh_bash_local::SnapshotSlot>,
) {
    let taken = snapshot(backend, local, &source).await;
    match &taken {
        Ok(snapshot) => {
            let summary = snapshot.summary();
            tracing::info!(source = %summary.source, variables = summary.variables, functions = summary.functions, aliases = summary.aliases, bytes = summary.script_bytes, without_rc = summary.without_rc, confined = summary.confined, scrubbed = ?summary.scrubbed, "shell snapshot taken");
            if !summary.dropped.is_empty() {
                tracing::warn!(
                    "shell snapshot of {}: left out {}",
                    summary.source,
                    summary.dropped.join(", ")
                );
            }
        }
        Err(err) => tracing::warn!("no shell snapshot: {err}"),
    }
    slot.settle(taken);
}

/// The snapshot of `source`, taken with an executor of its own, the shell
/// confined so that nothing in the home is writable (unconfined, with a
/// warning, where no backend works here).
pub async fn snapshot(
    backend: Backend,
    local: &LocalConfig,
    source: &dsh_bash_local::SnapshotSource,
) -> Result<dsh_bash_local::ShellSnapshot, dsh_bash_local::SnapshotError> {
    let capture = LocalConfig {
        shell_snapshot: None,
        discard_spill_on_shutdown: true,
        ..local.clone()
    };
    match LocalBashExecutor::new(capture) {
        Ok(executor) => {
            let sandbox = LocalSandboxProvider::new(LocalSandboxConfig {
                backend,
                ..LocalSandboxConfig::default()
            })
            .map_err(|err| tracing::warn!("the shell snapshot runs unconfined: {err}"))
            .ok();
            let taken = dsh_bash_local::take_shell_snapshot(
                &executor,
                source,
                SNAPSHOT_BOUND,
                sandbox
                    .as_ref()
                    .map(|s| s as &dyn dsh_sandbox::SandboxProvider),
            )
            .await;
            executor.shutdown().await;
            taken
        }
        Err(err) => Err(dsh_bash_local::SnapshotError::Io {
            detail: err.to_string(),
        }),
    }
}

/// The sandbox backend the flags name (`auto` by default): the commands'
/// and the shell snapshot's.
pub fn backend_of(args: &ExecutorArgs) -> Backend {
    match args.sandbox_backend.as_deref().unwrap_or("auto") {
        "bwrap" => Backend::Bwrap,
        "landlock" => Backend::Landlock,
        _ => Backend::Auto,
    }
}

/// The output a result shows the model, in bytes, and the tail of each
/// stream kept in memory: a stream no longer than this is shown whole, a
/// longer one is spilled and shown as its head and tail, and two long
/// streams share it (`dsh_tool_bash::render_run_result`). With its markers
/// a result stays under 30,000 characters, what Claude Code shows inline,
/// and under Codex's 10,000-token cut even JSON-escaped (lines of one
/// character double in size).
pub const MODEL_OUTPUT_BYTES: u64 = 24_000;

/// The most a spill file holds by default.
pub const DEFAULT_SPILL_BYTES: u64 = 1 << 30;

/// The executor: unconfined, or confined when a mode is given.
pub fn executor(args: &ExecutorArgs, local: LocalConfig) -> anyhow::Result<Arc<dyn BashExecutor>> {
    // One command: a warm sandbox would cost a build for a single entry.
    Ok(compose(args, local, Vec::new(), false)?.executor)
}

/// The executor.
pub struct Composed {
    pub executor: Arc<dyn BashExecutor>,
    /// Whether results list what changed in the workspace; `Err` says why
    /// changes asked for are not tracked.
    pub tracks_changes: Result<bool, String>,
}

/// The executor, keeping the server's `secrets` (absolute paths of its
/// token files) from confined commands where the backend can hide a file.
/// A secret inside the workspace is refused: a command could rewrite it.
/// `warm`: a session's sandbox built once under bubblewrap (a server).
pub fn compose(
    args: &ExecutorArgs,
    local: LocalConfig,
    secrets: Vec<PathBuf>,
    warm: bool,
) -> anyhow::Result<Composed> {
    if let Some(image) = &args.container {
        return Ok(Composed {
            executor: Arc::new(container_executor(args, image, &local)?),
            tracks_changes: Ok(false),
        });
    }
    let Some(mode) = args.sandbox else {
        let executor = LocalBashExecutor::new(local)?;
        return Ok(Composed {
            tracks_changes: executor.tracks_changes(),
            executor: Arc::new(executor),
        });
    };
    let backend = backend_of(args);
    let provider = LocalSandboxProvider::new(LocalSandboxConfig {
        backend,
        // This binary runs the allow-list's forwarder (`main`), by its real
        // path: bubblewrap execs it inside, where /proc/self is not ours.
        forwarder: std::env::current_exe().ok(),
        warm,
        ..LocalSandboxConfig::default()
    })?;
    let (network, hosts) = network_of(args)?;
    let mut protected = ProtectedPaths::default();
    for path in &args.protect {
        protected.protect(path)?;
    }
    for path in &args.unprotect {
        protected.unprotect(path)?;
    }
    let mut hidden = HiddenPaths::default();
    for secret in &secrets {
        hidden.hide_secret(secret.clone());
    }
    for path in &args.hide {
        hidden.hide(path)?;
    }
    let homes = dsh_sandbox::homes();
    for path in &args.unhide {
        hidden.unhide(path, &homes)?;
    }
    let config = SandboxConfig {
        workspace_root: args.workspace.clone().or_else(|| local.cwd.clone()),
        local,
        mode,
        network,
        protected,
        hidden,
        hosts,
        caches: caches_of(args),
    };
    let executor = dsh_bash_sandbox::sandboxed(config, Arc::new(provider))?;
    // A sandboxed executor always has its workspace.
    let inside = |secret: &&PathBuf| {
        executor
            .workspace_root()
            .is_some_and(|workspace| secret.starts_with(workspace))
    };
    if let Some(secret) = secrets.iter().find(inside) {
        let workspace = executor.workspace_root().unwrap_or(secret).to_owned();
        anyhow::bail!(
            "the token file {} lies inside the workspace {}: a command could read or rewrite it; keep it outside (e.g. in ~/.config/dsh-bash/)",
            secret.display(),
            workspace.display()
        );
    }
    Ok(Composed {
        tracks_changes: executor.tracks_changes(),
        executor: Arc::new(executor),
    })
}

/// The sandbox's caches as the flags say.
fn caches_of(args: &ExecutorArgs) -> CacheConfig {
    let mut caches = CacheConfig::default();
    if let Some(place) = &args.sandbox_cache {
        caches.place.clone_from(place);
    }
    match args.sandbox_cache_max {
        Some(Limit(Some(bytes))) => caches.max_bytes = bytes,
        Some(Limit(None)) => caches.max_bytes = u64::MAX,
        None => {}
    }
    caches
}

/// How long an engine step may take at start (the sweep's listing and
/// each removal).
const SWEEP_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// Under `--container`: the containers of this host's dead servers
/// removed (before a new one is made).
pub async fn sweep_containers(args: &ExecutorArgs) -> anyhow::Result<()> {
    if args.container.is_some() {
        let removed = dsh_bash_container::sweep(&container_engine(args)?, SWEEP_BOUND).await;
        if removed > 0 {
            tracing::info!(removed, "removed dead servers' containers");
        }
    }
    Ok(())
}

/// The engine `--container-engine` names, or the first found.
pub fn container_engine(args: &ExecutorArgs) -> anyhow::Result<dsh_bash_container::Engine> {
    Ok(dsh_bash_container::Engine::find(
        args.container_engine.as_deref(),
    )?)
}

/// The executor of `--container IMAGE`: the workspace (or workdir), this
/// binary by its real path, the limits and timeouts of `local`.
fn container_executor(
    args: &ExecutorArgs,
    image: &str,
    local: &LocalConfig,
) -> anyhow::Result<dsh_bash_container::ContainerBashExecutor> {
    let workspace = args
        .workspace
        .clone()
        .or_else(|| local.cwd.clone())
        .map_or_else(std::env::current_dir, Ok)?;
    let workspace = std::fs::canonicalize(&workspace).map_err(|err| {
        anyhow::anyhow!(
            "--container: the workspace {} cannot be resolved: {err}",
            workspace.display()
        )
    })?;
    let workdir = match &local.cwd {
        Some(dir) => Some(std::fs::canonicalize(dir).map_err(|err| {
            anyhow::anyhow!(
                "--container: the workdir {} cannot be resolved: {err}",
                dir.display()
            )
        })?),
        None => None,
    };
    let binary = std::env::current_exe().map_err(|err| {
        anyhow::anyhow!("--container: this binary's own path cannot be read: {err}")
    })?;
    let mut config = dsh_bash_container::ContainerConfig::new(
        container_engine(args)?,
        image.to_owned(),
        workspace,
        binary,
    );
    config.workdir = workdir;
    let (network, hosts) = network_of(args)?;
    config.network = network.unwrap_or(NetworkPolicy::Off);
    config.hosts = Arc::new(hosts);
    config.memory_bytes = local.limits.memory_bytes;
    config.processes = local.limits.processes;
    config.cpu_millicores = local.limits.cpu_millicores;
    config.default_timeout = local.default_timeout;
    config.max_timeout = local.max_timeout;
    Ok(dsh_bash_container::ContainerBashExecutor::new(config)?)
}

/// The network policy and allow-list of the flags: hosts or presets imply
/// `allow`, and make no sense beside an explicit `off` or `on`.
fn network_of(args: &ExecutorArgs) -> anyhow::Result<(Option<NetworkPolicy>, HostRules)> {
    let mut allow = args.allow_host.clone();
    for preset in &args.allow_preset {
        allow.extend(preset.patterns());
    }
    let listed = !allow.is_empty() || !args.deny_host.is_empty();
    let network = match args.network {
        Some(policy) if listed && policy != NetworkPolicy::Allow => anyhow::bail!(
            "--allow-host, --deny-host and --allow-preset only apply under --network allow, not --network {policy}; drop them or use --network allow"
        ),
        None if listed => Some(NetworkPolicy::Allow),
        other => other,
    };
    if network == Some(NetworkPolicy::Allow) && allow.is_empty() {
        tracing::warn!("--network allow with no --allow-host or --allow-preset refuses every host");
    }
    Ok((
        network,
        HostRules {
            allow,
            deny: args.deny_host.clone(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_with_units_and_none() {
        assert_eq!(limit_size("256M"), Ok(Limit(Some(256 << 20))));
        assert_eq!(limit_size("1.5G"), Ok(Limit(Some(3 << 29))));
        assert_eq!(limit_size("8GiB"), Ok(Limit(Some(8 << 30))));
        assert_eq!(limit_size("512k"), Ok(Limit(Some(512 << 10))));
        assert_eq!(limit_size("4096"), Ok(Limit(Some(4096))));
        assert_eq!(limit_size("none"), Ok(Limit(None)));
        for bad in ["", "M", "-1G", "0", "lots", "1.5X"] {
            assert!(limit_size(bad).unwrap_err().contains("e.g. 256M"), "{bad}");
        }
        assert_eq!(limit_count("200"), Ok(Limit(Some(200))));
        assert!(limit_count("0").is_err());
        assert!(limit_count("2.5").is_err());
        assert_eq!(limit_cpus("0.5"), Ok(Limit(Some(500))));
        assert_eq!(limit_cpus("2"), Ok(Limit(Some(2000))));
        assert_eq!(limit_cpus("NONE"), Ok(Limit(None)));
        assert!(limit_cpus("0.0001").is_err());
        assert!(limit_cpus("inf").is_err());
    }
}

/// A command line given as the last arguments.
#[derive(clap::Args)]
pub struct CommandLine {
    /// The command line, as `bash -c <command>` reads it (several words are
    /// joined with spaces). Everything from the first word on belongs to
    /// the command; `--` before it is optional.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    words: Vec<String>,
}

impl CommandLine {
    /// The words joined.
    pub fn joined(&self) -> String {
        self.words.join(" ")
    }
}
