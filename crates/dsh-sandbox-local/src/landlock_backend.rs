//! The Landlock backend: a ruleset built in the parent, applied to the child
//! between fork and exec without any helper binary.
//!
//! Handled accesses are the write-type ones of ABI 5 (write, truncate,
//! remove, make-*, refer, device ioctl), best effort downgraded to the
//! running kernel. Reads are never restricted.
//!
//! | mode | writable | enforcement |
//! |---|---|---|
//! | read-only | `/dev/null` (the file) | `full` on ABI ≥ 3 with the seccomp filter refusing chmod/chown/utimes/xattr syscalls; else `partial` |
//! | workspace-write | also `/tmp` and the workspace root | `partial`: Landlock does not govern chmod, chown, timestamps or extended attributes, and a filter cannot tell inside from outside the workspace |

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use dsh_sandbox::{Confinement, SandboxEnforcement, SandboxMode, SandboxPolicy};
use landlock::{
    AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, ABI,
};

use crate::sys::{self, SeccompProgram};

/// The backend's name in results.
pub(crate) const NAME: &str = "landlock";
/// What a Landlock denial looks like on stderr.
pub(crate) const DENIAL: &str = "permission denied";

fn handled() -> BitFlags<AccessFs> {
    AccessFs::from_write(ABI::V5)
}

fn file_write() -> BitFlags<AccessFs> {
    AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
}

fn ruleset(policy: &SandboxPolicy) -> Result<OwnedFd, String> {
    let mut created = Ruleset::default()
        .handle_access(handled())
        .and_then(Ruleset::create)
        .map_err(|err| format!("cannot create a Landlock ruleset: {err}"))?;
    let dev_null =
        PathFd::new("/dev/null").map_err(|err| format!("cannot open /dev/null: {err}"))?;
    created = created
        .add_rule(PathBeneath::new(dev_null, file_write()))
        .map_err(|err| format!("cannot allow /dev/null: {err}"))?;
    if policy.mode == SandboxMode::WorkspaceWrite {
        for dir in [Path::new("/tmp"), policy.workspace_root.as_path()] {
            let fd = PathFd::new(dir)
                .map_err(|err| format!("cannot open {} for the ruleset: {err}", dir.display()))?;
            created = created
                .add_rule(PathBeneath::new(fd, handled()))
                .map_err(|err| format!("cannot allow {}: {err}", dir.display()))?;
        }
    }
    Option::<OwnedFd>::from(created)
        .ok_or_else(|| "Landlock is not supported by this kernel".into())
}

/// How completely Landlock enforces `mode` on a kernel of ABI `abi`.
pub(crate) fn enforcement(mode: SandboxMode, abi: i64, seccomp: bool) -> SandboxEnforcement {
    if mode == SandboxMode::ReadOnly && abi >= 3 && seccomp {
        SandboxEnforcement::Full
    } else {
        SandboxEnforcement::Partial
    }
}

/// Confines `argv` with a pre-exec Landlock restriction.
pub(crate) fn confine(
    argv: &[OsString],
    policy: &SandboxPolicy,
    abi: i64,
) -> Result<Confinement, String> {
    let ruleset = Arc::new(ruleset(policy)?);
    let seccomp = match policy.mode {
        SandboxMode::ReadOnly => SeccompProgram::deny_metadata_changes().map(Arc::new),
        _ => None,
    };
    let enforcement = enforcement(policy.mode, abi, seccomp.is_some());
    Ok(Confinement {
        argv: argv.to_vec(),
        pre_exec: Some(Arc::new(move || {
            sys::restrict_child(&ruleset, seccomp.as_deref())
        })),
        backend: NAME.into(),
        enforcement,
        denial_signatures: vec![DENIAL.into()],
        runner_failure_signatures: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforcement_is_honest_about_the_abi() {
        assert_eq!(
            enforcement(SandboxMode::ReadOnly, 5, true),
            SandboxEnforcement::Full
        );
        assert_eq!(
            enforcement(SandboxMode::ReadOnly, 2, true),
            SandboxEnforcement::Partial
        );
        assert_eq!(
            enforcement(SandboxMode::ReadOnly, 5, false),
            SandboxEnforcement::Partial
        );
        assert_eq!(
            enforcement(SandboxMode::WorkspaceWrite, 7, true),
            SandboxEnforcement::Partial
        );
    }
}
