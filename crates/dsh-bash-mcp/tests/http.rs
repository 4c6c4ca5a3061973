//! The library's HTTP server on its own (no binary): options and tokens
//! checked before anything listens, with errors that say what is allowed;
//! a bound server that answers only its token, refuses a foreign origin,
//! opens a session for the token holder, and returns (listening no more)
//! when its shutdown is cancelled.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use dsh_bash_mcp::http::{HttpOptions, Listening};
use dsh_bash_mcp::{Hub, ServeError};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn with_token_file(dir: &Path, text: &str, mode: u32) -> HttpOptions {
    let file = dir.join("tokens");
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    HttpOptions {
        token_file: Some(file),
        ..HttpOptions::default()
    }
}

fn refused(options: &HttpOptions, address: SocketAddr) -> ServeError {
    match Listening::prepare(address, options, MAX_TIMEOUT) {
        Ok(_) => panic!("prepared with {options:?}"),
        Err(err) => err,
    }
}

#[test]
fn bad_options_are_refused_before_anything_listens() {
    let zero = HttpOptions {
        max_sessions: 0,
        ..HttpOptions::default()
    };
    let err = refused(&zero, loopback());
    assert!(matches!(err, ServeError::Option(_)), "{err:?}");
    assert_eq!(err.to_string(), "--max-sessions must be at least 1");

    let origin = HttpOptions {
        allow_origin: vec!["app.example.com".into()],
        ..HttpOptions::default()
    };
    let err = refused(&origin, loopback());
    assert!(
        err.to_string().contains("expected scheme://host[:port]"),
        "{err}"
    );
}

#[test]
fn token_files_must_be_private_whole_and_ours() {
    let dir = tempfile::tempdir().unwrap();
    let open = with_token_file(dir.path(), &format!("{TOKEN}\n"), 0o644);
    let err = refused(&open, loopback());
    assert!(matches!(err, ServeError::Token(_)), "{err:?}");
    assert!(err.to_string().contains("run `chmod 600"), "{err}");

    let short = with_token_file(dir.path(), "# a comment\nshort\n", 0o600);
    let err = refused(&short, loopback());
    assert!(err.to_string().contains("on line 2 of"), "{err}");
    assert!(err.to_string().contains("at least 16"), "{err}");

    let empty = with_token_file(dir.path(), "# nothing\n\n", 0o600);
    assert!(refused(&empty, loopback())
        .to_string()
        .contains("holds no token"));

    // A file that does not exist is made, private, and the person told
    // where (by the caller: the library prints nothing).
    let fresh = dir.path().join("new-tokens");
    let options = HttpOptions {
        token_file: Some(fresh.clone()),
        ..HttpOptions::default()
    };
    let listening = Listening::prepare(loopback(), &options, MAX_TIMEOUT).unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let notice = listening.notice().expect("a generated token is told");
    assert!(notice.contains(&fresh.display().to_string()), "{notice}");
    assert_eq!(
        listening.token_file(),
        Some(std::fs::canonicalize(&fresh).unwrap().as_path())
    );
}

#[test]
fn a_configured_token_file_is_not_announced() {
    let dir = tempfile::tempdir().unwrap();
    let options = with_token_file(dir.path(), &format!("{TOKEN}\n"), 0o600);
    let listening = Listening::prepare(loopback(), &options, MAX_TIMEOUT).unwrap();
    assert_eq!(listening.notice(), None);
}

/// One HTTP/1.1 POST of `body` to the endpoint; the status code and the
/// response's head (the body of an event stream never ends, so it is not
/// read).
fn post(address: SocketAddr, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    if status != 200 {
        let mut rest = Vec::new();
        let _ = reader.take(4096).read_to_end(&mut rest);
        head.push_str(&String::from_utf8_lossy(&rest));
    }
    (status, head)
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"dsh-bash-mcp-tests","version":"0"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_server_answers_its_token_only_and_stops_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let options = with_token_file(dir.path(), &format!("{TOKEN}\n"), 0o600);
    let listening = Listening::prepare(loopback(), &options, MAX_TIMEOUT).unwrap();
    let bound = listening.bind().await.unwrap();
    let address = bound.address();
    assert_ne!(address.port(), 0, "port 0 is bound to a real port");
    assert_eq!(bound.url(), format!("http://{address}/mcp"));
    let executor = Arc::new(LocalBashExecutor::new(LocalConfig::default()).unwrap());
    let hub = Arc::new(
        Hub::builder(executor)
            .timeouts(Duration::from_secs(30), MAX_TIMEOUT)
            .max_commands(8)
            .build(),
    );
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(dsh_bash_mcp::http::serve(bound, hub, shutdown.clone()));

    let bearer = format!("Bearer {TOKEN}");
    let answers = tokio::task::spawn_blocking(move || {
        let missing = post(address, &[], INITIALIZE);
        let wrong = post(
            address,
            &[("Authorization", "Bearer 0123456789abcdef0123456789abcdeX")],
            INITIALIZE,
        );
        let foreign = post(
            address,
            &[
                ("Authorization", bearer.as_str()),
                ("Origin", "https://evil.example"),
            ],
            INITIALIZE,
        );
        let admitted = post(address, &[("Authorization", bearer.as_str())], INITIALIZE);
        (missing, wrong, foreign, admitted)
    })
    .await
    .unwrap();
    let (missing, wrong, foreign, admitted) = answers;
    assert_eq!(missing.0, 401, "{}", missing.1);
    assert_eq!(wrong.0, 401, "{}", wrong.1);
    assert_eq!(foreign.0, 403, "{}", foreign.1);
    assert_eq!(admitted.0, 200, "{}", admitted.1);
    assert!(
        admitted.1.to_ascii_lowercase().contains("mcp-session-id:"),
        "{}",
        admitted.1
    );

    shutdown.cancel();
    let served = tokio::time::timeout(Duration::from_secs(60), server)
        .await
        .expect("serve returns once its shutdown is cancelled")
        .unwrap();
    assert!(served.is_ok(), "{served:?}");
    // Nothing listens any more.
    assert!(TcpStream::connect(address).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_in_use_is_named() {
    let taken = std::net::TcpListener::bind(loopback()).unwrap();
    let address = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = with_token_file(dir.path(), &format!("{TOKEN}\n"), 0o600);
    let listening = Listening::prepare(address, &options, MAX_TIMEOUT).unwrap();
    let Err(err) = listening.bind().await else {
        panic!("bound {address} twice");
    };
    assert!(matches!(err, ServeError::Listen { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("cannot listen on {address}: ")),
        "{err}"
    );
}
