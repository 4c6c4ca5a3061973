//! The scenarios of the suite, each with its baseline.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use dsh_bash::{BashExecRequest, BashExecutor, BashTaskId, NetworkPolicy, SandboxMode};
use dsh_bash_local::{ContainmentChoice, LocalBashExecutor, LocalConfig};
use dsh_bash_sandbox::{CachePlace, SandboxBashExecutor, SandboxConfig};
use dsh_sandbox::ProtectedPaths;
use dsh_sandbox_local::{Backend, LocalSandboxConfig, LocalSandboxProvider};

use crate::mcp_client::McpClient;
use crate::measure::{ms, open_fds, peak_rss_kib, reset_peak_rss, rss_kib, time_ms, Row, Stats};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// How much work each scenario does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Repetitions of each scenario (median and spread are over these).
    pub rounds: usize,
    /// Sequential commands per round in the per-command scenarios.
    pub commands: usize,
    /// Bytes in the throughput scenario (both-streams uses half per stream).
    pub flood_bytes: u64,
    /// Background tasks in the concurrency scenario.
    pub tasks: usize,
    /// The `dsh-bash` binary for the MCP round trip (skipped when absent).
    pub mcp_binary: Option<PathBuf>,
    /// Where spill files and baseline files go (one filesystem for both).
    pub scratch: PathBuf,
    /// Only these scenario groups (0–14); empty: all.
    pub only: Vec<u8>,
    /// The image of group 13 (a session's own container); skipped when
    /// absent.
    pub container_image: Option<String>,
}

impl Options {
    /// True if scenario group `group` is to run.
    pub fn runs(&self, group: u8) -> bool {
        self.only.is_empty() || self.only.contains(&group)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rounds: 5,
            commands: 200,
            flood_bytes: GIB,
            tasks: 1000,
            mcp_binary: None,
            scratch: std::env::temp_dir(),
            only: Vec::new(),
            container_image: None,
        }
    }
}

pub(crate) fn local(options: &Options) -> LocalConfig {
    LocalConfig {
        spill_parent: Some(options.scratch.clone()),
        ..LocalConfig::default()
    }
}

pub(crate) fn spec(executor: &dyn BashExecutor, command: &str) -> dsh_bash::BashExecSpec {
    executor
        .resolve(BashExecRequest::new(command))
        .unwrap_or_else(|err| panic!("cannot resolve {command:?}: {err}"))
}

/// Per-command wall time of `n` sequential runs through `executor`.
pub(crate) async fn per_command(executor: &dyn BashExecutor, command: &str, n: usize) -> f64 {
    let spec = spec(executor, command);
    let started = Instant::now();
    for _ in 0..n {
        if let Err(err) = executor.run(spec.clone()).await {
            panic!("{command:?} failed: {err}");
        }
    }
    ms(started.elapsed()) / n as f64
}

/// Per-command wall time of `n` plain `bash -c` spawns with collected output.
async fn per_plain_command(command: &str, n: usize) -> f64 {
    let command = command.to_owned();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        for _ in 0..n {
            let _ = Command::new("bash").args(["-c", &command]).output();
        }
        ms(started.elapsed()) / n as f64
    })
    .await
    .unwrap_or(f64::NAN)
}

/// Runs `work` with the RSS peak reset first; returns its output and the
/// peak growth in MiB.
async fn with_peak<F: std::future::Future>(work: F) -> (F::Output, f64) {
    reset_peak_rss();
    let before = rss_kib();
    let out = work.await;
    let grown = peak_rss_kib().saturating_sub(before) as f64 / 1024.0;
    (out, grown)
}

async fn overhead(options: &Options, label: &str, command: &str) -> Row {
    overhead_with(options, label, command, ContainmentChoice::Auto).await
}

async fn overhead_with(
    options: &Options,
    label: &str,
    command: &str,
    containment: ContainmentChoice,
) -> Row {
    let executor = LocalBashExecutor::new(LocalConfig {
        containment,
        ..local(options)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mechanism = executor
        .run(spec(&executor, "true"))
        .await
        .ok()
        .and_then(|r| r.containment)
        .map_or("unknown", |c| match c {
            dsh_bash::Containment::Cgroup => "cgroup",
            _ => "process-tree",
        });
    // Warm both paths (spawner thread, page cache).
    per_command(&executor, command, 5).await;
    per_plain_command(command, 5).await;
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let ((), peak) = with_peak(async {
        for _ in 0..options.rounds {
            ours.push(per_command(&executor, command, options.commands).await);
            base.push(per_plain_command(command, options.commands).await);
        }
    })
    .await;
    executor.shutdown().await;
    Row {
        scenario: label.into(),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms/cmd",
        peak_rss_mib: Some(peak),
        note: format!(
            "containment: {mechanism}; {} sequential runs/round vs Command::output(); target <= 1.10x",
            options.commands
        ),
    }
}

/// Flushes dirty pages so each timed write starts from the same disk state
/// (the previous round's writeback would otherwise land on the next one).
fn settle_disk() {
    let _ = Command::new("sync").status();
}

/// Runs `command` once through `executor` and the baseline `script` once,
/// throws both away and removes `files`.
async fn warm_up(executor: &LocalBashExecutor, command: &str, script: String, files: &[&Path]) {
    if let Ok(result) = executor.run(spec(executor, command)).await {
        for stream in [&result.stdout, &result.stderr] {
            if let Some(path) = &stream.spill_path {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    let _ = tokio::task::spawn_blocking(move || shell_ms(&script)).await;
    for file in files {
        let _ = std::fs::remove_file(file);
    }
}

fn shell_ms(script: &str) -> f64 {
    let started = Instant::now();
    let _ = Command::new("bash").args(["-c", script]).status();
    ms(started.elapsed())
}

async fn throughput(options: &Options) -> Vec<Row> {
    let executor = LocalBashExecutor::new(local(options)).unwrap_or_else(|e| panic!("{e}"));
    let bytes = options.flood_bytes;
    let target = options.scratch.join("dsh-bench-baseline");
    let command = format!("head -c {bytes} /dev/zero");
    let (mut ours, mut to_file, mut to_null, mut peaks) = (vec![], vec![], vec![], vec![]);
    let mut spilled_ok = true;
    // A discarded warm-up of both sides: the first gigabyte through the page
    // cache pays for reclaiming it.
    warm_up(
        &executor,
        &command,
        format!("{command} > {}", target.display()),
        &[&target],
    )
    .await;
    for _ in 0..options.rounds {
        settle_disk();
        let ((elapsed, result), peak) =
            with_peak(time_ms(executor.run(spec(&executor, &command)))).await;
        peaks.push(peak);
        ours.push(elapsed);
        if let Ok(result) = result {
            let spill = result.stdout.spill_path.clone();
            let size = spill
                .as_ref()
                .and_then(|p| std::fs::metadata(p).ok())
                .map(|m| m.len());
            spilled_ok &= size == Some(bytes);
            if let Some(path) = spill {
                let _ = std::fs::remove_file(path);
            }
        } else {
            spilled_ok = false;
        }
        let script = format!("{command} > {}", target.display());
        settle_disk();
        to_file.push(
            tokio::task::spawn_blocking(move || shell_ms(&script))
                .await
                .unwrap_or(f64::NAN),
        );
        let _ = std::fs::remove_file(&target);
        let script = format!("{command} > /dev/null");
        to_null.push(
            tokio::task::spawn_blocking(move || shell_ms(&script))
                .await
                .unwrap_or(f64::NAN),
        );
    }
    executor.shutdown().await;
    let peak = peaks.iter().copied().fold(0.0, f64::max);
    let mib = bytes / MIB;
    vec![
        Row {
            scenario: format!("2a {mib} MiB stdout, spilled (vs > file)"),
            ours: Stats::of(ours.clone()),
            baseline: Some(Stats::of(to_file)),
            unit: "ms",
            peak_rss_mib: Some(peak),
            note: format!(
                "spill file complete: {}; target <= 1.25x, RSS growth < 32 MiB",
                if spilled_ok { "yes" } else { "NO" }
            ),
        },
        Row {
            scenario: format!("2b {mib} MiB stdout, spilled (vs > /dev/null)"),
            ours: Stats::of(ours),
            baseline: Some(Stats::of(to_null)),
            unit: "ms",
            peak_rss_mib: Some(peak),
            note: "we always keep the complete stream on disk; /dev/null writes nothing".into(),
        },
    ]
}

async fn both_streams(options: &Options) -> Row {
    let executor = LocalBashExecutor::new(local(options)).unwrap_or_else(|e| panic!("{e}"));
    let half = options.flood_bytes / 2;
    let command = format!("head -c {half} /dev/zero & head -c {half} /dev/zero >&2; wait");
    let (a, b) = (
        options.scratch.join("dsh-bench-a"),
        options.scratch.join("dsh-bench-b"),
    );
    let baseline = format!(
        "head -c {half} /dev/zero > {} & head -c {half} /dev/zero > {}; wait",
        a.display(),
        b.display()
    );
    let (mut ours, mut base, mut peaks) = (vec![], vec![], vec![]);
    let mut complete = true;
    warm_up(&executor, &command, baseline.clone(), &[&a, &b]).await;
    for _ in 0..options.rounds {
        settle_disk();
        let ((elapsed, result), peak) =
            with_peak(time_ms(executor.run(spec(&executor, &command)))).await;
        ours.push(elapsed);
        peaks.push(peak);
        if let Ok(result) = result {
            for stream in [&result.stdout, &result.stderr] {
                let size = stream
                    .spill_path
                    .as_ref()
                    .and_then(|p| std::fs::metadata(p).ok());
                complete &= size.map(|m| m.len()) == Some(half);
                if let Some(path) = &stream.spill_path {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        let script = baseline.clone();
        settle_disk();
        base.push(
            tokio::task::spawn_blocking(move || shell_ms(&script))
                .await
                .unwrap_or(f64::NAN),
        );
        let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
    }
    executor.shutdown().await;
    Row {
        scenario: format!("3 both streams, {} MiB each (vs 2 files)", half / MIB),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms",
        peak_rss_mib: Some(peaks.iter().copied().fold(0.0, f64::max)),
        note: format!(
            "both spill files complete: {}",
            if complete { "yes" } else { "NO" }
        ),
    }
}

/// The baseline of rows 4a and 4b: `n` plain `bash -c` children started
/// inline; (ms until all started, ms until all ended).
async fn concurrency_baseline(n: usize, command: &'static str) -> (f64, f64) {
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let children: Vec<_> = (0..n)
            .filter_map(|_| {
                Command::new("bash")
                    .args(["-c", command])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .ok()
            })
            .collect();
        let all_started = ms(started.elapsed());
        for child in children {
            let _ = child.wait_with_output();
        }
        (all_started, ms(started.elapsed()))
    })
    .await
    .unwrap_or((f64::NAN, f64::NAN))
}

async fn concurrency(options: &Options) -> Vec<Row> {
    let executor = LocalBashExecutor::new(LocalConfig {
        retain_finished_tasks: options.tasks.max(1),
        ..local(options)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let n = options.tasks;
    let command = "sleep 2; echo done";
    let rounds = options.rounds.clamp(1, 3);
    let (mut start_ours, mut settle_ours, mut start_base, mut settle_base) =
        (vec![], vec![], vec![], vec![]);
    let (mut per_task_kib, mut fds_leaked, mut all_done) = (0.0f64, 0isize, true);
    for _ in 0..rounds {
        let fds_before = open_fds();
        reset_peak_rss();
        let rss_before = rss_kib();
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(n);
        for _ in 0..n {
            match executor.start(spec(&executor, command)).await {
                Ok(task) => tasks.push(task),
                Err(err) => panic!("start failed: {err}"),
            }
        }
        let all_started = ms(started.elapsed());
        for task in &tasks {
            task.settled().await;
        }
        let settled = ms(started.elapsed());
        per_task_kib =
            per_task_kib.max(peak_rss_kib().saturating_sub(rss_before) as f64 / n as f64);
        for task in &tasks {
            let read = executor.read_output(&task.id, None);
            all_done &= read.is_ok_and(|r| r.delta == "done\n");
        }
        start_ours.push(all_started);
        settle_ours.push(settled);
        fds_leaked = fds_leaked.max(open_fds() as isize - fds_before as isize);

        let base = concurrency_baseline(n, command).await;
        start_base.push(base.0);
        settle_base.push(base.1);
    }
    executor.shutdown().await;
    vec![
        Row {
            scenario: format!("4a start {n} background tasks"),
            ours: Stats::of(start_ours),
            baseline: Some(Stats::of(start_base)),
            unit: "ms",
            peak_rss_mib: Some(per_task_kib * n as f64 / 1024.0),
            note: format!(
                "start() returns before the fork; baseline forks inline. {per_task_kib:.1} KiB RSS/task (target < 64)"
            ),
        },
        Row {
            scenario: format!("4b {n} x `sleep 2; echo done`: first start -> all settled"),
            ours: Stats::of(settle_ours),
            baseline: Some(Stats::of(settle_base)),
            unit: "ms",
            peak_rss_mib: None,
            note: format!(
                "all read \"done\": {}; fds leaked after settle: {fds_leaked}; target: last sleep end + < 1000 ms",
                if all_done { "yes" } else { "NO" }
            ),
        },
    ]
}

async fn running(executor: &LocalBashExecutor, id: &BashTaskId) {
    while !executor
        .read_output(id, None)
        .is_ok_and(|r| r.delta.contains("ready"))
    {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

async fn kill_latency(options: &Options) -> Vec<Row> {
    let grace = std::time::Duration::from_secs(1);
    let grace_ms = grace.as_secs_f64() * 1000.0;
    let executor = LocalBashExecutor::new(LocalConfig {
        grace,
        ..local(options)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let kills = options.rounds * 4;
    let mut plain = vec![];
    let mut base = vec![];
    for _ in 0..kills {
        let task = executor
            .start(spec(&executor, "echo ready; exec sleep 1000"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        running(&executor, &task.id).await;
        let (elapsed, _) = time_ms(executor.kill(&task.id)).await;
        plain.push(elapsed);
        base.push(
            tokio::task::spawn_blocking(|| {
                let Ok(mut child) = Command::new("bash").args(["-c", "exec sleep 1000"]).spawn()
                else {
                    return f64::NAN;
                };
                let started = Instant::now();
                let _ = child.kill();
                let _ = child.wait();
                ms(started.elapsed())
            })
            .await
            .unwrap_or(f64::NAN),
        );
    }
    let mut trapped = vec![];
    for _ in 0..options.rounds.clamp(1, 3) {
        let task = executor
            .start(spec(
                &executor,
                "trap '' TERM; echo ready; sleep 1000 & wait",
            ))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        running(&executor, &task.id).await;
        let (elapsed, _) = time_ms(executor.kill(&task.id)).await;
        trapped.push(elapsed);
    }
    executor.shutdown().await;
    vec![
        Row {
            scenario: "5a kill -> settled, plain sleep".into(),
            ours: Stats::of(plain),
            baseline: Some(Stats::of(base)),
            unit: "ms",
            peak_rss_mib: None,
            note: "baseline: Child::kill (SIGKILL one pid) + wait; target < 20 ms".into(),
        },
        Row {
            scenario: "5b kill -> settled, SIGTERM-ignoring tree".into(),
            ours: Stats::of(trapped),
            baseline: Some(Stats::of(vec![grace_ms])),
            unit: "ms",
            peak_rss_mib: None,
            note: format!("baseline = the grace ({grace_ms} ms); target grace + 20 ms"),
        },
    ]
}

/// What a sandbox row confines with beyond the mode.
#[derive(Clone, Copy)]
pub(crate) struct Policy {
    pub(crate) network: NetworkPolicy,
    pub(crate) protected: bool,
    /// The sandbox's own caches (kept in the bench's scratch directory).
    pub(crate) caches: bool,
    /// A session's warm sandbox under bubblewrap (`LocalSandboxConfig::warm`).
    pub(crate) warm: bool,
}

/// The defaults: network off, the default protected paths, the caches.
pub(crate) const DEFAULTS: Policy = Policy {
    network: NetworkPolicy::Off,
    protected: true,
    caches: true,
    warm: true,
};

pub(crate) fn sandboxed(
    options: &Options,
    backend: Backend,
    mode: SandboxMode,
    policy: Policy,
) -> Option<SandboxBashExecutor> {
    sandboxed_with(
        options,
        backend,
        mode,
        policy,
        dsh_sandbox::HostRules::default(),
    )
}

/// [`sandboxed`] with an allow-list for the network policy `allow`.
pub(crate) fn sandboxed_with(
    options: &Options,
    backend: Backend,
    mode: SandboxMode,
    policy: Policy,
    hosts: dsh_sandbox::HostRules,
) -> Option<SandboxBashExecutor> {
    let caches = if policy.caches {
        CachePlace::Under(options.scratch.join("dsh-bench-caches"))
    } else {
        CachePlace::Nowhere
    };
    sandboxed_in(options, backend, mode, policy, hosts, caches)
}

/// [`sandboxed_with`] with its caches at `caches`.
fn sandboxed_in(
    options: &Options,
    backend: Backend,
    mode: SandboxMode,
    policy: Policy,
    hosts: dsh_sandbox::HostRules,
    caches: CachePlace,
) -> Option<SandboxBashExecutor> {
    let provider = LocalSandboxProvider::new(LocalSandboxConfig {
        backend,
        // This binary is its own forwarder (`main`).
        forwarder: std::env::current_exe().ok(),
        warm: policy.warm,
        ..LocalSandboxConfig::default()
    })
    .ok()?;
    // A workspace of its own beside the spill parent and the temp dir
    // (either inside a writable workspace is refused).
    let workspace = options.scratch.join("dsh-bench-workspace");
    std::fs::create_dir_all(&workspace).unwrap_or_else(|e| panic!("{e}"));
    let made = dsh_bash_sandbox::sandboxed(
        SandboxConfig {
            local: LocalConfig {
                cwd: Some(workspace.clone()),
                ..local(options)
            },
            mode,
            workspace_root: Some(workspace),
            network: Some(policy.network),
            protected: if policy.protected {
                ProtectedPaths::default()
            } else {
                ProtectedPaths::none()
            },
            hidden: dsh_sandbox::HiddenPaths::default(),
            hosts,
            caches: dsh_bash_sandbox::CacheConfig {
                place: caches,
                ..dsh_bash_sandbox::CacheConfig::default()
            },
        },
        Arc::new(provider),
    );
    // A backend that is missing skips its rows; a configuration the
    // executor refuses is a bug of the bench, said so.
    Some(made.unwrap_or_else(|e| panic!("the bench's sandbox configuration is refused: {e}")))
}

/// One row of the sandbox's overhead: its label, backend, mode, policy
/// and target.
pub(crate) type SandboxRow = (&'static str, Backend, SandboxMode, Policy, &'static str);

/// Rows 6a-6f.
fn sandbox_rows() -> [SandboxRow; 8] {
    let open = Policy {
        network: NetworkPolicy::On,
        protected: false,
        caches: false,
        warm: true,
    };
    let no_caches = Policy {
        caches: false,
        ..DEFAULTS
    };
    [
        (
            "6a `true` under Landlock (read-only)",
            Backend::Landlock,
            SandboxMode::ReadOnly,
            DEFAULTS,
            "network off; target <= 1.15x",
        ),
        (
            "6b `true` under bwrap (read-only)",
            Backend::Bwrap,
            SandboxMode::ReadOnly,
            DEFAULTS,
            "network off; aim <= 2.5x",
        ),
        (
            "6b' `true` under bwrap (read-only), network on",
            Backend::Bwrap,
            SandboxMode::ReadOnly,
            open,
            "what cutting the network costs: 6b - 6b'",
        ),
        (
            "6c `true` under Landlock (workspace-write)",
            Backend::Landlock,
            SandboxMode::WorkspaceWrite,
            DEFAULTS,
            "+ a private TMPDIR per command, network off; target <= 1.15x",
        ),
        (
            "6d `true` under bwrap (workspace-write)",
            Backend::Bwrap,
            SandboxMode::WorkspaceWrite,
            DEFAULTS,
            "+ a private TMPDIR, protected paths, network off; aim <= 2.5x",
        ),
        (
            "6d' `true` under bwrap (workspace-write), open",
            Backend::Bwrap,
            SandboxMode::WorkspaceWrite,
            open,
            "nothing protected, network on, no caches: 6d - 6d' is the policy's cost",
        ),
        (
            "6e `true` under bwrap (workspace-write), no caches",
            Backend::Bwrap,
            SandboxMode::WorkspaceWrite,
            no_caches,
            "6d - 6e is what the sandbox's caches cost; target < 0.3 ms",
        ),
        (
            "6f `true` under Landlock (workspace-write), no caches",
            Backend::Landlock,
            SandboxMode::WorkspaceWrite,
            no_caches,
            "6c - 6f is what the sandbox's caches cost; target < 0.3 ms",
        ),
    ]
}

async fn sandbox_overhead(options: &Options) -> Vec<Row> {
    let n = options.commands / 2;
    confined_rows(
        options,
        sandbox_rows(),
        n,
        "baseline: unconfined LocalBashExecutor",
    )
    .await
}

/// Each row's `true` under its sandbox beside an unconfined executor's,
/// `n` commands per round, in one session each.
pub(crate) async fn confined_rows(
    options: &Options,
    configurations: impl IntoIterator<Item = SandboxRow>,
    n: usize,
    baseline: &str,
) -> Vec<Row> {
    let plain = LocalBashExecutor::new(local(options)).unwrap_or_else(|e| panic!("{e}"));
    per_command(&plain, "true", 5).await;
    let mut rows = Vec::new();
    for (label, backend, mode, policy, target) in configurations {
        let Some(confined) = sandboxed(options, backend, mode, policy) else {
            continue;
        };
        if let Err(err) = confined.run(spec(&confined, "true")).await {
            rows.push(Row::skipped(label, "ms/cmd", err));
            continue;
        }
        let (mut ours, mut base) = (vec![], vec![]);
        for _ in 0..options.rounds {
            ours.push(per_command(&confined, "true", n).await);
            base.push(per_command(&plain, "true", n).await);
        }
        confined.shutdown().await;
        rows.push(Row {
            scenario: label.into(),
            ours: Stats::of(ours),
            baseline: Some(Stats::of(base)),
            unit: "ms/cmd",
            peak_rss_mib: None,
            note: format!("{baseline}; {target}"),
        });
    }
    plain.shutdown().await;
    rows
}

/// Files in the cache root whose sweep at start is measured.
const SWEPT_FILES: usize = 20_000;

/// A cache root holding [`SWEPT_FILES`] small files in npm's layout (made
/// once per bench run).
fn full_cache_root(options: &Options) -> PathBuf {
    let root = options.scratch.join("dsh-bench-sweep-full");
    let uid = rustix::process::getuid().as_raw();
    let cacache = root.join(uid.to_string()).join("ws/bench/npm/_cacache");
    if !cacache.is_dir() {
        for file in 0..SWEPT_FILES {
            let dir = cacache.join(format!("{:02x}/{:02x}", file % 100, file / 100 % 200));
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(dir.join(file.to_string()), b"cached").unwrap_or_else(|e| panic!("{e}"));
        }
    }
    root
}

/// The sweep of a cache root of [`SWEPT_FILES`] files, as a server runs
/// it at start (on a thread of its own), beside the sweep of an empty root;
/// and the first command of a server starting with each, which must not
/// wait for it.
async fn cache_sweep(options: &Options) -> Vec<Row> {
    const SWEEP: &str = "6g the caches' sweep at start, a root of 20 000 files";
    const FIRST: &str = "6h first `true` after start, Landlock workspace-write, that root";
    let roots = [
        full_cache_root(options),
        options.scratch.join("dsh-bench-sweep-empty"),
    ];
    let mut sweeps = [Vec::new(), Vec::new()];
    let mut firsts = [Vec::new(), Vec::new()];
    for _ in 0..options.rounds {
        for (index, root) in roots.iter().enumerate() {
            let config = dsh_bash_sandbox::CacheConfig {
                place: CachePlace::Under(root.clone()),
                max_bytes: u64::MAX,
                ..dsh_bash_sandbox::CacheConfig::default()
            };
            let started = Instant::now();
            let _ = tokio::task::spawn_blocking(move || config.sweep_now()).await;
            sweeps[index].push(ms(started.elapsed()));
            let started = Instant::now();
            let Some(confined) = sandboxed_in(
                options,
                Backend::Landlock,
                SandboxMode::WorkspaceWrite,
                DEFAULTS,
                dsh_sandbox::HostRules::default(),
                CachePlace::Under(root.clone()),
            ) else {
                return vec![Row::skipped(FIRST, "ms", "Landlock is not usable here")];
            };
            if let Err(err) = confined.run(spec(&confined, "true")).await {
                return vec![Row::skipped(FIRST, "ms", err)];
            }
            firsts[index].push(ms(started.elapsed()));
            confined.shutdown().await;
        }
    }
    let [sweep_full, sweep_empty] = sweeps;
    let [first_full, first_empty] = firsts;
    vec![
        Row {
            scenario: SWEEP.into(),
            ours: Stats::of(sweep_full),
            baseline: Some(Stats::of(sweep_empty)),
            unit: "ms",
            peak_rss_mib: None,
            note: "baseline: an empty root; run on a thread of its own beside the first commands".into(),
        },
        Row {
            scenario: FIRST.into(),
            ours: Stats::of(first_full),
            baseline: Some(Stats::of(first_empty)),
            unit: "ms",
            peak_rss_mib: None,
            note: "baseline: the same with an empty root; the first command does not wait for the sweep".into(),
        },
    ]
}

async fn mcp_round_trip(options: &Options) -> Vec<Row> {
    let Some(binary) = options.mcp_binary.as_ref() else {
        return Vec::new();
    };
    // The definitions as a default server lists them (everything on);
    // the round trip without a snapshot of the machine's own shell, which
    // a server takes by default and the baseline's direct run has not
    // (the shell's cost is group 11's).
    let (Ok(mut listing), Ok(mut client)) = (
        McpClient::start(binary, &[]).await,
        McpClient::start(binary, &["--shell-snapshot", "off"]).await,
    ) else {
        return vec![Row::skipped("7 MCP", "ms/call", "the server did not start")];
    };
    let definitions = tool_definitions(&mut listing).await;
    listing.close().await;
    let round_trip = round_trip(options, &mut client).await;
    client.close().await;
    definitions.into_iter().chain(round_trip).collect()
}

/// The bytes of the four tool definitions (`tools/list`, as sent: compact
/// JSON), which every request of every turn carries.
async fn tool_definitions(client: &mut McpClient) -> Option<Row> {
    let listed = client
        .request("tools/list", serde_json::json!({}))
        .await
        .ok()?;
    let tools = listed["result"]["tools"].as_array()?;
    let bytes: usize = tools.iter().map(|tool| tool.to_string().len()).sum();
    Some(Row {
        scenario: "7a the four tool definitions (tools/list)".into(),
        ours: Stats::of(vec![bytes as f64]),
        baseline: None,
        unit: "bytes",
        peak_rss_mib: None,
        note: "target <= 6144 bytes with everything on (14270 before issue 35)".into(),
    })
}

async fn round_trip(options: &Options, client: &mut McpClient) -> Option<Row> {
    let direct = LocalBashExecutor::new(local(options)).ok()?;
    let call = serde_json::json!({"name": "bash", "arguments": {"command": "true", "description": "benchmark a trivial command"}});
    for _ in 0..5 {
        client.request("tools/call", call.clone()).await.ok()?;
    }
    per_command(&direct, "true", 5).await;
    let (mut ours, mut base) = (vec![], vec![]);
    for _ in 0..options.rounds {
        let started = Instant::now();
        for _ in 0..options.commands {
            client.request("tools/call", call.clone()).await.ok()?;
        }
        ours.push(ms(started.elapsed()) / options.commands as f64);
        base.push(per_command(&direct, "true", options.commands).await);
    }
    direct.shutdown().await;
    let added = Stats::of(ours.clone()).median - Stats::of(base.clone()).median;
    Some(Row {
        scenario: "7 MCP tools/call bash `true` over stdio".into(),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms/call",
        peak_rss_mib: None,
        note: format!("added per call: {added:.3} ms (target <= 0.2 ms); baseline: direct run"),
    })
}

/// What applying the default limits costs a command: `true` with them
/// against `true` without (`ResourceLimits::NONE`), both under the same
/// containment, back to back (1e) and one every 250 ms, as an agent's
/// commands come (1f).
async fn limits_cost(options: &Options) -> Vec<Row> {
    let limited = LocalBashExecutor::new(local(options)).unwrap_or_else(|e| panic!("{e}"));
    let free = LocalBashExecutor::new(LocalConfig {
        limits: dsh_bash_local::ResourceLimits::NONE,
        ..local(options)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mechanism = limited
        .run(spec(&limited, "true"))
        .await
        .ok()
        .and_then(|r| r.limits)
        .map_or_else(|| "none".to_owned(), |l| l.mechanism.to_string());
    per_command(&limited, "true", 5).await;
    per_command(&free, "true", 5).await;
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        ours.push(per_command(&limited, "true", options.commands).await);
        base.push(per_command(&free, "true", options.commands).await);
    }
    let added = Stats::of(ours.clone()).median - Stats::of(base.clone()).median;
    let back_to_back = Row {
        scenario: "1e run `true` with the default limits".into(),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms/cmd",
        peak_rss_mib: None,
        note: format!(
            "limits by {mechanism}; baseline: no limits; added {added:.3} ms (target < 0.2 ms)"
        ),
    };
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        for (executor, into) in [(&limited, &mut ours), (&free, &mut base)] {
            for _ in 0..4 {
                tokio::time::sleep(crate::cli::PACE).await;
                let started = Instant::now();
                let _ = executor.run(spec(executor, "true")).await;
                into.push(ms(started.elapsed()));
            }
        }
    }
    let added = Stats::of(ours.clone()).median - Stats::of(base.clone()).median;
    let paced = Row {
        scenario: "1f the same, one command every 250 ms".into(),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms/cmd",
        peak_rss_mib: None,
        note: format!(
            "limits by {mechanism}; baseline: no limits at the same pace; added {added:.3} ms"
        ),
    };
    limited.shutdown().await;
    free.shutdown().await;
    vec![back_to_back, paced]
}

/// A workspace of 10,000 files (1,000 directories of 10) under `parent`.
fn ten_thousand_files(parent: &Path) -> PathBuf {
    let root = parent.join("changes-workspace");
    for dir in 0..1_000 {
        let dir = root.join(format!("d{dir:03}"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for file in 0..10 {
            let file = dir.join(format!("f{file}"));
            std::fs::write(&file, b"x").unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
    root
}

/// What listing a command's changes costs (1g): `touch` of one file of a
/// 10,000-file workspace, with the changes listed and without.
async fn changes_cost(options: &Options) -> Row {
    let root = ten_thousand_files(&options.scratch);
    let started = Instant::now();
    let tracked = LocalBashExecutor::new(LocalConfig {
        changes: Some(dsh_bash_local::ChangeTracking {
            root: root.clone(),
            max_dirs: dsh_bash_local::ChangeTracking::MAX_DIRS,
        }),
        ..local(options)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let setup = ms(started.elapsed());
    let plain = LocalBashExecutor::new(local(options)).unwrap_or_else(|e| panic!("{e}"));
    let command = format!("touch {}/d500/f5", root.display());
    let listed = tracked
        .run(spec(&tracked, &command))
        .await
        .ok()
        .and_then(|r| r.changed);
    let works = listed.as_ref().is_some_and(|c| c.modified == ["d500/f5"]);
    per_command(&tracked, &command, 5).await;
    per_command(&plain, &command, 5).await;
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        ours.push(per_command(&tracked, &command, options.commands).await);
        base.push(per_command(&plain, &command, options.commands).await);
    }
    tracked.shutdown().await;
    plain.shutdown().await;
    let _ = std::fs::remove_dir_all(&root);
    let added = Stats::of(ours.clone()).median - Stats::of(base.clone()).median;
    Row {
        scenario: "1g run `touch` in a 10,000-file workspace, changes listed".into(),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms/cmd",
        peak_rss_mib: None,
        note: format!(
            "baseline: no changes listed; added {added:.3} ms (target <= 2 ms); watch set up once in {setup:.1} ms; listed d500/f5: {works}"
        ),
    }
}

/// Rows 1a-1g: what one command costs, plain and beside the limits and
/// the workspace's change tracking.
async fn per_command_rows(options: &Options) -> Vec<Row> {
    let mut rows = vec![
        overhead(options, "1a run `true`", "true").await,
        overhead_with(
            options,
            "1a' run `true`, process-tree forced",
            "true",
            ContainmentChoice::ProcessTree,
        )
        .await,
        overhead(options, "1b run `echo hello`", "echo hello").await,
        overhead(
            options,
            "1c run 64 KiB of output",
            "head -c 65536 /dev/zero",
        )
        .await,
    ];
    if let Ok(executor) = LocalBashExecutor::new(local(options)) {
        rows.push(crate::cli::paced(options, &executor).await);
        executor.shutdown().await;
    }
    rows.extend(limits_cost(options).await);
    rows.push(changes_cost(options).await);
    rows
}

/// Runs every scenario and returns the table rows.
pub async fn run_all(options: &Options) -> Vec<Row> {
    let mut rows = Vec::new();
    if options.runs(0) {
        eprintln!("0/10 whole process");
        rows.extend(crate::cli::whole_process(options).await);
    }
    if options.runs(1) {
        eprintln!("1/10 per-command overhead");
        rows.extend(per_command_rows(options).await);
    }
    if options.runs(2) {
        eprintln!("2/10 output throughput");
        rows.extend(throughput(options).await);
    }
    if options.runs(3) {
        eprintln!("3/10 both streams at once");
        rows.push(both_streams(options).await);
    }
    if options.runs(4) {
        eprintln!("4/10 concurrency");
        rows.extend(concurrency(options).await);
    }
    if options.runs(5) {
        eprintln!("5/10 kill latency");
        rows.extend(kill_latency(options).await);
    }
    if options.runs(6) {
        eprintln!("6/10 sandbox overhead");
        rows.extend(sandbox_overhead(options).await);
        rows.extend(cache_sweep(options).await);
    }
    if options.runs(7) {
        eprintln!("7/10 MCP round trip");
        rows.extend(mcp_round_trip(options).await);
    }
    if options.runs(8) {
        eprintln!("8/10 remote executor latency");
        if let Ok(direct) = LocalBashExecutor::new(local(options)) {
            rows.extend(crate::remote::remote_latency(options, &direct).await);
            direct.shutdown().await;
        }
    }
    if options.runs(10) {
        eprintln!("10/10 network allow-list");
        rows.extend(crate::network::allow_list_rows(options).await);
    }
    if options.runs(11) {
        eprintln!("11/11 the user's own shell");
        rows.extend(crate::shell::shell_rows(options, &local(options)).await);
    }
    if options.runs(12) {
        eprintln!("12/12 command rules");
        rows.extend(crate::rules::rules_rows(options.rounds));
    }
    if options.runs(13) {
        eprintln!("13/13 a session's own container");
        rows.extend(crate::container::container_rows(options).await);
    }
    if options.runs(14) {
        eprintln!("14/14 a session's warm sandbox");
        rows.extend(crate::warm::warm_rows(options).await);
    }
    if options.runs(9) {
        eprintln!("9/10 terminals");
        if let Ok(executor) = LocalBashExecutor::new(local(options)) {
            rows.extend(crate::terminal::terminal_rows(options, &executor).await);
            executor.shutdown().await;
        }
    }
    rows
}
