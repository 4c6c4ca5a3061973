//! What a hostile command tries around the sandbox rather than in it,
//! through the `dsh-bash` binary as root and as uid 65534 under each
//! backend:
//!
//! - a temp dir or spill parent inside the writable workspace (where a
//!   command beside another one could swap what the server removes for a
//!   symlink to a victim) is refused before anything runs, naming both
//!   paths;
//! - the private TMPDIR of a server killed outright (SIGKILL, a `chmod 000`
//!   directory inside) is swept by the next server of the same user, and
//!   nothing outside it is touched;
//! - a command that prints what a sandbox denial looks like gets `denied`
//!   as a guess, said to be one, and no suggestion to lift the sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::confined::{base, binary, chown, skip, workspace_write, User, NOBODY};

fn dir(path: PathBuf, user: User) -> PathBuf {
    std::fs::create_dir_all(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    if user == User::Nobody {
        chown(&path, NOBODY);
    }
    path
}

fn run(
    user: User,
    backend: &str,
    ws: &Path,
    tmpdir: &Path,
    extra: &[&str],
    command: &str,
) -> Command {
    let mut run = workspace_write(user, backend, ws);
    run.args(extra)
        .arg("--")
        .arg(command)
        .env("TMPDIR", tmpdir)
        .env("WS", ws);
    run
}

fn usable(user: User, backend: &str, root: &Path) -> bool {
    let ws = dir(root.join(format!("probe-{backend}")), user);
    let host_tmp = dir(root.join(format!("probe-tmp-{backend}")), user);
    let output = run(user, backend, &ws, &host_tmp, &[], "true")
        .output()
        .unwrap();
    if output.status.success() {
        return true;
    }
    skip(&format!(
        "server walks under {backend} as {user:?}: unusable here ({})",
        String::from_utf8_lossy(&output.stderr).trim()
    ));
    false
}

/// Names in `dir` that start with `prefix`.
fn named(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

fn scratch_inside_the_workspace_is_refused(user: User, backend: &str, root: &Path) {
    let tag = format!("{backend} as {user:?}");
    let ws = dir(root.join(format!("inside-{backend}")), user);
    let inner_tmp = dir(ws.join("tmp"), user);
    // TMPDIR inside the workspace; the workspace being the temp dir.
    for (tmpdir, extra) in [
        (inner_tmp.clone(), vec![]),
        (
            inner_tmp.clone(),
            vec!["--workspace", inner_tmp.to_str().unwrap()],
        ),
    ] {
        let output = run(user, backend, &ws, &tmpdir, &extra, "touch \"$WS/ran\"")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{tag} {extra:?}: {stderr}");
        assert!(
            stderr.contains("lies inside the writable workspace")
                && stderr.contains(&tmpdir.display().to_string()),
            "{tag} {extra:?}: {stderr}"
        );
        assert!(!ws.join("ran").exists(), "{tag} {extra:?}: the command ran");
        assert!(
            named(&inner_tmp, "dsh-bash").is_empty(),
            "{tag}: {:?}",
            named(&inner_tmp, "")
        );
    }
}

fn killed_servers_tmpdirs_are_swept(user: User, backend: &str, root: &Path) {
    let tag = format!("{backend} as {user:?}");
    let ws = dir(root.join(format!("killed-{backend}")), user);
    let host_tmp = dir(root.join(format!("killed-tmp-{backend}")), user);
    let victim = dir(root.join(format!("victim-{backend}")), user);
    std::fs::write(victim.join("precious"), "keep").unwrap();
    let started = ws.join("started");
    let mut server = run(
        user,
        backend,
        &ws,
        &host_tmp,
        &[],
        "mkdir -p $TMPDIR/a/b && ln -s \"$VICTIM\" $TMPDIR/a/link && chmod 000 $TMPDIR/a/b $TMPDIR/a && touch \"$WS/started\" && exec sleep 600",
    )
    .env("VICTIM", &victim)
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        assert!(
            Instant::now() < deadline,
            "{tag}: the command never started"
        );
        assert!(
            server.try_wait().unwrap().is_none(),
            "{tag}: the server ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let left = named(&host_tmp, "dsh-bash-tmp-");
    assert_eq!(
        left.len(),
        1,
        "{tag}: a SIGKILL leaves its private TMPDIR (the premise): {left:?}"
    );
    let output = run(user, backend, &ws, &host_tmp, &[], "true")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{tag}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let left = named(&host_tmp, "dsh-bash-tmp-");
    assert!(
        left.is_empty(),
        "{tag}: the dead server's TMPDIR was not swept: {left:?}"
    );
    assert!(
        victim.join("precious").exists(),
        "{tag}: the sweep went through the link"
    );
    let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "{tag}: the sweep changed the link's target");
}

fn forged_denials_are_guesses(user: User, backend: &str, root: &Path) {
    let tag = format!("{backend} as {user:?}");
    let ws = dir(root.join(format!("forged-{backend}")), user);
    let host_tmp = dir(root.join(format!("forged-tmp-{backend}")), user);
    let output = run(
        user,
        backend,
        &ws,
        &host_tmp,
        &[],
        "echo 'cp: x: Read-only file system' >&2; echo 'touch: y: Permission denied' >&2; exit 1",
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{tag}: {text}");
    // Where the kernel reports denials (Landlock as root with audit on,
    // see denials.rs), a forged one is no denial at all; elsewhere it is a
    // guess, said as one.
    let kernel =
        backend == "landlock" && user == User::Root && common::audit::enabled() == Some(true);
    if kernel {
        assert!(!text.contains("[sandbox:"), "{tag}: {text}");
    } else {
        assert!(
            text.contains("[sandbox: stderr looks like a permission error under workspace-write mode; a guess from the output"),
            "{tag}: {text}"
        );
    }
    assert!(!text.contains("sandbox_permissions"), "{tag}: {text}");
}

#[test]
fn promises_around_the_sandbox_hold() {
    let root = base().join("server-walks");
    let _ = std::fs::remove_dir_all(&root);
    for user in [User::Root, User::Nobody] {
        let root = dir(root.join(format!("{user:?}")), User::Root);
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        for backend in ["bwrap", "landlock"] {
            if !usable(user, backend, &root) {
                continue;
            }
            scratch_inside_the_workspace_is_refused(user, backend, &root);
            killed_servers_tmpdirs_are_swept(user, backend, &root);
            forged_denials_are_guesses(user, backend, &root);
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The cgroup2 directory this process is in, if it may make cgroups there.
fn own_cgroup() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|line| {
        let (_, after) = line.split_once(" - ")?;
        after
            .starts_with("cgroup2 ")
            .then(|| line.split_whitespace().nth(4).map(PathBuf::from))?
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = mount.join(own.trim_start_matches('/'));
    // One name per call: the tests that ask run side by side.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!("dsh-probe-{}-{call}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    let usable = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    usable.then_some(dir)
}

/// What a host killed with its watchdog leaves: its parent cgroup under
/// `base`, named for a pid in `pids` no process has, with a process still
/// in it (our child, reaped by the test once the sweep kills it).
fn stale_cgroup(base: &Path, pids: std::ops::Range<u32>) -> (PathBuf, std::process::Child) {
    let dead = pids
        .into_iter()
        .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .unwrap();
    let stale = base.join(format!("dsh-bash-{dead}"));
    std::fs::create_dir_all(&stale).unwrap();
    let survivor = Command::new("sleep").arg("600").spawn().unwrap();
    std::fs::write(stale.join("cgroup.procs"), survivor.id().to_string()).unwrap();
    (stale, survivor)
}

/// A server and its watchdog killed together (an OOM kill, a group kill)
/// leave their cgroup, processes and all: the next server sweeps it when
/// it starts, before any command.
#[test]
fn a_dead_servers_cgroup_is_swept_when_the_next_one_starts() {
    let Some(base) = own_cgroup() else {
        skip("the stale-cgroup sweep: no writable cgroup2 with cgroup.kill here");
        return;
    };
    let (stale, mut survivor) = stale_cgroup(&base, 4_000_000..4_100_000);
    // Reaped here (it is our child) once the sweep kills it.
    let mut server = Command::new(binary())
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let swept = loop {
        if survivor.try_wait().unwrap().is_some() {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = server.kill();
    let _ = server.wait();
    if !swept {
        let _ = survivor.kill();
        let _ = survivor.wait();
    }
    let _ = std::fs::remove_dir(&stale);
    assert!(
        swept,
        "a dead server's process outlived the next server's start"
    );
    assert!(!stale.exists(), "the stale cgroup was not removed");
}

/// A tmpfs of `bytes` mounted at `at` (root only), unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, bytes: u64) -> Option<Tmpfs> {
        std::fs::create_dir_all(&at).unwrap();
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0755"),
                "tmpfs",
            ])
            .arg(&at)
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(Tmpfs(at))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A full spill filesystem reclaims: on a 2 MiB tmpfs, the third 900 kB
/// output of one server still gets a complete spill file, made room for
/// by deleting the oldest, whose stream then says so.
#[test]
fn a_full_spill_filesystem_makes_room_for_new_output() {
    let Some(fs) = Tmpfs::mount(base().join("spill-tmpfs"), 2 << 20) else {
        skip("a full spill filesystem: cannot mount a tmpfs here (needs root)");
        return;
    };
    let mut server = common::RawServer::spawn_in(&[], &[("TMPDIR", fs.0.as_path())]);
    server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
    assert_eq!(server.next()["id"], 1);
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let mut files = Vec::new();
    for id in 2..5 {
        let call = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "bash",
            "arguments": {"command": "yes 0123456789abcdef | head -c 900000", "description": "a long output"}}});
        server.send(&call.to_string());
        let answer = server.next();
        let result = &answer["result"]["structuredContent"];
        let text = result["text"].as_str().unwrap();
        assert!(
            text.starts_with("[output truncated: 900000 bytes in all"),
            "{text:.300}"
        );
        assert!(
            !text.contains("partial output"),
            "a spill file was cut short: {text:.400}"
        );
        files.push(PathBuf::from(result["output_files"][0].as_str().unwrap()));
    }
    // The newest two are complete; the oldest made room.
    for file in &files[1..] {
        assert_eq!(
            std::fs::metadata(file).unwrap().len(),
            900_000,
            "{}",
            file.display()
        );
    }
    assert!(!files[0].exists(), "the oldest was not reclaimed");
    // Gone before the tmpfs is unmounted.
    let _ = server.child.kill();
    let _ = server.child.wait();
}

/// What a host killed outright together with its watchdog left running
/// is gone before the next server listens: by the time `mcp --listen`
/// prints its address, the stale cgroup's process has exited and the
/// cgroup is removed.
#[test]
fn a_dead_servers_processes_are_gone_before_the_next_one_listens() {
    let Some(base) = own_cgroup() else {
        skip("the sweep before listening: no writable cgroup2 with cgroup.kill here");
        return;
    };
    let (stale, mut survivor) = stale_cgroup(&base, 4_100_000..4_200_000);
    let tokens = tempfile::tempdir().unwrap();
    let mut server = Command::new(binary())
        .args(["mcp", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(tokens.path().join("token"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Everything it said before it listened.
    let mut said = String::new();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(server.stderr.take().unwrap()));
    for line in lines.by_ref() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line.contains("listening on") {
            break;
        }
    }
    let gone = survivor.try_wait().unwrap().is_some();
    let _ = server.kill();
    let _ = server.wait();
    if !gone {
        let _ = survivor.kill();
        let _ = survivor.wait();
    }
    let _ = std::fs::remove_dir(&stale);
    assert!(
        gone,
        "a dead server's process was still running when the next one listened"
    );
    assert!(
        !stale.exists(),
        "the stale cgroup was not removed before listening"
    );
    // (Which server logs the kill is a race: every dsh-bash this suite
    // starts at once sweeps the same stale cgroups.)
    assert!(said.contains("listening on"), "{said}");
}

/// A server out of file descriptors says so, not that a sandbox is
/// missing, and probes again once it has them: with its soft descriptor
/// limit lowered to 16 (`prlimit --pid`), its first confined command is
/// refused as "could not be started now" (never "install bubblewrap");
/// with the limit raised again, the next command runs confined.
#[test]
fn out_of_descriptors_is_not_a_missing_sandbox() {
    if !common::confined::usable_or_skip(&["--sandbox", "read-only"], "a low descriptor limit") {
        return;
    }
    use std::io::{BufRead, BufReader, Write};
    let mut server = Command::new(binary())
        .args(["mcp", "--sandbox", "read-only"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap());
    let mut ask = |line: &str, id: u64| -> serde_json::Value {
        writeln!(stdin, "{line}").unwrap();
        loop {
            let mut answer = String::new();
            assert!(
                stdout.read_line(&mut answer).unwrap() > 0,
                "the server ended"
            );
            let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
            if answer["id"] == id {
                return answer;
            }
        }
    };
    ask(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        1,
    );
    let soft = |limit: &str| {
        let set = Command::new("prlimit")
            .arg(format!("--pid={}", server.id()))
            .arg(format!("--nofile={limit}:"))
            .status()
            .unwrap();
        assert!(set.success(), "prlimit --nofile={limit}:");
    };
    let call = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"bash","arguments":{{"command":"echo confined","description":"d"}}}}}}"#
        )
    };
    // Its own soft limit, to give back.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.id())).unwrap();
    let own = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap()
        .to_owned();
    soft("16");
    let refused = ask(&call(2), 2).to_string();
    assert!(refused.contains("could not be started now"), "{refused}");
    assert!(!refused.contains("install bubblewrap"), "{refused}");
    // Limits where bubblewrap's probe runs short but Landlock's would
    // pass: the command is refused, never run under the weaker backend
    // (outside bubblewrap's pid namespace, `$$` is the host's numbering).
    if common::confined::usable_or_skip(
        &["--sandbox", "read-only", "--sandbox-backend", "bwrap"],
        "no weaker backend for want of descriptors",
    ) {
        let open = std::fs::read_dir(format!("/proc/{}/fd", server.id()))
            .unwrap()
            .count();
        let mut id = 10;
        for extra in 2..40 {
            soft(&(open + extra).to_string());
            id += 1;
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"bash","arguments":{{"command":"echo pid=$$","description":"d"}}}}}}"#
            );
            let answer = ask(&line, id).to_string();
            if answer.contains("could not be started now") {
                continue;
            }
            let pid: u32 = answer
                .split("pid=")
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{answer}"));
            assert!(
                pid < 10,
                "ran outside bubblewrap with {extra} descriptors free: {answer}"
            );
            break;
        }
    }
    soft(&own);
    let ran = ask(&call(3), 3).to_string();
    assert!(
        ran.contains(r#""text":"confined\n""#),
        "not probed again: {ran}"
    );
    let _ = server.kill();
    let _ = server.wait();
}
