//! The packages `packaging/dist.sh` writes, installed the ways the docs
//! say into scratch prefixes, each serving MCP: the wheel with pip in a new
//! venv and with `uvx`, the npm tarballs with one offline `npm install -g`,
//! and `npx -y dsh-bash` from an npm registry on loopback (the launcher and
//! its platform package as optional dependency, as the registry would
//! serve them). Offline: nothing is fetched from a public registry.
//!
//! `DSH_TEST_DIST` names the directory dist.sh wrote (relative to the
//! workspace's root; `.ci/run` builds it);
//! without it the tests skip loudly, and fail under `DSH_TEST_REQUIRE_DIST=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::confined;
use common::RawServer;

/// The dist directory, or a loud skip.
fn dist_or_skip(what: &str) -> Option<PathBuf> {
    // Relative to the workspace's root, where dist.sh writes target/dist.
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let dist = std::env::var_os("DSH_TEST_DIST").map(|dir| root.join(dir));
    let required = std::env::var("DSH_TEST_REQUIRE_DIST").is_ok_and(|v| v == "1");
    match dist {
        Some(dir) if dir.is_dir() => Some(std::path::absolute(dir).unwrap()),
        _ => {
            let why = format!("{what}: DSH_TEST_DIST names no directory (run packaging/dist.sh and set DSH_TEST_DIST=target/dist)");
            assert!(!required, "{why} (DSH_TEST_REQUIRE_DIST=1)");
            eprintln!("SKIP {why}");
            None
        }
    }
}

/// The one file in `dist` whose name starts with `prefix` and ends with
/// `suffix`.
fn artifact(dist: &Path, prefix: &str, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dist)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_str().unwrap();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{prefix}*{suffix} in {}: {found:?}",
        dist.display()
    );
    found.into_iter().next().unwrap()
}

fn succeed(command: &mut Command, what: &str) -> String {
    let output = command.stdin(Stdio::null()).output().unwrap();
    assert!(
        output.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `installed --version` says this build's version.
fn is_this_version(installed: &Path) {
    let version = succeed(
        Command::new(installed).arg("--version"),
        "dsh-bash --version",
    );
    assert_eq!(
        version.trim(),
        format!("dsh-bash {}", env!("CARGO_PKG_VERSION"))
    );
}

/// A home and npm cache of the test's own: no user's .npmrc or pip.conf.
fn isolated<'a>(command: &'a mut Command, scratch: &Path) -> &'a mut Command {
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).unwrap();
    command
        .env("HOME", &home)
        .env("npm_config_cache", scratch.join("npm-cache"))
        .env("npm_config_update_notifier", "false")
        .env("npm_config_fund", "false")
        .env("npm_config_audit", "false")
        .env("PIP_NO_INDEX", "1")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("UV_OFFLINE", "1")
        .env("UV_CACHE_DIR", scratch.join("uv-cache"))
}

/// `server` (an installed `dsh-bash mcp …`) answers the handshake, lists
/// the four tools and runs a command whose output lands in the workspace.
fn serves_mcp(mut server: Command, scratch: &Path, how: &str) {
    let workspace = scratch.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    server
        .args([
            "--workdir",
            workspace.to_str().unwrap(),
            "--shell-snapshot",
            "off",
        ])
        .stderr(Stdio::inherit());
    isolated(&mut server, scratch);
    let mut mcp = RawServer::spawn_command(server, Stdio::inherit());
    mcp.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"dist","version":"0"}}}"#);
    let hello = mcp.next();
    assert_eq!(
        hello["result"]["serverInfo"]["version"],
        env!("CARGO_PKG_VERSION"),
        "{how}: {hello}"
    );
    mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    mcp.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let tools = mcp.next();
    let mut names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{how}: {tools}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["bash", "bash_kill", "bash_output", "bash_write"],
        "{how}"
    );
    mcp.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo installed-$((6*7)) | tee made-by-the-package","description":"Say hello from the installed package"}}}"#);
    let called = mcp.next();
    let text = called["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("installed-42"), "{how}: {called}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("made-by-the-package")).unwrap(),
        "installed-42\n",
        "{how}"
    );
    drop(mcp.stdin.take());
    let status = mcp.child.wait().unwrap();
    assert!(status.success(), "{how}: the server ended {status}");
}

#[test]
fn the_wheel_installs_with_pip_in_a_new_venv_and_serves_mcp() {
    let Some(dist) = dist_or_skip("the wheel") else {
        return;
    };
    let wheel = artifact(&dist, "dsh_bash-", ".whl");
    let scratch = tempfile::tempdir().unwrap();
    let venv = scratch.path().join("venv");
    succeed(
        isolated(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            scratch.path(),
        ),
        "python3 -m venv",
    );
    succeed(
        isolated(
            Command::new(venv.join("bin/pip"))
                .args(["install", "--no-index", "--quiet"])
                .arg(&wheel),
            scratch.path(),
        ),
        "pip install the wheel",
    );
    let installed = venv.join("bin/dsh-bash");
    is_this_version(&installed);
    let mut server = Command::new(installed);
    server.arg("mcp");
    serves_mcp(server, scratch.path(), "pip");
}

#[test]
fn uvx_runs_the_wheel_as_an_mcp_server() {
    let Some(dist) = dist_or_skip("uvx") else {
        return;
    };
    let Some(uv) = uv_binary() else {
        let required = std::env::var("DSH_TEST_REQUIRE_DIST").is_ok_and(|v| v == "1");
        assert!(!required, "uv is not installed (python3 -m pip install uv)");
        eprintln!("SKIP uvx: uv is not installed (python3 -m pip install uv)");
        return;
    };
    let wheel = artifact(&dist, "dsh_bash-", ".whl");
    let scratch = tempfile::tempdir().unwrap();
    let mut server = Command::new(uv);
    server
        .args(["tool", "run", "--offline", "--from"])
        .arg(&wheel)
        .args(["dsh-bash", "mcp"])
        .env("UV_TOOL_DIR", scratch.path().join("uv-tools"));
    serves_mcp(server, scratch.path(), "uvx");
}

/// uv as `pip install uv` leaves it.
fn uv_binary() -> Option<PathBuf> {
    let output = Command::new("python3")
        .args(["-c", "import uv; print(uv.find_uv_bin())"])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(output.stdout).ok()?.trim());
    (output.status.success() && path.is_file()).then_some(path)
}

#[test]
fn the_npm_tarballs_install_together_offline_and_serve_mcp() {
    let Some(dist) = dist_or_skip("the npm tarballs") else {
        return;
    };
    let launcher = artifact(&dist, "dsh-bash-0", ".tgz");
    let platform = artifact(&dist, "dsh-bash-linux-", ".tgz");
    let scratch = tempfile::tempdir().unwrap();
    let prefix = scratch.path().join("prefix");
    succeed(
        isolated(
            Command::new("npm")
                .args(["install", "-g", "--offline", "--prefix"])
                .arg(&prefix)
                .arg(&launcher)
                .arg(&platform),
            scratch.path(),
        ),
        "npm install -g",
    );
    let installed = prefix.join("bin/dsh-bash");
    is_this_version(&installed);
    let mut server = Command::new(&installed);
    server.arg("mcp");
    serves_mcp(server, scratch.path(), "npm install -g");

    // A repository's node_modules/.bin on PATH with its own readlink and
    // dirname, pointing at a program of its own: never what is executed.
    use std::os::unix::fs::PermissionsExt as _;
    let evil = scratch.path().join("evil");
    std::fs::create_dir_all(evil.join("fake/bin")).unwrap();
    let planted = evil.join("fake/bin/dsh-bash");
    std::fs::write(&planted, "#!/bin/sh\necho planted-program-ran\n").unwrap();
    for helper in ["readlink", "dirname", "uname"] {
        let path = evil.join(helper);
        std::fs::write(&path, format!("#!/bin/sh\necho {}\n", planted.display())).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", evil.display(), std::env::var("PATH").unwrap());
    let version = succeed(
        Command::new(&installed).arg("--version").env("PATH", path),
        "dsh-bash --version with a hostile PATH",
    );
    assert_eq!(
        version.trim(),
        format!("dsh-bash {}", env!("CARGO_PKG_VERSION"))
    );

    // Without its platform package the launcher says what is missing.
    let name = platform.file_name().unwrap().to_str().unwrap();
    let package = name
        .strip_suffix(&format!("-{}.tgz", env!("CARGO_PKG_VERSION")))
        .unwrap();
    std::fs::remove_dir_all(prefix.join("lib/node_modules").join(package)).unwrap();
    let output = Command::new(&installed).arg("--version").output().unwrap();
    assert_eq!(output.status.code(), Some(125));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains(&format!("{package} is not installed")),
        "{error}"
    );
}

/// An npm registry on loopback serving the two tarballs as `npm publish`
/// would have (the manifest from each tarball's package.json, its
/// integrity); every other name is 404, as an unpublished platform
/// package is.
const REGISTRY: &str = r#"
import base64, hashlib, http.server, json, sys, tarfile
packages = {}
for path in sys.argv[1:]:
    data = open(path, 'rb').read()
    with tarfile.open(path) as tar:
        manifest = json.load(tar.extractfile('package/package.json'))
    packages[manifest['name']] = (manifest, data)
class Registry(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        name = self.path.lstrip('/').replace('%2f', '/').replace('%2F', '/')
        if '/-/' in name:
            name = name.split('/-/')[0]
            if name in packages:
                self.answer(packages[name][1], 'application/octet-stream')
                return
        elif name in packages:
            manifest, data = packages[name]
            version = dict(manifest)
            port = self.server.server_address[1]
            version['dist'] = {
                'tarball': 'http://127.0.0.1:%d/%s/-/%s-%s.tgz' % (port, name, name, manifest['version']),
                'shasum': hashlib.sha1(data).hexdigest(),
                'integrity': 'sha512-' + base64.b64encode(hashlib.sha512(data).digest()).decode(),
            }
            packument = {'name': name, 'dist-tags': {'latest': manifest['version']},
                         'versions': {manifest['version']: version}}
            self.answer(json.dumps(packument).encode(), 'application/json')
            return
        self.send_response(404)
        self.send_header('Content-Length', '2')
        self.end_headers()
        self.wfile.write(b'{}')
    def answer(self, body, kind):
        self.send_response(200)
        self.send_header('Content-Type', kind)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Registry)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

#[test]
fn npx_runs_the_package_from_a_registry_as_an_mcp_server() {
    let Some(dist) = dist_or_skip("npx") else {
        return;
    };
    let launcher = artifact(&dist, "dsh-bash-0", ".tgz");
    let platform = artifact(&dist, "dsh-bash-linux-", ".tgz");
    let registry = confined::serve(REGISTRY, &[&launcher, &platform]);
    let scratch = tempfile::tempdir().unwrap();
    let mut server = Command::new("npx");
    server
        .args(["--yes", "--registry"])
        .arg(format!("http://127.0.0.1:{}/", registry.port))
        .args(["dsh-bash", "mcp"]);
    serves_mcp(server, scratch.path(), "npx -y dsh-bash");
}
