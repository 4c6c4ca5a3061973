//! EXE-02..09: defaults, caps, validation, verbatim carry-through.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use dsh_bash::{BashExecRequest, BashExecutor, OwnerToken, SandboxMode};
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use tokio_util::sync::CancellationToken;

use super::fixture::{config, executor};

#[test]
fn construction_names_the_bad_field() {
    for (bad, field) in [
        (
            LocalConfig {
                default_timeout: Duration::ZERO,
                ..config()
            },
            "default_timeout",
        ),
        (
            LocalConfig {
                max_timeout: Duration::ZERO,
                ..config()
            },
            "max_timeout",
        ),
        (
            LocalConfig {
                grace: Duration::ZERO,
                ..config()
            },
            "grace",
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
        default_timeout: Duration::from_millis(1_500),
        max_timeout: Duration::from_millis(2_000),
        ..config()
    })
    .unwrap();
    let timeout = |ms: Option<u64>| {
        let mut request = BashExecRequest::new("true");
        request.timeout = ms.map(Duration::from_millis);
        executor.resolve(request).map(|spec| spec.timeout)
    };
    assert_eq!(timeout(None).unwrap(), Duration::from_millis(1_500));
    assert_eq!(timeout(Some(99_999)).unwrap(), Duration::from_millis(2_000));
    assert_eq!(timeout(Some(100)).unwrap(), Duration::from_millis(100));
    let err = timeout(Some(0)).unwrap_err().to_string();
    assert_eq!(err, "invalid timeout: expected a positive duration, got 0");
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
