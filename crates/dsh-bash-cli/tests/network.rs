//! The network policy, with real sockets, as root and as an unprivileged
//! user, each backend forced: with `--network off` a TCP connect to a
//! listener on the host's 127.0.0.1, a UDP datagram to it and a DNS query
//! to a resolver there all fail, judged by what the host side received;
//! with `--network on` all three arrive. With it off, vsock (which a
//! network namespace does not hold) is refused too, and under Landlock a
//! bare `listen` cannot serve the outside. The result states the policy.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::{ErrorKind, Read};
use std::net::{TcpListener, UdpSocket};
use std::process::Stdio;

use common::confined::{as_user, base, binary, chown, skip, User, NOBODY};

/// What the host side saw of one command.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    tcp: bool,
    udp: bool,
    dns_query: bool,
    resolved: bool,
}

/// The host side: a TCP listener, a UDP receiver and a resolver that
/// answers every query, all on 127.0.0.1.
struct Host {
    tcp: TcpListener,
    udp: UdpSocket,
    dns: UdpSocket,
}

/// A DNS query for `example.com` (A, IN) with id 0x1234.
const QUERY: &str =
    r"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01";

impl Host {
    fn new() -> Host {
        let host = Host {
            tcp: TcpListener::bind("127.0.0.1:0").unwrap(),
            udp: UdpSocket::bind("127.0.0.1:0").unwrap(),
            dns: UdpSocket::bind("127.0.0.1:0").unwrap(),
        };
        host.tcp.set_nonblocking(true).unwrap();
        host.udp.set_nonblocking(true).unwrap();
        host
    }

    /// The command: each way out, with its own marker.
    fn command(&self, tag: &str) -> String {
        let tcp = self.tcp.local_addr().unwrap().port();
        let udp = self.udp.local_addr().unwrap().port();
        let dns = self.dns.local_addr().unwrap().port();
        format!(
            "(exec 3<>/dev/tcp/127.0.0.1/{tcp} && echo tcp-{tag} >&3); \
             echo udp-{tag} > /dev/udp/127.0.0.1/{udp}; \
             (exec 4<>/dev/udp/127.0.0.1/{dns} && printf '{QUERY}' >&4 && read -t 2 -r -N 2 reply <&4 && echo resolved); \
             getent hosts localhost > /dev/null && echo files-work; \
             python3 -c 'import socket\ntry:\n    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print(\"vsock-open\")\nexcept OSError as e:\n    print(\"vsock-refused:%d\" % e.errno)'; \
             python3 -c 'import socket\ntry:\n    s = socket.socket(); s.listen(); print(\"listening-on\", s.getsockname()[0])\nexcept OSError as e:\n    print(\"listen-refused:%d\" % e.errno)'"
        )
    }

    /// Answers one query if one arrives before the test's own one-byte
    /// "done" (the resolver runs beside the command, on its own thread).
    fn resolver(&self) -> std::thread::JoinHandle<bool> {
        let dns = self.dns.try_clone().unwrap();
        dns.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let Ok((n, from)) = dns.recv_from(&mut buf) else {
                return false;
            };
            if n < 12 {
                return false;
            }
            // The query back with QR set and one answer: 127.0.0.2.
            let mut reply = buf[..n].to_vec();
            reply[2] |= 0x80;
            reply[7] = 1;
            reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 2]);
            let _ = dns.send_to(&reply, from);
            true
        })
    }

    fn seen(&self, tag: &str, resolver: std::thread::JoinHandle<bool>, stdout: &str) -> Seen {
        let mut seen = Seen::default();
        match self.tcp.accept() {
            Ok((mut stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(2)))
                    .unwrap();
                let mut text = String::new();
                let _ = stream.read_to_string(&mut text);
                seen.tcp = text.contains(&format!("tcp-{tag}"));
            }
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Err(err) => panic!("{err}"),
        }
        let mut buf = [0u8; 256];
        while let Ok(n) = self.udp.recv(&mut buf) {
            seen.udp |= String::from_utf8_lossy(&buf[..n]).contains(&format!("udp-{tag}"));
        }
        // The command is over: whatever it sent has arrived.
        let done = UdpSocket::bind("127.0.0.1:0").unwrap();
        done.send_to(b"!", self.dns.local_addr().unwrap()).unwrap();
        seen.dns_query = resolver.join().unwrap();
        seen.resolved = stdout.contains("resolved");
        seen
    }
}

fn run(user: User, backend: &str, network: &str, command: &str) -> Option<serde_json::Value> {
    let ws = base().join(format!("net-{backend}-{user:?}"));
    std::fs::create_dir_all(&ws).unwrap();
    if user == User::Nobody {
        chown(&ws, NOBODY);
    }
    let output = as_user(user, binary().to_str().unwrap())
        .args(["run", "--json", "--sandbox", "workspace-write"])
        .args(["--sandbox-backend", backend, "--network", network])
        .arg("--workdir")
        .arg(&ws)
        .arg("--")
        .arg(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let result = serde_json::from_slice(&output.stdout).ok();
    if result.is_none() {
        skip(&format!(
            "network under {backend} as {user:?}: the backend is unusable here ({})",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    result
}

#[test]
fn network_off_cuts_tcp_udp_and_dns_and_on_lets_them_through() {
    let _ = std::fs::remove_dir_all(base());
    std::fs::create_dir_all(base()).unwrap();
    std::fs::set_permissions(base(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for user in [User::Root, User::Nobody] {
        for backend in ["bwrap", "landlock"] {
            for network in ["off", "on"] {
                let tag = format!("{backend}-{user:?}-{network}");
                let host = Host::new();
                let resolver = host.resolver();
                let Some(result) = run(user, backend, network, &host.command(&tag)) else {
                    let _ = host.seen(&tag, resolver, "");
                    break;
                };
                let stdout = result["stdout"]["text"].as_str().unwrap_or("");
                let seen = host.seen(&tag, resolver, stdout);
                let open = network == "on";
                assert_eq!(
                    seen,
                    Seen {
                        tcp: open,
                        udp: open,
                        dns_query: open,
                        resolved: open
                    },
                    "{tag}: {result}"
                );
                assert!(
                    stdout.contains("files-work"),
                    "{tag}: name lookups from files still work: {result}"
                );
                // vsock reaches the hypervisor from any namespace: refused
                // (EPERM) with the network off, open with it on.
                // (A kernel without vsock answers EAFNOSUPPORT, 97, when the
                // filter lets the call through.)
                let vsock_ok = if open {
                    stdout.contains("vsock-open") || stdout.contains("vsock-refused:97")
                } else {
                    stdout.contains("vsock-refused:1")
                };
                assert!(vsock_ok, "{tag}: vsock: {result}");
                // A bare listen picks a port Landlock does not see: refused
                // there with the network off; under bwrap it is the
                // sandbox's own namespace, which nothing outside reaches.
                let listen = if open || backend == "bwrap" {
                    "listening-on 0.0.0.0"
                } else {
                    "listen-refused:1"
                };
                assert!(stdout.contains(listen), "{tag}: {listen}: {result}");
                let facts = &result["sandbox"];
                assert_eq!(facts["network"]["mode"], network, "{tag}: {facts}");
                let gaps = facts["gaps"].as_array().unwrap();
                for hole in ["tcp", "udp"] {
                    assert!(
                        !gaps.contains(&serde_json::json!(hole)),
                        "{tag}: this kernel can cut {hole}: {facts}"
                    );
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(base());
}
