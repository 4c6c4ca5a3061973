//! `dsh-bash mcp`: the flags, the executor they compose, and the server of
//! [`dsh_bash_mcp`] on stdio or (`--listen`) over Streamable HTTP.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash_mcp::http::{HttpOptions, Listening};
use dsh_bash_mcp::Hub;

use crate::compose::{self, ExecutorArgs};

/// Arguments of `mcp`.
#[derive(clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    executor: ExecutorArgs,
    /// Default foreground timeout in milliseconds (default 120000).
    #[arg(long, value_name = "MS")]
    timeout: Option<f64>,
    /// Cap on any requested timeout in milliseconds (default 600000).
    #[arg(long, value_name = "MS")]
    max_timeout: Option<f64>,
    /// Bytes of output a result shows the model: a stream no longer is shown
    /// whole, a longer one is spilled to a file and shown as its head and
    /// tail; two long streams share the budget (default 24000).
    #[arg(long, value_name = "BYTES")]
    max_output_bytes: Option<u64>,
    /// Commands one session may have running at once: foreground calls in
    /// flight plus running background tasks. Past it a `bash` call is
    /// refused with a message saying so (default 32).
    #[arg(long, value_name = "N")]
    max_commands: Option<u64>,
    /// Hand every foreground command still running after this many
    /// milliseconds over as a background task of its session instead of
    /// waiting for its timeout (a call's yieldMs wins). Off by default.
    #[arg(long, value_name = "MS")]
    yield_ms: Option<f64>,
    /// Start every call in the directory given at start (or in its
    /// `workdir`), instead of where the session's last command's `cd`
    /// left it.
    #[arg(long)]
    no_persist_cwd: bool,
    /// List in each result the files a command created, modified or
    /// deleted in the workspace (--workspace, else --workdir; none without
    /// either), unless it has more than this many directories (0: never).
    /// Watched with inotify, set up once.
    #[arg(long, value_name = "N", default_value_t = dsh_bash_local::ChangeTracking::MAX_DIRS)]
    changes_max_dirs: usize,
    /// Serve MCP over Streamable HTTP on this address (e.g.
    /// `127.0.0.1:8700`) instead of stdio. Every request needs the bearer
    /// token (see --token-file).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// Only with --listen.
    #[command(flatten)]
    http: HttpOptions,
}

/// The server's own numbers: each flag, else the policy's value, else
/// the default.
struct Settled {
    timeout_ms: f64,
    max_timeout_ms: f64,
    output_bytes: u64,
    max_commands: u64,
    yield_ms: Option<f64>,
}

impl McpArgs {
    /// The policy's timeouts, output budget, command count and yield
    /// wherever no flag gave one.
    fn settle(&self, policy: &dsh_policy::Policy) -> Settled {
        use crate::policy::number;
        Settled {
            timeout_ms: number(self.timeout, policy.timeout_ms.as_ref(), 120_000.0),
            max_timeout_ms: number(self.max_timeout, policy.max_timeout_ms.as_ref(), 600_000.0),
            output_bytes: number(
                self.max_output_bytes,
                policy.output_bytes.as_ref(),
                compose::MODEL_OUTPUT_BYTES,
            ),
            max_commands: number(self.max_commands, policy.commands.as_ref(), 32),
            yield_ms: self.yield_ms.or(policy.yield_ms.as_ref().map(|s| s.value)),
        }
    }
}

/// The longest the server waits for the start-up sweep before serving.
const START_SWEEP_BOUND: Duration = Duration::from_secs(5);

/// Serves MCP until the connection closes (stdio) or a signal arrives,
/// then stops every command it started.
pub async fn serve(mut args: McpArgs) -> anyhow::Result<ExitCode> {
    let policy = crate::policy::load(&args.executor)?;
    crate::policy::apply(&mut args.executor, &policy)?;
    let settled = args.settle(&policy);
    let rules = crate::policy::FileRules::of(&policy)?
        .map(|rules| Arc::new(rules) as Arc<dyn dsh_tool_bash::RuleBook>);
    let mut local = local_settings(&args, &settled)?;
    let (default_timeout, max_timeout) = (local.default_timeout, local.max_timeout);
    let yield_after = settled
        .yield_ms
        .map(|ms| compose::millis("yield-ms", ms))
        .transpose()?;
    // Listening is checked before anything starts.
    let listening = listening_of(&args, max_timeout)?;
    let cwd = local.cwd.clone().or_else(|| std::env::current_dir().ok());
    // In a container the session's directory is the path mounted there.
    let cwd = match (&args.executor.container, cwd) {
        (Some(_), Some(dir)) => Some(std::fs::canonicalize(&dir).unwrap_or(dir)),
        (_, cwd) => cwd,
    };
    let secrets: Vec<_> = listening
        .as_ref()
        .and_then(|l| l.token_file().map(ToOwned::to_owned))
        .into_iter()
        .collect();
    // In a container the server inside runs the image's own bash, and the
    // host watches no workspace of its own.
    let in_container = args.executor.container.is_some();
    if in_container && listening.is_some() {
        anyhow::bail!("--container makes one container per session, and --listen serves many sessions from one server: serve --container over stdio (one server per agent)");
    }
    // Dead servers' containers go beside the session, not before it: an
    // MCP client waits for the handshake.
    let sweeping = args.executor.clone();
    tokio::spawn(async move {
        if let Err(err) = compose::sweep_containers(&sweeping).await {
            tracing::warn!("dead servers' containers were not swept: {err:#}");
        }
    });
    let snapshot_loaded = !in_container && start_snapshot(&args, &mut local)?;
    if !in_container {
        track_changes(&args, &mut local);
    }
    let swept = local.clone();
    let composed = compose::compose(&args.executor, local, secrets, true)?;
    sweep_at_start(swept).await;
    // On stdio the client is the person's own; over HTTP any token holder
    // would answer its own approval questions.
    // A container's mode and network are fixed for its life: nothing to
    // ask a person for.
    let escalation = (listening.is_none() || args.http.allows_escalation()) && !in_container;
    let hub = Arc::new(
        Hub::builder(composed.executor)
            .cwd(cwd)
            .timeouts(default_timeout, max_timeout)
            .max_commands(usize::try_from(settled.max_commands).unwrap_or(usize::MAX))
            .escalation(escalation)
            .yield_after(yield_after)
            .persist_cwd(!args.no_persist_cwd)
            .snapshot(snapshot_loaded)
            .changes(composed.tracks_changes.unwrap_or(false))
            .rules(rules)
            .build(),
    );
    // The binary owns the process's signals; the library only stops when
    // told.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let signals = dsh_bash_mcp::stop_on_signals(shutdown.clone());
    match listening {
        Some(listening) => {
            let bound = listening.bind().await?;
            eprintln!("dsh-bash: listening on {}", bound.url());
            dsh_bash_mcp::http::serve(bound, hub, shutdown).await?;
        }
        None => dsh_bash_mcp::serve_stdio(hub, shutdown).await?,
    }
    signals.abort();
    Ok(ExitCode::SUCCESS)
}

/// The executor's settings from the flags: timeouts, the output budget, a
/// spill directory that goes with the server.
fn local_settings(
    args: &McpArgs,
    settled: &Settled,
) -> anyhow::Result<dsh_bash_local::LocalConfig> {
    let mut local = compose::local_config(&args.executor);
    let max_timeout = compose::millis("max-timeout", settled.max_timeout_ms)?;
    local.default_timeout = compose::millis("timeout", settled.timeout_ms)?.min(max_timeout);
    local.max_timeout = max_timeout;
    local.max_output_bytes = settled.output_bytes;
    // A session's full-output paths mean nothing once the server ends.
    local.discard_spill_on_shutdown = true;
    if settled.max_commands == 0 {
        anyhow::bail!("--max-commands must be at least 1");
    }
    Ok(local)
}

/// `--listen`'s options checked and its tokens loaded; a token generated
/// for the person is told on stderr, once.
fn listening_of(args: &McpArgs, max_timeout: Duration) -> anyhow::Result<Option<Listening>> {
    let Some(address) = args.listen else {
        return Ok(None);
    };
    let listening = Listening::prepare(address, &args.http, max_timeout)?;
    if let Some(notice) = listening.notice() {
        eprintln!("dsh-bash: {notice}");
    }
    Ok(Some(listening))
}

/// The user's shell, taken in the background, bounded; commands run
/// without it until it is ready. True if one is being taken.
fn start_snapshot(args: &McpArgs, local: &mut dsh_bash_local::LocalConfig) -> anyhow::Result<bool> {
    let Some(source) = compose::snapshot_source(&args.executor, true)? else {
        return Ok(false);
    };
    let slot = dsh_bash_local::SnapshotSlot::pending();
    local.shell_snapshot = Some(Arc::clone(&slot));
    let capture = local.clone();
    let backend = compose::backend_of(&args.executor);
    tokio::spawn(async move { compose::take_snapshot(backend, &capture, source, slot).await });
    Ok(true)
}

/// The workspace named (--workspace, else --workdir) has its changes
/// listed; a server started in whatever directory it was started in lists
/// none.
fn track_changes(args: &McpArgs, local: &mut dsh_bash_local::LocalConfig) {
    if args.changes_max_dirs == 0 {
        return;
    }
    let root = args
        .executor
        .workspace
        .clone()
        .or_else(|| local.cwd.clone());
    local.changes = root.map(|root| dsh_bash_local::ChangeTracking {
        root,
        max_dirs: args.changes_max_dirs,
    });
}

/// What dead hosts left (their cgroups, processes killed first; their
/// spill directories) is gone before the first request is taken, within a
/// bound. (Their private TMPDIRs go by the sandboxing executor's own sweep,
/// begun when it is made and awaited by its first private TMPDIR.)
async fn sweep_at_start(swept: dsh_bash_local::LocalConfig) {
    let sweep = tokio::task::spawn_blocking(move || {
        dsh_bash_local::sweep_dead_hosts(&swept);
    });
    if tokio::time::timeout(START_SWEEP_BOUND, sweep)
        .await
        .is_err()
    {
        tracing::warn!("the sweep of dead hosts' leftovers is still running after {START_SWEEP_BOUND:?}; serving anyway");
    }
}
