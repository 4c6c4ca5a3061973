//! Where the policy files are, and reading one.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use crate::{Place, PolicyError};

/// The most a policy file may hold.
const MAX_BYTES: u64 = 1 << 20;

/// The files a policy is read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sources {
    /// The system's file, if one is looked for.
    pub system: Option<PathBuf>,
    /// The user's file (or `--config`'s), if there is a home.
    pub user: Option<PathBuf>,
    /// `user` was named with `--config`: it must exist.
    pub explicit: bool,
    /// The workspace whose `.dsh-bash/config.toml` is read.
    pub workspace: Option<PathBuf>,
    /// The sandbox mode the operator's flags set: a workspace's file
    /// tightens it as it tightens the files'.
    pub operator_mode: Option<dsh_sandbox::SandboxMode>,
    /// The network the operator's flags set.
    pub operator_network: Option<dsh_sandbox::NetworkPolicy>,
}

impl Sources {
    /// The documented places: `explicit` (`--config`) in place of the
    /// user's file, and the workspace's file in `workspace`.
    pub fn find(explicit: Option<&Path>, workspace: Option<&Path>) -> Sources {
        let system = match std::env::var_os("DSH_BASH_SYSTEM_CONFIG") {
            Some(path) if path.is_empty() => None,
            Some(path) => Some(PathBuf::from(path)),
            None => Some(PathBuf::from("/etc/dsh-bash/config.toml")),
        };
        let user = match explicit {
            Some(path) => Some(std::path::absolute(path).unwrap_or_else(|_| path.to_owned())),
            None => user_file(),
        };
        Sources {
            system,
            user,
            explicit: explicit.is_some(),
            workspace: workspace.map(|w| std::path::absolute(w).unwrap_or_else(|_| w.to_owned())),
            operator_mode: None,
            operator_network: None,
        }
    }

    /// Each file in the order it is applied.
    pub fn places(&self) -> Vec<(Place, PathBuf)> {
        let mut places = Vec::new();
        if let Some(system) = &self.system {
            places.push((Place::System, system.clone()));
        }
        if let Some(user) = &self.user {
            places.push((Place::User, user.clone()));
        }
        if let Some(workspace) = &self.workspace {
            places.push((Place::Workspace, workspace.join(".dsh-bash/config.toml")));
        }
        places
    }
}

/// `$XDG_CONFIG_HOME/dsh-bash/config.toml`, else
/// `$HOME/.config/dsh-bash/config.toml`.
fn user_file() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let config =
        absolute("XDG_CONFIG_HOME").or_else(|| absolute("HOME").map(|h| h.join(".config")))?;
    Some(config.join("dsh-bash/config.toml"))
}

/// The text of the file at `path`; none when there is none (but an
/// `explicit` one). A workspace's file is opened without following a
/// symbolic link on `.dsh-bash` or the file itself.
pub fn text(place: Place, path: &Path, explicit: bool) -> Result<Option<String>, PolicyError> {
    let opened = match place {
        Place::Workspace => open_in_workspace(path),
        Place::System | Place::User => std::fs::File::open(path).map(OwnedFd::from),
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if explicit && place == Place::User {
                return Err(PolicyError::Missing(path.to_owned()));
            }
            return Ok(None);
        }
        // A home that is not this user's (HOME left pointing at another
        // user's, e.g. after a change of user): not this user's policy.
        Err(err)
            if err.kind() == std::io::ErrorKind::PermissionDenied
                && place == Place::User
                && !explicit =>
        {
            return Err(PolicyError::NotOurs(path.to_owned()));
        }
        Err(cause) => {
            return Err(PolicyError::Read {
                path: path.to_owned(),
                cause,
            })
        }
    };
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|cause| PolicyError::Read {
            path: path.to_owned(),
            cause,
        })?;
    if text.len() as u64 > MAX_BYTES {
        return Err(PolicyError::Read {
            path: path.to_owned(),
            cause: std::io::Error::other(format!("larger than {MAX_BYTES} bytes")),
        });
    }
    Ok(Some(text))
}

/// Opens `<workspace>/.dsh-bash/config.toml`: the directory and the file
/// each without following a link.
fn open_in_workspace(path: &Path) -> std::io::Result<OwnedFd> {
    let no_link = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let (Some(file), Some(dir)) = (path.file_name(), path.parent()) else {
        return Err(std::io::ErrorKind::NotFound.into());
    };
    let (Some(name), Some(workspace)) = (dir.file_name(), dir.parent()) else {
        return Err(std::io::ErrorKind::NotFound.into());
    };
    // A workspace this user cannot enter holds no policy of theirs to read
    // (and the command's own start says what is wrong with it).
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root = rustix::fs::open(workspace, flags, Mode::empty()).map_err(|err| match err {
        rustix::io::Errno::ACCESS | rustix::io::Errno::NOTDIR => rustix::io::Errno::NOENT,
        other => other,
    })?;
    let dir = rustix::fs::openat(&root, name, no_link | OFlags::DIRECTORY, Mode::empty())?;
    // Not blocked by a FIFO put there: only a regular file is read.
    let fd = rustix::fs::openat(&dir, file, no_link | OFlags::NONBLOCK, Mode::empty())?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(fd)
}
