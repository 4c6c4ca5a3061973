//! What `RemoteBashExecutor` promises beyond the conformance suite: a
//! cancelled or abandoned call stops the command on the server, a lost
//! connection is an error and never a hang, tasks survive a reconnect over
//! HTTP and stay their token's, the server's sandbox is a ceiling, and the
//! server's own token never reaches a command.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_bash::{BashError, BashExecRequest, BashExecutor, SandboxMode, TaskStatus};
use dsh_bash_remote::RemoteBashExecutor;
use tokio_util::sync::CancellationToken;

use common::listening::{Listening, Served};

/// A fail-safe bound on waits that should end in a second or two.
const PATIENCE: Duration = Duration::from_secs(30);

/// Waits for a pid a command wrote to `file`.
async fn pid_in(file: &Path) -> i32 {
    let file = file.to_owned();
    tokio::task::spawn_blocking(move || common::pid_in(&file))
        .await
        .unwrap()
}

async fn gone(pid: i32) -> bool {
    tokio::task::spawn_blocking(move || common::wait_gone(pid))
        .await
        .unwrap()
}

/// `dsh-bash mcp` on the stdio of a bash that writes its pid to `file`.
async fn over_stdio(file: &Path) -> RemoteBashExecutor {
    let mut command = tokio::process::Command::new("bash");
    command.args([
        "-c",
        &format!("echo $$ > {}; exec \"$0\" mcp", file.display()),
        env!("CARGO_BIN_EXE_dsh-bash"),
    ]);
    RemoteBashExecutor::over_stdio(command).await.unwrap()
}

/// Cancels a foreground `sleep` and checks the process on the server went.
async fn cancellation_reaches_the_server(executor: &dyn BashExecutor, dir: &Path) {
    let file = dir.join("sleeper");
    let cancel = CancellationToken::new();
    let mut request = BashExecRequest::new(format!("echo $$ > {}; exec sleep 300", file.display()));
    request.cancel = Some(cancel.clone());
    let spec = executor.resolve(request).unwrap();
    let run = executor.run(spec);
    let watcher = async {
        let pid = pid_in(&file).await;
        cancel.cancel();
        pid
    };
    let (result, pid) = tokio::join!(run, watcher);
    assert!(result.unwrap().aborted);
    assert!(
        gone(pid).await,
        "the cancelled command still runs on the server"
    );

    // Dropping the run's future is a cancellation too.
    let file = dir.join("dropped");
    let spec = executor
        .resolve(BashExecRequest::new(format!(
            "echo $$ > {}; exec sleep 300",
            file.display()
        )))
        .unwrap();
    let run = executor.run(spec);
    tokio::select! {
        _ = run => panic!("the sleep finished"),
        pid = pid_in(&file) => assert!(gone(pid).await, "the abandoned command still runs on the server"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_stops_the_command_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::http(&[]).await;
    cancellation_reaches_the_server(&served, dir.path()).await;
    served.shutdown().await;

    let executor = over_stdio(&dir.path().join("server")).await;
    cancellation_reaches_the_server(&executor, dir.path()).await;
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_stdio_connection_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let server_pid = dir.path().join("server");
    let executor = over_stdio(&server_pid).await;
    let settled = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&settled);
    let _listening = executor.on_task_done(Arc::new(move |task| {
        record.lock().unwrap().push(task.status);
    }));
    let task = executor
        .start(executor.resolve(BashExecRequest::new("sleep 300")).unwrap())
        .await
        .unwrap();
    let spec = executor
        .resolve(BashExecRequest::new("echo started; sleep 300"))
        .unwrap();
    let run = executor.run(spec);
    let killer = async {
        let pid = pid_in(&server_pid).await;
        // Give the run a moment to be in flight, then pull the plug.
        tokio::time::sleep(Duration::from_millis(300)).await;
        // SAFETY: kill(2) on the server process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    };
    let began = Instant::now();
    let (result, ()) = tokio::join!(tokio::time::timeout(PATIENCE, run), killer);
    let result = result.expect("the run hung on a dead connection");
    assert!(
        matches!(result, Err(BashError::Unreachable { .. })),
        "{result:?}"
    );
    assert!(began.elapsed() < PATIENCE);
    let settled_task = tokio::time::timeout(PATIENCE, task.settled())
        .await
        .expect("the task never settled after the connection died");
    assert_eq!(settled_task.status, TaskStatus::Killed);
    let read = executor.read_output(&task.id, None).unwrap();
    assert!(
        read.stderr.contains("connection to the server was lost"),
        "{read:?}"
    );
    // Announced once (the announcement follows the settle).
    let deadline = Instant::now() + PATIENCE;
    while settled.lock().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the lost task was never announced"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*settled.lock().unwrap(), vec![TaskStatus::Killed]);
    // Later calls fail at once, clearly.
    let later = executor
        .run(executor.resolve(BashExecRequest::new("true")).unwrap())
        .await;
    assert!(
        matches!(later, Err(BashError::Unreachable { .. })),
        "{later:?}"
    );
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_http_server_is_an_error_not_a_hang() {
    let server = tokio::task::spawn_blocking(|| Listening::start(&[]))
        .await
        .unwrap();
    let mut config = dsh_bash_remote::RemoteConfig::default();
    config.patience = Duration::from_secs(1);
    let executor = RemoteBashExecutor::over_http_with(&server.url, &server.token, config)
        .await
        .unwrap();
    let mut served = Served { executor, server };
    let task = served
        .start(served.resolve(BashExecRequest::new("sleep 300")).unwrap())
        .await
        .unwrap();
    let spec = served.resolve(BashExecRequest::new("sleep 300")).unwrap();
    let run = served.executor.run(spec);
    let pid = served.server.child.id() as i32;
    let killer = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // SAFETY: kill(2) on the server process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    };
    let (result, ()) = tokio::join!(tokio::time::timeout(PATIENCE, run), killer);
    let result = result.expect("the run hung on a dead server");
    assert!(
        matches!(result, Err(BashError::Unreachable { .. })),
        "{result:?}"
    );
    let _ = served.server.child.wait();
    // Its background task settles here once the server has not answered
    // for twice the patience, saying why.
    let settled = tokio::time::timeout(PATIENCE, task.settled())
        .await
        .expect("the task of a dead server never settled");
    assert_eq!(settled.status, TaskStatus::Killed);
    let read = served.read_output(&task.id, None).unwrap();
    assert!(read.stderr.contains("dsh-bash-remote"), "{read:?}");
    let later = served
        .executor
        .run(
            served
                .executor
                .resolve(BashExecRequest::new("true"))
                .unwrap(),
        )
        .await;
    assert!(
        matches!(later, Err(BashError::Unreachable { .. })),
        "{later:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_tasks_survive_a_reconnect_and_stay_their_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "token-of-alice-0123456789\ntoken-of-bob-0123456789\n",
    )
    .unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let server = tokio::task::spawn_blocking({
        let tokens = tokens.clone();
        move || Listening::with_tokens(tempfile::tempdir().unwrap(), &tokens, &[])
    })
    .await
    .unwrap();
    let first = RemoteBashExecutor::over_http(&server.url, "token-of-alice-0123456789")
        .await
        .unwrap();
    let task = first
        .start(
            first
                .resolve(BashExecRequest::new(
                    "echo before; read line; echo after: $line; sleep 300",
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    // The client goes away without shutting down (a crash, a restart).
    drop(first);

    let second = RemoteBashExecutor::over_http(&server.url, "token-of-alice-0123456789")
        .await
        .unwrap();
    let adopted = second.adopt(&task.id, None).await.unwrap();
    assert_eq!(adopted.status, TaskStatus::Running);
    let deadline = Instant::now() + PATIENCE;
    let mut seen = String::new();
    while !seen.contains("before") {
        assert!(Instant::now() < deadline, "never read: {seen:?}");
        seen.push_str(&second.read_output(&task.id, None).unwrap().delta);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let other = RemoteBashExecutor::over_http(&server.url, "token-of-bob-0123456789")
        .await
        .unwrap();
    let refused = other.adopt(&task.id, None).await;
    assert!(
        matches!(&refused, Err(BashError::Remote { code, .. }) if code == "NOT_OWNER"),
        "{refused:?}"
    );
    assert!(matches!(
        other.kill(&task.id).await,
        Err(BashError::UnknownTask { .. })
    ));
    assert_eq!(second.get(&task.id).unwrap().status, TaskStatus::Running);

    assert!(second.kill(&task.id).await.unwrap());
    assert_eq!(second.get(&task.id).unwrap().status, TaskStatus::Killed);
    other.shutdown().await;
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_sandbox_is_a_ceiling() {
    // A server that does not confine cannot run a command confined: it
    // says so instead of running it open.
    let served = Served::http(&[]).await;
    assert_eq!(served.sandbox_mode(), None);
    let mut request = BashExecRequest::new("touch should-not-exist");
    request.sandbox_mode = Some(SandboxMode::ReadOnly);
    let refused = served.run(served.resolve(request).unwrap()).await;
    assert!(
        matches!(&refused, Err(BashError::Remote { code, .. }) if code == "SANDBOX_UNAVAILABLE"),
        "{refused:?}"
    );
    served.shutdown().await;

    // A confining one refuses anything wider than its mode, under each
    // backend, served by root and by an unprivileged user.
    use common::confined::User;
    for user in [User::Root, User::Nobody] {
        for backend in ["bwrap", "landlock"] {
            a_confining_server_is_a_ceiling(user, backend).await;
        }
    }
    // The binary copy and the unprivileged servers' directories.
    let _ = std::fs::remove_dir_all(common::confined::base());
}

async fn a_confining_server_is_a_ceiling(user: common::confined::User, backend: &'static str) {
    let sandbox = ["--sandbox", "read-only", "--sandbox-backend", backend];
    let what = format!("the sandbox ceiling over HTTP ({backend}, {user:?})");
    if !common::confined::usable_as_or_skip(user, &sandbox, &what) {
        return;
    }
    let server = tokio::task::spawn_blocking(move || match user {
        common::confined::User::Root => Listening::start(&sandbox),
        common::confined::User::Nobody => Listening::start_unprivileged(&sandbox),
    })
    .await
    .unwrap();
    let executor = RemoteBashExecutor::over_http(&server.url, &server.token)
        .await
        .unwrap();
    let served = Served { executor, server };
    assert_eq!(served.sandbox_mode(), Some(SandboxMode::ReadOnly));
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess] {
        let mut request = BashExecRequest::new("true");
        request.sandbox_mode = Some(mode);
        let refused = served.run(served.resolve(request).unwrap()).await;
        assert!(
            matches!(&refused, Err(BashError::Remote { code, .. }) if code == "ESCALATION"),
            "{mode}: {refused:?}"
        );
    }
    let mut request = BashExecRequest::new("true");
    request.network = Some(dsh_bash::NetworkPolicy::On);
    let refused = served.run(served.resolve(request).unwrap()).await;
    assert!(
        matches!(&refused, Err(BashError::Remote { code, .. }) if code == "ESCALATION"),
        "network on: {refused:?}"
    );
    let ran = served
        .run(
            served
                .resolve(BashExecRequest::new("echo confined"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(ran.stdout.text, "confined\n");
    let sandbox = ran.sandbox.expect("no sandbox facts");
    assert_eq!(sandbox.mode, SandboxMode::ReadOnly);
    assert_eq!(
        sandbox.backend.map(|b| b.to_string()).as_deref(),
        Some(backend)
    );
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_token_never_reaches_a_command() {
    let token = "environment-token-0123456789abcdef";
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
    command
        .args(["mcp", "--listen", "127.0.0.1:0"])
        .env("DSH_BASH_TOKEN", token)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    /// Killed when dropped, a failed assertion included.
    struct Server(std::process::Child);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Server(command.spawn().unwrap());
    let stderr = child.0.stderr.take().unwrap();
    let url = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stderr).lines();
        loop {
            let line = lines.next().unwrap().unwrap();
            if let Some(url) = line.strip_prefix("dsh-bash: listening on ") {
                return url.to_owned();
            }
        }
    })
    .await
    .unwrap();
    let executor = RemoteBashExecutor::over_http(&url, token).await.unwrap();
    let result = executor
        .run(
            executor
                .resolve(BashExecRequest::new(
                    "env; cat /proc/self/environ | tr '\\0' '\\n'",
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(result.stdout.text.contains("PATH="), "{result:?}");
    assert!(
        !result.stdout.text.contains(token),
        "the token leaked: {}",
        result.stdout.text
    );
    executor.shutdown().await;
    drop(child);

    // A wrong token cannot connect, and says why.
    let server = tokio::task::spawn_blocking(|| Listening::start(&[]))
        .await
        .unwrap();
    let refused = RemoteBashExecutor::over_http(&server.url, "not-the-token-0123456789")
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("401")
            || refused.to_string().to_lowercase().contains("unauthorized"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_choose_the_sandbox_runner_or_its_loader() {
    if !common::confined::usable_or_skip(
        &["--sandbox", "workspace-write", "--sandbox-backend", "bwrap"],
        "the runner's environment over HTTP",
    ) {
        return;
    }
    // The server with its usual environment, and with none at all (no
    // PATH: the runner must still be found on the server's side).
    for empty in [false, true] {
        a_client_cannot_choose_the_runner(empty).await;
    }
}

async fn a_client_cannot_choose_the_runner(empty_environment: bool) {
    let workspace = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let ws = workspace.path().to_str().unwrap().to_owned();
    let args = [
        "--sandbox",
        "workspace-write",
        "--sandbox-backend",
        "bwrap",
        "--workdir",
        ws.as_str(),
    ]
    .map(String::from);
    let server = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if empty_environment {
            Listening::start_in_empty_environment(&args)
        } else {
            Listening::start(&args)
        }
    })
    .await
    .unwrap();
    let executor = RemoteBashExecutor::over_http(&server.url, &server.token)
        .await
        .unwrap();
    let served = Served { executor, server };
    // A confined command plants a `bwrap` of its own in the workspace...
    let planted = outside.path().join("pwned");
    let plant = format!(
        "mkdir -p bin && printf '#!/bin/sh\\ntouch {}\\n' > bin/bwrap && chmod +x bin/bwrap",
        planted.display()
    );
    let result = served
        .run(served.resolve(BashExecRequest::new(plant)).unwrap())
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(0), "{result:?}");
    // ...and the next call puts it first on PATH: the runner is still the
    // real one, found on the server's own PATH, so the command is confined.
    let mut request = BashExecRequest::new(format!("touch {}/escaped", outside.path().display()));
    request.env = Some([("PATH".to_owned(), format!("{ws}/bin:/usr/bin:/bin"))].into());
    let result = served.run(served.resolve(request).unwrap()).await.unwrap();
    assert_ne!(result.exit_code, Some(0), "{result:?}");
    assert!(!planted.exists(), "the planted runner ran");
    assert!(
        !outside.path().join("escaped").exists(),
        "the command escaped"
    );
    // What the runner's loader acts on is refused, with what to do instead.
    for name in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
    ] {
        let mut request = BashExecRequest::new("true");
        request.env = Some([(name.to_owned(), format!("{ws}/x"))].into());
        let refused = served.run(served.resolve(request).unwrap()).await;
        match refused {
            Err(BashError::Remote { code, message }) => {
                assert_eq!(code, "INVALID_ENV", "{message}");
                assert!(
                    message.contains(name) && message.contains("inside the command"),
                    "{message}"
                );
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    // Set inside the command, it applies inside the sandbox.
    let result = served
        .run(
            served
                .resolve(BashExecRequest::new(
                    "LD_LIBRARY_PATH=/nowhere printenv LD_LIBRARY_PATH",
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(result.stdout.text, "/nowhere\n");
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_kills_both_wait_for_the_settle() {
    let served = Served::http(&[]).await;
    // A shell that ignores SIGTERM makes the kill wait out the grace.
    let task = served
        .start(
            served
                .resolve(BashExecRequest::new(
                    "trap '' TERM; sleep 300 & wait; sleep 300",
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    let (first, (second, status_after_second)) = tokio::join!(served.kill(&task.id), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let killed = served.kill(&task.id).await.unwrap();
        (killed, served.get(&task.id).map(|t| t.status))
    });
    assert!(
        first.unwrap() ^ second,
        "exactly one kill reports killing it"
    );
    assert_eq!(
        status_after_second,
        Some(TaskStatus::Killed),
        "the second kill returned before the settle"
    );
    served.shutdown().await;
}

/// A remote executor over stdio in the same process as a local one whose
/// process-tree containment adopts orphans: the `ssh`-like child of the
/// remote one (a child of this process, started by tokio, in its session)
/// is never taken for a command's orphan, neither when a command's
/// leftover is stopped at its exit nor when a timeout stops a tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_child_survives_process_tree_stops_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let remote_pid = dir.path().join("remote");
    let remote = over_stdio(&remote_pid).await;
    let pid = pid_in(&remote_pid).await;
    let local = dsh_bash_local::LocalBashExecutor::new(dsh_bash_local::LocalConfig {
        containment: dsh_bash_local::ContainmentChoice::ProcessTree,
        adopt_orphans: true,
        grace: Duration::from_millis(200),
        ..dsh_bash_local::LocalConfig::default()
    })
    .unwrap();
    // A leftover in a session of its own, adopted once the shell exits.
    let left = local
        .run(
            local
                .resolve(BashExecRequest::new("setsid sleep 30 & echo started"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(left.stdout.text, "started\n");
    assert!(left.leftovers_stopped >= 1, "{left:?}");
    // A timeout's stop of a whole tree.
    let mut request = BashExecRequest::new("sleep 30 & sleep 30");
    request.timeout = Some(Duration::from_millis(300));
    let stopped = local.run(local.resolve(request).unwrap()).await.unwrap();
    assert!(stopped.timed_out, "{stopped:?}");
    assert!(
        common::alive(pid),
        "the remote executor's child was stopped"
    );
    let echoed = remote
        .run(remote.resolve(BashExecRequest::new("echo alive")).unwrap())
        .await
        .unwrap();
    assert_eq!(echoed.stdout.text, "alive\n");
    remote.shutdown().await;
    local.shutdown().await;
}
