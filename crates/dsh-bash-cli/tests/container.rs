//! `--container IMAGE`: a session's commands in a container of its own,
//! through the real binary and a real engine (podman, from Debian's
//! packages), from an image built from a minimal Debian root file system
//! (`.ci/run`: mmdebstrap, then `podman import`; no image registry).
//!
//! `DSH_TEST_CONTAINER_IMAGE` names the image; without it (or without
//! podman) the tests skip loudly, and fail under
//! `DSH_TEST_REQUIRE_CONTAINER=1`. Run as root (rootless podman is not
//! exercised here: the machine gives uid 65534 no subordinate ids).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{confined, RawServer};
use serde_json::Value;

/// The image, or a loud skip.
fn image_or_skip(what: &str) -> Option<String> {
    let required = std::env::var("DSH_TEST_REQUIRE_CONTAINER").is_ok_and(|v| v == "1");
    let image = std::env::var("DSH_TEST_CONTAINER_IMAGE").ok();
    let podman = Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    match image {
        Some(image) if podman => Some(image),
        _ => {
            let why = format!("{what}: needs podman and DSH_TEST_CONTAINER_IMAGE (an image with bash; .ci/run builds one with mmdebstrap)");
            assert!(!required, "{why} (DSH_TEST_REQUIRE_CONTAINER=1)");
            eprintln!("SKIP {why}");
            None
        }
    }
}

/// A workspace of the test's own, outside /tmp (the container's /tmp is
/// its own).
fn workspace(name: &str) -> PathBuf {
    let dir = confined::base().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `dsh-bash run --container IMAGE --json ARGS -- COMMAND` in `ws`.
fn run_in(image: &str, ws: &Path, args: &[&str], command: &str) -> Value {
    let output = Command::new(confined::binary())
        .args(["run", "--json", "--container", image, "--workdir"])
        .arg(ws)
        .args(args)
        .args(["--", command])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    confined::result_json(&output)
}

/// Every container of any dsh-bash server, by name.
fn our_containers() -> Vec<String> {
    owned_containers()
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// Every container of any dsh-bash server: its name and its server's pid.
fn owned_containers() -> Vec<(String, u32)> {
    let output = Command::new("podman")
        .args([
            "ps",
            "--all",
            "--filter",
            "label=io.dsh-bash.server",
            "--format",
        ])
        .arg("{{.Names}} {{index .Labels \"io.dsh-bash.server\"}}")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "podman ps: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (name, owner) = line.split_once(' ')?;
            let pid = owner.rsplit(':').nth(1)?.parse().ok()?;
            Some((name.to_owned(), pid))
        })
        .collect()
}

/// The containers the server `pid` made.
fn containers_of(pid: u32) -> Vec<String> {
    owned_containers()
        .into_iter()
        .filter(|(_, owner)| *owner == pid)
        .map(|(name, _)| name)
        .collect()
}

fn container_name(result: &Value) -> String {
    result["sandbox"]["container"]["name"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_command_runs_in_the_image_and_writes_only_the_workspace() {
    let Some(image) = image_or_skip("the container's file system") else {
        return;
    };
    let ws = workspace("container-fs");
    let result = run_in(
        &image,
        &ws,
        &[],
        "cat /etc/debian_version; echo made-inside > made; touch /etc/planted 2>&1; touch /usr/planted 2>&1; echo tmp > /tmp/t && cat /tmp/t",
    );
    let out = result["stdout"]["text"].as_str().unwrap();
    // The image's Debian, not the host's files.
    let version = out.lines().next().unwrap();
    assert!(version.starts_with("12."), "{out}");
    assert_eq!(
        std::fs::read_to_string(ws.join("made")).unwrap(),
        "made-inside\n"
    );
    assert_eq!(out.matches("Read-only file system").count(), 2, "{out}");
    assert!(out.ends_with("tmp\n"), "{out}");
    let sandbox = &result["sandbox"];
    assert_eq!(sandbox["backend"], "container", "{result:#}");
    assert_eq!(sandbox["container"]["engine"], "podman");
    assert_eq!(sandbox["container"]["image"], image.as_str());
    assert!(sandbox["container"]["digest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert_eq!(sandbox["network"]["mode"], "off");
    // Gone with its (one-command) session.
    assert!(!our_containers().contains(&container_name(&result)));
}

#[test]
fn there_is_no_network_unless_asked_and_then_the_engines() {
    let Some(image) = image_or_skip("the container's network") else {
        return;
    };
    let ws = workspace("container-net");
    let interfaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '";
    let off = run_in(&image, &ws, &[], interfaces);
    assert_eq!(off["stdout"]["text"], "lo ", "{off:#}");
    // The host's loopback is not the container's: a server there is
    // out of reach.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reach = run_in(
        &image,
        &ws,
        &[],
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached || echo refused"),
    );
    assert!(
        reach["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{reach:#}"
    );
    let on = run_in(&image, &ws, &["--network", "on"], interfaces);
    let named = on["stdout"]["text"].as_str().unwrap();
    assert!(named.starts_with("lo ") || named.contains(" lo "), "{on:#}");
    assert!(
        named.split_whitespace().count() >= 2,
        "no interface but lo: {on:#}"
    );
    assert_eq!(on["sandbox"]["network"]["mode"], "on");
}

/// An origin on the host's loopback that answers every request with
/// `body`; its port.
fn origin(body: &'static str) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// A GET of `http://127.0.0.1:PORT/` through the proxy the command's
/// `HTTP_PROXY` names (bash's /dev/tcp: the image has no curl).
fn get_through_proxy(port: u16) -> String {
    format!(
        "case $HTTP_PROXY in http://127.0.0.1:*) ;; *) echo \"no proxy: $HTTP_PROXY\"; exit 3;; esac; \
         p=${{HTTP_PROXY##*:}}; exec 3<>/dev/tcp/127.0.0.1/$p || exit 4; \
         printf 'GET http://127.0.0.1:{port}/ HTTP/1.1\\r\\nhost: 127.0.0.1\\r\\nconnection: close\\r\\n\\r\\n' >&3; \
         cat <&3"
    )
}

#[test]
fn under_allow_the_allow_list_reaches_a_listed_host_and_refuses_another() {
    let Some(image) = image_or_skip("the container's allow-list") else {
        return;
    };
    let ws = workspace("container-allow");
    let allowed = origin("allowed origin says hi");
    let other = origin("other origin must not be reached");
    let host = format!("127.0.0.1:{allowed}");
    let flags = ["--network", "allow", "--allow-host", host.as_str()];
    let reached = run_in(&image, &ws, &flags, &get_through_proxy(allowed));
    let text = reached["stdout"]["text"].as_str().unwrap();
    assert!(text.contains("allowed origin says hi"), "{reached:#}");
    let network = &reached["sandbox"]["network"];
    assert_eq!(network["mode"], "allow", "{reached:#}");
    assert_eq!(
        network["denied"].as_array().map_or(0, Vec::len),
        0,
        "{reached:#}"
    );
    // Another port of the same address is not on the list: the proxy
    // refuses it, and the result names it.
    let refused = run_in(&image, &ws, &flags, &get_through_proxy(other));
    let text = refused["stdout"]["text"].as_str().unwrap();
    assert!(!text.contains("must not be reached"), "{refused:#}");
    assert!(text.starts_with("HTTP/1.1 403"), "{refused:#}");
    let denied = refused["sandbox"]["network"]["denied"].to_string();
    assert!(
        denied.contains(&format!("127.0.0.1:{other}")),
        "{refused:#}"
    );
    // Nothing but the proxy leaves: the origin itself is out of reach.
    let direct = run_in(
        &image,
        &ws,
        &flags,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{allowed} && echo reached || echo refused"),
    );
    assert!(
        direct["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{direct:#}"
    );
}

/// The user `.ci/run` prepares for rootless podman (subordinate ids,
/// storage, the test image loaded): its name, uid and home; or a loud
/// skip.
fn rootless_or_skip() -> Option<(String, u32, String)> {
    let required = std::env::var("DSH_TEST_REQUIRE_ROOTLESS").is_ok_and(|v| v == "1");
    let user = std::env::var("DSH_TEST_ROOTLESS_USER").ok();
    let entry = user.as_deref().and_then(|user| {
        let out = Command::new("getent")
            .args(["passwd", user])
            .output()
            .ok()?;
        let line = String::from_utf8(out.stdout).ok()?;
        let fields: Vec<&str> = line.trim().split(':').collect();
        Some((
            user.to_owned(),
            fields.get(2)?.parse().ok()?,
            (*fields.get(5)?).to_owned(),
        ))
    });
    if entry.is_none() {
        let why = "rootless podman: needs DSH_TEST_ROOTLESS_USER, a user with subordinate ids and the test image in its podman storage (.ci/run makes one)";
        assert!(!required, "{why} (DSH_TEST_REQUIRE_ROOTLESS=1)");
        eprintln!("SKIP {why}");
    }
    entry
}

/// `command` run as `user` with a clean environment of its own.
fn as_rootless(user: &str, home: &str, program: &Path) -> Command {
    let mut command = Command::new("runuser");
    command
        .args(["-u", user, "--", "env", "-i"])
        .arg(format!("HOME={home}"))
        .arg("PATH=/usr/sbin:/usr/bin:/sbin:/bin")
        .arg("DSH_BASH_SHELL_SNAPSHOT=off")
        .arg(program);
    command
}

#[test]
fn rootless_podman_runs_the_session_and_says_which_limits_it_cannot_hold() {
    let Some(image) = image_or_skip("rootless podman") else {
        return;
    };
    let Some((user, uid, home)) = rootless_or_skip() else {
        return;
    };
    let ws = workspace("container-rootless");
    confined::chown(&ws, uid);
    let output = as_rootless(&user, &home, confined::binary())
        .args([
            "run",
            "--json",
            "--container",
            &image,
            "--max-memory",
            "256M",
            "--workdir",
        ])
        .arg(&ws)
        .args(["--", "echo rootless > made && id -u"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let result = confined::result_json(&output);
    assert_eq!(result["exit_code"], 0, "{result:#}");
    // The container's root is the user on the host: what it made in the
    // workspace is the user's.
    assert_eq!(result["stdout"]["text"], "0\n", "{result:#}");
    let made = std::fs::metadata(ws.join("made")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&made), uid);
    assert_eq!(result["sandbox"]["backend"], "container", "{result:#}");
    let limits = &result["limits"];
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        assert_eq!(limits["memory_bytes"], 256 << 20, "{result:#}");
    } else {
        // cgroup v1: rootless podman ignores every limit; the result says
        // so instead of claiming one.
        assert_eq!(limits["partial"], true, "{result:#}");
        assert!(
            limits["missing"].to_string().contains("memory"),
            "{result:#}"
        );
        assert!(limits["memory_bytes"].is_null(), "{result:#}");
    }
    // The session's container is gone with it.
    let left = as_rootless(&user, &home, Path::new("/usr/bin/podman"))
        .args([
            "ps",
            "--all",
            "--quiet",
            "--filter",
            "label=io.dsh-bash.server",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
}

#[test]
fn a_memory_limit_holds_for_the_whole_container() {
    let Some(image) = image_or_skip("the container's memory limit") else {
        return;
    };
    let ws = workspace("container-mem");
    // The limit is in force before anything tries it.
    let shown = run_in(
        &image,
        &ws,
        &["--max-memory", "256M"],
        "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
    );
    assert_eq!(shown["stdout"]["text"], "268435456\n", "{shown:#}");
    assert_eq!(shown["limits"]["mechanism"], "container");
    assert_eq!(shown["limits"]["memory_bytes"], 268435456);
    // A hog that wants 1 GiB in one bash (a variable holding it), by far
    // the container's largest process when the limit is reached (the
    // kernel kills the largest: a hog near the server's own size could
    // take the server inside instead, a limit the docs state); backstop:
    // the command's own timeout.
    let hog = run_in(
        &image,
        &ws,
        &["--max-memory", "256M", "--timeout", "60000"],
        "bash -c 'x=$(head -c 1G /dev/zero | tr \"\\0\" a); echo kept ${#x}'; echo status $?",
    );
    assert_eq!(hog["timed_out"], false, "{hog:#}");
    assert_eq!(
        hog["stdout"]["text"], "status 137\n",
        "the hog was not killed: {hog:#}"
    );
}

fn call(server: &mut RawServer, id: u64, command: &str) -> Value {
    let request = serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": command, "description": "Check the session's container"}}
    });
    server.send(&request.to_string());
    let answer = server.next();
    assert_eq!(answer["id"], id, "{answer}");
    answer
}

fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn mcp_server(image: &str, ws: &Path) -> RawServer {
    let mut command = Command::new(confined::binary());
    command
        .args(["mcp", "--container", image, "--workdir"])
        .arg(ws);
    let mut server = RawServer::spawn_command(command, Stdio::inherit());
    server.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"container","version":"0"}}}"#);
    assert_eq!(server.next()["id"], 1);
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    server
}

#[test]
fn an_mcp_session_keeps_one_container_until_it_ends() {
    let Some(image) = image_or_skip("a session's container") else {
        return;
    };
    let ws = workspace("container-session");
    let mut server = mcp_server(&image, &ws);
    let pid = server.child.id();
    // Nothing is made before a command needs it.
    assert!(containers_of(pid).is_empty());
    let first = call(&mut server, 2, "echo kept > /tmp/state; echo first");
    assert!(text(&first).contains("first"), "{first}");
    let made = containers_of(pid);
    assert_eq!(made.len(), 1, "{made:?}");
    let second = call(&mut server, 3, "cat /tmp/state; cat /etc/debian_version");
    assert!(
        text(&second).contains("kept"),
        "the second call lost /tmp: {second}"
    );
    assert_eq!(containers_of(pid), made, "a second container");
    drop(server.stdin.take());
    assert!(server.child.wait().unwrap().success());
    assert!(containers_of(pid).is_empty(), "left behind: {made:?}");
}

/// Waits (bounded) until `name` is no longer among our containers.
fn gone_within(name: &str, bound: std::time::Duration) -> bool {
    let began = std::time::Instant::now();
    while began.elapsed() < bound {
        if !our_containers().iter().any(|n| n == name) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}

#[test]
fn a_killed_servers_container_ends_with_its_session() {
    let Some(image) = image_or_skip("a killed server's container") else {
        return;
    };
    let ws = workspace("container-killed");
    let mut server = mcp_server(&image, &ws);
    let pid = server.child.id();
    call(&mut server, 2, "true");
    let made = containers_of(pid);
    assert_eq!(made.len(), 1, "{made:?}");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    // Nothing of the server ran to remove it: the exec stdio closed, the
    // server inside ended, the idle process saw it and the engine removed
    // the container (--rm).
    assert!(
        gone_within(&made[0], std::time::Duration::from_secs(60)),
        "{made:?} outlived its session"
    );
}

#[test]
fn a_dead_servers_container_is_removed_by_the_next_server() {
    let Some(image) = image_or_skip("a dead server's container") else {
        return;
    };
    // A container labelled as a server of this host and pid namespace
    // whose pid is gone (a child reaped here), as an engine that crashed
    // with the server would leave it.
    let host = String::from_utf8(Command::new("uname").arg("-n").output().unwrap().stdout).unwrap();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let pidns: String = std::fs::read_link("/proc/self/ns/pid")
        .unwrap()
        .to_string_lossy()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let name = format!("dsh-bash-planted-{}", std::process::id());
    let label = format!(
        "io.dsh-bash.server={}:{}:{pidns}:{dead}:1",
        host.trim().replace(':', "_"),
        boot.trim().replace(':', "_")
    );
    let planted = Command::new("podman")
        .args([
            "run",
            "--detach",
            "--name",
            &name,
            "--label",
            &label,
            // Within this machine's own limits (an engine's defaults may
            // be above them).
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            &image,
            "sleep",
            "600",
        ])
        .output()
        .unwrap();
    assert!(
        planted.status.success(),
        "{}",
        String::from_utf8_lossy(&planted.stderr)
    );
    assert!(our_containers().contains(&name));
    let ws = workspace("container-dead-owner");
    let next = run_in(&image, &ws, &[], "true");
    assert_eq!(next["exit_code"], 0, "{next:#}");
    let left = !gone_within(&name, std::time::Duration::from_secs(1));
    let _ = Command::new("podman")
        .args(["rm", "--force", "--time", "0", &name])
        .output();
    assert!(!left, "the next server left {name}");
}

mod conformance {
    use std::sync::Arc;

    use dsh_bash::BashExecutor;

    async fn executor() -> Option<Arc<dyn BashExecutor>> {
        let image = super::image_or_skip("the conformance suite in a container")?;
        let ws = super::workspace(&format!(
            "container-conformance-{:?}",
            std::thread::current().id()
        ));
        let config = dsh_bash_container::ContainerConfig::new(
            dsh_bash_container::Engine::find(Some("podman")).unwrap(),
            image,
            ws,
            super::confined::binary().to_owned(),
        );
        Some(Arc::new(
            dsh_bash_container::ContainerBashExecutor::new(config).unwrap(),
        ))
    }

    dsh_bash_conformance::conformance_suite!(executor().await);
}

#[test]
fn what_the_host_runs_later_stays_read_only_and_the_rest_is_said() {
    let Some(image) = image_or_skip("the protected paths in a container") else {
        return;
    };
    let ws = workspace("container-protected");
    let git = Command::new("git")
        .args(["init", "-q"])
        .arg(&ws)
        .status()
        .unwrap();
    assert!(git.success());
    let result = run_in(
        &image,
        &ws,
        &[],
        "echo evil > .git/hooks/pre-commit; echo evil >> .git/config; echo export X=1 > .envrc; echo fine > work",
    );
    let out = result["stderr"]["text"].as_str().unwrap();
    assert_eq!(
        out.matches("Read-only file system").count(),
        2,
        "{result:#}"
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert!(!std::fs::read_to_string(ws.join(".git/config"))
        .unwrap()
        .contains("evil"));
    assert_eq!(std::fs::read_to_string(ws.join("work")).unwrap(), "fine\n");
    // What a mount could not keep (an .envrc made now) is said, not hidden.
    assert!(ws.join(".envrc").exists());
    let sandbox = &result["sandbox"];
    assert_eq!(sandbox["enforcement"], "partial", "{result:#}");
    assert_eq!(
        sandbox["gaps"],
        serde_json::json!(["protected-paths", "hidden-paths"])
    );
    let protected: Vec<&str> = sandbox["protected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let hooks = ws.join(".git/hooks");
    assert!(
        protected.contains(&hooks.to_str().unwrap()),
        "{protected:?}"
    );
}

#[test]
fn a_command_cannot_widen_the_next_session_nor_reach_its_server() {
    let Some(image) = image_or_skip("what a command leaves for later") else {
        return;
    };
    let ws = workspace("container-later");
    // The server inside is not dumpable: its descriptors are not the
    // command's to write a forged answer to.
    let forge = run_in(
        &image,
        &ws,
        &[],
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^/run/dsh-bash/dsh-bash mcp ' || continue; \
         if echo '{}' > $p/fd/1 2>/dev/null; then echo wrote-to-server; else echo refused; fi; done",
    );
    let out = forge["stdout"]["text"].as_str().unwrap();
    assert!(
        out.contains("refused") && !out.contains("wrote-to-server"),
        "{forge:#}"
    );
    // A workspace policy file that turns the network on is refused by the
    // next session, not obeyed.
    let plant = run_in(
        &image,
        &ws,
        &[],
        "mkdir -p .dsh-bash && printf '[network]\\nmode = \"on\"\\n' > .dsh-bash/config.toml",
    );
    assert_eq!(plant["exit_code"], 0, "{plant:#}");
    let next = Command::new(confined::binary())
        .args(["run", "--json", "--container", &image, "--workdir"])
        .arg(&ws)
        .args(["--", "cat /proc/net/dev"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let error = String::from_utf8_lossy(&next.stderr);
    assert_eq!(next.status.code(), Some(125), "{error}");
    assert!(error.contains("wider than \"off\""), "{error}");
    // A binary inside the workspace is refused: a command could replace it.
    std::fs::remove_dir_all(ws.join(".dsh-bash")).unwrap();
    let inside = ws.join("dsh-bash");
    std::fs::copy(confined::binary(), &inside).unwrap();
    let own = Command::new(&inside)
        .args(["run", "--container", &image, "--workdir"])
        .arg(&ws)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let error = String::from_utf8_lossy(&own.stderr);
    assert_eq!(own.status.code(), Some(125), "{error}");
    assert!(error.contains("lies inside the workspace"), "{error}");
}
