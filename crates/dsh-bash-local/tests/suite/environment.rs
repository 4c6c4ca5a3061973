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
