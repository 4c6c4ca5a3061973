//! A host started with signals ignored (`host &` in a script ignores
//! SIGINT and SIGQUIT, `nohup host` SIGHUP) does not pass them on to its
//! commands. A binary of its own: the dispositions are process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use dsh_bash::{BashExecRequest, BashExecutor};
use dsh_bash_local::{LocalBashExecutor, LocalConfig};

#[tokio::test]
async fn commands_start_with_no_signal_ignored_whatever_the_host_ignores() {
    // SAFETY: signal(2) with SIG_IGN, before this binary's only test
    // spawns anything.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let executor = LocalBashExecutor::new(LocalConfig::default()).unwrap();
    let spec = executor
        .resolve(BashExecRequest::new("grep '^SigIgn:' /proc/self/status"))
        .unwrap();
    let ran = executor.run(spec).await.unwrap();
    // The standard signals (1-31): the C library's own real-time ones
    // (32, 33) cannot be set through it and are not the host's choice.
    let ignored = ran
        .stdout
        .text
        .trim()
        .strip_prefix("SigIgn:\t")
        .and_then(|mask| u64::from_str_radix(mask, 16).ok())
        .unwrap_or_else(|| panic!("{ran:?}"));
    assert_eq!(ignored & 0x7fff_ffff, 0, "{ran:?}");
    executor.shutdown().await;
}
