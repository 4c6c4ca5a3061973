//! A session's warm sandbox under bubblewrap: the namespaces, mounts,
//! protected set, stand-ins and network namespace of a session's sandbox
//! built once, by one `bwrap` run, and kept (by descriptors on its
//! namespaces) while the session lives; each command enters them from the
//! launcher, between clone and exec, in a mount, pid, IPC and cgroup
//! namespace of its own with its own `/tmp`, `/proc`, `/dev/shm` and
//! `/dev/pts` (see `dsh_launch`'s `enter.rs` and [`dsh_sandbox::Entry`]).
//! No process stays in it: `bwrap`'s first process is asked to end once
//! its namespaces are held.
//!
//! What a command gets is what the cold path's `bwrap` gives it (the same
//! profile, [`crate::bwrap::profile`]): the same binds, the same
//! capabilities (none), the same syscall filter and Landlock scope,
//! applied to the command itself. What is built once is checked again per
//! command: a sandbox is used only for a command whose policy asks for
//! exactly what it was built for (mode, network, workspace, caches,
//! hidden and protected paths), and only while resolving the protected
//! paths gives what it gave right after the build (a new repository, a
//! changed git config, a new dot-entry: the sandbox is built again; a
//! command still running in the old one keeps it).
//!
//! The host's `/tmp` is bound at [`HOST_TMP`] in the sandbox (covered by
//! every command's own `/tmp`), so that a command's private TMPDIR and the
//! files that must stay readable, made on the host after the build, can be
//! mounted for it.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_sandbox::{
    Confinement, Entry, Exposed, HiddenPath, Invocation, NetworkPolicy, ProtectedPaths, Resolution,
    Restriction, SandboxCaches, SandboxGap, SandboxMode, SandboxPolicy,
};

use crate::bwrap::{CacheBinds, Protection, Runner};
use crate::error::SandboxError;

/// Where the host's `/tmp` is in a warm sandbox (beneath every command's
/// own `/tmp`, so no command sees it).
pub(crate) const HOST_TMP: &str = "/tmp/.dsh-bash-host-tmp";

/// What a warm sandbox was built for: a command whose policy differs in
/// any of these needs another.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Key {
    mode: SandboxMode,
    network: NetworkPolicy,
    workspace: PathBuf,
    hidden: Vec<HiddenPath>,
    protected: ProtectedPaths,
    caches: SandboxCaches,
}

impl Key {
    /// The key of `policy`, or `None` when its sandbox cannot be warm: a
    /// terminal, caches that last only as long as the command. (On an
    /// allow-list each command gets a network namespace of its own where
    /// its forwarder listens, its door being its own.)
    pub(crate) fn of(policy: &SandboxPolicy) -> Option<Key> {
        let warmable = !policy.terminal && !policy.caches.ephemeral;
        warmable.then(|| Key {
            mode: policy.mode,
            network: policy.network,
            workspace: policy.workspace.path().to_owned(),
            hidden: policy.hidden.clone(),
            protected: policy.protected.clone(),
            caches: (*policy.caches).clone(),
        })
    }
}

/// One warm sandbox, held by the provider and by every command in it
/// until the command's tree is gone (its stand-ins stay claimed as long).
#[derive(Debug)]
pub(crate) struct Warm {
    key: Key,
    /// The protected paths as resolved right after the build.
    resolution: Resolution,
    /// The namespaces to join: the user namespace, then mount, network
    /// (when cut) and UTS.
    namespaces: Arc<Vec<(OwnedFd, i32)>>,
    /// The sandbox's mounts beneath `/tmp` (a workspace or cache there),
    /// put back on top of every command's own `/tmp`, outermost first.
    beneath_tmp: Vec<PathBuf>,
    protection: Protection,
    /// The workspace's handle, what the protected paths are checked
    /// beneath.
    workspace: Arc<OwnedFd>,
    /// Each hidden path covered, and which entry it was (none: missing).
    hidden: Vec<(PathBuf, Option<(u64, u64)>)>,
}

/// Which entry `path` is (device and inode, not following a final link),
/// if any.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Drop for Warm {
    /// Dropped by the last command in it (on the blocking pool) or when
    /// the session lets it go (likewise, see [`Sandboxes::release`]).
    fn drop(&mut self) {
        self.protection.release_patiently();
    }
}

/// `path` as the warm sandbox sees it (the host's `/tmp` at [`HOST_TMP`]).
fn inside(path: &Path) -> PathBuf {
    match path.strip_prefix("/tmp") {
        Ok(rest) => Path::new(HOST_TMP).join(rest),
        Err(_) => path.to_owned(),
    }
}

/// The number after `"key":` in bubblewrap's JSON status line.
fn json_number(line: &str, key: &str) -> Option<u64> {
    let at = line.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = line[at..].trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Warm {
    /// Whether a command under `policy` may enter this sandbox: the same
    /// key, and the protected paths resolving as they did right after the
    /// build (read now: this runs off the runtime threads).
    pub(crate) fn fits(&self, key: &Key, policy: &SandboxPolicy) -> bool {
        self.has_key(key)
            && self.hidden_intact()
            && (policy.mode != SandboxMode::WorkspaceWrite
                || (dsh_protect::resolve(&policy.protected, &policy.workspace) == self.resolution
                    && self
                        .protection
                        .intact(policy.workspace.path(), &self.workspace)))
    }

    /// Whether every hidden path still is the entry that was covered (one
    /// replaced on the host, as `npm login` rewrites `~/.npmrc`, takes its
    /// cover with it).
    fn hidden_intact(&self) -> bool {
        self.hidden
            .iter()
            .all(|(path, then)| identity(path) == *then)
    }

    /// Whether this sandbox was built for `key`.
    pub(crate) fn has_key(&self, key: &Key) -> bool {
        self.key == *key
    }

    /// Builds the sandbox `policy` asks for with `bwrap`.
    pub(crate) fn build(
        bwrap: &Path,
        key: Key,
        policy: &SandboxPolicy,
    ) -> Result<Warm, SandboxError> {
        let failed = |detail: String| SandboxError::Warm { detail };
        let workspace = Arc::new(policy.workspace.handle().try_clone_to_owned().map_err(
            |cause| SandboxError::Descriptor {
                what: "workspace handle",
                cause,
            },
        )?);
        let protection = Protection::settled(policy, &workspace)?;
        let caches = CacheBinds::of(policy);
        let (status_read, status_write) =
            crate::sys::status_pipe().map_err(|cause| SandboxError::Descriptor {
                what: "status pipe",
                cause,
            })?;
        let mut warm_policy = policy.clone();
        warm_policy.private_tmp = None;
        warm_policy.readable = Vec::new();
        let mut args = crate::bwrap::profile(
            &warm_policy,
            &protection,
            &caches,
            status_write.as_raw_fd(),
            workspace.as_raw_fd(),
        );
        let tmpfs = args
            .windows(2)
            .position(|w| w[0] == "--tmpfs" && w[1] == "/tmp")
            .ok_or_else(|| failed("the profile has no /tmp of its own".into()))?;
        let host_tmp: [OsString; 3] = ["--bind".into(), "/tmp".into(), HOST_TMP.into()];
        args.splice(tmpfs + 2..tmpfs + 2, host_tmp);
        args.extend(["/bin/sh", "-c", "read -r _"].map(OsString::from));
        let keep_fds: Vec<Arc<OwnedFd>> = [Arc::new(status_write), Arc::clone(&workspace)]
            .into_iter()
            .chain(protection.sources().cloned())
            .chain(caches.sources().cloned())
            .collect();
        let exec = dsh_launch::Exec {
            program: bwrap.to_owned(),
            args,
            workdir: "/".into(),
            workdir_pinned: false,
            env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
            piped_stdin: true,
            restriction: Restriction {
                keep_fds,
                ..Restriction::default()
            },
            terminal: None,
            takes_terminal: false,
        };
        let mut launcher = dsh_launch::Launcher::default();
        let (pid, pipes) = dsh_launch::launch(&exec, None, None, &mut launcher)
            .map_err(|err| failed(format!("cannot start bwrap: {err}")))?;
        drop(exec);
        let held = Self::hold(status_read, policy.network);
        // Its stdin closed, the sandbox's only process ends, and bwrap
        // with it; its namespaces live on in what we hold.
        drop(pipes.stdin);
        let stderr = pipes.stderr.map(read_all).unwrap_or_default();
        dsh_launch::wait_pid(pid);
        let namespaces =
            held.map_err(|why| failed(format!("{why}; bwrap said: {}", stderr.trim())))?;
        let resolution = dsh_protect::resolve(&policy.protected, &policy.workspace);
        let mut beneath_tmp: Vec<PathBuf> = std::iter::once(policy.workspace.path().to_owned())
            .chain(caches.mount_points())
            .filter(|p| p.starts_with("/tmp") && !p.starts_with(HOST_TMP))
            .collect();
        beneath_tmp.sort_by_key(|p| p.components().count());
        beneath_tmp.dedup_by(|inner, outer| inner.starts_with(&*outer));
        let hidden = crate::bwrap::hidden_here(policy)
            .map(|h| (h.path.clone(), identity(&h.path)))
            .collect();
        Ok(Warm {
            key,
            resolution,
            workspace,
            hidden,
            namespaces: Arc::new(namespaces),
            beneath_tmp,
            protection,
        })
    }

    /// The namespaces of the sandbox whose status bwrap writes to
    /// `status`, opened once its first process runs, each checked against
    /// the identity bwrap reported.
    fn hold(status: OwnedFd, network: NetworkPolicy) -> Result<Vec<(OwnedFd, i32)>, String> {
        let line = status_line(status)?;
        let pid = json_number(&line, "child-pid").ok_or("bwrap never started the sandbox")?;
        let mut kinds = vec![("mnt", libc::CLONE_NEWNS), ("uts", libc::CLONE_NEWUTS)];
        if network != NetworkPolicy::On {
            kinds.insert(1, ("net", libc::CLONE_NEWNET));
        }
        let mut held = Vec::new();
        for (name, kind) in kinds {
            let path = format!("/proc/{pid}/ns/{name}");
            let file = std::fs::File::open(&path).map_err(|err| format!("{path}: {err}"))?;
            let inode =
                std::os::unix::fs::MetadataExt::ino(&file.metadata().map_err(|e| e.to_string())?);
            if json_number(&line, &format!("{name}-namespace")) != Some(inode) {
                return Err(format!(
                    "{path} is not the sandbox's (its process ended early)"
                ));
            }
            held.push((OwnedFd::from(file), kind));
        }
        let user = crate::sys::owning_user_namespace(held[0].0.as_fd())
            .map_err(|err| format!("the sandbox's user namespace: {err}"))?;
        held.insert(0, (user, libc::CLONE_NEWUSER));
        Ok(held)
    }

    /// How a command under `policy` enters this sandbox, and what it is
    /// confined by then.
    pub(crate) fn confine(
        self: &Arc<Self>,
        policy: &SandboxPolicy,
        argv: &[OsString],
        runner: Runner,
    ) -> Confinement {
        let tmp = match policy.mode {
            SandboxMode::WorkspaceWrite => policy.private_tmp.as_deref().map(inside),
            _ => None,
        };
        // The sandbox's own mounts as they are; what must stay readable
        // (made by the server in its temp dir) read-only, as bubblewrap's
        // `--ro-bind-try` gave it.
        let mut exposed: Vec<Exposed> = self
            .beneath_tmp
            .iter()
            .map(|p| Exposed {
                from: p.clone(),
                at: p.clone(),
                read_only: false,
            })
            .collect();
        exposed.extend(
            policy
                .readable
                .iter()
                .filter(|p| p.starts_with("/tmp") && p.exists())
                .map(|p| Exposed {
                    from: inside(p),
                    at: p.clone(),
                    read_only: true,
                }),
        );
        let gaps = crate::bwrap::gaps(
            policy,
            runner.scope.is_some(),
            runner.filter.is_some(),
            &self.protection,
        );
        Confinement {
            invocation: Invocation {
                argv: argv.to_vec(),
                restriction: Restriction {
                    drop_capabilities: true,
                    landlock_ruleset: runner.scope,
                    landlock_audit_name: None,
                    seccomp_filter: runner.filter,
                    keep_fds: Vec::new(),
                    enter: Some(Arc::new(Entry {
                        namespaces: Arc::clone(&self.namespaces),
                        tmp,
                        exposed,
                        own_network: policy.network == NetworkPolicy::Allow,
                    })),
                },
                environment: crate::bwrap::environment(policy),
                held: Vec::new(),
                observers: Vec::new(),
                takes_terminal: false,
            },
            backend: crate::bwrap::NAME.into(),
            enforcement: SandboxGap::enforcement(&gaps),
            gaps,
            denial_signatures: vec![
                crate::bwrap::DENIAL.into(),
                crate::bwrap::DENIAL_BUSY.into(),
            ],
            runner_report: Some(Arc::new(Entered)),
            witness: None,
            protected: self.protection.kept().to_vec(),
            hidden: crate::bwrap::hidden_here(policy)
                .map(|h| h.path.clone())
                .collect(),
            network: policy.network,
            network_log: None,
            held: vec![Arc::clone(self) as Arc<dyn dsh_sandbox::Held>],
        }
    }
}

/// The report of a command in a warm sandbox: it started whenever the
/// launcher returned it (a failure before exec is a launch error there).
/// Like bubblewrap's, its first process reports the command's death by
/// signal n as exit 128 + n, which the report says it does.
#[derive(Debug)]
struct Entered;

impl dsh_sandbox::RunnerReport for Entered {
    fn outcome(&self) -> dsh_sandbox::RunnerOutcome {
        dsh_sandbox::RunnerOutcome::Started
    }
}

/// The first line bwrap writes on its status pipe (blocking until it does
/// or exits).
fn status_line(status: OwnedFd) -> Result<String, String> {
    use std::io::BufRead;
    // The read end is non-blocking; wait for the line here.
    let file = std::fs::File::from(status);
    crate::sys::set_blocking(file.as_fd()).map_err(|err| err.to_string())?;
    let mut line = String::new();
    std::io::BufReader::new(file.take(64 * 1024))
        .read_line(&mut line)
        .map_err(|err| err.to_string())?;
    Ok(line)
}

fn read_all(fd: OwnedFd) -> String {
    let mut text = String::new();
    let _ = std::fs::File::from(fd)
        .take(64 * 1024)
        .read_to_string(&mut text);
    text
}

/// The warm sandboxes a provider keeps.
#[derive(Debug, Default)]
pub(crate) struct Sandboxes {
    kept: Vec<Arc<Warm>>,
    /// Why a build failed: commands are confined by a `bwrap` each from
    /// then on.
    refused: Option<String>,
}

impl Sandboxes {
    /// Lets go of every kept sandbox (the session ends).
    pub(crate) fn release(&mut self) -> Vec<Arc<Warm>> {
        std::mem::take(&mut self.kept)
    }
}

/// At most this many warm sandboxes are kept (the two confined modes by
/// the three network policies); the oldest goes first.
const MAX_WARM: usize = 6;

/// The kept warm sandbox that fits `policy`, or a new one built for it
/// (kept, the oldest dropped past [`MAX_WARM`]); `None` once a build
/// failed on this provider. One build at a time: the lock is held while
/// building, so concurrent first commands wait for the one sandbox.
pub(crate) fn warm_for(
    sandboxes: &std::sync::Mutex<Sandboxes>,
    bwrap: &std::path::Path,
    key: Key,
    policy: &SandboxPolicy,
) -> Option<Arc<Warm>> {
    let mut sandboxes = sandboxes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if sandboxes.refused.is_some() {
        return None;
    }
    if let Some(at) = sandboxes.kept.iter().position(|w| w.fits(&key, policy)) {
        return Some(Arc::clone(&sandboxes.kept[at]));
    }
    // What the policy's key matches but no longer fits (its protected
    // paths changed) is let go: its commands keep it while they run.
    sandboxes.kept.retain(|w| !w.has_key(&key));
    match Warm::build(bwrap, key, policy) {
        Ok(warm) => {
            let warm = Arc::new(warm);
            if sandboxes.kept.len() >= MAX_WARM {
                sandboxes.kept.remove(0);
            }
            sandboxes.kept.push(Arc::clone(&warm));
            Some(warm)
        }
        Err(err) => {
            let why = err.to_string();
            tracing::warn!(%why, "no warm sandbox: every command gets a bwrap of its own");
            sandboxes.refused = Some(why);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bwraps_status_numbers() {
        let line =
            r#"{ "child-pid": 16155, "ipc-namespace": 4026532177, "mnt-namespace": 4026532175 }"#;
        assert_eq!(json_number(line, "child-pid"), Some(16155));
        assert_eq!(json_number(line, "mnt-namespace"), Some(4026532175));
        assert_eq!(json_number(line, "net-namespace"), None);
    }

    #[test]
    fn the_hosts_tmp_is_seen_beneath_the_sandboxs_own() {
        assert_eq!(
            inside(Path::new("/tmp/x/y")),
            Path::new(HOST_TMP).join("x/y")
        );
        assert_eq!(inside(Path::new("/var/tmp/x")), Path::new("/var/tmp/x"));
        assert_eq!(inside(Path::new("/tmpfoo")), Path::new("/tmpfoo"));
    }
}
