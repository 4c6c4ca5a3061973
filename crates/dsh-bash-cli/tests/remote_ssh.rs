//! The executor conformance suite against `RemoteBashExecutor` over `ssh`
//! to a real `sshd` on loopback, started per test with a throwaway host
//! key and an authorized key made for the run. Skips loudly without
//! `sshd` (Debian's openssh-server), and fails then under
//! `DSH_TEST_REQUIRE_SSH=1` (what `.ci/run` sets).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_bash::BashExecutor;
use dsh_bash_remote::RemoteBashExecutor;

use common::listening::Served;

const SSHD: &str = "/usr/sbin/sshd";

/// A running sshd; killed when dropped.
pub struct Sshd {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "dsh-bash-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "ssh-keygen failed");
}

fn user() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Starts sshd on a free loopback port, or says why it cannot.
fn start_sshd() -> Option<Sshd> {
    let required = std::env::var("DSH_TEST_REQUIRE_SSH").is_ok_and(|v| v == "1");
    if !Path::new(SSHD).exists() {
        assert!(!required, "{SSHD} is missing (DSH_TEST_REQUIRE_SSH=1)");
        eprintln!(
            "SKIP the ssh conformance suite: {SSHD} is missing (apt-get install openssh-server)"
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    keygen(&dir.path().join("host_key"));
    keygen(&dir.path().join("client_key"));
    std::fs::copy(
        dir.path().join("client_key.pub"),
        dir.path().join("authorized_keys"),
    )
    .unwrap();
    // sshd's privilege-separation directory (made by the package's
    // service start, which a test machine may not have run).
    let _ = std::fs::create_dir_all("/run/sshd");
    let mut last = String::new();
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.path().join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n",
                d = dir.path().display()
            ),
        )
        .unwrap();
        let mut child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
                last = format!("sshd exited ({status}): {err}");
                break;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(Sshd { child, port, dir });
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                last = "sshd never listened".into();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("cannot start sshd: {last}");
}

/// `ssh … dsh-bash mcp` as a command.
fn ssh(sshd: &Sshd, binary: &Path) -> tokio::process::Command {
    let key: PathBuf = sshd.dir.path().join("client_key");
    let mut command = tokio::process::Command::new("ssh");
    command
        .args(["-F", "/dev/null", "-i"])
        .arg(key)
        .args([
            "-p",
            &sshd.port.to_string(),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            &format!("{}@127.0.0.1", user()),
        ])
        .arg(binary)
        // sshd starts the server with the login's environment, not the
        // test's: the snapshot is turned off here as for every test.
        .args(["mcp", "--shell-snapshot", "off"]);
    command
}

async fn executor() -> Option<Arc<dyn BashExecutor>> {
    let sshd = tokio::task::spawn_blocking(start_sshd).await.unwrap()?;
    let command = ssh(&sshd, Path::new(env!("CARGO_BIN_EXE_dsh-bash")));
    let executor = RemoteBashExecutor::over_stdio(command).await.unwrap();
    Some(Arc::new(Served {
        executor,
        server: sshd,
    }))
}

dsh_bash_conformance::conformance_suite!(executor().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_says_why() {
    let Some(sshd) = tokio::task::spawn_blocking(start_sshd).await.unwrap() else {
        return;
    };
    std::fs::write(sshd.dir.path().join("authorized_keys"), "").unwrap();
    let refused = RemoteBashExecutor::over_stdio(ssh(&sshd, Path::new("dsh-bash")))
        .await
        .unwrap_err();
    let text = refused.to_string();
    assert!(text.contains("Permission denied"), "{text}");
}
