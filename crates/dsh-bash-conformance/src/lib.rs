//! The behaviour every [`BashExecutor`] promises, as checks any executor
//! can be run against: the local one, the sandboxing one, and a remote one
//! later, through the trait alone (nothing here knows how a command runs).
//! A check uses only what every executor shares: `bash`, `echo`, `cat`,
//! `pwd`, `sleep`, `head` and `tr` where commands run.
//!
//! [`conformance_suite!`] turns the checks into one test per behaviour in
//! the calling test file, given how to build a fresh executor. A check
//! panics with what it saw when the executor breaks the promise.
//!
//! # Example
//!
//! In a test file (`tests/conformance.rs`), given a function that builds
//! the executor under test:
//!
//! ```text
//! fn executor() -> Option<Arc<dyn BashExecutor>> { Some(Arc::new(MyExecutor::new())) }
//! dsh_bash_conformance::conformance_suite!(executor());
//! ```
//!
//! Or one check at a time:
//!
//! ```no_run
//! // no_run: a check starts real commands; this example has no executor
//! // to give it.
//! # async fn demo(executor: std::sync::Arc<dyn dsh_bash::BashExecutor>) {
//! dsh_bash_conformance::exit_code_and_streams(executor).await;
//! # }
//! ```
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dsh_bash::{
    BashError, BashExecRequest, BashExecutor, BashRunResult, BashTask, OutputCursor, TaskStatus,
};
use tokio_util::sync::CancellationToken;

/// A fail-safe bound on waits that should end in milliseconds.
const PATIENCE: Duration = Duration::from_secs(20);

async fn run(executor: &dyn BashExecutor, request: BashExecRequest) -> BashRunResult {
    let spec = executor
        .resolve(request)
        .unwrap_or_else(|err| panic!("resolve: {err}"));
    executor
        .run(spec)
        .await
        .unwrap_or_else(|err| panic!("run: {err}"))
}

/// Starts `request` as a background task.
async fn start(executor: &dyn BashExecutor, request: BashExecRequest) -> BashTask {
    let spec = executor
        .resolve(request)
        .unwrap_or_else(|err| panic!("resolve: {err}"));
    executor
        .start(spec)
        .await
        .unwrap_or_else(|err| panic!("start: {err}"))
}

/// Exit code, stdout and stderr come back apart, the output whole.
pub async fn exit_code_and_streams(executor: Arc<dyn BashExecutor>) {
    let result = run(
        &*executor,
        BashExecRequest::new("echo out; echo err >&2; exit 3"),
    )
    .await;
    assert_eq!(result.exit_code, Some(3), "{result:?}");
    assert_eq!(result.stdout.text, "out\n", "{result:?}");
    assert_eq!(result.stderr.text, "err\n", "{result:?}");
    assert!(!result.timed_out && !result.aborted, "{result:?}");
    executor.shutdown().await;
}

/// The command runs in the spec's workdir, with the request's stdin and
/// extra environment.
pub async fn workdir_stdin_and_environment(executor: Arc<dyn BashExecutor>) {
    let mut request = BashExecRequest::new("pwd; cat; echo \"$DSH_CONFORMANCE\"");
    request.stdin = Some(b"from stdin\n".to_vec());
    request.env = Some(
        [("DSH_CONFORMANCE".to_owned(), "from env".to_owned())]
            .into_iter()
            .collect(),
    );
    let spec = executor
        .resolve(request)
        .unwrap_or_else(|err| panic!("resolve: {err}"));
    let workdir = spec.workdir.display().to_string();
    let result = executor
        .run(spec)
        .await
        .unwrap_or_else(|err| panic!("run: {err}"));
    assert_eq!(
        result.stdout.text,
        format!("{workdir}\nfrom stdin\nfrom env\n"),
        "{result:?}"
    );
    // A name holding `=` would set another variable than the one named.
    let mut request = BashExecRequest::new("echo ran");
    request.env = Some(
        [("GLIBC_TUNABLES=x".to_owned(), "1".to_owned())]
            .into_iter()
            .collect(),
    );
    let refused = match executor.resolve(request) {
        Err(err) => err,
        Ok(spec) => match executor.run(spec).await {
            Err(err) => err,
            Ok(result) => panic!("ran with a name holding '=': {result:?}"),
        },
    };
    assert_eq!(refused.code(), "INVALID_ENV", "{refused}");
    executor.shutdown().await;
}

/// A timeout stops the command promptly and says so. (Long enough for a
/// loaded 2-core machine to start the shell through any executor, ssh
/// included, before it runs out: the output before it is kept.)
pub async fn a_timeout_stops_the_command(executor: Arc<dyn BashExecutor>) {
    let mut request = BashExecRequest::new("echo started; sleep 30");
    request.timeout = Some(Duration::from_millis(2_000));
    let began = Instant::now();
    let result = run(&*executor, request).await;
    assert!(result.timed_out, "{result:?}");
    assert_eq!(result.timeout_ms, 2_000, "{result:?}");
    assert_eq!(result.stdout.text, "started\n", "{result:?}");
    assert!(began.elapsed() < PATIENCE, "took {:?}", began.elapsed());
    executor.shutdown().await;
}

/// Cancelling the request's token stops a foreground command.
pub async fn cancellation_stops_a_foreground_command(executor: Arc<dyn BashExecutor>) {
    let cancel = CancellationToken::new();
    let mut request = BashExecRequest::new("sleep 30");
    request.cancel = Some(cancel.clone());
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let began = Instant::now();
    let result = run(&*executor, request).await;
    let _ = canceller.await;
    assert!(result.aborted, "{result:?}");
    assert!(began.elapsed() < PATIENCE, "took {:?}", began.elapsed());
    executor.shutdown().await;
}

/// A zero timeout is refused before anything runs.
pub async fn a_zero_timeout_is_refused(executor: Arc<dyn BashExecutor>) {
    let mut request = BashExecRequest::new("true");
    request.timeout = Some(Duration::ZERO);
    assert!(
        matches!(executor.resolve(request), Err(BashError::InvalidTimeout)),
        "a zero timeout was accepted"
    );
    executor.shutdown().await;
}

/// Output over the in-memory cap keeps its tail and its true size.
pub async fn long_output_keeps_its_tail_and_size(executor: Arc<dyn BashExecutor>) {
    let result = run(
        &*executor,
        BashExecRequest::new("head -c 300000 /dev/zero | tr '\\0' a; echo; echo end"),
    )
    .await;
    assert_eq!(result.exit_code, Some(0), "{result:?}");
    assert!(result.stdout.truncated, "not truncated");
    assert_eq!(result.stdout.total_bytes, 300_005);
    assert!(result.stdout.text.ends_with("a\nend\n"));
    assert!(result.stdout.spill_path.is_some(), "no full-output path");
    executor.shutdown().await;
}

/// A read can be asked again from any position an earlier read ended at:
/// the same text comes back, the default read goes on from the last
/// position handed out, and a position past the output is refused.
pub async fn reads_are_repeated_by_position(executor: Arc<dyn BashExecutor>) {
    let task = start(
        &*executor,
        BashExecRequest::new("echo one; echo two >&2; echo three"),
    )
    .await;
    let settled = tokio::time::timeout(PATIENCE, task.settled())
        .await
        .unwrap_or_else(|_| panic!("the task never settled"));
    assert_eq!(
        settled.status,
        TaskStatus::Completed,
        "{:?}",
        executor.read_output(&task.id, Some(OutputCursor::default()))
    );
    let read = |since: Option<OutputCursor>| {
        executor
            .read_output(&task.id, since)
            .unwrap_or_else(|err| panic!("read from {since:?}: {err}"))
    };
    // A settled snapshot may precede the last pull of a remote executor:
    // read until the whole stream is in.
    let deadline = Instant::now() + PATIENCE;
    let mut whole = read(Some(OutputCursor::default()));
    while whole.to.stdout < 10 || whole.to.stderr < 4 {
        assert!(Instant::now() < deadline, "never read whole: {whole:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        whole = read(Some(OutputCursor::default()));
    }
    assert_eq!(
        (whole.stdout.as_str(), whole.stderr.as_str()),
        ("one\nthree\n", "two\n")
    );
    assert_eq!(
        whole.to,
        OutputCursor {
            stdout: 10,
            stderr: 4
        }
    );
    assert!(!whole.lossy, "{whole:?}");
    let next = read(None);
    assert_eq!(
        (next.delta.as_str(), next.from, next.to),
        ("", whole.to, whole.to)
    );
    let middle = read(Some(OutputCursor {
        stdout: 4,
        stderr: 0,
    }));
    assert_eq!(
        (middle.stdout.as_str(), middle.stderr.as_str()),
        ("three\n", "two\n")
    );
    match executor.read_output(
        &task.id,
        Some(OutputCursor {
            stdout: 11,
            stderr: 0,
        }),
    ) {
        Err(BashError::PositionAhead { end, .. }) => assert_eq!(end, whole.to),
        Err(BashError::Remote { code, .. }) if code == "INVALID_POSITION" => {}
        other => panic!("a position past the output was not refused: {other:?}"),
    }
    executor.shutdown().await;
}

/// A background task can be read as it runs, killed, and then says so.
pub async fn background_tasks_are_read_and_killed(executor: Arc<dyn BashExecutor>) {
    let task = start(&*executor, BashExecRequest::new("echo ready; sleep 30")).await;
    let deadline = Instant::now() + PATIENCE;
    let mut seen = String::new();
    while !seen.contains("ready") {
        assert!(Instant::now() < deadline, "never read: {seen:?}");
        let read = executor
            .read_output(&task.id, None)
            .unwrap_or_else(|err| panic!("read: {err}"));
        seen.push_str(&read.delta);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        executor.get(&task.id).map(|t| t.status),
        Some(TaskStatus::Running)
    );
    let killed = executor
        .kill(&task.id)
        .await
        .unwrap_or_else(|err| panic!("kill: {err}"));
    assert!(killed, "the kill did not report killing it");
    assert_eq!(
        executor.get(&task.id).map(|t| t.status),
        Some(TaskStatus::Killed)
    );
    assert!(
        !executor
            .kill(&task.id)
            .await
            .unwrap_or_else(|err| panic!("kill: {err}")),
        "a second kill reported killing it"
    );
    executor.shutdown().await;
}

/// The tasks a listener was told about: id and exit code.
type Announced = Arc<Mutex<Vec<(String, Option<i32>)>>>;

/// A finished background task is announced once, with its exit code.
pub async fn completion_is_announced_once(executor: Arc<dyn BashExecutor>) {
    let seen: Announced = Arc::default();
    let record = Arc::clone(&seen);
    let _listening = executor.on_task_done(Arc::new(move |task| {
        record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((task.id.to_string(), task.exit_code));
    }));
    let task = start(&*executor, BashExecRequest::new("exit 4")).await;
    let settled = tokio::time::timeout(PATIENCE, task.settled())
        .await
        .unwrap_or_else(|_| panic!("never settled"));
    assert_eq!(settled.status, TaskStatus::Completed);
    assert_eq!(settled.exit_code, Some(4));
    let count = || {
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(id, _)| *id == task.id.to_string())
            .count()
    };
    let deadline = Instant::now() + PATIENCE;
    while count() == 0 {
        assert!(Instant::now() < deadline, "never announced");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A second announcement would come soon after the first, if at all.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count(), 1, "announced more than once");
    let announced = seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(id, _)| *id == task.id.to_string())
        .map(|(_, code)| *code);
    assert_eq!(announced, Some(Some(4)), "announced with another exit code");
    executor.shutdown().await;
}

/// The owner given at start is the one reported; an unknown task is an
/// error naming it.
pub async fn owners_and_unknown_tasks(executor: Arc<dyn BashExecutor>) {
    let mut request = BashExecRequest::new("sleep 30");
    let owner = dsh_bash::OwnerToken::new("session-a");
    request.owner = Some(owner.clone());
    let task = start(&*executor, request).await;
    assert_eq!(executor.owner_of(&task.id), Some(owner));
    let unknown = dsh_bash::BashTaskId::new("no-such-task");
    assert!(matches!(
        executor.read_output(&unknown, None),
        Err(BashError::UnknownTask { .. })
    ));
    assert!(executor.get(&unknown).is_none());
    executor.shutdown().await;
}

/// Shutdown stops what runs, tells no listener about it, and refuses what
/// comes after.
pub async fn shutdown_stops_everything_and_refuses_more(executor: Arc<dyn BashExecutor>) {
    let told: Arc<Mutex<usize>> = Arc::default();
    let count = Arc::clone(&told);
    let _listening = executor.on_task_done(Arc::new(move |_| {
        *count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }));
    let task = start(&*executor, BashExecRequest::new("sleep 30")).await;
    tokio::time::timeout(PATIENCE, executor.shutdown())
        .await
        .unwrap_or_else(|_| panic!("shutdown hung"));
    let settled = tokio::time::timeout(PATIENCE, task.settled())
        .await
        .unwrap_or_else(|_| panic!("the task outlived shutdown"));
    assert_eq!(settled.status, TaskStatus::Killed);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        *told.lock().unwrap_or_else(PoisonError::into_inner),
        0,
        "a listener was told about what shutdown killed"
    );
    let after = executor
        .resolve(BashExecRequest::new("true"))
        .map(|spec| executor.run(spec));
    match after {
        Err(_) => {}
        Ok(run) => assert!(run.await.is_err(), "ran a command after shutdown"),
    }
}

/// Starts `command` as a background task in a terminal.
async fn in_terminal(executor: &dyn BashExecutor, command: &str) -> dsh_bash::BashTaskId {
    let mut request = BashExecRequest::new(command);
    request.terminal = Some(dsh_bash::TerminalSize::default());
    start(executor, request).await.id
}

/// Reads the task's output into `seen` until it holds `needle`.
async fn read_until(
    executor: &dyn BashExecutor,
    id: &dsh_bash::BashTaskId,
    seen: &mut String,
    needle: &str,
) {
    let deadline = Instant::now() + PATIENCE;
    while !seen.contains(needle) {
        match executor.read_output(id, None) {
            Ok(read) => seen.push_str(&read.delta),
            Err(err) => panic!("read {id}: {err}"),
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} from {id}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn write(executor: &dyn BashExecutor, id: &dsh_bash::BashTaskId, input: &[u8]) {
    if let Err(err) = executor.write_input(id, input).await {
        panic!("write to {id}: {err}");
    }
}

/// A task in a terminal is written to and read back: a prompt answered,
/// `^D` (EOF) ending `cat`, its screen.
pub async fn a_terminal_task_is_written_and_read(executor: Arc<dyn BashExecutor>) {
    let id = in_terminal(
        &*executor,
        "read -p 'name? ' n; echo \"hi $n\"; cat; echo 'cat ended'; sleep 30",
    )
    .await;
    let mut seen = String::new();
    read_until(&*executor, &id, &mut seen, "name? ").await;
    write(&*executor, &id, b"bob\r").await;
    read_until(&*executor, &id, &mut seen, "hi bob").await;
    write(&*executor, &id, b"\x04").await;
    read_until(&*executor, &id, &mut seen, "cat ended").await;
    let screen = match executor.screen(&id).await {
        Ok(screen) => screen,
        Err(err) => panic!("screen of {id}: {err}"),
    };
    assert!(
        screen.lines().any(|row| row.starts_with("hi bob")),
        "{screen:?}"
    );
    let _ = executor.kill(&id).await;
    executor.shutdown().await;
}

/// `^C` interrupts a terminal task's foreground job; its shell goes on.
/// The job is `cat`: once it has copied a typed line back it has execed
/// and blocks reading the terminal, so one `^C` then reaches it.
pub async fn ctrl_c_interrupts_the_foreground_job(executor: Arc<dyn BashExecutor>) {
    let command =
        "trap 'echo caught' INT; echo ready; for i in 1 2; do cat; echo \"next $i\"; done";
    let id = in_terminal(&*executor, command).await;
    let mut seen = String::new();
    read_until(&*executor, &id, &mut seen, "ready\r\n").await;
    write(&*executor, &id, b"probe\r").await;
    // The terminal's echo, then cat's copy.
    read_until(&*executor, &id, &mut seen, "probe\r\nprobe\r\n").await;
    write(&*executor, &id, b"\x03").await;
    read_until(&*executor, &id, &mut seen, "next 1").await;
    assert!(
        seen.find("caught")
            .is_some_and(|at| at < seen.find("next 1").unwrap_or(0)),
        "the shell's INT trap ran: {seen:?}"
    );
    let status = executor.get(&id).map(|task| task.status);
    assert_eq!(
        status,
        Some(TaskStatus::Running),
        "the shell survives: {seen:?}"
    );
    let _ = executor.kill(&id).await;
    executor.shutdown().await;
}

/// A task without a terminal or open stdin refuses input and has no
/// screen, saying how to start one that has.
pub async fn input_is_refused_to_a_task_that_takes_none(executor: Arc<dyn BashExecutor>) {
    let task = start(&*executor, BashExecRequest::new("sleep 30")).await;
    match executor.write_input(&task.id, b"x").await {
        Err(err) => {
            assert_eq!(err.code(), "NOT_INTERACTIVE", "{err}");
            assert!(err.to_string().contains("tty"), "{err}");
        }
        Ok(()) => panic!("a task without input took a write"),
    }
    match executor.screen(&task.id).await {
        Err(err) => assert_eq!(err.code(), "NOT_INTERACTIVE", "{err}"),
        Ok(screen) => panic!("a task without a terminal has a screen: {screen:?}"),
    }
    let _ = executor.kill(&task.id).await;
    executor.shutdown().await;
}

/// Runs `check` on a runtime of its own (what each generated test does).
#[doc(hidden)]
pub fn block_on<F: std::future::Future>(check: F) -> F::Output {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(check),
        Err(err) => panic!("cannot start a runtime: {err}"),
    }
}

/// One `#[test]` per behaviour, each on a fresh executor from
/// `$make` (an expression of type `Option<Arc<dyn BashExecutor>>`,
/// evaluated on the test's runtime, so it may `.await` a connection;
/// `None` skips, the maker having said why).
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@tests $make;
            exit_code_and_streams,
            workdir_stdin_and_environment,
            a_timeout_stops_the_command,
            cancellation_stops_a_foreground_command,
            a_zero_timeout_is_refused,
            long_output_keeps_its_tail_and_size,
            background_tasks_are_read_and_killed,
            reads_are_repeated_by_position,
            completion_is_announced_once,
            owners_and_unknown_tasks,
            shutdown_stops_everything_and_refuses_more,
            a_terminal_task_is_written_and_read,
            ctrl_c_interrupts_the_foreground_job,
            input_is_refused_to_a_task_that_takes_none
        );
    };
    (@tests $make:expr; $($check:ident),*) => {
        $(
            #[test]
            fn $check() {
                $crate::block_on(async {
                    if let Some(executor) = $make {
                        $crate::$check(executor).await;
                    }
                });
            }
        )*
    };
}
