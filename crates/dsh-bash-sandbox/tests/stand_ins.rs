//! Stand-ins under load: commands confined in `workspace-write` one right
//! after another (each after a call refused once its stand-ins were
//! claimed), in a workspace that has none of the protected paths, so every
//! command claims stand-ins the previous one may be removing. Each
//! must run; none may fail with "cannot keep the protected path". Without
//! bubblewrap the test skips loudly; with `DSH_TEST_REQUIRE_SANDBOX=1` (set
//! by CI) it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use dsh_bash::{BashExecRequest, BashExecutor, SandboxMode};
use dsh_bash_local::LocalConfig;
use dsh_bash_sandbox::SandboxConfig;
use dsh_sandbox_local::{Backend, LocalSandboxConfig, LocalSandboxProvider};

const WORKERS: usize = 1;
const COMMANDS: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_claiming_the_same_stand_ins_all_run() {
    if !common::bwrap_or_skip("stand-ins under load") {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let provider = LocalSandboxProvider::new(LocalSandboxConfig {
        backend: Backend::Bwrap,
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    let executor = Arc::new(
        dsh_bash_sandbox::sandboxed(
            SandboxConfig {
                local: LocalConfig {
                    grace: Duration::from_millis(400),
                    cwd: Some(workspace.path().to_owned()),
                    ..LocalConfig::default()
                },
                mode: SandboxMode::WorkspaceWrite,
                workspace_root: Some(workspace.path().to_owned()),
                ..SandboxConfig::default()
            },
            Arc::new(provider),
        )
        .unwrap(),
    );
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let executor = Arc::clone(&executor);
            tokio::spawn(async move {
                for c in 0..COMMANDS {
                    // A call refused after its stand-ins were claimed
                    // releases them in the background as the next starts.
                    let mut refused = BashExecRequest::new("true");
                    refused.env = Some([("LD_PRELOAD".to_owned(), "x".to_owned())].into());
                    let refused = executor.resolve(refused).unwrap();
                    assert!(
                        matches!(
                            executor.run(refused).await,
                            Err(dsh_bash::BashError::EnvRefused { .. })
                        ),
                        "a loader variable reached bwrap"
                    );
                    let spec = executor
                        .resolve(BashExecRequest::new(format!("echo {w}-{c}")))
                        .unwrap();
                    let result = executor
                        .run(spec)
                        .await
                        .unwrap_or_else(|err| panic!("worker {w}, command {c}: {err}"));
                    assert_eq!(result.stdout.text, format!("{w}-{c}\n"), "{result:?}");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    executor.shutdown().await;
    // The last holder removed every stand-in.
    let left: Vec<_> = std::fs::read_dir(workspace.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "stand-ins left behind: {left:?}");
}
