//! The escape suite: under each backend and each confining mode, as root and
//! as an unprivileged user, a table of attempts to get out of the sandbox,
//! each judged by what it changed outside (never merely by its exit code).
//!
//! Every attempt runs in the same hostile world, and every check applies to
//! every attempt:
//! - a target directory `$T` outside the workspace (and, in read-only, one
//!   inside it) whose entries, content, mode, owner, times, xattr and inode
//!   flags must not change; `dsh-bash` runs with `$T` as its own cwd and with
//!   two descriptors open on it (a file on fd 7, the directory on fd 8);
//! - a victim process of the same user (`$VICTIM`) that must stay alive;
//! - an abstract unix socket served outside (`$ABSTRACT`) that must never be
//!   connected;
//! - a SysV message queue outside (`$MSGQ`, mode 0666) that must stay
//!   empty;
//! - a credential in `dsh-bash`'s own environment (scrubbed from the
//!   command's) that must never appear in the command's output;
//! - the host's `/tmp` and `/dev/shm`, where no file of the attempt may
//!   appear (a private `/tmp` inside the sandbox may take it), and no
//!   private temporary directory may be left behind;
//! - no device node may appear in the workspace, and `ESCAPED` (printed by an
//!   attempt only when its forbidden step succeeded) must never appear.
//!
//! Backends that this machine cannot run are skipped loudly; with
//! `DSH_TEST_REQUIRE_SANDBOX=1` (set by CI) a skip is a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::confined::{as_user, base, binary, chown, require_sandbox, skip, User, NOBODY};

const SECRET: &str = "s3cr3t-d5h-escape-value";

/// One escape attempt: a shell command against the world described in the
/// module docs, and the backends it applies to.
struct Attempt {
    name: &'static str,
    command: &'static str,
    only: Option<&'static str>,
}

const fn attempt(name: &'static str, command: &'static str) -> Attempt {
    Attempt {
        name,
        command,
        only: None,
    }
}

const ATTEMPTS: &[Attempt] = &[
    attempt("write", "echo pwned > $T/file"),
    attempt("append", "echo pwned >> $T/file"),
    attempt("create", "echo pwned > $T/new"),
    attempt("delete", "rm -f $T/file"),
    attempt("rename out of the target", "mv $T/file $WS/../stolen-$$"),
    attempt(
        "rename into the target",
        "echo x > $WS/../in-$$; mv $WS/../in-$$ $T/new",
    ),
    attempt("mkdir", "mkdir $T/new"),
    attempt("rmdir", "rmdir $T/empty"),
    attempt("truncate", "truncate -s 0 $T/file"),
    attempt(
        "symlink in workspace to target",
        "ln -sf $T/file $WS/link-$$; echo pwned > $WS/link-$$",
    ),
    attempt(
        "hard link into workspace",
        "ln $T/file $WS/hard-$$ && echo pwned >> $WS/hard-$$",
    ),
    attempt("/proc/self/root path", "echo pwned > /proc/self/root$T/file"),
    attempt(
        "/proc/<ancestor>/root of every ancestor",
        "p=$$; while [ \"$p\" -gt 1 ] 2>/dev/null; do echo pwned > /proc/$p/root$T/file; p=$(awk '/^PPid/{print $2}' /proc/$p/status); done",
    ),
    attempt(
        "/proc/<ancestor>/cwd of every ancestor",
        "p=$$; while [ \"$p\" -gt 1 ] 2>/dev/null; do echo pwned > /proc/$p/cwd/file; p=$(awk '/^PPid/{print $2}' /proc/$p/status); done",
    ),
    attempt("inherited file descriptor", "echo pwned >&7 && echo ESCAPED"),
    attempt(
        "inherited directory descriptor",
        "$PY -c 'import os; fd = os.open(\"file\", os.O_WRONLY | os.O_APPEND, dir_fd=8); os.write(fd, b\"pwned\"); print(\"ESCAPED\")'",
    ),
    attempt("chmod", "chmod 777 $T/file"),
    attempt("chown", "chown 4242:4242 $T/file"),
    attempt("touch -d (timestamps)", "touch -d '2001-02-03 04:05:06' $T/file"),
    attempt("extended attribute", "setfattr -n user.pwned -v 1 $T/file"),
    attempt(
        "inode flags (chattr)",
        "chattr +A $T/file; chattr +i $T/file",
    ),
    attempt("mkfifo", "mkfifo $T/new"),
    attempt("mknod", "mknod $T/new p"),
    attempt(
        "block device in the workspace",
        "mknod $WS/blk-$$ b 7 0 && echo ESCAPED",
    ),
    attempt(
        "unshare -r then write",
        "unshare -r sh -c 'echo pwned > $T/file'",
    ),
    attempt(
        "signal a host process of the same user",
        "kill -TERM $VICTIM && echo ESCAPED",
    ),
    attempt(
        "abstract unix socket served outside",
        "$PY -c 'import os, socket; s = socket.socket(socket.AF_UNIX); s.connect(\"\\0\" + os.environ[\"ABSTRACT\"]); print(\"ESCAPED\")'",
    ),
    attempt(
        "SysV message queue outside",
        "$PY -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); q = libc.msgget(int(os.environ[\"MSGQ\"]), 0); buf = ctypes.create_string_buffer(b\"\\x01\" + bytes(15)); assert q >= 0 and libc.msgsnd(q, buf, 8, 0o4000) == 0; print(\"ESCAPED\")'",
    ),
    attempt(
        "capability use as root (hostname)",
        "hostname \"$(hostname)\" && echo ESCAPED",
    ),
    attempt(
        "scrubbed secret from any ancestor's environ",
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null",
    ),
    attempt(
        "host /tmp",
        "echo pwned > /tmp/$TAG",
    ),
    attempt("/dev/shm (host)", "echo pwned > /dev/shm/$TAG"),
    attempt(
        "write a host sysctl (its own value)",
        "v=$(cat /proc/sys/net/ipv4/tcp_keepalive_time); echo $v > /proc/sys/net/ipv4/tcp_keepalive_time && echo ESCAPED",
    ),
    attempt(
        "private TMPDIR made unremovable",
        "mkdir -p $TMPDIR/keep/sub && echo payload > $TMPDIR/keep/sub/f && chmod 000 $TMPDIR/keep/sub $TMPDIR/keep",
    ),
    Attempt {
        // fscrypt policy on a directory, inode generation of a file: both
        // change the disk through a read-only descriptor, which Landlock
        // does not govern; reaching the filesystem at all (any answer but
        // the filter's EPERM) counts. Under bwrap the read-only mount
        // answers EROFS, and the target snapshot is the judge.
        name: "filesystem ioctls through read-only descriptors",
        command: "$PY -c 'import errno, fcntl, os, struct\nfor path, flags, cmd, arg in [(os.environ[\"T\"], os.O_RDONLY | os.O_DIRECTORY, 0x800c6613, struct.pack(\"BBBB8s\", 0, 1, 4, 0, bytes(8))), (os.environ[\"T\"] + \"/file\", os.O_RDONLY, 0x40086604, struct.pack(\"l\", 4919))]:\n    try:\n        fcntl.ioctl(os.open(path, flags), cmd, arg)\n        print(\"ESCAPED\")\n    except OSError as e:\n        e.errno != errno.EPERM and print(\"ESCAPED\", e)'",
        only: Some("landlock"),
    },
    Attempt {
        // Under bwrap io_uring obeys the read-only mounts; under Landlock its
        // xattr operations would bypass both Landlock and the syscall
        // filter, so it must be refused outright.
        name: "io_uring (xattr route)",
        command: "$PY -c 'import ctypes; libc = ctypes.CDLL(None); p = ctypes.create_string_buffer(120); fd = libc.syscall(425, 8, p); fd >= 0 and print(\"ESCAPED\")'",
        only: Some("landlock"),
    },
];

/// Effects Landlock cannot govern inside workspace-write (it reports
/// `partial` with the `metadata` gap there, and the docs say so).
const LANDLOCK_WORKSPACE_GAPS: &[&str] = &["chmod", "touch -d (timestamps)"];

/// Everything about a target that an escape could change.
#[derive(Debug, PartialEq)]
struct Snapshot {
    entries: Vec<String>,
    content: Vec<u8>,
    mode: u32,
    uid: u32,
    mtime: i64,
    xattr: bool,
    flags: libc::c_long,
}

fn cstr(path: &Path) -> std::ffi::CString {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap()
}

fn has_xattr(path: &Path) -> bool {
    let c = cstr(path);
    // SAFETY: getxattr with a null buffer and size 0 only reports the size.
    let rc = unsafe { libc::getxattr(c.as_ptr(), c"user.pwned".as_ptr(), std::ptr::null_mut(), 0) };
    rc >= 0
}

const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;

fn inode_flags(path: &Path) -> libc::c_long {
    let Ok(file) = std::fs::File::open(path) else {
        return -1;
    };
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long into our variable.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            FS_IOC_GETFLAGS,
            &mut flags,
        )
    };
    if rc == 0 {
        flags
    } else {
        -1
    }
}

/// Clears inode flags an escape may have set, so the directory can go.
fn clear_flags(path: &Path) {
    if let Ok(file) = std::fs::File::open(path) {
        let flags: libc::c_long = 0;
        // SAFETY: FS_IOC_SETFLAGS reads one long from our variable.
        unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                FS_IOC_SETFLAGS,
                &flags,
            )
        };
    }
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
        flags: inode_flags(&file),
    }
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

/// What one `dsh-bash run --json` printed.
struct Outcome {
    status: Option<i32>,
    result: Option<serde_json::Value>,
    stderr: String,
}

impl Outcome {
    fn facts(&self) -> &serde_json::Value {
        &self.result.as_ref().expect("a result")["sandbox"]
    }

    fn stdout(&self) -> &str {
        self.result.as_ref().expect("a result")["stdout"]["text"]
            .as_str()
            .unwrap_or("")
    }
}

/// Runs `command` confined, from `cwd`, with fds 7 (append to `$T/file`) and
/// 8 (the directory `$T`) inherited, and a scrubbed secret in the host env.
fn confined(
    user: User,
    backend: &str,
    mode: &str,
    (ws, workspace, cwd): (&Path, Option<&Path>, &Path),
    env: &[(&str, String)],
    command: &str,
) -> Outcome {
    let mut run = as_user(user, "bash");
    run.arg("-c")
        .arg("exec 7>>\"$T/file\" 8<\"$T\"; exec \"$@\"")
        .arg("bash")
        .arg(binary())
        .args([
            "run",
            "--json",
            "--sandbox",
            mode,
            "--sandbox-backend",
            backend,
            "--workdir",
        ])
        .arg(ws);
    if let Some(workspace) = workspace {
        run.arg("--workspace").arg(workspace);
    }
    let output = run
        .arg("--")
        .arg(command)
        .current_dir(cwd)
        .env("T", cwd)
        .env("DSH_ESCAPE_TOKEN", SECRET)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Outcome {
        status: output.status.code(),
        result: serde_json::from_slice(&output.stdout).ok(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Whether `backend` can confine for `user` here; prints why when not.
fn usable(user: User, backend: &str, base: &Path) -> bool {
    let ws = fresh_dir(base, &format!("probe-{backend}-{user:?}"), user);
    let outcome = confined(user, backend, "read-only", (&ws, None, &ws), &[], "true");
    if outcome.result.is_some() {
        return true;
    }
    skip(&format!(
        "escape suite for {backend} as {user:?}: the backend is unusable here ({})",
        outcome.stderr.trim()
    ));
    false
}

/// The victim: a process of the same user outside the sandbox.
fn victim(user: User) -> Child {
    as_user(user, "sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// A SysV message queue with `key`, mode 0666; returns its id.
fn message_queue(key: i32) -> i32 {
    // SAFETY: msgget with integer arguments.
    let id = unsafe { libc::msgget(key, libc::IPC_CREAT | libc::IPC_EXCL | 0o666) };
    assert!(id >= 0, "msgget: {}", std::io::Error::last_os_error());
    id
}

/// Messages waiting in queue `id`, or None if it is gone.
fn queued(id: i32) -> Option<u64> {
    // SAFETY: msqid_ds is plain data; all zeroes is a valid value.
    let mut stat: libc::msqid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: IPC_STAT writes into the struct we own.
    if unsafe { libc::msgctl(id, libc::IPC_STAT, &mut stat) } != 0 {
        return None;
    }
    Some(stat.msg_qnum as u64)
}

fn remove_queue(id: i32) {
    // SAFETY: IPC_RMID on a queue this test created.
    unsafe { libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
}

fn device_nodes(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_type()
                .is_ok_and(|t| t.is_block_device() || t.is_char_device())
        })
        .map(|e| e.path())
        .collect()
}

fn python() -> Option<String> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .map(str::to_owned)
}

#[test]
fn escape_suite() {
    let base = base();
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    binary();
    let setfattr = Command::new("setfattr").arg("--version").output().is_ok();
    let python = python();
    if python.is_none() {
        skip("the python attempts: no system python3 every user can run");
    }

    let mut table = Vec::new();
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut key = 0x5d5e_0000 + (std::process::id() as i32 & 0xffff) * 64;
    for user in [User::Root, User::Nobody] {
        for backend in ["bwrap", "landlock"] {
            if !usable(user, backend, &base) {
                continue;
            }
            for mode in ["read-only", "workspace-write"] {
                let mut enforcement = None;
                for (index, attempt) in ATTEMPTS.iter().enumerate() {
                    if attempt.only.is_some_and(|only| only != backend) {
                        continue;
                    }
                    if attempt.name == "extended attribute" && !setfattr {
                        skip("the xattr attempt: setfattr (package attr) is missing");
                        continue;
                    }
                    if attempt.command.contains("$PY") && python.is_none() {
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
                        let trial = try_escape(
                            user,
                            backend,
                            mode,
                            attempt.command,
                            (&ws, &target),
                            (&python, &mut key),
                            &format!("{tag}-{where_}"),
                        );
                        ran += 1;
                        if trial.enforcement.is_some() {
                            enforcement = trial.enforcement;
                        }
                        let broken = trial.broken;
                        let blocked = broken.is_empty();
                        let expected_gap = backend == "landlock"
                            && mode == "workspace-write"
                            && where_ == "outside"
                            && LANDLOCK_WORKSPACE_GAPS.contains(&attempt.name);
                        table.push(format!(
                            "{:<44} | {:<8} | {:<15} | {:<6} | {:<9} | {}",
                            attempt.name,
                            backend,
                            mode,
                            format!("{user:?}"),
                            where_,
                            if blocked {
                                "blocked"
                            } else if expected_gap {
                                "NOT blocked (gap: metadata)"
                            } else {
                                "NOT blocked"
                            }
                        ));
                        if blocked == expected_gap {
                            failures.push(format!(
                                "{} under {backend}/{mode} as {user:?} ({where_}): blocked={blocked}, expected {}: {}",
                                attempt.name,
                                !expected_gap,
                                broken.join("; ")
                            ));
                        }
                    }
                }
                // Honest enforcement: partial (naming metadata) exactly where
                // a gap is expected, or (hidden-paths) where Landlock
                // cannot hide a control socket this machine has, full
                // everywhere else.
                let control_socket = dsh_sandbox::CONTROL_SOCKETS
                    .iter()
                    .any(|socket| std::fs::symlink_metadata(socket).is_ok());
                let expected =
                    if backend == "landlock" && (mode == "workspace-write" || control_socket) {
                        serde_json::json!("partial")
                    } else {
                        serde_json::json!("full")
                    };
                assert_eq!(
                    enforcement,
                    Some(expected),
                    "{backend}/{mode} as {user:?} enforcement"
                );
            }
            controls(user, backend, &base);
            if user == User::Root {
                harness_sees_escapes(backend, &base, &python, &mut key);
            }
        }
    }
    println!("attempt                                      | backend  | mode            | user   | target    | result");
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

/// What one attempt did to the world.
struct Trial {
    enforcement: Option<serde_json::Value>,
    broken: Vec<String>,
}

/// Runs `command` confined in a fresh hostile world (see the module docs)
/// around `target`; returns every promise it broke.
fn try_escape(
    user: User,
    backend: &str,
    mode: &str,
    command: &str,
    (ws, target): (&Path, &Path),
    (python, key): (&Option<String>, &mut i32),
    tag: &str,
) -> Trial {
    let shared_name = format!("dsh-escape-{}-{tag}", std::process::id());
    let before = snapshot(target);
    // dsh-bash's own temp dir: its private TMPDIRs go there, and must be
    // gone afterwards (a dir of this attempt's alone: other runs on the
    // machine cannot disturb the check).
    let host_tmp = ws.with_file_name(format!("hosttmp-{tag}"));
    std::fs::create_dir_all(&host_tmp).unwrap();
    if user == User::Nobody {
        chown(&host_tmp, NOBODY);
    }
    let mut victim = victim(user);
    let abstract_name = format!("dsh-escape-{}-{key}", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap())
            .unwrap();
    listener.set_nonblocking(true).unwrap();
    *key += 1;
    let queue = message_queue(*key);
    let env = [
        ("WS", ws.display().to_string()),
        ("VICTIM", victim.id().to_string()),
        ("ABSTRACT", abstract_name.clone()),
        ("MSGQ", key.to_string()),
        ("TAG", shared_name.clone()),
        ("PY", python.clone().unwrap_or_default()),
        ("TMPDIR", host_tmp.display().to_string()),
    ];
    let outcome = confined(user, backend, mode, (ws, None, target), &env, command);
    let mut enforcement = None;
    let mut broken = Vec::new();
    if outcome.result.is_none() {
        broken.push(format!(
            "no result (status {:?}): {}",
            outcome.status, outcome.stderr
        ));
    } else {
        enforcement = Some(outcome.facts()["enforcement"].clone());
        let stdout = outcome.stdout();
        if stdout.contains("ESCAPED") {
            broken.push("the forbidden step succeeded".into());
        }
        if stdout.contains(SECRET) {
            broken.push("the scrubbed secret was read back".into());
        }
    }
    let after = snapshot(target);
    if before != after {
        broken.push(format!("target changed: {before:?} -> {after:?}"));
    }
    if victim.try_wait().unwrap().is_some() {
        broken.push("the victim was killed".into());
    }
    if listener.accept().map_err(|e| e.kind()).err() != Some(ErrorKind::WouldBlock) {
        broken.push("the abstract socket was connected".into());
    }
    if queued(queue) != Some(0) {
        broken.push("the message queue was touched".into());
    }
    for shared in [Path::new("/tmp"), Path::new("/dev/shm")] {
        let path = shared.join(&shared_name);
        if path.exists() {
            broken.push(format!("{} was written", path.display()));
            let _ = std::fs::remove_file(path);
        }
    }
    // The probe verdict kept per user (`dsh-bash-probe-<uid>`) is meant to
    // stay; anything else is a leftover.
    let left: Vec<_> = std::fs::read_dir(&host_tmp)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    !p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("dsh-bash-probe-"))
                })
                .collect()
        })
        .unwrap_or_default();
    if !left.is_empty() {
        broken.push(format!("private TMPDIRs left behind: {left:?}"));
    }
    let devices = device_nodes(ws);
    if !devices.is_empty() {
        broken.push(format!("device nodes created: {devices:?}"));
    }
    let _ = victim.kill();
    let _ = victim.wait();
    remove_queue(queue);
    clear_flags(&target.join("file"));
    Trial {
        enforcement,
        broken,
    }
}

/// The harness itself can see escapes: unconfined, the same attempts break
/// exactly the promises they aim at (inherited descriptors excepted: they
/// are closed for every command).
fn harness_sees_escapes(backend: &str, base: &Path, python: &Option<String>, key: &mut i32) {
    let expect_broken = [
        "write",
        "signal a host process of the same user",
        "abstract unix socket served outside",
        "SysV message queue outside",
        "scrubbed secret from any ancestor's environ",
        "host /tmp",
    ];
    for name in expect_broken {
        let attempt = ATTEMPTS.iter().find(|a| a.name == name).unwrap();
        if attempt.command.contains("$PY") && python.is_none() {
            continue;
        }
        let tag = format!("harness-{backend}-{}", name.len());
        let ws = fresh_dir(base, &format!("ws-{tag}"), User::Root);
        let target = fresh_dir(base, &format!("out-{tag}"), User::Root);
        let trial = try_escape(
            User::Root,
            backend,
            "danger-full-access",
            attempt.command,
            (&ws, &target),
            (python, key),
            &tag,
        );
        assert!(
            !trial.broken.is_empty(),
            "unconfined, \"{name}\" should break its promise: the check cannot fail"
        );
    }
    let ws = fresh_dir(base, &format!("ws-harness-fd-{backend}"), User::Root);
    let target = fresh_dir(base, &format!("out-harness-fd-{backend}"), User::Root);
    let fd = ATTEMPTS
        .iter()
        .find(|a| a.name == "inherited file descriptor")
        .unwrap();
    let trial = try_escape(
        User::Root,
        backend,
        "danger-full-access",
        fd.command,
        (&ws, &target),
        (python, key),
        "harness-fd",
    );
    assert!(
        trial.broken.is_empty(),
        "descriptors leak even unconfined: {:?}",
        trial.broken
    );
}

/// What the modes allow still works, a forged runner error is the command's
/// own result, the workspace is reported as resolved (through a symlink),
/// and `/` is refused as a workspace.
fn controls(user: User, backend: &str, base: &Path) {
    for mode in ["read-only", "workspace-write"] {
        let tag = format!("{user:?}-{backend}-{mode}");
        let real = fresh_dir(base, &format!("ctl-{tag}"), user);
        let link = base.join(format!("ctl-link-{tag}"));
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let legit = if mode == "workspace-write" {
            "echo ok > /dev/null && ls / > /dev/null && echo ok > ./allowed && t=$(mktemp) && echo data > \"$t\" && cat \"$t\" | cat > /dev/null && mkdir -p sub/dir && echo x > sub/dir/f && rm -r sub"
        } else {
            "echo ok > /dev/null && ls / > /dev/null && cat /etc/hostname > /dev/null && echo x | cat"
        };
        let outcome = confined(user, backend, mode, (&link, Some(&link), &real), &[], legit);
        let result = outcome
            .result
            .as_ref()
            .unwrap_or_else(|| panic!("{tag}: {}", outcome.stderr));
        assert_eq!(
            result["exit_code"], 0,
            "{tag}: legitimate work failed: {result}"
        );
        assert_eq!(
            real.join("allowed").exists(),
            mode == "workspace-write",
            "{tag}: workspace write control"
        );
        let facts = outcome.facts();
        assert_eq!(facts["backend"], backend, "{tag}");
        assert_eq!(
            facts["workspace"],
            std::fs::canonicalize(&real).unwrap().display().to_string(),
            "{tag}: the workspace as resolved"
        );
        let gaps = facts["gaps"].as_array().unwrap();
        assert_eq!(
            facts["enforcement"] == "full",
            gaps.is_empty(),
            "{tag}: enforcement and gaps disagree: {facts}"
        );

        let forged = confined(
            user,
            backend,
            mode,
            (&real, None, &real),
            &[("SSH_AUTH_SOCK", "/run/user/0/agent.sock".to_owned())],
            "echo kept$SSH_AUTH_SOCK; echo 'bwrap: Creating new namespace failed: Operation not permitted' >&2; exit 1",
        );
        let result = forged.result.as_ref().unwrap_or_else(|| {
            panic!(
                "{tag}: a forged runner error became a refusal: {}",
                forged.stderr
            )
        });
        assert_eq!(result["exit_code"], 1, "{tag}: {result}");
        // The agent socket variable never reaches a confined command.
        assert_eq!(result["stdout"]["text"], "kept\n", "{tag}");
        assert_eq!(result["sandbox"]["runner_failed"], false, "{tag}");

        let root = confined(
            user,
            backend,
            mode,
            (&real, Some(Path::new("/")), &real),
            &[],
            "echo ESCAPED",
        );
        assert!(root.result.is_none(), "{tag}: / accepted as a workspace");
        assert!(
            root.stderr.contains("resolves to /"),
            "{tag}: {}",
            root.stderr
        );
    }
}
