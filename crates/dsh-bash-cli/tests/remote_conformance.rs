//! The executor conformance suite (`dsh-bash-conformance`) against
//! `RemoteBashExecutor`: over Streamable HTTP to `dsh-bash mcp --listen`
//! on loopback, and over the stdio of a `dsh-bash mcp` child (what `ssh
//! host dsh-bash mcp` gives; `remote_ssh.rs` runs it through a real sshd).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

mod http {
    use std::sync::Arc;

    use dsh_bash::BashExecutor;

    use super::common::listening::Served;

    async fn executor() -> Option<Arc<dyn BashExecutor>> {
        Some(Arc::new(Served::http(&[]).await))
    }

    dsh_bash_conformance::conformance_suite!(executor().await);
}

mod stdio {
    use std::sync::Arc;

    use dsh_bash::BashExecutor;
    use dsh_bash_remote::RemoteBashExecutor;

    async fn executor() -> Option<Arc<dyn BashExecutor>> {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh-bash"));
        command.arg("mcp");
        Some(Arc::new(
            RemoteBashExecutor::over_stdio(command).await.unwrap(),
        ))
    }

    dsh_bash_conformance::conformance_suite!(executor().await);
}
