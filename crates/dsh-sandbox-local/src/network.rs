//! The network policy `allow`: one door of the server's proxy per command,
//! and the environment that points the command's tools at it.
//!
//! - bubblewrap: the command keeps its own network namespace with only
//!   loopback; the door is one end of a socket pair the command's
//!   forwarder inherits by descriptor (no path: no other command can reach
//!   it), and the host's binary, re-executed as
//!   [`dsh_net_proxy::forward`]er, listens on `127.0.0.1:3128` inside and
//!   passes each connection's socket through it, for the proxy to serve
//!   directly. Nothing else leaves the namespace.
//! - Landlock: no namespace; the door is a loopback TCP port, the only
//!   port the ruleset lets the command connect to (ABI 4), and the syscall
//!   filter refuses every socket but TCP ones. The kernel sees the port,
//!   not the host, so the result names the `proxy-port` gap.
//!
//! Name lookups stay refused inside under both (no resolver is
//! reachable); tools that honour the proxy variables do not need them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) use dsh_net_proxy::Proxy;
use dsh_net_proxy::{Door, DoorAddress, DoorAt};
use dsh_sandbox::{Confinement, Held, NetworkLog, SandboxPolicy};

use crate::error::SandboxError;

/// One command's door, kept until its tree is gone.
#[derive(Debug)]
pub(crate) struct OpenDoor {
    door: Door,
}

impl OpenDoor {
    /// The far end of a passed door, for the forwarder to inherit.
    pub(crate) fn far_end(&self) -> Option<Arc<std::os::fd::OwnedFd>> {
        self.door.far_end()
    }

    /// The door's loopback port, for a door the ruleset lets through.
    pub(crate) fn port(&self) -> Option<u16> {
        match self.door.address() {
            DoorAddress::Tcp(address) => Some(address.port()),
            DoorAddress::Passed | DoorAddress::Unix(_) => None,
        }
    }
}

/// Opens the door of a command under `policy`: a passed socket pair for a
/// forwarder in a namespace (`passed`), else a loopback port.
pub(crate) fn open(
    proxy: &Proxy,
    policy: &SandboxPolicy,
    passed: bool,
) -> Result<OpenDoor, SandboxError> {
    let at = if passed {
        DoorAt::Passed
    } else {
        DoorAt::Loopback
    };
    let door = proxy
        .door(Arc::clone(&policy.hosts), at)
        .map_err(|cause| SandboxError::Door { cause })?;
    Ok(OpenDoor { door })
}

/// What the command's environment says about the proxy at
/// `127.0.0.1:port` ([`dsh_net_proxy::environment`]).
pub(crate) fn environment(port: u16) -> Vec<(OsString, Option<OsString>)> {
    dsh_net_proxy::environment(port)
        .into_iter()
        .map(|(name, value)| (name.into(), Some(value.into())))
        .collect()
}

/// Attaches `door` to `confinement`: its refusals as the network log, the
/// proxy variables, and the door itself kept until the tree is gone.
pub(crate) fn attach(confinement: &mut Confinement, door: OpenDoor, port: u16) {
    let log: Arc<dyn NetworkLog> = door.door.log();
    confinement.network_log = Some(log);
    confinement.invocation.environment.extend(environment(port));
    confinement.held.push(Arc::new(door) as Arc<dyn Held>);
}

/// A command's door under bubblewrap and the command line that starts the
/// forwarder on its far end before the command.
pub(crate) struct Forwarded {
    pub(crate) door: OpenDoor,
    pub(crate) far_end: Arc<std::os::fd::OwnedFd>,
    pub(crate) argv: Vec<OsString>,
}

impl Forwarded {
    /// Keeps the far end open into the forwarder (at its number) and the
    /// door with the confinement, its log the command's.
    pub(crate) fn attach(self, confinement: &mut Confinement) {
        confinement
            .invocation
            .restriction
            .keep_fds
            .push(self.far_end);
        attach(confinement, self.door, dsh_net_proxy::forward::PORT);
    }
}

/// The forwarder program a host named ([`crate::LocalSandboxConfig::forwarder`]).
pub(crate) fn forwarder(program: Option<&PathBuf>) -> Result<&PathBuf, SandboxError> {
    program.ok_or(SandboxError::NoForwarder)
}
