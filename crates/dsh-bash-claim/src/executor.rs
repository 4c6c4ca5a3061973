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
    /// deletes it. A caller that drops this future midway leaves the claim
    /// to its `shutdownTime`.
    pub async fn claim(client: kube::Client, config: ClaimConfig) -> Result<Self, ClaimError> {
        let claims = Claims::new(client, &config.namespace);
        let name = claims.create(&config).await?;
        tracing::info!(claim = %name, namespace = %config.namespace, pool = %config.warm_pool, "claimed a sandbox");
        match connect(&claims, &name, &config).await {
            Ok((remote, facts)) => Ok(ClaimedBashExecutor {
                remote,
                claims,
                facts,
                end: config.end,
                ended: AtomicBool::new(false),
            }),
            Err(err) => {
                if let Err(left) = claims.delete(&name).await {
                    tracing::warn!("{left}");
                }
                Err(err)
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
            })
        }
    };
    let (address, headers) = address(claims, &bound, config).await?;
    let remote = RemoteBashExecutor::over_http_routed(
        &address,
        &config.token,
        &headers,
        config.remote.clone(),
    )
    .await
    .map_err(|err| ClaimError::Connect {
        sandbox: bound.sandbox.clone(),
        address: address.clone(),
        cause: err.to_string(),
    })?;
    let facts = ClaimFacts {
        namespace: config.namespace.clone(),
        claim: bound.claim,
        sandbox: bound.sandbox,
        address,
    };
    Ok((remote, facts))
}

/// Where the server of `bound` is reached, and the headers every request
/// carries there.
async fn address(
    claims: &Claims,
    bound: &Bound,
    config: &ClaimConfig,
) -> Result<(String, Vec<(String, String)>), ClaimError> {
    let port = config.port;
    match &config.reach {
        Reach::PodIp => {
            let ip = &bound.pod_ips[0];
            let host = if ip.contains(':') {
                format!("[{ip}]")
            } else {
                ip.clone()
            };
            Ok((format!("http://{host}:{port}/mcp"), Vec::new()))
        }
        Reach::Service => match claims.service_name(&bound.sandbox).await? {
            Some(name) => Ok((format!("http://{name}:{port}/mcp"), Vec::new())),
            None => Err(ClaimError::NoService {
                sandbox: bound.sandbox.clone(),
            }),
        },
        Reach::Router { url } => Ok((
            url.clone(),
            vec![
                ("X-Sandbox-ID".to_owned(), bound.sandbox.clone()),
                ("X-Sandbox-Namespace".to_owned(), config.namespace.clone()),
                ("X-Sandbox-Port".to_owned(), port.to_string()),
            ],
        )),
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
    /// then deletes the claim unless it is left to its lifecycle.
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.remote.shutdown().await;
            if self.ended.swap(true, Ordering::AcqRel) || self.end == ClaimEnd::Leave {
                return;
            }
            match self.claims.delete(&self.facts.claim).await {
                Ok(()) => {
                    tracing::info!(claim = %self.facts.claim, "the session's claim was deleted")
                }
                Err(err) => tracing::warn!("{err}"),
            }
        })
    }
}

impl Drop for ClaimedBashExecutor {
    /// Dropped without shutdown: the claim is deleted from a task on the
    /// current runtime, when there is one (else it ends at its
    /// `shutdownTime`).
    fn drop(&mut self) {
        if self.ended.swap(true, Ordering::AcqRel) || self.end == ClaimEnd::Leave {
            return;
        }
        let claims = self.claims.clone();
        let name = self.facts.claim.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(err) = claims.delete(&name).await {
                        tracing::warn!("{err}");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(claim = %name, "dropped outside a runtime: the claim ends at its shutdownTime")
            }
        }
    }
}
