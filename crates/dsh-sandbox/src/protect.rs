use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use crate::Workspace;

/// The paths kept read-only inside a writable workspace by default: what
/// runs code later on the host, outside any sandbox, when a person or the
/// agent's host touches the project.
///
/// - `.git`: hooks (`.git/hooks/pre-commit`) and config (`core.fsmonitor`,
///   `core.pager`, aliases) run on the next `git` command (and what else it
///   takes along, see [`ProtectedPaths::resolve`]); `.hg`, Mercurial's
///   (`hgrc` hooks);
/// - `.envrc`: direnv runs it on entering the directory;
/// - the agents' and editors' own configuration, which names the MCP
///   servers they start (this one's arguments included), hooks and tasks:
///   `.mcp.json` (Claude Code), `.claude`, `.codex`, `.cursor`, `.gemini`,
///   `.continue`, `.zed`, `.vscode` (tasks, launch, settings, MCP servers,
///   recommended extensions), `.idea`, `.devcontainer` (`initializeCommand`
///   runs on the host), and every `*.code-workspace` file at the root (see
///   [`ROOT_PROTECTED_SUFFIXES`]);
/// - `.pre-commit-config.yaml`: the pre-commit framework's hook runs what
///   it lists on the next commit; `.husky` and `.githooks`, where hook
///   managers keep the hooks a `core.hooksPath` runs;
/// - `.gitmodules`: which submodules' `.git` are protected is read from it,
///   so it must not change under the protection;
/// - `.dsh-bash`: this project's own configuration, should it add one.
///
/// Plus, in every home directory inside the workspace, every dot-entry (see
/// [`HOME_PROTECTED_PATHS`]).
pub const DEFAULT_PROTECTED_PATHS: &[&str] = &[
    ".git",
    ".hg",
    ".envrc",
    ".mcp.json",
    ".claude",
    ".codex",
    ".cursor",
    ".gemini",
    ".continue",
    ".zed",
    ".vscode",
    ".idea",
    ".devcontainer",
    ".pre-commit-config.yaml",
    ".husky",
    ".githooks",
    ".gitmodules",
    ".dsh-bash",
];

/// Names at the workspace root protected by their ending: VS Code runs a
/// workspace file's tasks (`runOn: folderOpen`) when it is opened. The ones
/// present when a command starts are kept; a new one cannot be foreseen by
/// name (the README's limits say so).
pub const ROOT_PROTECTED_SUFFIXES: &[&str] = &[".code-workspace"];

/// A home directory inside the workspace (the workspace root itself when it
/// is one: `$HOME` or a home in `/etc/passwd`) is protected as a class:
/// **every dot-entry directly in it** that exists when a command starts is
/// kept read-only as a whole (shell start-up files, `.config`, `.local`,
/// `.ssh`, `.aws`, `.kube`, `.cargo`, `.npmrc`, editors' and desktop
/// autostart files, caches that tools later execute from), unless the
/// operator unprotects one by name. A dot-entry cannot be foreseen by name
/// when it does not exist yet, so these, the ones known to run code or name
/// a program when present, are stood in for while a command runs (files:
/// an empty file, which their readers open as files; [`HOME_PROTECTED_DIRS`]:
/// an empty directory). In any other directory these names run nothing, so
/// they are left alone there.
pub const HOME_PROTECTED_PATHS: &[&str] = &[
    // Shells and the session.
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".bash_aliases",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".pam_environment",
    ".xprofile",
    ".xsession",
    ".xsessionrc",
    ".xinitrc",
    ".inputrc",
    ".shrc",
    ".kshrc",
    ".cshrc",
    ".tcshrc",
    ".login",
    // On `PATH` (Debian's stock `.profile` puts `~/bin` first).
    "bin",
    // Tools that run what their start-up files say.
    ".gitconfig",
    ".hgrc",
    ".vimrc",
    ".vim",
    ".exrc",
    ".selected_editor",
    ".lesskey",
    ".less",
    ".lessfilter",
    ".mailcap",
    ".screenrc",
    ".psqlrc",
    ".irbrc",
    ".Rprofile",
    ".lldbinit",
    ".emacs",
    ".emacs.d",
    ".gdbinit",
    ".tmux.conf",
    ".curlrc",
    ".wgetrc",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".condarc",
    // Whole trees of configuration and installed programs.
    ".config",
    ".local",
    ".ssh",
    ".gnupg",
    ".aws",
    ".kube",
    ".docker",
    ".cargo",
    ".rustup",
    ".gradle",
    ".m2",
    ".nvm",
    ".pyenv",
    ".bun",
    ".deno",
    // Go's default GOPATH: `bin` on PATH, the module cache the host builds
    // from (not a dot-entry, so no class keeps it).
    "go",
];

/// Which of [`HOME_PROTECTED_PATHS`] stand in as a directory when missing.
pub const HOME_PROTECTED_DIRS: &[&str] = &[
    "bin", ".vim", ".emacs.d", ".config", ".local", ".ssh", ".gnupg", ".aws", ".kube", ".docker",
    ".cargo", ".rustup", ".gradle", ".m2", ".nvm", ".pyenv", ".bun", ".deno", "go",
];

/// The private names stand-ins are made under before they take their place:
/// never protected as a home's dot-entry of their own.
const STAND_IN_PREFIX: &str = ".dsh-bash-stand-in-";

/// A protected-path argument that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtectError {
    /// Empty, or only `.` components.
    #[error("invalid protected path \"{0}\": give a path relative to the workspace root, e.g. .git or .vscode/tasks.json")]
    Empty(String),
    /// Absolute, or leaving the workspace through `..`.
    #[error("invalid protected path \"{0}\": it must be relative to the workspace root and stay inside it (no leading /, no ..)")]
    Outside(String),
    /// `unprotect` of a path that is not protected.
    #[error("\"{given}\" is not a protected path; protected: {protected}")]
    NotProtected {
        /// The path given.
        given: String,
        /// The current list, comma-separated.
        protected: String,
    },
}

/// Where a protected path is looked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Scope {
    /// Relative to the workspace root.
    workspace: bool,
    /// Relative to each home directory inside the workspace.
    homes: bool,
}

/// Which paths inside the workspace stay read-only under
/// `workspace-write`: [`DEFAULT_PROTECTED_PATHS`], the root's
/// [`ROOT_PROTECTED_SUFFIXES`] and every home's dot-entries
/// ([`HOME_PROTECTED_PATHS`]) unless configured otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedPaths {
    /// Relative paths and where they are looked for.
    entries: BTreeMap<PathBuf, Scope>,
    /// The classes: every dot-entry of a home, the root's names with a
    /// protected ending.
    classes: bool,
    /// Names the operator unprotected that a class would protect.
    exceptions: BTreeSet<PathBuf>,
}

impl Default for ProtectedPaths {
    fn default() -> Self {
        let mut paths = ProtectedPaths::none();
        paths.classes = true;
        for (entries, homes) in [
            (DEFAULT_PROTECTED_PATHS, false),
            (HOME_PROTECTED_PATHS, true),
        ] {
            for entry in entries {
                // The defaults are well-formed.
                if let Ok(path) = parse(entry) {
                    let scope = paths.entries.entry(path).or_default();
                    scope.workspace |= !homes;
                    scope.homes |= homes;
                }
            }
        }
        paths
    }
}

/// `spec` as a clean relative path.
fn parse(spec: &str) -> Result<PathBuf, ProtectError> {
    let mut clean = PathBuf::new();
    for component in Path::new(spec).components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) | Component::ParentDir => {
                return Err(ProtectError::Outside(spec.into()))
            }
        }
    }
    if clean.as_os_str().is_empty() {
        return Err(ProtectError::Empty(spec.into()));
    }
    Ok(clean)
}

impl ProtectedPaths {
    /// Nothing protected.
    pub fn none() -> Self {
        ProtectedPaths {
            entries: BTreeMap::new(),
            classes: false,
            exceptions: BTreeSet::new(),
        }
    }

    /// Protects `spec`, relative to the workspace root (a home-directory
    /// default named again becomes protected at the root too).
    pub fn protect(&mut self, spec: &str) -> Result<(), ProtectError> {
        let path = parse(spec)?;
        self.exceptions.remove(&path);
        self.entries.entry(path).or_default().workspace = true;
        Ok(())
    }

    /// True if and only if a class protects `path` somewhere: a single
    /// dot-name (a home's dot-entry) or a root name with a protected ending.
    fn in_a_class(&self, path: &Path) -> bool {
        let mut components = path.components();
        let (Some(Component::Normal(name)), None) = (components.next(), components.next()) else {
            return false;
        };
        let name = name.to_string_lossy();
        self.classes
            && (name.starts_with('.') || ROOT_PROTECTED_SUFFIXES.iter().any(|s| name.ends_with(s)))
    }

    /// Stops protecting `spec` (by name, also where a class would protect
    /// it: `--unprotect .cache` leaves every home's `.cache` writable); an
    /// error names the protected ones if it is not one of them.
    pub fn unprotect(&mut self, spec: &str) -> Result<(), ProtectError> {
        let path = parse(spec)?;
        let named = self.entries.remove(&path).is_some();
        if self.in_a_class(&path) {
            self.exceptions.insert(path);
            return Ok(());
        }
        if !named {
            return Err(ProtectError::NotProtected {
                given: spec.into(),
                protected: self
                    .entries
                    .keys()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(())
    }

    /// True if and only if nothing is protected.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && !self.classes
    }

    /// The protected paths, relative to the workspace root or (the
    /// [`HOME_PROTECTED_PATHS`] kept) to each home directory inside it.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.entries.keys().map(PathBuf::as_path)
    }

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
    pub fn resolve(&self, workspace: &Workspace) -> Resolution {
        let root = workspace.path();
        self.resolve_in(root, &homes_inside(root))
    }

    /// [`Self::resolve`] with the home directories inside `root` given.
    fn resolve_in(&self, root: &Path, homes: &[PathBuf]) -> Resolution {
        let mut resolved: BTreeMap<PathBuf, ProtectedState> = BTreeMap::new();
        let mut complete = true;
        if self.classes {
            let (members, all) = self.classes_in(root, homes);
            complete &= all;
            for (path, state) in members {
                resolved.entry(path).or_insert(state);
            }
        }
        for (relative, scope) in &self.entries {
            if scope.homes {
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
            if !scope.workspace {
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

/// What [`ProtectedPaths::resolve`] found in a workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// The protected paths, sorted, each once.
    pub paths: Vec<Protected>,
    /// False when a bound left some out (more than [`MAX_CLASS_MEMBERS`]
    /// members of a class, a git index or config past its limits): the
    /// result must then say the protection is partial.
    pub complete: bool,
}

/// Members of one class (a home's dot-entries, the root's
/// `*.code-workspace` files) protected at most: each is one more bind, and
/// bubblewrap takes at most 9000 arguments. The oldest (by inode change
/// time, which no command can set back) are kept first, so a command that
/// floods a class cannot push out what was there before it.
pub const MAX_CLASS_MEMBERS: usize = 256;

impl ProtectedPaths {
    /// What the classes protect in `root` now: every dot-entry of each home
    /// in `homes`, and the root's names with a protected ending; none the
    /// operator unprotected by name.
    fn classes_in(&self, root: &Path, homes: &[PathBuf]) -> (Vec<(PathBuf, ProtectedState)>, bool) {
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
                            && !self.exceptions.contains(Path::new(text))
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

/// What a stand-in file for the protected path `path` holds while it stands
/// in: nothing, but for a git directory's `commondir`, where it holds `.`:
/// git then takes the directory itself as the common one (as it does
/// without the file), where an empty file would make every git command
/// fail.
pub fn stand_in_contents(path: &Path) -> &'static [u8] {
    if path.file_name().is_some_and(|name| name == "commondir") {
        b".\n"
    } else {
        b""
    }
}

/// One protected path as found in the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protected {
    /// The absolute path, inside the workspace: the protected path itself,
    /// or the symlink on its way that decides what it is.
    pub path: PathBuf,
    /// What is there.
    pub state: ProtectedState,
}

/// What a protected path is in the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtectedState {
    /// A file or a directory.
    Present,
    /// A symlink (the path itself or a directory on its way): what it points
    /// to can be kept read-only, but a mount cannot pin the link, which the
    /// command may replace.
    Symlink,
    /// Nothing there yet. `stand_in` (the path itself, or its first
    /// missing ancestor) is what must exist to be kept read-only.
    Missing {
        /// The path to stand in for.
        stand_in: PathBuf,
        /// Stand in with an empty file: a file its readers open at a known
        /// place (a shell's start-up file, `~/.gitconfig`), where an
        /// empty directory would break them. Elsewhere a stand-in is an
        /// empty directory, which git ignores.
        file: bool,
    },
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
    fn specs_are_relative_and_stay_inside() {
        let mut paths = ProtectedPaths::none();
        paths.protect("./.vscode/tasks.json").unwrap();
        paths.protect("build/").unwrap();
        paths.protect("build").unwrap();
        assert_eq!(
            paths.paths().collect::<Vec<_>>(),
            [Path::new(".vscode/tasks.json"), Path::new("build")]
        );
        assert!(matches!(
            paths.protect("/etc/passwd"),
            Err(ProtectError::Outside(_))
        ));
        assert!(matches!(
            paths.protect("a/../../b"),
            Err(ProtectError::Outside(_))
        ));
        assert!(matches!(paths.protect("./"), Err(ProtectError::Empty(_))));
        let err = paths.unprotect(".bashrc").unwrap_err().to_string();
        assert_eq!(
            err,
            "\".bashrc\" is not a protected path; protected: .vscode/tasks.json, build"
        );
        paths.unprotect("build").unwrap();
        assert_eq!(paths.paths().count(), 1);

        let defaults = ProtectedPaths::default();
        for expected in [
            ".git",
            ".bashrc",
            ".envrc",
            ".vscode",
            ".mcp.json",
            ".claude",
            ".devcontainer",
            ".idea",
            ".ssh",
            ".local",
        ] {
            assert!(
                defaults.paths().any(|p| p == Path::new(expected)),
                "{expected}"
            );
        }
    }

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
        let resolved = paths.resolve_in(&root, &homes).paths;
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
        let resolved = paths.resolve_in(&root, &homes).paths;
        assert!(!has(&resolved, home.join(".cache")));
        assert!(!has(&resolved, root.join("team.code-workspace")));
        assert!(has(&resolved, home.join(".weirdrc")));
        // Named again: protected again.
        paths.protect(".cache").unwrap();
        let resolved = paths.resolve_in(&root, &homes).paths;
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
        let resolution = ProtectedPaths::default().resolve_in(&root, &[]);
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
        assert!(
            ProtectedPaths::default()
                .resolve_in(calm.path(), &[])
                .complete
        );
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
        let resolved = ProtectedPaths::default().resolve_in(&root, &homes).paths;
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
        let resolved = ProtectedPaths::default()
            .resolve_in(&root, &[PathBuf::new()])
            .paths;
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
        let elsewhere = ProtectedPaths::default().resolve_in(&root, &[]).paths;
        assert!(!elsewhere.iter().any(|p| p.path == root.join(".bashrc")));
        // Named again: protected at the root too, still in the homes.
        let mut again = ProtectedPaths::default();
        again.protect(".zshrc").unwrap();
        let home = PathBuf::from("home/u");
        let both = again.resolve_in(&root, std::slice::from_ref(&home)).paths;
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
            nested.resolve(&workspace).paths[0].state,
            ProtectedState::Missing {
                stand_in: root.join("a"),
                file: false,
            }
        );
    }
}
