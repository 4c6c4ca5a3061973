//! Stand-ins for protected paths that do not exist yet.
//!
//! bubblewrap can only bind over something that exists, and it creates a
//! missing mount point itself — in the writable workspace, on the host. So
//! the provider creates the stand-in before bwrap runs, binds it read-only,
//! and removes it once no command needs it. The person's workspace is left
//! as it was.
//!
//! A stand-in is an empty directory, whatever the protected path will be:
//! nothing can be created at its name nor inside it, and git ignores empty
//! directories, so it never shows in `git status` nor gets committed by a
//! command's `git add -A`. The exception is a file its readers open at a
//! known place (a shell's start-up file or `~/.gitconfig` in a workspace
//! that is a home directory), where a directory would break them (git
//! refuses to run when `~/.gitconfig` is one): an empty file stands in
//! there. While a command runs, the host sees the stand-ins too.
//!
//! Every path is walked from the workspace's own handle without following
//! a symlink (`openat2` beneath it): a directory on the way that a running
//! command swapped for a symlink makes the claim fail instead of creating
//! or removing anything outside the workspace.
//!
//! Several commands, of this process or of others, may rely on one
//! stand-in at once (removing a mount point in one mount namespace detaches
//! the mounts on it in the others, which would lift the protection). So:
//! - a stand-in carries a mark (the `user.dsh-bash.stand-in` extended
//!   attribute) from the moment it has its name: it is made and marked
//!   under a private name, then renamed into place; a command that finds
//!   one claims it like a missing path instead of treating it as the
//!   person's own. Where the filesystem takes no such mark, a stand-in
//!   cannot be told from the person's own entry, so it is never removed
//!   (left, empty, in the workspace);
//! - every command holding a stand-in holds a shared `flock` on it for its
//!   whole life;
//! - whoever releases it last, and only then, gets the exclusive lock and
//!   removes it (if it is still the marked, empty entry).
//!
//! A stand-in left by a process that was killed outright is claimed (and
//! then removed) by the next command that protects the same path.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sys;

/// Opens the entry at `relative` (a directory or a regular file) beneath
/// `root`, for reading, without following a symlink.
fn open_entry(root: BorrowedFd<'_>, relative: &Path) -> io::Result<File> {
    let file = File::from(sys::open_beneath(
        root,
        relative,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW,
    )?);
    let kind = file.metadata()?.file_type();
    if kind.is_dir() || kind.is_file() {
        Ok(file)
    } else {
        Err(io::Error::other("neither a directory nor a regular file"))
    }
}

/// True if and only if `entry` (open on a directory or file) is a
/// stand-in: it carries the mark.
fn stand_in(entry: &File) -> bool {
    sys::marked_stand_in(entry.as_fd())
}

/// True if and only if `relative` (beneath `root`) is a stand-in, of this
/// process or another.
pub(crate) fn is_stand_in(root: BorrowedFd<'_>, relative: &Path) -> bool {
    // Marked but filled (the person ran `git init` in a stand-in `.git`
    // while a session kept it): the person's own now, protected for what
    // it is, not kept read-only whole as an empty stand-in is.
    open_entry(root, relative).is_ok_and(|entry| {
        stand_in(&entry) && as_made(&entry, dsh_sandbox::stand_in_contents(relative))
    })
}

/// True if and only if `entry` is as a stand-in is made: an empty
/// directory, or a file holding exactly `contents`.
fn as_made(entry: &File, contents: &[u8]) -> bool {
    match entry.metadata() {
        Ok(meta) if meta.is_file() => {
            let mut held = Vec::new();
            meta.len() == contents.len() as u64
                && std::io::Read::read_to_end(
                    &mut std::io::Read::take(entry, contents.len() as u64 + 1),
                    &mut held,
                )
                .is_ok()
                && held == contents
        }
        Ok(meta) if meta.is_dir() => {
            // An empty directory has exactly two links ("." and its name)
            // and no entries; read it through its own descriptor.
            let Ok(dir) = entry.try_clone() else {
                return false;
            };
            std::fs::read_dir(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&dir)
            ))
            .is_ok_and(|mut entries| entries.next().is_none())
        }
        _ => false,
    }
}

/// A claim on one stand-in (a shared lock on it), released on drop.
#[derive(Debug)]
pub(crate) struct StandIn {
    /// The workspace handle everything is walked from.
    root: Arc<OwnedFd>,
    /// The stand-in, relative to the workspace.
    relative: PathBuf,
    /// The stand-in, absolute (where it is bound).
    path: PathBuf,
    /// The stand-in, locked shared while claimed; `None` when it is not
    /// ours to remove.
    lock: Option<File>,
}

/// A private name for a stand-in being made: this process's id and 64
/// random bits (std's per-hasher random keys), so no two makers share one.
fn private_name() -> OsString {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    OsString::from(format!(
        "{}{}-{random:016x}",
        dsh_sandbox::STAND_IN_PREFIX,
        std::process::id()
    ))
}

impl StandIn {
    /// Claims the stand-in at `relative` beneath the workspace `root`
    /// (absolute: `path`), creating it (an empty, marked directory, or a
    /// file with `file`, empty but for [`dsh_sandbox::stand_in_contents`])
    /// if nothing is there. Something else already
    /// there (made meanwhile by somebody else) is bound as it is,
    /// unclaimed.
    pub(crate) fn claim(
        root: &Arc<OwnedFd>,
        relative: &Path,
        path: &Path,
        file: bool,
    ) -> io::Result<StandIn> {
        let (Some(parent), Some(name)) = (relative.parent(), relative.file_name()) else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no name"));
        };
        let contents = dsh_sandbox::stand_in_contents(relative);
        let unclaimed = || StandIn {
            root: Arc::clone(root),
            relative: relative.to_owned(),
            path: path.to_owned(),
            lock: None,
        };
        // A few rounds: a stand-in may be removed by its last other holder
        // between being found and being locked.
        for _ in 0..8 {
            let parent_dir =
                sys::open_beneath(root.as_fd(), parent, libc::O_PATH | libc::O_DIRECTORY)?;
            let entry = match open_entry(root.as_fd(), relative) {
                Ok(entry) => entry,
                Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {
                    // Made and marked under a private name, then renamed
                    // into place: never visible unmarked.
                    let private = private_name();
                    if file {
                        sys::create_at(parent_dir.as_fd(), &private, contents)?;
                    } else {
                        sys::mkdir_at(parent_dir.as_fd(), &private)?;
                    }
                    let made = open_entry(root.as_fd(), &parent.join(&private))?;
                    let marked = sys::mark_stand_in(made.as_fd());
                    let placed = marked.and_then(|()| {
                        sys::rename_noreplace_at(parent_dir.as_fd(), &private, name)
                    });
                    if let Err(err) = placed {
                        let _ = sys::remove_at(parent_dir.as_fd(), &private, !file);
                        if err.raw_os_error() == Some(libc::EEXIST) {
                            continue;
                        }
                        // No mark on this filesystem: a plain stand-in that
                        // is never removed (see the module docs).
                        tracing::warn!(path = %path.display(), %err, "a stand-in cannot be marked and stays in the workspace");
                        if file {
                            sys::create_at(parent_dir.as_fd(), name, contents)?;
                        } else {
                            sys::mkdir_at(parent_dir.as_fd(), name)?;
                        }
                        return Ok(unclaimed());
                    }
                    made
                }
                // A symlink or something stranger: somebody else's; bound
                // as it is.
                Err(_) => return Ok(unclaimed()),
            };
            if !stand_in(&entry) {
                return Ok(unclaimed());
            }
            sys::flock(entry.as_fd(), libc::LOCK_SH)?;
            // Still the one at its name now that it is held?
            let held = entry.metadata()?;
            let there = open_entry(root.as_fd(), relative).and_then(|e| e.metadata());
            if there.is_ok_and(|m| m.dev() == held.dev() && m.ino() == held.ino()) {
                return Ok(StandIn {
                    root: Arc::clone(root),
                    relative: relative.to_owned(),
                    path: path.to_owned(),
                    lock: Some(entry),
                });
            }
        }
        Err(io::Error::other(format!(
            "{} keeps being replaced",
            path.display()
        )))
    }

    /// The path stood in for.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl StandIn {
    /// Releases the claim, trying the removal `tries` times a millisecond
    /// apart: a process the server forks (a command being started, which
    /// holds a copy of every descriptor until it execs or closes them)
    /// shares the claim's lock for that long, which a single try takes for
    /// another holder's. A sandbox kept for a session releases its claims
    /// so; a command's release tries once (a holder of its own would
    /// otherwise cost every command the wait).
    pub(crate) fn release(mut self, tries: u32) {
        self.release_with(tries);
    }

    fn release_with(&mut self, tries: u32) {
        let Some(held) = self.lock.take() else {
            return;
        };
        let Ok(identity) = held.metadata().map(|m| (m.dev(), m.ino())) else {
            return;
        };
        drop(held);
        let (Some(parent), Some(name)) = (self.relative.parent(), self.relative.file_name()) else {
            return;
        };
        let Ok(entry) = open_entry(self.root.as_fd(), &self.relative) else {
            return;
        };
        let same = entry
            .metadata()
            .is_ok_and(|m| (m.dev(), m.ino()) == identity);
        if !same {
            return;
        }
        // Another holder still relies on it: theirs to remove.
        let mut locked = sys::flock(entry.as_fd(), libc::LOCK_EX | libc::LOCK_NB).is_ok();
        for _ in 1..tries.max(1) {
            if locked {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            locked = sys::flock(entry.as_fd(), libc::LOCK_EX | libc::LOCK_NB).is_ok();
        }
        if !locked {
            return;
        }
        let contents = dsh_sandbox::stand_in_contents(&self.relative);
        if !stand_in(&entry) {
            return;
        }
        if !as_made(&entry, contents) {
            // Filled meanwhile on the host: the person's now, unmarked.
            if let Err(err) = sys::unmark_stand_in(entry.as_fd()) {
                tracing::debug!(path = %self.path.display(), %err, "a filled stand-in keeps its mark");
            }
            return;
        }
        let directory = entry.metadata().is_ok_and(|m| m.is_dir());
        let removed =
            sys::open_beneath(self.root.as_fd(), parent, libc::O_PATH | libc::O_DIRECTORY)
                .and_then(|parent| sys::remove_at(parent.as_fd(), name, directory));
        if let Err(err) = removed {
            tracing::debug!(path = %self.path.display(), %err, "a stand-in stays");
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.release_with(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(dir: &Path) -> Arc<OwnedFd> {
        Arc::new(OwnedFd::from(File::open(dir).unwrap()))
    }

    fn claim(root: &Arc<OwnedFd>, dir: &Path, name: &str, file: bool) -> io::Result<StandIn> {
        StandIn::claim(root, Path::new(name), &dir.join(name), file)
    }

    #[test]
    fn the_last_claim_removes_only_an_empty_stand_in() {
        let dir = tempfile::tempdir().unwrap();
        let ws = root(dir.path());
        let stood = dir.path().join(".bashrc");
        let first = claim(&ws, dir.path(), ".bashrc", false).unwrap();
        assert!(stood.is_dir() && is_stand_in(ws.as_fd(), Path::new(".bashrc")));
        // Found by a later command: claimed, not taken for the person's.
        let second = claim(&ws, dir.path(), ".bashrc", false).unwrap();
        drop(first);
        assert!(stood.exists(), "removed while still claimed");
        drop(second);
        assert!(
            !stood.exists(),
            "the last claim leaves the workspace as it was"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "no private name left behind"
        );

        let folder = dir.path().join(".idea");
        let held = claim(&ws, dir.path(), ".idea", false).unwrap();
        std::fs::write(folder.join("kept"), "written from outside").unwrap();
        assert!(
            !is_stand_in(ws.as_fd(), Path::new(".idea")),
            "a filled stand-in is the person's"
        );
        drop(held);
        assert!(
            folder.join("kept").exists(),
            "a stand-in with content stays"
        );
        let entry = open_entry(ws.as_fd(), Path::new(".idea")).unwrap();
        assert!(!stand_in(&entry), "and loses its mark once released");

        let theirs = dir.path().join(".envrc");
        std::fs::create_dir(&theirs).unwrap();
        assert!(!is_stand_in(ws.as_fd(), Path::new(".envrc")));
        assert!(!is_stand_in(ws.as_fd(), Path::new("absent")));
        drop(claim(&ws, dir.path(), ".envrc", false).unwrap());
        assert!(theirs.exists(), "what someone else made is never removed");
    }

    #[test]
    fn nothing_is_made_or_removed_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = root(dir.path());
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        assert!(claim(&ws, dir.path(), "link/x", false).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // Swapped for a symlink while claimed: the release removes nothing
        // outside.
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let held = claim(&ws, dir.path(), "sub/.envrc", false).unwrap();
        std::fs::rename(dir.path().join("sub"), dir.path().join("moved")).unwrap();
        std::fs::create_dir(outside.path().join(".envrc")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
        drop(held);
        assert!(outside.path().join(".envrc").exists());
    }

    #[test]
    fn a_lock_held_elsewhere_keeps_the_stand_in() {
        let dir = tempfile::tempdir().unwrap();
        let ws = root(dir.path());
        let path = dir.path().join(".zshrc");
        let held = claim(&ws, dir.path(), ".zshrc", true).unwrap();
        assert!(path.is_file() && is_stand_in(ws.as_fd(), Path::new(".zshrc")));
        // Another process's claim: a shared lock through another open file.
        let other = open_entry(ws.as_fd(), Path::new(".zshrc")).unwrap();
        sys::flock(other.as_fd(), libc::LOCK_SH).unwrap();
        drop(held);
        assert!(path.exists(), "removed under another holder");
        drop(other);
        // A leftover (its holder gone) is claimed and removed by the next.
        drop(claim(&ws, dir.path(), ".zshrc", true).unwrap());
        assert!(!path.exists());
        // A file stand-in somebody wrote into stays.
        let written = claim(&ws, dir.path(), ".zshrc", true).unwrap();
        std::fs::write(&path, "export X=1\n").unwrap();
        drop(written);
        assert!(path.exists());
    }
}
