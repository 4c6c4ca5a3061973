//! A door against real loopback servers: CONNECT, absolute-form HTTP and
//! SOCKS5, allowed and refused, with the refusals logged exactly.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use dsh_net_proxy::{DoorAddress, DoorAt, Proxy, ProxyLimits};
use dsh_sandbox::{HostRules, NetworkLog};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An origin that answers every connection with one fixed HTTP response
/// naming the request line it got.
async fn origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head);
                let first = line.lines().next().unwrap_or_default().to_owned();
                let body = format!("origin saw: {first}\nhead: {}", line.to_ascii_lowercase());
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

fn rules(allow: &[String], deny: &[&str]) -> Arc<HostRules> {
    Arc::new(HostRules {
        allow: allow.iter().map(|p| p.parse().unwrap()).collect(),
        deny: deny.iter().map(|p| p.parse().unwrap()).collect(),
    })
}

async fn connect(door: &dsh_net_proxy::Door) -> TcpStream {
    let DoorAddress::Tcp(address) = door.address() else {
        panic!("a loopback door")
    };
    TcpStream::connect(address).await.unwrap()
}

/// Reads a response head, up to and with its blank line.
async fn head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).await.unwrap(),
            1,
            "the head ended early"
        );
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

async fn exchange<S>(stream: &mut S, request: &[u8]) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(request).await.unwrap();
    let mut seen = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut seen)).await;
    String::from_utf8_lossy(&seen).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_and_absolute_form_reach_allowed_hosts_only() {
    let port = origin().await;
    let proxy = Proxy::new(ProxyLimits::default());
    let door = proxy
        .door(rules(&[format!("127.0.0.1:{port}")], &[]), DoorAt::Loopback)
        .unwrap();

    let mut plain = connect(&door).await;
    let seen = exchange(
        &mut plain,
        format!("GET http://127.0.0.1:{port}/simple/ HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nproxy-authorization: x\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(
        seen.contains("origin saw: GET /simple/ HTTP/1.1"),
        "origin-form upstream: {seen}"
    );

    let mut tunnel = connect(&door).await;
    tunnel
        .write_all(
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let answer = head(&mut tunnel).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = exchange(&mut tunnel, b"GET /through HTTP/1.1\r\n\r\n").await;
    assert!(seen.contains("origin saw: GET /through"), "{seen}");

    // Another port of the same host, and a name: refused, logged once each.
    for _ in 0..2 {
        let mut other = connect(&door).await;
        let seen = exchange(
            &mut other,
            b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(seen.starts_with("HTTP/1.1 403"), "{seen}");
        assert!(
            seen.contains("x-proxy-error: blocked-by-allowlist"),
            "{seen}"
        );
        assert!(
            seen.contains("not on this command's network allow-list"),
            "{seen}"
        );
    }
    let mut named = connect(&door).await;
    let seen = exchange(
        &mut named,
        b"GET http://evil.example/x HTTP/1.1\r\nhost: evil.example\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(seen.starts_with("HTTP/1.1 403"), "{seen}");
    assert_eq!(door.log().denied(), ["127.0.0.1:1", "evil.example:80"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks5_with_names_and_literals() {
    let port = origin().await;
    let proxy = Proxy::default();
    let door = proxy
        .door(rules(&[format!("localhost:{port}")], &[]), DoorAt::Loopback)
        .unwrap();
    let socks = |name: &str, port: u16| {
        let mut request = vec![5, 1, 0, 5, 1, 0, 3, name.len() as u8];
        request.extend_from_slice(name.as_bytes());
        request.extend_from_slice(&port.to_be_bytes());
        request
    };
    let mut allowed = connect(&door).await;
    allowed.write_all(&socks("localhost", port)).await.unwrap();
    let mut reply = [0u8; 12];
    allowed.read_exact(&mut reply).await.unwrap();
    assert_eq!(&reply[..2], &[5, 0]);
    assert_eq!(&reply[2..4], &[5, 0], "SOCKS5 succeeded");
    let seen = exchange(&mut allowed, b"GET /socks HTTP/1.1\r\n\r\n").await;
    assert!(seen.contains("origin saw: GET /socks"), "{seen}");

    let mut refused = connect(&door).await;
    refused
        .write_all(&socks("files.example.org", 443))
        .await
        .unwrap();
    let mut reply = [0u8; 12];
    refused.read_exact(&mut reply).await.unwrap();
    assert_eq!(&reply[2..4], &[5, 2], "not allowed by the ruleset");
    assert_eq!(door.log().denied(), ["files.example.org:443"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_loopback_needs_a_literal_pattern() {
    // Debian's /etc/hosts names ::1 ip6-localhost; the proxy resolves it
    // itself, so only an allowing pattern naming the address would do.
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if !hosts.split_whitespace().any(|word| word == "ip6-localhost") {
        eprintln!("SKIP: /etc/hosts names no ip6-localhost");
        return;
    }
    let proxy = Proxy::default();
    let door = proxy
        .door(rules(&["ip6-localhost".into()], &[]), DoorAt::Loopback)
        .unwrap();
    let mut stream = connect(&door).await;
    let seen = exchange(
        &mut stream,
        b"CONNECT ip6-localhost:22 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(seen.starts_with("HTTP/1.1 403"), "{seen}");
    assert!(
        seen.contains("resolves to the internal address ::1"),
        "{seen}"
    );
    assert_eq!(door.log().denied(), ["ip6-localhost:22"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_door_cuts_its_tunnels_and_a_spent_budget_cuts_the_rest() {
    let port = origin().await;
    let proxy = Proxy::new(ProxyLimits {
        bytes: 200,
        ..ProxyLimits::default()
    });
    let door = proxy
        .door(rules(&[format!("127.0.0.1:{port}")], &[]), DoorAt::Loopback)
        .unwrap();
    let mut tunnel = connect(&door).await;
    let request = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nhost: x\r\n\r\n");
    tunnel.write_all(request.as_bytes()).await.unwrap();
    assert!(head(&mut tunnel).await.starts_with("HTTP/1.1 200"));
    // Past 200 bytes both ways the door cuts the connection.
    let big = vec![b'a'; 4096];
    let _ = tunnel.write_all(&big).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), tunnel.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the spent budget closed the tunnel");

    let door = proxy
        .door(rules(&[format!("127.0.0.1:{port}")], &[]), DoorAt::Loopback)
        .unwrap();
    let mut open = connect(&door).await;
    open.write_all(request.as_bytes()).await.unwrap();
    assert!(head(&mut open).await.starts_with("HTTP/1.1 200"));
    drop(door);
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), open.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "closing the door cut the tunnel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_door_serves_the_sockets_passed_through_its_far_end() {
    use std::os::fd::AsFd;
    let port = origin().await;
    let proxy = Proxy::default();
    let door = proxy
        .door(
            rules(&[format!("127.0.0.1:{port}")], &["denied.example"]),
            DoorAt::Passed,
        )
        .unwrap();
    assert_eq!(door.address(), &DoorAddress::Passed);
    let far = door.far_end().expect("a passed door has a far end");
    let passed = |far: &std::os::fd::OwnedFd| {
        let stream = dsh_net_proxy::forward::pass_connection(far.as_fd())?;
        stream.set_nonblocking(true)?;
        tokio::net::UnixStream::from_std(stream)
    };
    let mut allowed = passed(&far).unwrap();
    let request = format!(
        "GET http://127.0.0.1:{port}/passed HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    );
    let seen = exchange(&mut allowed, request.as_bytes()).await;
    assert!(seen.contains("origin saw: GET /passed"), "{seen}");
    let mut denied = passed(&far).unwrap();
    let seen = exchange(
        &mut denied,
        b"CONNECT denied.example:443 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(seen.contains("deny-list"), "{seen}");
    drop(door);
    // With the door closed nothing serves what is passed any more: the
    // pass fails, or the socket is closed unanswered.
    if let Ok(mut late) = passed(&far) {
        let _ = late.write_all(request.as_bytes()).await;
        let mut seen = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), late.read_to_end(&mut seen)).await;
        assert!(read.is_ok(), "the late socket was closed");
        assert!(seen.is_empty(), "{}", String::from_utf8_lossy(&seen));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_at_a_path_serves_each_forwarder_that_connects_as_a_channel() {
    use std::os::fd::AsFd;
    let port = origin().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("door");
    let proxy = Proxy::default();
    let door = proxy
        .door(
            rules(&[format!("127.0.0.1:{port}")], &["denied.example"]),
            DoorAt::Unix(path.clone()),
        )
        .unwrap();
    assert_eq!(door.address(), &DoorAddress::Unix(path.clone()));
    assert!(door.far_end().is_none());
    let request = format!(
        "GET http://127.0.0.1:{port}/channel HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    );
    // Two forwarders, each its own channel, both served.
    for _ in 0..2 {
        let channel = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let stream = dsh_net_proxy::forward::pass_connection(channel.as_fd()).unwrap();
        stream.set_nonblocking(true).unwrap();
        let mut stream = tokio::net::UnixStream::from_std(stream).unwrap();
        let seen = exchange(&mut stream, request.as_bytes()).await;
        assert!(seen.contains("origin saw: GET /channel"), "{seen}");
    }
    let channel = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let stream = dsh_net_proxy::forward::pass_connection(channel.as_fd()).unwrap();
    stream.set_nonblocking(true).unwrap();
    let mut denied = tokio::net::UnixStream::from_std(stream).unwrap();
    let seen = exchange(
        &mut denied,
        b"CONNECT denied.example:443 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(seen.contains("deny-list"), "{seen}");
    assert_eq!(
        door.log().denied().len(),
        1,
        "refusals land in the door's log"
    );
    // Channels past the door's few are closed at once (each would hold a
    // descriptor of the server's).
    let mut channels = Vec::new();
    for _ in 0..64 {
        channels.push(std::os::unix::net::UnixStream::connect(&path).unwrap());
    }
    let mut closed = 0;
    for channel in &channels {
        channel
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut byte = [0u8; 1];
        if matches!(std::io::Read::read(&mut &*channel, &mut byte), Ok(0)) {
            closed += 1;
        }
    }
    assert!(closed >= 50, "only {closed} of 64 channels were closed");
    drop(channels);
    // A path that exists already is refused, not taken over.
    let taken = proxy.door(rules(&[], &[]), DoorAt::Unix(path.clone()));
    assert!(taken.is_err());
    drop(door);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_keeps_only_names_it_can_vouch_for_and_counts_the_rest() {
    let proxy = Proxy::default();
    let door = proxy
        .door(rules(&[], &["denied.example"]), DoorAt::Loopback)
        .unwrap();
    let socks = |name: &[u8], port: u16| {
        let mut request = vec![5, 1, 0, 5, 1, 0, 3, name.len() as u8];
        request.extend_from_slice(name);
        request.extend_from_slice(&port.to_be_bytes());
        request
    };
    let refuse = |request: Vec<u8>| {
        let door = &door;
        async move {
            let mut stream = connect(door).await;
            stream.write_all(&request).await.unwrap();
            let mut reply = [0u8; 12];
            stream.read_exact(&mut reply).await.unwrap();
            assert_eq!(&reply[2..4], &[5, 2], "refused");
        }
    };
    // A name that forges a fact: a closing bracket, a newline, a claim.
    refuse(socks(b"x]\n[network: nothing was refused", 443)).await;
    refuse(socks(b"denied.example", 443)).await;
    for n in 0..40 {
        refuse(socks(format!("h{n}.example").as_bytes(), 80)).await;
    }
    let denied = door.log().denied();
    assert_eq!(denied.len(), 32, "{denied:?}");
    assert_eq!(denied[0], "(a malformed name of 32 bytes):443");
    assert_eq!(denied[1], "denied.example:443");
    assert_eq!(door.log().more(), 10);
    let askable = door.log().askable();
    assert_eq!(askable.len(), 30, "neither the forged nor the denied one");
    assert_eq!(askable[0], "h0.example:80");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_request_loses_its_userinfo_and_hop_by_hop_headers() {
    let port = origin().await;
    let proxy = Proxy::default();
    let door = proxy
        .door(rules(&[format!("127.0.0.1:{port}")], &[]), DoorAt::Loopback)
        .unwrap();
    let mut stream = connect(&door).await;
    let request = format!(
        "GET http://user:pw@127.0.0.1:{port}/hop HTTP/1.1\r\nhost: x\r\nconnection: close, x-secret\r\nx-secret: 1\r\nproxy-authorization: Basic eA==\r\nx-kept: 2\r\n\r\n"
    );
    let seen = exchange(&mut stream, request.as_bytes()).await;
    assert!(seen.contains("origin saw: GET /hop"), "{seen}");
    assert!(
        seen.contains(&format!("host: 127.0.0.1:{port}\r\n")),
        "{seen}"
    );
    assert!(seen.contains("x-kept: 2"), "{seen}");
    for gone in ["pw@", "x-secret", "proxy-authorization"] {
        assert!(!seen.contains(gone), "{gone}: {seen}");
    }
}

/// A connection as the forwarder accepts it on its listener, passed
/// through a door's far end `far`: the client's side.
fn passed_tcp(far: &std::os::fd::OwnedFd) -> TcpStream {
    use std::os::fd::AsFd;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    dsh_net_proxy::forward::pass_socket(far.as_fd(), accepted.as_fd()).unwrap();
    client.set_nonblocking(true).unwrap();
    TcpStream::from_std(client).unwrap()
}

/// The forwarder hands the proxy the TCP connection it accepted, served
/// directly (no byte copied in between); a passed descriptor that is no
/// stream socket (a file, a datagram socket) is closed unserved, and the
/// door goes on serving what comes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passed_tcp_connection_is_served_and_what_is_no_stream_is_refused() {
    use std::os::fd::AsFd;
    let port = origin().await;
    let proxy = Proxy::default();
    let door = proxy
        .door(rules(&[format!("127.0.0.1:{port}")], &[]), DoorAt::Passed)
        .unwrap();
    let far = door.far_end().expect("a passed door has a far end");
    // What a hostile forwarder could send instead of a connection.
    let file = std::fs::File::open("/dev/null").unwrap();
    dsh_net_proxy::forward::pass_socket(far.as_fd(), file.as_fd()).unwrap();
    let datagram = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    dsh_net_proxy::forward::pass_socket(far.as_fd(), datagram.as_fd()).unwrap();
    let mut client = passed_tcp(&far);
    let request =
        format!("GET http://127.0.0.1:{port}/tcp HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    let seen = exchange(&mut client, request.as_bytes()).await;
    assert!(seen.contains("origin saw: GET /tcp"), "{seen}");
    assert!(door.log().denied().is_empty(), "{:?}", door.log().denied());
}

/// An origin that echoes what it gets until the client's end, then ends.
async fn echo() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.into_split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
                let _ = write.shutdown().await;
            });
        }
    });
    port
}

/// Sends `bytes` through an agreed tunnel, half-closes, and reads back
/// all the echo: what came back.
async fn through_tunnel(mut stream: TcpStream, bytes: &[u8], port: u16) -> Vec<u8> {
    let request = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nhost: x\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (mut read, mut write) = stream.into_split();
    let sent = bytes.to_vec();
    let sending = tokio::spawn(async move {
        write.write_all(&sent).await.unwrap();
        write.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), read.read_to_end(&mut back)).await;
    assert!(read.is_ok(), "the echo did not end");
    sending.await.unwrap();
    back
}

/// A tunnel moves every byte both ways, in order, and passes each side's
/// end on (the bytes are spliced between the sockets, not copied): over a
/// loopback door and over a TCP connection passed through a door.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_carries_every_byte_both_ways_and_passes_the_end_on() {
    let port = echo().await;
    let bytes: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    let proxy = Proxy::default();
    let allowed = || rules(&[format!("127.0.0.1:{port}")], &[]);
    let loopback = proxy.door(allowed(), DoorAt::Loopback).unwrap();
    let back = through_tunnel(connect(&loopback).await, &bytes, port).await;
    assert!(
        back == bytes,
        "loopback door: {} of {} bytes came back",
        back.len(),
        bytes.len()
    );

    let passed = proxy.door(allowed(), DoorAt::Passed).unwrap();
    let far = passed.far_end().unwrap();
    let back = through_tunnel(passed_tcp(&far), &bytes, port).await;
    assert!(
        back == bytes,
        "passed door: {} of {} bytes came back",
        back.len(),
        bytes.len()
    );
}

/// An origin that sends `AAAA`, an urgent (out-of-band) `U`, then `BBBB`,
/// and closes.
async fn urgent_origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let stream = stream.into_std().unwrap();
            stream.set_nonblocking(false).unwrap();
            std::thread::spawn(move || {
                use std::io::Write;
                let mut stream = stream;
                stream.write_all(b"AAAA").unwrap();
                rustix::net::send(&stream, b"U", rustix::net::SendFlags::OOB).unwrap();
                stream.write_all(b"BBBB").unwrap();
            });
        }
    });
    port
}

/// A splice stops at a peer's urgent byte: the tunnel moves past it as a
/// plain read does (the byte skipped) and carries the rest, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urgent_data_neither_cuts_nor_stalls_a_tunnel() {
    let downstream = urgent_origin().await;
    let upstream = echo().await;
    let proxy = Proxy::default();
    let door = proxy
        .door(
            rules(
                &[
                    format!("127.0.0.1:{downstream}"),
                    format!("127.0.0.1:{upstream}"),
                ],
                &[],
            ),
            DoorAt::Loopback,
        )
        .unwrap();
    // From the origin to the client.
    let mut stream = connect(&door).await;
    let request = format!("CONNECT 127.0.0.1:{downstream} HTTP/1.1\r\nhost: x\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    assert!(head(&mut stream).await.starts_with("HTTP/1.1 200"));
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the tunnel stalled at the urgent byte");
    assert_eq!(String::from_utf8_lossy(&got), "AAAABBBB");
    // From the client to the origin (an echo), then back.
    let mut stream = connect(&door).await;
    let request = format!("CONNECT 127.0.0.1:{upstream} HTTP/1.1\r\nhost: x\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    assert!(head(&mut stream).await.starts_with("HTTP/1.1 200"));
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    let back = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = stream;
        stream.write_all(b"AAAA").unwrap();
        rustix::net::send(&stream, b"U", rustix::net::SendFlags::OOB).unwrap();
        stream.write_all(b"BBBB").unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut back = Vec::new();
        stream.read_to_end(&mut back).map(|_| back)
    })
    .await
    .unwrap()
    .expect("the echo ends");
    assert_eq!(String::from_utf8_lossy(&back), "AAAABBBB");
}
