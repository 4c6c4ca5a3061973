//! The sandbox probe's verdict, kept per user across processes in the temp
//! dir: used when its key matches and the file is the user's own, probed
//! again (and rewritten) when not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::confined::{skip, usable_or_skip};

fn backend_of(tmp: &Path, ws: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
        .args(["run", "--sandbox", "read-only", "--json", "--workdir"])
        .arg(ws)
        .args(["--", "true"])
        .env("TMPDIR", tmp)
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    result["sandbox"]["backend"].as_str().unwrap().to_owned()
}

#[test]
fn a_kept_verdict_is_used_only_when_it_is_ours_and_current() {
    if !usable_or_skip(&["--sandbox", "read-only"], "the kept probe verdict") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let (tmp, ws) = (root.path().join("tmp"), root.path().join("ws"));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    let chosen = backend_of(&tmp, &ws);
    // SAFETY: geteuid has no arguments and cannot fail.
    let kept = tmp.join(format!("dsh-bash-probe-{}", unsafe { libc::geteuid() }));
    let line = std::fs::read_to_string(&kept).expect("the verdict is kept");
    let (key, verdict) = line.trim_end().rsplit_once(" => ").unwrap();
    assert_eq!(verdict.split(' ').next(), Some(chosen.as_str()), "{line}");
    if chosen != "bwrap" {
        skip("the kept probe verdict: bwrap is not chosen here, a kept Landlock cannot be told from a probed one");
        return;
    }
    // A kept verdict of ours with the current key is used as it stands
    // (written here by hand: Landlock where bwrap works).
    std::fs::write(&kept, format!("{key} => landlock 7\n")).unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(backend_of(&tmp, &ws), "landlock");
    // Writable by others: ignored, probed again and rewritten.
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(backend_of(&tmp, &ws), "bwrap");
    assert!(std::fs::read_to_string(&kept)
        .unwrap()
        .ends_with(" => bwrap\n"));
    assert_eq!(
        std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Another key (another kernel, bwrap, build): probed again.
    std::fs::write(&kept, format!("{key} kernel=0.0 => landlock 7\n")).unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(backend_of(&tmp, &ws), "bwrap");
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap(),
        format!("{key} => bwrap\n")
    );
    // A link in its place is never followed.
    std::fs::remove_file(&kept).unwrap();
    let elsewhere = root.path().join("elsewhere");
    std::fs::write(&elsewhere, format!("{key} => landlock 7\n")).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &kept).unwrap();
    assert_eq!(backend_of(&tmp, &ws), "bwrap");
    assert_eq!(
        std::fs::read_to_string(&elsewhere).unwrap(),
        format!("{key} => landlock 7\n"),
        "the link's target was written"
    );
}
