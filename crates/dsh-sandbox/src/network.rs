use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::SandboxMode;

/// Whether a confined command may use the network, beside the file mode.
///
/// `off` cuts every connection leaving the sandbox, loopback services of
/// the host included (TCP, UDP, raw sockets; name lookups with them);
/// `allow` lets the command reach only a proxy of the server's, which
/// connects to the hosts of the policy's [`HostRules`](crate::HostRules) and refuses (and
/// records) the rest; `on` leaves the network as the host has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum NetworkPolicy {
    /// No network outside the sandbox.
    Off,
    /// Only the hosts of an allow-list, through the server's proxy.
    Allow,
    /// The host's network.
    On,
}

impl NetworkPolicy {
    /// Every policy, narrowest first.
    pub const ALL: [NetworkPolicy; 3] =
        [NetworkPolicy::Off, NetworkPolicy::Allow, NetworkPolicy::On];

    /// The default beside `mode`: `off` when it confines (as Codex does),
    /// `on` for `danger-full-access`.
    pub fn default_for(mode: SandboxMode) -> Self {
        if mode.confines() {
            NetworkPolicy::Off
        } else {
            NetworkPolicy::On
        }
    }

    /// The stable name (`off`, `allow`, `on`).
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkPolicy::Off => "off",
            NetworkPolicy::Allow => "allow",
            NetworkPolicy::On => "on",
        }
    }

    /// True if and only if this policy allows strictly more than `other`.
    pub fn is_wider_than(self, other: NetworkPolicy) -> bool {
        self > other
    }
}

impl fmt::Display for NetworkPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no network policy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown network policy \"{given}\": expected off, allow or on")]
pub struct ParseNetworkError {
    given: String,
}

impl FromStr for NetworkPolicy {
    type Err = ParseNetworkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NetworkPolicy::ALL
            .into_iter()
            .find(|policy| policy.as_str() == s)
            .ok_or_else(|| ParseNetworkError { given: s.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lies_between_off_and_on() {
        assert!(NetworkPolicy::Allow.is_wider_than(NetworkPolicy::Off));
        assert!(NetworkPolicy::On.is_wider_than(NetworkPolicy::Allow));
        assert_eq!("allow".parse(), Ok(NetworkPolicy::Allow));
    }

    #[test]
    fn names_defaults_and_order() {
        for policy in NetworkPolicy::ALL {
            assert_eq!(policy.as_str().parse::<NetworkPolicy>(), Ok(policy));
            let json = serde_json::to_string(&policy).unwrap();
            assert_eq!(json, format!("\"{policy}\""));
        }
        assert_eq!(
            "maybe".parse::<NetworkPolicy>().unwrap_err().to_string(),
            "unknown network policy \"maybe\": expected off, allow or on"
        );
        assert_eq!(
            NetworkPolicy::default_for(SandboxMode::ReadOnly),
            NetworkPolicy::Off
        );
        assert_eq!(
            NetworkPolicy::default_for(SandboxMode::WorkspaceWrite),
            NetworkPolicy::Off
        );
        assert_eq!(
            NetworkPolicy::default_for(SandboxMode::DangerFullAccess),
            NetworkPolicy::On
        );
        assert!(NetworkPolicy::On.is_wider_than(NetworkPolicy::Off));
        assert!(!NetworkPolicy::Off.is_wider_than(NetworkPolicy::Off));
    }
}
