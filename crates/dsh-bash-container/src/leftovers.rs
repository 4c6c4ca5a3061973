//! What a server killed outright leaves in the temp dir: its lifeline file
//! (no longer locked) and its proxy door's private directory (a socket
//! nobody listens on). Removed at a later server's start, beneath a
//! descriptor of the temp dir, never following a link, only this user's
//! and only once they are older than a bound (a server that is making its
//! own right now is never raced).

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

/// The prefix of a session's lifeline file.
pub(crate) const LIFELINE_PREFIX: &str = "dsh-bash-lifeline-";

/// The prefix of a session's door directory.
pub(crate) const DOOR_PREFIX: &str = "dsh-bash-door-";

/// The socket's name inside a door directory.
pub(crate) const DOOR_NAME: &str = "door";

/// Removes the dead servers' lifelines and doors in `dir` older than
/// `settled`; how many.
pub fn sweep_leftovers(dir: &Path, settled: Duration) -> usize {
    let Ok(temp) = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let swept = if name.as_bytes().starts_with(LIFELINE_PREFIX.as_bytes()) {
            dead_lifeline(&temp, &name, settled)
                && rustix::fs::unlinkat(&temp, &name, AtFlags::empty()).is_ok()
        } else if name.as_bytes().starts_with(DOOR_PREFIX.as_bytes()) {
            dead_door(&temp, dir, &name, settled)
        } else {
            false
        };
        if swept {
            tracing::info!(name = ?name, "removed a dead server's leftover");
            removed += 1;
        }
    }
    removed
}

/// Whether `name` beneath `temp` is this user's (not a link, of `kind`)
/// and older than `settled`.
fn ours_and_settled(
    temp: &OwnedFd,
    name: &OsStr,
    kind: rustix::fs::FileType,
    settled: Duration,
) -> bool {
    let Ok(stat) = rustix::fs::statat(temp, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return false;
    };
    let modified =
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(stat.st_mtime).unwrap_or(0));
    rustix::fs::FileType::from_raw_mode(stat.st_mode) == kind
        && stat.st_uid == rustix::process::geteuid().as_raw()
        && SystemTime::now()
            .duration_since(modified)
            .is_ok_and(|age| age >= settled)
}

/// A lifeline file of this user's, settled, whose lock nobody holds.
fn dead_lifeline(temp: &OwnedFd, name: &OsStr, settled: Duration) -> bool {
    if !ours_and_settled(temp, name, rustix::fs::FileType::RegularFile, settled) {
        return false;
    }
    let Ok(file) = rustix::fs::openat(
        temp,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) else {
        return false;
    };
    rustix::fs::flock(file.as_fd(), FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// Removes `name`, a door directory of this user's, settled, whose socket
/// nobody listens on (the directory is 0700: nothing of another user's
/// lies inside); whether it went.
fn dead_door(temp: &OwnedFd, dir: &Path, name: &OsStr, settled: Duration) -> bool {
    if !ours_and_settled(temp, name, rustix::fs::FileType::Directory, settled) {
        return false;
    }
    let Ok(inside) = rustix::fs::openat(
        temp,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    if listening(&dir.join(name).join(DOOR_NAME)) {
        return false;
    }
    let _ = rustix::fs::unlinkat(&inside, DOOR_NAME, AtFlags::empty());
    rustix::fs::unlinkat(temp, name, AtFlags::REMOVEDIR).is_ok()
}

/// Whether something listens on the Unix socket at `path`, asked without
/// blocking: a full queue (a live door flooded) counts as listening, only
/// a refusal as nobody.
fn listening(path: &Path) -> bool {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let Ok(address) = SocketAddrUnix::new(path) else {
        return true;
    };
    let Ok(socket) = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    ) else {
        return true;
    };
    !matches!(
        rustix::net::connect(&socket, &address),
        Err(rustix::io::Errno::CONNREFUSED | rustix::io::Errno::NOENT)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(prefix: &str, rest: &str) -> std::ffi::OsString {
        std::ffi::OsString::from(format!("{prefix}{rest}"))
    }

    fn age(path: &Path) {
        let old = SystemTime::now() - Duration::from_secs(3600);
        let file = std::fs::File::open(path).unwrap();
        file.set_modified(old).unwrap();
    }

    #[test]
    fn only_dead_settled_leftovers_of_this_user_go() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // A live server's lifeline (held) and a dead one's (free), both old.
        let live = crate::Lifeline::hold(root).unwrap();
        age(live.path());
        let dead = root.join(named(LIFELINE_PREFIX, "dead"));
        std::fs::write(&dead, b"").unwrap();
        age(&dead);
        // A dead one's, but made a moment ago: left (its server may be
        // about to lock it).
        let fresh = root.join(named(LIFELINE_PREFIX, "fresh"));
        std::fs::write(&fresh, b"").unwrap();
        // A link with the prefix: never followed, never removed.
        let target = root.join("target");
        std::fs::write(&target, b"keep").unwrap();
        let link = root.join(named(LIFELINE_PREFIX, "link"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // A dead door (a socket nobody listens on) and a live one.
        let dead_door = root.join(named(DOOR_PREFIX, "dead"));
        std::fs::create_dir(&dead_door).unwrap();
        drop(std::os::unix::net::UnixListener::bind(dead_door.join(DOOR_NAME)).unwrap());
        age(&dead_door);
        let live_door = root.join(named(DOOR_PREFIX, "live"));
        std::fs::create_dir(&live_door).unwrap();
        let _listening = std::os::unix::net::UnixListener::bind(live_door.join(DOOR_NAME)).unwrap();
        age(&live_door);
        // A live door whose queue a command filled: never a blocking
        // connect, and it counts as live.
        let full_door = root.join(named(DOOR_PREFIX, "full"));
        std::fs::create_dir(&full_door).unwrap();
        let _full = std::os::unix::net::UnixListener::bind(full_door.join(DOOR_NAME)).unwrap();
        let address = rustix::net::SocketAddrUnix::new(full_door.join(DOOR_NAME)).unwrap();
        let mut queued = Vec::new();
        loop {
            let socket = rustix::net::socket_with(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::STREAM,
                rustix::net::SocketFlags::NONBLOCK,
                None,
            )
            .unwrap();
            match rustix::net::connect(&socket, &address) {
                Ok(()) => queued.push(socket),
                Err(rustix::io::Errno::AGAIN) => break,
                Err(err) => panic!("{err}"),
            }
            assert!(queued.len() < 100_000, "the queue never filled");
        }
        age(&full_door);
        assert_eq!(sweep_leftovers(root, Duration::from_secs(60)), 2);
        assert!(full_door.exists());
        assert!(live.path().exists() && fresh.exists() && live_door.exists());
        assert!(!dead.exists() && !dead_door.exists());
        assert!(std::fs::symlink_metadata(&link).is_ok());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}
