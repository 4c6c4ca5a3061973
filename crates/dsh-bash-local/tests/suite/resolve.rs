//! EXE-02..09: defaults, caps, validation, verbatim carry-through.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dsh_bash::{BashExecRequest, BashExecutor, OwnerToken, SandboxMode};
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use tokio_util::sync::CancellationToken;

use super::fixture::{config, executor};

#[test]
fn construction_names_the_bad_field() {
    for (bad, field) in [
        (
            LocalConfig {
                default_timeout_ms: f64::NAN,
                ..config()
            },
            "default_timeout_ms",
        ),
        (
            LocalConfig {
                max_timeout_ms: -1.0,
                ..config()
            },
            "max_timeout_ms",
        ),
        (
            LocalConfig {
                grace_ms: f64::INFINITY,
                ..config()
            },
            "grace_ms",
        ),
        (
            LocalConfig {
                max_output_bytes: 0,
                ..config()
            },
            "max_output_bytes",
        ),
    ] {
        let err = LocalBashExecutor::new(bad).unwrap_err().to_string();
        assert!(err.contains(field), "{err}");
    }
}

#[test]
fn workdir_request_then_configured_then_process_cwd() {
    let plain = executor();
    let spec = plain.resolve(BashExecRequest::new("true")).unwrap();
    assert_eq!(spec.workdir, std::env::current_dir().unwrap());

    let configured = LocalBashExecutor::new(LocalConfig {
        cwd: Some(PathBuf::from("/tmp")),
        ..config()
    })
    .unwrap();
    assert_eq!(
        configured
            .resolve(BashExecRequest::new("true"))
            .unwrap()
            .workdir,
        PathBuf::from("/tmp")
    );
    let mut request = BashExecRequest::new("true");
    request.workdir = Some(PathBuf::from("/usr"));
    assert_eq!(
        configured.resolve(request).unwrap().workdir,
        PathBuf::from("/usr")
    );
    let mut relative = BashExecRequest::new("true");
    relative.workdir = Some(PathBuf::from("sub"));
    assert_eq!(
        configured.resolve(relative).unwrap().workdir,
        PathBuf::from("/tmp/sub")
    );
}

#[test]
fn timeout_default_cap_and_smaller_request() {
    let executor = LocalBashExecutor::new(LocalConfig {
        default_timeout_ms: 1_500.0,
        max_timeout_ms: 2_000.0,
        ..config()
    })
    .unwrap();
    let timeout = |ms: Option<f64>| {
        let mut request = BashExecRequest::new("true");
        request.timeout_ms = ms;
        executor.resolve(request).map(|spec| spec.timeout_ms)
    };
    assert_eq!(timeout(None).unwrap(), 1_500);
    assert_eq!(timeout(Some(99_999.0)).unwrap(), 2_000);
    assert_eq!(timeout(Some(100.0)).unwrap(), 100);
    for bad in [f64::NAN, -5.0, 0.0, f64::INFINITY] {
        let err = timeout(Some(bad)).unwrap_err().to_string();
        assert!(err.starts_with("invalid timeout_ms"), "{err}");
    }
}

#[test]
fn stdin_env_owner_mode_and_cancel_carry_through() {
    let executor = executor();
    let bare = executor.resolve(BashExecRequest::new("true")).unwrap();
    assert_eq!(bare.stdin, None);
    assert_eq!(bare.env, None);
    assert_eq!(bare.owner, None);
    assert_eq!(bare.sandbox_mode, None);

    let token = CancellationToken::new();
    let mut request = BashExecRequest::new("cat");
    request.stdin = Some(b"in".to_vec());
    request.env = Some(BTreeMap::from([("A".to_owned(), "1".to_owned())]));
    request.owner = Some(OwnerToken::new("session-1"));
    request.sandbox_mode = Some(SandboxMode::ReadOnly);
    request.cancel = Some(token.clone());
    let spec = executor.resolve(request).unwrap();
    assert_eq!(spec.stdin.as_deref(), Some(&b"in"[..]));
    assert_eq!(spec.env.unwrap()["A"], "1");
    assert_eq!(spec.owner, Some(OwnerToken::new("session-1")));
    assert_eq!(spec.sandbox_mode, Some(SandboxMode::ReadOnly));
    token.cancel();
    assert!(spec.cancel.unwrap().is_cancelled());
    assert_eq!(executor.sandbox_mode(), None);
}
