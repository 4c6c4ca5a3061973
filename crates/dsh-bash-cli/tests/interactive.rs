//! The interactive tools through the real binary and the official MCP
//! Python SDK (`tests/mcp/interactive.py`): a `python3` REPL and a prompt
//! in a terminal driven with `bash_write`, `C-c` in a loop, a `yieldMs`
//! hand-over read later, `vi` saving a file (unconfined, and under
//! `workspace-write` with each usable backend), the screen of `top`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::process::Command;

fn python_sdk_present() -> bool {
    Command::new("python3")
        .args(["-c", "import mcp, anyio"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_python_client_drives_terminals_writes_and_yields() {
    if !common::client_or_skip(
        python_sdk_present(),
        "the MCP Python SDK",
        "pip install mcp",
    ) {
        return;
    }
    let mut backends = Vec::new();
    for backend in ["bwrap", "landlock"] {
        let sandbox = ["--sandbox", "workspace-write", "--sandbox-backend", backend];
        if common::confined::usable_or_skip(&sandbox, &format!("vi under {backend}")) {
            backends.push(backend);
        }
    }
    // Workspaces outside /tmp (bubblewrap gives a command a /tmp of its own).
    std::fs::create_dir_all(common::confined::base()).unwrap();
    let workspaces = tempfile::tempdir_in(common::confined::base()).unwrap();
    let mut expected = vec![
        "a python REPL in a terminal is driven with bash_write".to_owned(),
        "a prompt is answered".into(),
        "C-c interrupts sleep in a loop and the loop goes on unconfined".into(),
        "yieldMs hands a slow command over and bash_output reads it later".into(),
        "the screen of top is read".into(),
        "vi edits and saves a file unconfined".into(),
    ];
    for backend in &backends {
        expected.push(format!(
            "vi edits and saves a file under workspace-write with {backend}"
        ));
        expected.push(format!(
            "C-c interrupts sleep in a loop and the loop goes on under workspace-write with {backend}"
        ));
    }
    let script = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/mcp/interactive.py"
    ));
    let backends = backends.join(",");
    let envs = [
        ("DSH_VI_BACKENDS", std::ffi::OsStr::new(&backends)),
        ("DSH_VI_WORKSPACES", workspaces.path().as_os_str()),
    ];
    common::run_client_with("python3", script, &envs, &expected);
}

/// The errno name a command in a terminal gets from `ioctl(0, request,
/// argument)` (`ok` when it succeeds), through `dsh-bash run --tty ARGS`.
fn terminal_ioctl(args: &[&str], request: u32, argument: &str) -> String {
    std::fs::create_dir_all(common::confined::base()).unwrap();
    let dir = tempfile::tempdir_in(common::confined::base()).unwrap();
    let probe = dir.path().join("probe.py");
    std::fs::write(
        &probe,
        // The terminal must be the command's controlling terminal with it
        // in the foreground, else the kernel itself refuses TIOCSTI.
        format!("import errno, fcntl, os\nif os.tcgetpgrp(0) != os.getpgrp():\n    print('not in the foreground')\ntry:\n    fcntl.ioctl(0, {request}, {argument})\n    print('ok')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\n"),
    )
    .unwrap();
    let output = Command::new(common::confined::binary())
        .args(["run", "--tty", "--workdir"])
        .arg(dir.path())
        .args(args)
        .arg("--")
        .arg(format!("python3 {}", probe.display()))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[test]
fn a_sandboxed_terminal_command_cannot_type_into_or_paste_from_a_terminal() {
    // TIOCLINUX (0x541c) subcode 3 (paste the console selection); TIOCSTI
    // (0x5412) types a byte. Unconfined, the pty refuses TIOCLINUX as not
    // a console (EINVAL or ENOTTY), not as forbidden.
    let unconfined = terminal_ioctl(&[], 0x541c, "b\"\\x03\"");
    assert_ne!(unconfined, "EPERM", "unconfined TIOCLINUX: {unconfined}");
    assert!(
        !unconfined.contains("not in the foreground"),
        "{unconfined}"
    );
    // Unconfined (as root), typing into its own terminal is allowed: the
    // refusal under a sandbox is the filter's.
    let typed = terminal_ioctl(&[], 0x5412, "b\"x\"");
    assert!(typed.ends_with("ok"), "unconfined TIOCSTI: {typed}");
    for backend in ["bwrap", "landlock"] {
        let sandbox = ["--sandbox", "read-only", "--sandbox-backend", backend];
        if !common::confined::usable_or_skip(&sandbox, &format!("terminal ioctls under {backend}"))
        {
            continue;
        }
        for (request, argument) in [(0x541c, "b\"\\x03\""), (0x5412, "b\"x\"")] {
            let refused = terminal_ioctl(&sandbox, request, argument);
            assert!(!refused.contains("not in the foreground"), "{refused}");
            assert_eq!(refused, "EPERM", "ioctl {request:#x} under {backend}");
        }
    }
}
