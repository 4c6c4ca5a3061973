//! "The tree is gone" is the event a command's private TMPDIR hangs on:
//! under Landlock (where the TMPDIR is a directory on the host) a leftover
//! still in its grace when the result comes back keeps its TMPDIR until it
//! is gone, and the TMPDIR goes then. Under both containments (a cgroup
//! where the host gives one, the process-tree walk with orphan adoption).
//! Synchronised on files and a FIFO, with fail-safe bounds; skips loudly
//! without Landlock, fails under `DSH_TEST_REQUIRE_SANDBOX=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_bash::{BashExecRequest, BashExecutor, SandboxMode};
use dsh_bash_local::{ContainmentChoice, LocalConfig};
use dsh_bash_sandbox::SandboxConfig;
use dsh_sandbox_local::{Backend, LocalSandboxConfig, LocalSandboxProvider};

/// Waits (fail-safe 20 s) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: never");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

async fn outlives_its_command_until_its_last_leftover(containment: ContainmentChoice) {
    let workspace = tempfile::tempdir().unwrap();
    let ws = workspace.path().to_owned();
    let executor = dsh_bash_sandbox::sandboxed(
        SandboxConfig {
            local: LocalConfig {
                // Long enough that only the leftover itself ends its grace.
                grace: Duration::from_secs(60),
                cwd: Some(ws.clone()),
                containment,
                adopt_orphans: containment == ContainmentChoice::ProcessTree,
                ..LocalConfig::default()
            },
            mode: SandboxMode::WorkspaceWrite,
            workspace_root: Some(ws.clone()),
            ..SandboxConfig::default()
        },
        Arc::new(
            LocalSandboxProvider::new(LocalSandboxConfig {
                backend: Backend::Landlock,
                ..LocalSandboxConfig::default()
            })
            .unwrap(),
        ),
    )
    .unwrap();
    mkfifo(&ws.join("gate"));
    let result = executor
        .run(
            executor
                .resolve(BashExecRequest::new(
                    "(trap '' TERM; echo \"$TMPDIR\" > tmpdir; read line < gate; echo late > \"$TMPDIR/late\" && echo wrote > wrote) & until [ -s tmpdir ]; do :; done",
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(0), "{result:?}");
    assert_eq!(result.leftovers_stopped, 1, "{result:?}");
    let tmpdir = PathBuf::from(
        std::fs::read_to_string(ws.join("tmpdir"))
            .unwrap()
            .trim_end(),
    );
    assert!(
        tmpdir.is_dir(),
        "{containment:?}: the TMPDIR went while its leftover still runs"
    );
    // The leftover, in its grace, still has its TMPDIR.
    let gate = ws.join("gate");
    tokio::task::spawn_blocking(move || std::fs::write(gate, "go\n").unwrap())
        .await
        .unwrap();
    until("the leftover wrote its TMPDIR", || {
        ws.join("wrote").exists()
    })
    .await;
    // It exits of itself: the tree is gone, and so is the TMPDIR.
    until("the TMPDIR is removed once the tree is gone", || {
        !tmpdir.exists()
    })
    .await;
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_tmpdir_outlives_its_command_until_its_last_leftover() {
    let probe = LocalSandboxProvider::new(LocalSandboxConfig {
        backend: Backend::Landlock,
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    if let Err(why) = probe.backend().await {
        let require = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
        assert!(
            !require,
            "Landlock is required (DSH_TEST_REQUIRE_SANDBOX=1): {why}"
        );
        eprintln!("SKIP the TMPDIR and its leftovers: Landlock is unusable here ({why})");
        return;
    }
    outlives_its_command_until_its_last_leftover(ContainmentChoice::Auto).await;
    outlives_its_command_until_its_last_leftover(ContainmentChoice::ProcessTree).await;
}
