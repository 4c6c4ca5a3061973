//! The bubblewrap backend and the bwrap-shaped operator runner.
//!
//! The profile (both modes): a user namespace even as root (`--unshare-user`,
//! so root inside holds no capability on the host, and `--cap-drop ALL`
//! inside), its own pid namespace and `/proc` (no process outside is
//! visible, so none can be signalled, traced or read through
//! `/proc/<pid>`), its own IPC, UTS and (where possible) cgroup namespaces,
//! a new session, death with its parent, a minimal `/dev`, every bind
//! `nodev`, the host read-only, `/proc/sys`, `/proc/sysrq-trigger` and
//! `/proc/fs` read-only over the fresh `/proc` (root inside is still uid 0
//! to sysctl permission checks), and a private `/tmp`:
//!
//! - read-only: `--ro-bind / /`, an in-memory `--tmpfs /tmp`, and the
//!   workspace bound again read-only through the handle opened at
//!   resolution (`--ro-bind-fd N <workspace>`, so a workspace under `/tmp`
//!   stays visible);
//! - workspace-write: `--bind <private TMPDIR> /tmp` and the workspace bound
//!   writable through its handle (`--bind-fd N <workspace>`).
//!
//! The host's own `/tmp` is therefore not visible inside, except the
//! workspace.
//!
//! Abstract unix sockets live in the network namespace, which stays shared
//! (the network is not cut yet): a Landlock scope applied to bwrap itself
//! before exec (ABI 6) confines them; on older kernels the result names the
//! `abstract-sockets` gap.
//!
//! Runner failure is structural: bwrap writes `{"child-pid": N}` on its
//! `--json-status-fd` once the command started; without it the command
//! never ran. Nothing the command prints is consulted.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use dsh_sandbox::{
    Confinement, Restriction, RunnerOutcome, RunnerReport, SandboxGap, SandboxMode, SandboxPolicy,
};

use crate::error::SandboxError;

/// The backend's name in results.
pub(crate) const NAME: &str = "bwrap";
/// What a bwrap denial looks like on stderr.
pub(crate) const DENIAL: &str = "read-only file system";

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

/// The profile arguments for `policy`, up to and including `--`, given the
/// numbers of the status pipe and the workspace handle.
pub(crate) fn profile(policy: &SandboxPolicy, status_fd: i32, workspace_fd: i32) -> Vec<OsString> {
    let mut profile = args(&[
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--new-session",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        // Root inside is host uid 0 to the kernel's sysctl permission check
        // (not a capability check): without these, `core_pattern` and every
        // network sysctl would be writable, and the core helper runs as
        // host root.
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        "--ro-bind-try",
        "/proc/sysrq-trigger",
        "/proc/sysrq-trigger",
        "--ro-bind-try",
        "/proc/fs",
        "/proc/fs",
    ]);
    match (policy.mode, &policy.private_tmp) {
        (SandboxMode::WorkspaceWrite, Some(tmp)) => {
            profile.extend(args(&["--bind"]));
            profile.push(tmp.clone().into_os_string());
            profile.push("/tmp".into());
        }
        _ => profile.extend(args(&["--tmpfs", "/tmp"])),
    }
    // The workspace through its handle, after /tmp: a workspace under
    // /tmp stays visible in the private /tmp.
    profile.push(if policy.mode == SandboxMode::WorkspaceWrite {
        "--bind-fd".into()
    } else {
        "--ro-bind-fd".into()
    });
    profile.push(workspace_fd.to_string().into());
    profile.push(policy.workspace.path().as_os_str().to_owned());
    // What must stay readable although the private /tmp hides it.
    for path in &policy.readable {
        profile.push("--ro-bind-try".into());
        profile.push(path.as_os_str().to_owned());
        profile.push(path.as_os_str().to_owned());
    }
    profile.push("--json-status-fd".into());
    profile.push(status_fd.to_string().into());
    profile.push("--".into());
    profile
}

/// The runner side of bwrap's `--json-status-fd`, read after it exited.
#[derive(Debug)]
struct StatusPipe {
    read: Mutex<Option<std::fs::File>>,
    seen: Mutex<Vec<u8>>,
}

impl RunnerReport for StatusPipe {
    fn outcome(&self) -> RunnerOutcome {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(mut file) = self
            .read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            // Non-blocking: whatever bwrap wrote before it exited is there.
            let mut buf = [0u8; 4096];
            while let Ok(n) = file.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
        }
        if seen.windows(11).any(|w| w == b"\"child-pid\"") {
            RunnerOutcome::Started
        } else {
            RunnerOutcome::NeverStarted
        }
    }
}

/// `runner profile -- argv`, with the descriptors the runner keeps and its
/// status report. `scope` is the Landlock scope-only ruleset (None when the
/// kernel has no scopes).
pub(crate) fn confine(
    runner: &[OsString],
    policy: &SandboxPolicy,
    argv: &[OsString],
    scope: Option<Arc<OwnedFd>>,
    backend: &str,
) -> Result<Confinement, SandboxError> {
    let (read, write) = crate::sys::status_pipe().map_err(|cause| SandboxError::Descriptor {
        what: "status pipe",
        cause,
    })?;
    // bwrap closes the workspace handle once it has bound it, so it never
    // reaches the command.
    let workspace = policy
        .workspace
        .handle()
        .try_clone_to_owned()
        .map_err(|cause| SandboxError::Descriptor {
            what: "workspace handle",
            cause,
        })?;
    let mut wrapped = runner.to_vec();
    wrapped.extend(profile(policy, write.as_raw_fd(), workspace.as_raw_fd()));
    wrapped.extend_from_slice(argv);
    let gaps = if scope.is_some() {
        Vec::new()
    } else {
        vec![SandboxGap::AbstractSockets]
    };
    let mut environment = crate::provider::environment();
    environment.push(("TMPDIR".into(), Some("/tmp".into())));
    Ok(Confinement {
        argv: wrapped,
        restriction: Restriction {
            drop_capabilities: false,
            landlock_ruleset: scope,
            seccomp_filter: None,
            keep_fds: vec![Arc::new(write), Arc::new(workspace)],
        },
        environment,
        backend: backend.into(),
        enforcement: SandboxGap::enforcement(&gaps),
        gaps,
        denial_signatures: vec![DENIAL.into()],
        runner_report: Some(Arc::new(StatusPipe {
            read: Mutex::new(Some(std::fs::File::from(read))),
            seen: Mutex::new(Vec::new()),
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sandbox::Workspace;

    #[test]
    fn profiles_isolate_and_bind_through_handles() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(dir.path()).unwrap();
        let read_only = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            workspace: workspace.clone(),
            private_tmp: None,
            readable: vec!["/tmp/dsh-bash-spill".into()],
        };
        let profile_ro = profile(&read_only, 7, 8);
        let text: Vec<String> = profile_ro
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for flag in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--new-session",
            "--die-with-parent",
        ] {
            assert!(text.contains(&flag.to_owned()), "{flag} missing: {text:?}");
        }
        assert!(text.windows(2).any(|w| w == ["--cap-drop", "ALL"]));
        assert!(text.windows(2).any(|w| w == ["--tmpfs", "/tmp"]));
        assert!(text.windows(2).any(|w| w == ["--json-status-fd", "7"]));
        let ws = read_only.workspace.path().display().to_string();
        assert!(text
            .windows(3)
            .any(|w| w == ["--ro-bind-fd".to_owned(), "8".into(), ws.clone()]));
        assert!(!text.contains(&"--bind-fd".to_owned()));
        assert!(text.windows(3).any(|w| w
            == [
                "--ro-bind-try".to_owned(),
                "/tmp/dsh-bash-spill".into(),
                "/tmp/dsh-bash-spill".into()
            ]));
        assert_eq!(text.last().map(String::as_str), Some("--"));

        let tmp = dir.path().join("tmp");
        let write = SandboxPolicy {
            mode: SandboxMode::WorkspaceWrite,
            workspace,
            private_tmp: Some(tmp.clone()),
            readable: Vec::new(),
        };
        let text: Vec<String> = profile(&write, 7, 8)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let ws = write.workspace.path().display().to_string();
        assert!(text.windows(3).any(|w| w
            == [
                "--bind".to_owned(),
                tmp.display().to_string(),
                "/tmp".into()
            ]));
        assert!(text
            .windows(3)
            .any(|w| w == ["--bind-fd".to_owned(), "8".into(), ws.clone()]));
    }
}
