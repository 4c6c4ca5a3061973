//! Output cannot fill the disk: a spill file stops at its cap, a full disk
//! leaves a partial file that is tracked and explained, and byte totals are
//! always reported.

use std::path::Path;
use std::process::Command;

use dsh_bash::BashExecutor;
use dsh_bash_local::{LocalBashExecutor, LocalConfig};

use super::fixture::{config, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spill_file_stops_at_its_cap_and_the_tail_keeps_updating() {
    let executor = LocalBashExecutor::new(LocalConfig {
        max_output_bytes: 1_000,
        max_spill_bytes: 100_000,
        ..config()
    })
    .unwrap();
    let result = run(&executor, "head -c 300000 /dev/zero | tr '\\0' a; echo END").await;
    let out = &result.stdout;
    assert!(out.truncated);
    assert_eq!(out.total_bytes, 300_004);
    assert!(out.text.ends_with("aEND\n"), "the tail stopped updating");
    assert_eq!(out.spill_note.as_deref(), Some("capped at 100000 bytes"));
    let path = out
        .spill_path
        .as_ref()
        .expect("the capped file is advertised");
    assert_eq!(std::fs::metadata(path).unwrap().len(), 100_000);
    executor.shutdown().await;
}

/// A 256 KiB tmpfs mounted for the test; `None` (and a loud skip) when this
/// host cannot mount one.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount() -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "dsh-small"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "mounting a small tmpfs is required (root) but failed"
            );
            eprintln!("SKIP: cannot mount a small tmpfs here (not root?)");
            return None;
        }
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_leaves_a_partial_file_that_says_why() {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    let executor = LocalBashExecutor::new(LocalConfig {
        max_output_bytes: 1_000,
        spill_parent: Some(disk.path().to_owned()),
        ..config()
    })
    .unwrap();
    let result = run(&executor, "head -c 2000000 /dev/zero; echo END").await;
    let out = &result.stdout;
    assert_eq!(out.total_bytes, 2_000_004);
    assert!(out.text.ends_with("END\n"), "output in memory was lost");
    let note = out.spill_note.as_deref().expect("a reason");
    assert!(note.contains("No space left on device"), "{note}");
    let path = out
        .spill_path
        .as_ref()
        .expect("the partial file is advertised");
    let kept = std::fs::metadata(path).unwrap().len();
    assert!(kept > 0 && kept < 2_000_004, "{kept}");
    assert!(
        note.ends_with(&format!("after {kept} bytes")),
        "{note} vs {kept}"
    );
    // The partial file is tracked: nothing else lies around untracked.
    let files: Vec<_> = walk(disk.path());
    assert_eq!(files, vec![path.clone()], "untracked files on the disk");
    executor.shutdown().await;
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        if entry.file_type().unwrap().is_dir() {
            found.extend(walk(&entry.path()));
        } else {
            found.push(entry.path());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarding_executor_removes_its_spill_directory_at_shutdown() {
    let parent = tempfile::tempdir().unwrap();
    let executor = LocalBashExecutor::new(LocalConfig {
        max_output_bytes: 100,
        spill_parent: Some(parent.path().to_owned()),
        discard_spill_on_shutdown: true,
        ..config()
    })
    .unwrap();
    let result = run(&executor, "seq 1 1000").await;
    let path = result.stdout.spill_path.expect("spilled");
    assert!(path.exists());
    executor.shutdown().await;
    assert!(!path.exists());
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
}
