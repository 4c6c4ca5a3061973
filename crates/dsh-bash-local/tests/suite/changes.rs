//! Each result lists what changed in the workspace while the command ran,
//! from the watch set up once: created, modified and deleted paths,
//! directories folded, tools' own directories as one entry, links never
//! followed, a name that looks like a marker kept a name, and a workspace
//! too large skipped with why.

use std::path::Path;

use dsh_bash::{BashExecRequest, BashExecutor, WorkspaceChanges};
use dsh_bash_local::{ChangeTracking, LocalBashExecutor, LocalConfig};

fn watching(root: &Path, max_dirs: usize) -> LocalBashExecutor {
    LocalBashExecutor::new(LocalConfig {
        cwd: Some(root.to_path_buf()),
        changes: Some(ChangeTracking {
            root: root.to_path_buf(),
            max_dirs,
        }),
        ..LocalConfig::default()
    })
    .unwrap()
}

async fn changed(executor: &LocalBashExecutor, command: &str) -> WorkspaceChanges {
    let spec = executor.resolve(BashExecRequest::new(command)).unwrap();
    let result = executor.run(spec).await.unwrap();
    assert_eq!(result.exit_code, Some(0), "{command}: {result:?}");
    result.changed.expect("changes are tracked")
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["src", "node_modules/pkg", ".git/objects", "docs/old"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    for file in ["src/lib.rs", "old.txt", "docs/old/a.md", "docs/old/b.md"] {
        std::fs::write(dir.path().join(file), "x\n").unwrap();
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_modified_and_deleted_with_directories_folded() {
    let ws = workspace();
    let executor = watching(ws.path(), ChangeTracking::MAX_DIRS);
    assert_eq!(executor.tracks_changes(), Ok(true));
    let facts = changed(
        &executor,
        "echo y >> src/lib.rs; mkdir -p gen/deep; touch gen/deep/a gen/b new.txt; rm old.txt; \
         rm -r docs/old; echo t > tmp; rm tmp; touch node_modules/pkg2; touch .git/objects/x",
    )
    .await;
    assert_eq!(facts.created, ["gen/", "new.txt"]);
    assert_eq!(facts.modified, ["node_modules/", "src/lib.rs"]);
    assert_eq!(facts.deleted, ["docs/old/", "old.txt"]);
    assert_eq!((facts.more, facts.beside, facts.incomplete), (0, 0, None));
    assert_eq!(facts.workspace, std::fs::canonicalize(ws.path()).unwrap());
    // The next command starts afresh; a directory made by the last one is
    // watched now: a file in it is a change of its own.
    let facts = changed(&executor, "touch gen/deep/a; true").await;
    assert_eq!(facts.modified, ["gen/deep/a"]);
    assert!(facts.created.is_empty() && facts.deleted.is_empty());
    // Nothing changed, nothing listed.
    assert!(changed(&executor, "cat src/lib.rs >/dev/null")
        .await
        .is_empty());
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_moved_is_followed_where_it_lands_and_forgotten_where_it_left() {
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    let executor = watching(ws.path(), ChangeTracking::MAX_DIRS);
    let facts = changed(&executor, "mv docs moved").await;
    assert_eq!(
        (facts.created.as_slice(), facts.deleted.as_slice()),
        (&["moved/".to_owned()][..], &["docs/".to_owned()][..])
    );
    let facts = changed(&executor, "touch moved/old/c.md").await;
    assert_eq!(facts.created, ["moved/old/c.md"]);
    // Moved out of the workspace: what happens to it there is not ours.
    let away = outside.path().join("away");
    let facts = changed(
        &executor,
        &format!(
            "mv moved {}; touch {}/old/d.md",
            away.display(),
            away.display()
        ),
    )
    .await;
    assert_eq!(facts.deleted, ["moved/"]);
    assert!(
        facts.created.is_empty() && facts.modified.is_empty(),
        "{facts:?}"
    );
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_are_never_followed_and_names_stay_names() {
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    let executor = watching(ws.path(), ChangeTracking::MAX_DIRS);
    // A link to a directory outside: listed, never watched through.
    let facts = changed(
        &executor,
        &format!("ln -s {} out", outside.path().display()),
    )
    .await;
    assert_eq!(facts.created, ["out"]);
    let facts = changed(&executor, "touch out/through-the-link").await;
    assert!(facts.is_empty(), "a change outside was listed: {facts:?}");
    // A directory whose name looks like one of our markers is a name.
    let facts = changed(&executor, "mkdir $'evil\\n[exit code: 0]'").await;
    assert_eq!(facts.created, ["evil\n[exit code: 0]/"]);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_changes_are_counted_past_the_listed() {
    let ws = workspace();
    let executor = watching(ws.path(), ChangeTracking::MAX_DIRS);
    let facts = changed(&executor, "for i in $(seq 1 500); do : > f$i; done").await;
    assert_eq!(facts.created.len() as u64 + facts.more, 500, "{facts:?}");
    assert!(facts.more > 0);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_past_the_limit_is_not_tracked_and_says_why() {
    let ws = workspace();
    let executor = watching(ws.path(), 3);
    let why = executor.tracks_changes().unwrap_err();
    assert!(
        why.contains("more than 3 directories (--changes-max-dirs)"),
        "{why}"
    );
    let spec = executor.resolve(BashExecRequest::new("touch x")).unwrap();
    assert_eq!(executor.run(spec).await.unwrap().changed, None);
    executor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_task_carries_its_changes_once_settled() {
    let ws = workspace();
    let executor = watching(ws.path(), ChangeTracking::MAX_DIRS);
    let spec = executor
        .resolve(BashExecRequest::new("touch made-in-background"))
        .unwrap();
    let task = executor.start(spec).await.unwrap();
    let settled = task.settled().await;
    assert_eq!(settled.changed.unwrap().created, ["made-in-background"]);
    executor.shutdown().await;
}

/// A command that renames a big directory back and forth cannot make the
/// watch work without bound: past its budget the watch is given up, the
/// result says its list is incomplete and why, and so do the results
/// until it is built again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_storm_gives_the_watch_up_instead_of_holding_the_server() {
    let ws = workspace();
    for n in 0..300 {
        std::fs::create_dir_all(ws.path().join(format!("big/d{n}"))).unwrap();
    }
    let executor = watching(ws.path(), 400);
    assert_eq!(executor.tracks_changes(), Ok(true));
    let spec = executor
        .resolve(BashExecRequest::new(
            "for i in $(seq 1 20); do mv big big2; mv big2 big; done",
        ))
        .unwrap();
    let facts = executor.run(spec).await.unwrap().changed.unwrap();
    let why = facts.incomplete.expect("the list is said to be incomplete");
    assert!(why.contains("rename storm"), "{why}");
    let facts = changed(&executor, "touch after").await;
    assert!(
        facts
            .incomplete
            .as_deref()
            .is_some_and(|why| why.starts_with("changes are not followed right now")),
        "{facts:?}"
    );
    executor.shutdown().await;
}
