//! `dsh-bash doctor`: each finding is checked against what the test made
//! of the host (bubblewrap taken off the PATH, an unprivileged user, a
//! shell snapshot cannot take, a temp directory it cannot write) and
//! against what the same user's commands really get (`dsh-bash run` under
//! each backend, with limits), as root and as uid 65534.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use common::confined::{self, as_user, User};
use serde_json::Value;

const TOPICS: [&str; 13] = [
    "sandbox",
    "bubblewrap",
    "landlock",
    "user-namespaces",
    "audit",
    "network",
    "containment",
    "limits",
    "files",
    "workdir",
    "shell",
    "temp",
    "container",
];

/// A home with a `.bashrc` of the test's own (never the machine's
/// dotfiles), owned by `user`.
fn home_for(user: User, dir: &Path) -> PathBuf {
    let home = dir.join(format!("home-{user:?}"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".bashrc"),
        "greet_from_doctor_test() { echo hi; }\nalias ll_doctor='ls -l'\n",
    )
    .unwrap();
    if user == User::Nobody {
        confined::chown_tree(&home, confined::NOBODY);
    }
    home
}

/// A PATH directory holding `bash` and `setpriv` but no `bwrap`.
fn path_without_bwrap(dir: &Path) -> PathBuf {
    let bin = dir.join("bin-without-bwrap");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["bash", "setpriv"] {
        let found = which(tool).unwrap_or_else(|| panic!("{tool} is not on PATH"));
        let link = bin.join(tool);
        if !link.exists() {
            std::os::unix::fs::symlink(found, link).unwrap();
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

struct Doctor<'a> {
    user: User,
    home: &'a Path,
    path: Option<&'a Path>,
    shell: &'a str,
    tmpdir: Option<&'a Path>,
}

impl Doctor<'_> {
    fn command(&self, json: bool) -> std::process::Command {
        let mut doctor = as_user(self.user, confined::binary().to_str().unwrap());
        doctor.arg("doctor");
        if json {
            doctor.arg("--json");
        }
        doctor
            .env("HOME", self.home)
            .env("SHELL", self.shell)
            .env_remove("DSH_BASH_SHELL_SNAPSHOT")
            .current_dir(self.home)
            .stdin(std::process::Stdio::null());
        if let Some(path) = self.path {
            doctor.env("PATH", path);
        }
        if let Some(tmpdir) = self.tmpdir {
            doctor.env("TMPDIR", tmpdir);
        }
        doctor
    }

    /// The JSON report; every topic once, in order.
    fn report(&self) -> Value {
        let output = self.command(true).output().unwrap();
        assert!(
            output.status.success(),
            "doctor failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report = confined::result_json(&output);
        let topics: Vec<&str> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["topic"].as_str().unwrap())
            .collect();
        assert_eq!(topics, TOPICS, "{report:#}");
        report
    }
}

fn finding<'a>(report: &'a Value, topic: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["topic"] == topic)
        .unwrap()
}

fn status(report: &Value, topic: &str) -> String {
    finding(report, topic)["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn found(report: &Value, topic: &str) -> String {
    finding(report, topic)["found"].as_str().unwrap().to_owned()
}

fn fix(report: &Value, topic: &str) -> String {
    finding(report, topic)["fix"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// Whether `user`'s `dsh-bash run` confines `true` under `backend`, with
/// `path` as its PATH.
fn confines(user: User, backend: &str, path: Option<&Path>, workdir: &Path) -> bool {
    let mut run = as_user(user, confined::binary().to_str().unwrap());
    run.args([
        "run",
        "--sandbox",
        "read-only",
        "--sandbox-backend",
        backend,
    ])
    .arg("--workdir")
    .arg(workdir)
    .args(["--", "true"])
    .stdin(std::process::Stdio::null());
    if let Some(path) = path {
        run.env("PATH", path);
    }
    run.output().unwrap().status.success()
}

/// What `user`'s `dsh-bash run` reports of its containment and limits.
fn run_facts(user: User) -> Value {
    let output = as_user(user, confined::binary().to_str().unwrap())
        .args([
            "run",
            "--json",
            "--max-processes",
            "256",
            "--max-memory",
            "512M",
        ])
        .args(["--workdir", "/", "--", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    confined::result_json(&output)
}

fn scratch(name: &str) -> PathBuf {
    let dir = confined::base().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn each_finding_matches_what_the_users_commands_get() {
    let dir = scratch("doctor-users");
    for user in [User::Root, User::Nobody] {
        let home = home_for(user, &dir);
        let doctor = Doctor {
            user,
            home: &home,
            path: None,
            shell: "/bin/bash",
            tmpdir: None,
        };
        let report = doctor.report();
        assert_eq!(
            report["uid"],
            if user == User::Root {
                0
            } else {
                confined::NOBODY
            },
            "{report:#}"
        );
        let bwrap = confines(user, "bwrap", None, &home);
        let landlock = confines(user, "landlock", None, &home);
        if confined::require_sandbox() {
            assert!(bwrap, "bubblewrap confines nothing for {user:?} here");
        }
        assert_eq!(
            status(&report, "bubblewrap") == "ok",
            bwrap,
            "{user:?}: {report:#}"
        );
        assert_eq!(
            status(&report, "landlock") != "missing",
            landlock,
            "{user:?}: {report:#}"
        );
        let sandbox = match (bwrap, landlock) {
            (true, _) => "ok",
            (false, true) => "warn",
            (false, false) => "missing",
        };
        assert_eq!(status(&report, "sandbox"), sandbox, "{user:?}: {report:#}");
        if bwrap {
            assert!(
                found(&report, "bubblewrap").contains("bubblewrap "),
                "the version: {report:#}"
            );
            assert!(
                found(&report, "network").contains("bubblewrap"),
                "{report:#}"
            );
        }
        check_processes(user, &report);
        // The snapshot of the test's own home: its function and alias.
        assert_eq!(status(&report, "shell"), "ok", "{report:#}");
        let shell = found(&report, "shell");
        assert!(shell.contains("snapshot of /bin/bash"), "{shell}");
        assert!(
            !shell.contains(" 0 functions") && !shell.contains(" 0 aliases"),
            "{shell}"
        );
        assert_eq!(status(&report, "temp"), "ok", "{report:#}");
        let engine = ["podman", "docker"]
            .into_iter()
            .find(|tool| which(tool).is_some());
        match engine {
            Some(engine) => {
                assert_eq!(status(&report, "container"), "ok", "{report:#}");
                assert!(found(&report, "container").contains(engine), "{report:#}");
            }
            None => assert_eq!(status(&report, "container"), "missing", "{report:#}"),
        }
        // The table says the same, a line per finding.
        let text = doctor.command(false).output().unwrap();
        let text = String::from_utf8(text.stdout).unwrap();
        for topic in TOPICS {
            let line = text
                .lines()
                .find(|line| line.split_whitespace().nth(1) == Some(topic))
                .unwrap_or_else(|| panic!("no {topic} line in:\n{text}"));
            assert!(line.starts_with(&status(&report, topic)), "{line}");
            assert!(line.ends_with(&found(&report, topic)), "{line}");
        }
    }
}

/// Containment and limits as the same user's command reports them; as
/// uid 65534, which may not make a cgroup, the process-tree walk and
/// per-process rlimits, each with the fix.
fn check_processes(user: User, report: &Value) {
    let facts = run_facts(user);
    let containment = facts["containment"].as_str().unwrap();
    let mechanism = facts["limits"]["mechanism"].as_str().unwrap();
    match containment {
        "cgroup" => assert_eq!(status(report, "containment"), "ok", "{report:#}"),
        "process-tree" => {
            assert_eq!(status(report, "containment"), "warn", "{report:#}");
            assert!(
                found(report, "containment").contains("process-tree"),
                "{report:#}"
            );
            assert!(
                fix(report, "containment").contains("Delegate=yes"),
                "{report:#}"
            );
        }
        other => panic!("containment {other}"),
    }
    let limits = found(report, "limits");
    match mechanism {
        "cgroup-v2" => assert!(limits.contains("cgroup v2"), "{limits}"),
        "cgroup-v1" => assert!(limits.contains("cgroup v1"), "{limits}"),
        "rlimit" => {
            assert_eq!(status(report, "limits"), "warn", "{report:#}");
            assert!(limits.contains("per process"), "{limits}");
        }
        other => panic!("mechanism {other}"),
    }
    if user == User::Nobody {
        assert_eq!(
            containment, "process-tree",
            "uid 65534 made a cgroup: {facts:#}"
        );
    }
    let require_limits = std::env::var("DSH_TEST_REQUIRE_LIMITS").is_ok_and(|v| v == "1");
    if user == User::Root && require_limits {
        assert_eq!(status(report, "containment"), "ok", "{report:#}");
        assert_eq!(status(report, "limits"), "ok", "{report:#}");
    }
}

#[test]
fn without_bubblewrap_on_the_path_it_says_so_and_how_to_install_it() {
    let dir = scratch("doctor-no-bwrap");
    let bin = path_without_bwrap(&dir);
    for user in [User::Root, User::Nobody] {
        let home = home_for(user, &dir);
        let report = Doctor {
            user,
            home: &home,
            path: Some(&bin),
            shell: "/bin/bash",
            tmpdir: None,
        }
        .report();
        assert_eq!(status(&report, "bubblewrap"), "missing", "{report:#}");
        assert!(
            found(&report, "bubblewrap").contains("not on this process's PATH"),
            "{report:#}"
        );
        assert!(
            fix(&report, "bubblewrap").contains("apt install bubblewrap"),
            "{report:#}"
        );
        let landlock = confines(user, "landlock", Some(&bin), &home);
        assert!(
            !confines(user, "bwrap", Some(&bin), &home),
            "bwrap ran without being on PATH"
        );
        let expected = if landlock { "warn" } else { "missing" };
        assert_eq!(status(&report, "sandbox"), expected, "{report:#}");
        assert!(
            fix(&report, "sandbox").contains("install bubblewrap"),
            "{report:#}"
        );
        assert!(
            !found(&report, "network").contains("bubblewrap's own"),
            "{report:#}"
        );
        assert_ne!(status(&report, "network"), "ok", "{report:#}");
        // Nor a container engine on that PATH.
        assert_eq!(status(&report, "container"), "missing", "{report:#}");
        assert!(
            fix(&report, "container").contains("apt install podman"),
            "{report:#}"
        );
    }
}

#[test]
fn a_shell_it_cannot_snapshot_is_named_with_the_fix() {
    let dir = scratch("doctor-shell");
    for user in [User::Root, User::Nobody] {
        let home = home_for(user, &dir);
        let report = Doctor {
            user,
            home: &home,
            path: None,
            shell: "/usr/bin/fish",
            tmpdir: None,
        }
        .report();
        assert_eq!(status(&report, "shell"), "warn", "{report:#}");
        let shell = found(&report, "shell");
        assert!(
            shell.contains("without the user's shell") && shell.contains("fish"),
            "{shell}"
        );
        assert!(
            fix(&report, "shell").contains("set SHELL to bash or zsh"),
            "{report:#}"
        );
        assert_eq!(status(&report, "temp"), "ok", "{report:#}");
    }
}

#[test]
fn a_temp_dir_it_cannot_write_is_blamed_on_temp_alone() {
    let dir = scratch("doctor-temp");
    // Root-owned, not writable by uid 65534; and a directory that is gone.
    let unwritable = dir.join("root-only");
    std::fs::create_dir_all(&unwritable).unwrap();
    std::fs::set_permissions(&unwritable, std::fs::Permissions::from_mode(0o755)).unwrap();
    let gone = dir.join("gone");
    for (user, tmpdir) in [(User::Root, &gone), (User::Nobody, &unwritable)] {
        let home = home_for(user, &dir);
        let report = Doctor {
            user,
            home: &home,
            path: None,
            shell: "/bin/bash",
            tmpdir: Some(tmpdir),
        }
        .report();
        assert_eq!(status(&report, "temp"), "missing", "{report:#}");
        let temp = found(&report, "temp");
        assert!(
            temp.starts_with(&format!("{} is not writable", tmpdir.display())),
            "{temp}"
        );
        assert!(fix(&report, "temp").contains("TMPDIR"), "{report:#}");
        // The other findings are not blamed for it.
        for topic in ["shell", "containment", "limits"] {
            assert_ne!(status(&report, topic), "missing", "{topic}: {report:#}");
        }
        assert!(
            !found(&report, "containment").contains("could not run"),
            "{report:#}"
        );
    }
}

#[test]
fn the_servers_own_flags_decide_what_is_examined() {
    let dir = scratch("doctor-flags");
    let home = home_for(User::Root, &dir);
    let doctor = Doctor {
        user: User::Root,
        home: &home,
        path: None,
        shell: "/bin/bash",
        tmpdir: None,
    };
    let output = doctor
        .command(true)
        .args(["--shell-snapshot", "off", "--containment", "process-tree"])
        .args(["--sandbox", "read-only", "--sandbox-backend", "landlock"])
        .output()
        .unwrap();
    let report = confined::result_json(&output);
    let shell = found(&report, "shell");
    assert!(
        shell.contains("without a snapshot") && shell.contains("--shell-snapshot off"),
        "{shell}"
    );
    assert_eq!(status(&report, "containment"), "warn", "{report:#}");
    assert!(
        found(&report, "containment").contains("process-tree"),
        "{report:#}"
    );
    if confines(User::Root, "landlock", None, &home) {
        let sandbox = found(&report, "sandbox");
        assert!(
            sandbox.contains("Landlock (--sandbox-backend landlock)"),
            "{sandbox}"
        );
    }
}

#[test]
fn completions_and_the_man_page_name_every_subcommand() {
    let bash = std::process::Command::new(confined::binary())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(bash.status.success());
    let script = String::from_utf8(bash.stdout).unwrap();
    for subcommand in ["run", "mcp", "doctor", "completions", "rules", "config"] {
        assert!(
            script.contains(subcommand),
            "{subcommand} missing from the completions"
        );
    }
    // The script is bash that parses, and completes `dsh-bash doc`.
    let completed = std::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-c"])
        .arg("source /dev/stdin; COMP_WORDS=(dsh-bash doc); COMP_CWORD=1; _dsh__bash dsh-bash doc dsh-bash; printf '%s\\n' \"${COMPREPLY[@]}\"")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    completed
        .stdin
        .as_ref()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let completed = completed.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&completed.stdout).trim(), "doctor");

    let refused = std::process::Command::new(confined::binary())
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(
        error.contains("tcsh") && error.contains("bash") && error.contains("zsh"),
        "{error}"
    );

    let man = std::process::Command::new(confined::binary())
        .arg("manpage")
        .output()
        .unwrap();
    assert!(man.status.success());
    let page = String::from_utf8(man.stdout).unwrap();
    assert!(page.contains(".TH dsh-bash 1"), "{page}");
    for subcommand in ["run", "mcp", "doctor", "completions"] {
        assert!(
            page.contains(subcommand),
            "{subcommand} missing from the man page"
        );
    }
}

/// A home whose start-up files end early: `exit 0` in the rc file.
fn home_that_exits(dir: &Path) -> PathBuf {
    let home = dir.join("home-exits");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".bash_profile"),
        "export FOO_FROM_PROFILE=1\n. ~/.bashrc\n",
    )
    .unwrap();
    std::fs::write(home.join(".bashrc"), "myfn() { :; }\nexit 0\n").unwrap();
    home
}

#[test]
fn a_hostile_environment_is_named_not_hidden() {
    let dir = scratch("doctor-hostile");
    // A bwrap that hangs on --version and passes the rest to the real one.
    let Some(real) = which("bwrap") else {
        confined::skip("doctor with a hanging bwrap: bwrap is not installed");
        return;
    };
    let bin = dir.join("bin-hanging");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("bwrap");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && exec sleep 1000\nexec {} \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin.clone())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let home = home_that_exits(&dir);
    let started = std::time::Instant::now();
    let output = as_user(User::Root, "/bin/sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 200 && exec '{}' doctor --json",
            confined::binary().display()
        ))
        .env("PATH", &path)
        .env("HOME", &home)
        // A newline and an escape in what a finding prints.
        .env(
            "SHELL",
            "/bin/bash\nok      sandbox          forged\x1b[31m",
        )
        .current_dir(&home)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let report = confined::result_json(&output);
    // Bounded: the hanging --version was cut off (5 s), not waited for.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert!(
        found(&report, "bubblewrap").contains("confines a child"),
        "{report:#}"
    );
    assert!(
        !found(&report, "bubblewrap").contains("bubblewrap 0."),
        "{report:#}"
    );
    let files = found(&report, "files");
    assert!(files.starts_with("open files: 200 "), "{files}");
    assert_eq!(status(&report, "files"), "warn", "{report:#}");
    assert!(fix(&report, "files").contains("ulimit -n"), "{report:#}");

    // The table escapes what the environment put in a finding.
    let table = as_user(User::Root, confined::binary().to_str().unwrap())
        .arg("doctor")
        .env("HOME", &home)
        .env(
            "SHELL",
            "/bin/bash\nok      sandbox          forged\x1b[31m",
        )
        .current_dir(&home)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(!table.contains('\x1b'), "{table}");
    let sandbox_lines = table
        .lines()
        .filter(|line| {
            let mut words = line.split_whitespace();
            matches!(words.next(), Some("ok" | "warn" | "missing"))
                && words.next() == Some("sandbox")
        })
        .count();
    assert_eq!(sandbox_lines, 1, "{table}");

    // Start-up files that end early leave an empty snapshot: a warning.
    let exits = Doctor {
        user: User::Root,
        home: &home,
        path: None,
        shell: "/bin/bash",
        tmpdir: None,
    }
    .report();
    assert_eq!(status(&exits, "shell"), "warn", "{exits:#}");
    assert!(
        found(&exits, "shell").contains("holds nothing"),
        "{exits:#}"
    );
}

#[test]
fn a_workdir_the_user_cannot_read_is_missing() {
    let dir = scratch("doctor-workdir");
    let locked = dir.join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o311)).unwrap();
    let home = home_for(User::Nobody, &dir);
    let output = as_user(User::Nobody, confined::binary().to_str().unwrap())
        .args(["doctor", "--json"])
        .env("HOME", &home)
        .env("SHELL", "/bin/bash")
        .current_dir(&locked)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let report = confined::result_json(&output);
    assert_eq!(status(&report, "workdir"), "missing", "{report:#}");
    assert!(
        found(&report, "workdir").contains("Permission denied"),
        "{report:#}"
    );
    assert!(fix(&report, "workdir").contains("--workdir"), "{report:#}");
    // The same user's command there fails, as the finding says.
    let run = as_user(User::Nobody, confined::binary().to_str().unwrap())
        .args(["run", "--sandbox", "read-only", "--", "true"])
        .current_dir(&locked)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!run.status.success());
}
