//! What a workspace's protected paths are on disk now, for the backends
//! that keep them read-only and the checks after a command: git's reach
//! (what git runs code or reads configuration from: hooks, config, the
//! directories a `.git` file points to, submodules), each home's
//! dot-entries, and the repositories and gitlinks `git status` at the
//! workspace root recurses into. Reads only, by path, bounded; a swap can
//! change what is proposed for protection, never what is opened, created
//! or removed (the backends decide that beneath descriptors).
//!
//! The list itself — which paths, where they are looked for — is
//! configuration, in the seam ([`dsh_sandbox::ProtectedPaths`]); this
//! crate reads the disk for it.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::too_many_lines))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dsh_sandbox::{
    Protected, ProtectedPaths, ProtectedState, Resolution, Workspace, HOME_PROTECTED_DIRS,
    ROOT_PROTECTED_SUFFIXES, STAND_IN_PREFIX,
};

mod git;

pub use git::lexically_clean;

/// What each protected path is in `workspace` right now, plus, with
/// `.git`, what git would run code from (see below).
///
/// A protected `.git` takes along: the git directory and common
/// directory a `.git` file (a worktree's, a submodule's) points to;
/// what symlinks inside a git directory point to; the paths that
/// path-valued settings of the repository's config name (a missing
/// `core.hooksPath` included); each submodule's `.git`; and `HEAD` at
/// the root (so the root cannot become a bare repository, with or
/// without a `.git` of its own).
pub fn resolve(protected: &ProtectedPaths, workspace: &Workspace) -> Resolution {
    let root = workspace.path();
    resolve_in(protected, root, &homes_inside(root))
}

/// [`resolve`] with the home directories inside `root` given.
fn resolve_in(protected: &ProtectedPaths, root: &Path, homes: &[PathBuf]) -> Resolution {
    let mut resolved: BTreeMap<PathBuf, ProtectedState> = BTreeMap::new();
    let mut complete = true;
    if protected.protects_classes() {
        let (members, all) = classes_in(protected, root, homes);
        complete &= all;
        for (path, state) in members {
            resolved.entry(path).or_insert(state);
        }
    }
    for (relative, at_root, in_homes) in protected.scoped() {
        if in_homes {
            // Read as files from a home directory, but for the
            // directories among them.
            let file = !relative
                .to_str()
                .is_some_and(|r| HOME_PROTECTED_DIRS.contains(&r));
            for home in homes {
                let (path, state) = state_of(root, &home.join(relative), file);
                resolved.entry(path).or_insert(state);
            }
        }
        if !at_root {
            continue;
        }
        if relative != Path::new(".git") {
            let (path, state) = state_of(root, relative, false);
            resolved.entry(path).or_insert(state);
        } else {
            let reach = crate::git::reach(root);
            complete &= reach.complete;
            // The root's own git directory keeps what git runs or
            // reads configuration from (reached below) and stays
            // writable for the rest; a `.git` file, or a `.git` that
            // is no repository, is kept whole.
            let dot_git = root.join(".git");
            if !reach.gitdirs.contains(&dot_git) {
                let (path, state) = state_of(root, relative, false);
                resolved.entry(path).or_insert(state);
            }
            for reached in reach.reached {
                let (path, state) = state_of(root, &reached.path, reached.file);
                resolved.entry(path).or_insert(state);
            }
        }
    }
    Resolution {
        paths: resolved
            .into_iter()
            .map(|(path, state)| Protected { path, state })
            .collect(),
        complete,
    }
}

/// The indexes of every repository `git status` at the workspace root
/// recurses into (the root's, each gitlink's, nested ones): the files
/// whose change [`unvetted_gitlinks`] looks into.
pub fn repository_indexes(workspace: &Workspace) -> Vec<PathBuf> {
    crate::git::repositories(workspace.path())
        .0
        .into_iter()
        .map(|(_, index, _)| index)
        .collect()
}

/// The gitlinks, in any repository `git status` at the workspace root
/// recurses into, whose repository (a `.git` there) none of `kept` covers:
/// a repository a command made and added with `git add`, whose config and
/// hooks the host's next `git status` in the workspace would run; and
/// whether every index could be read whole (past the bounds, or with an
/// index git reads and this cannot, some may be missing: the result must
/// then say so). `kept` is what the backend kept read-only for that
/// command (a gitlink that was there before has its `.git`, or its
/// members, among them).
pub fn unvetted_gitlinks(workspace: &Workspace, kept: &[PathBuf]) -> (Vec<PathBuf>, bool) {
    let (repositories, complete) = crate::git::repositories(workspace.path());
    let mut unvetted = Vec::new();
    for link in repositories.into_iter().flat_map(|(_, _, links)| links) {
        let dot_git = link.join(".git");
        if std::fs::symlink_metadata(&dot_git).is_ok()
            && !kept.iter().any(|k| k.starts_with(&dot_git))
            && !unvetted.contains(&link)
        {
            unvetted.push(link);
        }
    }
    (unvetted, complete)
}

/// Members of one class (a home's dot-entries, the root's
/// `*.code-workspace` files) protected at most: each is one more bind, and
/// bubblewrap takes at most 9000 arguments. The oldest (by inode change
/// time, which no command can set back) are kept first, so a command that
/// floods a class cannot push out what was there before it.
pub const MAX_CLASS_MEMBERS: usize = 256;

/// What the classes protect in `root` now: every dot-entry of each home
/// in `homes`, and the root's names with a protected ending; none the
/// operator unprotected by name.
fn classes_in(
    protected: &ProtectedPaths,
    root: &Path,
    homes: &[PathBuf],
) -> (Vec<(PathBuf, ProtectedState)>, bool) {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    let mut complete = true;
    let mut scan = |dir: &Path, wanted: &dyn Fn(&str) -> bool| {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            return;
        };
        let mut members: Vec<((i64, i64), std::ffi::OsString)> = entries
            .filter_map(Result::ok)
            .filter(|entry| {
                entry.file_name().to_str().is_some_and(|text| {
                    wanted(text)
                        && !text.starts_with(STAND_IN_PREFIX)
                        && !protected.excepts(Path::new(text))
                })
            })
            .map(|entry| {
                let changed = entry
                    .metadata()
                    .map_or((i64::MAX, 0), |m| (m.ctime(), m.ctime_nsec()));
                (changed, entry.file_name())
            })
            .collect();
        members.sort();
        complete &= members.len() <= MAX_CLASS_MEMBERS;
        for (_, name) in members.into_iter().take(MAX_CLASS_MEMBERS) {
            found.push(state_of(root, &dir.join(name), false));
        }
    };
    for home in homes {
        scan(home, &|name| name.starts_with('.'));
    }
    scan(Path::new(""), &|name| {
        ROOT_PROTECTED_SUFFIXES.iter().any(|s| name.ends_with(s))
    });
    (found, complete)
}

/// The home directories inside `root` (the root itself included), relative
/// to it: `$HOME` and the homes `/etc/passwd` names.
fn homes_inside(root: &Path) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
        homes.extend(
            passwd
                .lines()
                .filter_map(|line| line.split(':').nth(5))
                .filter(|home| !home.is_empty())
                .map(PathBuf::from),
        );
    }
    // A home that does not exist yet is placed where it would be (its
    // existing ancestors resolved): it is protected as missing, so no
    // command can create it with start-up files in it.
    let mut inside: Vec<PathBuf> = homes
        .into_iter()
        .filter(|home| home.is_absolute())
        .filter_map(|home| resolved_as_far_as_it_exists(&home))
        .filter_map(|home| home.strip_prefix(root).ok().map(Path::to_path_buf))
        .collect();
    inside.sort();
    inside.dedup();
    inside
}

/// `path` canonical if it exists; else its deepest existing ancestor
/// canonical with the rest appended (`..` in the rest: `None`).
pub fn resolved_as_far_as_it_exists(path: &Path) -> Option<PathBuf> {
    if let Ok(real) = std::fs::canonicalize(path) {
        return Some(real);
    }
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        let name = at.file_name()?;
        rest.push(name.to_owned());
        at = at.parent()?;
        if let Ok(real) = std::fs::canonicalize(at) {
            return Some(rest.iter().rev().fold(real, |path, name| path.join(name)));
        }
    }
}

/// `relative` under `root`, walked one component at a time without
/// following symlinks.
fn state_of(root: &Path, relative: &Path, file: bool) -> (PathBuf, ProtectedState) {
    let mut path = root.to_path_buf();
    let count = relative.components().count();
    for (index, component) in relative.components().enumerate() {
        path.push(component);
        let last = index + 1 == count;
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return (path, ProtectedState::Symlink),
            Ok(_) if last => return (path, ProtectedState::Present),
            Ok(meta) if meta.is_dir() => {}
            // A file where a directory is expected: kept as it is, nothing
            // can be created beneath it.
            Ok(_) => return (path, ProtectedState::Present),
            Err(_) => {
                return (
                    root.join(relative),
                    ProtectedState::Missing {
                        file: file && last,
                        stand_in: path,
                    },
                )
            }
        }
    }
    (path, ProtectedState::Present)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_is_protected_as_a_class_and_unprotected_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let home = root.join("home/u");
        std::fs::create_dir_all(home.join(".cache/pre-commit")).unwrap();
        std::fs::create_dir_all(home.join(".local/lib")).unwrap();
        std::fs::write(home.join(".weirdrc"), "x").unwrap();
        std::fs::write(home.join("notes"), "x").unwrap();
        std::fs::write(home.join(".dsh-bash-stand-in-1-2"), "").unwrap();
        std::fs::write(root.join("team.code-workspace"), "{}").unwrap();
        std::fs::write(root.join(".weirdrc"), "x").unwrap();
        let homes = [PathBuf::from("home/u")];
        let mut paths = ProtectedPaths::default();
        let resolved = resolve_in(&paths, &root, &homes).paths;
        let has = |resolved: &[Protected], path: PathBuf| resolved.iter().any(|p| p.path == path);
        // Every dot-entry there now, whatever its name.
        for name in [".cache", ".local", ".weirdrc"] {
            assert!(has(&resolved, home.join(name)), "{name}: {resolved:?}");
        }
        // Known ones stand in when missing, as files or directories.
        let state = |path: PathBuf| {
            resolved
                .iter()
                .find(|p| p.path == path)
                .map(|p| p.state.clone())
        };
        assert_eq!(
            state(home.join(".bash_aliases")),
            Some(ProtectedState::Missing {
                stand_in: home.join(".bash_aliases"),
                file: true
            })
        );
        assert_eq!(
            state(home.join(".aws")),
            Some(ProtectedState::Missing {
                stand_in: home.join(".aws"),
                file: false
            })
        );
        // Not a dot-entry, a stand-in's private name, not a home: left.
        assert!(!has(&resolved, home.join("notes")));
        assert!(!has(&resolved, home.join(".dsh-bash-stand-in-1-2")));
        assert!(!has(&resolved, root.join(".weirdrc")));
        // The root's editor workspace files.
        assert!(has(&resolved, root.join("team.code-workspace")));
        // Unprotected by name: that name in every home, nothing else.
        paths.unprotect(".cache").unwrap();
        paths.unprotect("team.code-workspace").unwrap();
        let resolved = resolve_in(&paths, &root, &homes).paths;
        assert!(!has(&resolved, home.join(".cache")));
        assert!(!has(&resolved, root.join("team.code-workspace")));
        assert!(has(&resolved, home.join(".weirdrc")));
        // Named again: protected again.
        paths.protect(".cache").unwrap();
        let resolved = resolve_in(&paths, &root, &homes).paths;
        assert!(has(&resolved, home.join(".cache")));
        // Nothing but names: the classes stay off.
        assert!(ProtectedPaths::none().unprotect(".cache").is_err());
    }

    /// A command that floods a class cannot push out what was there before
    /// it, and the resolution says it is incomplete.
    #[test]
    fn a_flooded_class_keeps_its_oldest_members_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("zz-team.code-workspace"), "{}").unwrap();
        // Inode change times are this fine-grained; make sure they differ.
        std::thread::sleep(std::time::Duration::from_millis(20));
        for n in 0..(MAX_CLASS_MEMBERS + 10) {
            std::fs::write(root.join(format!("a{n:04}.code-workspace")), "{}").unwrap();
        }
        let resolution = resolve_in(&ProtectedPaths::default(), &root, &[]);
        assert!(!resolution.complete);
        assert!(resolution
            .paths
            .iter()
            .any(|p| p.path == root.join("zz-team.code-workspace")));
        let workspaces = resolution
            .paths
            .iter()
            .filter(|p| p.path.to_string_lossy().ends_with(".code-workspace"))
            .count();
        assert_eq!(workspaces, MAX_CLASS_MEMBERS);
        // Without the flood: complete.
        let calm = tempfile::tempdir().unwrap();
        assert!(resolve_in(&ProtectedPaths::default(), calm.path(), &[]).complete);
    }

    #[test]
    fn a_home_that_does_not_exist_yet_is_placed_where_it_would_be() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            resolved_as_far_as_it_exists(&dir.path().join("home/u")),
            Some(root.join("home/u"))
        );
        // Protected as missing: the stand-in is its first missing ancestor.
        let homes = [PathBuf::from("home/u")];
        let resolved = resolve_in(&ProtectedPaths::default(), &root, &homes).paths;
        let bashrc = resolved
            .iter()
            .find(|p| p.path == root.join("home/u/.bashrc"))
            .unwrap();
        assert_eq!(
            bashrc.state,
            ProtectedState::Missing {
                stand_in: root.join("home"),
                file: false
            }
        );
    }

    #[test]
    fn resolution_finds_present_missing_symlinked_and_linked_git_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("main/.git/worktrees/wt")).unwrap();
        std::fs::write(root.join(".bashrc"), "x").unwrap();
        std::fs::create_dir(root.join(".vscode")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join(".envrc")).unwrap();
        std::fs::write(root.join(".git"), "gitdir: main/.git/worktrees/wt\n").unwrap();
        std::fs::write(root.join("main/.git/worktrees/wt/commondir"), "../..\n").unwrap();
        let workspace = Workspace::open(&root).unwrap();
        let root = workspace.path().to_owned();
        // The root is a home directory here.
        let resolved = resolve_in(&ProtectedPaths::default(), &root, &[PathBuf::new()]).paths;
        let state = |rel: &str| {
            resolved
                .iter()
                .find(|p| p.path == root.join(rel))
                .map(|p| p.state.clone())
        };
        assert_eq!(state(".bashrc"), Some(ProtectedState::Present));
        assert_eq!(state(".git"), Some(ProtectedState::Present));
        assert_eq!(state(".envrc"), Some(ProtectedState::Symlink));
        assert_eq!(state("main/.git"), Some(ProtectedState::Present));
        assert_eq!(
            state("main/.git/worktrees/wt"),
            Some(ProtectedState::Present)
        );
        // The root has a repository, whose `.git` a command could break:
        // its HEAD stands in all the same.
        assert!(matches!(
            state("HEAD"),
            Some(ProtectedState::Missing { .. })
        ));
        assert_eq!(
            state(".ssh"),
            Some(ProtectedState::Missing {
                stand_in: root.join(".ssh"),
                file: false,
            })
        );
        assert_eq!(
            state(".zshrc"),
            Some(ProtectedState::Missing {
                stand_in: root.join(".zshrc"),
                file: true,
            })
        );
        // Not a home: the shell's files are left alone.
        let elsewhere = resolve_in(&ProtectedPaths::default(), &root, &[]).paths;
        assert!(!elsewhere.iter().any(|p| p.path == root.join(".bashrc")));
        // Named again: protected at the root too, still in the homes.
        let mut again = ProtectedPaths::default();
        again.protect(".zshrc").unwrap();
        let home = PathBuf::from("home/u");
        let both = resolve_in(&again, &root, std::slice::from_ref(&home)).paths;
        assert!(both.iter().any(|p| p.path == root.join(".zshrc")));
        assert!(both.iter().any(|p| p.path == root.join("home/u/.zshrc")));
        // Present: protected whole.
        assert_eq!(state(".vscode"), Some(ProtectedState::Present));
        assert_eq!(
            state(".idea"),
            Some(ProtectedState::Missing {
                stand_in: root.join(".idea"),
                file: false,
            })
        );
        let mut nested = ProtectedPaths::none();
        nested.protect("a/b/c").unwrap();
        assert_eq!(
            resolve(&nested, &workspace).paths[0].state,
            ProtectedState::Missing {
                stand_in: root.join("a"),
                file: false,
            }
        );
    }
}
