//! A load test on loopback, bounded in time: 100 concurrent sessions over
//! Streamable HTTP (one token each, so one executor session each), each
//! running 20 short commands and one background task through
//! `RemoteBashExecutor`. Nothing is lost (every command's exact output,
//! every task's output), no session reaches another's task, and SIGTERM
//! leaves no process behind.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_bash::{BashError, BashExecRequest, BashExecutor, BashTaskId, TaskStatus};
use dsh_bash_remote::RemoteBashExecutor;

use common::listening::Listening;

const SESSIONS: usize = 100;
const COMMANDS: usize = 20;
/// The whole run's fail-safe bound.
const BOUND: Duration = Duration::from_secs(240);

fn token(n: usize) -> String {
    format!("load-test-token-{n:04}-0123456789")
}

/// One session's work: its executor, its background task and that task's pid.
async fn session(
    url: Arc<str>,
    n: usize,
    pids: Arc<std::path::PathBuf>,
) -> (RemoteBashExecutor, BashTaskId) {
    let executor = RemoteBashExecutor::over_http(&url, &token(n))
        .await
        .unwrap();
    let pid_file = pids.join(format!("bg-{n}"));
    let spec = executor
        .resolve(BashExecRequest::new(format!(
            "echo $$ > {}; echo background-{n}; exec sleep 600",
            pid_file.display()
        )))
        .unwrap();
    let task = executor.start(spec).await.unwrap();
    for c in 0..COMMANDS {
        let request =
            BashExecRequest::new(format!("echo session-{n}-command-{c}; echo err-{c} >&2"));
        let result = executor
            .run(executor.resolve(request).unwrap())
            .await
            .unwrap();
        assert_eq!(result.exit_code, Some(0), "{result:?}");
        assert_eq!(result.stdout.text, format!("session-{n}-command-{c}\n"));
        assert_eq!(result.stderr.text, format!("err-{c}\n"));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    while !seen.contains(&format!("background-{n}\n")) {
        assert!(
            Instant::now() < deadline,
            "session {n} never read its task: {seen:?}"
        );
        seen.push_str(&executor.read_output(&task.id, None).unwrap().stdout);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen,
        format!("background-{n}\n"),
        "session {n} read another's output"
    );
    assert_eq!(executor.get(&task.id).unwrap().status, TaskStatus::Running);
    (executor, task.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sessions_of_twenty_commands_and_a_task_each() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let text: String = (0..SESSIONS).map(|n| token(n) + "\n").collect();
    std::fs::write(&tokens, text).unwrap();
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut server = tokio::task::spawn_blocking({
        let tokens = tokens.clone();
        move || {
            Listening::with_tokens(
                tempfile::tempdir().unwrap(),
                &tokens,
                &["--max-sessions", "128"],
            )
        }
    })
    .await
    .unwrap();
    let url: Arc<str> = server.url.clone().into();
    let pids = Arc::new(dir.path().join("pids"));
    std::fs::create_dir(&*pids).unwrap();

    let began = Instant::now();
    let work = async {
        let handles: Vec<_> = (0..SESSIONS)
            .map(|n| tokio::spawn(session(Arc::clone(&url), n, Arc::clone(&pids))))
            .collect();
        let mut done = Vec::new();
        for handle in handles {
            done.push(handle.await.unwrap());
        }
        done
    };
    let sessions = tokio::time::timeout(BOUND, work)
        .await
        .expect("the load did not finish in time");
    let elapsed = began.elapsed();
    println!(
        "{SESSIONS} sessions x ({COMMANDS} commands + 1 task) over HTTP in {elapsed:?} ({:.1} commands/s)",
        (SESSIONS * COMMANDS) as f64 / elapsed.as_secs_f64()
    );

    // Every session's task is its own: the next session can neither take
    // it over nor kill it.
    for n in 0..SESSIONS {
        let (executor, _) = &sessions[n];
        let (_, theirs) = &sessions[(n + 1) % SESSIONS];
        let refused = executor.adopt(theirs, None).await;
        assert!(
            matches!(&refused, Err(BashError::Remote { code, .. }) if code == "NOT_OWNER"),
            "session {n}: {refused:?}"
        );
    }
    let pids: Vec<i32> = (0..SESSIONS)
        .map(|n| {
            std::fs::read_to_string(dir.path().join("pids").join(format!("bg-{n}")))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(pids.iter().all(|&pid| common::alive(pid)));

    // The clients go away without a word; SIGTERM stops everything.
    drop(sessions);
    let status = tokio::task::spawn_blocking(move || {
        let status = server.terminate();
        (status, server)
    })
    .await
    .unwrap();
    assert!(status.0.success(), "{:?}", status.0);
    for pid in pids {
        assert!(common::wait_gone(pid), "{pid} outlived the server");
    }
}
