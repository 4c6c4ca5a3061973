//! The `dsh-bash` binary.
//!
//! ```text
//! dsh-bash run [OPTIONS] -- COMMAND     one command, printed as the bash tool renders it
//! dsh-bash mcp [OPTIONS]                the tools over MCP (stdio, or --listen ADDR for HTTP)
//! dsh-bash doctor [--json]              what this host gives the sandbox, with fixes
//! dsh-bash rules check -- COMMAND       what the command rules decide
//! dsh-bash config show                  the effective policy and where each value came from
//! dsh-bash completions SHELL            a completion script
//! dsh-bash manpage                      the man page (roff)
//! ```
//!
//! Every option: `dsh-bash help run`, `dsh-bash help mcp`, and the book's
//! policy reference (docs/src/policy.md).
//!
//! The benchmark suite is its own binary: `cargo run --release -p
//! dsh-bash-bench`.
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod compose;
mod doctor;
mod doctor_sandbox;
mod mcp;
mod policy;
mod run;

/// Starts one blocking thread that stays (see the runtime's keep-alive).
/// Where even that is refused the process runs on: `spawn_blocking`'s
/// panic is caught here, and later ones start their thread then.
async fn warm_blocking_threads() {
    let started = std::panic::catch_unwind(|| tokio::task::spawn_blocking(|| ()));
    match started {
        Ok(job) => {
            let _ = job.await;
        }
        Err(_) => tracing::warn!("cannot start a blocking thread now"),
    }
}

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
    Run(run::RunArgs),
    /// Serve the bash, bash_output, bash_write and bash_kill tools over the Model
    /// Context Protocol on stdin/stdout (one connection = one session), or
    /// over Streamable HTTP with --listen.
    Mcp(mcp::McpArgs),
    /// Command rules: `rules check -- COMMAND` prints, as JSON, what the
    /// policy's rules decide for the command (allow, ask, deny, or default
    /// when none applies), each simple command found with the rule it
    /// matched and why an unknowable part asks. Exits 0 (allow or
    /// default), 1 (ask) or 2 (deny).
    #[command(subcommand)]
    Rules(RulesCommand),
    /// The policy file: `config show` prints the effective policy, each
    /// value with the file and line it came from.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// What this host gives and what it does not: each sandbox backend,
    /// the containment, the limits, the kernel's audit, the user's shell,
    /// the temp directory; with the fix for each that falls short.
    Doctor(doctor::DoctorArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish or
    /// powershell) to stdout.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout.
    Manpage,
    /// The idle process a --container session's container keeps running
    /// (its init's only child), until the session's server inside is gone.
    #[command(name = "container-idle", hide = true)]
    ContainerIdle,
}

#[derive(Subcommand)]
enum RulesCommand {
    /// What the rules decide for one command.
    Check {
        #[command(flatten)]
        policy: policy::PolicyArgs,
        #[command(flatten)]
        command: compose::CommandLine,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// The effective policy and where each value came from.
    Show {
        #[command(flatten)]
        policy: policy::PolicyArgs,
    },
}

/// Diagnostics go to stderr (stdout carries results and, for `mcp`, the
/// protocol itself): warnings and errors by default, more with `RUST_LOG`
/// (`RUST_LOG=debug`, `RUST_LOG=dsh_bash_local=trace,warn`). A `RUST_LOG`
/// that cannot be parsed is reported and the default used.
fn install_diagnostics() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;

    let default = Targets::new().with_default(LevelFilter::WARN);
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => match spec.parse::<Targets>() {
            Ok(targets) => targets,
            Err(err) => {
                eprintln!("warning: ignoring RUST_LOG={spec:?} ({err}); expected e.g. \"debug\" or \"dsh_bash_local=trace,warn\"");
                default
            }
        },
        _ => default,
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true);
    let _ = tracing_subscriber::registry()
        .with(stderr.with_filter(filter))
        .try_init();
}

/// Writes `bytes` to stdout; a closed pipe is a clean end.
fn print(bytes: &[u8]) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(err) => Err(anyhow::Error::new(err).context("writing to stdout")),
    }
}

/// The completion script for `shell`.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    use clap::CommandFactory as _;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "dsh-bash", &mut script);
    print(&script)
}

/// The man page, as roff.
fn manpage() -> anyhow::Result<ExitCode> {
    use clap::CommandFactory as _;
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .map_err(|err| anyhow::anyhow!("rendering the man page: {err}"))?;
    print(&page)
}

fn main() -> ExitCode {
    // The server inside a --container session's container: not dumpable,
    // so a command (same user, no capabilities) can neither trace it nor
    // write to its descriptors through /proc.
    if std::env::var_os(dsh_bash_container::NON_DUMPABLE).is_some() {
        let _ =
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    }
    // Run as the network allow-list's forwarder inside a sandbox's network
    // namespace: that, and nothing else.
    dsh_net_proxy::forward::run_if_asked();
    // Run as the host-death watchdog of another dsh-bash: that, and
    // nothing else.
    dsh_bash_local::run_watchdog_if_asked();
    // This binary is its own watchdog (no shell per host, no polling).
    dsh_bash_local::use_watchdog_program("/proc/self/exe");
    let cli = Cli::parse();
    install_diagnostics();
    if matches!(cli.command, Command::Run(_) | Command::Mcp(_)) {
        // Forked while this process has one thread: the watchdog costs a
        // copy-on-write fork, not a second start of this binary.
        if let Err(err) = dsh_bash_local::fork_watchdog() {
            tracing::debug!(%err, "the watchdog is executed at the host's start instead");
        }
    }
    // Reading the policy needs no runtime, no descriptors and no sweep.
    let read_only = match &cli.command {
        Command::Rules(RulesCommand::Check { policy, command }) => {
            Some(policy::check(policy, command))
        }
        Command::Config(ConfigCommand::Show { policy }) => Some(policy::show(policy)),
        Command::Completions { shell } => Some(completions(*shell)),
        Command::Manpage => Some(manpage()),
        Command::ContainerIdle => {
            dsh_bash_container::idle();
            Some(Ok(ExitCode::SUCCESS))
        }
        Command::Run(_) | Command::Mcp(_) | Command::Doctor(_) => None,
    };
    if let Some(outcome) = read_only {
        return outcome.unwrap_or_else(|err| {
            eprintln!("Error: {err:#}");
            ExitCode::from(COULD_NOT_RUN)
        });
    }
    // Every running command holds three descriptors; a failure here only
    // lowers how many can run at once.
    if let Err(err) = dsh_bash_local::raise_open_file_limit() {
        tracing::debug!(%err, "cannot raise the open-file limit");
    }
    // Blocking threads, once started, stay: tokio's `spawn_blocking` panics
    // when no blocking thread exists and the OS refuses a new one (a fork
    // bomb at the user's process ceiling); with these kept it waits for
    // one of them instead.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_keep_alive(std::time::Duration::from_secs(u64::from(u32::MAX)))
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("Error: cannot start the async runtime: {err}");
            return ExitCode::from(COULD_NOT_RUN);
        }
    };
    runtime.block_on(warm_blocking_threads());
    let outcome = match cli.command {
        Command::Run(args) => runtime.block_on(run::run(args)),
        Command::Mcp(args) => runtime.block_on(mcp::serve(args)),
        Command::Doctor(args) => runtime.block_on(doctor::doctor(args)),
        Command::Rules(_)
        | Command::Config(_)
        | Command::Completions { .. }
        | Command::Manpage
        | Command::ContainerIdle => Ok(ExitCode::SUCCESS),
    };
    // Every command has been stopped by now; do not wait for blocking
    // threads (a stdin read never returns on its own).
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("Error: {err:#}");
            ExitCode::from(COULD_NOT_RUN)
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every flag of `run` and `mcp` has a name of its own (clap checks it
    /// only when the command is built, so a clash would stop the binary).
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
