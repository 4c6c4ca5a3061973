//! Rows 9a and 9b: what a terminal costs. A foreground `true` in a
//! terminal beside a piped one; and typing a line into `cat` running in a
//! terminal task and reading its echo back (`write_input`, then
//! `read_output` until it is there) beside the same exchange on a bare
//! pty with `cat` on its slave.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_bash::{BashExecRequest, BashExecutor, TerminalSize};
use dsh_bash_local::LocalBashExecutor;

use crate::measure::{ms, Row, Stats};
use crate::scenarios::Options;

/// Per-command wall time of `n` foreground `true`s, in a terminal or not.
async fn foreground(executor: &LocalBashExecutor, terminal: bool, n: usize) -> f64 {
    let mut request = BashExecRequest::new("true");
    request.terminal = terminal.then(TerminalSize::default);
    let spec = executor.resolve(request).unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    for _ in 0..n {
        if let Err(err) = executor.run(spec.clone()).await {
            panic!("true in a terminal failed: {err}");
        }
    }
    ms(started.elapsed()) / n as f64
}

/// Per-line time of `n` lines typed into `cat` in a terminal task and
/// read back (the terminal's echo and cat's copy).
async fn through_the_executor(executor: &LocalBashExecutor, n: usize) -> f64 {
    let mut request = BashExecRequest::new("cat");
    request.terminal = Some(TerminalSize::default());
    let spec = executor.resolve(request).unwrap_or_else(|e| panic!("{e}"));
    let task = executor.start(spec).await.unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    for _ in 0..n {
        executor
            .write_input(&task.id, b"x\r")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut seen = String::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.matches('x').count() < 2 {
            seen.push_str(
                &executor
                    .read_output(&task.id, None)
                    .map(|r| r.delta)
                    .unwrap_or_default(),
            );
            assert!(Instant::now() < deadline, "no echo: {seen:?}");
            tokio::task::yield_now().await;
        }
    }
    let per_line = ms(started.elapsed()) / n as f64;
    let _ = executor.kill(&task.id).await;
    per_line
}

/// The same exchange on a bare pty: `cat` on its slave, the master
/// written and read directly.
fn on_a_bare_pty(n: usize) -> f64 {
    use rustix::pty::OpenptFlags;
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .unwrap_or_else(|e| panic!("openpt: {e}"));
    rustix::pty::grantpt(&master).unwrap_or_else(|e| panic!("{e}"));
    rustix::pty::unlockpt(&master).unwrap_or_else(|e| panic!("{e}"));
    let name = rustix::pty::ptsname(&master, Vec::new()).unwrap_or_else(|e| panic!("{e}"));
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(std::ffi::OsStr::new(
            std::str::from_utf8(name.as_bytes()).unwrap_or("/dev/null"),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    let fd =
        |file: &std::fs::File| OwnedFd::from(file.try_clone().unwrap_or_else(|e| panic!("{e}")));
    let mut cat = Command::new("cat")
        .stdin(Stdio::from(fd(&slave)))
        .stdout(Stdio::from(fd(&slave)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cat: {e}"));
    drop(slave);
    let mut master = std::fs::File::from(master);
    let mut buf = [0u8; 256];
    let started = Instant::now();
    for _ in 0..n {
        let _ = master.write_all(b"x\r");
        let mut echoed = 0;
        while echoed < 2 {
            let got = master.read(&mut buf).unwrap_or(0);
            assert!(got > 0, "the pty closed");
            echoed += buf[..got].iter().filter(|b| **b == b'x').count();
        }
    }
    let per_line = ms(started.elapsed()) / n as f64;
    let _ = cat.kill();
    let _ = cat.wait();
    per_line
}

/// Rows 9a and 9b.
pub async fn terminal_rows(options: &Options, executor: &LocalBashExecutor) -> Vec<Row> {
    let n = options.commands;
    foreground(executor, true, 5).await;
    let (mut tty, mut piped) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        tty.push(foreground(executor, true, n).await);
        piped.push(foreground(executor, false, n).await);
    }
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        ours.push(through_the_executor(executor, n).await);
        bare.push(
            tokio::task::spawn_blocking(move || on_a_bare_pty(n))
                .await
                .unwrap_or(f64::NAN),
        );
    }
    let added = Stats::of(ours.clone()).median - Stats::of(bare.clone()).median;
    vec![
        Row {
            scenario: "9a foreground `true` in a terminal".into(),
            ours: Stats::of(tty),
            baseline: Some(Stats::of(piped)),
            unit: "ms/cmd",
            peak_rss_mib: None,
            note: "baseline: the same executor, piped".into(),
        },
        Row {
            scenario: "9b a line typed into `cat` in a terminal, echo read back".into(),
            ours: Stats::of(ours),
            baseline: Some(Stats::of(bare)),
            unit: "ms/line",
            peak_rss_mib: None,
            note: format!("write_input + read_output vs write/read on a bare pty; added {added:.3} ms (target < 2 ms)"),
        },
    ]
}
