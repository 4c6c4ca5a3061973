//! `dsh-bash doctor`: what this host gives and what it does not, on one
//! screen (or as JSON for a bug report), under the same flags and policy
//! file as the server it stands for. Every finding comes from doing what
//! a command would do here: each sandbox backend's probe run now, a
//! command run with limits (its result names the containment and the limit
//! mechanism), the shell snapshot taken, a file made in the temp
//! directory. A finding that falls short says how to fix it where there
//! is a fix.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use dsh_bash::{BashExecRequest, BashExecutor as _, Containment, LimitMechanism};
use dsh_bash_local::{LocalBashExecutor, LocalConfig, ResourceLimits};
use serde::Serialize;

use crate::compose::{self, ExecutorArgs};

/// Arguments of `doctor`: the server's own flags, so that it examines what
/// that server would use.
#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Print the findings as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    executor: ExecutorArgs,
}

/// How a finding stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works fully here.
    Ok,
    /// Works, with a weaker guarantee or a cost.
    Warn,
    /// Not available here.
    Missing,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Missing => "missing",
        }
    }
}

/// One thing the host gives, or does not.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// What it is about (`sandbox`, `bubblewrap`, …).
    pub topic: &'static str,
    /// How it stands.
    pub status: Status,
    /// What was found.
    pub found: String,
    /// How to make it better, where there is a way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub(crate) fn new(topic: &'static str, status: Status, found: impl Into<String>) -> Finding {
        Finding {
            topic,
            status,
            found: found.into(),
            fix: None,
        }
    }

    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
}

/// Everything doctor found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// This binary's version.
    pub version: &'static str,
    /// The user it ran as.
    pub uid: u32,
    /// The findings, in the order printed.
    pub findings: Vec<Finding>,
    /// A sandbox verdict an earlier process kept was dropped: the next
    /// command probes afresh (and keeps what it finds).
    pub kept_verdict_dropped: bool,
}

/// Examines the host and prints the report; exits 0 whatever it found
/// (a report is not a failure), 125 when it could not examine at all.
pub async fn doctor(mut args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let policy = crate::policy::load(&args.executor)?;
    crate::policy::apply(&mut args.executor, &policy)?;
    let backend = compose::backend_of(&args.executor);
    let (mut findings, dropped_kept) = crate::doctor_sandbox::findings(backend.clone()).await;
    findings.extend(process_findings(&args.executor).await?);
    findings.push(files_finding());
    let workdir = args.executor.workdir.clone();
    findings.push(
        tokio::task::spawn_blocking(move || workdir_finding(workdir))
            .await
            .context("examining the working directory")?,
    );
    findings.push(shell_finding(&args.executor, backend).await);
    findings.push(
        tokio::task::spawn_blocking(temp_finding)
            .await
            .context("examining the temp directory")?,
    );
    findings.push(container_finding(&args.executor).await);
    let report = Report {
        version: env!("CARGO_PKG_VERSION"),
        uid: rustix::process::geteuid().as_raw(),
        findings,
        kept_verdict_dropped: dropped_kept,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&report).context("encoding the report as JSON")?
    } else {
        render(&report)
    };
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(err) => Err(err).context("writing the report"),
    }
}

/// The report as a table: status, topic, what was found, and the fix on
/// its own line below.
pub fn render(report: &Report) -> String {
    let mut out = format!(
        "dsh-bash {} on this host, as uid {}\n",
        report.version, report.uid
    );
    for finding in &report.findings {
        out.push_str(&format!(
            "{:<8}{:<17}{}\n",
            finding.status.label(),
            finding.topic,
            printable(&finding.found)
        ));
        if let Some(fix) = &finding.fix {
            out.push_str(&format!("{:25}fix: {}\n", "", printable(fix)));
        }
    }
    if report.kept_verdict_dropped {
        out.push_str("(the sandbox verdict an earlier command kept was dropped: the next command probes afresh)\n");
    }
    out.pop();
    out
}

/// `text` on one line of a terminal: control characters (a newline, a
/// carriage return, an escape sequence from a start-up file or a program's
/// version) shown escaped, so no finding can print a line of its own.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Limits asked of the probe command: each kind, so that the result names
/// which the host enforces and how.
const PROBE_LIMITS: ResourceLimits = ResourceLimits {
    processes: Some(256),
    memory_bytes: Some(512 << 20),
    cpu_millicores: Some(1000),
};

/// The local configuration a probe command runs under: the server's, in
/// `/` (not the temp directory, whose own finding is `temp`).
fn probe_config(args: &ExecutorArgs) -> LocalConfig {
    LocalConfig {
        cwd: Some(std::path::PathBuf::from("/")),
        discard_spill_on_shutdown: true,
        shell_snapshot: None,
        changes: None,
        ..compose::local_config(args)
    }
}

/// Containment and limits, from one real command's result.
async fn process_findings(args: &ExecutorArgs) -> anyhow::Result<Vec<Finding>> {
    let config = LocalConfig {
        limits: PROBE_LIMITS,
        ..probe_config(args)
    };
    let executor = LocalBashExecutor::new(config).context("starting the local executor")?;
    let ran = match executor.resolve(BashExecRequest::new("true")) {
        Ok(spec) => executor.run(spec).await,
        Err(err) => Err(err),
    };
    executor.shutdown().await;
    let result = match ran {
        Ok(result) => result,
        Err(err) => {
            let why = format!("a command could not run here: {err}");
            return Ok(vec![
                Finding::new("containment", Status::Missing, why.clone()),
                Finding::new("limits", Status::Missing, why),
            ]);
        }
    };
    Ok(vec![containment_finding(&result), limits_finding(&result)])
}

/// Where a cgroup per command can be had.
const DELEGATE: &str = "run the server as root, or in a cgroup v2 subtree delegated to its user (systemd-run --user --scope -p Delegate=yes dsh-bash mcp …)";

/// Where every limit applies to the whole tree.
const ROOT_LIMITS: &str = "run the server as root on a cgroup v2 host (or a hybrid host's v1 hierarchies), where every limit applies to the command's whole tree";

fn containment_finding(result: &dsh_bash::BashRunResult) -> Finding {
    let version = match result.limits.as_ref().map(|l| l.mechanism) {
        Some(LimitMechanism::CgroupV1) => " (v1 hierarchies of a hybrid host)",
        Some(LimitMechanism::CgroupV2) => " (cgroup v2)",
        _ => "",
    };
    match result.containment {
        Some(Containment::Cgroup) => Finding::new(
            "containment",
            Status::Ok,
            format!("a cgroup per command{version}: timeouts and kills stop the whole tree at once"),
        ),
        Some(Containment::ProcessTree) => Finding::new(
            "containment",
            Status::Warn,
            "the process-tree walk (no cgroup can be made here): leftovers are found by scanning /proc and stopped by pidfd; each scan costs time, and limits apply per process",
        )
        .fix(DELEGATE),
        _ => Finding::new("containment", Status::Missing, "the result names no containment"),
    }
}

fn limits_finding(result: &dsh_bash::BashRunResult) -> Finding {
    let Some(limits) = &result.limits else {
        return Finding::new(
            "limits",
            Status::Missing,
            "no resource limit could be applied",
        )
        .fix(DELEGATE);
    };
    let missing = if limits.missing.is_empty() {
        String::new()
    } else {
        format!("; not enforced here: {}", limits.missing.join(", "))
    };
    match limits.mechanism {
        LimitMechanism::Rlimit => Finding::new(
            "limits",
            Status::Warn,
            format!("by setrlimit: per process, not per tree{missing}"),
        )
        .fix(ROOT_LIMITS),
        mechanism if limits.partial => Finding::new(
            "limits",
            Status::Warn,
            format!("by {mechanism} controllers for the whole tree{missing}"),
        )
        .fix(ROOT_LIMITS),
        mechanism => Finding::new(
            "limits",
            Status::Ok,
            format!("processes, memory and CPU by {mechanism} controllers for the whole tree"),
        ),
    }
}

/// The user's shell, as `mcp` snapshots it under these flags.
async fn shell_finding(args: &ExecutorArgs, backend: dsh_sandbox_local::Backend) -> Finding {
    let local = probe_config(args);
    let bash = bash_version(&local.shell).await;
    let source = match compose::snapshot_source(args, true) {
        Ok(Some(source)) => source,
        Ok(None) => {
            return Finding::new(
                "shell",
                Status::Ok,
                format!("commands run in {bash}, without a snapshot of the user's shell (--shell-snapshot off)"),
            )
        }
        Err(err) => return Finding::new("shell", Status::Missing, format!("{err:#}")),
    };
    match compose::snapshot(backend, &local, &source).await {
        Ok(snapshot) => snapshot_finding(snapshot.summary(), &bash),
        Err(err) => {
            let fix = match err {
                dsh_bash_local::SnapshotError::UnsupportedShell { .. } => {
                    "set SHELL to bash or zsh, or give --shell-snapshot FILE (a bash file to source)"
                }
                _ => "make the shell's start-up files finish without error when not interactive, or give --shell-snapshot FILE (a bash file to source) or off",
            };
            Finding::new(
                "shell",
                Status::Warn,
                format!("commands run in {bash} without the user's shell: {err}"),
            )
            .fix(fix)
        }
    }
}

fn snapshot_finding(summary: &dsh_bash_local::SnapshotSummary, bash: &str) -> Finding {
    let mut found = format!(
        "commands run in {bash} with a snapshot of {}: {} variables, {} functions, {} aliases ({} bytes)",
        summary.source, summary.variables, summary.functions, summary.aliases, summary.script_bytes,
    );
    if !summary.dropped.is_empty() {
        found.push_str(&format!("; left out: {}", summary.dropped.join(", ")));
    }
    if summary.without_rc {
        return Finding::new("shell", Status::Warn, format!("{found}; only the profile was read, the rc file did not finish in time"))
            .fix("make the shell's rc file finish quickly when it is not interactive, or give --shell-snapshot FILE");
    }
    if summary.variables + summary.functions + summary.aliases == 0 {
        return Finding::new("shell", Status::Warn, format!("{found}: the snapshot holds nothing, as if the start-up files ended early (an exit or exec in them)"))
            .fix("let the shell's rc file run to its end when not interactive (no exit or exec zsh in it), or give --shell-snapshot FILE");
    }
    if !summary.confined {
        return Finding::new("shell", Status::Warn, format!("{found}; the start-up files ran unconfined (no sandbox backend here)"))
            .fix("make a sandbox backend usable (see bubblewrap and landlock), so that the user's start-up files run where they can write nothing");
    }
    Finding::new("shell", Status::Ok, found)
}

/// How long a program's `--version` may take.
const VERSION_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// `command`'s output (stdin and stderr closed), or `None` when it cannot
/// run or does not finish within [`VERSION_BOUND`] (it is killed then).
pub(crate) async fn bounded_output(
    command: &mut tokio::process::Command,
) -> Option<std::process::Output> {
    command
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(VERSION_BOUND, command.output())
        .await
        .ok()?
        .ok()
}

/// `bash --version`'s first line, shortened to "bash 5.2.15".
async fn bash_version(shell: &std::path::Path) -> String {
    let first = version_line(shell).await;
    let version = first.as_deref().and_then(|line| {
        line.split_whitespace()
            .skip_while(|word| *word != "version")
            .nth(1)
    });
    match version {
        Some(version) => format!("{} {version}", shell.display()),
        None => shell.display().to_string(),
    }
}

/// The first line `program --version` prints, trimmed; `None` when it
/// prints none within [`VERSION_BOUND`].
pub(crate) async fn version_line(program: &std::path::Path) -> Option<String> {
    let output = bounded_output(tokio::process::Command::new(program).arg("--version")).await?;
    let text = String::from_utf8(output.stdout).ok()?;
    text.lines().next().map(|line| line.trim().to_owned())
}

/// The container engine `--container` would use, its version, and the
/// image when one is given.
async fn container_finding(args: &ExecutorArgs) -> Finding {
    let engine = match compose::container_engine(args) {
        Ok(engine) => engine,
        Err(err) => {
            return Finding::new(
                "container",
                Status::Missing,
                format!("--container is unavailable: {err:#}"),
            )
            .fix("install podman (apt install podman, dnf install podman) or docker")
        }
    };
    let version = version_line(&engine.program).await;
    let named = match version {
        Some(version) => format!("{} ({version})", engine.program.display()),
        None => format!(
            "{} (its --version did not answer)",
            engine.program.display()
        ),
    };
    let Some(image) = &args.container else {
        return Finding::new(
            "container",
            Status::Ok,
            format!("{named} can make --container's session containers"),
        );
    };
    if let Err(err) = dsh_bash_container::check_image(image) {
        return Finding::new("container", Status::Missing, err.to_string())
            .fix("give --container an image name");
    }
    let inspected = bounded_output(
        tokio::process::Command::new(&engine.program)
            .args(["image", "inspect", "--format", "{{.Id}}", image]),
    )
    .await;
    match inspected {
        Some(out) if out.status.success() => Finding::new(
            "container",
            Status::Ok,
            format!("{named} has the image {image}"),
        ),
        _ => Finding::new(
            "container",
            Status::Missing,
            format!("{named} does not have the image {image} (or did not answer)"),
        )
        .fix(format!(
            "{} pull {image}, or build or import it",
            engine.kind.name()
        )),
    }
}

/// Descriptors the server holds for itself (runtime, pipes of its own).
const OWN_DESCRIPTORS: u64 = 32;

/// Below this many descriptors, a handful of commands at once exhaust them.
const FEW_DESCRIPTORS: u64 = 1024;

/// The open-file limit the server runs under (after raising its soft
/// limit to the hard one, as it does at start): every running command
/// holds three.
fn files_finding() -> Finding {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let Some(soft) = limit.current else {
        return Finding::new("files", Status::Ok, "open files: unlimited");
    };
    let commands = soft.saturating_sub(OWN_DESCRIPTORS) / 3;
    let found = format!("open files: {soft} (about {commands} commands at once)");
    let fix = "raise the limit where the server starts: ulimit -n 4096 (LimitNOFILE=4096 in a systemd unit)";
    if soft < 2 * OWN_DESCRIPTORS {
        Finding::new(
            "files",
            Status::Missing,
            format!("{found}: too few for a command to start"),
        )
        .fix(fix)
    } else if soft < FEW_DESCRIPTORS {
        Finding::new("files", Status::Warn, found).fix(fix)
    } else {
        Finding::new("files", Status::Ok, found)
    }
}

/// The commands' directory: `--workdir`, else where the server starts
/// (and the workspace under workspace-write unless --workspace says
/// otherwise).
fn workdir_finding(asked: Option<std::path::PathBuf>) -> Finding {
    let dir = match asked.map_or_else(std::env::current_dir, Ok) {
        Ok(dir) => dir,
        Err(err) => {
            return Finding::new(
                "workdir",
                Status::Missing,
                format!("the current directory cannot be read: {err}"),
            )
            .fix("start the server in a directory that exists, or give --workdir DIR")
        }
    };
    match std::fs::read_dir(&dir) {
        Ok(_) => Finding::new("workdir", Status::Ok, format!("{} is the commands' directory", dir.display())),
        Err(err) => Finding::new(
            "workdir",
            Status::Missing,
            format!("{} cannot be read: {err}: a command there fails, and a sandbox refuses it as the workspace", dir.display()),
        )
        .fix("start the server in a directory its user can read, or give --workdir DIR"),
    }
}

/// Below this much free space in the temp directory, a spill file (the
/// whole of a command's output) can fill it.
const LOW_TEMP_SPACE: u64 = 256 << 20;

/// The temp directory: spill files and private TMPDIRs live there.
fn temp_finding() -> Finding {
    let dir = dsh_bash_local::scratch::temp_dir();
    if let Err(err) = tempfile::tempfile_in(&dir) {
        return Finding::new(
            "temp",
            Status::Missing,
            format!("{} is not writable: {err}", dir.display()),
        )
        .fix("set TMPDIR to a writable directory of this user's");
    }
    let free = rustix::fs::statvfs(&dir)
        .ok()
        .map(|fs| fs.f_bavail.saturating_mul(fs.f_frsize));
    match free {
        Some(free) if free < LOW_TEMP_SPACE => Finding::new(
            "temp",
            Status::Warn,
            format!(
                "{} is writable, {} MiB free: a long output's spill file may fill it",
                dir.display(),
                free >> 20
            ),
        )
        .fix("free space there, or set TMPDIR to a directory with more"),
        Some(free) => Finding::new(
            "temp",
            Status::Ok,
            format!(
                "{} is writable, {} MiB free (spill files, private TMPDIRs)",
                dir.display(),
                free >> 20
            ),
        ),
        None => Finding::new("temp", Status::Ok, format!("{} is writable", dir.display())),
    }
}
