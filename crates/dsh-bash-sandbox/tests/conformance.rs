//! The executor conformance suite (`dsh-bash-conformance`) against
//! `SandboxBashExecutor` confining in `read-only` with the strongest usable
//! backend. Without bubblewrap the suite skips loudly; with
//! `DSH_TEST_REQUIRE_SANDBOX=1` (set by CI) it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dsh_bash::{BashExecutor, SandboxMode};
use dsh_bash_local::LocalConfig;
use dsh_bash_sandbox::SandboxConfig;
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};

fn workspace() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap().keep())
}

fn executor() -> Option<Arc<dyn BashExecutor>> {
    if !common::bwrap_or_skip("conformance of the sandboxing executor") {
        return None;
    }
    let provider = LocalSandboxProvider::new(LocalSandboxConfig::default()).unwrap();
    Some(Arc::new(
        dsh_bash_sandbox::sandboxed(
            SandboxConfig {
                local: LocalConfig {
                    grace: Duration::from_millis(400),
                    cwd: Some(workspace().to_owned()),
                    ..LocalConfig::default()
                },
                mode: SandboxMode::ReadOnly,
                workspace_root: Some(workspace().to_owned()),
                ..SandboxConfig::default()
            },
            Arc::new(provider),
        )
        .unwrap(),
    ))
}

dsh_bash_conformance::conformance_suite!(executor());
