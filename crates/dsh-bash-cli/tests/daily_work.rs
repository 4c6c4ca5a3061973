//! Daily work under `workspace-write`, through the real binary, each
//! backend forced, as root and as uid 65534, offline against registries
//! this test serves on loopback: `npm install` from an npm registry serving
//! a tarball packed here, `pip install` into a venv and `uv pip install`
//! from a package index with a wheel built here, `cargo run` of a crate
//! with a dependency from a sparse cargo registry (root only: the
//! toolchain lives in root's home, which uid 65534 cannot enter). Each
//! succeeds with the registry's host allowed; npm, uv and cargo succeed
//! again in a fresh project with `--network off`, from the sandbox's own
//! cache. The host's own caches (`~/.npm`, `~/.cache/pip`,
//! `~/.cargo/registry`) are byte-for-byte what they were, and a command
//! writing into them is refused (Landlock) or writes the sandbox's cache
//! bound over them (bubblewrap). Nothing unconfined is pointed at the
//! sandbox's caches.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::confined::{
    as_user, base, binary, chown_tree, each_backend_and_user, result_json, serve, skip, tree,
    usable_as_or_skip, Server, User, NOBODY,
};
use serde_json::Value;

/// The registry: files under `root`, an npm packument for every tarball in
/// `root/npm`, and a `Cache-Control` that lets a client keep what it got.
const REGISTRY: &str = r#"import base64, hashlib, http.server, json, os, sys
root = sys.argv[1]
class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=root, **kwargs)
    def log_message(self, *args):
        pass
    def end_headers(self):
        self.send_header('Cache-Control', 'public, max-age=86400')
        super().end_headers()
    def do_GET(self):
        name = self.path.strip('/')
        tarball = os.path.join(root, 'npm', name + '-1.0.0.tgz')
        if '/' not in name and os.path.isfile(tarball):
            data = open(tarball, 'rb').read()
            port = self.server.server_address[1]
            dist = {'tarball': f'http://127.0.0.1:{port}/npm/{name}-1.0.0.tgz',
                    'shasum': hashlib.sha1(data).hexdigest(),
                    'integrity': 'sha512-' + base64.b64encode(hashlib.sha512(data).digest()).decode()}
            version = {'name': name, 'version': '1.0.0', 'main': 'index.js', 'dist': dist}
            body = json.dumps({'name': name, 'dist-tags': {'latest': '1.0.0'},
                               'versions': {'1.0.0': version}}).encode()
            self.send_response(200)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()
httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
print(httpd.server_address[1], flush=True)
httpd.serve_forever()
"#;

/// Builds what the registry serves, by hand (no npm, build backend or
/// cargo needed): an npm tarball, a wheel, a `.crate` and its index entry.
const SITE: &str = r#"import hashlib, io, json, os, sys, tarfile, zipfile
root = sys.argv[1]
def tar(path, files, prefix):
    with tarfile.open(path, 'w:gz') as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
os.makedirs(root + '/npm')
tar(root + '/npm/dsh-left-pad-1.0.0.tgz', {
    'package.json': '{"name": "dsh-left-pad", "version": "1.0.0", "main": "index.js"}',
    'index.js': 'module.exports = (s) => "padded from the sandbox cache: " + s;\n'}, 'package/')
os.makedirs(root + '/simple/dshdemo')
files = {'dshdemo/__init__.py': 'GREETING = "installed from the sandbox cache"\n',
         'dshdemo-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\nName: dshdemo\nVersion: 1.0\n',
         'dshdemo-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n'}
record = ''.join(f'{n},,\n' for n in files) + 'dshdemo-1.0.dist-info/RECORD,,\n'
with zipfile.ZipFile(root + '/simple/dshdemo/dshdemo-1.0-py3-none-any.whl', 'w') as z:
    for name, content in files.items():
        z.writestr(name, content)
    z.writestr('dshdemo-1.0.dist-info/RECORD', record)
os.makedirs(root + '/cargo/crates')
os.makedirs(root + '/cargo/index/ds/hd')
crate = root + '/cargo/crates/dshdep-0.1.0.crate'
tar(crate, {
    'Cargo.toml': '[package]\nname = "dshdep"\nversion = "0.1.0"\nedition = "2021"\n',
    'src/lib.rs': 'pub fn greet() -> &\'static str { "built with a registry dependency" }\n'}, 'dshdep-0.1.0/')
entry = {'name': 'dshdep', 'vers': '0.1.0', 'deps': [], 'features': {}, 'yanked': False,
         'cksum': hashlib.sha256(open(crate, 'rb').read()).hexdigest()}
open(root + '/cargo/index/ds/hd/dshdep', 'w').write(json.dumps(entry) + '\n')
"#;

/// The registry process (killed when dropped) and its port.
struct Registry {
    /// Kept for its drop, which stops it.
    _server: Server,
    port: u16,
}

impl Registry {
    fn start() -> Registry {
        let root = base().join("daily-registry");
        let _ = std::fs::remove_dir_all(&root);
        let built = Command::new("python3")
            .args(["-c", SITE])
            .arg(&root)
            .status()
            .unwrap();
        assert!(built.success(), "the registry's files");
        let server = serve(REGISTRY, &[&root]);
        let port = server.port;
        // Cargo's sparse index names where crates are downloaded from.
        std::fs::write(
            root.join("cargo/index/config.json"),
            format!(
                "{{\"dl\": \"http://127.0.0.1:{port}/cargo/crates/{{crate}}-{{version}}.crate\"}}"
            ),
        )
        .unwrap();
        Registry {
            _server: server,
            port,
        }
    }

    fn allow(&self) -> Vec<String> {
        vec![format!("--allow-host=127.0.0.1:{}", self.port)]
    }

    fn offline() -> Vec<String> {
        vec!["--network".into(), "off".into()]
    }
}

/// A home of its own (outside the workspace) with the host's own caches
/// already holding something, and a workspace, both owned by `user`.
struct Place {
    home: PathBuf,
    ws: PathBuf,
}

/// The host caches the test watches, relative to the home.
const HOST_CACHES: &[&str] = &[".npm", ".cache/pip", ".cargo/registry"];

impl Place {
    fn new(user: User, name: &str) -> Place {
        let top = base().join(name);
        let _ = std::fs::remove_dir_all(&top);
        let home = top.join("home");
        let ws = top.join("ws");
        for (cache, file) in
            HOST_CACHES
                .iter()
                .zip(["_cacache/index", "http-v2/entry", "cache/x.crate"])
        {
            let path = home.join(cache).join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("the host's own {cache}\n")).unwrap();
        }
        std::fs::create_dir_all(&ws).unwrap();
        if user == User::Nobody {
            chown_tree(&top, NOBODY);
        }
        Place { home, ws }
    }

    fn host_caches(&self) -> Vec<(PathBuf, Option<Vec<u8>>)> {
        HOST_CACHES
            .iter()
            .flat_map(|cache| {
                tree(&self.home.join(cache))
                    .into_iter()
                    .map(move |(path, content)| (Path::new(cache).join(path), content))
            })
            .collect()
    }

    /// `dsh-bash run --json` as `user` under `backend` in workspace-write,
    /// with `flags`; killed after 300 s whatever happens.
    fn run(&self, user: User, backend: &str, flags: &[String], command: &str) -> Value {
        let mut run = as_user(user, "timeout");
        run.args(["-s", "KILL", "300"])
            .arg(binary())
            .args(["run", "--json", "--timeout", "240000"])
            .args(["--sandbox", "workspace-write", "--sandbox-backend", backend])
            .arg("--workdir")
            .arg(&self.ws)
            .args(flags)
            .args(["--", command])
            .env("HOME", &self.home)
            .env_remove("XDG_CACHE_HOME")
            .env_remove("CARGO_HOME")
            .env_remove("npm_config_cache")
            .env_remove("PIP_CACHE_DIR")
            .env_remove("UV_CACHE_DIR")
            .env("npm_config_update_notifier", "false")
            .stdin(Stdio::null());
        if let Some(rustup) = rustup_home() {
            run.env("RUSTUP_HOME", rustup);
        }
        result_json(&run.output().unwrap())
    }
}

/// Where rustup keeps the toolchains of the user running the tests (the
/// test's own HOME is not the commands').
fn rustup_home() -> Option<PathBuf> {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".rustup")))
        .filter(|path| path.is_dir())
}

fn stdout(result: &Value) -> &str {
    result["stdout"]["text"].as_str().unwrap_or_default()
}

fn succeeded(result: &Value, says: &str, context: &str) {
    assert_eq!(result["exit_code"], 0, "{context}: {result:#}");
    assert!(stdout(result).contains(says), "{context}: {result:#}");
}

/// A Python with `venv` every user can run (the machine's own, not a
/// version manager's under root's home), or `None` (skipped loudly).
fn system_python() -> Option<&'static str> {
    let python = "/usr/bin/python3";
    let works = Command::new(python)
        .args(["-c", "import venv, ensurepip"])
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        skip("pip and uv under the sandbox: /usr/bin/python3 with venv is not installed");
    }
    works.then_some(python)
}

/// uv's binary, copied where every user can run it, or `None` (skipped
/// loudly).
fn uv() -> Option<PathBuf> {
    let found = Command::new("python3")
        .args(["-c", "import uv; print(uv.find_uv_bin())"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let Some(found) = found else {
        skip("uv under the sandbox: uv is not installed for python3 (pip install uv)");
        return None;
    };
    let copy = binary().with_file_name("uv");
    std::fs::copy(found, &copy).unwrap();
    Some(copy)
}

fn npm_project(dir: &str) -> String {
    format!(
        "mkdir -p {dir} && cd {dir} && echo '{{\"name\": \"{dir}\", \"version\": \"1.0.0\"}}' > package.json"
    )
}

fn npm(place: &Place, user: User, backend: &str, registry: &Registry) {
    let context = format!("npm under {backend} as {user:?}");
    let url = format!("http://127.0.0.1:{}/", registry.port);
    let require = "node -e 'console.log(require(\"dsh-left-pad\")(\"ok\"))'";
    let first = place.run(
        user,
        backend,
        &registry.allow(),
        &format!(
            "{} && npm install --no-audit --no-fund --registry {url} dsh-left-pad && {require}",
            npm_project("p1")
        ),
    );
    succeeded(&first, "padded from the sandbox cache: ok", &context);
    let again = place.run(
        user,
        backend,
        &Registry::offline(),
        &format!(
            "{} && npm install --offline --no-audit --no-fund --registry {url} dsh-left-pad && {require}",
            npm_project("p2")
        ),
    );
    succeeded(
        &again,
        "padded from the sandbox cache: ok",
        &format!("{context}, offline"),
    );
}

fn pip_and_uv(place: &Place, user: User, backend: &str, registry: &Registry) {
    let Some(python) = system_python() else {
        return;
    };
    let index = format!("http://127.0.0.1:{}/simple/", registry.port);
    let import = "python -c 'import dshdemo; print(dshdemo.GREETING)'";
    let pip = place.run(
        user,
        backend,
        &registry.allow(),
        &format!(
            "{python} -m venv .venv && .venv/bin/pip install -q --disable-pip-version-check --trusted-host 127.0.0.1 --index-url {index} dshdemo && .venv/bin/{import} && find \"$PIP_CACHE_DIR\" -type f | grep -c . "
        ),
    );
    let context = format!("pip under {backend} as {user:?}");
    succeeded(&pip, "installed from the sandbox cache", &context);
    let cached: u32 = stdout(&pip)
        .lines()
        .last()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        cached > 0,
        "pip kept what it fetched in the sandbox's cache: {context}: {pip:#}"
    );
    let Some(uv) = uv() else {
        return;
    };
    let uv = uv.display();
    for (dir, flags, offline) in [
        (".uv1", registry.allow(), ""),
        (".uv2", Registry::offline(), "--offline"),
    ] {
        let result = place.run(
            user,
            backend,
            &flags,
            &format!(
                "{uv} venv -q --python {python} {dir} && VIRTUAL_ENV=$PWD/{dir} {uv} pip install -q {offline} --index-url {index} dshdemo && {dir}/bin/{import}"
            ),
        );
        succeeded(
            &result,
            "installed from the sandbox cache",
            &format!("uv {offline} under {backend} as {user:?}"),
        );
    }
}

fn cargo(place: &Place, backend: &str, registry: &Registry) {
    for (app, flags, offline) in [
        ("app1", registry.allow(), ""),
        ("app2", Registry::offline(), "--offline"),
    ] {
        let dir = place.ws.join(app);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::create_dir_all(dir.join(".cargo")).unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            format!("[package]\nname = \"{app}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\ndshdep = \"0.1\"\n"),
        )
        .unwrap();
        std::fs::write(
            dir.join("src/main.rs"),
            "fn main() { println!(\"{}\", dshdep::greet()); }\n",
        )
        .unwrap();
        std::fs::write(
            dir.join(".cargo/config.toml"),
            format!(
                "[source.crates-io]\nreplace-with = \"loopback\"\n\n[source.loopback]\nregistry = \"sparse+http://127.0.0.1:{}/cargo/index/\"\n",
                registry.port
            ),
        )
        .unwrap();
        let result = place.run(
            User::Root,
            backend,
            &flags,
            &format!("cd {app} && cargo run -q {offline}"),
        );
        succeeded(
            &result,
            "built with a registry dependency",
            &format!("cargo {offline} under {backend}"),
        );
    }
}

/// Writes into each host cache: refused under Landlock; under bubblewrap
/// the path is the sandbox's cache bound over it. Either way the host's
/// own stays as it was (checked by the caller).
fn writes_into_the_host_caches(place: &Place, user: User, backend: &str) {
    let command = HOST_CACHES
        .iter()
        .map(|cache| format!("if echo planted > ~/{cache}/planted 2>/dev/null; then echo {cache}=wrote; else echo {cache}=refused; fi"))
        .collect::<Vec<_>>()
        .join("; ");
    let result = place.run(user, backend, &[], &command);
    let out = stdout(&result);
    let expected = if backend == "landlock" {
        "refused"
    } else {
        "wrote"
    };
    for cache in HOST_CACHES {
        assert!(
            out.contains(&format!("{cache}={expected}")),
            "{cache} under {backend} as {user:?}: {result:#}"
        );
        assert!(
            !place.home.join(cache).join("planted").exists(),
            "{cache} planted on the host"
        );
    }
}

#[test]
fn package_managers_and_builds_work_from_the_sandbox_cache_and_the_host_caches_stay_as_they_were() {
    let registry = Registry::start();
    each_backend_and_user("daily work", |user, backend| {
        let place = Place::new(user, &format!("daily-{backend}-{user:?}"));
        let before = place.host_caches();
        npm(&place, user, backend, &registry);
        pip_and_uv(&place, user, backend, &registry);
        if user == User::Root && rustup_home().is_some() {
            cargo(&place, backend, &registry);
        }
        writes_into_the_host_caches(&place, user, backend);
        assert_eq!(
            place.host_caches(),
            before,
            "the host's own caches changed under {backend} as {user:?}"
        );
        // The sandbox's caches are the user's, private, and hold what
        // the tools fetched.
        let uid = if user == User::Root { 0 } else { NOBODY };
        let root = place.home.join(format!(".cache/dsh-bash/sandbox/{uid}"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&root).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o700, "{}", root.display());
        // One directory per workspace: this one's holds npm's cache.
        let workspaces: Vec<_> = std::fs::read_dir(root.join("ws")).unwrap().collect();
        assert_eq!(workspaces.len(), 1, "{}", root.display());
        let mine = workspaces[0].as_ref().unwrap().path();
        assert!(mine.join("npm/_cacache").is_dir(), "{}", mine.display());
    });
}

#[test]
fn nothing_unconfined_is_pointed_at_the_sandbox_caches() {
    let place = Place::new(User::Root, "daily-unconfined");
    let sandbox = ["--sandbox", "read-only"];
    if !usable_as_or_skip(User::Root, &sandbox, "the caches' variables") {
        return;
    }
    let output = Command::new(binary())
        .args(["run", "--json", "--sandbox", "danger-full-access", "--workdir"])
        .arg(&place.ws)
        .args(["--", "echo npm=${npm_config_cache-unset} cargo=${CARGO_HOME-unset} xdg=${XDG_CACHE_HOME-unset}"])
        .env("HOME", &place.home)
        .env_remove("npm_config_cache")
        .env_remove("CARGO_HOME")
        .env_remove("XDG_CACHE_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let result = result_json(&output);
    assert!(
        stdout(&result).contains("npm=unset cargo=unset xdg=unset"),
        "{result:#}"
    );
    // Read-only: no caches either (nothing may be written).
    let output = Command::new(binary())
        .args(["run", "--json", "--sandbox", "read-only", "--workdir"])
        .arg(&place.ws)
        .args(["--", "echo npm=${npm_config_cache-unset}"])
        .env("HOME", &place.home)
        .env_remove("npm_config_cache")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(stdout(&result_json(&output)).contains("npm=unset"));
}

#[test]
fn a_cache_root_that_cannot_be_used_gives_caches_that_last_one_command() {
    let place = Place::new(User::Root, "daily-ephemeral");
    let sandbox = ["--sandbox", "read-only"];
    if !usable_as_or_skip(User::Root, &sandbox, "ephemeral caches") {
        return;
    }
    for backend in ["bwrap", "landlock"] {
        for root in [
            "per-command".to_owned(),
            place.ws.join("cache-inside").display().to_string(),
        ] {
            let result = place.run(
                User::Root,
                backend,
                &["--sandbox-cache".into(), root.clone()],
                "mkdir -p \"$npm_config_cache/x\" && echo made && echo \"$npm_config_cache\"",
            );
            let context = format!("{backend} with --sandbox-cache {root}: {result:#}");
            assert_eq!(result["exit_code"], 0, "{context}");
            let dir = stdout(&result)
                .lines()
                .last()
                .unwrap_or_default()
                .to_owned();
            assert!(
                dir.starts_with("/tmp/") || dir.contains("dsh-bash-tmp-"),
                "{context}"
            );
            // Nothing of the server's was made inside the workspace, and
            // nothing outlives the command.
            assert!(!place.ws.join("cache-inside").exists(), "{context}");
            assert!(!Path::new(&dir).exists(), "{context}");
        }
    }
    // None: no caches at all, the host's as they are (read-only).
    let none = place.run(
        User::Root,
        "landlock",
        &["--sandbox-cache".into(), "none".into()],
        "echo npm=${npm_config_cache-unset}",
    );
    assert!(stdout(&none).contains("npm=unset"), "{none:#}");
    // A relative root is refused before anything runs.
    let output = Command::new(binary())
        .args([
            "run",
            "--sandbox",
            "workspace-write",
            "--sandbox-cache",
            "rel/dir",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("expected an absolute directory, per-command or none"));
}

/// The `blocked` facts of a result, as (class, path) pairs.
fn blocked(result: &Value) -> Vec<(String, String)> {
    result["sandbox"]["blocked"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|b| {
                    (
                        b["class"].as_str().unwrap().to_owned(),
                        b["path"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_refused_write_is_named_with_its_class_and_what_works_instead() {
    each_backend_and_user("refusals", |user, backend| {
        let place = Place::new(user, &format!("daily-refused-{backend}-{user:?}"));
        let home = place.home.display();
        let ws = place.ws.display();
        let init = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&place.ws)
            .status()
            .unwrap();
        assert!(init.success());
        if user == User::Nobody {
            chown_tree(&place.ws, NOBODY);
        }
        let context = |result: &Value| format!("{backend} as {user:?}: {result:#}");
        // Outside the workspace: named, with the escalation only where
        // the user could write it unconfined.
        let outside = place.run(user, backend, &[], "touch /etc/dsh-daily-outside");
        assert_eq!(
            blocked(&outside),
            [(
                "outside-workspace".to_owned(),
                "/etc/dsh-daily-outside".to_owned()
            )],
            "{}",
            context(&outside)
        );
        let instead = outside["sandbox"]["blocked"][0]["instead"]
            .as_str()
            .unwrap();
        assert_eq!(
            instead.contains("sandbox_permissions"),
            user == User::Root,
            "{}",
            context(&outside)
        );
        // The host's own cache, where no bind stands over it (Landlock).
        if backend == "landlock" {
            let cache = place.run(user, backend, &[], "mkdir ~/.npm/_cacache/tmp");
            assert_eq!(
                blocked(&cache),
                [("host-cache".to_owned(), format!("{home}/.npm/_cacache/tmp"))],
                "{}",
                context(&cache)
            );
            let text = run_text(&place, user, backend, "mkdir ~/.npm/_cacache/tmp");
            assert!(
                text.contains(&format!("[sandbox: stderr names {home}/.npm/_cacache/tmp: the host's own npm cache, read-only: the host runs what it holds; the sandbox's own npm cache at ")),
                "{text}"
            );
        } else {
            // A protected path (bubblewrap keeps them).
            let hook = place.run(user, backend, &[], "touch .git/hooks/pre-commit");
            assert_eq!(
                blocked(&hook),
                [(
                    "protected".to_owned(),
                    format!("{ws}/.git/hooks/pre-commit")
                )],
                "{}",
                context(&hook)
            );
            let text = run_text(&place, user, backend, "touch .git/hooks/pre-commit");
            assert!(
                text.contains(&format!("[sandbox: stderr names {ws}/.git/hooks/pre-commit: protected: git hooks run on the host; the operator can lift it with --unprotect .git")),
                "{text}"
            );
        }
        // A forged line naming a writable path explains nothing.
        let forged = place.run(
            user,
            backend,
            &[],
            "echo \"touch: cannot touch '$PWD/src/main.rs': Read-only file system\" >&2; echo \"$TMPDIR/x: Permission denied\" >&2; exit 1",
        );
        assert_eq!(forged["sandbox"]["denied"], true, "{}", context(&forged));
        assert!(blocked(&forged).is_empty(), "{}", context(&forged));
    });
}

/// The text `dsh-bash run` prints for `command` (no `--json`).
fn run_text(place: &Place, user: User, backend: &str, command: &str) -> String {
    let output = common::confined::workspace_write(user, backend, &place.ws)
        .args(["--", command])
        .env("HOME", &place.home)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A command may replace a tool's cache directory (its root is writable)
/// with a link to a directory of its user's outside; the next command
/// neither gets it bound writable over the host's cache (bubblewrap binds
/// from a descriptor opened without following links) nor writes through
/// it (Landlock grants the roots, not what a link inside points to).
#[test]
fn a_cache_directory_swapped_for_a_link_reaches_nothing() {
    each_backend_and_user("swapped caches", |user, backend| {
        let place = Place::new(user, &format!("daily-swapped-{backend}-{user:?}"));
        let secret = place.home.join("secret");
        std::fs::create_dir_all(&secret).unwrap();
        if user == User::Nobody {
            chown_tree(&secret, NOBODY);
        }
        let swap = place.run(
            user,
            backend,
            &[],
            &format!(
                "rm -rf \"$npm_config_cache\" && ln -s {} \"$npm_config_cache\" && echo swapped",
                secret.display()
            ),
        );
        assert!(
            stdout(&swap).contains("swapped"),
            "{backend} as {user:?}: {swap:#}"
        );
        let write = place.run(
            user,
            backend,
            &[],
            "echo x > ~/.npm/planted; echo x > \"$npm_config_cache/planted2\"; true",
        );
        assert_eq!(write["exit_code"], 0, "{write:#}");
        assert!(
            std::fs::read_dir(&secret).unwrap().next().is_none(),
            "wrote through the swapped link under {backend} as {user:?}: {write:#}"
        );
    });
}
