//! A command's private temporary directory: created 0700 with an
//! unpredictable name that records its owner
//! (`dsh-bash-tmp-<pid>.<start>-<random>`), removed once the command's tree
//! is gone, even when the command left directories it made unreadable
//! (`chmod 000`). The removal starts from a handle on the temp dir taken
//! when the directory was made and never follows a link
//! ([`dsh_bash_local::scratch`]); the directories of a server that was
//! killed outright are swept by the next server of the same user when it
//! starts.

use std::ffi::OsString;
use std::fs::{File, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Once;

use dsh_bash_local::scratch;
use dsh_bash_local::scratch::PRIVATE_TMP_PREFIX as PREFIX;

/// The directory; removed by [`PrivateTmp::remove`] on the paths that know
/// the command is over, and otherwise when dropped (a cancelled call, a
/// task that never started), then on the blocking pool when a runtime is
/// there, so no runtime thread ever walks it.
#[derive(Debug)]
pub(crate) struct PrivateTmp {
    path: PathBuf,
    /// The temp dir it was made in, and its name there; `None` once removed.
    place: Option<(File, OsString)>,
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            let path = std::mem::take(&mut self.path);
            let remove = move || remove_logged(&path, &place);
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(remove)),
                Err(_) => remove(),
            }
        }
    }
}

fn remove_logged(path: &Path, (parent, name): &(File, OsString)) {
    match scratch::remove_tree_at(parent, name) {
        Ok(removal) if removal.skipped == 0 => {}
        Ok(removal) => {
            tracing::warn!(path = %path.display(), skipped = removal.skipped, "a command's private TMPDIR was removed in part")
        }
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot remove a command's private TMPDIR")
        }
    }
}

/// The sweep of dead owners' private TMPDIRs from the temp dir, once per
/// executor (blocking; a second caller waits for the first): started at the
/// executor's start, and done at the latest before its first private
/// TMPDIR is made.
pub(crate) struct DeadSweep(Once);

impl Default for DeadSweep {
    fn default() -> Self {
        DeadSweep(Once::new())
    }
}

impl DeadSweep {
    /// Sweeps unless this sweep was done (or waits for the one under way).
    pub(crate) fn once(&self) {
        self.0
            .call_once(|| scratch::sweep_dead(&scratch::temp_dir(), PREFIX));
    }
}

impl PrivateTmp {
    /// Creates `dsh-bash-tmp-<owner>-<random>` (0700, exclusive) in the
    /// host's temp dir, dead owners' ones swept first ([`DeadSweep`]).
    pub(crate) fn create(swept: &DeadSweep) -> io::Result<Self> {
        let parent = scratch::temp_dir();
        swept.once();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{PREFIX}{}-", scratch::owner_tag()))
            .rand_bytes(scratch::RANDOM_LEN)
            .permissions(Permissions::from_mode(0o700))
            .tempdir_in(&parent)?;
        let path = dir.keep();
        let name = path
            .file_name()
            .map(ToOwned::to_owned)
            .ok_or_else(|| io::Error::other("a temp dir without a name"))?;
        let handle = File::open(path.parent().unwrap_or(&parent));
        let handle = match handle {
            Ok(handle) => handle,
            Err(err) => {
                let _ = std::fs::remove_dir(&path);
                return Err(err);
            }
        };
        Ok(PrivateTmp {
            path,
            place: Some((handle, name)),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory and everything in it (blocking).
    pub(crate) fn remove(mut self) {
        if let Some(place) = self.place.take() {
            remove_logged(&self.path, &place);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn private_owned_and_removed_even_when_made_unreadable() {
        let tmp = PrivateTmp::create(&DeadSweep::default()).unwrap();
        let path = tmp.path().to_owned();
        let name = path.file_name().unwrap().to_str().unwrap();
        let owner = scratch::owner_in(name, PREFIX).unwrap();
        assert_eq!(owner.pid, std::process::id());
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let deep = path.join("keep/sub");
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("f"), "payload").unwrap();
        // A symlink to a directory outside is removed, never followed.
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("precious"), "keep me").unwrap();
        std::os::unix::fs::symlink(outside.path(), path.join("keep/link")).unwrap();
        fs::set_permissions(&deep, Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(path.join("keep"), Permissions::from_mode(0o000)).unwrap();
        tmp.remove();
        assert!(!path.exists());
        assert!(outside.path().join("precious").exists());

        // Dropped without a runtime (a call abandoned early): removed too.
        let dropped = PrivateTmp::create(&DeadSweep::default()).unwrap();
        let path = dropped.path().to_owned();
        fs::write(path.join("f"), "x").unwrap();
        drop(dropped);
        assert!(!path.exists());
    }
}
