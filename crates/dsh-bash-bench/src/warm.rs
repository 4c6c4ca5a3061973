//! Scenario 14: a session's warm sandbox. `options.commands` confined
//! `true`s in one session beside as many unconfined ones, under bubblewrap
//! entering the session's sandbox (warm) and with a `bwrap` per command
//! (cold), and under Landlock; and what building the sandbox again costs
//! when the protected set changed before a command (a new repository).

use std::path::Path;

use dsh_bash::{BashExecutor, SandboxMode};
use dsh_sandbox_local::Backend;

use crate::measure::{Row, Stats};
use crate::scenarios::{
    confined_rows, per_command, sandboxed, spec, Options, Policy, SandboxRow, DEFAULTS,
};

fn configurations() -> [SandboxRow; 4] {
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

/// Makes `dir` a repository to the protected paths' resolution (what
/// `git init` leaves that it reads), its hooks at `hooks`.
fn repository(dir: &Path, hooks: &str) {
    let git = dir.join(".git");
    for sub in ["objects", "refs/heads"] {
        std::fs::create_dir_all(git.join(sub)).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap_or_else(|e| panic!("{e}"));
    let config = format!("[core]\n\tbare = false\n\thooksPath = {hooks}\n");
    std::fs::write(git.join("config"), config).unwrap_or_else(|e| panic!("{e}"));
}

/// Per command, each after the repository's hooks moved (a changed git
/// config: what is protected changed, so the sandbox is built again).
async fn after_a_change(executor: &dyn BashExecutor, workspace: &Path, n: usize) -> f64 {
    let spec = spec(executor, "true");
    let mut total = 0.0;
    for at in 0..n {
        repository(workspace, &format!("hooks-{at}"));
        let started = std::time::Instant::now();
        if let Err(err) = executor.run(spec.clone()).await {
            panic!("`true` failed: {err}");
        }
        total += crate::measure::ms(started.elapsed());
    }
    total / n as f64
}

/// Rows 14a-14e.
pub(crate) async fn warm_rows(options: &Options) -> Vec<Row> {
    let n = options.commands.max(2);
    let baseline = format!("baseline: unconfined LocalBashExecutor, {n} commands");
    let mut rows = confined_rows(options, configurations(), n, &baseline).await;
    rows.push(rebuild_row(options).await);
    rows
}

/// Row 14e's label.
const LABEL: &str = "14e `true` after a changed git config, bwrap workspace-write, warm";

/// 14e: a warm command after a protected-set change (the sandbox built
/// again) beside one without, in a repository.
async fn rebuild_row(options: &Options) -> Row {
    let workspace = options.scratch.join("dsh-bench-workspace");
    repository(&workspace, "hooks");
    let row = rebuild_row_in(options, &workspace).await;
    let _ = std::fs::remove_dir_all(workspace.join(".git"));
    for entry in std::fs::read_dir(&workspace)
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with("hooks") {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
    row.unwrap_or_else(|why| Row::skipped(LABEL, "ms/cmd", why))
}

async fn rebuild_row_in(options: &Options, workspace: &Path) -> Result<Row, String> {
    let mode = SandboxMode::WorkspaceWrite;
    let confined = sandboxed(options, Backend::Bwrap, mode, DEFAULTS)
        .ok_or("bubblewrap is not usable here")?;
    confined
        .run(spec(&confined, "true"))
        .await
        .map_err(|err| err.to_string())?;
    let n = (options.commands / 5).max(2);
    let (mut ours, mut base) = (vec![], vec![]);
    for _ in 0..options.rounds {
        ours.push(after_a_change(&confined, workspace, n).await);
        base.push(per_command(&confined, "true", n).await);
    }
    confined.shutdown().await;
    Ok(Row {
        scenario: LABEL.into(),
        ours: Stats::of(ours),
        baseline: Some(Stats::of(base)),
        unit: "ms/cmd",
        peak_rss_mib: None,
        note: "baseline: the same session's commands with nothing changed; the difference is a rebuild".into(),
    })
}
