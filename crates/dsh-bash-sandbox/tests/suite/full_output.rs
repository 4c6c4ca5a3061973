//! The full output stays reachable: a spill path printed to the model can
//! be read by the next command, under every backend and confining mode
//! (bubblewrap's private `/tmp` would otherwise hide it).

use std::sync::Arc;

use dsh_bash::SandboxMode;
use dsh_bash_local::LocalConfig;
use dsh_bash_sandbox::SandboxConfig;
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};

use super::fixture::{backends, local, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spill_path_is_readable_by_the_next_command() {
    for backend in backends().await {
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let root = tempfile::tempdir().unwrap();
            let provider = LocalSandboxProvider::new(LocalSandboxConfig {
                backend: backend.clone(),
                ..LocalSandboxConfig::default()
            })
            .unwrap();
            // The default spill parent: the host's temp dir (/tmp).
            let executor = dsh_bash_sandbox::sandboxed(
                SandboxConfig {
                    local: LocalConfig {
                        cwd: Some(root.path().to_owned()),
                        max_output_bytes: 100,
                        ..local()
                    },
                    mode,
                    workspace_root: Some(root.path().to_owned()),
                    ..SandboxConfig::default()
                },
                Arc::new(provider),
            )
            .unwrap();
            let first = run(&executor, "seq 1 10000", None).await;
            let path = first
                .stdout
                .spill_path
                .clone()
                .unwrap_or_else(|| panic!("{backend:?}/{mode}: no spill file: {first:?}"));
            let second = run(&executor, &format!("wc -l < {}", path.display()), None).await;
            assert_eq!(
                second.stdout.text.trim(),
                "10000",
                "{backend:?}/{mode}: {}",
                second.stderr.text
            );
            dsh_bash::BashExecutor::shutdown(&executor).await;
        }
    }
}

/// A command too long for one argument reaches the shell under every
/// backend (its descriptor passes the runner) and the sandbox still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_command_runs_confined() {
    use super::fixture::executor;
    for backend in backends().await {
        let root = tempfile::tempdir().unwrap();
        let executor = executor(backend.clone(), SandboxMode::WorkspaceWrite, root.path());
        let body = "x".repeat(300_000);
        let command = format!(
            "cat > inside <<'EOF'\n{body}\nEOF\nwc -c < inside; echo denied > /etc/dsh-long-$$ 2>/dev/null || echo refused"
        );
        let result = run(&executor, &command, None).await;
        assert_eq!(
            result.stdout.text, "300001\nrefused\n",
            "{backend:?}: {}",
            result.stderr.text
        );
        dsh_bash::BashExecutor::shutdown(&executor).await;
    }
}
