//! The one rule for how what a call asks compares with what its session
//! runs under: a sandbox mode, a network policy, hosts beside the
//! allow-list. The model-facing `bash` tool asks a person for what is
//! wider (and refuses an ask that widens nothing); the executor call of
//! `dsh-bash-remote`, which can ask nobody, refuses whatever is wider.
//! Both read the comparison from here, so they cannot disagree on what
//! "wider" means.

use dsh_bash::{HostPattern, NetworkPolicy, SandboxMode};

/// What a call asks for, beside its command.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    /// A sandbox mode.
    pub mode: Option<SandboxMode>,
    /// A network policy.
    pub network: Option<NetworkPolicy>,
    /// Hosts beside the server's allow-list.
    pub hosts: &'a [HostPattern],
}

/// How an [`Asked`] compares with the session's standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compared {
    /// The mode the call runs under if it gets what it asks.
    pub mode: SandboxMode,
    /// The mode asked is wider than the session's.
    pub wider_mode: bool,
    /// The network policy under [`Compared::mode`] without the ask.
    pub standing_network: NetworkPolicy,
    /// The network asked is wider than [`Compared::standing_network`].
    pub wider_network: bool,
    /// The network the call would have is not "on", so hosts beside the
    /// allow-list would reach something it could not.
    pub hosts_widen: bool,
}

/// Compares `asked` with a session running under `current`, whose network
/// under a mode is `network_of(mode)` (none: the network is on).
pub fn compare(
    current: SandboxMode,
    network_of: &dyn Fn(SandboxMode) -> Option<NetworkPolicy>,
    asked: &Asked<'_>,
) -> Compared {
    let mode = asked.mode.unwrap_or(current);
    let standing_network = network_of(mode).unwrap_or(NetworkPolicy::On);
    let network = asked
        .network
        .or_else(|| network_of(mode))
        .unwrap_or_else(|| NetworkPolicy::default_for(mode));
    Compared {
        mode,
        wider_mode: mode.is_wider_than(current),
        standing_network,
        wider_network: asked
            .network
            .is_some_and(|wanted| wanted.is_wider_than(standing_network)),
        hosts_widen: network != NetworkPolicy::On,
    }
}

impl Compared {
    /// True if the call asks for anything its session does not have.
    pub fn widens(&self, asked: &Asked<'_>) -> bool {
        self.wider_mode || self.wider_network || (!asked.hosts.is_empty() && self.hosts_widen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn off_when_confined(mode: SandboxMode) -> Option<NetworkPolicy> {
        mode.confines().then_some(NetworkPolicy::Off)
    }

    fn host() -> Vec<HostPattern> {
        vec!["pypi.org".parse().unwrap()]
    }

    #[test]
    fn wider_and_narrower_modes() {
        let none = Asked {
            mode: None,
            network: None,
            hosts: &[],
        };
        let same = compare(SandboxMode::WorkspaceWrite, &off_when_confined, &none);
        assert!(!same.widens(&none));
        assert_eq!(same.mode, SandboxMode::WorkspaceWrite);
        let full = Asked {
            mode: Some(SandboxMode::DangerFullAccess),
            ..none
        };
        let wider = compare(SandboxMode::WorkspaceWrite, &off_when_confined, &full);
        assert!(wider.wider_mode && wider.widens(&full));
        // Unconfined, the network is on: hosts widen nothing.
        assert!(!wider.hosts_widen);
        let narrower = Asked {
            mode: Some(SandboxMode::ReadOnly),
            ..none
        };
        let c = compare(SandboxMode::WorkspaceWrite, &off_when_confined, &narrower);
        assert!(!c.widens(&narrower));
    }

    #[test]
    fn the_network_and_hosts_widen_only_a_network_that_is_not_on() {
        let hosts = host();
        let on = Asked {
            mode: None,
            network: Some(NetworkPolicy::On),
            hosts: &[],
        };
        let c = compare(SandboxMode::WorkspaceWrite, &off_when_confined, &on);
        assert!(c.wider_network && c.widens(&on));
        assert_eq!(c.standing_network, NetworkPolicy::Off);
        let with_hosts = Asked {
            mode: None,
            network: None,
            hosts: &hosts,
        };
        let c = compare(SandboxMode::WorkspaceWrite, &off_when_confined, &with_hosts);
        assert!(c.hosts_widen && c.widens(&with_hosts));
        // Hosts beside a network asked on at once widen through the network.
        let both = Asked {
            network: Some(NetworkPolicy::On),
            ..with_hosts
        };
        let c = compare(SandboxMode::WorkspaceWrite, &off_when_confined, &both);
        assert!(!c.hosts_widen && c.wider_network);
    }
}
