//! OUT-01..14, OUT-08: caps per stream, tails, spill files, failures.

use std::os::unix::fs::PermissionsExt;

use dsh_bash_local::{LocalBashExecutor, LocalConfig};

use super::fixture::{config, run};

fn capped(cap: u64) -> LocalBashExecutor {
    LocalBashExecutor::new(LocalConfig {
        max_output_bytes: cap,
        ..config()
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_at_the_cap_is_complete() {
    let executor = capped(500);
    let result = run(&executor, "head -c 500 /dev/zero | tr '\\0' a").await;
    assert_eq!(result.stdout.text.len(), 500);
    assert!(!result.stdout.truncated);
    assert_eq!(result.stdout.spill_path, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_cap_keeps_the_end_and_spills_everything() {
    let executor = capped(500);
    let result = run(
        &executor,
        "echo first; seq 1 2000; echo last; echo small >&2",
    )
    .await;
    let out = &result.stdout;
    assert!(out.truncated);
    assert!(out.text.len() <= 500);
    assert!(out.text.ends_with("2000\nlast\n"));
    assert!(!out.text.contains("first"));
    // The cap is per stream: stderr is untouched.
    assert_eq!(result.stderr.text, "small\n");
    assert!(!result.stderr.truncated);

    let path = out.spill_path.as_ref().expect("spill path");
    let spilled = std::fs::read_to_string(path).unwrap();
    assert!(spilled.starts_with("first\n1\n2\n"));
    assert!(spilled.ends_with("1999\n2000\nlast\n"));
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    assert!(path.starts_with(super::fixture::spill_parent()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spill_files_keep_raw_bytes() {
    let executor = capped(8);
    let result = run(&executor, "printf 'ab\\xffcd\\x00efghijkl'").await;
    let raw = std::fs::read(result.stdout.spill_path.unwrap()).unwrap();
    assert_eq!(raw, b"ab\xffcd\x00efghijkl");
    assert_eq!(result.stdout.text, "efghijkl");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_spill_still_returns_the_tail() {
    // The spill parent is a regular file: the private directory cannot be
    // created, so no spill path is advertised, but nothing in memory is lost.
    let not_a_dir = tempfile::NamedTempFile::new().unwrap();
    let executor = LocalBashExecutor::new(LocalConfig {
        max_output_bytes: 100,
        spill_parent: Some(not_a_dir.path().to_owned()),
        ..config()
    })
    .unwrap();
    let result = run(&executor, "seq 1 1000").await;
    assert!(result.stdout.truncated);
    assert_eq!(result.stdout.spill_path, None);
    assert!(result.stdout.text.ends_with("999\n1000\n"));
    assert_eq!(result.exit_code, Some(0));
    // ... and says why.
    let note = result.stdout.spill_note.as_deref().unwrap_or_default();
    assert!(
        note.starts_with("the spill file could not be created: cannot create spill directory"),
        "{note}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spill_directory_until_the_first_overflow() {
    let parent = tempfile::tempdir().unwrap();
    let executor = LocalBashExecutor::new(LocalConfig {
        max_output_bytes: 100,
        spill_parent: Some(parent.path().to_owned()),
        ..config()
    })
    .unwrap();
    run(&executor, "echo small").await;
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    run(&executor, "seq 1 1000").await;
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
}
