//! Scenario 14: a session's warm sandbox. `options.commands` confined
//! `true`s in one session beside as many unconfined ones, under bubblewrap
//! entering the session's sandbox (warm) and with a `bwrap` per command
//! (cold), and under Landlock; and what building the sandbox again costs
//! when the protected set changed before a command (a new repository).

use std::path::Path;

use dsh_bash::{BashExecutor, SandboxMode};
use dsh_bash_local::LocalBashExecutor;
use dsh_sandbox_local::Backend;

use crate::measure::{Row, Stats};
use crate::scenarios::{local, per_command, sandboxed, spec, Options, Policy, DEFAULTS};

/// One row: its label, backend, mode, policy and note.
type WarmRow = (&'static str, Backend, SandboxMode, Policy, &'static str);

fn configurations() -> [WarmRow; 4] {
    let cold = Policy {
        warm: false,
        ..DEFAULTS
    };
    [
        (
            "14a `true` in one session, bwrap workspace-write, warm",
            Backend::Bwrap,
            SandboxMode::WorkspaceWrite,
            DEFAULTS,
            "commands enter the session's sandbox; target <= 1.6x",
        ),
        (
            "14b `true` in one session, bwrap workspace-write, a bwrap each",
            Backend::Bwrap,
            SandboxMode::WorkspaceWrite,
            cold,
            "what 14a was before the warm sandbox",
        ),
        (
            "14c `true` in one session, bwrap read-only, warm",
            Backend::Bwrap,
            SandboxMode::ReadOnly,
            DEFAULTS,
            "target <= 1.5x",
        ),
        (
            "14d `true` in one session, Landlock workspace-write",
            Backend::Landlock,
            SandboxMode::WorkspaceWrite,
            DEFAULTS,
            "the prepared ruleset and filter; target <= 1.15x",
        ),
    ]
}

/// Makes `dir` look like a new repository to the protected paths'
/// resolution (what `git init` leaves that it reads).
fn new_repository(dir: &Path) {
    let git = dir.join(".git");
    for sub in ["hooks", "objects", "refs/heads"] {
        std::fs::create_dir_all(git.join(sub)).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(git.join("config"), "[core]\n\tbare = false\n")
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Per command, each after a new repository appeared in the workspace.
async fn after_a_change(executor: &dyn BashExecutor, workspace: &Path, n: usize) -> f64 {
    let spec = spec(executor, "true");
    let mut total = 0.0;
    for at in 0..n {
        new_repository(&workspace.join(format!("repo-{}", uuid_like(at))));
        let started = std::time::Instant::now();
        if let Err(err) = executor.run(spec.clone()).await {
            panic!("`true` failed: {err}");
        }
        total += crate::measure::ms(started.elapsed());
    }
    total / n as f64
}

/// A name no earlier round used.
fn uuid_like(at: usize) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{at}")
}

/// Rows 14a-14e.
pub(crate) async fn warm_rows(options: &Options) -> Vec<Row> {
    let plain = LocalBashExecutor::new(local(options)).unwrap_or_else(|e| panic!("{e}"));
    let n = options.commands.max(2);
    let mut rows = Vec::new();
    for (label, backend, mode, policy, note) in configurations() {
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
            note: format!("baseline: unconfined LocalBashExecutor, {n} commands; {note}"),
        });
    }
    rows.push(rebuild_row(options).await);
    plain.shutdown().await;
    rows
}

/// 14e: a warm command after a protected-set change (the sandbox built
/// again) beside one without (14a's).
async fn rebuild_row(options: &Options) -> Row {
    const LABEL: &str = "14e `true` after a new repository, bwrap workspace-write, warm";
    let mode = SandboxMode::WorkspaceWrite;
    let Some(confined) = sandboxed(options, Backend::Bwrap, mode, DEFAULTS) else {
        return Row::skipped(LABEL, "ms/cmd", "bubblewrap is not usable here");
    };
    let workspace = options.scratch.join("dsh-bench-workspace");
    let n = (options.commands / 5).max(2);
    let (mut ours, mut base) = (vec![], vec![]);
    for _ in 0..options.rounds {
        ours.push(after_a_change(&confined, &workspace, n).await);
        base.push(per_command(&confined, "true", n).await);
    }
    confined.shutdown().await;
    for entry in std::fs::read_dir(&workspace)
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with("repo-") {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Row {
        scenario: LABEL.into(),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms/cmd",
        peak_rss_mib: None,
        note: "baseline: the same session's commands with nothing changed; the difference is a rebuild".into(),
    }
}
