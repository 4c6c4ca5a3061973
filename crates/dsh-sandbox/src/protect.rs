use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// The paths kept read-only inside a writable workspace by default: what
/// runs code later on the host, outside any sandbox, when a person or the
/// agent's host touches the project.
///
/// - `.git`: hooks (`.git/hooks/pre-commit`) and config (`core.fsmonitor`,
///   `core.pager`, aliases) run on the next `git` command (and what else it
///   takes along, see `dsh_protect::resolve`); `.hg`, Mercurial's
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
pub const STAND_IN_PREFIX: &str = ".dsh-bash-stand-in-";

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

    /// Each protected path with where it is looked for: (relative path,
    /// at the workspace root, in each home inside it).
    pub fn scoped(&self) -> impl Iterator<Item = (&Path, bool, bool)> {
        self.entries
            .iter()
            .map(|(path, scope)| (path.as_path(), scope.workspace, scope.homes))
    }

    /// True if the classes are protected (every home's dot-entries, the
    /// root's names with a protected ending).
    pub fn protects_classes(&self) -> bool {
        self.classes
    }

    /// True if the operator unprotected `name`, which a class would
    /// protect.
    pub fn excepts(&self, name: &Path) -> bool {
        self.exceptions.contains(name)
    }
}

/// What the protected paths are in a workspace now (`dsh_protect::resolve`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// The protected paths, sorted, each once.
    pub paths: Vec<Protected>,
    /// False when a bound left some out (more than `dsh_protect::MAX_CLASS_MEMBERS`
    /// members of a class, a git index or config past its limits): the
    /// result must then say the protection is partial.
    pub complete: bool,
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
}
