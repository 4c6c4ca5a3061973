//! The escape suite: under each backend and each confining mode, as root and
//! as an unprivileged user, attempts to change the filesystem outside what
//! the mode allows, checking afterwards that the target is unchanged (not
//! merely that the command failed).
//!
//! Backends that this machine cannot run are skipped loudly; with
//! `DSH_TEST_REQUIRE_SANDBOX=1` (set by CI) a skip is a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const NOBODY: u32 = 65534;

/// Who runs `dsh-bash`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum User {
    Root,
    Nobody,
}

/// One escape attempt: a shell command against `$T` (the target directory)
/// and `$WS` (the workspace), and the name of the check that proves the
/// target is unchanged.
struct Attempt {
    name: &'static str,
    command: &'static str,
}

const ATTEMPTS: &[Attempt] = &[
    Attempt {
        name: "write",
        command: "echo pwned > $T/file",
    },
    Attempt {
        name: "append",
        command: "echo pwned >> $T/file",
    },
    Attempt {
        name: "create",
        command: "echo pwned > $T/new",
    },
    Attempt {
        name: "delete",
        command: "rm -f $T/file",
    },
    Attempt {
        name: "rename out of the target",
        command: "mv $T/file $WS/../stolen-$$",
    },
    Attempt {
        name: "rename into the target",
        command: "echo x > $WS/../in-$$; mv $WS/../in-$$ $T/new",
    },
    Attempt {
        name: "mkdir",
        command: "mkdir $T/new",
    },
    Attempt {
        name: "rmdir",
        command: "rmdir $T/empty",
    },
    Attempt {
        name: "truncate",
        command: "truncate -s 0 $T/file",
    },
    Attempt {
        name: "symlink in workspace to target",
        command: "ln -sf $T/file $WS/link-$$; echo pwned > $WS/link-$$",
    },
    Attempt {
        name: "hard link into workspace",
        command: "ln $T/file $WS/hard-$$ && echo pwned >> $WS/hard-$$",
    },
    Attempt {
        name: "/proc/self/root path",
        command: "echo pwned > /proc/self/root$T/file",
    },
    Attempt {
        name: "/proc/<pid>/cwd path",
        command: "cd $T && echo pwned > /proc/$$/cwd/file",
    },
    Attempt {
        name: "chmod",
        command: "chmod 777 $T/file",
    },
    Attempt {
        name: "chown",
        command: "chown 4242:4242 $T/file",
    },
    Attempt {
        name: "touch -d (timestamps)",
        command: "touch -d '2001-02-03 04:05:06' $T/file",
    },
    Attempt {
        name: "extended attribute",
        command: "setfattr -n user.pwned -v 1 $T/file",
    },
    Attempt {
        name: "mkfifo",
        command: "mkfifo $T/new",
    },
    Attempt {
        name: "mknod",
        command: "mknod $T/new p",
    },
    Attempt {
        name: "unshare -r then write",
        command: "unshare -r sh -c 'echo pwned > $T/file'",
    },
];

/// Effects Landlock cannot govern inside workspace-write (it reports
/// `partial` there and the docs list exactly these).
const LANDLOCK_WORKSPACE_GAPS: &[&str] = &[
    "chmod",
    "chown",
    "touch -d (timestamps)",
    "extended attribute",
];

/// Everything about a target file that an escape could change.
#[derive(Debug, PartialEq)]
struct Snapshot {
    entries: Vec<String>,
    content: Vec<u8>,
    mode: u32,
    uid: u32,
    mtime: i64,
    xattr: bool,
}

fn has_xattr(path: &Path) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let name = c"user.pwned";
    // SAFETY: getxattr with a null buffer and size 0 only reports the size.
    let rc = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    rc >= 0
}

fn snapshot(dir: &Path) -> Snapshot {
    let mut entries: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let file = dir.join("file");
    let meta = std::fs::symlink_metadata(&file).ok();
    Snapshot {
        entries,
        content: std::fs::read(&file).unwrap_or_default(),
        mode: meta.as_ref().map_or(0, |m| m.permissions().mode()),
        uid: meta.as_ref().map_or(0, MetadataExt::uid),
        mtime: meta.as_ref().map_or(0, MetadataExt::mtime),
        xattr: has_xattr(&file),
    }
}

fn chown(path: &Path, uid: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: chown on a path we just created.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), uid, uid) }, 0);
}

/// A fresh target directory with a file and an empty directory, owned by
/// `user`.
fn fresh_dir(base: &Path, name: &str, user: User) -> PathBuf {
    let dir = base.join(name);
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    std::fs::write(dir.join("file"), "original\n").unwrap();
    std::fs::set_permissions(dir.join("file"), std::fs::Permissions::from_mode(0o644)).unwrap();
    if user == User::Nobody {
        for path in [dir.clone(), dir.join("empty"), dir.join("file")] {
            chown(&path, NOBODY);
        }
    }
    dir
}

fn require_sandbox() -> bool {
    std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1")
}

/// The binary, copied where every user can run it (the checkout may live
/// under a directory the unprivileged user cannot enter).
fn binary() -> &'static Path {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let dir = base().join("bin");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = dir.join("dsh-bash");
        std::fs::copy(env!("CARGO_BIN_EXE_dsh-bash"), &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        copy
    })
}

/// Where targets and workspaces live: outside /tmp (which workspace-write
/// may use) and reachable by every user.
fn base() -> PathBuf {
    let root = if Path::new("/var/tmp").is_dir() {
        PathBuf::from("/var/tmp")
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    };
    root.join(format!("dsh-escape-{}", std::process::id()))
}

fn dsh_bash(user: User) -> Command {
    let bin = binary();
    match user {
        User::Root => Command::new(bin),
        User::Nobody => {
            let mut command = Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(bin);
            command
        }
    }
}

/// Runs `command` confined; returns the sandbox facts (None = refused).
fn confined(
    user: User,
    backend: &str,
    mode: &str,
    ws: &Path,
    env: &[(&str, &Path)],
    command: &str,
) -> Option<serde_json::Value> {
    let output = dsh_bash(user)
        .args([
            "run",
            "--json",
            "--sandbox",
            mode,
            "--sandbox-backend",
            backend,
            "--workdir",
        ])
        .arg(ws)
        .arg("--")
        .arg(command)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .unwrap();
    if output.status.code() == Some(125) {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("SANDBOX") || stderr.contains("sandbox"),
            "{stderr}"
        );
        return None;
    }
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "dsh-bash as {user:?} printed no result ({err}); status {:?}, stderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    });
    Some(result["sandbox"].clone())
}

/// Whether `backend` can confine for `user` here; prints why when not.
fn usable(user: User, backend: &str, base: &Path) -> bool {
    let ws = fresh_dir(base, &format!("probe-{backend}-{user:?}"), user);
    match confined(user, backend, "read-only", &ws, &[], "true") {
        Some(_) => true,
        None => {
            let why = format!("SKIP escape suite for {backend} as {user:?}: the backend is unusable on this machine");
            assert!(!require_sandbox(), "{why} (DSH_TEST_REQUIRE_SANDBOX=1)");
            eprintln!("{why}");
            false
        }
    }
}

#[test]
fn escape_suite() {
    let base = base();
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    binary();
    let setfattr = Command::new("setfattr").arg("--version").output().is_ok();

    let mut table = Vec::new();
    let mut failures = Vec::new();
    let mut ran = 0;
    for user in [User::Root, User::Nobody] {
        for backend in ["bwrap", "landlock"] {
            if !usable(user, backend, &base) {
                continue;
            }
            for mode in ["read-only", "workspace-write"] {
                let mut enforcement = String::new();
                for (index, attempt) in ATTEMPTS.iter().enumerate() {
                    if attempt.name == "extended attribute" && !setfattr {
                        assert!(!require_sandbox(), "setfattr (package attr) is missing");
                        eprintln!("SKIP {}: setfattr is not installed", attempt.name);
                        continue;
                    }
                    let tag = format!("{user:?}-{backend}-{mode}-{index}");
                    let ws = fresh_dir(&base, &format!("ws-{tag}"), user);
                    // Targets: outside the workspace always; in read-only the
                    // workspace itself must not change either.
                    let outside = fresh_dir(&base, &format!("out-{tag}"), user);
                    let inside = fresh_dir(&ws, "inside", user);
                    let mut targets = vec![("outside", outside)];
                    if mode == "read-only" {
                        targets.push(("workspace", inside));
                    }
                    for (where_, target) in targets {
                        let before = snapshot(&target);
                        let facts = confined(
                            user,
                            backend,
                            mode,
                            &ws,
                            &[("T", &target), ("WS", &ws)],
                            attempt.command,
                        )
                        .expect("the backend was usable a moment ago");
                        enforcement = facts["enforcement"].as_str().unwrap_or("?").to_owned();
                        ran += 1;
                        let after = snapshot(&target);
                        let blocked = before == after;
                        let shm = Path::new("/dev/shm").join(format!("dsh-escape-{tag}"));
                        // An unprivileged user cannot give files away anyway.
                        let expected_gap = backend == "landlock"
                            && mode == "workspace-write"
                            && LANDLOCK_WORKSPACE_GAPS.contains(&attempt.name)
                            && !(attempt.name == "chown" && user == User::Nobody);
                        table.push(format!(
                            "{:<34} | {:<8} | {:<15} | {:<6} | {:<9} | {}",
                            attempt.name,
                            backend,
                            mode,
                            format!("{user:?}"),
                            where_,
                            if blocked { "blocked" } else { "NOT blocked" }
                        ));
                        let _ = std::fs::remove_file(shm);
                        if blocked == expected_gap {
                            failures.push(format!(
                                "{} under {backend}/{mode} as {user:?} ({where_}): blocked={blocked}, expected {}\n  before {before:?}\n  after  {after:?}",
                                attempt.name, !expected_gap
                            ));
                        }
                    }
                }
                // Honest enforcement: partial exactly where a gap is expected.
                let expected = if backend == "landlock" && mode == "workspace-write" {
                    "partial"
                } else {
                    "full"
                };
                assert_eq!(enforcement, expected, "{backend}/{mode} enforcement");
            }
            // /dev/shm: the host's shared memory must stay untouched.
            for mode in ["read-only", "workspace-write"] {
                let ws = fresh_dir(&base, &format!("ws-shm-{user:?}-{backend}-{mode}"), user);
                let name = format!(
                    "dsh-escape-{}-{user:?}-{backend}-{mode}",
                    std::process::id()
                );
                let path = Path::new("/dev/shm").join(&name);
                confined(
                    user,
                    backend,
                    mode,
                    &ws,
                    &[],
                    &format!("echo pwned > /dev/shm/{name}"),
                )
                .unwrap();
                let blocked = !path.exists();
                table.push(format!(
                    "{:<34} | {:<8} | {:<15} | {:<6} | {:<9} | {}",
                    "/dev/shm",
                    backend,
                    mode,
                    format!("{user:?}"),
                    "host",
                    if blocked { "blocked" } else { "NOT blocked" }
                ));
                let _ = std::fs::remove_file(&path);
                if !blocked {
                    failures.push(format!("/dev/shm under {backend}/{mode} as {user:?}"));
                }
                // Control: what the mode allows still works.
                let control = fresh_dir(&base, &format!("ctl-{user:?}-{backend}-{mode}"), user);
                let facts = confined(
                    user,
                    backend,
                    mode,
                    &control,
                    &[],
                    "echo ok > /dev/null && ls / >/dev/null && echo ok > ./allowed",
                )
                .unwrap();
                let wrote = control.join("allowed").exists();
                assert_eq!(
                    wrote,
                    mode == "workspace-write",
                    "{backend}/{mode} as {user:?}: workspace write control ({facts})"
                );
            }
        }
    }
    println!("attempt                            | backend  | mode            | user   | target    | result");
    for row in &table {
        println!("{row}");
    }
    let _ = std::fs::remove_dir_all(&base);
    assert!(
        ran > 0 || !require_sandbox(),
        "every sandbox backend was skipped"
    );
    if ran == 0 {
        eprintln!("SKIP: no sandbox backend is usable here; the escape suite did not run");
    }
    assert!(failures.is_empty(), "escapes:\n{}", failures.join("\n"));
}
