//! `dsh-bash-bench`: every benchmark scenario against its baseline, printed
//! as one table. The MCP round-trip scenario drives the `dsh-bash` binary
//! built beside this one (`cargo build --release -p dsh-bash-cli` first),
//! or the one `--mcp-binary` names.
//!
//! ```text
//! cargo build --release -p dsh-bash-cli && cargo run --release -p dsh-bash-bench
//! ```
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use dsh_bash_bench::{run_all, table, Options};

/// Measure every benchmark scenario against its baseline and print one
/// table (build with --release).
#[derive(Parser)]
#[command(name = "dsh-bash-bench", version)]
struct BenchArgs {
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
    /// The `dsh-bash` binary the MCP scenario serves with (default: the one
    /// beside this binary).
    #[arg(long, value_name = "PATH")]
    mcp_binary: Option<PathBuf>,
    /// Only these scenario groups (0 whole process … 9 terminals, 10 network allow-list,
    /// 11 the user's shell, 12 command rules, 13 a session's container, 14 a session's warm sandbox; repeatable or
    /// comma-separated; default: all).
    #[arg(long, value_name = "GROUP", value_delimiter = ',',
          value_parser = clap::value_parser!(u8).range(0..=14))]
    only: Vec<u8>,
    /// The image group 13 makes each session's container from (podman or
    /// docker); without it the group is skipped.
    #[arg(long, value_name = "IMAGE")]
    container_image: Option<String>,
}

fn main() -> ExitCode {
    // The allow-list rows re-execute this binary as their forwarder.
    dsh_net_proxy::forward::run_if_asked();
    let args = BenchArgs::parse();
    if cfg!(debug_assertions) {
        eprintln!("warning: this is a debug build; run `cargo run --release -p dsh-bash-bench`");
    }
    // The concurrency scenario holds three descriptors per task.
    if let Err(err) = dsh_bash_local::raise_open_file_limit() {
        eprintln!("warning: cannot raise the open-file limit: {err}");
    }
    let mcp_binary = args.mcp_binary.clone().or_else(|| {
        let beside = std::env::current_exe().ok()?.with_file_name("dsh-bash");
        if beside.exists() {
            Some(beside)
        } else {
            eprintln!(
                "warning: no dsh-bash beside this binary ({}); the MCP row is skipped: `cargo build --release -p dsh-bash-cli` first, or pass --mcp-binary",
                beside.display()
            );
            None
        }
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("Error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(bench(args, mcp_binary));
    ExitCode::SUCCESS
}

/// Runs the suite and prints the table.
async fn bench(args: BenchArgs, mcp_binary: Option<PathBuf>) {
    let options = Options {
        rounds: args.rounds.max(1),
        commands: args.commands.max(1),
        flood_bytes: args.flood_mib.max(1) << 20,
        tasks: args.tasks.max(1),
        mcp_binary,
        scratch: args.scratch.unwrap_or_else(std::env::temp_dir),
        only: args.only,
        container_image: args.container_image,
    };
    let rows = run_all(&options).await;
    print!("{}", table(&rows));
}
