//! Command rules and the policy file through `dsh-bash mcp`, driven by the
//! official MCP Python SDK (tests/mcp/rules.py): a denied call never runs
//! and the model reads the reason; an asked call runs only after
//! acceptance; a proposed prefix accepted "always" lands in the user's
//! file and the next such call asks nothing; a project file that widens
//! the user's policy is refused naming the key. Without the SDK the test
//! skips loudly; with `DSH_TEST_REQUIRE_MCP_CLIENT=1` it fails. Needs a
//! sandbox backend (the policy confines to read-only); with
//! `DSH_TEST_REQUIRE_SANDBOX=1` a missing one fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::process::Command;

#[test]
fn rules_and_the_policy_file_through_the_python_sdk() {
    let sdk = Command::new("python3")
        .args(["-c", "import mcp.client.stdio"])
        .status()
        .is_ok_and(|s| s.success());
    if !common::client_or_skip(sdk, "the MCP Python SDK", "pip install mcp") {
        return;
    }
    if !common::confined::usable_or_skip(&["--sandbox", "read-only"], "command rules through MCP") {
        return;
    }
    let script = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/rules.py"));
    common::run_client(
        "python3",
        script,
        &[
            "a denied call never runs and the model reads the reason",
            "an asked call runs only after acceptance",
            "a rule accepted always is kept and the next call asks nothing",
            "a project file that widens the user's policy is refused naming the key",
        ],
    );
}

#[test]
fn rules_check_and_config_show_say_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(
        &file,
        "[[rule]]\ncommand = [\"git\", \"push\"]\ndecision = \"deny\"\nreason = \"publishes\"\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
            .args(args)
            .env("DSH_BASH_SYSTEM_CONFIG", "")
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let config = file.to_str().unwrap();
    let out = run(&[
        "rules",
        "check",
        "--config",
        config,
        "--",
        "ls && sudo git push",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let judged: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(judged["decision"], "deny");
    assert_eq!(judged["parts"][1]["command"], "git push");
    assert_eq!(judged["parts"][1]["origin"], format!("{config}:1"));
    let out = run(&["rules", "check", "--config", config, "--", "$CMD push"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let judged: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(judged["decision"], "ask");
    assert!(
        judged["parts"][0]["why"]
            .as_str()
            .unwrap()
            .contains("not known before it runs"),
        "{judged}"
    );
    let out = run(&["rules", "check", "--config", config, "--", "ls"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["decision"],
        "default"
    );
    let out = run(&["config", "show", "--config", config]);
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(
        shown.contains(&format!(
            "# {config}:1\n[[rule]]\ncommand = [\"git\", \"push\"]"
        )),
        "{shown}"
    );
    std::fs::write(&file, "[network]\nmode = \"sometimes\"\n").unwrap();
    let out = run(&["config", "show", "--config", config]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("{config}:2: network.mode: ")),
        "{err}"
    );
    let out = run(&[
        "run",
        "--config",
        "/nonexistent/policy.toml",
        "--",
        "echo",
        "never",
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--config /nonexistent/policy.toml: no such file"));
    assert!(out.stdout.is_empty(), "nothing ran");
}

/// As uid 65534 with a home that is root's (HOME inherited across a
/// change of user): the user's file there is skipped with a warning, not
/// an error that stops every command; named with --config it is an error.
#[test]
fn a_home_that_is_not_this_users_is_skipped_with_a_warning() {
    use common::confined::{as_user, base, binary, User};
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: needs root to make a home uid 65534 cannot read");
        return;
    }
    let home = base().join("rules-foreign-home");
    let file = home.join("dsh-bash/config.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "[sandbox]\nmode = \"read-only\"\n").unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let show = |explicit: bool| {
        let mut command = as_user(User::Nobody, binary().to_str().unwrap());
        command
            .args(["config", "show", "--workspace", "/"])
            .env("XDG_CONFIG_HOME", &home)
            .env("DSH_BASH_SYSTEM_CONFIG", "");
        if explicit {
            command.arg("--config").arg(&file);
        }
        command.output().unwrap()
    };
    let out = show(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("is not this user's to read"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("# read: no policy file"));
    let out = show(true);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot read the policy file"),
        "{out:?}"
    );
    let _ = std::fs::remove_dir_all(&home);
}
