//! A command's private temporary directory: created 0700 with an
//! unpredictable name, removed once the command's tree is gone, even when
//! the command left directories it made unreadable (`chmod 000`).

use std::fs::{self, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The directory; removed by [`PrivateTmp::remove`] on the paths that know
/// the command is over, and otherwise when dropped (a cancelled call, a
/// task that never started), then on the blocking pool when a runtime is
/// there, so no runtime thread ever walks it.
#[derive(Debug)]
pub(crate) struct PrivateTmp {
    path: Option<PathBuf>,
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let remove = move || remove_logged(&path);
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(remove)),
                Err(_) => remove(),
            }
        }
    }
}

fn remove_logged(path: &Path) {
    if let Err(err) = remove_tree(path) {
        tracing::warn!(path = %path.display(), %err, "cannot remove a command's private TMPDIR");
    }
}

impl PrivateTmp {
    /// Creates `dsh-bash-tmp-XXXXXX` (0700, exclusive) in the host's temp
    /// dir.
    pub(crate) fn create() -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("dsh-bash-tmp-")
            .permissions(Permissions::from_mode(0o700))
            .tempdir()?;
        Ok(PrivateTmp {
            path: Some(dir.keep()),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        self.path.as_deref().unwrap_or(Path::new(""))
    }

    /// Removes the directory and everything in it (blocking).
    pub(crate) fn remove(mut self) {
        if let Some(path) = self.path.take() {
            remove_logged(&path);
        }
    }
}

/// Removes `root` and everything below it without following symlinks,
/// making each directory searchable and writable first; iterative, so a
/// hostile nesting depth cannot exhaust the stack.
pub(crate) fn remove_tree(root: &Path) -> io::Result<()> {
    let mut pending = vec![(root.to_owned(), false)];
    while let Some((dir, emptied)) = pending.pop() {
        if emptied {
            fs::remove_dir(&dir)?;
            continue;
        }
        fs::set_permissions(&dir, Permissions::from_mode(0o700))?;
        pending.push((dir.clone(), true));
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                pending.push((entry.path(), false));
            } else {
                fs::remove_file(entry.path())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_removed_even_when_made_unreadable() {
        let tmp = PrivateTmp::create().unwrap();
        let path = tmp.path().to_owned();
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
        let dropped = PrivateTmp::create().unwrap();
        let path = dropped.path().to_owned();
        fs::write(path.join("f"), "x").unwrap();
        drop(dropped);
        assert!(!path.exists());
    }
}
