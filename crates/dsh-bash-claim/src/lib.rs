//! A [`BashExecutor`](dsh_bash::BashExecutor) on a sandbox claimed from a Kubernetes
//! [agent-sandbox](https://github.com/kubernetes-sigs/agent-sandbox) warm
//! pool: one sandbox per session, at cluster scale.
//!
//! [`ClaimedBashExecutor::claim`] creates a `SandboxClaim`
//! (`extensions.agents.x-k8s.io/v1beta1`) naming a `SandboxWarmPool`
//! whose pods run `dsh-bash mcp --listen` (the project's
//! `deploy/agent-sandbox/dsh-bash.yaml`), waits for it to be ready within
//! a bound (reading the claim, then watching it), connects to the server
//! in its pod over HTTP with a bearer token — by pod IP or by the
//! sandbox's service name in-cluster, or from outside through the
//! agent-sandbox router, which routes by the `X-Sandbox-ID`,
//! `X-Sandbox-Namespace` and `X-Sandbox-Port` headers and keeps
//! `Authorization` for its own token (the server's then goes as
//! `X-Dsh-Bash-Token`) — and from then on is a
//! [`dsh_bash_remote::RemoteBashExecutor`] on it. Each foreground run's
//! result names the claim, the sandbox and the address
//! ([`dsh_bash::ClaimFacts`]). Shutdown deletes the claim (its sandbox
//! goes with it) unless the configuration leaves it to its lifecycle.
//! Every call to the API server waits [`ClaimConfig::patience`] at most;
//! the wait for readiness, [`ClaimConfig::ready_within`].
//!
//! The caller's Kubernetes identity needs `create`, `get`, `watch` and
//! `delete` on `sandboxclaims` (and `get` on `sandboxes` for
//! [`Reach::Service`]); a refusal to read is reported at once, not waited
//! out.
//!
//! What can outlive a session: a process killed before its shutdown
//! leaves its claim to the claim's own `shutdownTime` (every claim carries
//! one, [`ClaimConfig::expire_after`], 8 hours by default, with the
//! `Delete` policy); a [`ClaimedBashExecutor::claim`] cancelled midway, or
//! an executor dropped without shutdown, deletes its claim from a task on
//! the current runtime when there is one.
//!
//! # Example
//!
//! ```no_run
//! // no_run: it needs a cluster with agent-sandbox and the warm pool.
//! use dsh_bash::{BashExecRequest, BashExecutor};
//! use dsh_bash_claim::{ClaimConfig, ClaimedBashExecutor};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let token = std::env::var("DSH_BASH_TOKEN")?;
//! let config = ClaimConfig::new("agents", "dsh-bash", &token);
//! let executor = ClaimedBashExecutor::claim(client, config).await?;
//! let result = executor.run(executor.resolve(BashExecRequest::new("uname -n"))?).await?;
//! println!("{} ran in {:?}", result.stdout.text, result.claim);
//! executor.shutdown().await;
//! # Ok(())
//! # }
//! ```
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

mod claim;
mod executor;

use std::time::Duration;

pub use dsh_bash_remote::RemoteConfig;
pub use executor::ClaimedBashExecutor;

/// How the server in a claimed sandbox's pod is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reach {
    /// At the pod's first IP (in-cluster, the default).
    PodIp,
    /// At the sandbox's headless service name (`status.serviceFQDN`; its
    /// template must set `service: true`).
    Service,
    /// Through agent-sandbox's router at this endpoint (`https://router.example/mcp`),
    /// which routes by the `X-Sandbox-*` headers sent with every request.
    Router {
        /// The router's URL, path included.
        url: String,
        /// The router's own bearer token (its `ROUTER_AUTH_TOKEN`), when
        /// it has one.
        token: Option<String>,
    },
}

/// What to do with the claim when the session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimEnd {
    /// Delete it at shutdown (the default): its sandbox goes with it.
    Delete,
    /// Leave it to its lifecycle ([`ClaimConfig::expire_after`] and
    /// [`ClaimConfig::ttl_after_finished`]), e.g. to look at the sandbox
    /// afterwards.
    Leave,
}

/// Which pool to claim from, how to reach the server, how long to wait.
#[derive(Clone)]
#[non_exhaustive]
pub struct ClaimConfig {
    /// The namespace of the pool, the claim and the sandbox.
    pub namespace: String,
    /// The `SandboxWarmPool` to claim a sandbox from.
    pub warm_pool: String,
    /// The bearer token the server was started with (its Secret's).
    pub token: String,
    /// The server's port in the pod (the template's `--listen` port).
    pub port: u16,
    /// How the server is reached.
    pub reach: Reach,
    /// How long the claim may take to be ready; past it the claim is
    /// deleted and [`ClaimError::NotReady`] says what it last said.
    pub ready_within: Duration,
    /// How long one call to the API server (create, read, delete) may
    /// take.
    pub patience: Duration,
    /// The claim's `shutdownTime` from its creation, with the `Delete`
    /// policy: the backstop for a process that never shuts down. `None`:
    /// the claim never expires by itself.
    pub expire_after: Option<Duration>,
    /// The claim's `ttlSecondsAfterFinished`, when set.
    pub ttl_after_finished: Option<u32>,
    /// What shutdown does with the claim.
    pub end: ClaimEnd,
    /// The remote executor's waits and buffers.
    pub remote: RemoteConfig,
}

impl ClaimConfig {
    /// Claims from `warm_pool` in `namespace`, reaching the server by pod
    /// IP on port 8700 with `token`; ready within 3 minutes, expiring after
    /// 8 hours, deleted at shutdown.
    pub fn new(namespace: &str, warm_pool: &str, token: &str) -> ClaimConfig {
        ClaimConfig {
            namespace: namespace.to_owned(),
            warm_pool: warm_pool.to_owned(),
            token: token.to_owned(),
            port: 8700,
            reach: Reach::PodIp,
            ready_within: Duration::from_secs(180),
            patience: Duration::from_secs(30),
            expire_after: Some(Duration::from_secs(8 * 3600)),
            ttl_after_finished: None,
            end: ClaimEnd::Delete,
            remote: RemoteConfig::default(),
        }
    }
}

/// The configuration without its tokens.
impl std::fmt::Debug for ClaimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reach = match &self.reach {
            Reach::Router { url, .. } => format!("Router {{ url: {url:?}, token: .. }}"),
            other => format!("{other:?}"),
        };
        f.debug_struct("ClaimConfig")
            .field("namespace", &self.namespace)
            .field("warm_pool", &self.warm_pool)
            .field("port", &self.port)
            .field("reach", &reach)
            .field("ready_within", &self.ready_within)
            .field("patience", &self.patience)
            .field("expire_after", &self.expire_after)
            .field("ttl_after_finished", &self.ttl_after_finished)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

/// What became of a claim after a failure: deleted, or why not (then it
/// ends at its `shutdownTime`).
fn left(deleted: &Result<(), String>) -> String {
    match deleted {
        Ok(()) => "the claim has been deleted".to_owned(),
        Err(why) => format!("the claim could not be deleted ({why}); it ends at its shutdownTime"),
    }
}

/// Why a sandbox could not be claimed or reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// The API server refused the claim (no such pool or namespace, no
    /// right to create claims, the CRDs not installed…).
    #[error("cannot claim a sandbox from the warm pool {pool} in namespace {namespace}: {cause}")]
    Create {
        /// The pool.
        pool: String,
        /// The namespace.
        namespace: String,
        /// What the API server said.
        cause: String,
    },
    /// The claim was not ready within the bound (then deleted).
    #[error("the claim {claim} in namespace {namespace} was not ready within {within:?} ({}); it last said: {last}. Look at the pool's pods (kubectl -n {namespace} get sandboxes,pods) or give it longer", left(.deleted))]
    NotReady {
        /// The claim.
        claim: String,
        /// The namespace.
        namespace: String,
        /// The bound.
        within: Duration,
        /// What the claim last said (its Ready condition), or why it
        /// could not be read.
        last: String,
        /// Whether it was deleted then (else why not).
        deleted: Result<(), String>,
    },
    /// The API server refused to let the claim be read or watched.
    #[error("the API server refused to let this client read the claim {claim} in namespace {namespace} ({}): {cause}. The client needs get and watch on sandboxclaims", left(.deleted))]
    Refused {
        /// The claim.
        claim: String,
        /// The namespace.
        namespace: String,
        /// What the API server said.
        cause: String,
        /// Whether it was deleted then (else why not).
        deleted: Result<(), String>,
    },
    /// A call to the API server took longer than the patience.
    #[error("the API server did not answer {what} within {patience:?}")]
    Slow {
        /// The call (`creating the claim`, …).
        what: String,
        /// The patience.
        patience: Duration,
    },
    /// The claim was deleted while this waited for it.
    #[error("the claim {claim} in namespace {namespace} was deleted before it was ready")]
    Deleted {
        /// The claim.
        claim: String,
        /// The namespace.
        namespace: String,
    },
    /// The sandbox could not be read (for its service name).
    #[error("cannot read the sandbox {sandbox}: {cause}")]
    Sandbox {
        /// The sandbox.
        sandbox: String,
        /// What the API server said.
        cause: String,
    },
    /// [`Reach::Service`] for a sandbox without a service.
    #[error("the sandbox {sandbox} has no service (status.serviceFQDN is empty): set `service: true` in its SandboxTemplate, or reach it by pod IP")]
    NoService {
        /// The sandbox.
        sandbox: String,
    },
    /// The server in the pod could not be reached (then the claim was
    /// deleted).
    #[error("the claimed sandbox {sandbox} is ready but its server at {address} cannot be reached ({}): {cause}", left(.deleted))]
    Connect {
        /// The sandbox.
        sandbox: String,
        /// The address tried.
        address: String,
        /// Why.
        cause: String,
        /// Whether the claim was deleted then (else why not).
        deleted: Result<(), String>,
    },
    /// Deleting the claim failed.
    #[error("cannot delete the claim {claim} in namespace {namespace}: {cause}; it ends at its shutdownTime, or delete it with kubectl -n {namespace} delete sandboxclaim {claim}")]
    Delete {
        /// The claim.
        claim: String,
        /// The namespace.
        namespace: String,
        /// What the API server said.
        cause: String,
    },
}
