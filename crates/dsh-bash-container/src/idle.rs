//! The lifeline between a server and its session's container. The server
//! holds an exclusive lock on a file of its own for the session's life;
//! the file is mounted read-only into the container, where the idle
//! process (its init's only child) waits for the lock to come free. A
//! server that ends any way at all — SIGKILL included — releases the lock
//! with its last descriptor, the idle process exits, and the engine
//! removes the container (`--rm`): no later server is needed to sweep it.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::FlockOperation;

/// Where the lifeline file is mounted inside the container.
pub const LIFELINE_IN_CONTAINER: &str = "/run/dsh-bash/lifeline";

/// How often the idle process tries the lock.
const EVERY: Duration = Duration::from_millis(250);

/// The server's end: the file, locked exclusively while this lives.
#[derive(Debug)]
pub struct Lifeline {
    path: PathBuf,
    _held: std::fs::File,
}

impl Lifeline {
    /// A new lifeline file in `dir`, locked.
    pub fn hold(dir: &Path) -> std::io::Result<Lifeline> {
        let file = tempfile::Builder::new()
            .prefix(crate::leftovers::LIFELINE_PREFIX)
            .tempfile_in(dir)?;
        rustix::fs::flock(
            file.as_file().as_fd(),
            FlockOperation::NonBlockingLockExclusive,
        )?;
        let (held, path) = file.keep().map_err(|err| err.error)?;
        Ok(Lifeline { path, _held: held })
    }

    /// The file, to mount into the container.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Waits while the server holds the lifeline mounted at
/// [`LIFELINE_IN_CONTAINER`]; returns when it is free (or cannot be read:
/// a container without its lifeline has no session to serve).
pub fn idle() {
    wait_free(Path::new(LIFELINE_IN_CONTAINER), EVERY);
}

fn wait_free(path: &Path, every: Duration) {
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    loop {
        match rustix::fs::flock(file.as_fd(), FlockOperation::NonBlockingLockShared) {
            Err(rustix::io::Errno::WOULDBLOCK) => std::thread::sleep(every),
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_process_waits_exactly_as_long_as_the_lifeline_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let lifeline = Lifeline::hold(dir.path()).unwrap();
        let path = lifeline.path().to_owned();
        let (done, ended) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            wait_free(&path, Duration::from_millis(1));
            done.send(()).unwrap();
        });
        // Held: the waiter is still waiting after many tries.
        assert!(ended.recv_timeout(Duration::from_millis(200)).is_err());
        drop(lifeline);
        ended.recv_timeout(Duration::from_secs(60)).unwrap();
        waiter.join().unwrap();
        // No lifeline at all: nothing to wait for.
        wait_free(&dir.path().join("none"), Duration::from_millis(1));
    }
}
