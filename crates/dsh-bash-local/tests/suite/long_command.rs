//! Commands of any size up to the documented limit: one too long for an
//! argument (128 KiB) runs with `bash -c` semantics, one over the limit is
//! refused before anything runs.

use dsh_bash::{BashError, BashExecRequest, BashExecutor};

use super::fixture::{executor, run};

/// A command that writes `lines` lines through a heredoc, then checks
/// `$0`, the shell options and that no extra descriptor is open, and exits 7.
fn heredoc(lines: usize) -> String {
    let body: String = (0..lines)
        .map(|i| format!("line {i:08} of the payload\n"))
        .collect();
    format!(
        "cat > payload <<'EOF'\n{body}EOF\nwc -l < payload; echo \"$0\"; ls /proc/self/fd | wc -l; echo \"$-\"; exit 7"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_megabyte_command_runs_like_bash_c() {
    let dir = tempfile::tempdir().unwrap();
    let executor = executor();
    let command = heredoc(60_000);
    assert!(command.len() > 1 << 20, "{}", command.len());
    let mut request = BashExecRequest::new(command);
    request.workdir = Some(dir.path().to_owned());
    let result = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(7), "{result:?}");
    // A short command goes the usual way: the same $0 and shell flags.
    let small = run(&executor, "echo \"$0\"; echo \"$-\"; exit 3").await;
    assert_eq!(small.exit_code, Some(3));
    let flags = small.stdout.text.lines().nth(1).unwrap().to_owned();
    // 60000 lines, $0 = bash, ls sees 0 1 2 and its own directory handle
    // (the command's descriptor is closed), the same flags.
    assert_eq!(
        result.stdout.text,
        format!("60000\nbash\n4\n{flags}\n"),
        "{}",
        result.stderr.text
    );
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_over_the_limit_is_refused_before_it_runs() {
    let executor = executor();
    let err = executor
        .resolve(BashExecRequest::new("x".repeat((4 << 20) + 1)))
        .unwrap_err();
    assert!(matches!(err, BashError::CommandTooLong { .. }), "{err:?}");
    assert_eq!(err.code(), "COMMAND_TOO_LONG");
    assert!(err.to_string().contains("at most 4194304 bytes"), "{err}");
    let nul = executor
        .resolve(BashExecRequest::new("echo a\0b"))
        .unwrap_err();
    assert_eq!(nul.code(), "INVALID_COMMAND", "{nul}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_starts_with_a_dash_is_a_command_not_options() {
    let executor = executor();
    let short = run(&executor, "-n echo hi").await;
    assert!(
        short.stderr.text.contains("-n: command not found"),
        "{short:?}"
    );
    assert_eq!(short.exit_code, Some(127));
    let long = run(&executor, &format!("-n echo hi\n#{}", "x".repeat(100_000))).await;
    assert!(
        long.stderr.text.contains("-n: command not found"),
        "{long:?}"
    );
    assert_eq!(long.exit_code, Some(127));
    executor.shutdown().await;
}
