//! `dsh-bash mcp --listen` started for a test: its URL, its token, and a
//! remote executor over it that stops the server when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashExecutor, BashRunResult, BashTask, BashTaskId,
    BashTaskRead, BoxFuture, ListenerHandle, NetworkPolicy, OwnerToken, SandboxMode, TaskListener,
};

/// Writes `request` (raw HTTP/1.1) on a fresh connection to `address`
/// and reads what comes back until the server closes it or `patience`
/// passes.
pub fn exchange(address: &str, request: &str, patience: Duration) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(patience)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// A running HTTP server; killed when dropped.
pub struct Listening {
    pub child: Child,
    pub url: String,
    pub base: String,
    pub token: String,
    pub dir: tempfile::TempDir,
    /// What the server printed on stderr after its address.
    pub stderr: Arc<std::sync::Mutex<String>>,
}

impl Listening {
    /// Starts `dsh-bash mcp --listen 127.0.0.1:0` with a generated token
    /// file and `extra` arguments; waits for its address.
    pub fn start(extra: &[&str]) -> Listening {
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        Listening::with_tokens(dir, &token_file, extra)
    }

    /// Like [`Listening::start`] with the tokens in `token_file` (created
    /// with a generated one if missing); `token` is its first.
    pub fn with_tokens(
        dir: tempfile::TempDir,
        token_file: &std::path::Path,
        extra: &[&str],
    ) -> Listening {
        Listening::launch(dir, token_file, extra, |_| {})
    }

    /// Like [`Listening::start`] with an empty environment (no `PATH`).
    pub fn start_in_empty_environment(extra: &[&str]) -> Listening {
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        Listening::launch(dir, &token_file, extra, |command| {
            // (The snapshot stays off: no dotfiles of the runner's.)
            command.env_clear().env("DSH_BASH_SHELL_SNAPSHOT", "off");
        })
    }

    /// Starts the server with `token_file`, `extra` arguments and the
    /// command adjusted by `adjust` first.
    pub fn launch(
        dir: tempfile::TempDir,
        token_file: &std::path::Path,
        extra: &[&str],
        adjust: impl FnOnce(&mut Command),
    ) -> Listening {
        let command = Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
        Listening::launch_command(command, dir, token_file, extra, adjust)
    }

    /// Like [`Listening::start`], run as the unprivileged user (uid
    /// 65534) with its token file and `--workdir` in a directory it owns.
    /// (The workdir is a directory of its own beside the token file: a
    /// token file inside the workspace is refused.)
    pub fn start_unprivileged(extra: &[&str]) -> Listening {
        Listening::start_as(super::confined::User::Nobody, extra)
    }

    /// Like [`Listening::start`] as `user`, with its token file in a
    /// directory under the shared test base (outside `/tmp`, which
    /// bubblewrap hides anyway) and `--workdir` in a directory beside it,
    /// both owned by `user`.
    pub fn start_as(user: super::confined::User, extra: &[&str]) -> Listening {
        use super::confined::{as_user, base, binary, chown, User, NOBODY};
        std::fs::create_dir_all(base()).unwrap();
        let dir = tempfile::tempdir_in(base()).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        if user == User::Nobody {
            chown(dir.path(), NOBODY);
            chown(&work, NOBODY);
        }
        let token_file = dir.path().join("token");
        let workdir = work.to_str().unwrap().to_owned();
        let mut extra: Vec<&str> = extra.to_vec();
        extra.extend(["--workdir", workdir.as_str()]);
        let command = as_user(user, binary().to_str().unwrap());
        Listening::launch_command(command, dir, &token_file, &extra, |_| {})
    }

    fn launch_command(
        mut command: Command,
        dir: tempfile::TempDir,
        token_file: &std::path::Path,
        extra: &[&str],
        adjust: impl FnOnce(&mut Command),
    ) -> Listening {
        command
            .args(["mcp", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(token_file)
            .args(extra)
            .env_remove("DSH_BASH_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        adjust(&mut command);
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("the server ended before listening: {seen}");
            };
            seen.push_str(&line);
            seen.push('\n');
            if let Some(url) = line.strip_prefix("dsh-bash: listening on ") {
                break url.trim().to_owned();
            }
        };
        let stderr = Arc::new(std::sync::Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut kept = sink.lock().unwrap();
                kept.push_str(&line);
                kept.push('\n');
            }
        });
        let token = std::fs::read_to_string(token_file)
            .unwrap()
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .unwrap()
            .to_owned();
        let base = url.trim_end_matches("/mcp").to_owned();
        Listening {
            child,
            url,
            base,
            token,
            dir,
            stderr,
        }
    }

    /// SIGTERMs the server and waits (fail-safe 20 s) for it to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) with a pid this test owns and a valid signal.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not exit on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A remote executor that owns the server it talks to (an HTTP server, or
/// what its connection needs, e.g. an sshd), stopped when dropped.
pub struct Served<S = Listening> {
    pub executor: dsh_bash_remote::RemoteBashExecutor,
    pub server: S,
}

impl Served {
    /// A fresh server (with `extra` arguments) and an executor over HTTP.
    pub async fn http(extra: &[&str]) -> Served {
        let server = tokio::task::spawn_blocking({
            let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            move || Listening::start(&extra.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await
        .unwrap();
        let executor = dsh_bash_remote::RemoteBashExecutor::over_http(&server.url, &server.token)
            .await
            .unwrap();
        Served { executor, server }
    }
}

impl<S: Send + Sync> BashExecutor for Served<S> {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.executor.sandbox_mode()
    }
    fn network_policy(&self, mode: SandboxMode) -> Option<NetworkPolicy> {
        self.executor.network_policy(mode)
    }
    fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, BashError> {
        self.executor.resolve(request)
    }
    fn run(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>> {
        self.executor.run(spec)
    }
    fn start(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>> {
        self.executor.start(spec)
    }
    fn get(&self, id: &BashTaskId) -> Option<BashTask> {
        self.executor.get(id)
    }
    fn owner_of(&self, id: &BashTaskId) -> Option<OwnerToken> {
        self.executor.owner_of(id)
    }
    fn list(&self) -> Vec<BashTask> {
        self.executor.list()
    }
    fn read_output(
        &self,
        id: &BashTaskId,
        since: Option<dsh_bash::OutputCursor>,
    ) -> Result<BashTaskRead, BashError> {
        self.executor.read_output(id, since)
    }
    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        self.executor.kill(id)
    }
    fn write_input<'a>(
        &'a self,
        id: &'a BashTaskId,
        input: &'a [u8],
    ) -> BoxFuture<'a, Result<(), BashError>> {
        self.executor.write_input(id, input)
    }
    fn screen<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<String, BashError>> {
        self.executor.screen(id)
    }
    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle {
        self.executor.on_task_done(listener)
    }
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        self.executor.shutdown()
    }
}
