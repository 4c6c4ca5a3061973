//! A fork bomb that fills the server's own process ceiling, through the
//! real binary: `dsh-bash run --containment process-tree` as uid 65534
//! under `RLIMIT_NPROC` (the server and the bomb share it, so the server
//! cannot start a thread either) never panics, stops the tree at its
//! timeout and reports it; and a command's orphans are never counted as
//! another's leftovers.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::confined::{base, binary, chown_tree, skip, NOBODY};
use common::RawServer;
use serde_json::{json, Value};

/// The process ceiling the bomb runs under.
const CEILING: u32 = 200;

/// Processes uid 65534 has that are not zombies.
fn live_nobody() -> usize {
    nobody(false)
}

/// Processes (threads) uid 65534 has, zombies too unless `live`.
fn nobody(all: bool) -> usize {
    let out = Command::new("ps")
        .args(["-u", &NOBODY.to_string(), "-o", "stat=", "-L"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|stat| all || !stat.trim_start().starts_with('Z'))
        .count()
}

/// Kills everything uid 65534 runs until nothing is left (a bomb forks
/// while it is killed): the test's own backstop.
struct Sweep;

impl Drop for Sweep {
    fn drop(&mut self) {
        for _ in 0..100 {
            let _ = Command::new("pkill")
                .args(["-9", "-u", &NOBODY.to_string()])
                .status();
            if live_nobody() == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `argv` as uid 65534 under `RLIMIT_NPROC` = `ceiling`, killed after 60 s
/// whatever happens.
fn limited(ceiling: u32, argv: &[&str]) -> Command {
    let mut command = Command::new("timeout");
    command
        .args([
            "-s",
            "KILL",
            "60",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
        .args(["prlimit", &format!("--nproc={ceiling}:{ceiling}"), "--"])
        .args(argv);
    command
}

#[test]
fn a_fork_bomb_at_the_hosts_ceiling_is_stopped_without_a_panic() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 || Command::new("prlimit").arg("--version").output().is_err()
    {
        return skip("the fork bomb test needs root and prlimit");
    }
    if live_nobody() != 0 {
        return skip("uid 65534 runs processes already; the bomb's ceiling would be theirs too");
    }
    let _sweep = Sweep;
    let dir = base().join("exhaustion");
    std::fs::create_dir_all(&dir).unwrap();
    chown_tree(&dir, NOBODY);

    // The limit is in force: forks fail once uid 65534 has 120 processes.
    let proof = limited(
        120,
        &["python3", "-c", "import os, signal\nprint(open('/proc/self/limits').read().split('Max processes')[1].split()[0])\nn = 0\nwhile n < 1000:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        signal.pause()\n    n += 1\nprint(n, flush=True)\nos.killpg(0, signal.SIGKILL)\n"],
    )
    .current_dir(&dir)
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&proof.stdout);
    let mut lines = said.lines();
    assert_eq!(lines.next(), Some("120"), "{said}");
    let forked: u32 = lines
        .next()
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(u32::MAX);
    assert!(forked < 120, "the ceiling is not in force: {said}");
    drop(Sweep);

    for bomb in [
        "b(){ b | b & }; b; sleep 100",
        ":(){ :|:& };:; sleep 100",
        "b(){ b | b & }; b; sleep 2; head -c 3000000 /dev/zero | tr '\\0' x >&2; sleep 100",
    ] {
        let started = Instant::now();
        let out = limited(
            CEILING,
            &[
                binary().to_str().unwrap(),
                "run",
                "--json",
                "--containment",
                "process-tree",
                "--timeout",
                "3000",
                "--",
                bomb,
            ],
        )
        .current_dir(&dir)
        .env("HOME", &dir)
        .env("TMPDIR", &dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{bomb}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{bomb}: {stderr}");
        let result: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|err| panic!("{bomb}: {err}: {stderr}"));
        assert_eq!(result["timed_out"], true, "{bomb}: {result}");
        assert!(took < Duration::from_secs(45), "{bomb}: took {took:?}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while live_nobody() != 0 {
            assert!(
                Instant::now() < deadline,
                "{bomb}: processes outlived the run"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // Zombies count against the ceiling too until whoever adopted them
        // (pid 1 here) reaps them: the next bomb starts from none.
        let deadline = Instant::now() + Duration::from_secs(60);
        while nobody(true) != 0 {
            assert!(
                Instant::now() < deadline,
                "{bomb}: zombies not reaped in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_commands_orphans_are_not_another_commands_leftovers() {
    let mut server = RawServer::start();
    // A leaves a child that ignores SIGTERM and outlives A's shell; while
    // A's grace runs, B ends.
    let a = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash",
        "arguments": {"command": "bash -c \"trap '' TERM; echo started; exec sleep 1000\" & wait",
            "description": "d", "timeoutMs": 1000}}});
    server.send(&a.to_string());
    let b = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "bash",
        "arguments": {"command": "sleep 1.5; echo hello", "description": "d"}}});
    server.send(&b.to_string());
    let mut replies = vec![server.next(), server.next()];
    replies.sort_by_key(|reply| reply["id"].as_u64());
    let b_text = replies[1]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(b_text.starts_with("hello"), "{replies:?}");
    assert!(
        !b_text.contains("leftover"),
        "A's orphan counted as B's: {b_text}"
    );
}
