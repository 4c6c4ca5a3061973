//! EXE-33..36: fixed overrides, credential scrub, explicit entries win.

use std::collections::BTreeMap;

use dsh_bash::{BashExecRequest, BashExecutor};
use dsh_bash_local::{LocalBashExecutor, LocalConfig, ScrubPolicy};

use super::fixture::{config, executor};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_are_always_set() {
    let executor = executor();
    let result = super::fixture::run(&executor, "echo $NO_COLOR $TERM $PAGER $GIT_PAGER").await;
    assert_eq!(result.stdout.text, "1 dumb cat cat\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_entries_win_even_for_secret_names() {
    let executor = executor();
    let mut request = BashExecRequest::new("echo $TERM $MY_API_KEY");
    request.env = Some(BTreeMap::from([
        ("TERM".to_owned(), "xterm-256color".to_owned()),
        ("MY_API_KEY".to_owned(), "given".to_owned()),
    ]));
    let result = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap();
    assert_eq!(result.stdout.text, "xterm-256color given\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_patterns_scrub_inherited_names() {
    // PATH and HOME are inherited by every test process; scrubbing by an
    // extra pattern proves the policy is applied to the real environment.
    let executor = LocalBashExecutor::new(LocalConfig {
        scrub: ScrubPolicy {
            patterns: vec!["home".into()],
            allow: vec![],
        },
        ..config()
    })
    .unwrap();
    let result = super::fixture::run(
        &executor,
        "echo \"[${HOME-unset}]\"; env | grep -c '^PATH='",
    )
    .await;
    assert_eq!(result.stdout.text, "[unset]\n1\n");
}

/// The shell is found on the server's own `PATH`, never on the command's:
/// a `bash` planted in a directory the command's `PATH` names first (one
/// a confined command could write, reached through the shell snapshot or
/// the caller's `env`) never runs in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shell_is_never_looked_up_on_the_commands_path() {
    use std::os::unix::fs::PermissionsExt;
    let planted = tempfile::tempdir().unwrap();
    let marker = planted.path().join("planted-bash-ran");
    let fake = planted.path().join("bash");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ntouch {}\nexec /bin/bash \"$@\"\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let executor = executor();
    let mut request = BashExecRequest::new("command -v bash");
    let path = format!(
        "{}:{}",
        planted.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    request.env = Some(BTreeMap::from([("PATH".to_owned(), path)]));
    let result = executor
        .run(executor.resolve(request).unwrap())
        .await
        .unwrap();
    assert_eq!(result.exit_code, Some(0), "{result:?}");
    // The command itself sees its PATH (its own lookups are its own)...
    assert_eq!(result.stdout.text.trim(), fake.display().to_string());
    // ...but the shell that ran it was not the planted one.
    assert!(!marker.exists(), "the planted bash ran");
}
