//! PRV behaviors with real runners and fake `bwrap` scripts.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use dsh_sandbox::{SandboxEnforcement, SandboxMode, SandboxPolicy, SandboxProvider, Workspace};
use dsh_sandbox_local::{
    Backend, ConfigError, LocalSandboxConfig, LocalSandboxProvider, RunnerCommand,
};

fn argv() -> Vec<OsString> {
    ["bash", "-c", "echo 'a b'"].map(OsString::from).to_vec()
}

fn policy(mode: SandboxMode) -> SandboxPolicy {
    SandboxPolicy::new(
        mode,
        Workspace::open(Path::new(env!("CARGO_TARGET_TMPDIR"))).unwrap(),
    )
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn require(what: &str) -> bool {
    let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
    assert!(!required, "{what} is required (DSH_TEST_REQUIRE_SANDBOX=1)");
    eprintln!("SKIP: {what} is unavailable here");
    false
}

fn bwrap_works() -> bool {
    std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--", "true"])
        .status()
        .is_ok_and(|s| s.success())
        || require("bwrap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_runs_once_even_when_first_calls_race_and_the_verdict_is_cached() {
    if !bwrap_works() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    let fake = script(
        dir.path(),
        "bwrap",
        &format!("echo call >> {}\nexec bwrap \"$@\"", log.display()),
    );
    let provider = std::sync::Arc::new(
        LocalSandboxProvider::new(LocalSandboxConfig {
            backend: Backend::Bwrap,
            bwrap: fake,
            // A warm sandbox runs bwrap once when confining: not the probe.
            warm: false,
            ..LocalSandboxConfig::default()
        })
        .unwrap(),
    );
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let provider = std::sync::Arc::clone(&provider);
            tokio::spawn(async move {
                let argv = argv();
                provider
                    .confine(&argv, &policy(SandboxMode::ReadOnly))
                    .await
                    .map(|c| c.backend)
            })
        })
        .collect();
    for racer in racers {
        assert_eq!(
            racer.await.unwrap().unwrap(),
            dsh_sandbox::SandboxBackend::Bwrap
        );
    }
    // Confining does not run the runner; only the probe did, once.
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "call\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_passes_only_on_exit_zero_and_auto_falls_back_to_landlock() {
    let dir = tempfile::tempdir().unwrap();
    let failing = script(
        dir.path(),
        "bwrap",
        "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1",
    );
    let forced = LocalSandboxProvider::new(LocalSandboxConfig {
        backend: Backend::Bwrap,
        bwrap: failing.clone(),
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    let refused = forced
        .confine(&argv(), &policy(SandboxMode::ReadOnly))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "SANDBOX_UNAVAILABLE");
    assert!(refused.to_string().contains("uid map"), "{refused}");
    assert!(refused.to_string().contains("\"read-only\""));
    // The unavailable verdict is cached too.
    assert!(forced
        .confine(&argv(), &policy(SandboxMode::WorkspaceWrite))
        .await
        .is_err());

    let auto = LocalSandboxProvider::new(LocalSandboxConfig {
        bwrap: failing,
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    match auto.confine(&argv(), &policy(SandboxMode::ReadOnly)).await {
        Ok(confinement) => {
            assert_eq!(confinement.backend, dsh_sandbox::SandboxBackend::Landlock);
            assert_eq!(
                confinement.invocation.argv,
                argv(),
                "Landlock restricts the same argv"
            );
            let restriction = &confinement.invocation.restriction;
            assert!(restriction.landlock_ruleset.is_some());
            assert!(restriction.drop_capabilities);
            assert!(restriction.seccomp_filter.is_some());
            assert!(confinement.runner_report.is_none());
            assert_eq!(confinement.denial_signatures, ["permission denied"]);
            assert_eq!(confinement.enforcement, SandboxEnforcement::Full);
            assert!(confinement.gaps.is_empty());
        }
        Err(err) => {
            require(&format!("landlock ({err})"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_binary_is_unusable_and_a_slow_probe_is_bounded() {
    let missing = LocalSandboxProvider::new(LocalSandboxConfig {
        backend: Backend::Bwrap,
        bwrap: "/nonexistent/bwrap".into(),
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    let err = missing
        .confine(&argv(), &policy(SandboxMode::ReadOnly))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/bwrap"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let slow = script(dir.path(), "bwrap", "exec sleep 30");
    let bounded = LocalSandboxProvider::new(LocalSandboxConfig {
        backend: Backend::Bwrap,
        bwrap: slow,
        probe_timeout: std::time::Duration::from_millis(200),
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    let started = Instant::now();
    let err = bounded
        .confine(&argv(), &policy(SandboxMode::ReadOnly))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(
        started.elapsed().as_secs() < 20,
        "the probe was not bounded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_that_does_not_confine_is_refused() {
    // A "bwrap" that reports the child started, then runs it unconfined:
    // exits 0 but lets the probe write.
    let dir = tempfile::tempdir().unwrap();
    let liar = script(
        dir.path(),
        "bwrap",
        "while [ \"$1\" != -- ]; do if [ \"$1\" = --json-status-fd ]; then echo '{\"child-pid\": 1}' > /proc/self/fd/$2; fi; shift; done; shift; exec \"$@\"",
    );
    let provider = LocalSandboxProvider::new(LocalSandboxConfig {
        backend: Backend::Bwrap,
        bwrap: liar,
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    let err = provider
        .confine(&argv(), &policy(SandboxMode::ReadOnly))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("outside its policy"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_runner_skips_probes_and_gets_the_status_channel() {
    let runner = LocalSandboxProvider::new(LocalSandboxConfig {
        runner: Some(RunnerCommand {
            command: vec!["/opt/sandbox/run".into(), "--strict".into()],
        }),
        ..LocalSandboxConfig::default()
    })
    .unwrap();
    let confinement = runner
        .confine(&argv(), &policy(SandboxMode::WorkspaceWrite))
        .await
        .unwrap();
    assert_eq!(confinement.backend, dsh_sandbox::SandboxBackend::Runner);
    assert_eq!(confinement.enforcement, SandboxEnforcement::Full);
    assert_eq!(
        &confinement.invocation.argv[..3],
        ["/opt/sandbox/run", "--strict", "--unshare-user"].map(OsString::from)
    );
    assert!(confinement.invocation.argv.ends_with(&argv()));
    assert!(confinement
        .invocation
        .argv
        .contains(&OsString::from("--json-status-fd")));
    assert!(confinement.denial_in("x: Read-only file system"));
    // Never run: its report says the command did not start, whatever any
    // stderr would have said.
    assert_eq!(
        confinement.runner_outcome(),
        dsh_sandbox::RunnerOutcome::NeverStarted
    );
    // The status pipe and the workspace handle (workspace-write) are kept.
    assert_eq!(confinement.invocation.restriction.keep_fds.len(), 2);
}

#[test]
fn runner_and_probe_configuration_is_validated() {
    let empty = LocalSandboxConfig {
        runner: Some(RunnerCommand { command: vec![] }),
        ..LocalSandboxConfig::default()
    };
    assert!(matches!(
        LocalSandboxProvider::new(empty),
        Err(ConfigError::EmptyRunner)
    ));
    let config = LocalSandboxConfig {
        probe_timeout: std::time::Duration::ZERO,
        ..LocalSandboxConfig::default()
    };
    let err = LocalSandboxProvider::new(config).unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid probe_timeout: expected a positive duration, got 0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn danger_full_access_is_never_wrapped_and_confined_modes_always_are() {
    let provider = LocalSandboxProvider::new(LocalSandboxConfig::default()).unwrap();
    let open = provider
        .confine(&argv(), &policy(SandboxMode::DangerFullAccess))
        .await
        .unwrap();
    assert_eq!(open.invocation.argv, argv());
    assert!(open.invocation.restriction.is_empty());
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        if let Ok(confined) = provider.confine(&argv(), &policy(mode)).await {
            assert!(
                confined.invocation.argv != argv()
                    || confined.invocation.restriction.landlock_ruleset.is_some(),
                "{mode} ran unwrapped"
            );
        }
    }
}
