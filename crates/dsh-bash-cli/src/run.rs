//! `dsh-bash run`: one command, the `bash` tool's text, the command's status.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use dsh_bash::BashExecRequest;
use tokio_util::sync::CancellationToken;

use crate::compose::{self, CommandLine, ExecutorArgs};

/// Arguments of `run`.
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    executor: ExecutorArgs,
    /// Timeout in milliseconds (default 120000, capped at 600000).
    #[arg(long, value_name = "MS")]
    timeout: Option<f64>,
    /// Print the result as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Run the command in a terminal of its own (120x40; one output
    /// stream), as the bash tool's tty does.
    #[arg(long)]
    tty: bool,
    #[command(flatten)]
    command: CommandLine,
}

/// Runs the command; the exit code mirrors the command's.
pub async fn run(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let policy = crate::policy::load(&args.executor)?;
    crate::policy::apply(&mut args.executor, &policy)?;
    let mut local = compose::local_config(&args.executor);
    compose::sweep_containers(&args.executor).await?;
    // Asked for on one command: taken first, then the command runs (not in
    // a container: the server inside runs the image's bash as it is).
    let snapshot = compose::snapshot_source(&args.executor, false)?
        .filter(|_| args.executor.container.is_none());
    if let Some(source) = snapshot {
        let slot = dsh_bash_local::SnapshotSlot::pending();
        compose::take_snapshot(
            compose::backend_of(&args.executor),
            &local,
            source,
            std::sync::Arc::clone(&slot),
        )
        .await;
        local.shell_snapshot = Some(slot);
    }
    let swept = local.clone();
    let executor = compose::executor(&args.executor, local)?;
    // What dead hosts left is swept before the command, not beside it: a
    // run under a low descriptor limit must not share it with the sweep.
    let _ = tokio::task::spawn_blocking(move || dsh_bash_local::sweep_dead_hosts(&swept)).await;
    let cancel = CancellationToken::new();
    let mut request = BashExecRequest::new(args.command.joined());
    request.timeout = args
        .timeout
        .map(|ms| compose::millis("timeout", ms))
        .transpose()?;
    request.cancel = Some(cancel.clone());
    if args.tty {
        request.terminal = Some(dsh_bash::TerminalSize::default());
    }
    let spec = executor.resolve(request)?;

    // Ctrl-C or SIGTERM stops the command (the whole tree) before we exit.
    let interrupts = dsh_bash_mcp::stop_on_signals(cancel);
    let result = executor.run(spec).await;
    interrupts.abort();
    executor.shutdown().await;
    let result = result?;

    let text = if args.json {
        serde_json::to_string(&result).context("encoding the result as JSON")?
    } else {
        let heads = dsh_tool_bash::Heads::read(&result).await;
        dsh_tool_bash::render_run_result_with(&result, &heads)
    };
    let mut stdout = std::io::stdout().lock();
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
        shell_status(&result)
    };
    Ok(ExitCode::from(u8::try_from(status & 0xff).unwrap_or(1)))
}

/// The exit status a terminal would report: the exit code, 128+n for a
/// death by signal n, 124 for a timeout.
fn shell_status(result: &dsh_bash::BashRunResult) -> i32 {
    if result.timed_out {
        return 124;
    }
    if let Some(code) = result.exit_code {
        return code;
    }
    result
        .signal
        .as_deref()
        .and_then(dsh_bash_local::signal_number)
        .map_or(1, |n| 128 + n)
}
