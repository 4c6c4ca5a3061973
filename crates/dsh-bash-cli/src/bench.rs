//! `dsh-bash bench`: the benchmark suite, with this binary as the MCP server
//! of the round-trip scenario.

use std::path::PathBuf;
use std::process::ExitCode;

use dsh_bash_bench::{run_all, table, Options};

/// Arguments of `bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Repetitions of each scenario.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Sequential commands per round in the per-command scenarios.
    #[arg(long, default_value_t = 200)]
    commands: usize,
    /// MiB written in the throughput scenario (half per stream in the
    /// both-streams scenario).
    #[arg(long, default_value_t = 1024)]
    flood_mib: u64,
    /// Background tasks in the concurrency scenario.
    #[arg(long, default_value_t = 1000)]
    tasks: usize,
    /// Where spill and baseline files go (default: the temp dir).
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
}

/// Runs the suite and prints the table.
pub async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: this is a debug build; run `cargo run --release -p dsh-bash-cli -- bench`"
        );
    }
    let options = Options {
        rounds: args.rounds.max(1),
        commands: args.commands.max(1),
        flood_bytes: args.flood_mib.max(1) << 20,
        tasks: args.tasks.max(1),
        mcp_binary: std::env::current_exe().ok(),
        scratch: args.scratch.unwrap_or_else(std::env::temp_dir),
    };
    let rows = run_all(&options).await;
    print!("{}", table(&rows));
    Ok(ExitCode::SUCCESS)
}
