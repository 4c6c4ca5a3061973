//! Scenario 13: a session's own container (`--container IMAGE`) — its
//! first command, which makes the container and starts the server inside
//! (cold), and its later ones (warm) — beside the same commands run by a
//! local executor.

use std::path::Path;
use std::time::Instant;

use dsh_bash::{BashExecRequest, BashExecutor};
use dsh_bash_container::{ContainerBashExecutor, ContainerConfig, Engine};
use dsh_bash_local::{LocalBashExecutor, LocalConfig};

use crate::measure::{ms, Row, Stats};
use crate::scenarios::Options;

/// Runs `true` once on `executor`; its wall time in ms.
async fn once(executor: &dyn BashExecutor) -> Option<f64> {
    let spec = executor.resolve(BashExecRequest::new("true")).ok()?;
    let started = Instant::now();
    let result = executor.run(spec).await.ok()?;
    (result.exit_code == Some(0)).then(|| ms(started.elapsed()))
}

/// A container session's executor over a workspace of its own.
fn session(
    options: &Options,
    image: &str,
    binary: &Path,
) -> Option<(ContainerBashExecutor, tempfile::TempDir)> {
    let workspace = tempfile::tempdir_in(&options.scratch).ok()?;
    let engine = Engine::find(None)
        .map_err(|err| eprintln!("warning: group 13 skipped: {err}"))
        .ok()?;
    let config = ContainerConfig::new(
        engine,
        image.to_owned(),
        std::fs::canonicalize(workspace.path()).ok()?,
        binary.to_owned(),
    );
    let executor = ContainerBashExecutor::new(config)
        .map_err(|err| eprintln!("warning: group 13 skipped: {err}"))
        .ok()?;
    Some((executor, workspace))
}

/// The first command of a new executor, container and local, `rounds`
/// times each; the later ones `commands` times in one session each.
async fn measure(options: &Options, image: &str, binary: &Path) -> Option<[Vec<f64>; 4]> {
    let (mut cold, mut cold_local, mut warm, mut warm_local) = (vec![], vec![], vec![], vec![]);
    for _ in 0..options.rounds {
        let (container, _workspace) = session(options, image, binary)?;
        let first = once(&container).await;
        if first.is_none() {
            eprintln!("warning: group 13 skipped: the container's first command failed");
        }
        cold.push(first?);
        for _ in 0..options.commands {
            warm.push(once(&container).await?);
        }
        container.shutdown().await;
        let local = LocalBashExecutor::new(LocalConfig {
            spill_parent: Some(options.scratch.clone()),
            ..LocalConfig::default()
        })
        .ok()?;
        cold_local.push(once(&local).await?);
        for _ in 0..options.commands {
            warm_local.push(once(&local).await?);
        }
        local.shutdown().await;
    }
    Some([cold, cold_local, warm, warm_local])
}

/// Rows 13a (cold) and 13b (warm); none without an image, an engine or
/// the binary.
pub async fn container_rows(options: &Options) -> Vec<Row> {
    let (Some(image), Some(binary)) = (
        options.container_image.as_deref(),
        options.mcp_binary.as_ref(),
    ) else {
        eprintln!("warning: group 13 skipped: give --container-image IMAGE (and the dsh-bash binary beside the bench)");
        return Vec::new();
    };
    let Some([cold, cold_local, warm, warm_local]) = measure(options, image, binary).await else {
        return Vec::new();
    };
    vec![
        Row {
            scenario: "13a a container session's first `true` (cold)".into(),
            ours: Stats::of(cold),
            baseline: Some(Stats::of(cold_local)),
            unit: "ms",
            peak_rss_mib: None,
            note: format!("makes the container from {image} and starts the server inside; baseline: a new local executor's first command"),
        },
        Row {
            scenario: "13b a container session's later `true` (warm)".into(),
            ours: Stats::of(warm),
            baseline: Some(Stats::of(warm_local)),
            unit: "ms/cmd",
            peak_rss_mib: None,
            note: format!("{} commands per session through the engine's exec stdio; baseline: the same on a local executor", options.commands),
        },
    ]
}
