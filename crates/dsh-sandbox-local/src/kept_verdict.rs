//! The backend verdict kept across processes, per user, so that a `dsh-bash
//! run` does not probe the sandbox again each time (the probes are most of
//! a confined whole-process run).
//!
//! Kept in the temp dir as `dsh-bash-probe-<uid>`, one line: the key and
//! the verdict. The key is everything that can change the verdict: this
//! build, the user, the configured backend, the kernel release and its
//! Landlock ABI, the user-namespace switches (`unprivileged_userns_clone`,
//! `max_user_namespaces`, AppArmor's `apparmor_restrict_unprivileged_userns`)
//! and the bwrap binary's identity (path, device, inode, size, change
//! time: a new version is a new file). A verdict whose key differs is
//! probed again; so is one after a confined command's runner failed
//! ([`forget`]).
//!
//! Why this is safe to trust: only a usable backend is kept (never
//! "unavailable"); the file must be a regular file of this user, not
//! writable by anyone else, opened without following a link; and no
//! confined command can write it (the temp dir lies outside the writable
//! workspace, which `workspace-write` requires, and bwrap gives a command a
//! `/tmp` of its own). An unconfined command could rewrite it, as it could
//! rewrite anything of the user's; the worst a forged verdict does is
//! choose Landlock where bwrap works (reported as the backend, with its
//! gaps), or name a backend that fails, which is then probed again.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::verdict::Verdict;

/// Bump when the probes change what they check.
const PROBE_VERSION: u32 = 1;

fn path() -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    dsh_bash_local::scratch::temp_dir().join(format!("dsh-bash-probe-{uid}"))
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "-".into())
}

/// Everything the verdict depends on, as one line.
pub(crate) fn key(backend: &str, bwrap: &std::path::Path, abi: i64) -> String {
    let uid = rustix::process::geteuid().as_raw();
    let bwrap_id = std::fs::metadata(bwrap).map_or_else(
        |_| "-".to_owned(),
        |m| {
            format!(
                "{}:{}:{}:{}.{}",
                m.dev(),
                m.ino(),
                m.size(),
                m.ctime(),
                m.ctime_nsec()
            )
        },
    );
    [
        format!("v{PROBE_VERSION}/{}", env!("CARGO_PKG_VERSION")),
        format!("uid={uid}"),
        format!("backend={backend}"),
        format!("kernel={}", read_trimmed("/proc/sys/kernel/osrelease")),
        format!("landlock={abi}"),
        format!(
            "userns={}",
            read_trimmed("/proc/sys/kernel/unprivileged_userns_clone")
        ),
        format!(
            "max_userns={}",
            read_trimmed("/proc/sys/user/max_user_namespaces")
        ),
        format!(
            "apparmor_userns={}",
            read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
        ),
        format!("bwrap={}={bwrap_id}", bwrap.display()),
    ]
    .join(" ")
    .replace('\n', " ")
}

/// The kept verdict for `key`, if the file is ours and names that key.
pub(crate) fn load(key: &str) -> Option<Verdict> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path())
        .ok()?;
    let meta = file.metadata().ok()?;
    let uid = rustix::process::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != uid || meta.mode() & 0o022 != 0 || meta.len() > 4096 {
        return None;
    }
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    let (kept_key, verdict) = text.trim_end().rsplit_once(" => ")?;
    if kept_key != key {
        return None;
    }
    match verdict {
        "bwrap" => Some(Verdict::Bwrap),
        other => other
            .strip_prefix("landlock ")
            .and_then(|abi| abi.parse().ok())
            .map(|abi| Verdict::Landlock { abi }),
    }
}

/// Keeps `verdict` for `key` when it names a usable backend (best effort:
/// a write that fails only means the next process probes).
pub(crate) fn store(key: &str, verdict: &Verdict) {
    let line = match verdict {
        Verdict::Bwrap => format!("{key} => bwrap\n"),
        Verdict::Landlock { abi } => format!("{key} => landlock {abi}\n"),
        Verdict::Unavailable(_) => return,
    };
    let target = path();
    let fresh = target.with_extension(format!("{}.new", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&fresh)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if written.is_err() || std::fs::rename(&fresh, &target).is_err() {
        let _ = std::fs::remove_file(&fresh);
    }
}

/// Forgets the kept verdict: the next process probes again.
pub(crate) fn forget() -> bool {
    std::fs::remove_file(path()).is_ok()
}
