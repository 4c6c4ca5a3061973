//! Repositories a command added to the workspace's index as gitlinks.
//!
//! Under `workspace-write` the index is writable (commits need it), so a
//! command can make a repository of its own in a subdirectory and `git
//! add` it: the host's next `git status` in the workspace recurses into
//! every gitlink and runs that repository's config (`core.fsmonitor`) and,
//! on a commit there, its hooks. Nothing can stop the write itself, so the
//! server looks once the command's tree is gone: when an index (the
//! root's, a submodule's, a nested repository's) changed, a gitlink whose
//! `.git` the backend did not keep read-only for the command is named in
//! the result (`sandbox.planted`), for the model and the person to undo
//! (`git -C <parent> rm -r -f --cached -- <name>`, and a commit if the
//! command committed it). The next command keeps it read-only like every
//! gitlink's.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use dsh_sandbox::Workspace;

/// The indexes of the workspace's repositories as they were when the
/// command started.
#[derive(Debug)]
pub(crate) struct IndexWatch {
    workspace: Workspace,
    before: Vec<(PathBuf, Option<Stamp>)>,
}

/// What tells one version of a file from the next (git replaces its index
/// by renaming a new one over it).
#[derive(Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::symlink_metadata(path).ok().map(|meta| Stamp {
        ino: meta.ino(),
        size: meta.size(),
        modified: (meta.mtime(), meta.mtime_nsec()),
        changed: (meta.ctime(), meta.ctime_nsec()),
    })
}

/// Every repository index of `workspace` with its stamp now.
fn stamps(workspace: &Workspace) -> Vec<(PathBuf, Option<Stamp>)> {
    dsh_protect::repository_indexes(workspace)
        .into_iter()
        .map(|index| {
            let now = stamp(&index);
            (index, now)
        })
        .collect()
}

impl IndexWatch {
    /// Notes the indexes as they are now (the root's, each gitlink's, a
    /// split index's shared part beside it). Blocking.
    pub(crate) fn start(workspace: &Workspace) -> Self {
        IndexWatch {
            workspace: workspace.clone(),
            before: stamps(workspace),
        }
    }

    /// The gitlinks added since [`IndexWatch::start`], in any of the
    /// repositories, whose repository none of `kept` (what the backend kept
    /// read-only) covers, and whether every index could be read whole;
    /// nothing (and all) when no index changed. Blocking.
    pub(crate) fn planted(&self, kept: &[PathBuf]) -> (Vec<PathBuf>, bool) {
        if stamps(&self.workspace) == self.before {
            return (Vec::new(), true);
        }
        dsh_protect::unvetted_gitlinks(&self.workspace, kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(at: &Path, args: &[&str]) {
        let status = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@e",
                "-c",
                "advice.addEmbeddedRepo=false",
            ])
            .args(args)
            .current_dir(at)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    #[test]
    fn a_repository_added_as_a_gitlink_is_named_once_the_index_changed() {
        if Command::new("git").arg("--version").output().is_err() {
            eprintln!("SKIP planted gitlinks: git is not installed");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        git(&root, &["init", "-q"]);
        std::fs::write(root.join("a"), "a").unwrap();
        git(&root, &["add", "a"]);
        git(&root, &["commit", "-qm", "one"]);
        let vendored = root.join("vendored");
        std::fs::create_dir(&vendored).unwrap();
        git(&vendored, &["init", "-q"]);
        std::fs::write(vendored.join("v"), "v").unwrap();
        git(&vendored, &["add", "v"]);
        git(&vendored, &["commit", "-qm", "v"]);
        git(&root, &["add", "vendored"]);
        let workspace = Workspace::open(&root).unwrap();
        // There before the command, and kept: nothing to say.
        let watch = IndexWatch::start(&workspace);
        let kept = [vendored.join(".git/config")];
        assert!(watch.planted(&kept).0.is_empty(), "unchanged index");
        let evil = root.join("evil");
        std::fs::create_dir(&evil).unwrap();
        git(&evil, &["init", "-q"]);
        std::fs::write(evil.join("e"), "e").unwrap();
        git(&evil, &["add", "e"]);
        git(&evil, &["commit", "-qm", "e"]);
        git(&root, &["add", "evil"]);
        assert_eq!(watch.planted(&kept).0, std::slice::from_ref(&evil));
        // Hidden in a split index's shared part: named all the same.
        git(&root, &["update-index", "--split-index"]);
        assert_eq!(watch.planted(&kept).0, std::slice::from_ref(&evil));
        // Added inside a repository the root's index already links (a
        // submodule, an embedded repository): named too.
        let kept = [vendored.join(".git/config"), evil.join(".git/config")];
        let watch = IndexWatch::start(&workspace);
        let inner = vendored.join("inner");
        std::fs::create_dir(&inner).unwrap();
        git(&inner, &["init", "-q"]);
        std::fs::write(inner.join("i"), "i").unwrap();
        git(&inner, &["add", "i"]);
        git(&inner, &["commit", "-qm", "i"]);
        git(&vendored, &["add", "inner"]);
        assert_eq!(watch.planted(&kept).0, [inner]);
        // A flood of gitlinks past what is read: not all, so the result
        // says the protection was partial.
        let watch = IndexWatch::start(&workspace);
        let flood: String = (0..300)
            .map(|n| format!("160000 1111111111111111111111111111111111111111\tz{n:03}\n"))
            .collect();
        let mut child = Command::new("git")
            .args(["update-index", "--index-info"])
            .current_dir(&root)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), flood.as_bytes()).unwrap();
        assert!(child.wait().unwrap().success());
        assert!(!watch.planted(&kept).1, "a flood is not read whole");
        // No repository: nothing.
        let bare = tempfile::tempdir().unwrap();
        let none = IndexWatch::start(&Workspace::open(bare.path()).unwrap());
        assert!(none.planted(&[]).0.is_empty());
    }
}
