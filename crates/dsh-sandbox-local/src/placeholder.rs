//! Stand-ins for protected paths that do not exist yet.
//!
//! bubblewrap can only bind over something that exists, and it creates a
//! missing mount point itself — in the writable workspace, on the host. So
//! the provider creates the stand-in before bwrap runs, binds it read-only,
//! and removes it once no command of this process needs it: when the last
//! confinement holding it is dropped, if it is still the very directory
//! created here and still empty. The person's workspace is left as it was.
//!
//! A stand-in is always an empty directory, whatever the protected path
//! will be: nothing can be created at its name nor inside it, and git
//! ignores empty directories, so it never shows in `git status` nor gets
//! committed by a command's `git add -A`. While a command runs, the host
//! sees it too (a shell reading a stand-in `.bashrc` says it is a
//! directory).
//!
//! Claims are counted per path across every command of the process, so a
//! stand-in is never removed while another confined command still relies
//! on it (removing a mount point in one mount namespace detaches the
//! mounts on it in the others). Limit: another process that confines the
//! same workspace at the same time does not know these claims; it may
//! remove a stand-in this process still binds, or keep one of its own.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

/// A stand-in created by this process: its identity and how many live
/// confinements bind it.
struct Standing {
    dev: u64,
    ino: u64,
    claims: usize,
}

fn registry() -> &'static Mutex<HashMap<PathBuf, Standing>> {
    static REGISTRY: OnceLock<Mutex<HashMap<PathBuf, Standing>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// A claim on one stand-in, released on drop.
#[derive(Debug)]
pub(crate) struct Placeholder {
    path: PathBuf,
    /// False when the path existed already (made by someone else): then
    /// nothing is removed.
    owned: bool,
}

impl Placeholder {
    /// Makes sure `path` exists, creating an empty directory there if it is
    /// missing; its parent must be a real directory (not a symlink).
    pub(crate) fn claim(path: &Path) -> io::Result<Placeholder> {
        let parent = path
            .parent()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent"))?;
        let meta = std::fs::symlink_metadata(parent)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", parent.display()),
            ));
        }
        let mut registry = registry().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(standing) = registry.get_mut(path) {
            let same = std::fs::symlink_metadata(path)
                .is_ok_and(|m| m.dev() == standing.dev && m.ino() == standing.ino);
            if same {
                standing.claims += 1;
                return Ok(Placeholder {
                    path: path.to_owned(),
                    owned: true,
                });
            }
            // Replaced behind this process's back: start over.
            registry.remove(path);
        }
        match std::fs::DirBuilder::new().mode(0o755).create(path) {
            Ok(()) => {
                let meta = std::fs::symlink_metadata(path)?;
                registry.insert(
                    path.to_owned(),
                    Standing {
                        dev: meta.dev(),
                        ino: meta.ino(),
                        claims: 1,
                    },
                );
                Ok(Placeholder {
                    path: path.to_owned(),
                    owned: true,
                })
            }
            // Someone made it in the meantime: bind what is there.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(Placeholder {
                path: path.to_owned(),
                owned: false,
            }),
            Err(err) => Err(err),
        }
    }

    /// The path stood in for.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Placeholder {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let mut registry = registry().lock().unwrap_or_else(PoisonError::into_inner);
        let Some(standing) = registry.get_mut(&self.path) else {
            return;
        };
        standing.claims -= 1;
        if standing.claims > 0 {
            return;
        }
        let (dev, ino) = (standing.dev, standing.ino);
        registry.remove(&self.path);
        // Removed only if it is still the stand-in made here, and empty
        // (rmdir refuses a directory that is not).
        let same = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| meta.is_dir() && meta.dev() == dev && meta.ino() == ino);
        if same {
            if let Err(err) = std::fs::remove_dir(&self.path) {
                tracing::debug!(path = %self.path.display(), %err, "a stand-in stays");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_counted_and_the_last_removes_only_an_empty_stand_in() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".bashrc");
        let first = Placeholder::claim(&file).unwrap();
        let second = Placeholder::claim(&file).unwrap();
        assert!(file.is_dir());
        drop(first);
        assert!(file.exists(), "removed while still claimed");
        drop(second);
        assert!(
            !file.exists(),
            "the last claim leaves the workspace as it was"
        );

        let folder = dir.path().join(".idea");
        let claim = Placeholder::claim(&folder).unwrap();
        std::fs::write(folder.join("kept"), "written from outside").unwrap();
        drop(claim);
        assert!(
            folder.join("kept").exists(),
            "a stand-in with content stays"
        );

        let theirs = dir.path().join(".envrc");
        std::fs::write(&theirs, "").unwrap();
        drop(Placeholder::claim(&theirs).unwrap());
        assert!(theirs.exists(), "what someone else made is never removed");

        let outside = dir.path().join("link");
        std::os::unix::fs::symlink("/tmp", &outside).unwrap();
        assert!(Placeholder::claim(&outside.join("x")).is_err());
    }
}
