//! The executor conformance suite (`dsh-bash-conformance`) against
//! `SandboxBashExecutor` confining in `read-only` with the strongest usable
//! backend. Without bubblewrap the suite skips loudly; with
//! `DSH_TEST_REQUIRE_SANDBOX=1` (set by CI) it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dsh_bash::{BashExecutor, SandboxMode};
use dsh_bash_local::LocalConfig;
use dsh_bash_sandbox::{SandboxBashExecutor, SandboxConfig};
use dsh_sandbox_local::{LocalSandboxConfig, LocalSandboxProvider};

fn workspace() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap().keep())
}

fn executor() -> Option<Arc<dyn BashExecutor>> {
    let bwrap = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !bwrap {
        let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
        assert!(!required, "bwrap is required (DSH_TEST_REQUIRE_SANDBOX=1)");
        eprintln!("SKIP conformance of the sandboxing executor: bwrap is unusable here");
        return None;
    }
    let provider = LocalSandboxProvider::new(LocalSandboxConfig::default()).unwrap();
    Some(Arc::new(
        SandboxBashExecutor::new(
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
