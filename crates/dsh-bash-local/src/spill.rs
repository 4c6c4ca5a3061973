//! Spill files: the complete stream, on disk, private.
//!
//! One private directory per executor (mode 0700, random name, created
//! lazily under the temp dir or the configured parent); one file per
//! overflowing stream (mode 0600, random unpredictable name, created
//! exclusively: an existing path, a symlink included, makes creation fail).
//! Retention is bounded: once more than the configured number of files or
//! bytes are kept, the oldest finished files are deleted and their streams
//! stop advertising them.

use std::collections::VecDeque;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, Weak};

use crate::output::Stream;
use crate::sys;

/// Creates `path` for writing, exclusively, mode 0600, never following a
/// symlink (O_CREAT|O_EXCL refuses any existing path, dangling links too).
pub(crate) fn create_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// 128 bits of kernel randomness as hex: an unpredictable file name part.
fn random_name() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    sys::random_bytes(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Limits on what spill files may accumulate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpillLimits {
    pub(crate) max_files: usize,
    pub(crate) max_bytes: u64,
}

struct Kept {
    path: PathBuf,
    bytes: u64,
    stream: Weak<Stream>,
}

/// The executor's private spill directory and the files it retains.
pub(crate) struct SpillDir {
    parent: Option<PathBuf>,
    dir: Mutex<Option<PathBuf>>,
    kept: Mutex<VecDeque<Kept>>,
    limits: SpillLimits,
}

impl std::fmt::Debug for SpillDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillDir")
            .field("parent", &self.parent)
            .finish_non_exhaustive()
    }
}

impl SpillDir {
    pub(crate) fn new(parent: Option<PathBuf>, limits: SpillLimits) -> Self {
        SpillDir {
            parent,
            dir: Mutex::new(None),
            kept: Mutex::new(VecDeque::new()),
            limits,
        }
    }

    /// The private directory, created on first use. Blocking.
    fn dir(&self) -> io::Result<PathBuf> {
        let mut dir = self.dir.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(dir) = dir.as_ref() {
            return Ok(dir.clone());
        }
        let parent = self.parent.clone().unwrap_or_else(std::env::temp_dir);
        let path = parent.join(format!("dsh-bash-{}", random_name()?));
        DirBuilder::new().mode(0o700).create(&path).map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("cannot create spill directory {}: {err}", path.display()),
            )
        })?;
        *dir = Some(path.clone());
        Ok(path)
    }

    /// Creates a new spill file for a stream labelled `label`. Blocking.
    pub(crate) fn create(&self, label: &str) -> io::Result<(File, PathBuf)> {
        let dir = self.dir()?;
        loop {
            let path = dir.join(format!("{label}-{}", random_name()?));
            match create_exclusive(&path) {
                Ok(file) => return Ok((file, path)),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// Records a finished, intact spill file and deletes the oldest ones
    /// beyond the limits (never the one just recorded). Blocking.
    pub(crate) fn retain(&self, path: PathBuf, bytes: u64, stream: Weak<Stream>) {
        let evicted: Vec<Kept> = {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.push_back(Kept {
                path,
                bytes,
                stream,
            });
            let mut total: u64 = kept.iter().map(|k| k.bytes).sum();
            let mut evicted = Vec::new();
            while kept.len() > 1
                && (kept.len() > self.limits.max_files || total > self.limits.max_bytes)
            {
                let Some(oldest) = kept.pop_front() else {
                    break;
                };
                total -= oldest.bytes;
                evicted.push(oldest);
            }
            evicted
        };
        for old in evicted {
            forget(old.path, &old.stream);
        }
    }

    /// Deletes the given files now (their task left the registry). Blocking.
    pub(crate) fn discard(&self, paths: &[PathBuf]) {
        if paths.is_empty() {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|k| !paths.contains(&k.path));
        drop(kept);
        for path in paths {
            let _ = fs::remove_file(path);
        }
    }
}

fn forget(path: PathBuf, stream: &Weak<Stream>) {
    if let Some(stream) = stream.upgrade() {
        stream.spill_lost();
    }
    if let Err(err) = fs::remove_file(&path) {
        tracing::debug!(%err, path = %path.display(), "evicting a spill file failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn limits() -> SpillLimits {
        SpillLimits {
            max_files: 2,
            max_bytes: 100,
        }
    }

    #[test]
    fn exclusive_creation_refuses_existing_paths_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let existing = dir.path().join("existing");
        fs::write(&existing, "x").unwrap();
        assert_eq!(
            create_exclusive(&existing).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        let target = dir.path().join("target");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_exclusive(&link).is_err());
        assert!(!target.exists(), "a dangling symlink was followed");
    }

    #[test]
    fn files_are_private_and_unpredictable() {
        let parent = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(Some(parent.path().to_owned()), limits());
        let (_, first) = spill.create("stdout").unwrap();
        let (_, second) = spill.create("stdout").unwrap();
        assert_ne!(first, second);
        let dir = first.parent().unwrap();
        assert_eq!(
            fs::metadata(dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(
            fs::metadata(&first).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let name = first.file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), "stdout-".len() + 32);
    }

    #[test]
    fn retention_deletes_the_oldest_beyond_the_limits() {
        let parent = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(Some(parent.path().to_owned()), limits());
        let paths: Vec<PathBuf> = (0..3)
            .map(|_| {
                let (_, path) = spill.create("stdout").unwrap();
                spill.retain(path.clone(), 10, Weak::new());
                path
            })
            .collect();
        assert!(!paths[0].exists());
        assert!(paths[1].exists() && paths[2].exists());
        // One file over the byte budget on its own is still kept.
        let (_, big) = spill.create("stderr").unwrap();
        spill.retain(big.clone(), 1_000, Weak::new());
        assert!(big.exists());
        assert!(!paths[1].exists() && !paths[2].exists());
    }
}
