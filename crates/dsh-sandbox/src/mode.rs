use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which file effects a command may have.
///
/// Ordered from narrowest to widest, so `a > b` is true if and only if `a`
/// allows strictly more than `b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Writes only to `/dev/null`.
    ReadOnly,
    /// Writes to the workspace root and a temp area as well.
    WorkspaceWrite,
    /// No confinement at all.
    DangerFullAccess,
}

impl SandboxMode {
    /// Every mode, narrowest first.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// The stable name (`read-only`, `workspace-write`, `danger-full-access`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// True if and only if this mode confines the command at all.
    pub fn confines(self) -> bool {
        self != SandboxMode::DangerFullAccess
    }

    /// True if and only if this mode allows strictly more than `other`.
    pub fn is_wider_than(self, other: SandboxMode) -> bool {
        self > other
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no sandbox mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseModeError {
    given: String,
}

impl fmt::Display for ParseModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown sandbox mode \"{}\": expected one of read-only, workspace-write, danger-full-access",
            self.given
        )
    }
}

impl std::error::Error for ParseModeError {}

impl FromStr for SandboxMode {
    type Err = ParseModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SandboxMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| ParseModeError {
                given: s.to_owned(),
            })
    }
}

/// How completely a backend enforces the promised mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SandboxEnforcement {
    /// Every effect the mode forbids is blocked.
    Full,
    /// Some forbidden effects cannot be governed by this backend on this host.
    Partial,
}

impl SandboxEnforcement {
    /// The stable name (`full`, `partial`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxEnforcement::Full => "full",
            SandboxEnforcement::Partial => "partial",
        }
    }
}

impl fmt::Display for SandboxEnforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which backend confined a command. Serialised as its name (`bwrap`,
/// `landlock`, `runner`, `none`, `container`, or a provider's own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SandboxBackend {
    /// bubblewrap.
    Bwrap,
    /// Landlock, a syscall filter and a capability drop, applied by the
    /// launcher.
    Landlock,
    /// An operator-configured bwrap-shaped runner.
    Runner,
    /// Nothing (`danger-full-access`).
    None,
    /// A container of the session's own, made by a container engine.
    Container,
    /// Another provider's backend, by its name.
    Other(String),
}

impl SandboxBackend {
    /// The stable name.
    pub fn as_str(&self) -> &str {
        match self {
            SandboxBackend::Bwrap => "bwrap",
            SandboxBackend::Landlock => "landlock",
            SandboxBackend::Runner => "runner",
            SandboxBackend::None => "none",
            SandboxBackend::Container => "container",
            SandboxBackend::Other(name) => name,
        }
    }
}

impl From<&str> for SandboxBackend {
    fn from(name: &str) -> Self {
        match name {
            "bwrap" => SandboxBackend::Bwrap,
            "landlock" => SandboxBackend::Landlock,
            "runner" => SandboxBackend::Runner,
            "none" => SandboxBackend::None,
            "container" => SandboxBackend::Container,
            other => SandboxBackend::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for SandboxBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SandboxBackend {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SandboxBackend {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(SandboxBackend::from(name.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_serialise_as_their_names() {
        for name in ["bwrap", "landlock", "runner", "none", "recorder"] {
            let backend = SandboxBackend::from(name);
            let json = serde_json::to_string(&backend).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(
                serde_json::from_str::<SandboxBackend>(&json).unwrap(),
                backend
            );
        }
        assert_eq!(SandboxBackend::from("bwrap"), SandboxBackend::Bwrap);
    }

    #[test]
    fn serde_names_are_the_stable_ones() {
        for mode in SandboxMode::ALL {
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
            assert_eq!(serde_json::from_str::<SandboxMode>(&json).unwrap(), mode);
            assert_eq!(mode.as_str().parse::<SandboxMode>().unwrap(), mode);
        }
        assert_eq!(
            serde_json::to_string(&SandboxEnforcement::Full).unwrap(),
            "\"full\""
        );
        assert_eq!(
            serde_json::to_string(&SandboxEnforcement::Partial).unwrap(),
            "\"partial\""
        );
    }

    #[test]
    fn wider_is_strict() {
        assert!(SandboxMode::WorkspaceWrite.is_wider_than(SandboxMode::ReadOnly));
        assert!(SandboxMode::DangerFullAccess.is_wider_than(SandboxMode::WorkspaceWrite));
        assert!(!SandboxMode::ReadOnly.is_wider_than(SandboxMode::ReadOnly));
        assert!(!SandboxMode::ReadOnly.is_wider_than(SandboxMode::DangerFullAccess));
    }

    #[test]
    fn unknown_mode_names_the_allowed_ones() {
        let err = "full".parse::<SandboxMode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown sandbox mode \"full\": expected one of read-only, workspace-write, danger-full-access"
        );
    }
}
