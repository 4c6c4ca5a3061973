//! Running `dsh-bash run` confined, as root or as an unprivileged user, for
//! the sandbox suites; skipping loudly where a backend is unusable (a
//! failure under `DSH_TEST_REQUIRE_SANDBOX=1`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const NOBODY: u32 = 65534;

/// Who runs `dsh-bash`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum User {
    Root,
    Nobody,
}

pub fn require_sandbox() -> bool {
    std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1")
}

pub fn skip(why: &str) {
    assert!(!require_sandbox(), "{why} (DSH_TEST_REQUIRE_SANDBOX=1)");
    eprintln!("SKIP {why}");
}

/// True if `dsh-bash run` confines `true` with `sandbox` (e.g. `["--sandbox",
/// "read-only"]`); otherwise skips `what` loudly, saying why.
pub fn usable_or_skip(sandbox: &[&str], what: &str) -> bool {
    usable_as_or_skip(User::Root, sandbox, what)
}

/// [`usable_or_skip`] for `dsh-bash run` as `user`.
pub fn usable_as_or_skip(user: User, sandbox: &[&str], what: &str) -> bool {
    let probe = as_user(user, binary().to_str().unwrap())
        .arg("run")
        .args(sandbox)
        .args(["--", "true"])
        .output()
        .unwrap();
    if !probe.status.success() {
        skip(&format!(
            "{what}: {} is unusable here ({})",
            sandbox.join(" "),
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    probe.status.success()
}

/// The binary, copied where every user can run it (the checkout may live
/// under a directory the unprivileged user cannot enter): one copy per
/// build, shared by every test binary of a run (a copy each would fill a
/// CI machine's disk), named by its size and time and made whole before
/// it gets its name; older builds' copies go.
pub fn binary() -> &'static Path {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let built = Path::new(env!("CARGO_BIN_EXE_dsh-bash"));
        let meta = std::fs::metadata(built).unwrap();
        let stamp = meta
            .modified()
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = root().join("dsh-test-bin");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let name = format!("dsh-bash-{}-{stamp}", meta.len());
        let copy = dir.join(&name);
        if !copy.exists() {
            let partial = dir.join(format!(".{name}.{}", std::process::id()));
            std::fs::copy(built, &partial).unwrap();
            std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::rename(&partial, &copy).unwrap();
        }
        for old in std::fs::read_dir(&dir).unwrap().flatten() {
            let stale = old
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 3600));
            if old.file_name() != name.as_str() && stale {
                let _ = std::fs::remove_file(old.path());
            }
        }
        copy
    })
}

/// Where every run's directory lives: outside /tmp and reachable by every
/// user.
fn root() -> PathBuf {
    if Path::new("/var/tmp").is_dir() {
        PathBuf::from("/var/tmp")
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    }
}

/// Where targets and workspaces live: a directory of this test process's
/// own. The first call removes the ones of test processes that are gone
/// (as root, whatever their owner or mode).
pub fn base() -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        let Ok(entries) = std::fs::read_dir(root()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("dsh-escape-"))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = Command::new("chattr")
                    .arg("-R")
                    .arg("-i")
                    .arg(entry.path())
                    .output();
                let _ = Command::new("rm").arg("-rf").arg(entry.path()).status();
            }
        }
    });
    root().join(format!("dsh-escape-{}", std::process::id()))
}

/// A command run as `user` (through `setpriv` for the unprivileged one).
pub fn as_user(user: User, program: &str) -> Command {
    match user {
        User::Root => Command::new(program),
        User::Nobody => {
            let mut command = Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(program);
            command
        }
    }
}

/// `dsh-bash run --sandbox workspace-write --sandbox-backend BACKEND
/// --workdir WS` as `user`, stdin from `/dev/null`; the caller adds its
/// flags, `--` and the command.
pub fn workspace_write(user: User, backend: &str, ws: &Path) -> Command {
    let mut run = as_user(user, binary().to_str().unwrap());
    run.args([
        "run",
        "--sandbox",
        "workspace-write",
        "--sandbox-backend",
        backend,
    ])
    .arg("--workdir")
    .arg(ws)
    .stdin(std::process::Stdio::null());
    run
}

/// Changes the owner of `path` to `uid` (and its group to the same number).
pub fn chown(path: &Path, uid: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: chown on a path we just created.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), uid, uid) }, 0);
}

/// The JSON result `dsh-bash run --json` printed; a panic shows what it
/// printed instead.
pub fn result_json(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "{err}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Every file and directory under `dir` with its content (files), sorted.
pub fn tree(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut entries = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            if meta.is_dir() {
                pending.push(path);
                entries.push((relative, None));
            } else {
                entries.push((relative, std::fs::read(&path).ok()));
            }
        }
    }
    entries.sort();
    entries
}

/// Changes the owner of `dir` and everything under it to `uid`.
pub fn chown_tree(dir: &Path, uid: u32) {
    chown(dir, uid);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            chown_tree(&path, uid);
        } else {
            chown(&path, uid);
        }
    }
}

/// A server a test started on loopback; killed when dropped.
pub struct Server {
    child: std::process::Child,
    /// The port it listens on.
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `python3 -u -c SCRIPT ARGS` whose first stdout line is its port.
pub fn serve(script: &str, args: &[&Path]) -> Server {
    use std::io::BufRead;
    let mut child = Command::new("python3")
        .arg("-u")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no port: {line:?}"));
    Server { child, port }
}

/// Runs `check` under each backend, as root and as uid 65534, where the
/// backend confines for that user (else skipped loudly, naming `what`).
pub fn each_backend_and_user(what: &str, mut check: impl FnMut(User, &str)) {
    for backend in ["bwrap", "landlock"] {
        for user in [User::Root, User::Nobody] {
            let sandbox = ["--sandbox", "read-only", "--sandbox-backend", backend];
            if usable_as_or_skip(
                user,
                &sandbox,
                &format!("{what} under {backend} as {user:?}"),
            ) {
                check(user, backend);
            }
        }
    }
}
