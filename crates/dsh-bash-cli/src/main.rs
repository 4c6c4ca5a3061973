//! The `dsh-bash` binary: `run` executes one command the way the `bash`
//! tool would and prints the same text.
//!
//! ```text
//! dsh-bash run [--workdir D] [--timeout MS] [--sandbox MODE] [--workspace D] [--json] -- <command>
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::sync::Arc;

use dsh_bash::{BashExecRequest, BashExecutor};
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use dsh_bash_sandbox::{SandboxBashExecutor, SandboxConfig};
use dsh_sandbox::SandboxMode;
use dsh_sandbox_local::{Backend, LocalSandboxConfig, LocalSandboxProvider};
use tokio_util::sync::CancellationToken;

/// Exit status for "the command could not run at all".
const COULD_NOT_RUN: u8 = 125;

#[derive(Parser)]
#[command(
    name = "dsh-bash",
    version,
    about = "Bash execution for AI coding agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one command and print the result as the `bash` tool renders it.
    ///
    /// Exits with the command's exit code, 128+n when it was killed by
    /// signal n, 124 when it timed out, 125 when it could not run.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Working directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Timeout in milliseconds (default 120000, capped at 600000).
    #[arg(long, value_name = "MS")]
    timeout: Option<f64>,
    /// Confine the command's file effects: read-only, workspace-write or
    /// danger-full-access (default: unconfined, no sandbox at all).
    #[arg(long, value_name = "MODE")]
    sandbox: Option<SandboxMode>,
    /// The workspace writable under workspace-write (default: the workdir).
    #[arg(long, value_name = "DIR", requires = "sandbox")]
    workspace: Option<PathBuf>,
    /// Which sandbox backend to use: auto (the strongest usable), bwrap or
    /// landlock.
    #[arg(long, value_name = "BACKEND", default_value = "auto", value_parser = ["auto", "bwrap", "landlock"], requires = "sandbox")]
    sandbox_backend: String,
    /// Print the result as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The command line, run as `bash -c <command>` (several words are joined
    /// with spaces).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("Error: cannot start the async runtime: {err}");
            return ExitCode::from(COULD_NOT_RUN);
        }
    };
    let outcome = match cli.command {
        Command::Run(args) => runtime.block_on(run(args)),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("Error: {err:#}");
            ExitCode::from(COULD_NOT_RUN)
        }
    }
}

/// The executor `run` uses: unconfined, or confined when a mode is given.
fn compose(args: &RunArgs) -> anyhow::Result<Arc<dyn BashExecutor>> {
    let local = LocalConfig::default();
    let Some(mode) = args.sandbox else {
        return Ok(Arc::new(LocalBashExecutor::new(local)?));
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
    let workspace = args.workspace.clone().or_else(|| args.workdir.clone());
    let config = SandboxConfig {
        local,
        mode,
        workspace_root: workspace,
    };
    Ok(Arc::new(SandboxBashExecutor::new(
        config,
        Arc::new(provider),
    )?))
}

async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let executor = compose(&args)?;
    let cancel = CancellationToken::new();
    let mut request = BashExecRequest::new(args.command.join(" "));
    request.workdir = args.workdir;
    request.timeout_ms = args.timeout;
    request.cancel = Some(cancel.clone());
    let spec = executor.resolve(request)?;

    // Ctrl-C or SIGTERM stops the command (the whole tree) before we exit.
    let interrupts = tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        cancel.cancel();
    });
    let result = executor.run(spec).await;
    interrupts.abort();
    executor.shutdown().await;
    let result = result?;

    let mut stdout = std::io::stdout().lock();
    let text = if args.json {
        serde_json::to_string(&result).context("encoding the result as JSON")?
    } else {
        dsh_tool_bash::render_run_result(&result, false)
    };
    let printed = if text.ends_with('\n') {
        stdout.write_all(text.as_bytes())
    } else {
        writeln!(stdout, "{text}")
    };
    match printed.and_then(|()| stdout.flush()) {
        Ok(()) => {}
        // A closed pipe (`dsh-bash run … | head`) is a clean exit.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(err) => return Err(err).context("writing the result"),
    }
    let status = if result.aborted {
        130
    } else {
        result.shell_status()
    };
    Ok(ExitCode::from(u8::try_from(status & 0xff).unwrap_or(1)))
}
