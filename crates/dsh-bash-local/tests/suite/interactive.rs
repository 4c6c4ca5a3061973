//! Tasks that take input: a terminal (`terminal`) or an open stdin
//! (`interactive`), written with `write_input`, read back with
//! `read_output`, and a terminal's screen.

use std::time::{Duration, Instant};

use dsh_bash::{BashError, BashExecRequest, BashExecutor, BashTaskId, TaskStatus, TerminalSize};
use dsh_bash_local::LocalBashExecutor;

use super::fixture::executor;

async fn start(executor: &LocalBashExecutor, command: &str, terminal: bool) -> BashTaskId {
    let mut request = BashExecRequest::new(command);
    if terminal {
        request.terminal = Some(TerminalSize::default());
    } else {
        request.interactive = true;
    }
    let spec = executor.resolve(request).unwrap();
    executor.start(spec).await.unwrap().id
}

/// Reads the task's output until it holds `needle` (fail-safe 20 s); all
/// of it so far.
async fn until(executor: &LocalBashExecutor, id: &BashTaskId, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.contains(needle) {
        let read = executor.read_output(id, None).unwrap();
        seen.push_str(&read.delta);
        if seen.contains(needle) {
            break;
        }
        assert!(
            Instant::now() < deadline && read.task.status == TaskStatus::Running,
            "no {needle:?} in {seen:?} ({:?})",
            read.task.status
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_prompt_in_a_terminal_is_answered() {
    let executor = executor();
    let id = start(&executor, "read -p 'name? ' n; echo \"hi $n\"", true).await;
    let mut seen = String::new();
    until(&executor, &id, &mut seen, "name? ").await;
    executor.write_input(&id, b"bob\r").await.unwrap();
    until(&executor, &id, &mut seen, "hi bob").await;
    let settled = executor.get(&id).unwrap().settled().await;
    assert_eq!(
        (settled.status, settled.exit_code),
        (TaskStatus::Completed, Some(0))
    );
    executor.shutdown().await;
}

#[tokio::test]
async fn ctrl_c_interrupts_the_foreground_job_and_the_shell_goes_on() {
    let executor = executor();
    // The foreground job is `cat`: once it has copied a typed line back,
    // it has execed (default SIGINT) and blocks reading the terminal
    // again, so a single ^C typed then interrupts it, with no retries.
    let command =
        "trap 'echo caught' INT; echo ready; for i in 1 2; do cat; echo \"next $i\"; done";
    let id = start(&executor, command, true).await;
    let mut seen = String::new();
    until(&executor, &id, &mut seen, "ready\r\n").await;
    executor.write_input(&id, b"probe\r").await.unwrap();
    // The terminal's echo, then cat's copy.
    until(&executor, &id, &mut seen, "probe\r\nprobe\r\n").await;
    executor.write_input(&id, b"\x03").await.unwrap();
    until(&executor, &id, &mut seen, "next 1").await;
    // The shell's own INT trap ran: the signal was not ignored.
    assert!(
        seen.find("caught")
            .is_some_and(|at| at < seen.find("next 1").unwrap_or(0)),
        "{seen:?}"
    );
    assert_eq!(
        executor.get(&id).unwrap().status,
        TaskStatus::Running,
        "{seen:?}"
    );
    assert!(executor.kill(&id).await.unwrap());
    executor.shutdown().await;
}

#[tokio::test]
async fn ctrl_d_ends_input_in_a_terminal_and_an_open_stdin_closes_with_the_task() {
    let executor = executor();
    let id = start(&executor, "cat; echo \"cat ended\"", true).await;
    executor.write_input(&id, b"typed\r").await.unwrap();
    let mut seen = String::new();
    // The terminal echoes the line, then cat prints it.
    until(&executor, &id, &mut seen, "typed\r\ntyped\r\n").await;
    executor.write_input(&id, b"\x04").await.unwrap();
    until(&executor, &id, &mut seen, "cat ended").await;
    let settled = executor.get(&id).unwrap().settled().await;
    assert_eq!(settled.exit_code, Some(0));
    let after = executor.write_input(&id, b"late\r").await.unwrap_err();
    assert!(matches!(after, BashError::InputClosed { .. }), "{after}");

    let piped = start(&executor, "head -n 1; echo \"head ended\"", false).await;
    executor.write_input(&piped, b"one line\n").await.unwrap();
    let mut seen = String::new();
    until(&executor, &piped, &mut seen, "one line\nhead ended").await;
    executor.shutdown().await;
}

#[tokio::test]
async fn a_terminal_task_has_a_screen_and_others_refuse_input() {
    let executor = executor();
    let id = start(
        &executor,
        r"printf '\033[2J\033[Htop line\033[5;3Hfifth row'; echo; echo drawn; sleep 100",
        true,
    )
    .await;
    let mut seen = String::new();
    until(&executor, &id, &mut seen, "drawn").await;
    let screen = executor.screen(&id).await.unwrap();
    let rows: Vec<&str> = screen.lines().collect();
    assert_eq!(rows.first(), Some(&"top line"), "{screen:?}");
    assert_eq!(
        rows.get(4).map(|r| r.trim_end()),
        Some("  fifth row"),
        "{screen:?}"
    );
    assert!(executor.kill(&id).await.unwrap());

    let plain = executor
        .start(executor.resolve(BashExecRequest::new("sleep 100")).unwrap())
        .await
        .unwrap();
    let refused = executor.write_input(&plain.id, b"x").await.unwrap_err();
    assert_eq!(refused.code(), "NOT_INTERACTIVE", "{refused}");
    assert!(
        refused.to_string().contains("start the command with tty"),
        "{refused}"
    );
    assert_eq!(
        executor.screen(&plain.id).await.unwrap_err().code(),
        "NOT_INTERACTIVE"
    );
    assert!(executor.kill(&plain.id).await.unwrap());
    executor.shutdown().await;
}

#[tokio::test]
async fn a_terminal_command_sees_a_real_terminal() {
    let executor = executor();
    let mut request = BashExecRequest::new(
        "[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo \"$TERM $(stty size)\" && ps -o tty= -p $$",
    );
    request.terminal = Some(TerminalSize {
        cols: 100,
        rows: 30,
    });
    let result = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap();
    let lines: Vec<&str> = result.stdout.text.lines().collect();
    assert_eq!(
        lines.first().map(|l| l.trim()),
        Some("xterm-256color 30 100"),
        "{result:?}"
    );
    // The shell's controlling terminal is the pty.
    assert!(
        lines
            .get(1)
            .is_some_and(|tty| tty.trim().starts_with("pts/")),
        "{result:?}"
    );
    assert_eq!(result.stderr.text, "", "one stream in a terminal");
    executor.shutdown().await;
}

#[tokio::test]
async fn a_terminal_size_out_of_bounds_is_refused_before_anything_runs() {
    let executor = executor();
    for (cols, rows) in [(0, 40), (120, 0), (501, 40), (u16::MAX, u16::MAX)] {
        let mut request = BashExecRequest::new("true");
        request.terminal = Some(TerminalSize { cols, rows });
        let refused = executor.resolve(request).unwrap_err();
        assert_eq!(refused.code(), "UNSUPPORTED", "{refused}");
        assert!(
            refused.to_string().contains("must each be 1 to 500"),
            "{refused}"
        );
    }
    executor.shutdown().await;
}

#[tokio::test]
async fn a_write_waiting_on_a_command_that_does_not_read_ends_with_the_task() {
    let executor = executor();
    let id = start(&executor, "sleep 100", false).await;
    // More than a pipe holds: the write waits for room that never comes.
    let big = vec![b'x'; 1 << 20];
    let writing = executor.write_input(&id, &big);
    let killing = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        executor.kill(&id).await
    };
    let (written, killed) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(writing, killing)
    })
    .await
    .expect("the kill and the write end within 20 s");
    assert!(killed.unwrap());
    let refused = written.unwrap_err();
    assert_eq!(refused.code(), "INPUT_CLOSED", "{refused}");
    executor.shutdown().await;
}

#[tokio::test]
async fn interactive_tasks_are_bounded_per_owner() {
    let executor = LocalBashExecutor::new(dsh_bash_local::LocalConfig {
        max_interactive_tasks: 2,
        ..super::fixture::config()
    })
    .unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(start(&executor, "sleep 100", true).await);
    }
    let mut request = BashExecRequest::new("sleep 100");
    request.interactive = true;
    let refused = executor
        .start(executor.resolve(request).unwrap())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "TOO_MANY_INTERACTIVE", "{refused}");
    assert!(executor.kill(&ids[0]).await.unwrap());
    ids.push(start(&executor, "sleep 100", false).await);
    for id in &ids[1..] {
        assert!(executor.kill(id).await.unwrap());
    }
    executor.shutdown().await;
}
