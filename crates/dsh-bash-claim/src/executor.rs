//! The executor on a claimed sandbox: the remote executor on its server,
//! each result naming the claim, and the claim's end at shutdown.

use std::sync::atomic::{AtomicBool, Ordering};

use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashExecutor, BashRunResult, BashTask, BashTaskId,
    BashTaskRead, BoxFuture, ClaimFacts, ListenerHandle, NetworkPolicy, OutputCursor, OwnerToken,
    SandboxMode, TaskListener,
};
use dsh_bash_remote::RemoteBashExecutor;

use crate::claim::{Bound, Claims};
use crate::{ClaimConfig, ClaimEnd, ClaimError, Reach};

/// Runs commands in a sandbox claimed from a warm pool (see the crate
/// docs).
pub struct ClaimedBashExecutor {
    remote: RemoteBashExecutor,
    claims: Claims,
    facts: ClaimFacts,
    end: ClaimEnd,
    /// Set once the claim's end has been seen to (shutdown, or drop).
    ended: AtomicBool,
}

impl std::fmt::Debug for ClaimedBashExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedBashExecutor")
            .field("claim", &self.facts)
            .finish_non_exhaustive()
    }
}

impl ClaimedBashExecutor {
    /// Claims a sandbox as `config` says through `client` (in-cluster or
    /// kubeconfig: `kube::Client::try_default()`), waits for it, and
    /// connects to its server. Whatever fails after the claim was made
    /// deletes it (the error says whether that worked); a caller that
    /// drops this future midway has it deleted from a task of its own.
    pub async fn claim(client: kube::Client, config: ClaimConfig) -> Result<Self, ClaimError> {
        let claims = Claims::new(client, &config.namespace, config.patience);
        let name = claims.create(&config).await?;
        tracing::info!(claim = %name, namespace = %config.namespace, pool = %config.warm_pool, "claimed a sandbox");
        let mut pending = Pending(Some((claims.clone(), name.clone())));
        match connect(&claims, &name, &config).await {
            Ok((remote, facts)) => {
                pending.0 = None;
                Ok(ClaimedBashExecutor {
                    remote,
                    claims,
                    facts,
                    end: config.end,
                    ended: AtomicBool::new(false),
                })
            }
            Err(err) => {
                // (Still pending meanwhile: a caller gone during the
                // delete leaves it to the guard.)
                let deleted = claims.delete(&name).await.map_err(|err| err.to_string());
                pending.0 = None;
                Err(err.after(deleted))
            }
        }
    }

    /// The claim, the sandbox and the address the server is reached at.
    pub fn facts(&self) -> &ClaimFacts {
        &self.facts
    }

    async fn run_claimed(&self, spec: BashExecSpec) -> Result<BashRunResult, BashError> {
        let mut result = self.remote.run(spec).await?;
        result.claim = Some(self.facts.clone());
        Ok(result)
    }
}

/// A claim made and not yet handed over: deleted from a task of its own
/// when dropped (the caller of `claim` went away midway).
struct Pending(Option<(Claims, String)>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some((claims, name)) = self.0.take() {
            delete_later(claims, name);
        }
    }
}

/// Deletes claim `name` from a task on the current runtime, when there
/// is one (else it ends at its `shutdownTime`).
fn delete_later(claims: Claims, name: String) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                if let Err(err) = claims.delete(&name).await {
                    tracing::warn!("{err}");
                }
            });
        }
        Err(_) => {
            tracing::warn!(claim = %name, "no runtime to delete the claim from: it ends at its shutdownTime")
        }
    }
}

impl ClaimError {
    /// This error, saying what became of the claim after it (`outcome`
    /// of its delete).
    fn after(self, outcome: Result<(), String>) -> ClaimError {
        match self {
            ClaimError::NotReady {
                claim,
                namespace,
                within,
                last,
                ..
            } => ClaimError::NotReady {
                claim,
                namespace,
                within,
                last,
                deleted: outcome,
            },
            ClaimError::Refused {
                claim,
                namespace,
                cause,
                ..
            } => ClaimError::Refused {
                claim,
                namespace,
                cause,
                deleted: outcome,
            },
            ClaimError::Connect {
                sandbox,
                address,
                cause,
                ..
            } => ClaimError::Connect {
                sandbox,
                address,
                cause,
                deleted: outcome,
            },
            other => {
                if let Err(why) = outcome {
                    tracing::warn!("the claim could not be deleted after a failure ({why}): it ends at its shutdownTime");
                }
                other
            }
        }
    }
}

/// Not known yet: the claim's delete is tried after the error is made.
fn untried() -> Result<(), String> {
    Err("not tried yet".to_owned())
}

/// Waits for claim `name` within the bound, then connects to its server.
async fn connect(
    claims: &Claims,
    name: &str,
    config: &ClaimConfig,
) -> Result<(RemoteBashExecutor, ClaimFacts), ClaimError> {
    let mut last = String::new();
    let bound = match tokio::time::timeout(config.ready_within, claims.ready(name, &mut last)).await
    {
        Ok(bound) => bound?,
        Err(_) => {
            return Err(ClaimError::NotReady {
                claim: name.to_owned(),
                namespace: config.namespace.clone(),
                within: config.ready_within,
                last,
                deleted: untried(),
            })
        }
    };
    let address = address(claims, &bound, config).await?;
    let connected = match &config.reach {
        Reach::Router { token, .. } => {
            let headers = [
                ("X-Sandbox-ID".to_owned(), bound.sandbox.clone()),
                ("X-Sandbox-Namespace".to_owned(), config.namespace.clone()),
                ("X-Sandbox-Port".to_owned(), config.port.to_string()),
            ];
            RemoteBashExecutor::over_http_routed(
                &address,
                &config.token,
                token.as_deref(),
                &headers,
                config.remote.clone(),
            )
            .await
        }
        _ => {
            RemoteBashExecutor::over_http_with(&address, &config.token, config.remote.clone()).await
        }
    };
    let remote = connected.map_err(|err| ClaimError::Connect {
        sandbox: bound.sandbox.clone(),
        address: address.clone(),
        cause: err.to_string(),
        deleted: untried(),
    })?;
    let facts = ClaimFacts {
        namespace: config.namespace.clone(),
        claim: bound.claim,
        sandbox: bound.sandbox,
        address,
    };
    Ok((remote, facts))
}

/// Where the server of `bound` is reached: by its pod's first IPv4
/// address (the template listens on `0.0.0.0`), else its first; by its
/// service's name; or at the router.
async fn address(
    claims: &Claims,
    bound: &Bound,
    config: &ClaimConfig,
) -> Result<String, ClaimError> {
    let port = config.port;
    match &config.reach {
        Reach::PodIp => {
            let ip = bound
                .pod_ips
                .iter()
                .find(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok())
                .unwrap_or(&bound.pod_ips[0]);
            let host = if ip.contains(':') {
                format!("[{ip}]")
            } else {
                ip.clone()
            };
            Ok(format!("http://{host}:{port}/mcp"))
        }
        Reach::Service => match claims.service_name(&bound.sandbox).await? {
            Some(name) => Ok(format!("http://{name}:{port}/mcp")),
            None => Err(ClaimError::NoService {
                sandbox: bound.sandbox.clone(),
            }),
        },
        Reach::Router { url, .. } => Ok(url.clone()),
    }
}

impl BashExecutor for ClaimedBashExecutor {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.remote.sandbox_mode()
    }

    fn network_policy(&self, mode: SandboxMode) -> Option<NetworkPolicy> {
        self.remote.network_policy(mode)
    }

    fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, BashError> {
        self.remote.resolve(request)
    }

    fn run(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>> {
        Box::pin(self.run_claimed(spec))
    }

    fn start(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>> {
        self.remote.start(spec)
    }

    fn get(&self, id: &BashTaskId) -> Option<BashTask> {
        self.remote.get(id)
    }

    fn owner_of(&self, id: &BashTaskId) -> Option<OwnerToken> {
        self.remote.owner_of(id)
    }

    fn list(&self) -> Vec<BashTask> {
        self.remote.list()
    }

    fn read_output(
        &self,
        id: &BashTaskId,
        since: Option<OutputCursor>,
    ) -> Result<BashTaskRead, BashError> {
        self.remote.read_output(id, since)
    }

    fn write_input<'a>(
        &'a self,
        id: &'a BashTaskId,
        input: &'a [u8],
    ) -> BoxFuture<'a, Result<(), BashError>> {
        self.remote.write_input(id, input)
    }

    fn screen<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<String, BashError>> {
        self.remote.screen(id)
    }

    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        self.remote.kill(id)
    }

    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle {
        self.remote.on_task_done(listener)
    }

    /// Shuts the remote executor down (its tasks killed at the server),
    /// then deletes the claim unless it is left to its lifecycle (a
    /// delete that fails is tried again when the executor is dropped).
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.remote.shutdown().await;
            if self.ended.load(Ordering::Acquire) || self.end == ClaimEnd::Leave {
                return;
            }
            match self.claims.delete(&self.facts.claim).await {
                Ok(()) => {
                    self.ended.store(true, Ordering::Release);
                    tracing::info!(claim = %self.facts.claim, "the session's claim was deleted");
                }
                Err(err) => tracing::warn!("{err}"),
            }
        })
    }
}

impl Drop for ClaimedBashExecutor {
    /// Dropped without shutdown (or after a delete that failed): the
    /// claim is deleted from a task on the current runtime, when there is
    /// one (else it ends at its `shutdownTime`).
    fn drop(&mut self) {
        if self.ended.swap(true, Ordering::AcqRel) || self.end == ClaimEnd::Leave {
            return;
        }
        delete_later(self.claims.clone(), self.facts.claim.clone());
    }
}
