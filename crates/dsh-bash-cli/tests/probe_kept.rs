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

/// As uid 65534 with a temp dir another user can write (here: root, who
/// plants a verdict with the right key under the unprivileged user's
/// name): the planted file is not the user's own, so it is ignored and
/// the backend probed.
#[test]
fn a_verdict_planted_by_another_user_is_ignored() {
    use common::confined::{as_user, base, binary, chown, usable_as_or_skip, User, NOBODY};
    if !usable_as_or_skip(
        User::Nobody,
        &["--sandbox", "read-only"],
        "a planted probe verdict",
    ) {
        return;
    }
    let root = base().join("probe-kept");
    let (tmp, ws) = (root.join("tmp"), root.join("ws"));
    for dir in [&root, &tmp, &ws] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    for dir in [base(), root.clone()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    chown(&ws, NOBODY);
    let backend = || {
        let output = as_user(User::Nobody, binary().to_str().unwrap())
            .args(["run", "--sandbox", "read-only", "--json", "--workdir"])
            .arg(&ws)
            .args(["--", "true"])
            .env("TMPDIR", &tmp)
            .output()
            .unwrap();
        let result: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
        result["sandbox"]["backend"].as_str().unwrap().to_owned()
    };
    let chosen = backend();
    let kept = tmp.join(format!("dsh-bash-probe-{NOBODY}"));
    let line = std::fs::read_to_string(&kept).expect("the verdict is kept");
    let (key, _) = line.trim_end().rsplit_once(" => ").unwrap();
    let planted = if chosen == "bwrap" {
        "landlock 7"
    } else {
        "bwrap"
    };
    std::fs::remove_file(&kept).unwrap();
    // Root's file, readable by all, naming the other backend.
    std::fs::write(&kept, format!("{key} => {planted}\n")).unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(backend(), chosen, "a verdict planted by root was used");
    let _ = std::fs::remove_dir_all(base());
}
