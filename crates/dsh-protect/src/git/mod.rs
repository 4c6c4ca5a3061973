//! What else a protected `.git` must take with it: the places inside the
//! workspace from which git would run code the next time a person uses the
//! repository on the host.
//!
//! - a `.git` *file* (a worktree's, a submodule's): the git directory it
//!   points to and that one's common directory;
//! - symlinks inside a git directory (a hook linked to
//!   `scripts/pre-commit`): what they point to inside the workspace;
//! - every config file git reads for the repository (`config`,
//!   `config.worktree`, and each `include.path` / `includeIf.*.path`,
//!   followed recursively, protected whether the included file exists yet
//!   or not), parsed as git parses them ([`config`]): the paths that
//!   path-valued keys name (`core.hooksPath`, a missing one included) and
//!   every word of a command-valued key (`core.fsmonitor = sh
//!   tools/fsmon.sh`, `!`-aliases, filters, textconv, credential helpers,
//!   editors, pagers, …) that is a path or names an entry at the worktree;
//! - every gitlink of the index ([`index`]: what `git status` recurses
//!   into, with or without a `.gitmodules` entry): its `.git`, and, for a
//!   repository there, all of the above again (nested submodules, up to
//!   four levels);
//! - linked worktrees inside the workspace: their `.git` files;
//! - the submodules `.gitmodules` lists: their own `.git`;
//! - `HEAD` at the workspace root, whether the root has a repository of
//!   its own or not (a command can break its `.git`, after which git
//!   looks at the root itself): a stand-in there keeps the root from being
//!   turned into a bare repository git would discover.
//!
//! Re-implemented rather than asked of git (which would cost a process on
//! every command): git's discovery of a git directory, the config grammar
//! and the list of command-valued keys, the index format. Not followed: a
//! repository nested in the workspace that is no gitlink of a protected
//! one (git runs its config only when a person runs git inside it), and
//! `includeIf` conditions (every include is protected, true or not).
//!
//! Everything is read with bounds (files of at most 1 MiB, indexes of at
//! most 64 MiB, at most [`MAX_ENTRIES`] entries walked per git directory,
//! [`MAX_REACHED`] places in all).

use std::path::{Component, Path, PathBuf};

mod config;
mod index;

/// Entries walked per git directory looking for symlinks.
const MAX_ENTRIES: usize = 20_000;

/// Files read (config, `.git` files, `.gitmodules`) at most this long.
const MAX_FILE: u64 = 1 << 20;

/// A small regular file's text: opened without following a final symlink
/// and without blocking on a FIFO, checked on the descriptor, read within
/// [`MAX_FILE`] (a file swapped for `/dev/zero` under us reads nothing
/// unbounded); a byte-order mark dropped, invalid UTF-8 replaced (git reads
/// bytes).
pub(crate) fn read_small(path: &Path) -> Option<String> {
    read_bounded(path, MAX_FILE).map(|bytes| {
        let text = String::from_utf8_lossy(&bytes);
        text.strip_prefix('\u{feff}').unwrap_or(&text).to_owned()
    })
}

/// The bytes of the regular file at `path`, if it holds at most `max`
/// (opened as [`read_small`] opens).
pub(crate) fn read_bounded(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > max {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).ok()?;
    Some(bytes)
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
    lexically_clean(&base.join(path))
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

/// Targets inside `root` of the symlinks in `gitdir`, and whether the walk
/// saw every entry.
fn linked_out(root: &Path, gitdir: &Path) -> (Vec<PathBuf>, bool) {
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
                return (found, false);
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_symlink() {
                if let Some(target) = inside(root, &path) {
                    found.push(target);
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
    (found, true)
}

/// A place a protected `.git` takes along, relative to the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reached {
    pub(crate) path: PathBuf,
    /// Stands in as an empty file when missing (an included config file:
    /// git refuses an include that is a directory).
    pub(crate) file: bool,
}

/// How a member of a git directory is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Member {
    /// Read-only; when missing, an empty file stands in.
    File,
    /// Read-only; when missing, an empty directory stands in.
    Directory,
}

/// What git runs code or takes configuration from inside a git directory:
/// kept read-only, while the rest (objects, refs, the index, `HEAD`, logs,
/// stash, rebase and merge state) stays writable, so `add`, `commit`,
/// `branch`, `checkout`, `stash`, `merge`, `rebase` and `tag` work.
///
/// - `config`, `config.worktree`: programs, hooks paths, includes;
/// - `hooks`: run by commit, checkout, merge, rebase, ...;
/// - `info/attributes`: which filter and diff drivers run on which files;
/// - `commondir`: where git reads the repository's config from (a
///   stand-in holds `.`, the directory itself, which is what git assumes
///   without one; see [`dsh_sandbox::stand_in_contents`]);
/// - `worktrees`: each linked worktree's `commondir`, `gitdir` and config
///   (so `git worktree add` is refused: a new worktree's `commondir` could
///   name a config of the command's).
const GITDIR_MEMBERS: &[(&str, Member)] = &[
    ("config", Member::File),
    ("config.worktree", Member::File),
    ("hooks", Member::Directory),
    ("info/attributes", Member::File),
    ("commondir", Member::File),
    ("worktrees", Member::Directory),
];

/// Nested repositories (submodules inside submodules) followed at most.
const MAX_DEPTH: usize = 4;

/// Config includes followed at most (git's own limit is 10).
const MAX_INCLUDES: usize = 10;

/// Config files read at most for one workspace.
const MAX_CONFIG_FILES: usize = 64;

/// Places added at most (each is one more bind for every command, and
/// bubblewrap takes at most 9000 arguments).
const MAX_REACHED: usize = 512;

/// What a walk of a workspace's repositories found so far.
struct Found<'a> {
    root: &'a Path,
    /// Every git directory met (its contents are protected with it).
    gitdirs: Vec<PathBuf>,
    reached: Vec<Reached>,
    /// False once a bound left something out (the result says so).
    complete: bool,
    /// Config files read so far (each once).
    read: Vec<PathBuf>,
}

impl Found<'_> {
    /// Adds `path` (absolute, inside the root) once.
    fn add(&mut self, path: &Path, file: bool) {
        let Ok(relative) = path.strip_prefix(self.root) else {
            return;
        };
        if relative.as_os_str().is_empty() || self.reached.iter().any(|r| r.path == relative) {
            return;
        }
        if self.reached.len() >= MAX_REACHED {
            self.complete = false;
            return;
        }
        self.reached.push(Reached {
            path: relative.to_path_buf(),
            file,
        });
    }

    /// Everything the repository whose worktree is `worktree` and whose git
    /// directory is `gitdir` would run code from: symlinks out of it, what
    /// its config files name, its gitlinks' repositories (recursively), its
    /// linked worktrees' `.git` files.
    fn repository(&mut self, worktree: &Path, gitdir: &Path, depth: usize) {
        self.members(gitdir, 0);
        let (targets, walked_all) = linked_out(self.root, gitdir);
        self.complete &= walked_all;
        for target in targets {
            self.add(&target, false);
        }
        for file in ["config", "config.worktree"] {
            self.config(worktree, &gitdir.join(file), 0);
        }
        // Linked worktrees: their `.git` file says which repository a
        // person's git there opens.
        if let Ok(entries) = std::fs::read_dir(gitdir.join("worktrees")) {
            for entry in entries.flatten().take(index::MAX_GITLINKS) {
                if let Some(text) = read_small(&entry.path().join("gitdir")) {
                    if let Some(dot_git) = lexically_inside(self.root, worktree, text.trim()) {
                        self.add(&self.root.join(dot_git), true);
                    }
                }
            }
        }
        let (links, listed_all) = index::gitlinks(&gitdir.join("index"));
        self.complete &= listed_all;
        for link in links {
            let Some(relative) = lexically_inside(self.root, worktree, &link) else {
                continue;
            };
            let sub = self.root.join(relative);
            let dot_git = sub.join(".git");
            // A repository's own `.git` directory keeps only its members
            // (below); a `.git` file, or nothing yet, is kept whole.
            if !is_git_directory(&dot_git) {
                self.add(&dot_git, false);
            }
            if depth >= MAX_DEPTH {
                self.complete &= git_dirs_in(self.root, &sub).is_empty();
                continue;
            }
            for nested in git_dirs_in(self.root, &sub) {
                if !self.gitdirs.contains(&nested) {
                    self.gitdirs.push(nested.clone());
                    self.repository(&sub, &nested, depth + 1);
                }
            }
        }
    }

    /// Within the git directory `gitdir` (inside the root), what git runs
    /// or takes configuration from ([`GITDIR_MEMBERS`]), and the same in
    /// each submodule's git directory under `modules/`; a git directory
    /// that is none yet (no `HEAD`, `objects`, `refs`) is kept whole, so it
    /// cannot be made one.
    fn members(&mut self, gitdir: &Path, depth: usize) {
        if !gitdir.starts_with(self.root) {
            return;
        }
        if !is_git_directory(gitdir) {
            self.add(gitdir, false);
            return;
        }
        for (member, kind) in GITDIR_MEMBERS {
            let path = gitdir.join(member);
            self.add(&path, *kind == Member::File);
        }
        let Ok(modules) = std::fs::read_dir(gitdir.join("modules")) else {
            return;
        };
        for entry in modules.flatten().take(index::MAX_GITLINKS) {
            let module = entry.path();
            if depth >= MAX_DEPTH || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                self.add(&module, false);
            } else {
                self.members(&module, depth + 1);
            }
        }
    }

    /// What the config file `file` (of the repository at `worktree`) and
    /// the files it includes name. An include inside the workspace is
    /// protected whether it exists yet or not (it must not be created).
    fn config(&mut self, worktree: &Path, file: &Path, depth: usize) {
        // Each file once (an include cycle, a file included many times),
        // and a bounded number of them.
        let key = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        if self.read.contains(&key) {
            return;
        }
        if self.read.len() >= MAX_CONFIG_FILES {
            self.complete = false;
            return;
        }
        self.read.push(key);
        let Some(text) = read_small(file) else {
            return;
        };
        let base = file.parent().unwrap_or(worktree).to_path_buf();
        for entry in config::parse(&text) {
            if config::is_include(&entry) {
                // Read wherever it is (a `~/.gitconfig-work` may name
                // hooks in the workspace); protected when inside.
                let Some(included) = expand_anywhere(&base, &entry.value) else {
                    continue;
                };
                if included.starts_with(self.root) {
                    self.add(&included, true);
                }
                if depth < MAX_INCLUDES {
                    self.config(worktree, &included, depth + 1);
                } else {
                    self.complete = false;
                }
            } else if config::is_path(&entry) {
                if let Some(path) = expand(self.root, worktree, &entry.value) {
                    self.add(&path, false);
                }
            } else if config::is_command(&entry) {
                for path in command_paths(self.root, worktree, &entry.value) {
                    self.add(&path, false);
                }
            }
        }
    }
}

/// `value` (`~/x`, absolute, or relative to `base`) as a clean absolute
/// path, wherever it is.
fn expand_anywhere(base: &Path, value: &str) -> Option<PathBuf> {
    let value = match value.strip_prefix("~/") {
        Some(rest) => PathBuf::from(std::env::var_os("HOME")?).join(rest),
        None => PathBuf::from(value),
    };
    Some(lexically_clean(&base.join(value)))
}

/// `path` with `.` and `..` resolved without touching the disk (`base.join`
/// of an absolute path is that path).
pub fn lexically_clean(path: &Path) -> PathBuf {
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    clean
}

/// `value` (`~/x`, absolute, or relative to `base`) as a clean absolute
/// path inside `root`; `None` if it leaves it.
fn expand(root: &Path, base: &Path, value: &str) -> Option<PathBuf> {
    let value = match value.strip_prefix("~/") {
        Some(rest) => PathBuf::from(std::env::var_os("HOME")?).join(rest),
        None => PathBuf::from(value),
    };
    lexically_inside(root, base, value.to_str()?).map(|relative| root.join(relative))
}

/// The words of a shell command line: whitespace and the operators
/// `;|&()<>` separate them, quotes group; a quoted word holding spaces (a
/// nested `sh -c '…'`) is split again.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut nested = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => {
                nested |= c.is_whitespace();
                word.push(c);
            }
            (None, '\'' | '"') => quote = Some(c),
            (None, c) if c.is_whitespace() || ";|&()<>".contains(c) => {
                words.push(std::mem::take(&mut word));
            }
            (None, c) => word.push(c),
        }
    }
    words.push(word);
    words.retain(|w| !w.is_empty());
    if nested {
        return words
            .into_iter()
            .flat_map(|w| {
                if w.contains(char::is_whitespace) {
                    shell_words(&w)
                } else {
                    vec![w]
                }
            })
            .collect();
    }
    words
}

/// The files inside `root` a command line run from `worktree` would
/// execute or read: every word that is a path (it has a `/`, or, after the
/// program, looks like a file name) or names an existing entry at the
/// worktree. Options, variables and `NAME=value` prefixes are left out.
fn command_paths(root: &Path, worktree: &Path, line: &str) -> Vec<PathBuf> {
    let line = line.strip_prefix('!').unwrap_or(line);
    let mut paths = Vec::new();
    for (position, word) in shell_words(line).iter().enumerate() {
        let word = word.as_str();
        if word.starts_with('-') || word.contains(['$', '`', '%', '=', '*', '?']) {
            continue;
        }
        let path_like = word.contains('/') || (position > 0 && word.contains('.'));
        let Some(path) = expand(root, worktree, word) else {
            continue;
        };
        if path_like || std::fs::symlink_metadata(&path).is_ok() {
            paths.push(path);
        }
    }
    paths
}

/// The git directories of the repository whose worktree is `worktree`
/// (inside `root`), inside `root`: its `.git` directory, or what its `.git`
/// file points to and that one's common directory.
fn git_dirs_in(root: &Path, worktree: &Path) -> Vec<PathBuf> {
    within(root, &git_dirs_anywhere(worktree))
}

/// Those of `dirs` strictly inside `root`.
fn within(root: &Path, dirs: &[PathBuf]) -> Vec<PathBuf> {
    dirs.iter()
        .filter(|dir| dir.starts_with(root) && *dir != root)
        .cloned()
        .collect()
}

/// [`git_dirs_in`] wherever they are (canonical): a worktree used as the
/// workspace has its repository's config outside it, and that config names
/// hooks and programs relative to the worktree.
fn git_dirs_anywhere(worktree: &Path) -> Vec<PathBuf> {
    let dot_git = worktree.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
        return Vec::new();
    };
    if meta.is_dir() {
        return if is_git_directory(&dot_git) {
            std::fs::canonicalize(&dot_git).into_iter().collect()
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
    let Some(gitdir) = std::fs::canonicalize(worktree.join(target.trim()))
        .ok()
        .filter(|p| p.is_dir())
    else {
        return dirs;
    };
    if let Some(common) = read_small(&gitdir.join("commondir")) {
        if let Some(common) = std::fs::canonicalize(gitdir.join(common.trim()))
            .ok()
            .filter(|p| p.is_dir())
        {
            dirs.push(common);
        }
    }
    dirs.push(gitdir);
    dirs
}

/// The repository git would discover above `root` by walking up (its
/// worktree and git directories), for a root without one of its own.
fn enclosing(root: &Path) -> Option<(PathBuf, Vec<PathBuf>)> {
    root.ancestors().skip(1).find_map(|above| {
        let dirs = git_dirs_anywhere(above);
        (!dirs.is_empty()).then(|| (above.to_path_buf(), dirs))
    })
}

/// The config files git reads besides a repository's own: the system's,
/// the user's (`~/.gitconfig` and the XDG one).
fn global_configs() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("/etc/gitconfig")];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        files.push(home.join(".gitconfig"));
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".config"));
        files.push(xdg.join("git/config"));
    }
    files
}

/// What a protected `.git` takes along in a workspace.
pub(crate) struct Reach {
    /// The root's own git directories inside it (protected whole).
    pub(crate) gitdirs: Vec<PathBuf>,
    /// Everything beyond them, relative to the root.
    pub(crate) reached: Vec<Reached>,
    /// False when a bound left something out.
    pub(crate) complete: bool,
}

/// Everything a protected `.git` takes along in `root` (see the module
/// docs), each repository found once.
pub(crate) fn reach(root: &Path) -> Reach {
    // The root's repository wherever its git directories are (a worktree's
    // are outside), else the one above it (a package of a monorepo): their
    // config and index name places inside the workspace.
    let anywhere = git_dirs_anywhere(root);
    let gitdirs = within(root, &anywhere);
    let (worktree, dirs) = if anywhere.is_empty() {
        enclosing(root).unwrap_or_else(|| (root.to_path_buf(), Vec::new()))
    } else {
        (root.to_path_buf(), anywhere)
    };
    let mut found = Found {
        root,
        gitdirs: dirs.clone(),
        reached: Vec::new(),
        complete: true,
        read: Vec::new(),
    };
    for gitdir in &dirs {
        found.repository(&worktree, gitdir, 0);
    }
    // The person's own config files, read for every repository: what they
    // name relative to a worktree, and what they include from inside it.
    for file in global_configs() {
        found.config(&worktree, &file, 0);
    }
    if let Some(text) = read_small(&root.join(".gitmodules")) {
        // Bounded: every entry is one more bind for every command.
        let paths = config::parse(&text)
            .into_iter()
            .filter(|e| e.section == "submodule" && e.key == "path");
        for entry in paths {
            if let Some(relative) = lexically_inside(root, root, &entry.value) {
                found.add(&root.join(relative).join(".git"), false);
            }
            // Its git directory under the root's `modules/` (by the
            // submodule's name), which `git submodule update --init` on
            // the host reuses when present: kept whole while it does not
            // exist yet (a present one keeps its members, above).
            let name = entry.subsection.as_deref().unwrap_or_default();
            for gitdir in &gitdirs {
                if let Some(module) = lexically_inside(root, &gitdir.join("modules"), name) {
                    let module = root.join(module);
                    if std::fs::symlink_metadata(&module).is_err() {
                        found.add(&module, false);
                    }
                }
            }
        }
    }
    // The root could be made a bare repository (a `HEAD`, `objects` and
    // `refs` there, and a `config` git then reads): without a repository
    // of its own, and with one, whose `.git` a command can break (a
    // garbage `.git/HEAD`, `objects` moved away), after which git takes
    // the root itself for the repository. Its `HEAD` is kept either way.
    found.add(&root.join("HEAD"), false);
    Reach {
        gitdirs,
        reached: found.reached,
        complete: found.complete,
    }
}

/// The index of the repository whose worktree is `worktree` (its own git
/// directory's, or the one its `.git` file names), if it has one.
fn index_of(worktree: &Path) -> Option<PathBuf> {
    git_dirs_anywhere(worktree)
        .pop()
        .map(|gitdir| gitdir.join("index"))
}

/// The gitlinks of the index at `index` (of the repository whose worktree
/// is `worktree`), as absolute paths inside `root`, and whether that is
/// all of them.
pub(crate) fn gitlinks_in(root: &Path, worktree: &Path, index: &Path) -> (Vec<PathBuf>, bool) {
    let (links, all) = index::gitlinks(index);
    let links = links
        .into_iter()
        .filter_map(|link| lexically_inside(root, worktree, &link))
        .map(|relative| root.join(relative))
        .collect();
    (links, all)
}

/// Every repository `git status` at the workspace root recurses into, as
/// (worktree, index, its gitlinks): the root's own, then each gitlink's
/// with a repository there, nested ones too (up to [`MAX_DEPTH`] levels,
/// at most [`index::MAX_GITLINKS`] repositories); and whether that is all
/// of them (false past the bounds, or when an index could not be read
/// whole).
pub(crate) fn repositories(root: &Path) -> (Vec<(PathBuf, PathBuf, Vec<PathBuf>)>, bool) {
    let mut found = Vec::new();
    let mut complete = true;
    let mut pending = vec![(root.to_path_buf(), 0)];
    while let Some((worktree, depth)) = pending.pop() {
        if found.len() >= index::MAX_GITLINKS {
            complete = false;
            break;
        }
        let Some(index) = index_of(&worktree) else {
            continue;
        };
        let (links, all) = gitlinks_in(root, &worktree, &index);
        complete &= all;
        if depth < MAX_DEPTH {
            pending.extend(links.iter().map(|link| (link.clone(), depth + 1)));
        } else {
            complete &= links.iter().all(|link| git_dirs_in(root, link).is_empty());
        }
        found.push((worktree, index, links));
    }
    (found, complete)
}

/// Real git for the tests: whether it is installed, and running it.
#[cfg(test)]
pub(crate) mod real_git {
    use std::path::Path;

    /// False (with a loud skip) when git is not installed.
    pub(crate) fn installed(what: &str) -> bool {
        let there = std::process::Command::new("git")
            .arg("--version")
            .output()
            .is_ok();
        if !there {
            eprintln!("SKIP {what}: git is not installed");
        }
        there
    }

    /// Runs `git args` in `at` with `home` as HOME and no system config,
    /// as a committer; panics on failure.
    pub(crate) fn run(at: &Path, home: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@e"])
            .args(["-c", "protocol.file.allow=always"])
            .args(args)
            .current_dir(at)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", home)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(root: &Path) -> Vec<PathBuf> {
        reach(root).reached.into_iter().map(|r| r.path).collect()
    }

    fn repo(at: &Path) {
        for dir in ["hooks", "objects", "refs"] {
            std::fs::create_dir_all(at.join(dir)).unwrap();
        }
        std::fs::write(at.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }

    #[test]
    fn a_repository_takes_along_what_would_run_code() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        repo(&root.join(".git"));
        std::fs::create_dir_all(root.join("scripts")).unwrap();
        std::fs::create_dir_all(root.join("tools")).unwrap();
        std::fs::write(root.join("scripts/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join("tools/fsmon"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(
            "../../scripts/pre-commit",
            root.join(".git/hooks/pre-commit"),
        )
        .unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\thooksPath = .githooks\n\tfsmonitor = \"sh tools/fsmon --flag\"\n\tbare = false\n[include]\n\tpath = ../../etc/outside\n\tpath = ../conf/extra.cfg\n[alias]\n\tx = !sh run.sh arg\n\tco = checkout\n",
        )
        .unwrap();
        // An include that exists, setting a hooks path of its own, and one
        // that does not exist yet (the command could create it).
        std::fs::create_dir_all(root.join("conf")).unwrap();
        std::fs::write(
            root.join("conf/extra.cfg"),
            "[core]\n\thooksPath = hooks-from-include\n[includeIf \"gitdir:/x/\"]\n\tpath = later.cfg\n",
        )
        .unwrap();
        std::fs::write(
            root.join(".gitmodules"),
            "[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.com/lib\n[submodule \"x\"]\n\tpath = ../escape\n",
        )
        .unwrap();
        let Reach {
            reached, complete, ..
        } = reach(&root);
        assert!(complete);
        let found = |p: &str| reached.iter().find(|r| r.path == Path::new(p)).cloned();
        for expected in [
            "scripts/pre-commit",
            ".githooks",
            "tools/fsmon",
            "lib/.git",
            "run.sh",
            "hooks-from-include",
        ] {
            assert!(found(expected).is_some(), "{expected} not in {reached:?}");
        }
        // Includes stand in as files: git refuses an included directory.
        assert_eq!(found("conf/extra.cfg").map(|r| r.file), Some(true));
        assert_eq!(found("conf/later.cfg").map(|r| r.file), Some(true));
        // Options and non-paths are not protected; nothing outside.
        assert!(found("--flag").is_none() && found("arg").is_none() && found("checkout").is_none());
        assert!(
            reached.iter().all(|r| !r.path.starts_with("..")),
            "{reached:?}"
        );
        assert_eq!(reach(&root).gitdirs, [root.join(".git")]);
        // Kept with a repository too: its `.git` could be broken.
        assert!(found("HEAD").is_some());
        std::fs::remove_dir_all(root.join(".git")).unwrap();
        assert!(paths(&root).contains(&PathBuf::from("HEAD")));
        // An empty `.git` (a stand-in of another command, or one a killed
        // server left) is no repository: HEAD stays protected.
        std::fs::create_dir(root.join(".git")).unwrap();
        assert!(reach(&root).gitdirs.is_empty());
        assert!(paths(&root).contains(&PathBuf::from("HEAD")));
    }

    /// A gitlink without a `.gitmodules` entry, an embedded repository
    /// inside it with a gitlink of its own, and a linked worktree, made by
    /// real git.
    #[test]
    fn gitlinks_nested_repositories_and_worktrees_are_followed() {
        if !real_git::installed("gitlinks") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let git = |at: &Path, args: &[&str]| real_git::run(at, &root, args);
        git(&root, &["init", "-q"]);
        std::fs::write(root.join("f"), "x").unwrap();
        git(&root, &["add", "f"]);
        git(&root, &["commit", "-qm", "one"]);
        // An embedded repository, added as a gitlink, no .gitmodules.
        let embedded = root.join("vendor/embedded");
        std::fs::create_dir_all(&embedded).unwrap();
        git(&embedded, &["init", "-q"]);
        std::fs::write(embedded.join("g"), "y").unwrap();
        git(&embedded, &["add", "g"]);
        git(&embedded, &["commit", "-qm", "inner"]);
        std::fs::write(
            embedded.join(".git/config"),
            "[core]\n\tfsmonitor = sh tools/inner-fsmon.sh\n",
        )
        .unwrap();
        // The embedded one's own gitlink (nested), not checked out.
        git(
            &embedded,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                "160000,1111111111111111111111111111111111111111,deeper",
            ],
        );
        git(&root, &["add", "vendor/embedded"]);
        git(&root, &["worktree", "add", "-q", "wt"]);
        let reached = paths(&root);
        // A repository's git directory keeps its members, not itself:
        // its objects, refs and index stay writable.
        assert!(!reached.contains(&PathBuf::from("vendor/embedded/.git")));
        for expected in [
            "vendor/embedded/.git/config",
            "vendor/embedded/.git/hooks",
            "vendor/embedded/.git/commondir",
            ".git/config",
            ".git/hooks",
            ".git/info/attributes",
            ".git/worktrees",
            "vendor/embedded/tools/inner-fsmon.sh",
            "vendor/embedded/deeper/.git",
            "wt/.git",
        ] {
            assert!(
                reached.contains(&PathBuf::from(expected)),
                "{expected} not in {reached:?}"
            );
        }
    }

    /// A worktree used as the workspace: its repository (outside) names a
    /// hooks path relative to the worktree, which is protected.
    #[test]
    fn a_worktrees_repository_outside_still_names_what_runs_inside() {
        if !real_git::installed("worktrees") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let main = base.join("main");
        std::fs::create_dir(&main).unwrap();
        let git = |at: &Path, args: &[&str]| real_git::run(at, &base, args);
        git(&main, &["init", "-q"]);
        std::fs::write(main.join("f"), "x").unwrap();
        git(&main, &["add", "f"]);
        git(&main, &["commit", "-qm", "one"]);
        git(&main, &["config", "core.hooksPath", "hooks"]);
        git(&main, &["config", "core.fsmonitor", "sh tools/fsmon.sh"]);
        git(&main, &["worktree", "add", "-q", "../wt"]);
        let wt = base.join("wt");
        let Reach {
            reached, complete, ..
        } = reach(&wt);
        let reached: Vec<PathBuf> = reached.into_iter().map(|r| r.path).collect();
        assert!(complete);
        for expected in ["hooks", "tools/fsmon.sh"] {
            assert!(
                reached.contains(&PathBuf::from(expected)),
                "{expected}: {reached:?}"
            );
        }
        assert!(reached.iter().all(|p| !p.starts_with("..")), "{reached:?}");
    }

    /// A workspace that is a package of a repository above it: that
    /// repository's hooks path and gitlinks inside the package are
    /// protected; so is what the person's own config names and includes.
    #[test]
    fn a_repository_above_and_the_persons_config_name_places_inside() {
        if !real_git::installed("enclosing repositories") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let repo = std::fs::canonicalize(dir.path()).unwrap();
        let git = |at: &Path, args: &[&str]| real_git::run(at, &repo, args);
        git(&repo, &["init", "-q"]);
        std::fs::create_dir_all(repo.join("pkg")).unwrap();
        std::fs::write(repo.join("pkg/f"), "x").unwrap();
        git(&repo, &["add", "pkg/f"]);
        git(
            &repo,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                "160000,1111111111111111111111111111111111111111,pkg/vendor/lib",
            ],
        );
        git(&repo, &["config", "core.hooksPath", "pkg/hooks"]);
        let pkg = repo.join("pkg");
        let Reach {
            reached, complete, ..
        } = reach(&pkg);
        assert!(complete);
        let reached: Vec<PathBuf> = reached.into_iter().map(|r| r.path).collect();
        for expected in ["hooks", "vendor/lib/.git", "HEAD"] {
            assert!(
                reached.contains(&PathBuf::from(expected)),
                "{expected}: {reached:?}"
            );
        }
        // A global config (read like ~/.gitconfig): a relative hooks path
        // resolves against the worktree, an include into the workspace is
        // protected whether it exists or not.
        let global = repo.join("global.gitconfig");
        std::fs::write(
            &global,
            format!("[core]\n\thooksPath = .hooks\n[includeIf \"gitdir:{}/\"]\n\tpath = {}/pkg/.team.gitconfig\n", repo.display(), repo.display()),
        )
        .unwrap();
        let mut found = Found {
            root: &pkg,
            gitdirs: Vec::new(),
            reached: Vec::new(),
            complete: true,
            read: Vec::new(),
        };
        found.config(&pkg, &global, 0);
        let named: Vec<&Path> = found.reached.iter().map(|r| r.path.as_path()).collect();
        assert!(
            named.contains(&Path::new(".hooks")) && named.contains(&Path::new(".team.gitconfig")),
            "{named:?}"
        );
    }

    /// An include cycle, a file included many times, includes outside the
    /// workspace: each file is read once, a bounded number in all, and an
    /// outside include still counts for what it names inside.
    #[test]
    fn includes_are_read_once_bounded_and_wherever_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let root = base.join("ws");
        std::fs::create_dir(&root).unwrap();
        let looping = root.join("loop.cfg");
        std::fs::write(&looping, "[include]\n\tpath = loop.cfg\n".repeat(5000)).unwrap();
        std::fs::write(
            base.join("outside.cfg"),
            "[core]\n\thooksPath = ws/from-outside\n",
        )
        .unwrap();
        std::fs::write(
            root.join("main.cfg"),
            "[include]\n\tpath = loop.cfg\n\tpath = ../outside.cfg\n",
        )
        .unwrap();
        let mut found = Found {
            root: &root,
            gitdirs: Vec::new(),
            reached: Vec::new(),
            complete: true,
            read: Vec::new(),
        };
        found.config(&base, &root.join("main.cfg"), 0);
        assert_eq!(found.read.len(), 3, "{:?}", found.read);
        let named: Vec<&Path> = found.reached.iter().map(|r| r.path.as_path()).collect();
        assert!(named.contains(&Path::new("from-outside")), "{named:?}");
        assert!(named.contains(&Path::new("loop.cfg")), "{named:?}");
        // A FIFO or a symlink where a config is expected reads nothing.
        std::os::unix::fs::symlink("/dev/zero", root.join("zero.cfg")).unwrap();
        assert_eq!(read_small(&root.join("zero.cfg")), None);
    }

    #[test]
    fn command_lines_split_like_a_shell() {
        assert_eq!(
            shell_words("!sh -c 'cd tools && ./x' ;echo \"a b\"|tee out.log"),
            ["!sh", "-c", "cd", "tools", "", "", "./x", "", "echo", "a", "b", "tee", "out.log"]
                .into_iter()
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
        );
    }
}
