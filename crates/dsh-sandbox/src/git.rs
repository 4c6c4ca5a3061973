//! What else a protected `.git` must take with it: the places inside the
//! workspace from which git would run code the next time a person uses the
//! repository on the host.
//!
//! - a `.git` *file* (a worktree's, a submodule's): the git directory it
//!   points to and that one's common directory;
//! - symlinks inside a git directory (a hook linked to
//!   `scripts/pre-commit`): what they point to inside the workspace;
//! - path-valued settings of the repository's config (`core.hooksPath =
//!   .githooks`, `core.fsmonitor = ./tools/fsmon`, `include.path`, a filter
//!   driver's program): those paths, a missing `core.hooksPath` included;
//! - the submodules `.gitmodules` lists: their own `.git` (a repository
//!   planted there runs when `git status` recurses into it);
//! - `HEAD` at the workspace root, when the root has no repository of its
//!   own: a stand-in there keeps the root from being turned into a bare
//!   repository git would discover.
//!
//! Everything is read with bounds (files of at most 1 MiB, at most
//! [`MAX_ENTRIES`] entries walked per git directory).

use std::path::{Component, Path, PathBuf};

/// Entries walked per git directory looking for symlinks.
const MAX_ENTRIES: usize = 20_000;

/// Submodules whose `.git` is protected, at most.
const MAX_SUBMODULES: usize = 64;

/// Files read (config, `.git` files, `.gitmodules`) at most this long.
const MAX_FILE: u64 = 1 << 20;

fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// `path` canonical, if it exists inside `root`.
fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path)
        .ok()
        .filter(|p| p.starts_with(root) && p != root)
}

/// `path` (relative to `base`, or absolute) as a clean path inside `root`,
/// without touching the disk; `None` if it leaves `root`.
fn lexically_inside(root: &Path, base: &Path, path: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut clean = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    clean
        .strip_prefix(root)
        .ok()
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(Path::to_path_buf)
}

/// True if and only if `dir` is what git takes for a git directory: a
/// `HEAD` that is a file or a symlink, and `objects` and `refs`
/// directories (git's `is_git_directory`, re-implemented: a stand-in for a
/// missing `.git`, an empty directory, of this command or another one, or
/// left by a killed server, is never mistaken for a repository).
fn is_git_directory(dir: &Path) -> bool {
    let head = std::fs::symlink_metadata(dir.join("HEAD"));
    head.is_ok_and(|m| m.is_file() || m.file_type().is_symlink())
        && ["objects", "refs"]
            .iter()
            .all(|sub| std::fs::symlink_metadata(dir.join(sub)).is_ok_and(|m| m.is_dir()))
}

/// The git directories of the repository at `root`: `.git` itself, or
/// what a `.git` file points to and its common directory (inside `root`).
/// Empty when the root has no repository of its own (a `.git` directory
/// that is not a git directory, such as a stand-in, included).
pub(crate) fn git_dirs(root: &Path) -> Vec<PathBuf> {
    let dot_git = root.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
        return Vec::new();
    };
    if meta.is_dir() {
        return if is_git_directory(&dot_git) {
            vec![dot_git]
        } else {
            Vec::new()
        };
    }
    let Some(text) = read_small(&dot_git) else {
        return Vec::new();
    };
    let Some(target) = text.lines().find_map(|l| l.strip_prefix("gitdir:")) else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    let Some(gitdir) = inside(root, &root.join(target.trim())).filter(|p| p.is_dir()) else {
        return dirs;
    };
    if let Some(common) = read_small(&gitdir.join("commondir")) {
        if let Some(common) = inside(root, &gitdir.join(common.trim())).filter(|p| p.is_dir()) {
            dirs.push(common);
        }
    }
    dirs.push(gitdir);
    dirs
}

/// Targets inside `root` of the symlinks in `gitdir` (outside every git
/// directory: those are protected already).
fn linked_out(root: &Path, gitdir: &Path, gitdirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![gitdir.to_path_buf()];
    let mut walked = 0;
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            walked += 1;
            if walked > MAX_ENTRIES {
                return found;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_symlink() {
                if let Some(target) = inside(root, &path) {
                    if !gitdirs.iter().any(|g| target.starts_with(g)) {
                        found.push(target);
                    }
                }
            } else if kind.is_dir() {
                // Loose objects and logs never run; they are the bulk.
                let name = entry.file_name();
                if !matches!(name.to_str(), Some("objects" | "logs" | "lfs")) {
                    pending.push(path);
                }
            }
        }
    }
    found
}

/// The values of a git config file, with their (lowercased) keys.
fn config_values(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.starts_with(['#', ';', '[']) {
                return None;
            }
            let (key, value) = line.split_once('=')?;
            let value = value.trim().trim_matches('"').trim();
            Some((key.trim().to_ascii_lowercase(), value.to_owned()))
        })
        .collect()
}

/// Everything beyond the git directories a protected `.git` takes along,
/// relative to `root`.
pub(crate) fn reach(root: &Path) -> Vec<PathBuf> {
    let gitdirs = git_dirs(root);
    let mut reached: Vec<PathBuf> = Vec::new();
    let mut add = |path: PathBuf| {
        if let Ok(relative) = path.strip_prefix(root) {
            if !relative.as_os_str().is_empty() && !reached.iter().any(|r| r == relative) {
                reached.push(relative.to_path_buf());
            }
        }
    };
    for gitdir in &gitdirs {
        for target in linked_out(root, gitdir, &gitdirs) {
            add(target);
        }
        for file in ["config", "config.worktree"] {
            let Some(text) = read_small(&gitdir.join(file)) else {
                continue;
            };
            for (key, value) in config_values(&text) {
                // The program of a command-valued setting is its first word.
                let Some(word) = value.split_whitespace().next() else {
                    continue;
                };
                // Settings that are paths whatever they look like; for the
                // rest, a value that looks like one.
                let path_valued = key == "hookspath" || key == "path";
                let path_like = word.starts_with('.') || word.contains('/');
                if !(path_valued || path_like) {
                    continue;
                }
                // Relative paths are relative to the worktree (hooks,
                // commands) or to the config file (include.path).
                for base in [root, gitdir.as_path()] {
                    let Some(relative) = lexically_inside(root, base, word) else {
                        continue;
                    };
                    let absolute = root.join(&relative);
                    if gitdirs.iter().any(|g| absolute.starts_with(g)) {
                        continue;
                    }
                    // A missing hooks directory is protected too: it must
                    // not be created.
                    if key == "hookspath" || absolute.exists() {
                        add(absolute);
                    }
                }
            }
        }
    }
    if let Some(text) = read_small(&root.join(".gitmodules")) {
        // Bounded: every entry is one more bind for every command.
        for (key, value) in config_values(&text).into_iter().take(MAX_SUBMODULES * 4) {
            if key == "path" {
                if let Some(relative) = lexically_inside(root, root, &value) {
                    add(root.join(relative).join(".git"));
                }
            }
        }
    }
    // Without a repository of its own, the root could be made a bare one.
    if gitdirs.is_empty() {
        add(root.join("HEAD"));
    }
    reached
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_takes_along_what_would_run_code() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::create_dir_all(root.join(".git/refs")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir_all(root.join("scripts")).unwrap();
        std::fs::create_dir_all(root.join("tools")).unwrap();
        std::fs::write(root.join("scripts/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join("tools/fsmon"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(
            "../../scripts/pre-commit",
            root.join(".git/hooks/pre-commit"),
        )
        .unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\thooksPath = .githooks\n\tfsmonitor = \"./tools/fsmon --flag\"\n\tbare = false\n[include]\n\tpath = ../../etc/outside\n",
        )
        .unwrap();
        std::fs::write(
            root.join(".gitmodules"),
            "[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.com/lib\n[submodule \"x\"]\n\tpath = ../escape\n",
        )
        .unwrap();
        let reached = reach(&root);
        for expected in ["scripts/pre-commit", ".githooks", "tools/fsmon", "lib/.git"] {
            assert!(
                reached.contains(&PathBuf::from(expected)),
                "{expected} not in {reached:?}"
            );
        }
        assert!(reached.iter().all(|p| !p.starts_with("..")), "{reached:?}");
        assert_eq!(git_dirs(&root), [root.join(".git")]);
        assert!(!reached.contains(&PathBuf::from("HEAD")));
        std::fs::remove_dir_all(root.join(".git")).unwrap();
        assert!(reach(&root).contains(&PathBuf::from("HEAD")));
        // An empty `.git` (a stand-in of another command, or one a killed
        // server left) is no repository: HEAD stays protected.
        std::fs::create_dir(root.join(".git")).unwrap();
        assert!(git_dirs(&root).is_empty());
        assert!(reach(&root).contains(&PathBuf::from("HEAD")));
    }
}
