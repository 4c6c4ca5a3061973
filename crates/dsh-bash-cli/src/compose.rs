//! Building the executor a front end uses from command-line options.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_bash::BashExecutor;
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use dsh_bash_sandbox::{SandboxBashExecutor, SandboxConfig};
use dsh_sandbox::{NetworkPolicy, ProtectedPaths, SandboxMode};
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
    #[arg(long, value_name = "DIR", requires = "sandbox")]
    pub workspace: Option<PathBuf>,
    /// Which sandbox backend to use: auto (the strongest usable), bwrap or
    /// landlock.
    #[arg(long, value_name = "BACKEND", default_value = "auto",
          value_parser = ["auto", "bwrap", "landlock"], requires = "sandbox")]
    pub sandbox_backend: String,
    /// Whether confined commands may use the network: off or on (default:
    /// off under read-only and workspace-write).
    #[arg(long, value_name = "POLICY", requires = "sandbox")]
    pub network: Option<NetworkPolicy>,
    /// Also keep this path read-only inside the workspace under
    /// workspace-write (relative to the workspace; repeatable). Protected
    /// by default: .git (and what git would run code from), .envrc,
    /// .vscode/{tasks,settings,launch}.json, .idea, .pre-commit-config.yaml,
    /// .dsh-bash, and in a home directory the shell's start-up files,
    /// .gitconfig, .config/git and .ssh.
    #[arg(long, value_name = "PATH", requires = "sandbox")]
    pub protect: Vec<String>,
    /// Stop protecting this path (one of the protected ones; repeatable),
    /// e.g. --unprotect .git to let commands commit.
    #[arg(long, value_name = "PATH", requires = "sandbox")]
    pub unprotect: Vec<String>,
    /// Also drop inherited environment variables whose name contains this
    /// (case-insensitive; repeatable). KEY, SECRET, TOKEN, PASSWORD, PASSWD
    /// and CREDENTIAL are always dropped.
    #[arg(long = "scrub", value_name = "PATTERN")]
    pub scrub: Vec<String>,
    /// Pass this inherited variable even if its name matches a scrub
    /// pattern (exact name; repeatable).
    #[arg(long = "keep-env", value_name = "NAME")]
    pub keep_env: Vec<String>,
    /// How commands are contained: auto (a cgroup per command where this
    /// host allows, else the process-tree walk) or process-tree.
    #[arg(long, value_name = "HOW", default_value = "auto",
          value_parser = ["auto", "process-tree"])]
    pub containment: String,
    /// The most bytes one stream's full-output (spill) file may hold; past
    /// it the file keeps the first bytes and the result says so.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_spill_bytes: u64,
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
        max_spill_bytes: args.max_spill_bytes,
        max_output_bytes: MODEL_OUTPUT_BYTES,
        containment: match args.containment.as_str() {
            "process-tree" => dsh_bash_local::ContainmentChoice::ProcessTree,
            _ => dsh_bash_local::ContainmentChoice::Auto,
        },
        // This binary has no children of its own besides its commands':
        // it can be the subreaper of their orphans.
        adopt_orphans: true,
        cwd: args
            .workdir
            .as_ref()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone())),
        ..LocalConfig::default()
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

/// The executor: unconfined, or confined when a mode is given.
pub fn executor(args: &ExecutorArgs, local: LocalConfig) -> anyhow::Result<Arc<dyn BashExecutor>> {
    Ok(compose(args, local, Vec::new())?.executor)
}

/// An executor and, when it confines, its provider.
pub struct Composed {
    pub executor: Arc<dyn BashExecutor>,
    pub provider: Option<Arc<LocalSandboxProvider>>,
}

/// The executor, keeping the server's `secrets` (absolute paths of its
/// token files) from confined commands where the backend can hide a file.
/// A secret inside the workspace is refused: a command could rewrite it.
pub fn compose(
    args: &ExecutorArgs,
    local: LocalConfig,
    secrets: Vec<PathBuf>,
) -> anyhow::Result<Composed> {
    let Some(mode) = args.sandbox else {
        return Ok(Composed {
            executor: Arc::new(LocalBashExecutor::new(local)?),
            provider: None,
        });
    };
    let backend = match args.sandbox_backend.as_str() {
        "bwrap" => Backend::Bwrap,
        "landlock" => Backend::Landlock,
        _ => Backend::Auto,
    };
    let provider = LocalSandboxProvider::new(LocalSandboxConfig {
        backend,
        ..LocalSandboxConfig::default()
    })?;
    let mut protected = ProtectedPaths::default();
    for path in &args.protect {
        protected.protect(path)?;
    }
    for path in &args.unprotect {
        protected.unprotect(path)?;
    }
    let config = SandboxConfig {
        workspace_root: args.workspace.clone().or_else(|| local.cwd.clone()),
        local,
        mode,
        network: args.network,
        protected,
        hidden: secrets.clone(),
    };
    let provider = Arc::new(provider);
    let executor = SandboxBashExecutor::new(config, Arc::clone(&provider) as _)?;
    if let Some(secret) = secrets
        .iter()
        .find(|secret| secret.starts_with(executor.workspace_root()))
    {
        anyhow::bail!(
            "the token file {} lies inside the workspace {}: a command could read or rewrite it; keep it outside (e.g. in ~/.config/dsh-bash/)",
            secret.display(),
            executor.workspace_root().display()
        );
    }
    Ok(Composed {
        executor: Arc::new(executor),
        provider: Some(provider),
    })
}
