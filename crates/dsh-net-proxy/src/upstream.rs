//! Deciding on one host and port, and connecting to it.

use std::io;
use std::net::{IpAddr, SocketAddr};

use dsh_sandbox::{is_internal, HostVerdict};
use tokio::net::TcpStream;

use crate::{DoorState, Refused};

/// Why the proxy did not connect.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Not on the allow-list.
    NotAllowed,
    /// On the deny-list, by name or by the address it resolves to.
    Denied,
    /// The name resolves to a loopback, link-local or private address that
    /// no allowing pattern names literally.
    Internal(IpAddr),
    /// Allowed, but resolving or connecting failed.
    Unreachable(io::Error),
}

impl Refusal {
    /// The text of the proxy's refusal.
    pub(crate) fn explain(&self, host: &str, port: u16) -> String {
        match self {
            Refusal::NotAllowed => format!(
                "dsh-bash proxy: {host}:{port} is not on this command's network allow-list\n"
            ),
            Refusal::Denied => format!(
                "dsh-bash proxy: {host}:{port} is on the server's network deny-list\n"
            ),
            Refusal::Internal(ip) => format!(
                "dsh-bash proxy: {host} resolves to the internal address {ip}, which only an allow-list entry naming it literally permits\n"
            ),
            Refusal::Unreachable(err) => {
                format!("dsh-bash proxy: cannot reach {host}:{port}: {err}\n")
            }
        }
    }
}

/// Checks `host:port` against the door's rules and connects to it; every
/// refusal by the rules is logged.
pub(crate) async fn connect(
    state: &DoorState,
    host: &str,
    port: u16,
) -> Result<TcpStream, Refusal> {
    let literal = match state.rules.verdict(host, port) {
        HostVerdict::Refused => {
            state.log.deny(host, port, Refused::Unlisted);
            return Err(Refusal::NotAllowed);
        }
        HostVerdict::Denied => {
            state.log.deny(host, port, Refused::Denied);
            return Err(Refusal::Denied);
        }
        HostVerdict::Allowed { literal } => literal,
    };
    let timeout = state.limits.connect_timeout;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            match tokio::time::timeout(timeout, tokio::net::lookup_host((bare, port))).await {
                Ok(Ok(found)) => found.collect(),
                Ok(Err(err)) => return Err(Refusal::Unreachable(err)),
                Err(_) => return Err(Refusal::Unreachable(io::ErrorKind::TimedOut.into())),
            }
        }
    };
    if addresses
        .iter()
        .any(|a| state.rules.denies_address(a.ip(), port))
    {
        state.log.deny(host, port, Refused::Denied);
        return Err(Refusal::Denied);
    }
    if !literal {
        // Any internal answer refuses the name: a name that resolves both
        // ways is how a rebinding attack reaches the host's services.
        if let Some(inside) = addresses.iter().find(|a| is_internal(a.ip())) {
            state.log.deny(host, port, Refused::Internal);
            return Err(Refusal::Internal(inside.ip()));
        }
    }
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
    for address in addresses {
        match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(err)) => last = err,
            Err(_) => last = io::ErrorKind::TimedOut.into(),
        }
    }
    Err(Refusal::Unreachable(last))
}
