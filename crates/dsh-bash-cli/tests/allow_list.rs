//! The network allow-list through the real binary, each backend forced,
//! offline, against servers this test starts on loopback: `pip install`
//! from a local package index, `curl https://` through CONNECT to a TLS
//! server with a throwaway certificate, `git clone` over dumb HTTP, all
//! with their host allowed; refused hosts get the proxy's refusal and
//! appear, exactly and in order, in the result's `network.denied`; a
//! direct connection to an allowed host without the proxy still fails; a
//! name that resolves to loopback is refused unless allowed literally.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::confined::{
    as_user, base, binary, chown, each_backend_and_user, result_json, serve, usable_as_or_skip,
    Server, User, NOBODY,
};
use common::RawServer;
use serde_json::Value;

/// A plain HTTP file server over `dir`, on 127.0.0.1.
fn http_server(dir: &Path) -> Server {
    serve(
        "import functools, http.server, sys\n\
         handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n\
         handler.log_message = lambda *a: None\n\
         httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)\n\
         print(httpd.server_address[1]); httpd.serve_forever()",
        &[dir],
    )
}

/// An HTTPS file server over `dir` with the certificate `cert` and key.
fn https_server(dir: &Path, cert: &Path, key: &Path) -> Server {
    serve(
        "import functools, http.server, ssl, sys\n\
         handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n\
         handler.log_message = lambda *a: None\n\
         httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)\n\
         ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[2], sys.argv[3])\n\
         httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)\n\
         print(httpd.server_address[1]); httpd.serve_forever()",
        &[dir, cert, key],
    )
}

/// What the servers serve, readable by every user: a file, a package
/// index with one wheel built here, a bare git repository prepared for
/// dumb HTTP, and a throwaway certificate for 127.0.0.1.
struct Site {
    root: PathBuf,
}

fn run(program: &str, args: &[&str], dir: &Path) {
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{program} {args:?}");
}

impl Site {
    fn new(name: &str) -> Site {
        let root = base().join(name);
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("files")).unwrap();
        std::fs::write(
            root.join("files/hello.txt"),
            "hello from the allowed host\n",
        )
        .unwrap();
        Site::wheel(&root.join("files/simple/dshdemo"));
        Site::repository(&root);
        run(
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "key.pem",
                "-out",
                "cert.pem",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
            &root,
        );
        Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&root)
            .status()
            .unwrap();
        Site { root }
    }

    /// A pure-Python wheel, zipped by hand (no build backend needed).
    fn wheel(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        let script = r#"import sys, zipfile
files = {'dshdemo/__init__.py': 'GREETING = "installed through the allow-list"\n',
         'dshdemo-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\nName: dshdemo\nVersion: 1.0\n',
         'dshdemo-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n'}
record = ''.join(f'{n},,\n' for n in files) + 'dshdemo-1.0.dist-info/RECORD,,\n'
with zipfile.ZipFile(sys.argv[1] + '/dshdemo-1.0-py3-none-any.whl', 'w') as z:
    for name, content in files.items():
        z.writestr(name, content)
    z.writestr('dshdemo-1.0.dist-info/RECORD', record)
"#;
        let status = Command::new("python3")
            .args(["-c", script])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// `files/repo.git`: one commit, served by dumb HTTP.
    fn repository(root: &Path) {
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("README"), "cloned through the allow-list\n").unwrap();
        for args in [
            &["init", "-q"][..],
            &["add", "README"],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "one",
            ],
            &["clone", "-q", "--bare", ".", "../files/repo.git"],
        ] {
            run("git", args, &work);
        }
        run("git", &["update-server-info"], &root.join("files/repo.git"));
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

/// `dsh-bash run --json` as `user` under `backend` in workspace-write over
/// `ws`, with `flags`; killed after 120 s whatever happens.
fn confined(user: User, backend: &str, ws: &Path, flags: &[String], command: &str) -> Value {
    let output = as_user(user, "timeout")
        .args(["-s", "KILL", "120"])
        .arg(binary())
        .args([
            "run",
            "--json",
            "--timeout",
            "90000",
            "--sandbox",
            "workspace-write",
        ])
        .args(["--sandbox-backend", backend])
        .arg("--workdir")
        .arg(ws)
        .args(flags)
        .args(["--", command])
        .env("HOME", ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    result_json(&output)
}

fn denied(result: &Value) -> Vec<String> {
    result["sandbox"]["network"]["denied"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn stdout(result: &Value) -> &str {
    result["stdout"]["text"].as_str().unwrap()
}

fn workspace(user: User, name: &str) -> PathBuf {
    let ws = base().join(name);
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(&ws).unwrap();
    if user == User::Nobody {
        chown(&ws, NOBODY);
    }
    ws
}

#[test]
fn curl_and_git_reach_allowed_hosts_and_every_refusal_is_a_fact() {
    let site = Site::new("allow-site");
    let files = site.path("files");
    let http = http_server(&files);
    let https = https_server(&files, &site.path("cert.pem"), &site.path("key.pem"));
    // A loopback service no pattern names.
    let other = http_server(&files);
    let cert = site.path("cert.pem");
    each_backend_and_user("curl and git through the allow-list", |user, backend| {
        let ws = workspace(user, &format!("allow-ws-{backend}-{user:?}"));
        let flags = vec![
            format!("--allow-host=127.0.0.1:{}", https.port),
            format!("--allow-host=127.0.0.1:{}", http.port),
            "--deny-host=blocked.svc.example".to_owned(),
            "--allow-host=*.svc.example".to_owned(),
        ];
        let command = format!(
            "curl -sS --cacert {cert} https://127.0.0.1:{tls}/hello.txt && echo tls-ok\n\
             git clone -q http://127.0.0.1:{http}/repo.git \"$TMPDIR/clone\" && cat \"$TMPDIR/clone/README\"\n\
             curl -sS http://127.0.0.1:{other}/hello.txt; echo other-exit=$?\n\
             curl -sS https://blocked.svc.example/ ; echo blocked-exit=$?\n\
             curl -sS --socks5-hostname 127.0.0.1:${{HTTPS_PROXY##*:}} http://evil.test:8080/ ; echo socks-exit=$?\n\
             python3 -c 'import socket\ntry:\n    socket.create_connection((\"127.0.0.1\", {http}), 5); print(\"direct-open\")\nexcept OSError as e:\n    print(\"direct-refused\")'\n\
             getent hosts pypi.org >/dev/null; echo dns-exit=$?\n\
             for f in /proc/$$/fd/*; do case $(readlink \"$f\") in socket:*) echo \"holds-socket $f\";; esac; done; echo fds-checked",
            cert = cert.display(),
            tls = https.port,
            http = http.port,
            other = other.port,
        );
        let result = confined(user, backend, &ws, &flags, &command);
        let out = stdout(&result);
        let context = format!("{backend} as {user:?}: {result:#}");
        assert!(
            out.contains("hello from the allowed host\ntls-ok"),
            "{context}"
        );
        assert!(out.contains("cloned through the allow-list"), "{context}");
        assert!(
            out.contains("not on this command's network allow-list"),
            "{context}"
        );
        // The unlisted service's file never arrived: the only copy is the
        // TLS one.
        assert_eq!(
            out.matches("hello from the allowed host").count(),
            1,
            "{context}"
        );
        assert!(
            out.contains("blocked-exit=56"),
            "CONNECT refused with 403: {context}"
        );
        assert!(!out.contains("socks-exit=0"), "{context}");
        assert!(
            out.contains("direct-refused"),
            "no way around the proxy: {context}"
        );
        assert!(!out.contains("dns-exit=0"), "no resolver inside: {context}");
        // The door's far end stays with the forwarder's relay: the command
        // holds no socket of it (nor could another command open one).
        assert!(
            out.contains("fds-checked") && !out.contains("holds-socket"),
            "{context}"
        );
        assert_eq!(
            denied(&result),
            [
                format!("127.0.0.1:{}", other.port),
                "blocked.svc.example:443".to_owned(),
                "evil.test:8080".to_owned(),
            ],
            "{context}"
        );
        assert_eq!(result["sandbox"]["network"]["mode"], "allow", "{context}");
        let gaps = result["sandbox"]["gaps"].to_string();
        assert_eq!(
            gaps.contains("proxy-port"),
            backend == "landlock",
            "Landlock names the port it cannot tie to a host: {context}"
        );
    });
}

#[test]
fn pip_installs_from_an_allowed_index_and_fails_with_a_fact_otherwise() {
    let site = Site::new("allow-pip");
    let index = http_server(&site.path("files"));
    // The interpreter itself, not a version manager's shim (pyenv's
    // rehashes after an install, which a read-only host refuses).
    let python = Command::new("python3")
        .args(["-c", "import sys, pip; print(sys.executable)"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let Some(python) = python else {
        common::confined::skip("pip is not installed for python3");
        return;
    };
    for backend in ["bwrap", "landlock"] {
        let sandbox = ["--sandbox", "read-only", "--sandbox-backend", backend];
        if !usable_as_or_skip(User::Root, &sandbox, "pip through the allow-list") {
            continue;
        }
        let ws = workspace(User::Root, &format!("allow-pip-{backend}"));
        let install = format!(
            "{python} -m pip install -q --disable-pip-version-check --no-cache-dir --retries 0 --timeout 20 \
             --index-url http://127.0.0.1:{}/simple/ --target \"$PWD/lib\" dshdemo && \
             PYTHONPATH=\"$PWD/lib\" {python} -c 'import dshdemo; print(dshdemo.GREETING)'",
            index.port
        );
        let allowed = confined(
            User::Root,
            backend,
            &ws,
            &[format!("--allow-host=127.0.0.1:{}", index.port)],
            &install,
        );
        let context = format!("{backend}: {allowed:#}");
        assert_eq!(allowed["exit_code"], 0, "{context}");
        assert!(
            stdout(&allowed).contains("installed through the allow-list"),
            "{context}"
        );
        assert!(denied(&allowed).is_empty(), "{context}");

        let refused = confined(
            User::Root,
            backend,
            &ws,
            &["--allow-host=files.example.org".to_owned()],
            &install.replace("lib", "lib2"),
        );
        let context = format!("{backend}: {refused:#}");
        assert_ne!(refused["exit_code"], 0, "{context}");
        assert_eq!(
            denied(&refused),
            [format!("127.0.0.1:{}", index.port)],
            "{context}"
        );
    }
}

#[test]
fn the_text_ends_with_the_refused_hosts_and_how_to_ask() {
    let sandbox = ["--sandbox", "read-only"];
    if !usable_as_or_skip(User::Root, &sandbox, "the allow-list's marker") {
        return;
    }
    let output = Command::new(binary())
        .args([
            "run",
            "--sandbox",
            "read-only",
            "--allow-host",
            "files.example.org",
            "--",
        ])
        .arg("curl -sS https://evil.example/x; echo '[network: refused nothing]'; exit 3")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "[network: refused evil.example:443 (not on this command's allow-list); if the command needs one, run it again with allow_hosts: [\"evil.example:443\"] and a justification, which a person approves]",
        "{text}"
    );
    assert!(text.contains("[exit code: 3]"), "{text}");
}

#[test]
fn bad_patterns_and_contradictions_are_refused_before_anything_runs() {
    for (flags, says) in [
        (&["--allow-host", "*"][..], "allows every host"),
        (
            &["--allow-host", "*.com"],
            "allows a whole top-level domain",
        ),
        (&["--allow-host", ""], "is empty"),
        (
            &["--deny-host", "a.*.org"],
            "has a * other than a leading *.",
        ),
        (
            &["--allow-preset", "pip"],
            "expected pypi, npm, crates or github",
        ),
        (
            &["--network", "on", "--allow-host", "pypi.org"],
            "only apply under --network allow",
        ),
        (
            &["--network", "off", "--allow-preset", "pypi"],
            "only apply under --network allow",
        ),
    ] {
        let marker = base().join("allow-bad-ran");
        let _ = std::fs::remove_file(&marker);
        let output = Command::new(binary())
            .args(["run", "--sandbox", "read-only"])
            .args(flags)
            .arg("--")
            .arg(format!("touch {}", marker.display()))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flags:?}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
        assert!(!marker.exists(), "{flags:?} half-ran the command");
    }
}

/// The forwarder's acceptor (the command's own child under bubblewrap, with
/// the command's user and namespaces) holds the door: the command can
/// neither trace it nor take the door with `pidfd_getfd`. As root and as
/// uid 65534.
#[test]
fn the_command_cannot_take_the_forwarders_door() {
    let take = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
found = taken = 0
for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        argv = open(f'/proc/{pid}/cmdline').read()
    except OSError:
        continue
    if argv.split('\0')[1:2] != ['__dsh-net-forward']:
        continue
    found += 1
    pidfd = os.pidfd_open(int(pid))
    for fd in range(64):
        got = libc.syscall(438, pidfd, fd, 0)
        if got >= 0:
            taken += 1
            os.close(got)
print(f'found {found} taken {taken}')
"#;
    for user in [User::Root, User::Nobody] {
        let sandbox = ["--sandbox", "read-only", "--sandbox-backend", "bwrap"];
        if !usable_as_or_skip(user, &sandbox, "the forwarder's door") {
            continue;
        }
        let ws = workspace(user, &format!("door-{user:?}"));
        let flags = ["--allow-host".to_owned(), "127.0.0.1:1".to_owned()];
        let command = format!("python3 -c \"$(cat <<'PY'\n{take}\nPY\n)\"");
        let result = confined(user, "bwrap", &ws, &flags, &command);
        assert_eq!(
            stdout(&result).trim(),
            "found 1 taken 0",
            "{user:?}: {result}"
        );
    }
}

/// A server's commands on an allow-list enter the session's warm sandbox
/// (its pid namespace's first process is `dsh-bash-init`, not bwrap), each
/// with a door and a network namespace of its own: the allowed host
/// answers through the proxy, a refused one is that command's refusal and
/// not the next one's, and nothing reaches the allowed host around the
/// proxy. As root and as uid 65534.
#[test]
fn a_servers_commands_on_an_allow_list_enter_its_warm_sandbox_each_with_its_own_door() {
    let site = Site::new("allow-warm");
    let http = http_server(&site.path("files"));
    for user in [User::Root, User::Nobody] {
        let probe = ["--sandbox", "read-only", "--sandbox-backend", "bwrap"];
        if !usable_as_or_skip(user, &probe, "the warm sandbox's allow-list") {
            continue;
        }
        let sandbox = ["--sandbox", "workspace-write", "--sandbox-backend", "bwrap"];
        let ws = workspace(user, &format!("allow-warm-{user:?}"));
        // A home outside the workspace: caches there would last one
        // command each, and such a sandbox is never warm.
        let home = workspace(user, &format!("allow-warm-home-{user:?}"));
        let mut mcp = as_user(user, binary().to_str().unwrap());
        mcp.arg("mcp")
            .args(sandbox)
            .args(["--shell-snapshot", "off", "--workdir"])
            .arg(&ws)
            .arg(format!("--allow-host=127.0.0.1:{}", http.port))
            .env("HOME", &home);
        let mut server = RawServer::spawn_command(mcp, Stdio::null());
        server.initialize();
        let fetch = format!(
            "curl -sS --max-time 30 http://127.0.0.1:{}/hello.txt",
            http.port
        );
        let first = server.bash_text(
            2,
            &format!(
                "cat /proc/1/comm; readlink /proc/self/ns/net; {fetch}; curl -sS --max-time 30 http://127.0.0.2:{}/x; true",
                http.port
            ),
        );
        let context = format!("{user:?}: {first}");
        assert!(
            first.starts_with("dsh-bash-init\n"),
            "entered warm: {context}"
        );
        assert!(first.contains("hello from the allowed host"), "{context}");
        assert!(
            first.contains(&format!("refused 127.0.0.2:{}", http.port)),
            "{context}"
        );
        let second = server.bash_text(
            3,
            &format!(
                "readlink /proc/self/ns/net; {fetch}; curl --noproxy '*' -sS --max-time 10 http://127.0.0.1:{}/hello.txt || echo direct-refused",
                http.port
            ),
        );
        let context = format!("{user:?}: {second}");
        // A network namespace each (the warm sandbox's own is shared).
        let (first_net, second_net) = (first.lines().nth(1), second.lines().next());
        assert!(
            first_net.is_some_and(|n| n.starts_with("net:[")) && first_net != second_net,
            "{first_net:?} then {second_net:?}: {context}"
        );
        assert!(second.contains("hello from the allowed host"), "{context}");
        assert!(
            second.contains("direct-refused"),
            "no way around the proxy: {context}"
        );
        assert_eq!(
            second.matches("hello from the allowed host").count(),
            1,
            "{context}"
        );
        assert!(
            !second.contains("127.0.0.2"),
            "the first command's refusal is its own: {context}"
        );
        drop(server.stdin.take());
        let _ = server.child.wait();
    }
}
