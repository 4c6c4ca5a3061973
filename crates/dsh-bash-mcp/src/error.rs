//! What can keep the server from starting or serving.

use std::net::SocketAddr;

/// Why [`http::Listening::prepare`](crate::http::Listening::prepare),
/// [`http::serve`](crate::http::serve) or
/// [`serve_stdio`](crate::serve_stdio) could not serve; each message says
/// what was wrong and what is allowed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// An option has a value it cannot have.
    #[error("{0}")]
    Option(String),
    /// The bearer tokens cannot be used as configured.
    #[error("{0}")]
    Token(String),
    /// A file the server needs could not be read or written.
    #[error("cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The address cannot be listened on (in use, not this machine's, a
    /// privileged port).
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address asked for.
        address: SocketAddr,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The MCP connection could not be set up (the client's `initialize`
    /// failed or the transport closed first).
    #[error("the MCP connection could not start: {0}")]
    Connection(String),
}

impl ServeError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> ServeError {
        ServeError::Io {
            what: what.into(),
            source,
        }
    }
}
