//! A plain-socket MCP client for `dsh-bash mcp --listen`: blocking HTTP/1.1
//! on one keep-alive connection, no TCP_NODELAY of its own and no quick
//! ACKs, the way a simple client (or an SDK over a stock HTTP library)
//! talks to the server. It reads chunked event streams and plain bodies;
//! nothing more.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A protocol era of the calls made.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Era {
    /// An `initialize`d 2025-06-18 session (`Mcp-Session-Id`).
    Session2025,
    /// 2026-07-28: no session, the protocol version in every request.
    Stateless2026,
}

/// One connection to the server, with its session once opened.
pub(crate) struct PlainHttp {
    reader: BufReader<TcpStream>,
    authority: String,
    token: String,
    session: Option<String>,
    era: Era,
    next_id: u64,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl PlainHttp {
    /// Connects to `url` (`http://host:port/mcp`) and, for a 2025 era,
    /// opens a session.
    pub(crate) fn connect(url: &str, token: &str, era: Era) -> io::Result<PlainHttp> {
        let authority = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let stream = TcpStream::connect(&authority)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut client = PlainHttp {
            reader: BufReader::new(stream),
            authority,
            token: token.to_owned(),
            session: None,
            era,
            next_id: 0,
        };
        if let Era::Session2025 = era {
            let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"dsh-bash-bench","version":"0"}}}"#;
            let (headers, _) = client.post(init, &[])?;
            client.session = headers
                .iter()
                .find(|(name, _)| name == "mcp-session-id")
                .map(|(_, value)| value.clone());
            if client.session.is_none() {
                return Err(invalid("no session id".into()));
            }
            client.post(
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                &[],
            )?;
        }
        Ok(client)
    }

    /// One `tools/call` of `bash` with `command`; the answer's body.
    pub(crate) fn call(&mut self, command: &str) -> io::Result<String> {
        self.next_id += 1;
        let mut params = serde_json::json!({
            "name": "bash",
            "arguments": {"command": command, "description": "benchmark a trivial command"}
        });
        let mut extra = Vec::new();
        if let Era::Stateless2026 = self.era {
            params["_meta"] = serde_json::json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "dsh-bash-bench", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {}
            });
            extra = vec![("Mcp-Method", "tools/call"), ("Mcp-Name", "bash")];
        }
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": params
        })
        .to_string();
        let (_, answer) = self.post(&body, &extra)?;
        if !answer.contains("\"result\"") {
            return Err(invalid(format!("no result: {answer}")));
        }
        Ok(answer)
    }

    /// POSTs `body` on the connection; the answer's headers and body.
    fn post(
        &mut self,
        body: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<(Vec<(String, String)>, String)> {
        let version = match self.era {
            Era::Session2025 => "2025-06-18",
            Era::Stateless2026 => "2026-07-28",
        };
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.authority,
            self.token,
            body.len()
        );
        if let Some(session) = &self.session {
            request.push_str(&format!(
                "Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {version}\r\n"
            ));
        } else if let Era::Stateless2026 = self.era {
            request.push_str(&format!("MCP-Protocol-Version: {version}\r\n"));
        }
        for (name, value) in extra {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        self.reader.get_mut().write_all(request.as_bytes())?;
        self.answer()
    }

    /// Reads one answer: the status line, the headers, then a chunked or
    /// a sized body.
    fn answer(&mut self) -> io::Result<(Vec<(String, String)>, String)> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let body = if header("transfer-encoding") == Some("chunked") {
            self.chunked()?
        } else {
            let length: usize = header("content-length").unwrap_or("0").parse().unwrap_or(0);
            let mut body = vec![0; length];
            self.reader.read_exact(&mut body)?;
            String::from_utf8_lossy(&body).into_owned()
        };
        if !status.starts_with('2') {
            return Err(invalid(format!("HTTP {status}: {body}")));
        }
        Ok((headers, body))
    }

    fn chunked(&mut self) -> io::Result<String> {
        let mut body = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim(), 16)
                .map_err(|err| invalid(format!("chunk size {line:?}: {err}")))?;
            let mut chunk = vec![0; size + 2];
            self.reader.read_exact(&mut chunk)?;
            if size == 0 {
                return Ok(String::from_utf8_lossy(&body).into_owned());
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
}
