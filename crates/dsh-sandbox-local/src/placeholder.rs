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
//! Several commands, of this process or of others, may rely on one
//! stand-in at once (removing a mount point in one mount namespace detaches
//! the mounts on it in the others, which would lift the protection). So:
//! - a stand-in carries a mark (the `user.dsh-bash.stand-in` extended
//!   attribute), and a command that finds one claims it like a missing
//!   path instead of treating it as the person's own. Where the filesystem
//!   takes no such mark, a stand-in cannot be told from the person's own
//!   entry, so it is never removed (left, empty, in the workspace) rather
//!   than removed under another command that took it for the person's;
//! - every command holding a stand-in holds a shared `flock` on it for its
//!   whole life;
//! - whoever releases it last, and only then, gets the exclusive lock and
//!   removes it (if it is still the marked, empty directory).
//!
//! A stand-in left by a process that was killed outright is claimed (and
//! then removed) by the next command that protects the same path.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::sys;

/// Opens a directory or a regular file without following a symlink.
fn open_entry(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
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

/// True if and only if `path` is a stand-in (of this process or another).
pub(crate) fn is_stand_in(path: &Path) -> bool {
    open_entry(path).is_ok_and(|entry| stand_in(&entry))
}

/// True if and only if `entry` is an empty directory or an empty file.
fn empty(path: &Path, entry: &File) -> bool {
    match entry.metadata() {
        Ok(meta) if meta.is_file() => meta.len() == 0,
        Ok(meta) if meta.is_dir() => {
            std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none())
        }
        _ => false,
    }
}

/// A claim on one stand-in (a shared lock on it), released on drop.
#[derive(Debug)]
pub(crate) struct Placeholder {
    path: PathBuf,
    /// The stand-in, locked shared while claimed.
    lock: Option<File>,
}

impl Placeholder {
    /// Claims the stand-in at `path`, creating it (an empty, marked
    /// directory, or an empty file with `file`) if nothing is there; its
    /// parent must be a real directory (not a symlink). Something else
    /// already there (made meanwhile by somebody else) is bound as it is,
    /// unclaimed.
    pub(crate) fn claim(path: &Path, file: bool) -> io::Result<Placeholder> {
        let parent = path
            .parent()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent"))?;
        if !std::fs::symlink_metadata(parent)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", parent.display()),
            ));
        }
        // A few rounds: a stand-in may be removed by its last other holder
        // between being found and being locked.
        for _ in 0..8 {
            let created = if file {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(path)
                    .map(drop)
            } else {
                std::fs::DirBuilder::new().mode(0o755).create(path)
            };
            match created {
                Ok(()) => {
                    let made = open_entry(path)?;
                    if let Err(err) = sys::mark_stand_in(made.as_fd()) {
                        // Unmarked, it is never removed (see the module
                        // docs); bound all the same.
                        tracing::warn!(path = %path.display(), %err, "a stand-in cannot be marked and stays in the workspace");
                        return Ok(Placeholder {
                            path: path.to_owned(),
                            lock: None,
                        });
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(err),
            }
            let dir = match open_entry(path) {
                Ok(dir) => dir,
                Err(err) if err.raw_os_error() == Some(libc::ENOENT) => continue,
                // A symlink or something stranger: somebody else's; bound
                // as it is.
                Err(_) => {
                    return Ok(Placeholder {
                        path: path.to_owned(),
                        lock: None,
                    })
                }
            };
            if !stand_in(&dir) {
                return Ok(Placeholder {
                    path: path.to_owned(),
                    lock: None,
                });
            }
            sys::flock(dir.as_fd(), libc::LOCK_SH)?;
            // Still the one at `path` now that it is held?
            let held = dir.metadata()?;
            let there = std::fs::symlink_metadata(path);
            if there.is_ok_and(|m| m.dev() == held.dev() && m.ino() == held.ino()) {
                return Ok(Placeholder {
                    path: path.to_owned(),
                    lock: Some(dir),
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

impl Drop for Placeholder {
    fn drop(&mut self) {
        let Some(held) = self.lock.take() else {
            return;
        };
        let Ok(identity) = held.metadata().map(|m| (m.dev(), m.ino())) else {
            return;
        };
        drop(held);
        let Ok(dir) = open_entry(&self.path) else {
            return;
        };
        let same = dir.metadata().is_ok_and(|m| (m.dev(), m.ino()) == identity);
        // Another holder still relies on it: theirs to remove.
        if !same || sys::flock(dir.as_fd(), libc::LOCK_EX | libc::LOCK_NB).is_err() {
            return;
        }
        if stand_in(&dir) && empty(&self.path, &dir) {
            let removed = if dir.metadata().is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir(&self.path)
            } else {
                std::fs::remove_file(&self.path)
            };
            if let Err(err) = removed {
                tracing::debug!(path = %self.path.display(), %err, "a stand-in stays");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_claim_removes_only_an_empty_stand_in() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".bashrc");
        let first = Placeholder::claim(&file, false).unwrap();
        assert!(file.is_dir() && is_stand_in(&file));
        // Found by a later command: claimed, not taken for the person's.
        let second = Placeholder::claim(&file, false).unwrap();
        drop(first);
        assert!(file.exists(), "removed while still claimed");
        drop(second);
        assert!(
            !file.exists(),
            "the last claim leaves the workspace as it was"
        );

        let folder = dir.path().join(".idea");
        let claim = Placeholder::claim(&folder, false).unwrap();
        std::fs::write(folder.join("kept"), "written from outside").unwrap();
        drop(claim);
        assert!(
            folder.join("kept").exists(),
            "a stand-in with content stays"
        );

        let theirs = dir.path().join(".envrc");
        std::fs::create_dir(&theirs).unwrap();
        assert!(!is_stand_in(&theirs));
        assert!(!is_stand_in(&dir.path().join("absent")));
        drop(Placeholder::claim(&theirs, false).unwrap());
        assert!(theirs.exists(), "what someone else made is never removed");

        let outside = dir.path().join("link");
        std::os::unix::fs::symlink("/tmp", &outside).unwrap();
        assert!(Placeholder::claim(&outside.join("x"), false).is_err());
    }

    #[test]
    fn a_lock_held_elsewhere_keeps_the_stand_in() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".zshrc");
        let claim = Placeholder::claim(&path, true).unwrap();
        assert!(path.is_file() && is_stand_in(&path));
        // Another process's claim: a shared lock through another open file.
        let other = open_entry(&path).unwrap();
        sys::flock(other.as_fd(), libc::LOCK_SH).unwrap();
        drop(claim);
        assert!(path.exists(), "removed under another holder");
        drop(other);
        // A leftover (its holder gone) is claimed and removed by the next.
        drop(Placeholder::claim(&path, true).unwrap());
        assert!(!path.exists());
        // A file stand-in somebody wrote into stays.
        let written = Placeholder::claim(&path, true).unwrap();
        std::fs::write(&path, "export X=1\n").unwrap();
        drop(written);
        assert!(path.exists());
    }
}
