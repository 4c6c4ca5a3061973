//! Server-owned scratch directories in shared temp space: named with their
//! owner, removed without ever following a link, swept once their owner is
//! dead.
//!
//! Two kinds live here: the executor's spill directory
//! (`dsh-bash-<pid>.<start>-<random>`) and, under `workspace-write`, each
//! command's private `TMPDIR` (`dsh-bash-tmp-<pid>.<start>-<random>`). Both
//! may hold whatever a command wrote, and the command (or another one still
//! running) may rename anything inside while the server removes it, so the
//! removal is descriptor-relative all the way down:
//!
//! - the tree is entered from a handle on its parent and its name, never
//!   from a path;
//! - each directory is opened with `O_NOFOLLOW | O_DIRECTORY` relative to
//!   the handle of the one above it; an entry that is a symlink (or was
//!   swapped for one under the walk) is unlinked as a link, never entered;
//! - a directory the command made unreadable (`chmod 000`) is opened as an
//!   `O_PATH` handle first and made searchable through that handle's
//!   `/proc/self/fd` link (which names the inode opened, not a path), so a
//!   swap between the check and the `chmod` cannot redirect it;
//! - nesting deeper than [`MAX_DEPTH`] is moved up to the top of the tree
//!   (`renameat` between two handles) instead of holding one descriptor a
//!   level, so a hostile depth exhausts neither the stack nor the
//!   descriptor table;
//! - what cannot be removed is skipped and counted, never retried forever.
//!
//! ```
//! # #[cfg(target_os = "linux")] {
//! let parent = tempfile::tempdir().unwrap();
//! let tree = parent.path().join("t");
//! std::fs::create_dir_all(tree.join("a/b")).unwrap();
//! std::os::unix::fs::symlink("/etc", tree.join("a/etc")).unwrap();
//! let handle = std::fs::File::open(parent.path()).unwrap();
//! let removal = dsh_bash_local::scratch::remove_tree_at(&handle, "t".as_ref()).unwrap();
//! assert_eq!(removal.skipped, 0);
//! assert!(!tree.exists() && std::path::Path::new("/etc/hostname").exists());
//! # }
//! ```

use std::ffi::{CStr, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// What a spill directory's name starts with, before its owner.
pub const SPILL_PREFIX: &str = "dsh-bash-";

/// What a command's private `TMPDIR`'s name starts with, before its owner.
pub const PRIVATE_TMP_PREFIX: &str = "dsh-bash-tmp-";

/// The temp dir scratch directories go in by default: the host's, unless
/// `TMPDIR` is empty or relative (then `/tmp`).
pub fn temp_dir() -> std::path::PathBuf {
    let temp = std::env::temp_dir();
    if temp.is_absolute() {
        temp
    } else {
        std::path::PathBuf::from("/tmp")
    }
}

/// Directories held open at once on the way down; deeper ones are moved up.
pub const MAX_DEPTH: usize = 64;

/// What a removal left behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Removal {
    /// Entries that could not be removed (logged one by one).
    pub skipped: u64,
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, in
/// clock ticks since boot): with the pid, it names a process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    parse_start_time(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of a `/proc/<pid>/stat` line.
fn parse_start_time(stat: &str) -> Option<u64> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// A server as the owner of what it leaves in places other servers share
/// (scratch directories in a temp dir, parent cgroups): written
/// `<pid>.<start>.<pid namespace>`, which names one process for good (a
/// later process given the same pid is another owner) and says which pid
/// namespace its pid means something in.
///
/// Only an owner of this server's own pid namespace can be proven dead
/// here: a server in a container, or in a namespace `unshare --pid` made,
/// shares `/tmp` and cgroupfs with servers whose pids it cannot see, and
/// must not take them for dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Its pid, in its own pid namespace.
    pub pid: u32,
    /// Its start time (clock ticks since boot); 0 when unknown.
    pub start: u64,
    /// The inode of its pid namespace; `None` in names made before it was
    /// recorded (or where it could not be read).
    pub namespace: Option<u64>,
}

impl Owner {
    /// This process.
    pub fn this() -> Owner {
        let pid = std::process::id();
        Owner {
            pid,
            start: start_time(pid).unwrap_or(0),
            namespace: own_pid_namespace(),
        }
    }

    /// The owner `<pid>.<start>` or `<pid>.<start>.<namespace>` writes.
    pub fn parse(text: &str) -> Option<Owner> {
        let mut parts = text.split('.');
        let pid = parts.next()?.parse().ok()?;
        let start = parts.next()?.parse().ok()?;
        let namespace = match parts.next() {
            Some(namespace) => Some(namespace.parse().ok()?),
            None => None,
        };
        parts.next().is_none().then_some(Owner {
            pid,
            start,
            namespace,
        })
    }

    /// True unless the owner is certainly gone: it lived in this pid
    /// namespace (or did not say) and its pid now names no process, or one
    /// started at another time. A start time of 0 (unknown when the name
    /// was made): only a missing process is proof of death. A `/proc` that
    /// cannot be read (a host out of descriptors) proves nothing: alive.
    /// Blocking reads of `/proc`.
    ///
    /// `here` is this process's pid namespace (the inode of
    /// `/proc/self/ns/pid`), read once by a caller that checks many owners.
    pub fn alive_seen_from(&self, here: Option<u64>) -> bool {
        if let Some(namespace) = self.namespace {
            if here != Some(namespace) {
                return true;
            }
        }
        self.alive_by(std::fs::read_to_string(format!("/proc/{}/stat", self.pid)))
    }

    /// The verdict on what reading the owner's `/proc/<pid>/stat` gave:
    /// gone only if no such process exists or it started at another time.
    fn alive_by(&self, stat: std::io::Result<String>) -> bool {
        match stat {
            Err(err) => err.kind() != std::io::ErrorKind::NotFound,
            Ok(_) if self.start == 0 => true,
            Ok(stat) => parse_start_time(&stat).is_none_or(|start| start == self.start),
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.pid, self.start)?;
        match self.namespace {
            Some(namespace) => write!(f, ".{namespace}"),
            None => Ok(()),
        }
    }
}

/// The inode of this process's pid namespace, if `/proc` shows it.
pub(crate) fn own_pid_namespace() -> Option<u64> {
    rustix::fs::stat("/proc/self/ns/pid")
        .ok()
        .map(|stat| stat.st_ino)
}

/// This process as an owner, written (see [`Owner`]).
pub fn owner_tag() -> String {
    Owner::this().to_string()
}

/// The owner a name records after `prefix`: `<prefix><owner>-…`. Only a
/// name ending in exactly [`RANDOM_LEN`] ASCII letters and digits is one
/// of ours: a person's `dsh-bash-1.2-src` is never swept.
pub fn owner_in(name: &str, prefix: &str) -> Option<Owner> {
    let rest = name.strip_prefix(prefix)?;
    let (owner, random) = rest.split_once('-')?;
    if random.len() != RANDOM_LEN || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    Owner::parse(owner)
}

/// The length of the random part of a scratch directory's name (what 128
/// bits of kernel randomness are in hex).
pub const RANDOM_LEN: usize = 32;

/// Removes, from the directory `parent`, every directory named
/// `<prefix><owner>-…` that belongs to this process's user and whose
/// owner is dead, descriptor-relative (see the module docs). Blocking.
pub fn sweep_dead(parent: &Path, prefix: &str) {
    let Ok(handle) = rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let Ok(mut dir) = rustix::fs::Dir::read_from(&handle) else {
        return;
    };
    let me = rustix::process::geteuid().as_raw();
    let here = own_pid_namespace();
    let mut dead = Vec::new();
    while let Some(Ok(entry)) = dir.read() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
        let Some(owner) = name.to_str().and_then(|n| owner_in(n, prefix)) else {
            continue;
        };
        let Ok(stat) = rustix::fs::statat(&handle, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
        else {
            continue;
        };
        let directory = FileType::from_raw_mode(stat.st_mode) == FileType::Directory;
        if directory && stat.st_uid == me && !owner.alive_seen_from(here) {
            dead.push(name);
        }
    }
    for name in dead {
        match remove_tree_at(&handle, &name) {
            Ok(removal) if removal.skipped == 0 => {}
            Ok(removal) => {
                tracing::debug!(name = ?name, skipped = removal.skipped, "a dead owner's directory was swept in part")
            }
            Err(err) => {
                tracing::debug!(name = ?name, %err, "cannot sweep a dead owner's directory")
            }
        }
    }
}

/// Removes the directory `name` in the directory `parent` and everything
/// below it, never following a link (see the module docs). An entry that
/// is not a directory (a symlink, a file swapped in) is unlinked as it is.
/// Blocking.
pub fn remove_tree_at(parent: impl AsFd, name: &OsStr) -> io::Result<Removal> {
    let parent = parent.as_fd();
    let mut removal = Removal::default();
    match enter(parent, name) {
        Ok(top) => empty_tree(top, &mut removal),
        Err(err) if not_a_directory(&err) => {}
        Err(err) if err == rustix::io::Errno::NOENT => return Ok(removal),
        Err(err) => return Err(err.into()),
    }
    match unlink(parent, name, true) {
        Ok(()) => Ok(removal),
        Err(err) if not_a_directory(&err) => unlink(parent, name, false)
            .map(|()| removal)
            .map_err(Into::into),
        Err(err) if err == rustix::io::Errno::NOENT => Ok(removal),
        Err(err) => Err(err.into()),
    }
}

/// Directories deeper than this below the top are not descended into by
/// [`size_at`] (each level holds one descriptor).
const MAX_SIZE_DEPTH: usize = 64;

/// The bytes the tree `name` in the directory `parent` takes on disk
/// (allocated blocks, every entry once per link met), walked beneath
/// descriptors without following a link; what cannot be read, or lies more
/// than 64 levels down, counts as nothing. Blocking.
pub fn size_at(parent: impl AsFd, name: &OsStr) -> u64 {
    let read = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let stat = |dir: BorrowedFd<'_>, name: &OsStr| {
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()
    };
    let parent = parent.as_fd();
    let Some(top) = stat(parent, name) else {
        return 0;
    };
    let blocks = |s: &rustix::fs::Stat| u64::try_from(s.st_blocks).unwrap_or(0) * 512;
    let mut total = blocks(&top);
    let Ok(top) = rustix::fs::openat(parent, name, read, Mode::empty()) else {
        return total;
    };
    // Directories to walk, by their parent's descriptor and their name:
    // opened when their turn comes, so only the open path's descriptors
    // are held, however wide the tree.
    let top = std::sync::Arc::new(top);
    let mut pending: Vec<(std::sync::Arc<OwnedFd>, OsString, usize)> = Vec::new();
    let mut walk = |dir: &std::sync::Arc<OwnedFd>, depth: usize, pending: &mut Vec<_>| {
        let Ok(mut entries) = rustix::fs::Dir::read_from(dir.as_fd()) else {
            return;
        };
        while let Some(Ok(entry)) = entries.read() {
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let Some(meta) = stat(dir.as_fd(), name) else {
                continue;
            };
            total += blocks(&meta);
            let directory = FileType::from_raw_mode(meta.st_mode) == FileType::Directory;
            if directory && depth < MAX_SIZE_DEPTH {
                pending.push((std::sync::Arc::clone(dir), name.to_owned(), depth + 1));
            }
        }
    };
    walk(&top, 0, &mut pending);
    while let Some((parent, name, depth)) = pending.pop() {
        if let Ok(dir) = rustix::fs::openat(parent.as_fd(), &name, read, Mode::empty()) {
            drop(parent);
            walk(&std::sync::Arc::new(dir), depth, &mut pending);
        }
    }
    total
}

/// Errors meaning "not a directory here (any more)": a symlink refused by
/// `O_NOFOLLOW`, or another kind of file.
fn not_a_directory(err: &rustix::io::Errno) -> bool {
    [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR].contains(err)
}

/// Opens the directory `name` beneath `parent` for reading, without
/// following a link, made searchable and writable (`0700`) for the walk.
fn enter(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    let read = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = match rustix::fs::openat(parent, name, read, Mode::empty()) {
        Ok(dir) => dir,
        Err(rustix::io::Errno::ACCESS) => {
            // Unreadable (chmod 000): pin the inode, then change its mode
            // through the pin, which names that inode whatever happens to
            // the name meanwhile.
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let pinned = rustix::fs::openat(parent, name, flags, Mode::empty())?;
            let link = format!("/proc/self/fd/{}", pinned.as_raw_fd());
            rustix::fs::chmod(link.as_str(), Mode::RWXU)?;
            rustix::fs::openat(&pinned, ".", read, Mode::empty())?
        }
        Err(err) => return Err(err),
    };
    rustix::fs::fchmod(&dir, Mode::RWXU)?;
    Ok(dir)
}

fn unlink(parent: BorrowedFd<'_>, name: &OsStr, directory: bool) -> rustix::io::Result<()> {
    let flags = if directory {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(parent, name, flags)
}

/// Entries listed from a directory at a time.
const BATCH: usize = 4096;

/// One directory on the way down: its handle, its name in the one above,
/// the entries listed and not dealt with yet, and the names in it that
/// could not be removed.
struct Level {
    dir: OwnedFd,
    name: OsString,
    pending: Vec<(OsString, Option<FileType>)>,
    kept: Vec<OsString>,
    /// Names met changing under the walk, and how often: past
    /// [`RETRIES`] they are kept, so nothing is retried forever.
    changing: Vec<(OsString, u8)>,
}

/// Times an entry may change under the walk before it is left.
const RETRIES: u8 = 3;

impl Level {
    fn new(dir: OwnedFd, name: OsString) -> Self {
        Level {
            dir,
            name,
            pending: Vec::new(),
            kept: Vec::new(),
            changing: Vec::new(),
        }
    }

    /// Notes that `name` changed under the walk (to be looked at again);
    /// true once it has too often, and is kept.
    fn changed(&mut self, name: &OsString) -> bool {
        let count = match self.changing.iter_mut().find(|(n, _)| n == name) {
            Some((_, count)) => count,
            None => {
                self.changing.push((name.clone(), 0));
                match self.changing.last_mut() {
                    Some((_, count)) => count,
                    None => return true,
                }
            }
        };
        *count += 1;
        *count > RETRIES
    }

    /// The next entry to deal with (neither `.`, `..` nor one kept),
    /// listing the directory again once the last batch is dealt with.
    fn next_entry(&mut self) -> rustix::io::Result<Option<(OsString, Option<FileType>)>> {
        if self.pending.is_empty() {
            let mut entries = rustix::fs::Dir::read_from(&self.dir)?;
            while let Some(entry) = entries.read() {
                let entry = entry?;
                let name: &CStr = entry.file_name();
                if matches!(name.to_bytes(), b"." | b"..") {
                    continue;
                }
                let name = OsStr::from_bytes(name.to_bytes()).to_owned();
                if self.kept.contains(&name) {
                    continue;
                }
                let kind = match entry.file_type() {
                    FileType::Unknown => None,
                    kind => Some(kind),
                };
                self.pending.push((name, kind));
                if self.pending.len() == BATCH {
                    break;
                }
            }
        }
        Ok(self.pending.pop())
    }
}

/// Empties the tree whose top directory is open as `top`.
fn empty_tree(top: OwnedFd, removal: &mut Removal) {
    let mut levels = vec![Level::new(top, OsString::new())];
    let mut moved = 0u64;
    loop {
        let depth = levels.len();
        let Some(level) = levels.last_mut() else {
            break;
        };
        let next = level.next_entry().unwrap_or_else(|err| {
            tracing::warn!(%err, "cannot read a directory being removed; left");
            None
        });
        let Some((name, kind)) = next else {
            // Empty (or all that is left is kept): remove it from above.
            let Some(done) = levels.pop() else { break };
            let Some(above) = levels.last_mut() else {
                break;
            };
            if let Err(err) = unlink(above.dir.as_fd(), &done.name, true) {
                keep(above, done.name, err, removal);
            }
            continue;
        };
        let directory = match kind {
            Some(kind) => kind == FileType::Directory,
            None => rustix::fs::statat(&level.dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory),
        };
        if !directory {
            match unlink(level.dir.as_fd(), &name, false) {
                // A directory swapped in since it was listed: next batch.
                Ok(()) => {}
                // A directory swapped in since it was listed, or gone: the
                // next batch sees.
                Err(err @ (rustix::io::Errno::ISDIR | rustix::io::Errno::NOENT)) => {
                    if level.changed(&name) {
                        keep(level, name, err, removal);
                    }
                }
                Err(err) => keep(level, name, err, removal),
            }
            continue;
        }
        if depth >= MAX_DEPTH {
            // Too deep to hold open: move it up to the top and go on there,
            // under a name nothing there has (never replacing an entry).
            let top = levels[0].dir.as_fd();
            let level = &levels[depth - 1];
            let mut outcome = Err(rustix::io::Errno::EXIST);
            while outcome == Err(rustix::io::Errno::EXIST) && moved < u64::MAX {
                let to = OsString::from(format!(".dsh-bash-moved-{moved}"));
                moved += 1;
                outcome = rustix::fs::renameat_with(
                    &level.dir,
                    &name,
                    top,
                    &to,
                    rustix::fs::RenameFlags::NOREPLACE,
                );
            }
            if let Err(err) = outcome {
                keep(&mut levels[depth - 1], name, err, removal);
            }
            continue;
        }
        match enter(level.dir.as_fd(), &name) {
            Ok(dir) => levels.push(Level::new(dir, name)),
            // Swapped for a link or a file, or gone: the next batch sees.
            Err(err) if not_a_directory(&err) || err == rustix::io::Errno::NOENT => {
                if level.changed(&name) {
                    keep(level, name, err, removal);
                }
            }
            Err(err) => keep(level, name, err, removal),
        }
    }
}

fn keep(level: &mut Level, name: OsString, err: rustix::io::Errno, removal: &mut Removal) {
    tracing::warn!(name = ?name, %err, "an entry of a tree being removed cannot be removed; left");
    level.kept.push(name);
    removal.skipped += 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// A host out of descriptors cannot read `/proc`; that proves no owner
    /// dead (the sweep, on a thread beside the host's first commands, took
    /// the host's own cgroup for a dead host's and killed its command).
    #[test]
    fn an_unreadable_proc_proves_no_owner_dead() {
        let owner = Owner {
            pid: 4242,
            start: 77,
            namespace: None,
        };
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        assert!(owner.alive_by(Err(emfile)));
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert!(!owner.alive_by(Err(missing)));
        let stat = |start: u64| {
            let mut fields = vec!["S".to_owned(); 19];
            fields.push(start.to_string());
            Ok(format!("4242 (sleep) {}", fields.join(" ")))
        };
        assert!(owner.alive_by(stat(77)));
        assert!(!owner.alive_by(stat(78)), "a reused pid is another owner");
    }

    fn handle(path: &Path) -> fs::File {
        fs::File::open(path).unwrap()
    }

    #[test]
    fn unreadable_deep_and_linked_trees_are_removed_never_followed() {
        let parent = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        fs::write(victim.path().join("precious"), "keep").unwrap();
        fs::set_permissions(victim.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let tree = parent.path().join("t");
        fs::create_dir_all(tree.join("a/locked/inner")).unwrap();
        fs::write(tree.join("a/locked/inner/f"), "x").unwrap();
        std::os::unix::fs::symlink(victim.path(), tree.join("a/link")).unwrap();
        fs::set_permissions(
            tree.join("a/locked/inner"),
            fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        fs::set_permissions(tree.join("a/locked"), fs::Permissions::from_mode(0o000)).unwrap();
        // Deeper than the walk holds open.
        let mut deep = tree.join("deep");
        for _ in 0..(MAX_DEPTH * 3) {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("bottom"), "x").unwrap();
        let removal = remove_tree_at(handle(parent.path()), OsStr::new("t")).unwrap();
        assert_eq!(removal, Removal::default());
        assert!(!tree.exists());
        assert_eq!(fs::read_dir(parent.path()).unwrap().count(), 0);
        assert!(victim.path().join("precious").exists());
        let mode = fs::metadata(victim.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "the link's target was chmodded");
        // The top itself a symlink: the link goes, its target stays.
        std::os::unix::fs::symlink(victim.path(), parent.path().join("l")).unwrap();
        remove_tree_at(handle(parent.path()), OsStr::new("l")).unwrap();
        assert!(victim.path().join("precious").exists());
        assert!(!parent.path().join("l").exists());
        // Nothing there: nothing to do.
        remove_tree_at(handle(parent.path()), OsStr::new("absent")).unwrap();
    }

    /// The walk holds a directory open while its name is swapped for a
    /// symlink to a victim (what a concurrent command can do): it goes on
    /// in the directory it opened and never enters the victim.
    #[test]
    fn a_directory_swapped_for_a_link_under_the_walk_is_never_entered() {
        let parent = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        fs::create_dir(victim.path().join("sub")).unwrap();
        fs::write(victim.path().join("sub/precious"), "keep").unwrap();
        let tree = parent.path().join("t");
        fs::create_dir_all(tree.join("sub/sub")).unwrap();
        fs::write(tree.join("sub/sub/f"), "x").unwrap();
        let top = enter(handle(parent.path()).as_fd(), OsStr::new("t")).unwrap();
        let mut levels = Level::new(top, OsString::new());
        // The walk has listed "sub" and opened it ...
        let (name, _) = levels.next_entry().unwrap().unwrap();
        let opened = enter(levels.dir.as_fd(), &name).unwrap();
        // ... when the command renames it away and plants a link.
        fs::rename(tree.join("sub"), parent.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(victim.path(), tree.join("sub")).unwrap();
        let mut removal = Removal::default();
        empty_tree(opened, &mut removal);
        assert!(victim.path().join("sub/precious").exists());
        assert_eq!(
            fs::read_dir(parent.path().join("moved")).unwrap().count(),
            0,
            "the walk emptied what it had opened"
        );
        // The planted link is unlinked as a link.
        empty_tree(levels.dir, &mut removal);
        assert!(!tree.join("sub").exists());
        assert!(victim.path().join("sub/precious").exists());
    }

    #[test]
    fn dead_owners_are_swept_live_ones_others_and_other_namespaces_kept() {
        let parent = tempfile::tempdir().unwrap();
        let random = "a".repeat(RANDOM_LEN);
        let mine = format!("dsh-bash-tmp-{}-{random}", owner_tag());
        // pid 0 never names a live user process.
        let dead = format!("dsh-bash-tmp-0.5-{random}");
        let dead = dead.as_str();
        // The same, named in this pid namespace: dead; named in another
        // one (whose pids mean other processes): kept.
        let ours = Owner::this()
            .namespace
            .expect("/proc shows the pid namespace");
        let dead_here = format!("dsh-bash-tmp-0.5.{ours}-{random}");
        let elsewhere = format!("dsh-bash-tmp-0.5.{}-{random}", ours + 1);
        let unknown_start_dead = format!("dsh-bash-tmp-{}.0-{random}", u32::MAX - 1);
        let other_kind = "dsh-bash-tmp-ABCDEF";
        // A person's own directory that merely looks like ours.
        let theirs = "dsh-bash-tmp-1.2-src";
        for name in [
            mine.as_str(),
            dead,
            &dead_here,
            &elsewhere,
            &unknown_start_dead,
            other_kind,
            theirs,
        ] {
            fs::create_dir_all(parent.path().join(name).join("in")).unwrap();
        }
        fs::set_permissions(
            parent.path().join(dead).join("in"),
            fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        sweep_dead(parent.path(), "dsh-bash-tmp-");
        assert!(parent.path().join(&mine).exists());
        assert!(parent.path().join(other_kind).exists());
        assert!(
            parent.path().join(theirs).exists(),
            "a look-alike was swept"
        );
        assert!(!parent.path().join(dead).exists());
        assert!(!parent.path().join(&dead_here).exists());
        assert!(
            parent.path().join(&elsewhere).exists(),
            "another pid namespace's owner was taken for dead"
        );
        assert!(!parent.path().join(&unknown_start_dead).exists());
        assert_eq!(
            owner_in(&format!("dsh-bash-12.34-{random}"), "dsh-bash-"),
            Some(Owner {
                pid: 12,
                start: 34,
                namespace: None
            })
        );
        assert_eq!(
            owner_in(&format!("dsh-bash-12.34.56-{random}"), "dsh-bash-"),
            Some(Owner {
                pid: 12,
                start: 34,
                namespace: Some(56)
            })
        );
        assert_eq!(
            owner_in(&format!("dsh-bash-12.34.56.7-{random}"), "dsh-bash-"),
            None
        );
        assert_eq!(owner_in("dsh-bash-12.34-ab", "dsh-bash-"), None);
        assert_eq!(
            owner_in(&format!("dsh-bash-tmp-1.2-{random}"), "dsh-bash-"),
            None
        );
    }
}
