//! Group 11: what the user's own shell costs a command. `true` with a
//! shell snapshot of a typical size (about 40 KB of functions, aliases and
//! exports, as nvm, pyenv and a few personal helpers make it) beside
//! `true` without one; and `true` whose final directory is reported (the
//! EXIT trap, the pipe) beside one whose is not.

use std::sync::Arc;

use dsh_bash::BashExecutor;
use dsh_bash_local::{LocalBashExecutor, LocalConfig, SnapshotSlot, SnapshotSource};

use crate::measure::Row;
use crate::scenarios::{per_command, Options};

/// A start-up file of about 40 KB.
fn typical_rc() -> String {
    let mut rc = String::new();
    for n in 0..300 {
        rc.push_str(&format!(
            "helper_{n}() {{\n    local target=\"${{1:-.}}\"\n    if [ -d \"$target\" ]; then\n        command ls -la -- \"$target\" | sed -e 's/^/  /'\n    fi\n}}\n"
        ));
    }
    for n in 0..100 {
        rc.push_str(&format!("alias a{n}='git status --short --branch'\n"));
    }
    for n in 0..50 {
        rc.push_str(&format!("export TOOL_{n}_HOME=/opt/tool-{n}\n"));
    }
    rc
}

/// `true` with the snapshot beside `true` without.
async fn snapshot_cost(options: &Options, local: &LocalConfig) -> Row {
    let label = "11a `true` sourcing a 40 KB shell snapshot";
    let file = options.scratch.join("typical.bashrc");
    if let Err(err) = std::fs::write(&file, typical_rc()) {
        return Row::skipped(label, "ms/cmd", err);
    }
    let slot = SnapshotSlot::pending();
    let Ok(capture) = LocalBashExecutor::new(local.clone()) else {
        return Row::skipped(label, "ms/cmd", "no executor");
    };
    let taken = dsh_bash_local::take_shell_snapshot(
        &capture,
        &SnapshotSource::File(file),
        std::time::Duration::from_secs(30),
        None,
    )
    .await;
    capture.shutdown().await;
    let bytes = match &taken {
        Ok(snapshot) => snapshot.summary().script_bytes,
        Err(err) => return Row::skipped(label, "ms/cmd", err),
    };
    slot.settle(taken);
    let with = LocalBashExecutor::new(LocalConfig {
        shell_snapshot: Some(Arc::clone(&slot)),
        ..local.clone()
    });
    let (Ok(with), Ok(without)) = (with, LocalBashExecutor::new(local.clone())) else {
        return Row::skipped(label, "ms/cmd", "no executor");
    };
    let figures = alternate(options, &with, &without, |_| {}).await;
    with.shutdown().await;
    without.shutdown().await;
    Row::against(
        label,
        figures,
        "ms/cmd",
        format!("baseline: no snapshot; the script is {bytes} bytes; target < +1 ms"),
    )
}

/// `true` reporting its final directory beside `true` that does not.
async fn cwd_cost(options: &Options, local: &LocalConfig) -> Row {
    let label = "11b `true` reporting its final directory";
    let Ok(executor) = LocalBashExecutor::new(local.clone()) else {
        return Row::skipped(label, "ms/cmd", "no executor");
    };
    let figures = alternate(options, &executor, &executor, |spec| spec.report_cwd = true).await;
    executor.shutdown().await;
    Row::against(
        label,
        figures,
        "ms/cmd",
        "baseline: the same command, no report; target < +0.1 ms".into(),
    )
}

/// Per-command times of `ours` (each spec changed by `adjust`) and
/// `base`, in alternating rounds after a warm-up.
async fn alternate(
    options: &Options,
    ours: &LocalBashExecutor,
    base: &LocalBashExecutor,
    adjust: impl Fn(&mut dsh_bash::BashExecSpec),
) -> (Vec<f64>, Vec<f64>) {
    let mut spec = crate::scenarios::spec(ours, "true");
    adjust(&mut spec);
    per_command(base, "true", 5).await;
    let (mut mine, mut theirs) = (vec![], vec![]);
    for _ in 0..options.rounds {
        let started = std::time::Instant::now();
        for _ in 0..options.commands {
            if let Err(err) = ours.run(spec.clone()).await {
                panic!("true failed: {err}");
            }
        }
        mine.push(started.elapsed().as_secs_f64() * 1e3 / options.commands as f64);
        theirs.push(per_command(base, "true", options.commands).await);
    }
    (mine, theirs)
}

/// The rows of group 11.
pub async fn shell_rows(options: &Options, local: &LocalConfig) -> Vec<Row> {
    vec![
        snapshot_cost(options, local).await,
        cwd_cost(options, local).await,
    ]
}
