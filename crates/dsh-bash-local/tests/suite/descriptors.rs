//! No descriptor leaks into a command: whatever the host had open without
//! close-on-exec (a file it writes, a directory), the command sees only
//! stdin, stdout and stderr, and cannot write through the host's file.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use dsh_bash::BashExecutor;

use super::fixture::{executor, run};

/// Opens `path` WITHOUT close-on-exec, as a careless host or a library
/// might; returns the raw descriptor.
fn open_inheritable(path: &std::path::Path, flags: libc::c_int) -> libc::c_int {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: open with a valid NUL-terminated path and no CLOEXEC on purpose.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o644) };
    assert!(fd >= 0, "open {}", path.display());
    fd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inherited_descriptors_never_reach_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("host-file");
    std::fs::write(&file, "original\n").unwrap();
    let file_fd = open_inheritable(&file, libc::O_WRONLY | libc::O_APPEND);
    let dir_fd = open_inheritable(dir.path(), libc::O_RDONLY | libc::O_DIRECTORY);

    let executor = executor();
    let listing = run(&executor, "ls /proc/self/fd").await;
    let command =
        format!("echo pwned >&{file_fd}; echo pwned > /proc/self/fd/{dir_fd}/planted; echo done");
    let attempt = run(&executor, &command).await;

    // SAFETY: closing the two descriptors this test opened.
    unsafe {
        libc::close(file_fd);
        libc::close(dir_fd);
    }
    // `ls` sees its own directory handle (3) and nothing else above 2.
    let open: Vec<i32> = listing
        .stdout
        .text
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        open.iter().all(|fd| *fd <= 3),
        "descriptors leaked into the command: {open:?}"
    );
    assert_eq!(attempt.stdout.text, "done\n");
    assert!(
        attempt.stderr.text.contains("Bad file descriptor"),
        "{attempt:?}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "original\n");
    assert!(!dir.path().join("planted").exists());
    executor.shutdown().await;
}
