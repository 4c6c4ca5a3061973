//! Scenario 0: the whole `dsh-bash run` process, as a person or a harness
//! starts it, beside `bash -c` started the same way; and scenario 1d: one
//! in-process command at an agent's pace (a pause between commands), where
//! per-command kernel costs that a quick succession hides show.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_bash::{BashExecRequest, BashExecutor};
use dsh_bash_local::LocalBashExecutor;

use crate::measure::{ms, Row, Stats};
use crate::scenarios::Options;

/// Mean wall time of `n` runs of `program args`, in ms; `None` if one
/// failed. Blocking.
fn per_process(program: &Path, args: &[&str], workdir: &Path, n: usize) -> Option<f64> {
    let started = Instant::now();
    for _ in 0..n {
        let status = Command::new(program)
            .args(args)
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !status.success() {
            return None;
        }
    }
    Some(ms(started.elapsed()) / n as f64)
}

/// Rows 0a–0e: `dsh-bash run -- true` (plain, process-tree, confined)
/// beside `bash -c true`, whole processes, in an empty workspace.
pub async fn whole_process(options: &Options) -> Vec<Row> {
    // Absolute: the runs start in the workspace.
    let Some(binary) = options
        .mcp_binary
        .as_ref()
        .and_then(|b| std::path::absolute(b).ok())
    else {
        return Vec::new();
    };
    let workdir = options
        .scratch
        .join(format!("dsh-bash-bench-cli-{}", std::process::id()));
    if std::fs::create_dir_all(&workdir).is_err() {
        return Vec::new();
    }
    let (rounds, n) = (options.rounds, (options.commands / 5).max(5));
    let cases: [(&str, &[&str]); 5] = [
        ("0a whole process: `dsh-bash run -- true`", &[]),
        (
            "0b whole process, process-tree",
            &["--containment", "process-tree"],
        ),
        (
            "0c whole process, Landlock read-only",
            &["--sandbox", "read-only", "--sandbox-backend", "landlock"],
        ),
        (
            "0d whole process, bwrap read-only",
            &["--sandbox", "read-only", "--sandbox-backend", "bwrap"],
        ),
        (
            "0e whole process, bwrap workspace-write",
            &["--sandbox", "workspace-write", "--sandbox-backend", "bwrap"],
        ),
    ];
    let rows = tokio::task::spawn_blocking(move || {
        let bash = Path::new("bash");
        let mut rows = Vec::new();
        for (label, extra) in cases {
            let mut args = vec!["run"];
            args.extend_from_slice(extra);
            args.extend(["--", "true"]);
            if per_process(&binary, &args, &workdir, 1).is_none() {
                eprintln!("warning: row {label:?} skipped: the command failed here");
                continue;
            }
            let (mut ours, mut base) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                ours.extend(per_process(&binary, &args, &workdir, n));
                base.extend(per_process(bash, &["-c", "true"], &workdir, n));
            }
            rows.push(Row {
                scenario: label.into(),
                ours: Stats::of(ours),
                baseline: Some(Stats::of(base)),
                unit: "ms/run",
                peak_rss_mib: None,
                note: format!("{n} runs/round of the release binary vs `bash -c true`"),
            });
        }
        let _ = std::fs::remove_dir_all(&workdir);
        rows
    })
    .await
    .unwrap_or_default();
    rows
}

/// The pause between commands of the paced rows (1d, 1f): an agent's commands come
/// seconds apart; a quarter of a second is enough for the kernel to
/// forget it just did the same thing.
pub const PACE: Duration = Duration::from_millis(250);

/// Row 1d: `true` in-process, one command every [`PACE`], per command,
/// beside `bash -c true` at the same pace.
pub async fn paced(options: &Options, executor: &LocalBashExecutor) -> Row {
    let spec = executor
        .resolve(BashExecRequest::new("true"))
        .unwrap_or_else(|e| panic!("{e}"));
    let n = 8;
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        for _ in 0..n {
            tokio::time::sleep(PACE).await;
            let started = Instant::now();
            let _ = executor.run(spec.clone()).await;
            ours.push(ms(started.elapsed()));
            tokio::time::sleep(PACE).await;
            let plain = tokio::task::spawn_blocking(|| {
                let started = Instant::now();
                let _ = Command::new("bash").args(["-c", "true"]).output();
                ms(started.elapsed())
            });
            base.extend(plain.await.ok());
        }
    }
    Row {
        scenario: "1d run `true`, one command every 250 ms".into(),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms/cmd",
        peak_rss_mib: None,
        note: format!("{n} commands/round, each after a {PACE:?} pause, vs Command::output() at the same pace"),
    }
}
