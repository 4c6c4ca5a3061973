//! The user's own shell through the real binary, with a made-up home: the
//! snapshot of its start-up files (a fake `nvm` on `PATH`, a function, an
//! alias, glob options; a token it exports never arrives), unconfined and
//! under each sandbox backend; a `.bashrc` that hangs does not hold the
//! server up; a zsh user gets their `PATH`; `run --shell-snapshot FILE`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::confined::{base, usable_or_skip};
use common::RawServer;
use serde_json::Value;

/// A home whose start-up files set up a toolchain, a function, an alias
/// and a secret, the way `nvm`'s installer does.
fn made_up_home(name: &str, bashrc_extra: &str) -> PathBuf {
    let home = base().join(name);
    let _ = std::fs::remove_dir_all(&home);
    let bin = home.join(".nvm/versions/node/v20.0.0/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("node"), "#!/bin/sh\necho \"fake node v20 $*\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("node"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        home.join(".profile"),
        "export FROM_PROFILE=yes\n[ -n \"$BASH_VERSION\" ] && [ -f \"$HOME/.bashrc\" ] && . \"$HOME/.bashrc\"\n",
    )
    .unwrap();
    std::fs::write(
        home.join(".bashrc"),
        format!(
            "{bashrc_extra}case $- in *i*) ;; *) return;; esac\n\
             export NVM_DIR=\"$HOME/.nvm\"\n\
             export PATH=\"$NVM_DIR/versions/node/v20.0.0/bin:$PATH\"\n\
             export FAKE_TOKEN=s3cret\n\
             export DATABASE_URL=postgres://u:hunter2@db/x\n\
             greet() {{ echo \"hello, $1\"; }}\n\
             alias ll='echo listing'\n\
             alias rm='rm -i'\n\
             export LD_LIBRARY_PATH=/opt/cuda/lib64:$LD_LIBRARY_PATH\n\
             deploy() {{ export GH_TOKEN=abc123; }}\n\
             __conda_activate() {{ echo conda-activated; }}\n\
             _greet_complete() {{ :; }}\n\
             complete -F _greet_complete greet\n\
             shopt -s globstar\n"
        ),
    )
    .unwrap();
    home
}

/// `bash` through a raw MCP server, its text.
fn call(server: &mut RawServer, id: u64, command: &str) -> String {
    server.bash_text(id, command)
}

/// Calls until the snapshot is in (the function is defined), at most 60 s.
fn until_snapshot(server: &mut RawServer, probe: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in 10.. {
        let text = call(server, id, &format!("type -t {probe} || true"));
        if text.starts_with("function") {
            return id + 1;
        }
        assert!(Instant::now() < deadline, "no snapshot after 60 s: {text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    unreachable!()
}

fn initialize(server: &mut RawServer) {
    server.initialize();
}

/// `mcp ARGS` with `home` and `shell`, logging to `log`, the snapshot at
/// its default (the test harness turns it off for every other test).
fn serve_logged(home: &Path, shell: &str, args: &[&str], log: &Path) -> RawServer {
    std::fs::create_dir_all(base()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
    command
        .arg("mcp")
        .args(args)
        .env("HOME", home)
        .env("SHELL", shell)
        .env_remove("DSH_BASH_SHELL_SNAPSHOT");
    let mut server = RawServer::spawn_command(command, std::fs::File::create(log).unwrap());
    initialize(&mut server);
    server
}

fn serve(home: &Path, shell: &str, args: &[&str]) -> RawServer {
    let log = home.with_extension("log");
    serve_logged(home, shell, args, &log)
}

const CHECK: &str = "node --version; greet you; ll; echo \"token=${FAKE_TOKEN-unset} db=${DATABASE_URL-unset} profile=${FROM_PROFILE-unset}\"; shopt -q globstar && echo globstar-on; __conda_activate; echo \"rm=$(alias rm 2>/dev/null || echo plain) deploy=$(type -t deploy || echo none) completion=$(type -t _greet_complete || echo none) ld=${LD_LIBRARY_PATH-unset}\"";

fn assert_users_shell(text: &str, context: &str) {
    assert!(
        text.contains("fake node v20 --version"),
        "{context}: {text}"
    );
    assert!(text.contains("hello, you\nlisting\n"), "{context}: {text}");
    assert!(
        text.contains("token=unset db=unset profile=yes"),
        "the secrets stay out, the profile's variable comes in: {context}: {text}"
    );
    assert!(text.contains("globstar-on"), "{context}: {text}");
    // A helper function is kept; what would act before the sandbox, make
    // `rm` ask, set a credential, or serve Tab completion is not.
    assert!(
        text.contains("conda-activated\nrm=plain deploy=none completion=none ld="),
        "{context}: {text}"
    );
    assert!(!text.contains("/opt/cuda"), "{context}: {text}");
}

#[test]
fn the_snapshot_brings_the_users_toolchain_functions_and_aliases_but_not_their_secrets() {
    let home = made_up_home("snapshot-home", "");
    let mut server = serve(&home, "/bin/bash", &[]);
    let id = until_snapshot(&mut server, "greet");
    assert_users_shell(&call(&mut server, id, CHECK), "unconfined");
    // A nested shell neither re-sources it nor sees BASH_ENV.
    let nested = call(
        &mut server,
        id + 1,
        "bash -c 'echo \"env=${BASH_ENV-unset}\"; type -t greet || echo no-greet'",
    );
    assert_eq!(nested, "env=unset\nno-greet\n");
    // The script's descriptor is closed before the command runs: beside
    // stdio the shell holds only the write end of its directory report and
    // the functions' definitions (a sealed memfd its stubs load from).
    let fds = call(
        &mut server,
        id + 2,
        "ls -l /proc/$$/fd > fds.txt; tail -n +2 fds.txt | awk '{print $9, $11}'; rm -f fds.txt",
    );
    let held: Vec<&str> = fds
        .lines()
        .filter(|line| line.split(' ').next().and_then(|fd| fd.parse::<u32>().ok()) > Some(2))
        .collect();
    assert_eq!(held.len(), 2, "{fds}");
    assert_eq!(
        held.iter().filter(|l| l.contains(" pipe:")).count(),
        1,
        "{fds}"
    );
    let memfd = held
        .iter()
        .find(|l| l.contains("/memfd:"))
        .expect("the definitions");
    let fd = memfd.split(' ').next().unwrap();
    let head = call(
        &mut server,
        id + 3,
        &format!("head -c 300 /proc/$$/fd/{fd}"),
    );
    assert!(
        head.contains("greet ()") && !head.contains("BASH_ENV"),
        "the definitions, not the script: {head}"
    );
}

#[test]
fn confined_commands_get_the_snapshot_too() {
    let home = made_up_home("snapshot-home-confined", "");
    for backend in ["bwrap", "landlock"] {
        let sandbox = ["--sandbox", "workspace-write", "--sandbox-backend", backend];
        if !usable_or_skip(&sandbox, &format!("the snapshot under {backend}")) {
            continue;
        }
        let ws = base().join(format!("snapshot-ws-{backend}"));
        std::fs::create_dir_all(&ws).unwrap();
        let ws_arg = ws.display().to_string();
        let mut args = sandbox.to_vec();
        args.extend(["--workdir", &ws_arg]);
        let mut server = serve(&home, "/bin/bash", &args);
        let id = until_snapshot(&mut server, "greet");
        assert_users_shell(&call(&mut server, id, CHECK), backend);
    }
}

#[test]
fn a_hanging_bashrc_does_not_hold_the_server_up() {
    // It takes pyenv's lock first: stopped by its bound, it leaves no lock.
    let home = made_up_home(
        "snapshot-home-slow",
        "mkdir -p ~/.pyenv/shims && : > ~/.pyenv/shims/.pyenv-shim\nsleep 30\n",
    );
    let log = base().join("snapshot-slow.log");
    let mut server = serve_logged(&home, "/bin/bash", &[], &log);
    // Served at once, without the snapshot.
    let text = call(
        &mut server,
        2,
        "echo served; type -t greet || echo no-greet",
    );
    assert_eq!(text, "served\nno-greet\n");
    // Both attempts run over their 10 s and the reason is logged.
    let deadline = Instant::now() + Duration::from_secs(90);
    let reason = loop {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = logged.lines().find(|l| l.contains("no shell snapshot")) {
            break line.to_owned();
        }
        assert!(Instant::now() < deadline, "no reason logged: {logged}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        reason.contains("did not finish reading its start-up files within 10 s"),
        "{reason}"
    );
    let text = call(
        &mut server,
        3,
        "echo still-served; type -t greet || echo no-greet",
    );
    assert_eq!(text, "still-served\nno-greet\n");
    assert!(
        !home.join(".pyenv").exists(),
        "the snapshot's shell wrote the home"
    );
    let _ = server.child.kill();
    let _ = server.child.wait();
}

/// The snapshot's shell runs confined, under each backend, as root and as
/// uid 65534: start-up files that take a lock, append to a file, write a
/// history, change a mode and a time, and hide a line of code inside an
/// alias leave the home exactly as it was (contents, modes, times), while
/// what they export still makes the snapshot (and, under bubblewrap, what
/// they wrote in its in-memory /tmp).
#[test]
fn the_snapshot_leaves_the_home_exactly_as_it_was() {
    use common::confined::{each_backend_and_user, tree, NOBODY};
    each_backend_and_user("the confined snapshot", |user, backend| {
        let home = made_up_home(
            &format!("snapshot-home-untouched-{backend}-{user:?}"),
            "mkdir -p ~/.pyenv/shims && : > ~/.pyenv/shims/.pyenv-shim\n\
             echo ran >> ~/.rc-ran\n\
             echo 'ls' >> ~/.bash_history\n\
             chmod 0777 ~/.profile; touch -d 2001-01-01 ~/.profile\n\
             alias x=$'echo ghp_0123456789abcdefghijABCDEFGHIJ0123456789\\nalias y=1; echo PWNED >> \"$HOME/pwned_by_alias\" #'\n\
             echo scratch > /tmp/own && export TMP_WORKED=$(cat /tmp/own)\n",
        );
        if user == common::confined::User::Nobody {
            common::confined::chown_tree(&home, NOBODY);
        }
        let before = tree(&home);
        let stamp = |path: &Path| {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(path).unwrap();
            (meta.mode(), meta.mtime(), meta.mtime_nsec())
        };
        let profile = stamp(&home.join(".profile"));
        let mut command =
            common::confined::as_user(user, common::confined::binary().to_str().unwrap());
        command
            .args([
                "mcp",
                "--sandbox",
                "read-only",
                "--sandbox-backend",
                backend,
            ])
            .arg("--workdir")
            .arg(&home)
            .env("HOME", &home)
            .env("SHELL", "/bin/bash")
            .env_remove("DSH_BASH_SHELL_SNAPSHOT");
        let log = home.with_extension("log");
        let mut server = RawServer::spawn_command(command, std::fs::File::create(&log).unwrap());
        initialize(&mut server);
        let id = until_snapshot(&mut server, "greet");
        let text = call(
            &mut server,
            id,
            "echo tmp=${TMP_WORKED-unset}; greet me; type -t y || true",
        );
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        // Landlock's read-only mode has no writable /tmp.
        let tmp = if backend == "bwrap" {
            "scratch"
        } else {
            "unset"
        };
        let what = format!("{backend} as {user:?}");
        assert_eq!(text, format!("tmp={tmp}\nhello, me\n"), "{what}: {logged}");
        assert!(!logged.contains("runs unconfined"), "{what}: {logged}");
        let _ = server.child.kill();
        let _ = server.child.wait();
        assert_eq!(tree(&home), before, "{what}: the home changed");
        assert_eq!(
            stamp(&home.join(".profile")),
            profile,
            "{what}: a mode or time in the home changed"
        );
    });
}

#[test]
fn a_zsh_user_gets_their_path() {
    if !Path::new("/usr/bin/zsh").exists() {
        let required = std::env::var("DSH_TEST_REQUIRE_ZSH").is_ok_and(|v| v == "1");
        assert!(!required, "zsh is required (apt-get install zsh)");
        eprintln!("SKIP: zsh is not installed (apt-get install zsh)");
        return;
    }
    let home = made_up_home("snapshot-home-zsh", "");
    std::fs::write(
        home.join(".zshrc"),
        "export PATH=\"$HOME/.nvm/versions/node/v20.0.0/bin:$PATH\"\n\
         export FAKE_TOKEN=s3cret\n\
         zgreet() { echo \"zsh says ${1:-hi}\"; }\n\
         broken() { print -l *(.) }\n\
         twice() { repeat 2 echo x }\n\
         alias zl='echo zsh-listing'\n",
    )
    .unwrap();
    let log = base().join("snapshot-zsh.log");
    let mut server = serve_logged(&home, "/usr/bin/zsh", &[], &log);
    let id = until_snapshot(&mut server, "zgreet");
    let text = call(
        &mut server,
        id,
        "node --version; zgreet; zl; echo token=${FAKE_TOKEN-unset}; type -t broken twice || echo dropped",
    );
    assert_eq!(
        text,
        "fake node v20 --version\nzsh says hi\nzsh-listing\ntoken=unset\ndropped\n"
    );
    // Each function bash cannot parse is dropped by name, the rest kept.
    let logged = std::fs::read_to_string(&log).unwrap();
    for name in ["broken", "twice"] {
        assert!(
            logged.contains(&format!("function {name} (bash cannot parse it)")),
            "{logged}"
        );
    }
}

#[test]
fn run_takes_a_snapshot_only_when_asked_and_refuses_a_missing_file() {
    let home = made_up_home("snapshot-home-run", "");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
            .arg("run")
            .args(args)
            .env("HOME", &home)
            .env("SHELL", "/bin/bash")
            .env_remove("DSH_BASH_SHELL_SNAPSHOT")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let off = run(&["--json", "--", "type -t greet || echo no-greet"]);
    let result: Value = serde_json::from_slice(&off.stdout).unwrap();
    assert_eq!(result["stdout"]["text"], "no-greet\n");
    assert!(result.get("shell").is_none(), "{result}");
    let auto = run(&["--json", "--shell-snapshot", "auto", "--", CHECK]);
    let result: Value = serde_json::from_slice(&auto.stdout).unwrap();
    assert_users_shell(result["stdout"]["text"].as_str().unwrap(), "run auto");
    assert_eq!(result["shell"]["snapshot"], true, "{result}");
    let file = home.join("team.bash");
    std::fs::write(&file, "team() { echo team-fn; }\nexport TEAM_VAR=1\n").unwrap();
    let from_file = run(&[
        "--shell-snapshot",
        &file.display().to_string(),
        "--",
        "team; echo $TEAM_VAR",
    ]);
    assert_eq!(String::from_utf8_lossy(&from_file.stdout), "team-fn\n1\n");
    let missing = run(&["--shell-snapshot", "/nonexistent/x.bash", "--", "echo ran"]);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains(
            "--shell-snapshot /nonexistent/x.bash: no such file; expected auto, off or a bash file"
        ),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&missing.stdout).contains("ran"));
}

/// A plain `mcp` (no snapshot) over `workdir` with `args`.
fn serve_in(workdir: &Path, args: &[&str]) -> RawServer {
    let workdir = workdir.display().to_string();
    let mut all = vec!["--workdir", workdir.as_str()];
    all.extend_from_slice(args);
    let mut server = RawServer::spawn_in(&all, &[]);
    initialize(&mut server);
    server
}

fn workspace(name: &str) -> PathBuf {
    let ws = base().join(name);
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
    ws.canonicalize().unwrap()
}

#[test]
fn the_working_directory_follows_cd_learned_from_the_shell() {
    let ws = workspace("cwd-plain");
    let mut server = serve_in(&ws, &[]);
    let w = ws.display();
    assert_eq!(
        call(&mut server, 2, "cd sub"),
        format!("(no output)\n[cwd: {w}/sub]")
    );
    assert_eq!(call(&mut server, 3, "pwd"), format!("{w}/sub\n"));
    // Where it is now is where the next one starts.
    assert_eq!(
        call(&mut server, 4, "cd deeper && pwd"),
        format!("{w}/sub/deeper\n[cwd: {w}/sub/deeper]")
    );
    // Printing what looks like our report, or writing to a descriptor,
    // does not move it: only the shell's own directory at exit counts.
    let forged = call(
        &mut server,
        5,
        "echo '[cwd: /etc]'; printf '/etc\\0' >&2; cd ..",
    );
    assert!(forged.ends_with(&format!("[cwd: {w}/sub]")), "{forged}");
    // The exit code survives the report; a killed shell reports nothing.
    assert!(call(&mut server, 6, "cd deeper; exit 3")
        .ends_with(&format!("[exit code: 3]\n[cwd: {w}/sub/deeper]")));
    let killed = call(&mut server, 7, "cd ..; kill -9 $$");
    assert!(!killed.contains("[cwd:"), "{killed}");
    assert_eq!(call(&mut server, 8, "pwd"), format!("{w}/sub/deeper\n"));
    // The directory it was in is gone: back where the session began.
    std::fs::remove_dir(ws.join("sub/deeper")).unwrap();
    assert_eq!(
        call(&mut server, 9, "pwd"),
        format!("{w}\n[cwd: {w}/sub/deeper is gone; this call ran in {w}]")
    );
}

#[test]
fn a_cd_out_of_the_workspace_does_not_carry_the_next_call_out() {
    for backend in ["bwrap", "landlock"] {
        let sandbox = ["--sandbox", "workspace-write", "--sandbox-backend", backend];
        if !usable_or_skip(&sandbox, &format!("cwd under {backend}")) {
            continue;
        }
        let ws = workspace(&format!("cwd-ws-{backend}"));
        let mut server = serve_in(&ws, &sandbox);
        let w = ws.display();
        assert_eq!(
            call(&mut server, 2, "cd sub"),
            format!("(no output)\n[cwd: {w}/sub]")
        );
        let out = call(&mut server, 3, "cd /");
        assert_eq!(
            out,
            format!("(no output)\n[cwd: the command ended in /, outside the workspace {w}; the next call starts in {w}]"),
            "{backend}"
        );
        assert_eq!(call(&mut server, 4, "pwd"), format!("{w}\n"), "{backend}");
    }
}

#[test]
fn no_persist_cwd_starts_every_call_where_the_session_began() {
    let ws = workspace("cwd-off");
    let mut server = serve_in(&ws, &["--no-persist-cwd"]);
    assert_eq!(call(&mut server, 2, "cd sub"), "(no output)");
    assert_eq!(call(&mut server, 3, "pwd"), format!("{}\n", ws.display()));
}
