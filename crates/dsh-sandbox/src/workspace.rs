use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The workspace root, resolved once: its canonical path and an open handle
/// on the directory. Backends apply their rules through the handle, so a
/// later rename or symlink swap of the path cannot redirect them.
#[derive(Clone, Debug)]
pub struct Workspace {
    path: PathBuf,
    handle: Arc<File>,
}

/// A workspace root that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The path cannot be resolved or opened.
    #[error("workspace {}: {cause}", path.display())]
    Unreadable {
        /// The path asked for.
        path: PathBuf,
        /// What the OS said (shown in the message, not repeated as a source).
        cause: io::Error,
    },
    /// The path is not a directory.
    #[error("workspace {} is not a directory", path.display())]
    NotDirectory {
        /// The path asked for.
        path: PathBuf,
    },
    /// The path resolves to `/`: a writable workspace would be the whole
    /// filesystem.
    #[error("workspace {} resolves to /, which would make the whole filesystem writable under workspace-write; choose the project directory (--workspace DIR)", path.display())]
    FilesystemRoot {
        /// The path asked for.
        path: PathBuf,
    },
}

impl Workspace {
    /// Resolves `path` (symlinks included) and opens the directory.
    pub fn open(path: &Path) -> Result<Self, WorkspaceError> {
        let unreadable = |cause| WorkspaceError::Unreadable {
            path: path.to_owned(),
            cause,
        };
        let canonical = std::fs::canonicalize(path).map_err(unreadable)?;
        if canonical == Path::new("/") {
            return Err(WorkspaceError::FilesystemRoot {
                path: path.to_owned(),
            });
        }
        let handle = File::open(&canonical).map_err(unreadable)?;
        if !handle.metadata().map_err(unreadable)?.is_dir() {
            return Err(WorkspaceError::NotDirectory {
                path: path.to_owned(),
            });
        }
        Ok(Workspace {
            path: canonical,
            handle: Arc::new(handle),
        })
    }

    /// The canonical path, as resolved when it was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory opened at resolution.
    pub fn handle(&self) -> BorrowedFd<'_> {
        self.handle.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_symlinks_and_refuses_root_and_files() {
        let dir = std::env::temp_dir().join(format!("dsh-sandbox-ws-{}", std::process::id()));
        let real = dir.join("real");
        std::fs::create_dir_all(&real).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let workspace = Workspace::open(&link).unwrap();
        assert_eq!(workspace.path(), std::fs::canonicalize(&real).unwrap());

        let root = Workspace::open(Path::new("/tmp/..")).unwrap_err();
        assert!(
            matches!(root, WorkspaceError::FilesystemRoot { .. }),
            "{root}"
        );
        assert!(root.to_string().contains("--workspace DIR"));

        std::fs::write(dir.join("file"), "").unwrap();
        let file = Workspace::open(&dir.join("file")).unwrap_err();
        assert!(
            matches!(file, WorkspaceError::NotDirectory { .. }),
            "{file}"
        );
        let missing = Workspace::open(&dir.join("absent")).unwrap_err();
        assert!(missing.to_string().contains("No such file"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
