//! The executor conformance suite (`dsh-bash-conformance`) against
//! `RemoteBashExecutor` on its own: over Streamable HTTP to a
//! `dsh-bash-mcp` server of this process (the library, bound to a loopback
//! port the system picks), whose commands a `LocalBashExecutor` runs. The
//! binary's suites (`dsh-bash-cli`'s `remote_conformance.rs` and
//! `remote_ssh.rs`) run it again through a server process, and through
//! sshd.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::time::Duration;

use dsh_bash::BashExecutor;
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use dsh_bash_mcp::http::{HttpOptions, Listening};
use dsh_bash_mcp::Hub;
use dsh_bash_remote::RemoteBashExecutor;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "conformance-token-0123456789abcdef";

/// A server on the test's runtime (it goes with it) and a remote executor
/// connected to it.
async fn executor() -> Option<Arc<dyn BashExecutor>> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let options = HttpOptions {
        token_file: Some(file),
        ..HttpOptions::default()
    };
    let max_timeout = Duration::from_secs(600);
    let listening =
        Listening::prepare("127.0.0.1:0".parse().unwrap(), &options, max_timeout).unwrap();
    let bound = listening.bind().await.unwrap();
    let url = bound.url();
    let local = LocalBashExecutor::new(LocalConfig {
        grace: Duration::from_millis(400),
        ..LocalConfig::default()
    })
    .unwrap();
    let hub = Arc::new(
        Hub::builder(Arc::new(local))
            .timeouts(Duration::from_secs(120), max_timeout)
            .build(),
    );
    tokio::spawn(async move {
        // The token file lives as long as the server.
        let _dir = dir;
        dsh_bash_mcp::http::serve(bound, hub, CancellationToken::new()).await
    });
    Some(Arc::new(
        RemoteBashExecutor::over_http(&url, TOKEN).await.unwrap(),
    ))
}

dsh_bash_conformance::conformance_suite!(executor().await);
