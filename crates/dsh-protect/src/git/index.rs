//! The gitlinks of a repository's index: the paths git treats as
//! submodules (mode 160000) whether `.gitmodules` names them or not; `git
//! status` recurses into each, running what its own repository's config
//! says. Versions 2, 3 and 4 of the index format (gitformat-index(5));
//! re-implemented so that no git runs on every command.

use std::path::Path;

/// Index files read at most this long (a larger one is not searched, and
/// its gitlinks are left out; the README says so).
const MAX_INDEX: u64 = 64 << 20;

/// Gitlinks returned at most (each is one more bind for every command).
pub(crate) const MAX_GITLINKS: usize = 256;

const GITLINK: u32 = 0o160000;

/// The longest path an entry may name: past it the index is not searched
/// further (a v4 index's prefix compression could otherwise make a few
/// bytes of file stand for terabytes of names).
const MAX_NAME: usize = 4096;

/// The gitlink paths (relative to the worktree, as git writes them) of the
/// index at `path`, and whether that is all of them (false past the
/// bounds); none when there is no index.
pub(crate) fn gitlinks(path: &Path) -> (Vec<String>, bool) {
    let Some(Parsed {
        mut links,
        all,
        shared,
    }) = read(path)
    else {
        return (Vec::new(), true);
    };
    // A split index (`git update-index --split-index`) keeps most entries
    // in `sharedindex.<id>` beside it: its gitlinks count too (those the
    // split part deleted as well: more kept read-only, never fewer).
    let Some(shared) = shared else {
        return (links, all);
    };
    let file = path.with_file_name(format!("sharedindex.{shared}"));
    match read(&file) {
        Some(more) => {
            for link in more.links {
                if !links.contains(&link) {
                    links.push(link);
                }
            }
            (links, all && more.all && more.shared.is_none())
        }
        // The shared part is missing or unreadable: git cannot read this
        // index either, but what it named is not all there is.
        None => (links, false),
    }
}

/// What one index file holds: its gitlinks, whether that is all of them,
/// and the shared index it is split from, if any.
struct Parsed {
    links: Vec<String>,
    all: bool,
    shared: Option<String>,
}

/// The index at `path` parsed, for SHA-1 or SHA-256 object ids (the
/// index does not say which); `None` when there is none. One that is not
/// a regular file (git follows a link there), too large, or that does not
/// parse is read as nothing, and not all.
fn read(path: &Path) -> Option<Parsed> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let unread = Parsed {
        links: Vec::new(),
        all: false,
        shared: None,
    };
    if !meta.is_file() || meta.len() > MAX_INDEX {
        return Some(unread);
    }
    let Some(bytes) = super::read_bounded(path, MAX_INDEX) else {
        return Some(unread);
    };
    Some(
        [20, 32]
            .into_iter()
            .find_map(|id| parse(&bytes, id))
            .unwrap_or(unread),
    )
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let word = bytes.get(at..at + 4)?;
    Some(u32::from_be_bytes([word[0], word[1], word[2], word[3]]))
}

/// The gitlinks of an index's bytes whose object ids are `id` bytes long,
/// whether that is all of them, and the shared index it names; `None` if
/// it is not a valid index (with ids of that length).
fn parse(bytes: &[u8], id: usize) -> Option<Parsed> {
    if bytes.get(..4)? != b"DIRC" {
        return None;
    }
    let version = be32(bytes, 4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(bytes, 8)?;
    let mut at = 12;
    let mut previous: Vec<u8> = Vec::new();
    let mut links = Vec::new();
    let mut all = true;
    for _ in 0..count {
        // ctime, mtime (8+8), dev, ino (4+4), mode at 24.
        let mode = be32(bytes, at + 24)?;
        // uid, gid, size (12), the object id, flags (2).
        let flags_at = at + 40 + id;
        let flags = u16::from_be_bytes([*bytes.get(flags_at)?, *bytes.get(flags_at + 1)?]);
        let mut name_at = flags_at + 2;
        // Extended flags (version 3 and up, when flagged).
        if version >= 3 && flags & 0x4000 != 0 {
            name_at += 2;
        }
        let name = if version == 4 {
            // The length of the previous name to strip, as a varint, then
            // the rest of this name, NUL-terminated.
            let (strip, used) = varint(bytes.get(name_at..)?)?;
            let start = name_at + used;
            let end = start + bytes.get(start..)?.iter().position(|b| *b == 0)?;
            let keep = previous.len().checked_sub(usize::try_from(strip).ok()?)?;
            if keep + (end - start) > MAX_NAME {
                return Some(Parsed {
                    links,
                    all: false,
                    shared: None,
                });
            }
            let mut name = previous[..keep].to_vec();
            name.extend_from_slice(&bytes[start..end]);
            at = end + 1;
            name
        } else {
            let end = name_at + bytes.get(name_at..)?.iter().position(|b| *b == 0)?;
            if end - name_at > MAX_NAME {
                return Some(Parsed {
                    links,
                    all: false,
                    shared: None,
                });
            }
            let name = bytes[name_at..end].to_vec();
            // Entries are padded with 1–8 NULs to a multiple of 8 bytes.
            let length = end - at;
            at += (length + 8) & !7;
            name
        };
        // Git goes by the file type bits alone.
        if mode & 0o170000 == GITLINK {
            if links.len() < MAX_GITLINKS {
                links.push(String::from_utf8_lossy(&name).into_owned());
            } else {
                all = false;
            }
        }
        previous = name;
    }
    let shared = shared_index(bytes, at, id)?;
    Some(Parsed { links, all, shared })
}

/// The shared index the extensions from `at` on name (`link`: its id, in
/// hex), if any; `None` when the extensions do not fit the file (ids of
/// another length, an extension past its end).
fn shared_index(bytes: &[u8], mut at: usize, id: usize) -> Option<Option<String>> {
    // The extensions end where the file's own trailing checksum begins;
    // as git does, fewer than 8 bytes left before it are no extension.
    let end = bytes.len().checked_sub(id)?;
    let mut shared = None;
    while at + 8 <= end {
        let signature = bytes.get(at..at + 4)?;
        let size = usize::try_from(be32(bytes, at + 4)?).ok()?;
        let data = bytes.get(at + 8..(at + 8).checked_add(size)?)?;
        if signature == b"link" {
            let hex: String = data.get(..id)?.iter().map(|b| format!("{b:02x}")).collect();
            // An all-zero id names no shared index.
            if hex.bytes().any(|c| c != b'0') {
                shared = Some(hex);
            }
        }
        at += 8 + size;
    }
    (at <= end).then_some(shared)
}

/// Git's offset varint (each continuation adds one before shifting).
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut used = 0;
    let mut byte = *bytes.first()?;
    let mut value = u64::from(byte & 0x7f);
    while byte & 0x80 != 0 {
        used += 1;
        // Ten bytes hold any u64; more is not an index git wrote.
        if used >= 10 {
            return None;
        }
        byte = *bytes.get(used)?;
        value = value.checked_add(1)?.checked_shl(7)? | u64::from(byte & 0x7f);
    }
    Some((value, used + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real indexes written by git, in each version, with a gitlink added
    /// by hand (`git update-index --add --cacheinfo 160000,…`).
    #[test]
    fn gitlinks_of_real_indexes_in_every_version() {
        if !crate::git::real_git::installed("index parsing") {
            return;
        }
        for version in ["2", "3", "4"] {
            let dir = tempfile::tempdir().unwrap();
            let git = |args: &[&str]| crate::git::real_git::run(dir.path(), dir.path(), args);
            git(&["init", "-q"]);
            for name in ["a.txt", "deep/er/b.txt", "deep/er/c.txt"] {
                let path = dir.path().join(name);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, name).unwrap();
            }
            git(&["add", "."]);
            let oid = "1111111111111111111111111111111111111111";
            for link in ["deep/er/linked", "vendor/lib"] {
                git(&[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("160000,{oid},{link}"),
                ]);
            }
            git(&["update-index", "--index-version", version]);
            if version == "3" {
                // An extended flag (skip-worktree) forces the longer entry.
                git(&["update-index", "--skip-worktree", "a.txt"]);
            }
            let (links, all) = gitlinks(&dir.path().join(".git/index"));
            assert_eq!(links, ["deep/er/linked", "vendor/lib"], "version {version}");
            assert!(all);
        }
        assert!(parse(b"DIRC\0\0\0\x09", 20).is_none());
        // Overlong varints are refused, not overflowed.
        assert_eq!(varint(&[0xff; 16]), None);
        assert_eq!(varint(&[0x80, 0x00]), Some((128, 2)));
        assert!(parse(b"nope", 20).is_none());
    }

    /// A split index keeps gitlinks in its shared part; a SHA-256
    /// repository's ids are 32 bytes: both are read.
    #[test]
    fn split_and_sha256_indexes_hide_nothing() {
        if !crate::git::real_git::installed("split indexes") {
            return;
        }
        let oid = "1111111111111111111111111111111111111111";
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| crate::git::real_git::run(dir.path(), dir.path(), args);
        git(&["init", "-q"]);
        std::fs::write(dir.path().join("a"), "a").unwrap();
        git(&["add", "a"]);
        git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{oid},evil"),
        ]);
        git(&["update-index", "--split-index"]);
        let (links, all) = gitlinks(&dir.path().join(".git/index"));
        assert_eq!(links, ["evil"]);
        assert!(all);
        let sha256 = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| crate::git::real_git::run(sha256.path(), sha256.path(), args);
        git(&["init", "-q", "--object-format=sha256"]);
        std::fs::write(sha256.path().join("a"), "a").unwrap();
        git(&["add", "a"]);
        let oid = "1".repeat(64);
        git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{oid},vendor/x"),
        ]);
        let (links, _) = gitlinks(&sha256.path().join(".git/index"));
        assert_eq!(links, ["vendor/x"]);
    }

    /// What git reads, however the index is bent: a gitlink's mode with
    /// other permission bits, a few junk bytes before the checksum, an
    /// index that is a link (read as not all), one that does not parse.
    #[test]
    fn bent_indexes_hide_nothing() {
        if !crate::git::real_git::installed("bent indexes") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| crate::git::real_git::run(dir.path(), dir.path(), args);
        git(&["init", "-q"]);
        let oid = "1111111111111111111111111111111111111111";
        git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{oid},evil"),
        ]);
        let index = dir.path().join(".git/index");
        let mut bytes = std::fs::read(&index).unwrap();
        // The one entry's mode at 12 + 24: 0160755.
        bytes[12 + 24..12 + 28].copy_from_slice(&0o160755u32.to_be_bytes());
        let checksum_at = bytes.len() - 20;
        let mut bent = bytes[..checksum_at].to_vec();
        bent.extend_from_slice(&[0, 0, 0, 0]);
        bent.extend_from_slice(&bytes[checksum_at..]);
        std::fs::write(&index, &bent).unwrap();
        assert_eq!(gitlinks(&index), (vec!["evil".to_owned()], true));
        std::fs::rename(&index, dir.path().join(".git/idx2")).unwrap();
        std::os::unix::fs::symlink("idx2", &index).unwrap();
        assert!(!gitlinks(&index).1, "a linked index is not read as all");
        std::fs::remove_file(&index).unwrap();
        std::fs::write(&index, b"DIRC\0\0\0\x02garbage").unwrap();
        assert!(
            !gitlinks(&index).1,
            "an index that does not parse is not all"
        );
        std::fs::remove_file(&index).unwrap();
        assert_eq!(
            gitlinks(&index),
            (Vec::new(), true),
            "no index: nothing, all of it"
        );
    }
}
