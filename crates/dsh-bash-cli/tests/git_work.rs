//! git under `workspace-write`, through the real binary, each backend
//! forced, as root and as uid 65534: `add`, `commit`, `branch`, `checkout`,
//! `merge`, `stash`, `tag` and `rebase` in the workspace's repository
//! succeed; planting what git runs on the host (a hook, `core.fsmonitor`,
//! `core.hooksPath`, a `config.worktree`, an attributes filter, a
//! submodule's config, a `commondir` pointing at a config of the
//! command's) is refused under bubblewrap, and nothing runs when the host
//! then runs `git status` and `git commit`; under Landlock, which cannot
//! keep a read-only hole in a writable tree, the result says `partial` and
//! names the `protected-paths` gap.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::confined::{
    as_user, base, binary, chown_tree, each_backend_and_user, result_json, User, NOBODY,
};
use serde_json::Value;

/// `git args` in `at` on the host, as a committer, with no system config
/// and `home` as HOME; its output.
fn git(at: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    git_as(User::Root, at, home, args)
}

/// [`git`] as `user` (the owner of the repository: git refuses another's).
fn git_as(user: User, at: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    let output = as_user(user, "git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args([
            "-c",
            "protocol.file.allow=always",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(at)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    output
}

/// What git does every day, in one script the command runs.
const OPERATIONS: &str = "set -e
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com
echo b > b; git add b; git commit -qm two
git branch feature; git checkout -q feature; echo c > c; git add c; git commit -qm three
git checkout -q main; git merge -q --no-edit feature
echo d >> README; git stash -q; git stash pop -q; git commit -qam four
git tag v1
git checkout -q -b other HEAD~2; echo e > e; git add e; git commit -qm five; git rebase -q main
git checkout -q main
echo OPERATIONS-OK
";

/// A workspace with a repository (one commit, a submodule `lib` cloned
/// from a repository beside it) and a home of its own, owned by `user`.
struct Repo {
    home: PathBuf,
    ws: PathBuf,
    /// Created by anything a plant makes the host run.
    marker: PathBuf,
}

impl Repo {
    fn new(user: User, name: &str) -> Repo {
        let top = base().join(name);
        let _ = std::fs::remove_dir_all(&top);
        let home = top.join("home");
        let ws = top.join("ws");
        let origin = top.join("lib-origin");
        for dir in [&home, &ws, &origin] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(origin.join("lib.txt"), "lib\n").unwrap();
        git(&origin, &home, &["init", "-q"]);
        git(&origin, &home, &["add", "lib.txt"]);
        git(&origin, &home, &["commit", "-qm", "lib"]);
        std::fs::write(ws.join("README"), "hello\n").unwrap();
        std::fs::write(ws.join("ops.sh"), OPERATIONS).unwrap();
        git(&ws, &home, &["init", "-q"]);
        std::fs::write(ws.join(".git/info/exclude"), "ops.sh\n").unwrap();
        git(&ws, &home, &["add", "README"]);
        git(&ws, &home, &["commit", "-qm", "one"]);
        git(
            &ws,
            &home,
            &["submodule", "add", "-q", "../lib-origin", "lib"],
        );
        // A second submodule, listed but not checked out yet (as after a
        // clone without --recursive).
        for (key, value) in [("path", "lib2"), ("url", "../lib-origin")] {
            let key = format!("submodule.lib2.{key}");
            git(&ws, &home, &["config", "-f", ".gitmodules", &key, value]);
        }
        let head = git(&origin, &home, &["rev-parse", "HEAD"]);
        let link = format!(
            "160000,{},lib2",
            String::from_utf8_lossy(&head.stdout).trim()
        );
        git(&ws, &home, &["update-index", "--add", "--cacheinfo", &link]);
        git(&ws, &home, &["add", ".gitmodules"]);
        git(&ws, &home, &["commit", "-qm", "lib"]);
        if user == User::Nobody {
            chown_tree(&top, NOBODY);
        }
        Repo {
            marker: top.join("ran-on-the-host"),
            home,
            ws,
        }
    }

    fn run(&self, user: User, backend: &str, command: &str) -> Value {
        let output = as_user(user, "timeout")
            .args(["-s", "KILL", "120"])
            .arg(binary())
            .args(["run", "--json", "--sandbox", "workspace-write"])
            .args(["--sandbox-backend", backend, "--workdir"])
            .arg(&self.ws)
            .args(["--", command])
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        result_json(&output)
    }
}

/// Attempts to plant what git runs on the host; `MARKER` is replaced by
/// the file the payload would create.
const PLANTS: &[(&str, &str)] = &[
    (
        "a hook",
        "printf '#!/bin/sh\\ntouch MARKER\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    ),
    ("core.fsmonitor", "git config core.fsmonitor 'touch MARKER; echo'"),
    (
        "core.hooksPath",
        "mkdir -p evil-hooks && printf '#!/bin/sh\\ntouch MARKER\\n' > evil-hooks/pre-commit && chmod +x evil-hooks/pre-commit && git config core.hooksPath evil-hooks",
    ),
    (
        "config by hand",
        "printf '[core]\\n\\tfsmonitor = touch MARKER; echo\\n' >> .git/config",
    ),
    (
        "a config.worktree",
        "printf '[core]\\n\\tfsmonitor = touch MARKER; echo\\n' > .git/config.worktree",
    ),
    (
        "an attributes filter",
        "mkdir -p .git/info && printf '* filter=evil\\n' > .git/info/attributes",
    ),
    (
        "a submodule's config",
        "git -C lib config core.fsmonitor 'touch MARKER; echo'",
    ),
    (
        "a submodule's hook",
        "printf '#!/bin/sh\\ntouch MARKER\\n' > .git/modules/lib/hooks/pre-commit && chmod +x .git/modules/lib/hooks/pre-commit",
    ),
    (
        "a commondir pointing at a config of the command's",
        "mkdir -p evil && printf '[core]\\n\\tfsmonitor = touch MARKER; echo\\n' > evil/config && echo ../evil > .git/commondir",
    ),
    (
        "the git directory of a submodule not checked out yet",
        "git clone -q --bare ../lib-origin .git/modules/lib2 && git -C .git/modules/lib2 config core.fsmonitor 'touch MARKER; echo'",
    ),
    (
        "a linked worktree whose commondir names a config of the command's",
        "git worktree add -q wt2 && mkdir -p evil3 && printf '[core]\\n\\tfsmonitor = touch MARKER; echo\\n' > evil3/config && echo ../../../evil3 > .git/worktrees/wt2/commondir",
    ),
    (
        "the git directory moved away and replaced",
        "mv .git .git-old && mkdir .git",
    ),
];

fn check(user: User, backend: &str) {
    let repo = Repo::new(user, &format!("git-{backend}-{user:?}"));
    let context = format!("{backend} as {user:?}");
    let done = repo.run(user, backend, "bash ops.sh");
    assert_eq!(done["exit_code"], 0, "{context}: {done:#}");
    assert!(
        done["stdout"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("OPERATIONS-OK"),
        "{context}: {done:#}"
    );
    let log = git_as(user, &repo.ws, &repo.home, &["log", "--oneline"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).lines().count(),
        5,
        "the commits are the host's: {context}"
    );
    git_as(
        user,
        &repo.ws,
        &repo.home,
        &["rev-parse", "--verify", "-q", "refs/tags/v1"],
    );
    // `other` was rebased onto main.
    git_as(
        user,
        &repo.ws,
        &repo.home,
        &["merge-base", "--is-ancestor", "main", "other"],
    );
    let marker = repo.marker.display().to_string();
    for (what, plant) in PLANTS {
        let result = repo.run(user, backend, &plant.replace("MARKER", &marker));
        let context = format!("{what} under {context}: {result:#}");
        if backend == "landlock" {
            // Landlock cannot keep them: the result says so.
            assert_eq!(result["sandbox"]["enforcement"], "partial", "{context}");
            assert!(
                result["sandbox"]["gaps"]
                    .to_string()
                    .contains("protected-paths"),
                "{context}"
            );
            continue;
        }
        assert_ne!(result["exit_code"], 0, "refused: {context}");
        assert!(
            !repo.ws.join(".git/commondir").exists(),
            "the stand-in is gone after the command: {context}"
        );
    }
    if backend == "landlock" {
        return;
    }
    // A repository the command made and added as a gitlink: the write
    // cannot be refused (commits need the index), so the result names it,
    // and undoing it as the line says leaves nothing for the host to run.
    let identity = "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e";
    // Made at `dir` (relative to the workspace), added to the index of
    // the repository at `into`, and `then` something more.
    let plant = |dir: &str, into: &str, then: &str| {
        format!(
            "{identity}; mkdir {dir} && cd {dir} && git init -q && echo e > e && git add e && git commit -qm e && \
             git config core.fsmonitor 'touch {marker}; echo' && cd - >/dev/null && \
             git -C {into} add $(realpath --relative-to={into} {dir}) 2>/dev/null && {then} echo added"
        )
    };
    // Each undone as the result's line says.
    for (dir, into, then, undo) in [
        ("nested", ".", "", "git -C . rm -r -f -q --cached -- nested"),
        // Hidden in a split index's shared part.
        (
            "nested2",
            ".",
            "git update-index --split-index &&",
            "git -C . rm -r -f -q --cached -- nested2",
        ),
        // Committed: `git reset` would put it back from the commit.
        (
            "nested3",
            ".",
            "git commit -qm planted &&",
            "git -C . rm -r -f -q --cached -- nested3 && git commit -qm undone",
        ),
        // Added inside the submodule's own index.
        (
            "lib/inner",
            "lib",
            "",
            "git -C lib rm -r -f -q --cached -- inner",
        ),
    ] {
        let planted = repo.run(user, backend, &plant(dir, into, then));
        assert_eq!(
            planted["sandbox"]["planted"],
            serde_json::json!([repo.ws.join(dir)]),
            "{dir} under {context}: {planted:#}"
        );
        assert!(
            planted["stdout"]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("added"),
            "{dir} under {context}: {planted:#}"
        );
        let undone = repo.run(user, backend, &format!("{identity}; {undo} && echo undone"));
        assert_eq!(undone["exit_code"], 0, "{context}: {undone:#}");
        assert!(
            undone["sandbox"]["planted"].is_null(),
            "{context}: {undone:#}"
        );
    }
    // Breaking the repository's `.git` so git takes the root for a bare
    // repository (a `HEAD`, `objects`, `refs` and a `config` of its own
    // there): the root's `HEAD` is kept, so the root never becomes one.
    let bare = repo.run(
        user,
        backend,
        &format!(
            "echo garbage > .git/HEAD; mkdir -p objects refs/heads; printf '[core]\\n\\tpager = touch {marker}; cat\\n' > config; echo 'ref: refs/heads/main' > HEAD"
        ),
    );
    assert_ne!(bare["exit_code"], 0, "{context}: {bare:#}");
    assert!(!repo.ws.join("HEAD").exists(), "{context}: {bare:#}");
    std::fs::write(repo.ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    // The host's own git, in the repository and its submodule: nothing
    // planted runs.
    git_as(user, &repo.ws, &repo.home, &["status"]);
    git_as(
        user,
        &repo.ws,
        &repo.home,
        &["commit", "-q", "--allow-empty", "-m", "host"],
    );
    git_as(user, &repo.ws.join("lib"), &repo.home, &["status"]);
    let update = [
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "update",
        "-q",
        "--init",
        "lib2",
    ];
    git_as(user, &repo.ws, &repo.home, &update);
    git_as(user, &repo.ws.join("lib2"), &repo.home, &["status"]);
    git_as(
        user,
        &repo.ws.join("lib"),
        &repo.home,
        &["commit", "-q", "--allow-empty", "-m", "host"],
    );
    assert!(
        !repo.marker.exists(),
        "a plant ran on the host under {context}"
    );
    // The control: the same hook planted unconfined does run on the host's
    // next commit (so the payloads above would have shown).
    let hook = repo.ws.join(".git/hooks/pre-commit");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {marker}\n")).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    if user == User::Nobody {
        common::confined::chown(&hook, NOBODY);
    }
    git_as(
        user,
        &repo.ws,
        &repo.home,
        &["commit", "-q", "--allow-empty", "-m", "control"],
    );
    assert!(repo.marker.exists(), "the control hook ran: {context}");
}

#[test]
fn git_works_and_what_git_runs_stays_protected() {
    each_backend_and_user("git", check);
}
