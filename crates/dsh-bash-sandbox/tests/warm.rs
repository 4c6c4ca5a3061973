//! A session's warm sandbox under bubblewrap (`LocalSandboxConfig::warm`):
//! commands enter one sandbox built once, and each keeps what was its own
//! under a `bwrap` of its own: its `/tmp`, its processes, its `/proc`,
//! no capability; a change to what is protected (a new repository) builds
//! it again. Without bubblewrap the tests skip loudly; with
//! `DSH_TEST_REQUIRE_SANDBOX=1` (set by CI) they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash::{BashExecRequest, BashExecutor, BashRunResult, SandboxMode};
use dsh_bash_local::LocalConfig;
use dsh_bash_sandbox::SandboxConfig;
use dsh_sandbox_local::{Backend, LocalSandboxConfig, LocalSandboxProvider};

fn executor(workspace: &Path, mode: SandboxMode, warm: bool) -> Arc<dyn BashExecutor> {
    hiding(workspace, mode, warm, dsh_sandbox::HiddenPaths::none())
}

fn hiding(
    workspace: &Path,
    mode: SandboxMode,
    warm: bool,
    hidden: dsh_sandbox::HiddenPaths,
) -> Arc<dyn BashExecutor> {
    let provider = LocalSandboxProvider::new(LocalSandboxConfig {
        backend: Backend::Bwrap,
        warm,
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    Arc::new(
        dsh_bash_sandbox::sandboxed(
            SandboxConfig {
                local: LocalConfig {
                    grace: Duration::from_millis(400),
                    cwd: Some(workspace.to_owned()),
                    ..LocalConfig::default()
                },
                mode,
                workspace_root: Some(workspace.to_owned()),
                hidden,
                ..SandboxConfig::default()
            },
            Arc::new(provider),
        )
        .unwrap(),
    )
}

/// `git ARGS` in `dir`, which must succeed.
fn git(dir: &Path, args: &[&str]) {
    assert!(std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap()
        .success());
}

async fn run(executor: &Arc<dyn BashExecutor>, command: &str) -> BashRunResult {
    executor
        .run(executor.resolve(BashExecRequest::new(command)).unwrap())
        .await
        .unwrap()
}

/// Who is the first process of the command's pid namespace: bubblewrap's
/// own under a `bwrap` per command, the server's under a warm sandbox.
const FIRST: &str = "cat /proc/1/comm";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_enter_one_sandbox_and_keep_their_own_tmp_processes_and_no_capability() {
    if !common::bwrap_or_skip("warm sandbox") {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let cold = executor(workspace.path(), SandboxMode::WorkspaceWrite, false);
    assert_eq!(run(&cold, FIRST).await.stdout.text, "bwrap\n");
    cold.shutdown().await;
    let warm = executor(workspace.path(), SandboxMode::WorkspaceWrite, true);
    let first = run(&warm, FIRST).await;
    assert_ne!(first.stdout.text, "bwrap\n", "not entered: {first:?}");
    // A command running beside another: the other's /tmp and processes
    // are out of its sight (a FIFO holds the first until the second ran).
    let fifo = workspace.path().join("hold");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let holder = {
        let warm = Arc::clone(&warm);
        tokio::spawn(async move {
            run(&warm, "echo secret > /tmp/mine; sleep 300 & echo $! > /tmp/pid; read -r _ < hold; cat /tmp/mine").await
        })
    };
    let beside = run(
        &warm,
        "while ! [ -p hold ]; do :; done; ls -A /tmp; echo ---; for p in /proc/[0-9]*; do cat $p/comm; done | tr '\\n' ' '; echo; \
         grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; \
         mount -t tmpfs none /mnt 2>&1 || echo refused; echo go > hold",
    )
    .await;
    let holder = holder.await.unwrap();
    assert_eq!(holder.stdout.text, "secret\n", "{holder:?}");
    let text = &beside.stdout.text;
    assert!(!text.contains("mine") && !text.contains("pid"), "{text}");
    assert!(
        !text.contains("sleep"),
        "another command's process seen: {text}"
    );
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("CapBnd:\t0000000000000000"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("refused"), "{text}");
    warm.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_repository_builds_the_sandbox_again_with_its_hooks_read_only() {
    if !common::bwrap_or_skip("warm sandbox rebuilt") {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let warm = executor(workspace.path(), SandboxMode::WorkspaceWrite, true);
    let before = run(&warm, "touch made && echo ok").await;
    assert_eq!(before.stdout.text, "ok\n", "{before:?}");
    git(workspace.path(), &["init", "-q"]);
    // Before, `.git` was missing and kept read-only whole (a stand-in);
    // now a repository, whose objects a commit writes and whose hooks
    // stay read-only: only a sandbox built again knows.
    let planted = run(
        &warm,
        "touch .git/objects/made && echo wrote; echo 'echo pwned' > .git/hooks/pre-commit && echo planted",
    )
    .await;
    assert_eq!(planted.stdout.text, "wrote\n", "{planted:?}");
    assert!(planted.sandbox.as_ref().unwrap().denied, "{planted:?}");
    assert!(!workspace.path().join(".git/hooks/pre-commit").exists());
    // Still one sandbox per session: the workspace stays writable.
    let after = run(&warm, "touch again && echo ok").await;
    assert_eq!(after.stdout.text, "ok\n", "{after:?}");
    warm.shutdown().await;
    let left: Vec<_> = std::fs::read_dir(workspace.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| !["made", "again", ".git"].contains(&name.as_str()))
        .collect();
    assert!(left.is_empty(), "stand-ins left after shutdown: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_get_a_fresh_tmp_and_the_workspace_under_it() {
    if !common::bwrap_or_skip("warm sandbox read-only") {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("seen"), "here\n").unwrap();
    let warm = executor(workspace.path(), SandboxMode::ReadOnly, true);
    let first = run(&warm, "echo x > /tmp/t && cat /tmp/t seen; echo y > f").await;
    assert_eq!(first.stdout.text, "x\nhere\n", "{first:?}");
    assert!(first.sandbox.as_ref().unwrap().denied, "{first:?}");
    let second = run(&warm, "ls /tmp/t 2>&1 || echo fresh").await;
    assert!(second.stdout.text.contains("fresh"), "{second:?}");
    warm.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_file_the_host_replaces_stays_protected() {
    if !common::bwrap_or_skip("warm sandbox, a replaced protected file") {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    git(workspace.path(), &["init", "-q"]);
    std::fs::write(workspace.path().join(".envrc"), "export A=1\n").unwrap();
    let secret = workspace.path().join("secret.txt");
    std::fs::write(&secret, "old\n").unwrap();
    let mut hidden = dsh_sandbox::HiddenPaths::none();
    hidden.hide(secret.to_str().unwrap()).unwrap();
    let warm = hiding(workspace.path(), SandboxMode::WorkspaceWrite, true, hidden);
    let write = "for f in .envrc .git/config; do echo '# planted' >> $f && echo wrote $f; done; cat secret.txt; true";
    let before = run(&warm, write).await;
    assert_eq!(before.stdout.text, "", "{before:?}");
    // An editor's atomic save and `git config` both rename a new file
    // over the old one, which takes its bind along in every namespace.
    let replacement = workspace.path().join(".envrc.tmp");
    std::fs::write(&replacement, "export A=2\n").unwrap();
    std::fs::rename(&replacement, workspace.path().join(".envrc")).unwrap();
    git(workspace.path(), &["config", "user.name", "someone"]);
    let replacement = workspace.path().join("secret.tmp");
    std::fs::write(&replacement, "new\n").unwrap();
    std::fs::rename(&replacement, &secret).unwrap();
    let after = run(&warm, write).await;
    assert_eq!(after.stdout.text, "", "{after:?}");
    let config = std::fs::read_to_string(workspace.path().join(".git/config")).unwrap();
    assert!(!config.contains("planted"), "{config}");
    warm.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_socket_refuses_connections() {
    if !common::bwrap_or_skip("warm sandbox, a hidden socket") {
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let socket = workspace.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let connect = "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
                   s.connect('agent.sock'); print('connected')\" 2>/dev/null || echo refused";
    // The control: a socket nothing hides is reached (a test that could
    // not fail otherwise).
    let open = hiding(
        workspace.path(),
        SandboxMode::WorkspaceWrite,
        true,
        dsh_sandbox::HiddenPaths::none(),
    );
    assert_eq!(run(&open, connect).await.stdout.text, "connected\n");
    open.shutdown().await;
    let mut hidden = dsh_sandbox::HiddenPaths::none();
    hidden.hide(socket.to_str().unwrap()).unwrap();
    let warm = hiding(workspace.path(), SandboxMode::WorkspaceWrite, true, hidden);
    let result = run(&warm, connect).await;
    assert_eq!(result.stdout.text, "refused\n", "{result:?}");
    warm.shutdown().await;
    drop(listener);
}
