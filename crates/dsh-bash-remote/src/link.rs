//! The connection to a `dsh-bash mcp` server and the executor calls over
//! it: `tools/call` with the `io.dsh-bash/executor` `_meta` entry, answered
//! with a [`Reply`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dsh_bash::wire::{ExecExtras, Reply, ServerFacts, META_KEY};
use dsh_bash::BashError;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, Implementation, InitializeRequestParams,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{ClientLifecycleMode, Peer, RoleClient, RunningService};
use serde_json::Value;
use tokio::io::AsyncReadExt as _;

/// Why a remote executor could not connect.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The command that should speak MCP on its stdio (ssh, kubectl…)
    /// could not be started.
    #[error("cannot start {program}: {cause}")]
    Spawn {
        /// The program.
        program: String,
        /// What the OS said (in the message, so not chained again).
        cause: std::io::Error,
    },
    /// The MCP handshake failed: the server is unreachable, refused the
    /// token, or is not an MCP server.
    #[error("cannot reach a dsh-bash server at {target}: {message}{}", stderr_suffix(.stderr))]
    Handshake {
        /// The URL or command.
        target: String,
        /// What failed.
        message: String,
        /// The end of the command's stderr (for ssh: why it failed).
        stderr: String,
    },
    /// The server refused the bearer token (HTTP 401).
    #[error("the dsh-bash server at {target} refused the token (401 Unauthorized); give the token the server was started with (its --token-file, or $DSH_BASH_TOKEN)")]
    Unauthorized {
        /// The URL.
        target: String,
    },
    /// The server speaks MCP but is not a `dsh-bash` server (it does not
    /// announce the `io.dsh-bash/executor` extension).
    #[error("{target} is an MCP server but not a dsh-bash one (no {META_KEY} extension); run `dsh-bash mcp` there")]
    NotDshBash {
        /// The URL or command.
        target: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with: {}", stderr.trim())
    }
}

/// How many bytes of a command's stderr are kept for error messages.
const STDERR_TAIL: usize = 4096;

/// The end of a child's stderr, kept for error messages.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<Vec<u8>>>);

impl StderrTail {
    /// Reads `stderr` into the tail until it ends; the handle ends then.
    fn collect(&self, mut stderr: tokio::process::ChildStderr) -> tokio::task::JoinHandle<()> {
        let tail = self.clone();
        tokio::spawn(async move {
            let mut chunk = [0u8; 1024];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                let mut kept = tail.0.lock().unwrap_or_else(PoisonError::into_inner);
                kept.extend_from_slice(&chunk[..n]);
                let excess = kept.len().saturating_sub(STDERR_TAIL);
                kept.drain(..excess);
            }
        })
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

/// One live connection.
pub(crate) struct Link {
    peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, InitializeRequestParams>>>,
    child: tokio::sync::Mutex<Option<tokio::process::Child>>,
    stderr: StderrTail,
    pub(crate) facts: ServerFacts,
    /// The URL or command, for messages.
    pub(crate) target: String,
}

fn client_info() -> InitializeRequestParams {
    InitializeRequestParams::new(
        ClientCapabilities::default(),
        Implementation::new("dsh-bash-remote", env!("CARGO_PKG_VERSION")),
    )
}

/// The 2026-07-28 lifecycle (`server/discover`, no session): over HTTP
/// the token's executor session outlives any one connection.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

impl Link {
    /// Connects over Streamable HTTP; the handshake waits `patience` at
    /// most.
    pub(crate) async fn http(
        url: &str,
        bearer: Option<&str>,
        headers: &[(String, String)],
        patience: Duration,
    ) -> Result<Link, ConnectError> {
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        use rmcp::transport::StreamableHttpClientTransport;
        let mut custom = std::collections::HashMap::new();
        for (name, value) in headers {
            let invalid = |what: &str| ConnectError::Handshake {
                target: url.to_owned(),
                message: format!("the header {name:?} has an invalid {what}"),
                stderr: String::new(),
            };
            let name_ok =
                http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("name"))?;
            let value_ok = http::HeaderValue::from_str(value).map_err(|_| invalid("value"))?;
            custom.insert(name_ok, value_ok);
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
        if let Some(bearer) = bearer {
            config = config.auth_header(bearer);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let handshake =
            rmcp::service::serve_client_with_lifecycle(client_info(), transport, lifecycle());
        let service = tokio::time::timeout(patience, handshake)
            .await
            .map_err(|_| ConnectError::Handshake {
                target: url.to_owned(),
                message: format!("no answer within {patience:?}"),
                stderr: String::new(),
            })?
            .map_err(|err| {
                if err.is_authorization_required() {
                    ConnectError::Unauthorized {
                        target: url.to_owned(),
                    }
                } else {
                    ConnectError::Handshake {
                        target: url.to_owned(),
                        message: err.to_string(),
                        stderr: String::new(),
                    }
                }
            })?;
        Link::established(service, None, StderrTail::default(), url.to_owned())
    }

    /// Connects over the stdio of `command`, which must run `dsh-bash mcp`
    /// (possibly on another machine: `ssh host dsh-bash mcp`); the
    /// handshake waits `patience` at most (an ssh asking for a password on
    /// a terminal never answers: give it `-o BatchMode=yes`).
    pub(crate) async fn command(
        mut command: tokio::process::Command,
        patience: Duration,
    ) -> Result<Link, ConnectError> {
        let program = command
            .as_std()
            .get_program()
            .to_string_lossy()
            .into_owned();
        let target = std::iter::once(program.clone())
            .chain(
                command
                    .as_std()
                    .get_args()
                    .map(|a| a.to_string_lossy().into_owned()),
            )
            .collect::<Vec<_>>()
            .join(" ");
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|cause| ConnectError::Spawn { program, cause })?;
        let stderr = StderrTail::default();
        let collector = child.stderr.take().map(|err| stderr.collect(err));
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(ConnectError::Handshake {
                target,
                message: "its stdin and stdout could not be piped".into(),
                stderr: String::new(),
            });
        };
        let handshake =
            rmcp::service::serve_client_with_lifecycle(client_info(), (stdout, stdin), lifecycle());
        let service = match tokio::time::timeout(patience, handshake).await {
            Ok(Ok(service)) => service,
            Err(_) => {
                let _ = child.kill().await;
                return Err(ConnectError::Handshake {
                    target,
                    message: format!("no answer within {patience:?}"),
                    stderr: stderr.text(),
                });
            }
            Ok(Err(err)) => {
                // Let the child finish saying why (ssh's "Permission
                // denied"), and its last words be read.
                let said = async {
                    let _ = child.wait().await;
                    if let Some(collector) = collector {
                        let _ = collector.await;
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(2), said).await;
                return Err(ConnectError::Handshake {
                    target,
                    message: err.to_string(),
                    stderr: stderr.text(),
                });
            }
        };
        Link::established(service, Some(child), stderr, target)
    }

    fn established(
        service: RunningService<RoleClient, InitializeRequestParams>,
        child: Option<tokio::process::Child>,
        stderr: StderrTail,
        target: String,
    ) -> Result<Link, ConnectError> {
        let peer = service.peer().clone();
        let facts = peer
            .peer_info()
            .and_then(|info| info.capabilities.extensions.clone())
            .and_then(|extensions| extensions.get(META_KEY).cloned());
        let Some(facts) = facts else {
            return Err(ConnectError::NotDshBash { target });
        };
        let facts = match serde_json::from_value::<ServerFacts>(Value::Object(facts)) {
            Ok(facts) => facts,
            Err(err) => {
                return Err(ConnectError::Handshake {
                    target,
                    message: format!(
                    "its {META_KEY} facts cannot be read ({err}): a dsh-bash of another version?"
                ),
                    stderr: String::new(),
                })
            }
        };
        Ok(Link {
            peer,
            service: tokio::sync::Mutex::new(Some(service)),
            child: tokio::sync::Mutex::new(child),
            stderr,
            facts,
            target,
        })
    }

    /// The connection is gone for good (the child exited, the transport
    /// closed).
    pub(crate) fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    fn unreachable(&self, what: impl std::fmt::Display) -> BashError {
        BashError::Unreachable {
            message: format!(
                "{}: {what}{}",
                self.target,
                stderr_suffix(&self.stderr.text())
            ),
        }
    }

    /// One executor call; `patience` bounds the wait for the answer.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Value,
        extras: &ExecExtras,
        patience: Duration,
    ) -> Result<Reply, BashError> {
        let Value::Object(arguments) = arguments else {
            return Err(BashError::Remote {
                code: "INVALID_ARGUMENTS".into(),
                message: "the arguments of an executor call are an object".into(),
            });
        };
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let mut meta = RequestMetaObject::new();
        meta.0 .0.insert(
            META_KEY.to_owned(),
            serde_json::to_value(extras).unwrap_or(Value::Null),
        );
        params.meta = Some(meta);
        // Dropping this future (cancellation, shutdown) cancels the request
        // at the server, which stops the command.
        let answer = tokio::time::timeout(patience, self.peer.call_tool(params)).await;
        let result = match answer {
            Err(_) => {
                return Err(self.unreachable(format_args!(
                    "no answer within {patience:?}; the connection may be down"
                )))
            }
            // The server answered, with a JSON-RPC error: it is there.
            Ok(Err(rmcp::service::ServiceError::McpError(err))) => {
                return Err(BashError::Remote {
                    code: "REMOTE".into(),
                    message: format!("the server refused the call: {}", err.message),
                })
            }
            Ok(Err(err)) => return Err(self.unreachable(err)),
            Ok(Ok(result)) => result,
        };
        let reply = result.meta.as_ref().and_then(|meta| meta.0.get(META_KEY));
        match reply.map(|reply| serde_json::from_value::<Reply>(reply.clone())) {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(err)) => Err(BashError::Remote {
                code: "REMOTE".into(),
                message: format!(
                    "the server's reply cannot be read ({err}): a dsh-bash of another version?"
                ),
            }),
            None => {
                let text = result
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                    .collect::<Vec<_>>()
                    .join("\n");
                Err(BashError::Remote {
                    code: "REMOTE".into(),
                    message: format!("the server did not answer as a dsh-bash executor: {text}"),
                })
            }
        }
    }

    /// Closes the connection; a command child gets a moment to exit on its
    /// own (its server stops what it runs when stdin closes), then is
    /// killed.
    pub(crate) async fn close(&self) {
        if let Some(service) = self.service.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), service.cancel()).await;
        }
        if let Some(mut child) = self.child.lock().await.take() {
            if tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}
