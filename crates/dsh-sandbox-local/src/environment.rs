//! What every confined command's environment loses: the variables that
//! name a door to a service outside.

use std::ffi::OsString;

/// Variables that hand a confined command a door to a service outside (an
/// agent, a session bus, a container runtime): removed from its
/// environment. The sockets themselves stay reachable by path where the
/// mode lets the command read them; see the crate docs.
pub(crate) const SOCKET_VARIABLES: [&str; 6] = [
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "KRB5CCNAME",
];

/// The environment changes every confined command gets.
pub(crate) fn environment() -> Vec<(OsString, Option<OsString>)> {
    SOCKET_VARIABLES
        .iter()
        .map(|name| (OsString::from(name), None))
        .collect()
}
