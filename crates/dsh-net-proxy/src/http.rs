//! The HTTP side of a door: `CONNECT host:port` tunnels and absolute-form
//! plain HTTP requests, each checked against the door's rules.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::meter::Metered;
use crate::splice::Spliced;
use crate::upstream::Refusal;
use crate::DoorState;

type Body = BoxBody<Bytes, hyper::Error>;

/// A tunnel the `CONNECT` handler agreed to: run once hyper hands the
/// connection over.
type Tunnel = Arc<Mutex<Option<(hyper::upgrade::OnUpgrade, TcpStream)>>>;

fn text(status: StatusCode, message: String, blocked: bool) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(message))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if blocked {
        headers.insert(
            "x-proxy-error",
            HeaderValue::from_static("blocked-by-allowlist"),
        );
    }
    response
}

fn refused(refusal: &Refusal, host: &str, port: u16) -> Response<Body> {
    match refusal {
        Refusal::NotAllowed | Refusal::Denied | Refusal::Internal(_) => {
            text(StatusCode::FORBIDDEN, refusal.explain(host, port), true)
        }
        Refusal::Unreachable(_) => {
            text(StatusCode::BAD_GATEWAY, refusal.explain(host, port), false)
        }
    }
}

/// Serves one HTTP/1 connection: its requests, then the tunnel a `CONNECT`
/// opened.
pub(crate) async fn serve<S>(stream: Metered<S>, state: Arc<DoorState>)
where
    S: AsyncRead + AsyncWrite + Spliced + Unpin + Send + 'static,
{
    let tunnel: Tunnel = Arc::default();
    let handler = {
        let tunnel = Arc::clone(&tunnel);
        let state = Arc::clone(&state);
        hyper::service::service_fn(move |request| {
            handle(request, Arc::clone(&state), Arc::clone(&tunnel))
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(state.limits.idle)
        .serve_connection(TokioIo::new(stream), handler)
        .with_upgrades()
        .await;
    if let Err(err) = served {
        tracing::debug!(target: "dsh_net_proxy", "connection ended: {err}");
    }
    let agreed = tunnel.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some((upgrade, mut upstream)) = agreed {
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        // The connection as it came (hyper gives it back with what it read
        // past the request): spliced.
        match upgraded.downcast::<TokioIo<Metered<S>>>() {
            Ok(parts) => {
                crate::splice::relay(parts.io.into_inner(), &parts.read_buf, upstream).await;
            }
            Err(upgraded) => {
                crate::splice::copy(&mut TokioIo::new(upgraded), &mut upstream).await;
            }
        }
    }
}

async fn handle(
    request: Request<Incoming>,
    state: Arc<DoorState>,
    tunnel: Tunnel,
) -> Result<Response<Body>, Infallible> {
    if request.method() == Method::CONNECT {
        return Ok(open_tunnel(request, &state, &tunnel).await);
    }
    Ok(relay(request, &state).await)
}

/// The host and port of an authority, `default` when it names none.
fn host_port(authority: &hyper::http::uri::Authority, default: u16) -> (String, u16) {
    let host = authority.host();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host.to_owned(), authority.port_u16().unwrap_or(default))
}

async fn open_tunnel(
    mut request: Request<Incoming>,
    state: &DoorState,
    tunnel: &Tunnel,
) -> Response<Body> {
    let Some(authority) = request.uri().authority().cloned() else {
        return text(
            StatusCode::BAD_REQUEST,
            "dsh-bash proxy: CONNECT needs host:port\n".into(),
            false,
        );
    };
    let (host, port) = host_port(&authority, 443);
    match crate::upstream::connect(state, &host, port).await {
        Ok(upstream) => {
            let upgrade = hyper::upgrade::on(&mut request);
            *tunnel.lock().unwrap_or_else(PoisonError::into_inner) = Some((upgrade, upstream));
            Response::new(
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed(),
            )
        }
        Err(refusal) => refused(&refusal, &host, port),
    }
}

/// Hop-by-hop and proxy headers, which are the proxy's, not the origin's.
const HOP_BY_HOP: [&str; 7] = [
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
];

async fn relay(mut request: Request<Incoming>, state: &Arc<DoorState>) -> Response<Body> {
    let uri = request.uri().clone();
    let (Some(authority), Some("http")) = (uri.authority(), uri.scheme_str()) else {
        return text(
            StatusCode::BAD_REQUEST,
            "dsh-bash proxy: send absolute http:// URLs here, and https:// through CONNECT\n"
                .into(),
            false,
        );
    };
    let (host, port) = host_port(authority, 80);
    let upstream = match crate::upstream::connect(state, &host, port).await {
        Ok(upstream) => upstream,
        Err(refusal) => return refused(&refusal, &host, port),
    };
    let origin = uri
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .parse()
        .unwrap_or_default();
    *request.uri_mut() = origin;
    let headers = request.headers_mut();
    // Headers the client's `Connection` names are hop-by-hop too.
    let named: Vec<String> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect();
    for name in named.iter().map(String::as_str).chain(HOP_BY_HOP) {
        headers.remove(name);
    }
    headers.remove(hyper::header::CONNECTION);
    // The origin's own name, without any `user:password@` of the URL.
    let host_header = match authority.port() {
        Some(port) => format!("{}:{port}", authority.host()),
        None => authority.host().to_owned(),
    };
    if let Ok(value) = HeaderValue::from_str(&host_header) {
        headers.insert(HOST, value);
    }
    match send(request, upstream, state).await {
        Ok(response) => response.map(BodyExt::boxed),
        Err(err) => text(
            StatusCode::BAD_GATEWAY,
            format!("dsh-bash proxy: {host}:{port} failed: {err}\n"),
            false,
        ),
    }
}

async fn send(
    request: Request<Incoming>,
    upstream: TcpStream,
    state: &Arc<DoorState>,
) -> Result<Response<Incoming>, hyper::Error> {
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await?;
    // The origin connection lives as long as its response body is read,
    // which the server side drives; it ends with the door like every task.
    state.spawn(async move {
        let _ = connection.await;
    });
    sender.send_request(request).await
}
