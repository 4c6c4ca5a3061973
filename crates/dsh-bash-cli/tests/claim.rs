//! The remote executor's claim mode (`dsh-bash-claim`) end to end: a
//! claim made through a stand-in Kubernetes API server that speaks the
//! agent-sandbox v1beta1 types over real HTTP (no cluster can run here),
//! waited for through its watch, the `dsh-bash mcp --listen` server the
//! test runs reached by pod IP, by service name and through a router by
//! the `X-Sandbox-*` headers, and the claim deleted at the end; a claim
//! that never gets ready fails within its bound, deleted, saying what it
//! last said. Each claim the client made is validated against the
//! vendored SandboxClaim CRD's schema.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dsh_bash::{BashExecRequest, BashExecutor};
use dsh_bash_claim::{ClaimConfig, ClaimError, ClaimedBashExecutor, Reach};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use common::listening::Listening;

const CLAIMS: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/agents/sandboxclaims";
const SANDBOXES: &str = "/apis/agents.x-k8s.io/v1beta1/namespaces/agents/sandboxes/";

type Body = BoxBody<Bytes, hyper::Error>;

/// What the stand-in's controller does with a new claim.
#[derive(Clone, Copy, PartialEq)]
enum Controller {
    /// Pending first; bound and ready once the client watches it.
    Binds,
    /// Pending for ever.
    Never,
    /// The API server refuses to create claims (RBAC).
    Forbids,
    /// Creating is allowed, reading is not (RBAC with `create` alone).
    ForbidsReading,
}

#[derive(Default)]
struct State {
    claims: BTreeMap<String, Value>,
    sandboxes: BTreeMap<String, Value>,
    /// Every claim as the client sent it.
    created: Vec<Value>,
    deleted: Vec<String>,
    watches: u32,
    /// The claims a watch was asked for.
    watched: Vec<String>,
    version: u64,
}

/// A stand-in API server for the agent-sandbox claim flow.
struct ApiServer {
    state: Mutex<State>,
    changed: tokio::sync::watch::Sender<u64>,
    watching: tokio::sync::Notify,
    controller: Controller,
    /// The address a bound sandbox's pod has.
    pod_ip: String,
}

impl ApiServer {
    async fn start(controller: Controller) -> (Arc<ApiServer>, SocketAddr) {
        let api = Arc::new(ApiServer {
            state: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
            watching: tokio::sync::Notify::new(),
            controller,
            pod_ip: "127.0.0.1".into(),
        });
        let serving = Arc::clone(&api);
        let address = serve(move |request| {
            let api = Arc::clone(&serving);
            async move { api.handle(request).await }
        })
        .await;
        (api, address)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Stores `object` under `name` with the next resource version and
    /// wakes the watches.
    fn put(&self, name: &str, mut object: Value) {
        let mut state = self.state();
        state.version += 1;
        object["metadata"]["resourceVersion"] = json!(state.version.to_string());
        state.claims.insert(name.to_owned(), object);
        let version = state.version;
        drop(state);
        self.changed.send_replace(version);
    }

    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or("").to_owned();
        let claim = path
            .strip_prefix(CLAIMS)
            .and_then(|rest| rest.strip_prefix('/'))
            .map(str::to_owned);
        match (method, claim) {
            (Method::POST, None) if path == CLAIMS => {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                self.create(serde_json::from_slice(&body).unwrap())
            }
            (Method::GET, None) if path == CLAIMS && query.contains("watch=true") => {
                self.watch(&query).await
            }
            (Method::GET, _) if self.controller == Controller::ForbidsReading => status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                "sandboxclaims.extensions.agents.x-k8s.io is forbidden: User \"system:serviceaccount:agents:agent\" cannot get resource \"sandboxclaims\"",
            ),
            (Method::GET, Some(name)) => match self.state().claims.get(&name) {
                Some(claim) => answer(StatusCode::OK, claim),
                None => not_found(&name),
            },
            (Method::DELETE, Some(name)) => self.delete(&name),
            (Method::GET, None) if path.starts_with(SANDBOXES) => {
                let name = &path[SANDBOXES.len()..];
                match self.state().sandboxes.get(name) {
                    Some(sandbox) => answer(StatusCode::OK, sandbox),
                    None => not_found(name),
                }
            }
            _ => not_found(&path),
        }
    }

    fn create(self: Arc<Self>, mut claim: Value) -> Response<Body> {
        if self.controller == Controller::Forbids {
            return status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                "sandboxclaims.extensions.agents.x-k8s.io is forbidden: User \"system:serviceaccount:agents:agent\" cannot create resource \"sandboxclaims\"",
            );
        }
        let name = {
            let mut state = self.state();
            state.created.push(claim.clone());
            format!(
                "{}{:05}",
                claim["metadata"]["generateName"]
                    .as_str()
                    .unwrap_or("claim-"),
                state.created.len()
            )
        };
        claim["metadata"]["name"] = json!(name);
        claim["metadata"]["namespace"] = json!("agents");
        claim["status"] =
            json!({"conditions": [condition("False", "Pending", "waiting for a warm sandbox")]});
        self.put(&name, claim.clone());
        let made = self.state().claims[&name].clone();
        if self.controller == Controller::Binds {
            tokio::spawn(Arc::clone(&self).bind(name, claim));
        }
        answer(StatusCode::CREATED, &made)
    }

    /// The controller: once the client watches, binds the claim to a
    /// sandbox of its own, ready, with a pod address and a service.
    async fn bind(self: Arc<Self>, name: String, mut claim: Value) {
        loop {
            let watched = self.watching.notified();
            if self.state().watched.contains(&name) {
                break;
            }
            watched.await;
        }
        let sandbox = format!("pool-sandbox-{name}");
        self.state().sandboxes.insert(
            sandbox.clone(),
            json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                   "metadata": {"name": sandbox, "namespace": "agents"},
                   "spec": {}, "status": {"serviceFQDN": "localhost", "service": sandbox,
                   "podIPs": [self.pod_ip], "conditions": [condition("True", "DependenciesReady", "ready")]}}),
        );
        claim["status"] = json!({
            "conditions": [condition("True", "Ready", "the sandbox is ready")],
            "sandbox": {"name": sandbox, "podIPs": [self.pod_ip]},
        });
        self.put(&name, claim);
    }

    /// A watch from the `resourceVersion` asked: the claim's next state
    /// (or its deletion) as one event, then the watch ends.
    async fn watch(&self, query: &str) -> Response<Body> {
        let name = field(query, "fieldSelector=metadata.name%3D").unwrap_or_default();
        let since: u64 = field(query, "resourceVersion=")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut changes = self.changed.subscribe();
        {
            let mut state = self.state();
            state.watches += 1;
            state.watched.push(name.clone());
        }
        self.watching.notify_waiters();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let event = {
                let state = self.state();
                match state.claims.get(&name) {
                    None if state.deleted.contains(&name) => {
                        Some(json!({"type": "DELETED", "object": {"metadata": {"name": name}}}))
                    }
                    Some(claim) if version_of(claim) > since => {
                        Some(json!({"type": "MODIFIED", "object": claim}))
                    }
                    _ => None,
                }
            };
            if let Some(event) = event {
                return lines(&[event]);
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return lines(&[]);
            }
        }
    }

    fn delete(&self, name: &str) -> Response<Body> {
        let mut state = self.state();
        let Some(claim) = state.claims.remove(name) else {
            return not_found(name);
        };
        state.deleted.push(name.to_owned());
        state.version += 1;
        let version = state.version;
        drop(state);
        self.changed.send_replace(version);
        answer(StatusCode::OK, &claim)
    }
}

fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({"type": "Ready", "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-12-05T00:00:00Z"})
}

fn version_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn field(query: &str, prefix: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|part| part.strip_prefix(prefix))
        .map(str::to_owned)
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn answer(code: StatusCode, object: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(full(object.to_string()))
        .unwrap()
}

fn lines(events: &[Value]) -> Response<Body> {
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    Response::builder()
        .header("content-type", "application/json")
        .body(full(text))
        .unwrap()
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    answer(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

fn not_found(name: &str) -> Response<Body> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("\"{name}\" not found"),
    )
}

/// Serves HTTP/1.1 on a loopback port with `handler`; its address.
async fn serve<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let answer = handler(request);
                    async move { Ok::<_, Infallible>(answer.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// The router's own token (its `ROUTER_AUTH_TOKEN`).
const ROUTER_TOKEN: &str = "router-token-0123456789abcdef";

/// A router in the manner of agent-sandbox's: requires its own bearer
/// token, forwards each request to the port `X-Sandbox-Port` names on
/// loopback without `Authorization` (as agent-sandbox's router strips
/// it), but only for the sandbox and namespace it expects (else 404, as
/// for a sandbox it does not know); counts what it forwarded.
async fn router(sandbox: Arc<Mutex<String>>, forwarded: Arc<Mutex<u32>>) -> SocketAddr {
    serve(move |mut request: Request<Incoming>| {
        let sandbox = Arc::clone(&sandbox);
        let forwarded = Arc::clone(&forwarded);
        async move {
            let authorization = request.headers_mut().remove("authorization");
            if authorization.as_ref().and_then(|v| v.to_str().ok())
                != Some(format!("Bearer {ROUTER_TOKEN}").as_str())
            {
                return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Invalid token.");
            }
            let header = |name: &str| {
                request
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned()
            };
            let expected = sandbox.lock().unwrap().clone();
            if header("X-Sandbox-ID") != expected || header("X-Sandbox-Namespace") != "agents" {
                return not_found(&header("X-Sandbox-ID"));
            }
            let port = header("X-Sandbox-Port");
            let stream = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
                .await
                .unwrap();
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            *forwarded.lock().unwrap() += 1;
            let answer = sender.send_request(request).await.unwrap();
            answer.map(BodyExt::boxed)
        }
    })
    .await
}

/// A kube client of the stand-in at `address`.
fn client(address: SocketAddr) -> kube::Client {
    let config = kube::Config::new(format!("http://{address}").parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

/// A server whose workdir is a directory of its own (the sandbox's
/// workspace).
fn sandbox_server() -> Listening {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let token_file = dir.path().join("token");
    Listening::with_tokens(dir, &token_file, &["--workdir", work.to_str().unwrap()])
}

fn workdir(server: &Listening) -> std::path::PathBuf {
    server.dir.path().join("work")
}

fn port_of(server: &Listening) -> u16 {
    server
        .base
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

fn config(server: &Listening, reach: Reach) -> ClaimConfig {
    let mut config = ClaimConfig::new("agents", "dsh-bash", &server.token);
    config.port = port_of(server);
    config.reach = reach;
    config.ready_within = Duration::from_secs(60);
    config
}

/// Every claim the client sent, valid against the vendored CRD.
fn assert_valid_claims(api: &ApiServer) {
    let created = api.state().created.clone();
    assert!(!created.is_empty());
    let Some(verdicts) = common::crds::validated(&created) else {
        return;
    };
    assert!(
        verdicts.iter().all(|v| v == "ok SandboxClaim"),
        "{verdicts:?}"
    );
}

/// Claims through `reach`, runs a command that writes in the server's
/// workdir and reads it back, and shuts down: the facts name the claim
/// and its sandbox, and the claim is deleted.
async fn claim_run_and_end(
    api: &Arc<ApiServer>,
    address: SocketAddr,
    server: &Listening,
    reach: Reach,
) -> String {
    let executor = ClaimedBashExecutor::claim(client(address), config(server, reach))
        .await
        .unwrap();
    let spec = executor
        .resolve(BashExecRequest::new("echo claimed > mark && cat mark"))
        .unwrap();
    let result = executor.run(spec).await.unwrap();
    assert_eq!(result.stdout.text, "claimed\n", "{result:?}");
    let mark = workdir(server).join("mark");
    assert_eq!(std::fs::read_to_string(&mark).unwrap(), "claimed\n");
    std::fs::remove_file(mark).unwrap();
    let facts = result.claim.clone().expect("the result names the claim");
    assert!(facts.claim.starts_with("dsh-bash-"), "{facts:?}");
    assert_eq!(facts.sandbox, format!("pool-sandbox-{}", facts.claim));
    assert_eq!(facts.namespace, "agents");
    assert!(api.state().claims.contains_key(&facts.claim));
    executor.shutdown().await;
    let state = api.state();
    assert!(state.deleted.contains(&facts.claim), "deleted at shutdown");
    assert!(!state.claims.contains_key(&facts.claim));
    facts.address
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_claim_is_made_waited_for_reached_by_pod_ip_and_service_and_deleted() {
    let server = sandbox_server();
    runtime().block_on(async {
        let (api, address) = ApiServer::start(Controller::Binds).await;
        let port = port_of(&server);
        let by_ip = claim_run_and_end(&api, address, &server, Reach::PodIp).await;
        assert_eq!(by_ip, format!("http://127.0.0.1:{port}/mcp"));
        let by_name = claim_run_and_end(&api, address, &server, Reach::Service).await;
        assert_eq!(by_name, format!("http://localhost:{port}/mcp"));
        // Each waited through a watch (the controller binds only then).
        assert!(api.state().watches >= 2);
        let created = api.state().created.clone();
        let first = &created[0];
        assert_eq!(first["spec"]["warmPoolRef"]["name"], "dsh-bash");
        assert_eq!(first["metadata"]["generateName"], "dsh-bash-");
        assert_eq!(
            first["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "dsh-bash"
        );
        assert_eq!(first["spec"]["lifecycle"]["shutdownPolicy"], "Delete");
        assert!(
            first["spec"]["lifecycle"]["shutdownTime"].is_string(),
            "{first}"
        );
        assert_valid_claims(&api);
    });
}

#[test]
fn from_outside_through_the_router_by_its_headers() {
    let server = sandbox_server();
    runtime().block_on(async {
        let (api, address) = ApiServer::start(Controller::Binds).await;
        // The router knows the sandbox the claim will be bound to.
        let expected = Arc::new(Mutex::new("pool-sandbox-dsh-bash-00001".to_owned()));
        let forwarded = Arc::new(Mutex::new(0));
        let router = router(Arc::clone(&expected), Arc::clone(&forwarded)).await;
        let url = format!("http://{router}/mcp");
        let through = Reach::Router {
            url: url.clone(),
            token: Some(ROUTER_TOKEN.to_owned()),
        };
        let reached = claim_run_and_end(&api, address, &server, through.clone()).await;
        assert_eq!(reached, url);
        assert!(
            *forwarded.lock().unwrap() >= 2,
            "the handshake and the call went through the router"
        );
        // A router that does not know the sandbox refuses: a clear error,
        // and the claim is deleted.
        "another-sandbox".clone_into(&mut expected.lock().unwrap());
        let refused = ClaimedBashExecutor::claim(client(address), config(&server, through))
            .await
            .unwrap_err();
        assert!(matches!(refused, ClaimError::Connect { .. }), "{refused}");
        let text = refused.to_string();
        assert!(
            text.contains("cannot be reached") && text.contains("the claim has been deleted"),
            "{text}"
        );
        let state = api.state();
        assert!(
            state.claims.is_empty(),
            "no claim left: {:?}",
            state.claims.keys()
        );
        assert_eq!(state.deleted.len(), 2);
    });
}

#[test]
fn a_claim_that_never_gets_ready_fails_within_its_bound_and_is_deleted() {
    runtime().block_on(async {
        let (api, address) = ApiServer::start(Controller::Never).await;
        let mut config = ClaimConfig::new("agents", "dsh-bash", "token-0123456789abcdef");
        config.ready_within = Duration::from_secs(3);
        let began = Instant::now();
        let failed = ClaimedBashExecutor::claim(client(address), config)
            .await
            .unwrap_err();
        // Fail-safe only: the bound is 3 s; far past it is a hang.
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "{:?}",
            began.elapsed()
        );
        let text = failed.to_string();
        assert!(matches!(failed, ClaimError::NotReady { .. }), "{text}");
        assert!(text.contains("was not ready within 3s"), "{text}");
        assert!(text.contains("the claim has been deleted"), "{text}");
        assert!(
            text.contains("Ready=False (Pending: waiting for a warm sandbox)"),
            "{text}"
        );
        let state = api.state();
        assert_eq!(state.deleted.len(), 1, "the claim is deleted");
        assert!(state.claims.is_empty());
        assert!(state.watches >= 1, "it waited on a watch");
    });
}

#[test]
fn a_claim_the_api_server_refuses_says_why() {
    runtime().block_on(async {
        let (api, address) = ApiServer::start(Controller::Forbids).await;
        let config = ClaimConfig::new("agents", "dsh-bash", "token-0123456789abcdef");
        let refused = ClaimedBashExecutor::claim(client(address), config)
            .await
            .unwrap_err();
        let text = refused.to_string();
        assert!(matches!(refused, ClaimError::Create { .. }), "{text}");
        assert!(
            text.contains("warm pool dsh-bash in namespace agents"),
            "{text}"
        );
        assert!(text.contains("forbidden"), "{text}");
        assert!(api.state().claims.is_empty());
    });
}

#[test]
fn a_client_that_may_create_but_not_read_claims_is_told_at_once() {
    runtime().block_on(async {
        let (api, address) = ApiServer::start(Controller::ForbidsReading).await;
        let mut config = ClaimConfig::new("agents", "dsh-bash", "token-0123456789abcdef");
        config.ready_within = Duration::from_secs(600);
        let began = Instant::now();
        let refused = ClaimedBashExecutor::claim(client(address), config)
            .await
            .unwrap_err();
        // Not waited out: far below the bound (fail-safe only).
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "{:?}",
            began.elapsed()
        );
        let text = refused.to_string();
        assert!(matches!(refused, ClaimError::Refused { .. }), "{text}");
        assert!(
            text.contains("needs get and watch on sandboxclaims"),
            "{text}"
        );
        assert!(text.contains("the claim has been deleted"), "{text}");
        let state = api.state();
        assert_eq!(state.deleted.len(), 1);
        assert!(state.claims.is_empty());
    });
}

#[test]
fn the_configuration_never_shows_its_tokens() {
    let mut config = ClaimConfig::new("agents", "dsh-bash", "server-secret-0123456789");
    config.reach = Reach::Router {
        url: "https://router.example/mcp".into(),
        token: Some("router-secret-0123456789".into()),
    };
    let shown = format!("{config:?}");
    assert!(
        shown.contains("router.example") && shown.contains("dsh-bash"),
        "{shown}"
    );
    assert!(!shown.contains("secret"), "{shown}");
}
