//! Denials the kernel reports (Landlock ABI 7 audit records) against the
//! ones a command can only print, through the `dsh-bash` binary.
//!
//! This file switches the kernel's audit on for its run (and back after),
//! so it is a test binary of its own: cargo runs test binaries one after
//! another, and no other suite's server sees audit on. Needs root (to
//! switch audit, and for the server to read it) and Landlock ABI 7; skips
//! loudly elsewhere, fails under `DSH_TEST_REQUIRE_SANDBOX=1`.
//!
//! - a real refusal under Landlock as root: `denied`, evidence `kernel`,
//!   what was refused named, in JSON and in the text marker;
//! - a forged one (`echo "…: Permission denied" >&2; exit 1`): not denied,
//!   and no marker at all;
//! - two servers at once, one refused while the other forges: each gets
//!   its own account (a FIFO holds the first open across the second);
//! - a background task over MCP: the same account in its settled facts;
//! - where the kernel cannot tell (as uid 65534, under bubblewrap, audit
//!   switched off while the command runs): the stderr guess, said as one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::audit;
use common::confined::{base, chown, skip, workspace_write, User, NOBODY};
use serde_json::Value;

const GUESS: &str = "[sandbox: stderr looks like a permission error under workspace-write mode; a guess from the output, not a report from the kernel]";

fn workspace(name: &str, user: User) -> PathBuf {
    let dir = base().join("denials").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    if user == User::Nobody {
        chown(&dir, NOBODY);
    }
    for parent in dir.ancestors().take(3) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755));
    }
    dir
}

fn run_with(user: User, backend: &str, ws: &Path, json: bool, command: &str) -> Command {
    let mut run = workspace_write(user, backend, ws);
    if json {
        run.arg("--json");
    }
    run.arg("--").arg(command);
    run
}

fn sandbox_of(output: &Output) -> Value {
    let result: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    result["sandbox"].clone()
}

fn facts(user: User, backend: &str, ws: &Path, command: &str) -> Value {
    sandbox_of(&run_with(user, backend, ws, true, command).output().unwrap())
}

fn text(user: User, backend: &str, ws: &Path, command: &str) -> String {
    let output = run_with(user, backend, ws, false, command)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether the kernel can report here; skips loudly when not.
fn reportable() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        skip("kernel-reported denials: needs root (to switch audit on)");
        return false;
    }
    // SAFETY: with a null attr and size 0 the call only returns the ABI.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    if abi < 7 {
        skip(&format!(
            "kernel-reported denials: Landlock ABI {abi} here, 7 (Linux 6.15) needed"
        ));
        return false;
    }
    if audit::enabled().is_none() {
        skip("kernel-reported denials: the kernel's audit cannot be read here");
        return false;
    }
    true
}

fn real_and_forged(ws: &Path) {
    let real = facts(User::Root, "landlock", ws, "touch /etc/dsh-denials-x");
    assert_eq!(real["denied"], true, "{real}");
    assert_eq!(real["denial_evidence"], "kernel", "{real}");
    assert_eq!(
        real["refused"],
        serde_json::json!(["fs.make_reg on /etc"]),
        "{real}"
    );
    let shown = text(User::Root, "landlock", ws, "touch /etc/dsh-denials-x");
    assert!(
        shown.contains("[sandbox: the kernel refused under workspace-write mode: fs.make_reg on /etc]\n[sandbox: refused /etc: outside the workspace "),
        "{shown}"
    );
    // What was refused, explained from the kernel's record: its class and
    // what works instead.
    assert_eq!(real["blocked"][0]["class"], "outside-workspace", "{real}");
    assert!(
        shown.ends_with("(a person approves)]\n[exit code: 1]\n")
            || shown.ends_with("(a person approves)]\n[exit code: 1]"),
        "{shown}"
    );
    let forged =
        "echo 'cp: x: Read-only file system' >&2; echo 'touch: y: Permission denied' >&2; exit 1";
    let facts_of_forged = facts(User::Root, "landlock", ws, forged);
    assert_eq!(facts_of_forged["denied"], false, "{facts_of_forged}");
    assert_eq!(
        facts_of_forged["denial_evidence"], "kernel",
        "{facts_of_forged}"
    );
    let shown = text(User::Root, "landlock", ws, forged);
    assert!(!shown.contains("[sandbox:"), "{shown}");
    // The seed's rule stands: never on a clean exit.
    let clean = facts(
        User::Root,
        "landlock",
        ws,
        "touch /etc/dsh-denials-x; exit 0",
    );
    assert_eq!(clean["denied"], false, "{clean}");
}

/// A FIFO in `ws` and a way to open it for writing with a bound.
fn fifo(ws: &Path, name: &str) -> PathBuf {
    let path = ws.join(name);
    let _ = std::fs::remove_file(&path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    path
}

fn release(fifo: &Path) {
    let mut writer = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
    writer.write_all(b"go\n").unwrap();
}

/// Waits (fail-safe 20 s) until `path` exists.
fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `dsh-bash run --json` under Landlock as root of a command that does
/// `refusal`, says so, then holds until its gate is released, and fails:
/// the running process (once it has been refused) and its gate.
fn refused_and_held(ws: &Path, refusal: &str, name: &str) -> (std::process::Child, PathBuf) {
    let gate = fifo(ws, &format!("gate-{name}"));
    let refused = ws.join(format!("refused-{name}"));
    let _ = std::fs::remove_file(&refused);
    let held = run_with(
        User::Root,
        "landlock",
        ws,
        true,
        &format!("{refusal}; touch refused-{name}; read line < gate-{name}; exit 1"),
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for(&refused);
    (held, gate)
}

fn side_by_side(ws: &Path) {
    // A: refused, then held open.
    let (first, gate) = refused_and_held(ws, "touch /usr/dsh-denials-a", "a");
    // B, while A holds its refusal: forges one.
    let second = facts(
        User::Root,
        "landlock",
        ws,
        "echo 'touch: z: Permission denied' >&2; exit 1",
    );
    assert_eq!(second["denied"], false, "B got A's refusal: {second}");
    assert_eq!(second["denial_evidence"], "kernel", "{second}");
    release(&gate);
    let first = sandbox_of(&first.wait_with_output().unwrap());
    assert_eq!(first["denied"], true, "{first}");
    assert_eq!(
        first["refused"],
        serde_json::json!(["fs.make_reg on /usr"]),
        "{first}"
    );
}

fn background_task(ws: &Path) {
    let mut server = common::RawServer::spawn_with(&[
        "--sandbox",
        "workspace-write",
        "--sandbox-backend",
        "landlock",
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
    assert_eq!(server.next()["id"], 1);
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let call = |id: u32, name: &str, arguments: Value| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}})
        .to_string()
    };
    server.send(&call(
        2,
        "bash",
        serde_json::json!({"command": "mkdir /etc/dsh-denials-bg; exit 1", "description": "refused", "run_in_background": true}),
    ));
    let reply = |server: &mut common::RawServer, id: u32| loop {
        let message = server.next();
        if message["id"] == id {
            break message;
        }
    };
    let started = reply(&mut server, 2);
    let id = started["result"]["structuredContent"]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 3;
    let settled = loop {
        server.send(&call(n, "bash_output", serde_json::json!({"task_id": id})));
        let read = reply(&mut server, n);
        let shown = read["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !shown.contains("[status: running]") {
            break format!("{shown}\n{read}");
        }
        assert!(Instant::now() < deadline, "the task never settled: {read}");
        n += 1;
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        settled.contains(
            "[sandbox: the kernel refused under workspace-write mode: fs.make_dir on /etc]"
        ),
        "{settled}"
    );
    drop(server.stdin.take());
    server.child.wait().unwrap();
}

fn where_the_kernel_cannot_tell(ws: &Path, nobody_ws: &Path) {
    // As uid 65534 the server may not read the audit log.
    let nobody = text(
        User::Nobody,
        "landlock",
        nobody_ws,
        "touch /etc/dsh-denials-x",
    );
    assert!(nobody.contains(GUESS), "{nobody}");
    let facts_nobody = facts(
        User::Nobody,
        "landlock",
        nobody_ws,
        "touch /etc/dsh-denials-x",
    );
    assert_eq!(facts_nobody["denial_evidence"], "stderr", "{facts_nobody}");
    // Bubblewrap's refusals are read-only mounts, which the kernel does not log.
    if Command::new("bwrap").arg("--version").output().is_ok() {
        let bwrap = facts(User::Root, "bwrap", ws, "touch /etc/dsh-denials-x");
        assert_eq!(bwrap["denied"], true, "{bwrap}");
        assert_eq!(bwrap["denial_evidence"], "stderr", "{bwrap}");
    } else {
        skip("kernel-reported denials under bwrap: bwrap is missing");
    }
}

fn audit_switched_off_meanwhile(ws: &Path, switched: audit::Switched) {
    let (held, gate) = refused_and_held(ws, "touch /etc/dsh-denials-x", "off");
    drop(switched);
    assert_eq!(audit::enabled(), Some(false), "audit stayed on");
    release(&gate);
    let facts = sandbox_of(&held.wait_with_output().unwrap());
    // The account may be incomplete now: not given, the guess stands.
    assert_eq!(facts["denial_evidence"], "stderr", "{facts}");
    assert_eq!(facts["denied"], true, "{facts}");
}

#[test]
fn the_kernel_reports_what_a_command_cannot_forge() {
    if !reportable() {
        return;
    }
    let ws = workspace("root", User::Root);
    let nobody_ws = workspace("nobody", User::Nobody);
    if audit::enabled() == Some(true) {
        // Audit was on before this test: it must be left on, so the
        // "switched off meanwhile" case cannot run here.
        eprintln!("note: audit was on already; it stays on");
    }
    let was_on = audit::enabled() == Some(true);
    let switched = audit::Switched::on().expect("root may switch audit on");
    real_and_forged(&ws);
    side_by_side(&ws);
    background_task(&ws);
    where_the_kernel_cannot_tell(&ws, &nobody_ws);
    if was_on {
        drop(switched);
    } else {
        audit_switched_off_meanwhile(&ws, switched);
    }
    let _ = std::fs::remove_dir_all(base());
}
