//! The watched directories: one inotify watch each, named by its path
//! relative to the workspace, set up by a walk that opens each directory
//! relative to its parent and never follows a link.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{inotify, FileType, Mode, OFlags, ResolveFlags};

use super::fate::{Change, What};

/// Directories whose contents are a tool's own: a change inside reads as
/// the directory itself, and what is inside is not walked.
const OPAQUE: &[&[u8]] = &[
    b"node_modules",
    b"target",
    b"__pycache__",
    b".venv",
    b"venv",
    b".tox",
    b".mypy_cache",
    b".pytest_cache",
    b".ruff_cache",
    b".gradle",
    b".next",
    b".cache",
];

/// Git's own: its coming and going is a change, nothing inside it is.
const UNWATCHED: &[u8] = b".git";

const MASK: inotify::WatchFlags = inotify::WatchFlags::CREATE
    .union(inotify::WatchFlags::MOVE_SELF)
    .union(inotify::WatchFlags::DELETE_SELF)
    .union(inotify::WatchFlags::DELETE)
    .union(inotify::WatchFlags::MODIFY)
    .union(inotify::WatchFlags::ATTRIB)
    .union(inotify::WatchFlags::MOVED_FROM)
    .union(inotify::WatchFlags::MOVED_TO)
    .union(inotify::WatchFlags::ONLYDIR)
    .union(inotify::WatchFlags::EXCL_UNLINK);

/// Paths longer than this are not followed (nor logged): a deep tree
/// cannot make each logged change carry kilobytes.
const MAX_PATH_BYTES: usize = 1024;

#[derive(Debug)]
struct Watched {
    /// `""` for the workspace, else `a/b/` (for people: invalid UTF-8
    /// replaced).
    path: String,
    /// The same as the bytes on disk, to open it by.
    raw: Vec<u8>,
    opaque: bool,
}

#[derive(Debug)]
pub(super) struct Tree {
    root: Option<OwnedFd>,
    dirs: HashMap<i32, Watched>,
    max_dirs: usize,
    untracked: Option<String>,
    /// Watches added and removed since the tree was built: a command that
    /// makes the watch work without bound (a rename storm of a big
    /// directory) is stopped by [`Tree::over_budget`].
    pub(super) work: usize,
    window: std::time::Instant,
}

/// A directory to walk: its parent's descriptor, its name there, and its
/// path (opened when its turn comes: only the open path's descriptors are
/// held, however wide the tree).
type Pending = (std::sync::Arc<OwnedFd>, std::ffi::CString, String, Vec<u8>);

impl Tree {
    pub(super) fn new(max_dirs: usize) -> Tree {
        Tree {
            root: None,
            dirs: HashMap::new(),
            max_dirs,
            untracked: None,
            work: 0,
            window: std::time::Instant::now(),
        }
    }

    /// True once the watch did more than four times the directory limit of
    /// work within a minute: it is given up (see `State::give_up`).
    pub(super) fn over_budget(&self) -> bool {
        self.work > self.max_dirs.saturating_mul(4)
    }

    /// Starts a new minute of work when the last one is over.
    pub(super) fn tick(&mut self) {
        if self.window.elapsed() > std::time::Duration::from_secs(60) {
            self.window = std::time::Instant::now();
            self.work = 0;
        }
    }

    /// True if `wd` watches the workspace itself.
    pub(super) fn is_root(&self, wd: i32) -> bool {
        self.dirs.get(&wd).is_some_and(|dir| dir.path.is_empty())
    }

    /// Removes every watch (the tree is given up).
    pub(super) fn clear(&mut self, inotify: &OwnedFd) {
        for wd in self.dirs.keys() {
            let _ = inotify::remove_watch(inotify, *wd);
        }
        self.dirs.clear();
    }

    /// Why some of the workspace is not watched, if it is not all.
    pub(super) fn untracked(&self) -> Option<&str> {
        self.untracked.as_deref()
    }

    /// Watches the workspace at `root`; `Err` when it has more directories
    /// than the limit (nothing is tracked then) or cannot be opened.
    pub(super) fn watch_root(&mut self, inotify: &OwnedFd, root: &Path) -> Result<(), String> {
        // Not through a link put where the workspace was.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let fd = rustix::fs::open(root, flags, Mode::empty())
            .map_err(|err| format!("{}: {err}", root.display()))?;
        self.watch_subtree(inotify, fd.as_fd(), String::new(), Vec::new());
        self.root = Some(fd);
        if let Some(why) = self.untracked.take() {
            self.clear(inotify);
            return Err(why);
        }
        Ok(())
    }

    /// Watches `dir` (at `path`) and every directory under it, opening each
    /// when its turn comes, within the directory, path and work limits.
    fn watch_subtree(&mut self, inotify: &OwnedFd, dir: BorrowedFd<'_>, path: String, raw: Vec<u8>) {
        let Some(top) = reopen(dir) else {
            return;
        };
        let mut pending: Vec<Pending> = Vec::new();
        self.watch_one(inotify, top, path, raw, &mut pending);
        while let Some((parent, name, path, raw)) = pending.pop() {
            if self.untracked.is_some() || self.over_budget() {
                return;
            }
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
            match rustix::fs::openat(parent.as_fd(), &name, flags, Mode::empty()) {
                Ok(fd) => self.watch_one(inotify, fd, path, raw, &mut pending),
                Err(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE) => {
                    self.untracked = Some("out of file descriptors while following the workspace; changes beyond are not listed".to_owned());
                    return;
                }
                // Gone, or not a directory any more (a link put in its place).
                Err(_) => {}
            }
        }
    }

    /// Watches one opened directory and queues its subdirectories.
    fn watch_one(
        &mut self,
        inotify: &OwnedFd,
        fd: OwnedFd,
        path: String,
        raw: Vec<u8>,
        pending: &mut Vec<Pending>,
    ) {
        if self.dirs.len() >= self.max_dirs {
            self.untracked = Some(format!(
                "the workspace has more than {} directories (--changes-max-dirs); changes beyond them are not listed",
                self.max_dirs
            ));
            return;
        }
        let opaque = is_opaque(&path);
        let watched = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        self.work += 1;
        let wd = match inotify::add_watch(inotify, &watched, MASK) {
            Ok(wd) => wd,
            Err(rustix::io::Errno::NOSPC) => {
                self.untracked = Some("the kernel's limit on inotify watches is reached (fs.inotify.max_user_watches); changes beyond it are not listed".to_owned());
                return;
            }
            // A directory this user cannot read: its changes are not
            // listed (nor can they be its commands').
            Err(_) => return,
        };
        if !opaque {
            let fd = std::sync::Arc::new(fd);
            let (entries, subdirs) = subdirectories(&fd, &path, &raw);
            // A directory of many files costs its reading each time it
            // moves in: counted, one unit per hundred entries.
            self.work += entries / 100;
            for (name, child, child_raw) in subdirs {
                if child.len() > MAX_PATH_BYTES {
                    continue;
                }
                pending.push((std::sync::Arc::clone(&fd), name, child, child_raw));
            }
        }
        self.dirs.insert(wd, Watched { path, raw, opaque });
    }

    /// Turns one event into changes (none for what is not followed), and
    /// follows a directory that appeared.
    pub(super) fn apply(
        &mut self,
        inotify: &OwnedFd,
        event: &inotify::Event<'_>,
        changes: &mut Vec<Change>,
    ) {
        use inotify::ReadFlags as F;
        let flags = event.events();
        let wd = event.wd();
        if flags.contains(F::IGNORED) {
            self.dirs.remove(&wd);
            return;
        }
        let (Some(dir), Some(name)) = (self.dirs.get(&wd), event.file_name()) else {
            return;
        };
        if dir.opaque {
            push(changes, dir.path.clone(), What::Altered);
            return;
        }
        let is_dir = flags.contains(F::ISDIR);
        let path = child_path(&dir.path, name, is_dir);
        if path.len() > MAX_PATH_BYTES {
            return;
        }
        if flags.intersects(F::CREATE | F::MOVED_TO) {
            push(changes, path.clone(), What::Appeared);
            if is_dir && name.to_bytes() != UNWATCHED {
                let mut raw = dir.raw.clone();
                raw.extend_from_slice(name.to_bytes());
                raw.push(b'/');
                self.follow(inotify, path, raw);
            }
        } else if flags.intersects(F::DELETE | F::MOVED_FROM) {
            push(changes, path.clone(), What::Vanished);
            if is_dir && flags.contains(F::MOVED_FROM) {
                self.forget(inotify, &path);
            }
        } else if !is_dir && flags.intersects(F::MODIFY | F::ATTRIB) {
            push(changes, path, What::Altered);
        }
    }

    /// Watches a directory that appeared at `path`, opened beneath the
    /// workspace without following a link.
    fn follow(&mut self, inotify: &OwnedFd, path: String, raw: Vec<u8>) {
        let Some(root) = &self.root else {
            return;
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
        let relative = std::ffi::OsStr::from_bytes(raw.strip_suffix(b"/").unwrap_or(&raw));
        let Ok(fd) = rustix::fs::openat2(root, relative, flags, Mode::empty(), resolve) else {
            return;
        };
        self.watch_subtree(inotify, fd.as_fd(), path, raw);
    }

    /// Stops watching what was under `path`, moved away (a move within the
    /// workspace is followed again where it lands).
    fn forget(&mut self, inotify: &OwnedFd, path: &str) {
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, dir)| dir.path.starts_with(path))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            self.work += 1;
            let _ = inotify::remove_watch(inotify, wd);
        }
    }
}

/// Adds a change unless it repeats the last one (a long write is one
/// change, not one per block).
fn push(changes: &mut Vec<Change>, path: String, what: What) {
    let change = Change { path, what };
    if changes.last() != Some(&change) {
        changes.push(change);
    }
}

fn child_path(parent: &str, name: &CStr, is_dir: bool) -> String {
    let name = String::from_utf8_lossy(name.to_bytes());
    format!("{parent}{name}{}", if is_dir { "/" } else { "" })
}

fn is_opaque(path: &str) -> bool {
    let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    OPAQUE.contains(&last.as_bytes())
}

/// A descriptor of the same directory of our own, to hold while walking.
fn reopen(dir: BorrowedFd<'_>) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::openat(dir, ".", flags, Mode::empty()).ok()
}

/// The directories directly in `dir` (not `.git`, not links): each name,
/// and its path for people and as bytes.
#[allow(clippy::type_complexity)]
fn subdirectories(
    dir: &OwnedFd,
    path: &str,
    raw: &[u8],
) -> (usize, Vec<(std::ffi::CString, String, Vec<u8>)>) {
    let Ok(mut entries) = rustix::fs::Dir::read_from(dir) else {
        return (0, Vec::new());
    };
    let mut found = Vec::new();
    let mut read = 0;
    while let Some(Ok(entry)) = entries.read() {
        read += 1;
        let name = entry.file_name();
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." || bytes == UNWATCHED {
            continue;
        }
        let directory = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory),
            _ => false,
        };
        if !directory {
            continue;
        }
        let mut child_raw = raw.to_vec();
        child_raw.extend_from_slice(bytes);
        child_raw.push(b'/');
        found.push((name.to_owned(), child_path(path, name, true), child_raw));
    }
    (read, found)
}
