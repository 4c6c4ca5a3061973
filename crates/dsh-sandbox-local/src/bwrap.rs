//! The bubblewrap backend and the bwrap-shaped operator runner.
//!
//! Profiles (PRV-05/06), plus `--cap-drop ALL`: when bwrap runs as root it
//! otherwise keeps CAP_SYS_ADMIN inside, and `mount -o remount,rw /` undoes
//! the read-only bind (observed on this project's CI machines).
//!
//! - read-only: `--ro-bind / / --dev /dev --proc /proc --die-with-parent --cap-drop ALL`
//! - workspace-write: the same plus `--tmpfs /tmp --bind <root> <root>`

use std::ffi::OsString;

use dsh_sandbox::{SandboxMode, SandboxPolicy};

/// The backend's name in results.
pub(crate) const NAME: &str = "bwrap";
/// What a bwrap denial looks like on stderr.
pub(crate) const DENIAL: &str = "read-only file system";
/// What bwrap's own failures look like on stderr.
pub(crate) const RUNNER_FAILURE: &str = "bwrap: ";

/// The profile arguments for `policy`, up to and including `--`.
pub(crate) fn profile(policy: &SandboxPolicy) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
    ]
    .map(OsString::from)
    .to_vec();
    if policy.mode == SandboxMode::WorkspaceWrite {
        args.extend(["--tmpfs", "/tmp", "--bind"].map(OsString::from));
        args.push(policy.workspace_root.clone().into_os_string());
        args.push(policy.workspace_root.clone().into_os_string());
    }
    args.push("--".into());
    args
}

/// `runner profile -- argv`.
pub(crate) fn wrap(
    runner: &[OsString],
    policy: &SandboxPolicy,
    argv: &[OsString],
) -> Vec<OsString> {
    let mut wrapped = runner.to_vec();
    wrapped.extend(profile(policy));
    wrapped.extend_from_slice(argv);
    wrapped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_exact() {
        let read_only = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            workspace_root: "/ws".into(),
        };
        let argv: Vec<OsString> = ["bash", "-c", "echo 'a b'"].map(OsString::from).to_vec();
        assert_eq!(
            wrap(&["bwrap".into()], &read_only, &argv),
            [
                "bwrap",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--die-with-parent",
                "--cap-drop",
                "ALL",
                "--",
                "bash",
                "-c",
                "echo 'a b'"
            ]
            .map(OsString::from)
        );
        let write = SandboxPolicy {
            mode: SandboxMode::WorkspaceWrite,
            workspace_root: "/ws".into(),
        };
        let wrapped = wrap(&["bwrap".into()], &write, &argv);
        let tail: Vec<_> = wrapped[11..].to_vec();
        assert_eq!(
            tail,
            [
                "--tmpfs",
                "/tmp",
                "--bind",
                "/ws",
                "/ws",
                "--",
                "bash",
                "-c",
                "echo 'a b'"
            ]
            .map(OsString::from)
        );
    }
}
