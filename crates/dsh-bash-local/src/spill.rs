//! Spill files: the complete stream, on disk, private.
//!
//! One private directory per executor (mode 0700, created lazily and
//! exclusively under the configured parent or the temp dir — `/tmp` when
//! `TMPDIR` is empty or relative — opened once without following symlinks
//! and checked to be ours and private; its name records the owning pid and
//! start time, so directories of dead hosts are swept when the next one is
//! made). One file per overflowing stream, created relative to the
//! directory handle (mode 0600, random unpredictable name,
//! `O_CREAT|O_EXCL|O_NOFOLLOW`): whoever owns a shared `TMPDIR` cannot swap
//! the directory for a symlink and hand out a forged file. A directory that
//! disappears (a tmp cleaner) or is replaced is created anew.
//! Retention is bounded: once more than the configured number of files or
//! bytes are kept, the oldest finished files are deleted and their streams
//! stop advertising them.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError, Weak};

use dsh_bash::OwnerToken;

use crate::output::Stream;
use crate::scratch::SPILL_PREFIX;
use crate::sys;

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
    owner: Option<OwnerToken>,
}

/// The server-wide ceiling over every owner's spill files, in multiples of
/// one owner's limits: many owners at their limits evict the oldest files
/// of all (the README names it a limit of the per-owner shares).
const CEILING: u64 = 4;

/// The private directory, as created: its path and a handle on it.
struct Dir {
    path: PathBuf,
    handle: OwnedFd,
}

/// The executor's private spill directory and the files it retains.
pub(crate) struct SpillDir {
    parent: PathBuf,
    dir: Mutex<Option<Dir>>,
    kept: Mutex<VecDeque<Kept>>,
    /// Bytes in spill files still being written (running tasks), per
    /// owner: they count against its byte budget too.
    active: Mutex<HashMap<Option<OwnerToken>, u64>>,
    limits: SpillLimits,
}

impl std::fmt::Debug for SpillDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillDir")
            .field("parent", &self.parent)
            .finish_non_exhaustive()
    }
}

/// `dsh-bash-<pid>.<start time>-<random>`: the owner, recorded in the name.
fn directory_name(random: &str) -> String {
    format!("{SPILL_PREFIX}{}-{random}", crate::scratch::owner_tag())
}


/// Removes the spill directories of dead hosts (ours: same user) in
/// `parent`: their paths mean nothing any more.
fn sweep(parent: &Path) {
    crate::scratch::sweep_dead(parent, SPILL_PREFIX);
}

impl SpillDir {
    pub(crate) fn new(parent: PathBuf, limits: SpillLimits) -> Self {
        SpillDir {
            parent,
            dir: Mutex::new(None),
            kept: Mutex::new(VecDeque::new()),
            active: Mutex::new(HashMap::new()),
            limits,
        }
    }

    /// `bytes` more were written to a spill file of `owner` still being
    /// written.
    pub(crate) fn grew(&self, owner: &Option<OwnerToken>, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        *active.entry(owner.clone()).or_default() += bytes;
    }

    /// A spill file of `owner` that had grown by `bytes` is no longer being
    /// written.
    pub(crate) fn finished_writing(&self, owner: &Option<OwnerToken>, bytes: u64) {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(now) = active.get_mut(owner) {
            *now = now.saturating_sub(bytes);
            if *now == 0 {
                active.remove(owner);
            }
        }
    }

    /// Running bytes of `owner`, and of all.
    fn running(&self, owner: &Option<OwnerToken>) -> (u64, u64) {
        let active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        (
            active.get(owner).copied().unwrap_or(0),
            active.values().sum(),
        )
    }

    /// Deletes the oldest finished files of `owner` while it keeps more
    /// than the limits (its newest file is always kept), so one owner's
    /// pressure evicts only its own; then, past the server-wide ceiling
    /// ([`CEILING`] times the limits, running files counted), the oldest of
    /// all. Blocking.
    fn evict(&self, owner: &Option<OwnerToken>) {
        let (running, all_running) = self.running(owner);
        let evicted: Vec<Kept> = {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let mut evicted = Vec::new();
            let mine = |kept: &VecDeque<Kept>| {
                let files = kept.iter().filter(|k| k.owner == *owner);
                (files.clone().count(), files.map(|k| k.bytes).sum::<u64>() + running)
            };
            loop {
                let (count, bytes) = mine(&kept);
                if count <= 1 || (count <= self.limits.max_files && bytes <= self.limits.max_bytes) {
                    break;
                }
                let Some(oldest) = kept.iter().position(|k| k.owner == *owner) else {
                    break;
                };
                evicted.extend(kept.remove(oldest));
            }
            let mut total: u64 = kept.iter().map(|k| k.bytes).sum::<u64>() + all_running;
            let max_files = self.limits.max_files.saturating_mul(CEILING as usize);
            let max_bytes = self.limits.max_bytes.saturating_mul(CEILING);
            while kept.len() > 1 && (kept.len() > max_files || total > max_bytes) {
                let Some(oldest) = kept.pop_front() else {
                    break;
                };
                total -= oldest.bytes;
                evicted.push(oldest);
            }
            evicted
        };
        for old in evicted {
            forget(old, "deleted by retention (only the newest spill files are kept)");
        }
    }

    /// Creates the private directory: 0700, exclusive, then opened without
    /// following symlinks and checked to be ours and private. Blocking.
    fn create_dir(&self) -> io::Result<Dir> {
        // In a directory everyone may write without the sticky bit, anyone
        // could move ours away and leave a symlink at the advertised path.
        let parent_mode = fs::metadata(&self.parent).map(|m| m.permissions().mode())?;
        if parent_mode & 0o002 != 0 && parent_mode & 0o1000 == 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is writable by everyone without the sticky bit (mode {:o}): others could redirect spill files there; point TMPDIR (or the spill parent) at a private or sticky directory",
                    self.parent.display(),
                    parent_mode & 0o7777
                ),
            ));
        }
        sweep(&self.parent);
        let path = self.parent.join(directory_name(&random_name()?));
        let context = |err: io::Error| {
            io::Error::new(
                err.kind(),
                format!("cannot create spill directory {}: {err}", path.display()),
            )
        };
        DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(context)?;
        let handle = sys::open_directory(&path).map_err(context)?;
        let (uid, mode) = sys::owner_and_mode(handle.as_fd()).map_err(context)?;
        if uid != sys::effective_uid() || mode & 0o077 != 0 {
            return Err(context(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("it is not private (owner {uid}, mode {mode:o})"),
            )));
        }
        Ok(Dir { path, handle })
    }

    /// Creates a new spill file for a stream labelled `label`, relative to
    /// the directory handle (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600). A
    /// directory that was removed, or whose path now leads elsewhere, is
    /// replaced by a new one first. Blocking.
    pub(crate) fn create(
        &self,
        label: &str,
        owner: &Option<OwnerToken>,
    ) -> io::Result<(File, PathBuf)> {
        let mut dir = self.dir.lock().unwrap_or_else(PoisonError::into_inner);
        let intact = dir
            .as_ref()
            .is_some_and(|d| sys::same_directory(d.handle.as_fd(), &d.path));
        if !intact {
            if dir.is_some() {
                tracing::warn!(parent = %self.parent.display(), "the spill directory was removed or replaced; creating a new one");
            }
            *dir = Some(self.create_dir()?);
        }
        let Some(dir) = dir.as_ref() else {
            return Err(io::Error::other("no spill directory"));
        };
        // Room for the new file: running files count too.
        self.evict(owner);
        let mut reclaimed = false;
        loop {
            let name = format!("{label}-{}", random_name()?);
            match sys::create_at(dir.handle.as_fd(), &name) {
                Ok(file) => return Ok((file, dir.path.join(name))),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) if err.kind() == io::ErrorKind::StorageFull && !reclaimed => {
                    reclaimed = true;
                    if self.reclaim(owner, 1) == 0 {
                        return Err(err);
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// The directory's path, once it exists.
    pub(crate) fn current_path(&self) -> Option<PathBuf> {
        self.dir
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|d| d.path.clone())
    }

    /// Removes the directory and everything in it (an MCP session's paths
    /// mean nothing after the session). Blocking.
    pub(crate) fn remove(&self) {
        let taken = self
            .dir
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        if let Some(dir) = taken {
            if sys::same_directory(dir.handle.as_fd(), &dir.path) {
                if let Err(err) = fs::remove_dir_all(&dir.path) {
                    tracing::warn!(%err, path = %dir.path.display(), "cannot remove the spill directory");
                }
            }
        }
    }

    /// Records a finished, intact spill file of `owner` and deletes the
    /// oldest ones beyond the limits (never the one just recorded, see
    /// [`Self::evict`]). Blocking.
    pub(crate) fn retain(
        &self,
        path: PathBuf,
        bytes: u64,
        stream: Weak<Stream>,
        owner: Option<OwnerToken>,
    ) {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(Kept {
                path,
                bytes,
                stream,
                owner: owner.clone(),
            });
        self.evict(&owner);
    }

    /// Makes room on a full filesystem: deletes the oldest finished spill
    /// files of `owner` first, then the oldest of others, until at least
    /// `need` bytes are freed or none is left; how many it deleted. Their
    /// streams say they were deleted to make room. Blocking.
    pub(crate) fn reclaim(&self, owner: &Option<OwnerToken>, need: u64) -> usize {
        let freed: Vec<Kept> = {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let mut freed = Vec::new();
            let mut bytes = 0;
            while bytes < need {
                let oldest = match kept.iter().position(|k| k.owner == *owner) {
                    Some(at) => kept.remove(at),
                    None => kept.pop_front(),
                };
                let Some(one) = oldest else {
                    break;
                };
                bytes += one.bytes.max(1);
                freed.push(one);
            }
            freed
        };
        let count = freed.len();
        if count > 0 {
            tracing::warn!(
                files = count,
                "the spill filesystem was full: deleted the oldest finished spill files to make room"
            );
        }
        for old in freed {
            forget(old, "deleted to make room: the spill filesystem was full");
        }
        count
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

/// Deletes a kept spill file; its stream, if still read, says `why`.
fn forget(old: Kept, why: &str) {
    if let Some(stream) = old.stream.upgrade() {
        stream.spill_lost(why);
    }
    if let Err(err) = fs::remove_file(&old.path) {
        tracing::debug!(%err, path = %old.path.display(), "deleting a spill file failed");
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
    fn a_swapped_or_removed_directory_is_replaced_never_followed() {
        let parent = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        let (_, first) = spill.create("stdout", &None).unwrap();
        let dir = first.parent().unwrap().to_owned();
        // An attacker moves the directory away and plants a symlink to a
        // directory of theirs at its path.
        let theirs = parent.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        fs::rename(&dir, parent.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&theirs, &dir).unwrap();
        let (_, second) = spill.create("stdout", &None).unwrap();
        assert_ne!(second.parent().unwrap(), dir, "the swapped path was reused");
        assert!(second.exists());
        assert_eq!(
            fs::read_dir(&theirs).unwrap().count(),
            0,
            "a file landed in their directory"
        );
        // A tmp cleaner removes it: the next spill makes a new one.
        fs::remove_dir_all(second.parent().unwrap()).unwrap();
        let (_, third) = spill.create("stderr", &None).unwrap();
        assert!(third.exists());
    }

    #[test]
    fn a_shared_parent_without_the_sticky_bit_is_refused() {
        let parent = tempfile::tempdir().unwrap();
        fs::set_permissions(parent.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        let err = spill.create("stdout", &None).unwrap_err().to_string();
        assert!(err.contains("without the sticky bit"), "{err}");
        fs::set_permissions(parent.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(spill.create("stdout", &None).is_ok());
    }

    #[test]
    fn dead_hosts_directories_are_swept_live_ones_kept() {
        let parent = tempfile::tempdir().unwrap();
        let dead = parent.path().join(format!("dsh-bash-999999999.1-{}", "0123abcd".repeat(4)));
        fs::create_dir(&dead).unwrap();
        fs::write(dead.join("stdout-x"), "old").unwrap();
        let mine = parent.path().join(directory_name(&"feedbeef".repeat(4)));
        fs::create_dir(&mine).unwrap();
        let unrelated = parent.path().join("dsh-bash-tmp-ABCDEF");
        fs::create_dir(&unrelated).unwrap();
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        spill.create("stdout", &None).unwrap();
        assert!(!dead.exists());
        assert!(mine.exists());
        assert!(unrelated.exists());
    }

    #[test]
    fn removal_takes_the_directory_and_its_files() {
        let parent = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        let (_, file) = spill.create("stdout", &None).unwrap();
        spill.remove();
        assert!(!file.exists());
        assert!(!file.parent().unwrap().exists());
    }

    #[test]
    fn files_are_private_and_unpredictable() {
        let parent = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        let (_, first) = spill.create("stdout", &None).unwrap();
        let (_, second) = spill.create("stdout", &None).unwrap();
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
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        let paths: Vec<PathBuf> = (0..3)
            .map(|_| {
                let (_, path) = spill.create("stdout", &None).unwrap();
                spill.retain(path.clone(), 10, Weak::new(), None);
                path
            })
            .collect();
        assert!(!paths[0].exists());
        assert!(paths[1].exists() && paths[2].exists());
        // One file over the byte budget on its own is still kept.
        let (_, big) = spill.create("stderr", &None).unwrap();
        spill.retain(big.clone(), 1_000, Weak::new(), None);
        assert!(big.exists());
        assert!(!paths[1].exists() && !paths[2].exists());
    }

    /// A full file system frees the owner's oldest files first, then the
    /// oldest of others.
    #[test]
    fn a_full_filesystem_reclaims_the_owners_oldest_first() {
        let parent = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        let (a, b) = (Some(OwnerToken::new("a")), Some(OwnerToken::new("b")));
        let make = |owner: &Option<OwnerToken>, bytes| {
            let (_, path) = spill.create("stdout", owner).unwrap();
            spill.retain(path.clone(), bytes, Weak::new(), owner.clone());
            path
        };
        let (b_old, a_old, a_new) = (make(&b, 10), make(&a, 10), make(&a, 10));
        // a needs 15 bytes: its two files go, b's stays.
        assert_eq!(spill.reclaim(&a, 15), 2);
        assert!(!a_old.exists() && !a_new.exists() && b_old.exists());
        // With none of its own left, the oldest of others.
        assert_eq!(spill.reclaim(&a, 1), 1);
        assert!(!b_old.exists());
        assert_eq!(spill.reclaim(&a, 1), 0, "nothing left to free");
    }

    /// One owner's files past its limits evict only its own; the server
    /// ceiling (four times the limits) evicts the oldest of all.
    #[test]
    fn one_owners_pressure_evicts_only_its_own() {
        let parent = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        let (a, b) = (
            Some(OwnerToken::new("a")),
            Some(OwnerToken::new("b")),
        );
        let make = |owner: &Option<OwnerToken>, bytes| {
            let (_, path) = spill.create("stdout", owner).unwrap();
            spill.retain(path.clone(), bytes, Weak::new(), owner.clone());
            path
        };
        let kept_of_a = make(&a, 10);
        let b_files: Vec<PathBuf> = (0..5).map(|_| make(&b, 10)).collect();
        assert!(kept_of_a.exists(), "b's files evicted a's");
        assert!(!b_files[2].exists() && b_files[3].exists() && b_files[4].exists());
        // Running bytes of b count against b only.
        spill.grew(&b, 150);
        let a_second = make(&a, 10);
        assert!(kept_of_a.exists() && a_second.exists());
        spill.finished_writing(&b, 150);
        // Many owners at their limits: past 4 × 2 files, the oldest of all.
        let others: Vec<PathBuf> = (0..3)
            .flat_map(|n| {
                let owner = Some(OwnerToken::new(format!("c{n}")));
                [make(&owner, 10), make(&owner, 10)]
            })
            .collect();
        assert!(!kept_of_a.exists(), "the ceiling evicts the oldest of all");
        assert!(others.iter().all(|p| p.exists()));
    }

    #[test]
    fn running_files_count_against_the_byte_budget() {
        let parent = tempfile::tempdir().unwrap();
        let spill = SpillDir::new(parent.path().to_owned(), limits());
        let (_, older) = spill.create("stdout", &None).unwrap();
        spill.retain(older.clone(), 10, Weak::new(), None);
        let (_, old) = spill.create("stdout", &None).unwrap();
        spill.retain(old.clone(), 10, Weak::new(), None);
        // A running task writes 95 bytes: 10 + 10 + 95 > 100, so the oldest
        // finished file goes when the next file is made.
        spill.grew(&None, 95);
        let (_, _running) = spill.create("stderr", &None).unwrap();
        assert!(!older.exists());
        assert!(old.exists(), "the newest finished file is always kept");
        spill.finished_writing(&None, 95);
    }
}
