//! Resource limits through the real binary: a fork bomb and a memory hog
//! under their limits while another session is served, a CPU quota, and
//! what a host without cgroup controllers reports (as uid 65534, and with
//! the process-tree containment forced).
//!
//! Every dangerous command first proves, from inside, that its limit is in
//! force (its own cgroup's `pids.max` or `memory.limit_in_bytes` /
//! `memory.max` holds the value), and exits 99 instead of running without
//! it; a host where no limit applies skips loudly (a failure under
//! `DSH_TEST_REQUIRE_LIMITS=1`, as in CI). Each run is bounded by the
//! command's timeout and by `timeout -s KILL` around the binary.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use common::confined::{as_user, binary, User};
use common::listening::Listening;
use dsh_bash::{BashExecRequest, BashExecutor, LimitMechanism, TaskStatus};
use serde_json::Value;

fn require_limits() -> bool {
    std::env::var("DSH_TEST_REQUIRE_LIMITS").is_ok_and(|v| v == "1")
}

fn skip(why: &str) {
    assert!(!require_limits(), "{why} (DSH_TEST_REQUIRE_LIMITS=1)");
    eprintln!("SKIP {why}");
}

/// A shell snippet that sets `$cg` to the command's own cgroup directory
/// for `controller` (its v1 hierarchy on a hybrid host, else its v2
/// cgroup), and exits 99 unless `$cg/FILE` holds `value` for one of the
/// given files.
fn in_force(controller: &str, files: &[&str], value: &str) -> String {
    let files = files.join(" ");
    format!(
        r#"p=$(grep ':{controller}:' /proc/self/cgroup | cut -d: -f3); u=$(grep '^0::' /proc/self/cgroup | cut -d: -f3)
cg=; for d in "/sys/fs/cgroup/{controller}$p" "/sys/fs/cgroup/unified$u" "/sys/fs/cgroup$u"; do
  for f in {files}; do [ "$(cat "$d/$f" 2>/dev/null)" = "{value}" ] && cg=$d && break 2; done
done
[ -n "$cg" ] || {{ echo "the {controller} limit is not in force" >&2; exit 99; }}
"#
    )
}

/// `dsh-bash run --json ARGS -- COMMAND` as `user`, killed after 60 s
/// whatever happens; the result's JSON.
fn run_json(user: User, args: &[&str], command: &str) -> Value {
    let output = as_user(user, "timeout")
        .args(["-s", "KILL", "60"])
        .arg(binary())
        .args(["run", "--json", "--timeout", "30000"])
        .args(args)
        .args(["--", command])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    common::confined::result_json(&output)
}

/// True if this host applies a process limit through a cgroup; else skips
/// `what` loudly.
fn limited_or_skip(what: &str) -> bool {
    let probe = run_json(User::Root, &["--max-processes", "200"], "true");
    let mechanism = probe["limits"]["mechanism"].as_str().unwrap_or("none");
    let limited =
        matches!(mechanism, "cgroup-v1" | "cgroup-v2") && probe["limits"]["processes"] == 200;
    if !limited {
        skip(&format!(
            "{what}: no cgroup controller applies limits here ({mechanism}: {})",
            probe["limits"]
        ));
    }
    limited
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_hits_the_process_limit_while_another_session_is_answered() {
    if !limited_or_skip("fork bomb") {
        return;
    }
    let server = tokio::task::spawn_blocking(|| Listening::start(&["--max-processes", "200"]))
        .await
        .unwrap();
    let connect = || dsh_bash_remote::RemoteBashExecutor::over_http(&server.url, &server.token);
    let (bomber, other) = (connect().await.unwrap(), connect().await.unwrap());
    let marker = "dsh_limits_bomb_marker";
    let bomb = format!(
        "{}echo \"events=$cg/pids.events\"; {marker}(){{ {marker}|{marker}& }}; {marker}; sleep 60",
        in_force("pids", &["pids.max"], "200")
    );
    let task = bomber
        .start(bomber.resolve(BashExecRequest::new(bomb)).unwrap())
        .await
        .unwrap();
    // The limit is in force (the command said so) and the bomb is going:
    // wait for the kernel to count a refused fork.
    let mut output = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let events = loop {
        let read = bomber.read_output(&task.id, None).unwrap();
        output.push_str(&read.delta);
        if let Some(line) = output.lines().find_map(|l| l.strip_prefix("events=")) {
            break line.to_owned();
        }
        assert_eq!(
            read.task.status,
            TaskStatus::Running,
            "the bomb did not start: {output}"
        );
        assert!(
            Instant::now() < deadline,
            "no events path after 30 s: {output}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    loop {
        let text = std::fs::read_to_string(&events).unwrap_or_default();
        if text.lines().any(|l| l.starts_with("max ") && l != "max 0") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no fork refused after 30 s: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // At the limit, the server still answers another session at once.
    let asked = Instant::now();
    let answer = other
        .run(other.resolve(BashExecRequest::new("echo ok")).unwrap())
        .await
        .unwrap();
    let took = asked.elapsed();
    assert_eq!(answer.stdout.text, "ok\n");
    assert!(
        took < Duration::from_secs(1),
        "another session waited {took:?} during the bomb"
    );
    // A kill settles it; nothing is left.
    assert!(bomber.kill(&task.id).await.unwrap());
    let settled = tokio::time::timeout(Duration::from_secs(30), task.settled())
        .await
        .expect("the bomb settles within 30 s of its kill");
    let limits = settled.limits.expect("the task's limits");
    assert_ne!(limits.mechanism, LimitMechanism::Rlimit);
    assert_eq!(limits.processes, Some(200));
    assert!(limits.process_limit_hit, "{limits:?}");
    assert_eq!(
        processes_with(marker),
        Vec::<String>::new(),
        "the bomb left processes"
    );
    // Removed on its spawner thread, just after the settle.
    let cgroup = std::path::Path::new(&events).parent().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cgroup.exists() {
        assert!(
            Instant::now() < deadline,
            "its cgroup {} is removed",
            cgroup.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_oom_killed_at_its_limit_and_said_so() {
    if !limited_or_skip("memory hog") {
        return;
    }
    let server = tokio::task::spawn_blocking(|| Listening::start(&["--max-memory", "256M"]))
        .await
        .unwrap();
    let executor = dsh_bash_remote::RemoteBashExecutor::over_http(&server.url, &server.token)
        .await
        .unwrap();
    let before = rss_kib(server.child.id());
    let hog = format!(
        "{}python3 -c 'x = bytearray(2**31)'",
        in_force(
            "memory",
            &["memory.limit_in_bytes", "memory.max"],
            "268435456"
        )
    );
    let result = executor
        .run(executor.resolve(BashExecRequest::new(hog)).unwrap())
        .await
        .unwrap();
    assert_ne!(result.exit_code, Some(99), "{}", result.stderr.text);
    let limits = result.limits.clone().expect("limits");
    assert!(limits.oom_killed, "{limits:?}\n{}", result.stderr.text);
    assert_eq!(limits.memory_bytes, Some(256 << 20));
    // Killed by SIGKILL: the shell (which execs its last command), or its
    // child, which it reports as 137.
    assert!(
        result.signal.as_deref() == Some("SIGKILL") || result.exit_code == Some(137),
        "{result:?}"
    );
    let text = dsh_tool_bash::render_run_result(&result);
    assert!(
        text.contains("[killed: out of memory (limit 256 MiB)"),
        "{text}"
    );
    let after = rss_kib(server.child.id());
    assert!(
        after < before + 32 * 1024,
        "the server grew from {before} to {after} KiB"
    );
}

#[test]
fn a_cpu_quota_holds_a_busy_loop_to_its_share() {
    if !limited_or_skip("CPU quota") {
        return;
    }
    let quota = in_force("cpu", &["cpu.cfs_quota_us", "cpu.max"], "50000");
    let quota_v2 = in_force("cpu", &["cpu.max"], "50000 100000");
    let command = format!(
        "( {quota} ) || ( {quota_v2} ) || exit 99; timeout 2 bash -c 'while :; do :; done'; times"
    );
    let result = run_json(User::Root, &["--max-cpu", "0.5"], &command);
    assert_ne!(result["exit_code"], 99, "{}", result["stderr"]["text"]);
    assert_eq!(result["limits"]["cpu_millicores"], 500);
    // `times`: the shell's user and system time, then its children's.
    let stdout = result["stdout"]["text"].as_str().unwrap();
    let children = stdout.lines().nth(1).expect("the children's times");
    let seconds: f64 = children
        .split_whitespace()
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum();
    assert!(
        seconds <= 1.2,
        "the loop used {seconds} s of CPU in 2 s at 0.5 CPU"
    );
    assert!(
        seconds >= 0.2,
        "the loop hardly ran: {seconds} s ({stdout})"
    );
}

/// What a command run without a cgroup gets: memory as an `RLIMIT_DATA`
/// per process (a 2 GiB allocation fails with MemoryError, nothing is OOM
/// killed), no process or CPU limit, said as `partial` with the missing
/// limits named.
fn rlimits_only(user: User, args: &[&str]) {
    let mut all = vec![
        "--max-processes",
        "200",
        "--max-memory",
        "256M",
        "--max-cpu",
        "0.5",
    ];
    all.extend_from_slice(args);
    let result = run_json(user, &all, "python3 -c 'x = bytearray(2**31)'");
    assert_eq!(result["containment"], "process-tree", "{result}");
    let limits = &result["limits"];
    assert_eq!(limits["mechanism"], "rlimit", "{limits}");
    assert_eq!(limits["partial"], true);
    assert_eq!(
        limits["missing"],
        serde_json::json!(["processes", "cpu", "shared-memory"])
    );
    assert_eq!(limits["memory_bytes"], 256 << 20);
    assert_eq!(limits["processes"], Value::Null);
    assert_eq!(limits["oom_killed"], false);
    assert_eq!(result["exit_code"], 1, "{result}");
    assert!(
        result["stderr"]["text"]
            .as_str()
            .unwrap()
            .contains("MemoryError"),
        "{result}"
    );
}

#[test]
fn the_process_tree_containment_reports_partial_limits() {
    rlimits_only(User::Root, &["--containment", "process-tree"]);
}

#[test]
fn as_an_unprivileged_user_without_cgroups_the_limits_are_partial() {
    rlimits_only(User::Nobody, &[]);
}
