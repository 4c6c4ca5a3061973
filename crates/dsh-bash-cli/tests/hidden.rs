//! Credential files are hidden from confined commands: through the real
//! binary, each backend forced, as root and as uid 65534, in both confining
//! modes. A home of the test's own (never the machine's) holds a private
//! key, AWS, GitHub CLI and GnuPG credentials beside files that stay
//! readable; a command tries them directly, through a symlink and a hard
//! link it makes, through `/proc/self/root`, and (as root) through a
//! second mount of the home. `--hide` adds a path, `--unhide` gives one
//! back, the result's facts name what was hidden, and under Landlock a
//! credential inside the workspace (which it cannot carve out) is named
//! by the `hidden-paths` gap instead of claimed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::confined::{
    as_user, base, binary, chown_tree, each_backend_and_user, result_json, User, NOBODY,
};
use serde_json::Value;

const SECRET: &str = "SECRET-c0ffee";

/// A home with credentials (each holding [`SECRET`]) and ordinary files.
fn home(root: &Path, user: User) -> PathBuf {
    let home = root.join("home");
    for (file, text) in [
        (".ssh/id_ed25519", SECRET),
        (".ssh/id_ed25519.pub", "public-key"),
        (".ssh/known_hosts", "known-host"),
        (".aws/credentials", SECRET),
        (".config/gh/hosts.yml", SECRET),
        (".config/gh/config.yml", "gh-config"),
        (".gnupg/private-keys-v1.d/key.key", SECRET),
        ("notes.txt", SECRET),
        ("readme.txt", "readable"),
    ] {
        let path = home.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    // A hard link beside the way to a hidden file, made before the run.
    std::fs::hard_link(
        home.join(".aws/credentials"),
        home.join(".aws/creds_backup"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("ws")).unwrap();
    if user == User::Nobody {
        chown_tree(root, NOBODY);
    }
    home
}

/// `dsh-bash run --json` as `user` with `home` as HOME, confined by
/// `backend` in `mode`, in `root/ws`.
fn run(user: User, backend: &str, mode: &str, root: &Path, flags: &[&str], script: &str) -> Value {
    let mut command: Command = as_user(user, binary().to_str().unwrap());
    command
        .args([
            "run",
            "--json",
            "--sandbox",
            mode,
            "--sandbox-backend",
            backend,
        ])
        .arg("--workdir")
        .arg(root.join("ws"))
        .args(flags)
        .args(["--", script])
        .env("HOME", root.join("home"))
        .stdin(Stdio::null());
    let output = command.output().unwrap();
    result_json(&output)
}

fn text(result: &Value, stream: &str) -> String {
    result[stream]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn hidden(result: &Value) -> Vec<String> {
    result["sandbox"]["hidden"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn gaps(result: &Value) -> Vec<String> {
    result["sandbox"]["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn credential_files_are_hidden_and_the_rest_of_the_home_is_not() {
    each_backend_and_user("credential files hidden", |user, backend| {
        for mode in ["read-only", "workspace-write"] {
            let root = base().join(format!("hidden-{backend}-{user:?}-{mode}"));
            let home = home(&root, user);
            let result = run(
                user,
                backend,
                mode,
                &root,
                &["--hide", home.join("notes.txt").to_str().unwrap()],
                "cd ~ && cat .ssh/id_ed25519 .aws/credentials .config/gh/hosts.yml \
                 .gnupg/private-keys-v1.d/key.key notes.txt \
                 /proc/self/root$HOME/.ssh/id_ed25519; \
                 echo; cat .ssh/id_ed25519.pub .ssh/known_hosts .config/gh/config.yml readme.txt; \
                 echo; ls .ssh .gnupg/private-keys-v1.d | tr '\\n' ' '",
            );
            let (stdout, stderr) = (text(&result, "stdout"), text(&result, "stderr"));
            let what = format!("{backend} as {user:?} in {mode}: {result:#}");
            assert!(!stdout.contains(SECRET), "{what}");
            assert!(
                stdout.contains("public-keyknown-hostgh-configreadable"),
                "{what}"
            );
            assert!(stdout.contains("id_ed25519"), "names are listed: {what}");
            assert!(stderr.contains("id_ed25519"), "the refusal is said: {what}");
            // The refusal is explained as hiding, under either backend.
            let blocked = result["sandbox"]["blocked"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                blocked.iter().any(|b| b["class"] == "hidden"
                    && b["path"]
                        .as_str()
                        .is_some_and(|p| p.ends_with(".ssh/id_ed25519"))),
                "{what}"
            );
            let listed = hidden(&result);
            for file in [
                ".ssh/id_ed25519",
                ".aws/credentials",
                ".config/gh/hosts.yml",
                ".gnupg/private-keys-v1.d",
                "notes.txt",
            ] {
                let path = home.join(file).to_str().unwrap().to_owned();
                assert!(listed.contains(&path), "{file} named as hidden: {what}");
            }
            // Landlock cannot hide a control socket this machine has
            // (it does not govern connecting by path): the gap says so.
            let control_socket = dsh_sandbox::CONTROL_SOCKETS
                .iter()
                .any(|socket| std::fs::symlink_metadata(socket).is_ok());
            assert_eq!(
                gaps(&result).contains(&"hidden-paths".to_owned()),
                backend == "landlock" && control_socket,
                "{what}"
            );
        }
    });
}

#[test]
fn links_a_command_makes_lead_nowhere() {
    each_backend_and_user("links to credential files", |user, backend| {
        let root = base().join(format!("hidden-links-{backend}-{user:?}"));
        let home = home(&root, user);
        let key = home.join(".ssh/id_ed25519");
        let script = format!(
            "ln -s {key} soft; ln {key} hard 2>&1; cp {key} copy 2>&1; \
             cat soft hard copy; cat soft hard copy 2>/dev/null | grep -c {SECRET}; true",
            key = key.display()
        );
        let result = run(user, backend, "workspace-write", &root, &[], &script);
        let what = format!("{backend} as {user:?}: {result:#}");
        assert!(!text(&result, "stdout").contains(SECRET), "{what}");
        assert!(text(&result, "stdout").trim_end().ends_with('0'), "{what}");
        assert!(!root.join("ws/hard").exists(), "no hard link: {what}");
        assert!(!root.join("ws/copy").exists(), "nothing to copy: {what}");
    });
}

#[test]
fn an_operator_can_give_a_credential_back() {
    each_backend_and_user("--unhide", |user, backend| {
        let root = base().join(format!("hidden-unhide-{backend}-{user:?}"));
        let home = home(&root, user);
        let result = run(
            user,
            backend,
            "read-only",
            &root,
            &["--unhide", home.join(".ssh").to_str().unwrap()],
            "cat ~/.ssh/id_ed25519; echo; cat ~/.aws/credentials",
        );
        let what = format!("{backend} as {user:?}: {result:#}");
        assert_eq!(text(&result, "stdout").matches(SECRET).count(), 1, "{what}");
        assert!(
            text(&result, "stderr").contains(".aws/credentials"),
            "{what}"
        );
        let keys = home.join(".ssh");
        assert!(
            !hidden(&result)
                .iter()
                .any(|p| Path::new(p).starts_with(&keys)),
            "{what}"
        );
    });
}

#[test]
fn bad_hide_arguments_are_refused_before_anything_runs() {
    let marker = base().join("hidden-bad-args-ran");
    std::fs::create_dir_all(base()).unwrap();
    for (flag, value, says) in [
        ("--hide", "relative/path", "give an absolute path"),
        ("--unhide", "/etc/passwd", "is not hidden"),
    ] {
        let output = Command::new(binary())
            .args(["run", "--sandbox", "read-only", flag, value, "--", "touch"])
            .arg(&marker)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flag} {value}: {stderr}");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
        assert!(!marker.exists(), "nothing ran");
    }
}

#[test]
fn a_second_mount_of_the_home_hides_the_same_files() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return common::confined::skip("a bind mount needs root");
    }
    each_backend_and_user("a home mounted twice", |user, backend| {
        if user == User::Nobody {
            return;
        }
        let root = base().join(format!("hidden-mount-{backend}"));
        let home = home(&root, user);
        let alias = root.join("alias");
        std::fs::create_dir_all(&alias).unwrap();
        let mounted = Command::new("mount")
            .arg("--bind")
            .arg(&home)
            .arg(&alias)
            .status()
            .unwrap();
        if !mounted.success() {
            return common::confined::skip("mount --bind failed here");
        }
        let result = run(
            user,
            backend,
            "read-only",
            &root,
            &[],
            &format!(
                "cat {}/.ssh/id_ed25519 {}/readme.txt",
                alias.display(),
                alias.display()
            ),
        );
        Command::new("umount").arg(&alias).status().unwrap();
        let what = format!("{backend}: {result:#}");
        assert!(!text(&result, "stdout").contains(SECRET), "{what}");
        assert!(text(&result, "stdout").contains("readable"), "{what}");
        let alias_key = alias.join(".ssh/id_ed25519").to_str().unwrap().to_owned();
        assert!(hidden(&result).contains(&alias_key), "{what}");
    });
}

#[test]
fn landlock_names_a_credential_inside_the_workspace_instead_of_claiming_it() {
    each_backend_and_user("a credential inside the workspace", |user, backend| {
        let root = base().join(format!("hidden-inside-{backend}-{user:?}"));
        let home = home(&root, user);
        let inside = root.join("ws/.netrc");
        std::fs::write(&inside, SECRET).unwrap();
        if user == User::Nobody {
            chown_tree(&root, NOBODY);
        }
        let result = run(
            user,
            backend,
            "workspace-write",
            &root,
            &["--hide", inside.to_str().unwrap()],
            "cat .netrc; true",
        );
        let what = format!("{backend} as {user:?}: {result:#}");
        let leaked = text(&result, "stdout").contains(SECRET);
        let gap = gaps(&result).contains(&"hidden-paths".to_owned());
        let listed = hidden(&result).contains(&inside.to_str().unwrap().to_owned());
        if backend == "landlock" {
            assert!(leaked && gap && !listed, "said, not claimed: {what}");
        } else {
            assert!(!leaked && !gap && listed, "{what}");
        }
        assert!(home.join(".ssh/id_ed25519").exists());
    });
}

/// `~/.npmrc` is hidden, yet npm keeps its settings under
/// `workspace-write`: a copy without the credential lines is in the
/// command's TMPDIR and `NPM_CONFIG_USERCONFIG` names it.
#[test]
fn npm_keeps_its_registry_and_loses_its_token() {
    if Command::new("npm").arg("--version").output().is_err() {
        assert!(
            !common::confined::require_sandbox(),
            "npm is required (.ci/run installs it)"
        );
        return common::confined::skip("npm is not installed");
    }
    each_backend_and_user("~/.npmrc without its token", |user, backend| {
        let root = base().join(format!("hidden-npmrc-{backend}-{user:?}"));
        let home = home(&root, user);
        std::fs::write(
            home.join(".npmrc"),
            format!("registry=http://npm.corp.example/\n//npm.corp.example/:_authToken={SECRET}\n"),
        )
        .unwrap();
        if user == User::Nobody {
            chown_tree(&root, NOBODY);
        }
        let result = run(
            user,
            backend,
            "workspace-write",
            &root,
            &[],
            "npm config get registry; cat ~/.npmrc 2>/dev/null; cat \"$NPM_CONFIG_USERCONFIG\"",
        );
        let what = format!("{backend} as {user:?}: {result:#}");
        let stdout = text(&result, "stdout");
        assert!(stdout.starts_with("http://npm.corp.example/\n"), "{what}");
        assert!(
            stdout.contains("registry=http://npm.corp.example/"),
            "{what}"
        );
        assert!(!stdout.contains(SECRET), "{what}");
    });
}
