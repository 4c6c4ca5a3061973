//! Raw HTTP/1.1 to `dsh-bash mcp --listen`: one request per connection,
//! the statuses exactly as on the wire, and `tools/call`s in either
//! protocol era.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::listening::Listening;

/// One HTTP response: status, headers (lower-case names), body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Writes one request on a fresh connection to `server` (a `Host` header
/// added unless `headers` has one); the connection, to read the answer.
fn sent(server: &Listening, method: &str, headers: &[(&str, &str)], body: &str) -> TcpStream {
    let address = server.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut request = format!(
        "{method} /mcp HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    stream
}

/// Sends one request on a fresh connection and reads the answer until the
/// server closes it or (for an event stream) the JSON-RPC answer arrived.
pub fn send(server: &Listening, method: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut stream = sent(server, method, headers, body);
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(err) => panic!(
                "reading the answer: {err}; so far: {}",
                String::from_utf8_lossy(&raw)
            ),
        }
        let text = String::from_utf8_lossy(&raw);
        // An event stream stays open until the server closes it; the
        // answer to a request is what we wait for.
        if text.contains("text/event-stream") && text.contains("\"result\"")
            || text.contains("\"error\"") && text.contains("\"jsonrpc\"")
        {
            break;
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

pub const JSON: (&str, &str) = ("Content-Type", "application/json");
pub const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Opens a 2025-06-18 session with `token`; its id.
pub fn open_session(server: &Listening, token: &str) -> String {
    let auth = bearer(token);
    let answer = send(
        server,
        "POST",
        &[JSON, ACCEPT, ("Authorization", &auth)],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Clients stop reusing a connection before the server closes it idle.
    assert_eq!(answer.header("keep-alive"), Some("timeout=5"));
    let session = answer.header("mcp-session-id").unwrap().to_owned();
    let answer = send(
        server,
        "POST",
        &[
            JSON,
            ACCEPT,
            ("Authorization", &auth),
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(answer.status, 202, "{}", answer.body);
    session
}

/// The headers and body of a `tools/call` of `name` in `era`: 2025-06-18
/// in `session`, or 2026-07-28 (stateless; the token's one session).
pub fn tool_request(
    server: &Listening,
    era: &str,
    session: &str,
    name: &str,
    arguments: serde_json::Value,
) -> (Vec<(String, String)>, String) {
    let mut params = serde_json::json!({"name": name, "arguments": arguments});
    let mut headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        (
            "Accept".to_owned(),
            "application/json, text/event-stream".to_owned(),
        ),
        ("Authorization".to_owned(), bearer(&server.token)),
        ("MCP-Protocol-Version".to_owned(), era.to_owned()),
    ];
    if era == "2026-07-28" {
        params["_meta"] = serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": era,
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}
        });
        headers.push(("Mcp-Method".to_owned(), "tools/call".to_owned()));
        headers.push(("Mcp-Name".to_owned(), name.to_owned()));
    } else {
        headers.push(("Mcp-Session-Id".to_owned(), session.to_owned()));
    }
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": params
    })
    .to_string();
    (headers, body)
}

/// The headers of a request as `send` takes them.
fn borrowed(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

/// Sends a `tools/call` and reads the whole answer.
pub fn tool_call(
    server: &Listening,
    era: &str,
    session: &str,
    name: &str,
    arguments: serde_json::Value,
) -> Answer {
    let (headers, body) = tool_request(server, era, session, name, arguments);
    send(server, "POST", &borrowed(&headers), &body)
}

/// Sends a `tools/call` and hangs up as soon as the answer starts: the
/// answer is lost on the way, as when a client times out or drops.
pub fn tool_call_dropped(
    server: &Listening,
    era: &str,
    session: &str,
    name: &str,
    arguments: serde_json::Value,
) {
    let (headers, body) = tool_request(server, era, session, name, arguments);
    let mut stream = sent(server, "POST", &borrowed(&headers), &body);
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200", "the answer started");
    drop(stream);
}
