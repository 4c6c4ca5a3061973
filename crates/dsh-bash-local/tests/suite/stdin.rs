//! EXE-28, EXE-29, EXE-31, EXE-32: stdin is written then closed, or /dev/null.

use std::collections::BTreeMap;

use dsh_bash::{BashExecRequest, BashExecutor};

use super::fixture::executor;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supplied_stdin_is_echoed_exactly() {
    let executor = executor();
    let mut request = BashExecRequest::new("cat");
    request.stdin = Some(b"line one\nline two\x00\xff".to_vec());
    let result = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(
        result.stdout.text.as_bytes(),
        "line one\nline two\0\u{fffd}".as_bytes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_stdin_fd0_is_dev_null() {
    let executor = executor();
    let result = super::fixture::run(&executor, "cat; readlink /proc/self/fd/0").await;
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.stdout.text, "/dev/null\n");
    // An empty supplied stdin is an empty pipe, not /dev/null.
    let mut request = BashExecRequest::new("cat; readlink /proc/self/fd/0");
    request.stdin = Some(Vec::new());
    let result = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap();
    assert!(
        result.stdout.text.starts_with("pipe:"),
        "{}",
        result.stdout.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_never_reads_does_not_deadlock() {
    let executor = executor();
    let mut request = BashExecRequest::new("exit 7");
    request.stdin = Some(vec![b'x'; 1 << 20]);
    let result = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(7));
    assert_eq!(result.signal, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_and_env_both_reach_foreground_and_background() {
    let executor = executor();
    let request = || {
        let mut request = BashExecRequest::new("read -r line; echo \"$line/$GREETING\"");
        request.stdin = Some(b"hello\n".to_vec());
        request.env = Some(BTreeMap::from([(
            "GREETING".to_owned(),
            "world".to_owned(),
        )]));
        executor.resolve(request).unwrap()
    };
    let result = executor.run(request()).await.unwrap();
    assert_eq!(result.stdout.text, "hello/world\n");
    let task = executor.start(request()).await.unwrap();
    task.settled().await;
    let read = executor.read_output(&task.id, None).unwrap();
    assert_eq!(read.delta, "hello/world\n");
}
