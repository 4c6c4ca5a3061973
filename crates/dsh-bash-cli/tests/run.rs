//! The `dsh-bash run` command, driven as a real binary.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{alive, wait_gone};

fn dsh_bash() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
}

#[test]
fn prints_the_rendered_text_and_exits_with_the_code() {
    let output = dsh_bash()
        .args(["run", "--", "echo out; echo err >&2; exit 3"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "out\n[stderr]\nerr\n[exit code: 3]\n"
    );
}

#[test]
fn the_double_dash_is_optional() {
    let output = dsh_bash()
        .args(["run", "echo -n hi; echo"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), "hi\n");
    let missing = dsh_bash().args(["run"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("COMMAND"));
}

#[test]
fn several_words_are_one_command_line() {
    let output = dsh_bash()
        .args(["run", "--", "echo", "a", "b"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), "a b\n");
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn timeout_and_signal_exit_statuses() {
    let timed_out = dsh_bash()
        .args(["run", "--timeout", "200", "--", "sleep 30"])
        .output()
        .unwrap();
    assert_eq!(timed_out.status.code(), Some(124));
    assert_eq!(
        String::from_utf8(timed_out.stdout).unwrap(),
        "(no output)\n[timed out after 200ms]\n[killed by signal: SIGTERM]\n"
    );
    let signalled = dsh_bash()
        .args(["run", "--", "kill -KILL $$"])
        .output()
        .unwrap();
    assert_eq!(signalled.status.code(), Some(137));
}

#[test]
fn json_has_the_snake_case_fields_and_nulls() {
    let output = dsh_bash()
        .args(["run", "--json", "--workdir", "/", "--", "pwd"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["exit_code"], 0);
    assert_eq!(json["signal"], serde_json::Value::Null);
    assert_eq!(json["timed_out"], false);
    assert_eq!(json["aborted"], false);
    assert_eq!(json["timeout_ms"], 120_000);
    assert_eq!(json["stdout"]["text"], "/\n");
    assert_eq!(json["stdout"]["truncated"], false);
    assert_eq!(json["stdout"]["spill_path"], serde_json::Value::Null);
    assert_eq!(json["stderr"]["text"], "");
    assert_eq!(json["sandbox"], serde_json::Value::Null);
}

#[test]
fn bad_arguments_run_nothing_and_say_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let command = format!("touch {}", marker.display());
    let output = dsh_bash()
        .args(["run", "--timeout=-5", "--", &command])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(125));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("invalid --timeout: expected a positive finite number"),
        "{stderr}"
    );
    assert!(!marker.exists());
    let missing = dsh_bash()
        .args(["run", "--workdir", "/no/such/dir", "--", &command])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(125));
    assert!(String::from_utf8(missing.stderr)
        .unwrap()
        .contains("workdir /no/such/dir does not exist"));
    assert!(!marker.exists());
}

#[test]
fn a_secret_in_the_host_environment_never_reaches_the_command() {
    let output = dsh_bash()
        .args(["run", "--", "env"])
        .env("MY_API_KEY", "sk-live-123")
        .env("GITHUB_TOKEN", "ghp_456")
        .env("DB_PASSWORD", "hunter2")
        .env("HARMLESS", "visible")
        .output()
        .unwrap();
    let env = String::from_utf8(output.stdout).unwrap();
    assert!(env.contains("HARMLESS=visible"));
    for secret in [
        "sk-live-123",
        "ghp_456",
        "hunter2",
        "MY_API_KEY",
        "GITHUB_TOKEN",
    ] {
        assert!(!env.contains(secret), "{secret} leaked");
    }
}

/// Credentials a name check misses, recognised by their value or their
/// name's ending; an operator keeps one on purpose with --keep-env. Under
/// a sandbox too.
#[test]
fn credentials_are_recognised_by_value_and_kept_only_on_purpose() {
    let secrets = [
        ("DATABASE_URL", "postgres://u:hunter2@db/x"),
        ("GITHUB_PAT", "pat-value-1"),
        ("MYSQL_PWD", "pwd-value-2"),
        ("HTTPS_PROXY", "http://u:proxypw@proxy:3128"),
        ("SENTRY_DSN", "https://dsn-value-3@o1.ingest.example/1"),
        ("NPM_AUTH", "auth-value-4"),
        ("CONN_STR", "Server=db;Password=connpw5;"),
        ("SOME_VALUE", "ghp_0123456789abcdefghijklmnopqrstuvwxyz"),
        ("ANOTHER", "AKIAIOSFODNN7EXAMPLE"),
        (
            "JWT_HERE",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX2hlcmU",
        ),
    ];
    for sandbox in [&[][..], &["--sandbox", "read-only"][..]] {
        let mut run = dsh_bash();
        run.arg("run")
            .args(sandbox)
            .args(["--", "env"])
            .env("HARMLESS", "visible");
        for (name, value) in secrets {
            run.env(name, value);
        }
        let output = run.output().unwrap();
        let env = String::from_utf8(output.stdout).unwrap();
        assert!(env.contains("HARMLESS=visible"), "{sandbox:?}: {env}");
        for (name, value) in secrets {
            assert!(!env.contains(value), "{name} leaked {sandbox:?}");
        }
    }
    let kept = dsh_bash()
        .args(["run", "--keep-env", "DATABASE_URL", "--", "env"])
        .env("DATABASE_URL", "postgres://u:hunter2@db/x")
        .output()
        .unwrap();
    let env = String::from_utf8(kept.stdout).unwrap();
    assert!(
        env.contains("DATABASE_URL=postgres://u:hunter2@db/x"),
        "{env}"
    );
}

#[test]
fn scrub_patterns_and_kept_names_are_configurable() {
    let output = dsh_bash()
        .args([
            "run",
            "--scrub",
            "internal",
            "--keep-env",
            "CI_JOB_TOKEN",
            "--",
            "env",
        ])
        .env("MY_INTERNAL_URL", "hidden")
        .env("CI_JOB_TOKEN", "kept")
        .env("OTHER_TOKEN", "dropped")
        .output()
        .unwrap();
    let env = String::from_utf8(output.stdout).unwrap();
    assert!(!env.contains("MY_INTERNAL_URL"), "{env}");
    assert!(env.contains("CI_JOB_TOKEN=kept"), "{env}");
    assert!(!env.contains("OTHER_TOKEN"), "{env}");
}

#[test]
fn a_sigkilled_host_takes_its_commands_with_it() {
    // The command prints the shell's pid and a grandchild's pid, then waits.
    let mut host = dsh_bash()
        .args(["run", "--", "sleep 1000 & echo $$ $!; wait"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // `run` prints only at the end, so learn the pids from /proc instead:
    // the host's descendants are the shell and its sleep.
    let host_pid = i32::try_from(host.id()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (shell, sleeper) = loop {
        assert!(Instant::now() < deadline, "the command never started");
        if let Some(found) = descendants_running_sleep(host_pid) {
            break found;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    host.kill().unwrap(); // SIGKILL
    host.wait().unwrap();
    assert!(
        wait_gone(shell),
        "the shell {shell} outlived its SIGKILLed host"
    );
    assert!(
        wait_gone(sleeper),
        "the grandchild {sleeper} outlived its SIGKILLed host"
    );
    let _ = BufReader::new(host.stdout.take().unwrap()).lines().count();
}

/// (shell pid, sleep pid) of the `bash -c` child of `host` once its
/// `sleep 1000` is running.
fn descendants_running_sleep(host: i32) -> Option<(i32, i32)> {
    let stat = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    let ppid = |s: &str| -> Option<i32> {
        s.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let pids: Vec<i32> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let child_of = |parent: i32, comm: &'static str| {
        pids.iter()
            .copied()
            .filter(move |p| stat(*p).is_some_and(|s| ppid(&s) == Some(parent) && s.contains(comm)))
    };
    // The host has two bash children: the watchdog and the command's shell.
    child_of(host, "(bash)").find_map(|shell| {
        child_of(shell, "(sleep)")
            .next()
            .map(|sleeper| (shell, sleeper))
    })
}

#[test]
fn a_sigkilled_host_takes_setsid_and_double_forked_escapees_with_it() {
    // Under cgroups the watchdog kills the host's cgroup; under the
    // process-tree walk it kills what carries the host's environment marker.
    for containment in ["auto", "process-tree"] {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let command = format!(
            "setsid sleep 1000 & echo $! >> {p}; ( ( sleep 1000 & echo $! >> {p} ) & ); \
             nohup setsid bash -c 'echo $$ >> {p}; exec sleep 1000' >/dev/null 2>&1 & wait",
            p = pids.display()
        );
        let mut host = dsh_bash()
            .args(["run", "--json", "--containment", containment, "--"])
            .arg(&command)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let escapees: Vec<i32> = loop {
            assert!(
                Instant::now() < deadline,
                "{containment}: the escapees never started"
            );
            let found = listed(&pids);
            if found.len() == 3 && found.iter().all(|p| alive(*p)) {
                break found;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        host.kill().unwrap(); // SIGKILL
        host.wait().unwrap();
        for pid in escapees {
            assert!(
                wait_gone(pid),
                "{containment}: escapee {pid} outlived its SIGKILLed host"
            );
        }
    }
}

/// Without cgroup containment (a stated limit, not a failure, except where
/// CI requires it): kills what the test started and skips loudly.
fn skip_without_cgroups(started: &[i32], limit: &str) {
    for pid in started {
        // SAFETY: kill(2) on processes this test started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "cgroup containment is required here but unavailable"
    );
    eprintln!("SKIP: without cgroup containment, {limit} (a stated limit)");
}

/// One rule for leftovers under both containments: a `setsid` daemon and
/// a double fork left by a command that exits normally are stopped and
/// counted (with the process-tree walk, the host adopts the orphans).
#[test]
fn leftovers_that_left_the_group_are_stopped_under_both_containments() {
    for containment in ["auto", "process-tree"] {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let command = format!(
            "setsid sleep 1000 & echo $! >> {p}; ( ( sleep 1000 & echo $! >> {p} ) & ); \
             while [ $(wc -l < {p}) -lt 2 ]; do sleep 0.05; done",
            p = pids.display()
        );
        let output = dsh_bash()
            .args(["run", "--json", "--containment", containment, "--"])
            .arg(&command)
            .output()
            .unwrap();
        let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(result["exit_code"], 0, "{containment}: {result}");
        assert_eq!(result["leftovers_stopped"], 2, "{containment}: {result}");
        for pid in listed(&pids) {
            assert!(wait_gone(pid), "{containment}: leftover {pid} survived");
        }
    }
}

/// The pids listed in `file`, one per line.
fn listed(file: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Under a cgroup, nothing outruns a stop: not a process forked in the
/// SIGTERM handler during the grace, not ten `setsid` children of a host
/// that has almost no descriptors left to walk the tree with.
#[test]
fn a_stop_cannot_be_outrun_by_forks_in_the_grace_or_a_low_fd_limit() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let trap = format!(
        "trap 'setsid sleep 1000 & echo $! >> {p}; exit 0' TERM; sleep 100 & wait",
        p = pids.display()
    );
    let many = format!(
        "for i in 1 2 3 4 5 6 7 8 9 10; do setsid sleep 1000 & echo $! >> {p}; done; wait",
        p = pids.display()
    );
    for containment in ["auto", "process-tree"] {
        for (what, command, limit) in [("trap", &trap, "1024"), ("ulimit -n 20", &many, "20")] {
            let what = format!("{what} ({containment})");
            let _ = std::fs::remove_file(&pids);
            let output = Command::new("bash")
                .arg("-c")
                .arg("ulimit -n \"$1\"; exec \"$2\" run --json --containment \"$3\" --timeout 500 -- \"$4\"")
                .arg("bash")
                .arg(limit)
                .arg(env!("CARGO_BIN_EXE_dsh-bash"))
                .arg(containment)
                .arg(command)
                .output()
                .unwrap();
            let result: serde_json::Value =
                serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
                    panic!(
                        "{what}: no result: {}",
                        String::from_utf8_lossy(&output.stderr)
                    )
                });
            assert_eq!(result["timed_out"], true, "{what}: {result}");
            let escapees = listed(&pids);
            assert!(!escapees.is_empty(), "{what}: nothing started");
            if containment == "auto" && result["containment"] != "cgroup" {
                skip_without_cgroups(&escapees, &format!("{what}: no cgroup here"));
                continue;
            }
            for pid in escapees {
                assert!(wait_gone(pid), "{what}: {pid} outran the stop");
            }
        }
    }
}

#[test]
fn diagnostics_go_to_stderr_under_rust_log_and_a_bad_filter_is_reported() {
    let output = dsh_bash()
        .args(["run", "--json", "--", "echo out"])
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    // Whatever is logged, stdout stays exactly the result.
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["stdout"]["text"], "out\n");

    let output = dsh_bash()
        .args(["run", "--", "echo still runs"])
        .env("RUST_LOG", "a==b")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("ignoring RUST_LOG=\"a==b\""), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "still runs\n");
}

#[test]
fn a_workdir_that_cannot_be_entered_says_so_once() {
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("locked-{}", std::process::id()));
    std::fs::create_dir_all(base.join("inner")).unwrap();
    std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let bin = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("dsh-bash-{}", std::process::id()));
    std::fs::copy(env!("CARGO_BIN_EXE_dsh-bash"), &bin).unwrap();
    let reachable = (|| {
        let mut dir = bin.parent()?;
        loop {
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(dir).ok()?.permissions(),
            );
            if mode & 0o001 == 0 {
                return None;
            }
            dir = match dir.parent() {
                Some(parent) => parent,
                None => return Some(()),
            };
        }
    })();
    if reachable.is_none() {
        eprintln!("SKIP: the target dir is not reachable by uid 65534 here");
        let _ = std::fs::remove_dir_all(&base);
        return;
    }
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin)
        .args(["run", "--workdir"])
        .arg(base.join("inner"))
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("cannot be entered: Permission denied"),
        "{stderr}"
    );
    assert!(!stderr.contains("does not exist"), "{stderr}");
    assert_eq!(stderr.matches("os error 13").count(), 1, "{stderr}");
    let _ = std::fs::remove_dir_all(&base);
    let _ = std::fs::remove_file(&bin);
}

/// Skips (loudly; fails under DSH_TEST_REQUIRE_SANDBOX=1) where commands
/// get no cgroup.
fn cgroups_or_skip(what: &str) -> bool {
    let output = dsh_bash()
        .args(["run", "--json", "--", "true"])
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    if result["containment"] == "cgroup" {
        return true;
    }
    let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{what}: cgroup containment is required here but unavailable"
    );
    eprintln!("SKIP {what}: no cgroup containment on this host");
    false
}

/// Processes a command moved into a sub-cgroup of its own, into a cgroup it
/// made beside its own, or into the host's parent cgroup are still its
/// leftovers: stopped, counted, and no cgroup is left behind.
#[test]
fn moving_to_another_cgroup_of_the_host_does_not_escape() {
    if !cgroups_or_skip("cgroup moves") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let command = format!(
        "C=/sys/fs/cgroup/unified$(sed -n 's/^0:://p' /proc/self/cgroup); P=$(dirname $C); \
         mkdir $C/sub $P/evil; \
         bash -c 'echo $$ > '$C'/sub/cgroup.procs; echo $$ >> {p}; exec sleep 1000' & \
         bash -c 'echo $$ > '$P'/evil/cgroup.procs; echo $$ >> {p}; exec sleep 1000' & \
         bash -c 'echo $$ > '$P'/cgroup.procs; echo $$ >> {p}; exec sleep 1000' & \
         while [ $(wc -l < {p} 2>/dev/null || echo 0) -lt 3 ]; do sleep 0.05; done",
        p = pids.display()
    );
    let output = dsh_bash()
        .args(["run", "--json", "--"])
        .arg(&command)
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(result["leftovers_stopped"], 3, "{result}");
    for pid in listed(&pids) {
        assert!(wait_gone(pid), "{pid} escaped by moving cgroups");
    }
}

/// Under cgroups the forked watchdog takes the host's cgroup by message
/// and, at the host's SIGKILL, kills it whole and removes it: an escapee
/// that cleared the host's environment marker (which only `cgroup.kill`
/// can still reach) dies, and no directory of the host is left.
#[test]
fn a_sigkilled_hosts_cgroup_is_killed_and_removed_by_its_forked_watchdog() {
    if !cgroups_or_skip("the forked watchdog's cgroup") {
        return;
    }
    let (mut host, escapee, _dir) = host_with_escapee(&[], "env -u DSH_BASH_HOST ");
    let host_pid = i32::try_from(host.id()).unwrap();
    // Its environment as `sleep` got it (before that exec, `$!` is still
    // the shell's fork or `env`, which carry the marker).
    wait_for("the escapee's exec of sleep", || {
        let comm = std::fs::read_to_string(format!("/proc/{escapee}/comm")).ok()?;
        (comm.trim() == "sleep").then_some(())
    });
    let environ = std::fs::read(format!("/proc/{escapee}/environ")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&environ).contains("DSH_BASH_HOST="),
        "the escapee carries no marker"
    );
    // The host's parent cgroup: the one above the escapee's command cgroup.
    let own = std::fs::read_to_string(format!("/proc/{escapee}/cgroup")).unwrap();
    let relative = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap()
        .trim_start_matches('/');
    let unified = std::path::Path::new("/sys/fs/cgroup/unified");
    let v2 = if unified.is_dir() {
        unified
    } else {
        std::path::Path::new("/sys/fs/cgroup")
    };
    let parent = v2.join(relative).parent().unwrap().to_owned();
    assert!(
        parent
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("dsh-bash-{host_pid}.")),
        "{}",
        parent.display()
    );
    assert_eq!(
        arguments(watchdogs_of(host_pid)[0]),
        ["dsh-bash-watchdog"],
        "forked"
    );
    host.kill().unwrap();
    host.wait().unwrap();
    assert!(wait_gone(escapee), "{escapee} outlived its SIGKILLed host");
    wait_for("the host's cgroup removed", || {
        (!parent.exists()).then_some(())
    });
}

/// The watchdog still kills everything when the host dies while it is
/// stopped (the orphaned group's SIGHUP must not kill it), and when a
/// command holds the watchdog's pipe open (no EOF ever comes).
#[test]
fn the_watchdog_cannot_be_hung_up_or_kept_waiting() {
    if !cgroups_or_skip("watchdog") {
        return;
    }
    for how in ["stopped watchdog", "pipe held open"] {
        let dir = tempfile::tempdir().unwrap();
        let held = dir.path().join("held");
        let hold = if how == "pipe held open" {
            format!(
                "W=$(pgrep -P $PPID -x dsh-bash-watchd | head -1); [ -n \"$W\" ] && exec 9>/proc/$W/fd/0 && echo held > {}; ",
                held.display()
            )
        } else {
            String::new()
        };
        let (mut host, escapee, _started) = host_with_escapee(&[], &hold);
        let host_pid = i32::try_from(host.id()).unwrap();
        let watchdog = watchdogs_of(host_pid);
        assert_eq!(watchdog.len(), 1, "{how}: {watchdog:?}");
        // The hold ran before the escapee started: it held the pipe.
        assert_eq!(held.exists(), how == "pipe held open", "{how}");
        if how == "stopped watchdog" {
            // SAFETY: kill(2) on the watchdog of the host this test started.
            unsafe { libc::kill(watchdog[0], libc::SIGSTOP) };
        }
        host.kill().unwrap();
        host.wait().unwrap();
        assert!(
            wait_gone(escapee),
            "{how}: {escapee} outlived its SIGKILLed host"
        );
    }
}

/// The binary's watchdog is forked, not executed (its command line is its
/// name alone); one that dies is replaced by an executed one (told the
/// host's cgroup and groups on its command line and its pipe), and that
/// one still kills a `setsid` escapee when the host is SIGKILLed, under
/// both containments.
#[test]
fn a_killed_watchdog_is_replaced_and_the_replacement_holds_the_tree() {
    for containment in ["auto", "process-tree"] {
        let (mut host, escapee, _dir) = host_with_escapee(&["--containment", containment], "");
        let host_pid = i32::try_from(host.id()).unwrap();
        let forked = watchdogs_of(host_pid);
        assert_eq!(forked.len(), 1, "{containment}: {forked:?}");
        assert_eq!(
            arguments(forked[0]),
            ["dsh-bash-watchdog"],
            "{containment}: the first watchdog is forked"
        );
        // SAFETY: kill(2) on the watchdog of the host this test started.
        unsafe { libc::kill(forked[0], libc::SIGKILL) };
        let replacement = wait_for(containment, || {
            watchdogs_of(host_pid)
                .into_iter()
                .find(|w| *w != forked[0] && arguments(*w).len() > 1)
        });
        assert!(
            arguments(replacement)
                .iter()
                .any(|a| a.contains(&host_pid.to_string())),
            "{containment}: the replacement watches the host: {:?}",
            arguments(replacement)
        );
        host.kill().unwrap();
        host.wait().unwrap();
        assert!(
            wait_gone(escapee),
            "{containment}: {escapee} outlived its SIGKILLed host after the watchdog was replaced"
        );
    }
}

/// `dsh-bash run ARGS -- "PREFIX setsid sleep 1000 & …; wait"` started,
/// the pid of that escapee once it runs (10 s at most), and the directory
/// its pid is written in.
fn host_with_escapee(args: &[&str], prefix: &str) -> (Child, i32, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let command = format!(
        "{prefix}setsid sleep 1000 & echo $! >> {p}; wait",
        p = pids.display()
    );
    let host = dsh_bash()
        .arg("run")
        .args(args)
        .arg("--")
        .arg(&command)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let escapee = wait_for("the escapee", || {
        listed(&pids).first().copied().filter(|p| alive(*p))
    });
    (host, escapee, dir)
}

/// Polls `found` until it gives a value (10 s at most).
fn wait_for<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = found() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: never came");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The non-empty arguments of `pid`'s command line.
fn arguments(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The watchdog children of `parent` (forked: its command line is
/// `dsh-bash-watchdog`; executed: `dsh-bash-watchdog CGROUP PID START
/// MARKER`).
fn watchdogs_of(parent: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            ppid == Some(parent)
                && arguments(*pid).first().map(String::as_str) == Some("dsh-bash-watchdog")
        })
        .collect()
}

/// A host that could not run for longer than a command's timeout (stopped)
/// while the command finished in time reports the finish, not a timeout:
/// the command's exit and its deadline were both due when the host woke.
#[test]
fn a_stalled_host_reports_a_command_that_finished_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let (started, finished) = (dir.path().join("started"), dir.path().join("finished"));
    let command = format!(
        "touch {}; sleep 0.3; touch {}; echo done",
        started.display(),
        finished.display()
    );
    let host = dsh_bash()
        .args(["run", "--timeout", "1000", "--"])
        .arg(&command)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = i32::try_from(host.id()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill(2) on the host this test started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    while !finished.exists() {
        assert!(Instant::now() < deadline, "the command never finished");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The stall itself, past the 1 s timeout: what is tested, not a wait.
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let output = host.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text, "done\n", "{text}");
    assert_eq!(output.status.code(), Some(0), "{text}");
}
