use std::fmt;

use serde::{Deserialize, Serialize};

/// One promise of the threat model that a backend cannot keep on this host;
/// reported beside `enforcement: partial`, so nothing is claimed that is not
/// enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SandboxGap {
    /// Mode, owner and times of files outside the workspace can still be
    /// changed (Landlock does not govern them, and a syscall filter cannot
    /// tell inside the workspace from outside).
    Metadata,
    /// Truncating files outside the policy (Landlock ABI < 3).
    Truncate,
    /// Signals to processes of the same user outside the sandbox (Landlock
    /// ABI < 6 has no signal scope).
    Signals,
    /// Connections to abstract unix sockets served outside the sandbox
    /// (Landlock ABI < 6 has no socket scope).
    AbstractSockets,
    /// The syscall filter (io_uring, keyrings, SysV IPC, inode flags, other
    /// processes' limits) could not be built for this architecture.
    Syscalls,
    /// Protected paths inside a writable workspace are not kept read-only
    /// (Landlock cannot carve a read-only hole out of a writable tree), or
    /// one of them is a symlink a mount cannot pin.
    ProtectedPaths,
    /// With the network off, TCP connections or listeners are not cut
    /// (Landlock without the syscall filter).
    Tcp,
    /// With the network off, UDP, raw and other non-TCP sockets are not cut
    /// (no syscall filter on this architecture).
    Udp,
    /// With the network on an allow-list, the kernel only knows the
    /// proxy's port, not the host: a command can connect to any host on
    /// that same port without the proxy, and listen on a port the kernel
    /// picks (Landlock governs TCP `connect` and `bind` by port only).
    ProxyPort,
    /// Some credential files stay readable: they lie inside a tree the
    /// command must read whole (its workspace, TMPDIR or caches), which
    /// Landlock cannot carve a hole out of, or past [`crate::MAX_HIDDEN`];
    /// or a hidden control socket ([`crate::CONTROL_SOCKETS`]) stays
    /// reachable (Landlock does not govern connecting to a socket).
    HiddenPaths,
}

impl SandboxGap {
    /// The enforcement a backend with these gaps reports: `full` exactly
    /// when there are none.
    pub fn enforcement(gaps: &[SandboxGap]) -> crate::SandboxEnforcement {
        if gaps.is_empty() {
            crate::SandboxEnforcement::Full
        } else {
            crate::SandboxEnforcement::Partial
        }
    }

    /// The stable name (`metadata`, `abstract-sockets`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxGap::Metadata => "metadata",
            SandboxGap::Truncate => "truncate",
            SandboxGap::Signals => "signals",
            SandboxGap::AbstractSockets => "abstract-sockets",
            SandboxGap::Syscalls => "syscalls",
            SandboxGap::ProtectedPaths => "protected-paths",
            SandboxGap::Tcp => "tcp",
            SandboxGap::Udp => "udp",
            SandboxGap::ProxyPort => "proxy-port",
            SandboxGap::HiddenPaths => "hidden-paths",
        }
    }
}

impl fmt::Display for SandboxGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_serde_agrees() {
        for gap in [
            SandboxGap::Metadata,
            SandboxGap::Truncate,
            SandboxGap::Signals,
            SandboxGap::AbstractSockets,
            SandboxGap::Syscalls,
            SandboxGap::ProtectedPaths,
            SandboxGap::Tcp,
            SandboxGap::Udp,
            SandboxGap::ProxyPort,
            SandboxGap::HiddenPaths,
        ] {
            let json = serde_json::to_string(&gap).unwrap();
            assert_eq!(json, format!("\"{gap}\""));
            assert_eq!(serde_json::from_str::<SandboxGap>(&json).unwrap(), gap);
        }
    }
}
