//! How Landlock hides a file: it only ever allows, so the ruleset handles
//! `READ_FILE` and grants it beneath every entry of each directory above a
//! hidden path except the entries leading to one ("around" it). Listing a
//! directory stays allowed (names are not secrets); reading a hidden file,
//! or anything in a hidden directory, is refused (EACCES).
//!
//! Grants attach to the inodes found when the rules were built: a file
//! created later directly in one of those directories (a new entry of the
//! home, say) is not readable until the rules are rebuilt. They are
//! rebuilt whenever one of those directories changed (its modification or
//! change time), checked before every command, so only a file made after
//! that check and before the command reads it is refused.
//!
//! A hard link made by a confined command cannot lead out: Landlock's
//! `REFER` right refuses a link that would gain a right the file lacks
//! where it is. A grant attaches to an inode, not a name: an entry beside
//! the way to a hidden file that is a hard link to it (`~/.aws/creds_backup`
//! made before the run) would grant the hidden file itself, so an entry
//! with a hidden file's inode is never granted. A hard link elsewhere (in
//! a directory granted whole) stays readable at its own path: a limit. A second mount of a home is another path to the same
//! inodes, so [`dsh_sandbox::HiddenPaths::resolve`] lists it too.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use dsh_sandbox::HiddenPath;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, StatxFlags};

/// A directory's identity and last change, to tell when to rebuild.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    device: (u32, u32),
    inode: u64,
    modified: (i64, u32),
    changed: (i64, u32),
}

fn stamp(fd: BorrowedFd<'_>) -> Option<Stamp> {
    stamp_at(fd, "", AtFlags::EMPTY_PATH)
}

/// The stamp of `path` relative to `at` (the file `at` itself with an
/// empty path and `EMPTY_PATH`).
fn stamp_at<P: rustix::path::Arg>(at: impl AsFd, path: P, flags: AtFlags) -> Option<Stamp> {
    let want = StatxFlags::INO | StatxFlags::MTIME | StatxFlags::CTIME;
    let stat = rustix::fs::statx(at, path, flags, want).ok()?;
    Some(Stamp {
        device: (stat.stx_dev_major, stat.stx_dev_minor),
        inode: stat.stx_ino,
        modified: (stat.stx_mtime.tv_sec, stat.stx_mtime.tv_nsec),
        changed: (stat.stx_ctime.tv_sec, stat.stx_ctime.tv_nsec),
    })
}

fn open_directory(path: &Path) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::open(path, flags, Mode::empty()).ok()
}

/// The read grants around a set of hidden paths.
#[derive(Debug)]
pub(crate) struct Around {
    hidden: Vec<HiddenPath>,
    stamps: Vec<(PathBuf, Option<Stamp>)>,
    grants: Vec<OwnedFd>,
}

impl Around {
    /// Opens (`O_PATH`, never through a link) every entry of each
    /// directory above a path in `hidden` that neither is hidden nor leads
    /// to one. Blocking: reads directories.
    pub(crate) fn build(hidden: &[HiddenPath]) -> Around {
        let hidden_paths: Vec<&Path> = hidden.iter().map(|h| h.path.as_path()).collect();
        let mut above: Vec<&Path> = hidden_paths
            .iter()
            .flat_map(|path| path.ancestors().skip(1))
            .collect();
        above.sort();
        above.dedup();
        let mut stamps = Vec::with_capacity(above.len());
        let mut grants = Vec::new();
        let hidden_inodes: Vec<(u64, u64)> = hidden
            .iter()
            .filter(|h| !h.directory)
            .filter_map(|h| rustix::fs::lstat(&h.path).ok())
            .map(|stat| (stat.st_dev, stat.st_ino))
            .collect();
        for directory in &above {
            let fd = open_directory(directory);
            stamps.push((
                directory.to_path_buf(),
                fd.as_ref().and_then(|fd| stamp(fd.as_fd())),
            ));
            let Some(fd) = fd else { continue };
            let Ok(mut entries) = Dir::read_from(&fd) else {
                continue;
            };
            while let Some(Ok(entry)) = entries.next() {
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let name = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name);
                let child = directory.join(name);
                if hidden_paths.contains(&child.as_path()) || above.contains(&child.as_path()) {
                    continue;
                }
                let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let Ok(opened) = rustix::fs::openat(&fd, name, flags, Mode::empty()) else {
                    continue;
                };
                // A link's own inode grants nothing (an access is decided
                // on the path it resolves to), and a hard link to a hidden
                // file would grant that file: both left out.
                let Ok(stat) = rustix::fs::fstat(&opened) else {
                    continue;
                };
                let is_link = FileType::from_raw_mode(stat.st_mode) == FileType::Symlink;
                if !is_link && !hidden_inodes.contains(&(stat.st_dev, stat.st_ino)) {
                    grants.push(opened);
                }
            }
        }
        Around {
            hidden: hidden.to_vec(),
            stamps,
            grants,
        }
    }

    /// True if and only if these grants still fit `hidden`: the same
    /// paths, and no directory above them changed since.
    pub(crate) fn fits(&self, hidden: &[HiddenPath]) -> bool {
        // One `statx` per directory, by path (before every command).
        self.hidden == hidden
            && self.stamps.iter().all(|(directory, was)| {
                stamp_at(rustix::fs::CWD, directory, AtFlags::SYMLINK_NOFOLLOW) == *was
            })
    }

    /// The entries to grant reads beneath.
    pub(crate) fn grants(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.grants.iter().map(AsFd::as_fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_but_the_way_to_a_hidden_one_is_granted() {
        let home = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(home.path()).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        for file in [".ssh/id_rsa", ".ssh/known_hosts", ".bashrc"] {
            std::fs::write(home.join(file), "x").unwrap();
        }
        std::os::unix::fs::symlink(".ssh/id_rsa", home.join("key")).unwrap();
        std::fs::hard_link(home.join(".ssh/id_rsa"), home.join("backup_key")).unwrap();
        let hidden = [HiddenPath {
            path: home.join(".ssh/id_rsa"),
            directory: false,
        }];
        let around = Around::build(&hidden);
        let granted: Vec<PathBuf> = around
            .grants()
            .map(|fd| {
                let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
                std::fs::read_link(link).unwrap()
            })
            .collect();
        assert!(granted.contains(&home.join(".bashrc")));
        assert!(granted.contains(&home.join(".ssh/known_hosts")));
        for never in [home.join(".ssh"), home.join(".ssh/id_rsa"), home.clone()] {
            assert!(!granted.contains(&never), "{never:?} in {granted:?}");
        }
        assert!(granted.iter().all(|p| !p.ends_with("key")), "no link");
        assert!(
            granted.iter().all(|p| !p.ends_with("backup_key")),
            "no hard link to a hidden file: {granted:?}"
        );
        // Fits while nothing above changed (the shared temp dir above it
        // may change under a busy machine: built again until it holds).
        assert!((0..20).any(|_| Around::build(&hidden).fits(&hidden)));
        std::fs::write(home.join("new"), "x").unwrap();
        assert!(!around.fits(&hidden), "a new entry above: rebuilt");
    }
}
