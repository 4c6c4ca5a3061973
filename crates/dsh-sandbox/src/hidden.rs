//! Credential files no confined command may read.
//!
//! The rule is [`HiddenPaths`]: the [`CREDENTIAL_FILES`] of every home a
//! command can see ([`homes`]: the server's `HOME`, `/root` and each
//! directory in `/home`), plus what an operator adds (`--hide`), minus
//! what an operator takes back (`--unhide`). [`HiddenPaths::resolve`]
//! turns it into the existing files and directories to hide for one
//! command, by canonical path, with every other path a bind mount shows
//! the same file at ([`mount_aliases`]): a link or a second mount of the
//! home leads to something hidden too.
//!
//! A backend hides each one (bubblewrap binds an empty file or directory
//! over it; Landlock grants reads around it). The server's own reads are
//! unaffected.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// Credential files and directories, relative to a home. A last
/// component ending in `*` names every entry starting with what comes
/// before it (public keys, `*.pub`, excepted).
pub const CREDENTIAL_FILES: &[&str] = &[
    ".ssh/id_*",
    ".aws/credentials",
    ".aws/sso/cache",
    ".aws/cli/cache",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh/hosts.yml",
    ".config/hub",
    ".docker/config.json",
    ".kube/config",
    ".config/gcloud/credentials.db",
    ".config/gcloud/access_tokens.db",
    ".config/gcloud/application_default_credentials.json",
    ".config/gcloud/legacy_credentials",
    ".azure/accessTokens.json",
    ".azure/msal_token_cache.json",
    ".azure/msal_token_cache.bin",
    ".azure/service_principal_entries.json",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gnupg/private-keys-v1.d",
    ".gnupg/S.*",
    ".terraform.d/credentials.tfrc.json",
];

/// Sockets (and the directories of each user's) through which a process
/// asks a service outside the sandbox to act for it: a container engine
/// runs a privileged container, systemd or D-Bus starts a unit, an agent
/// signs with the user's keys. A confined command reaching one would
/// leave the sandbox however the network is set, so they are hidden with
/// the credential files (the ones that exist), and an agent's sockets in
/// each home by [`CREDENTIAL_FILES`]' `.gnupg/S.*`.
pub const CONTROL_SOCKETS: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/podman",
    "/run/containerd",
    "/run/crio",
    "/run/dbus/system_bus_socket",
    "/var/run/dbus/system_bus_socket",
    "/run/systemd/private",
    "/run/snapd.socket",
    "/run/user",
];

/// Whether `path` is one of [`CONTROL_SOCKETS`], beneath one, or an
/// agent's socket in a home: what Landlock, which does not govern
/// connecting to a socket by its path, cannot hide.
pub fn is_control_socket(path: &Path) -> bool {
    CONTROL_SOCKETS
        .iter()
        .any(|socket| path.starts_with(socket))
        || (path.parent().is_some_and(|p| p.ends_with(".gnupg"))
            && path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("S.")))
}

/// Paths hidden for one command at most (the rest stay readable, and the
/// result says so through the gap).
pub const MAX_HIDDEN: usize = 512;

/// A `--hide` or `--unhide` argument that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HideError {
    /// Not an absolute path, or one with `..`.
    #[error("invalid path to hide \"{0}\": give an absolute path without .. (e.g. /home/me/.config/tokens)")]
    NotAbsolute(String),
    /// `--unhide` of a path that nothing hides.
    #[error("\"{given}\" is not hidden: --unhide takes a credential file of a home ({homes}), a directory holding some, or a path given to --hide; hidden in each home: {table}")]
    NotHidden {
        /// The path given.
        given: String,
        /// The homes looked at, comma-separated.
        homes: String,
        /// The table, comma-separated.
        table: String,
    },
}

/// What is hidden from confined commands: [`CREDENTIAL_FILES`] in every
/// home (by default), plus added paths, minus taken back ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HiddenPaths {
    credentials: bool,
    added: BTreeSet<PathBuf>,
    taken_back: BTreeSet<PathBuf>,
    /// The server's own secrets: never taken back.
    secrets: BTreeSet<PathBuf>,
}

impl Default for HiddenPaths {
    fn default() -> Self {
        HiddenPaths {
            credentials: true,
            added: BTreeSet::new(),
            taken_back: BTreeSet::new(),
            secrets: BTreeSet::new(),
        }
    }
}

/// One file or directory to hide, by canonical path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HiddenPath {
    /// Canonical and absolute.
    pub path: PathBuf,
    /// A directory (hidden by an empty directory), else a file.
    pub directory: bool,
}

fn absolute(spec: &str) -> Result<PathBuf, HideError> {
    let path = Path::new(spec);
    let clean = path.is_absolute()
        && path.components().all(|c| {
            matches!(
                c,
                Component::RootDir | Component::Normal(_) | Component::CurDir
            )
        });
    if !clean {
        return Err(HideError::NotAbsolute(spec.into()));
    }
    Ok(path.components().collect())
}

/// True if and only if `path` is `pattern` (a [`CREDENTIAL_FILES`] entry)
/// in `home`, a directory holding it, or something inside it.
fn relates(path: &Path, home: &Path, pattern: &str) -> bool {
    let Ok(rest) = path.strip_prefix(home) else {
        return home.starts_with(path);
    };
    let Some(prefix) = pattern.strip_suffix('*') else {
        let full = Path::new(pattern);
        return full.starts_with(rest) || rest.starts_with(full);
    };
    let (dir, start) = prefix.rsplit_once('/').unwrap_or(("", prefix));
    let named = rest.parent() == Some(Path::new(dir))
        && rest
            .file_name()
            .map(|n| n.to_string_lossy())
            .is_some_and(|n| n.starts_with(start) && !n.ends_with(".pub"));
    named || Path::new(dir).starts_with(rest)
}

impl HiddenPaths {
    /// Nothing hidden.
    pub fn none() -> Self {
        HiddenPaths {
            credentials: false,
            added: BTreeSet::new(),
            taken_back: BTreeSet::new(),
            secrets: BTreeSet::new(),
        }
    }

    /// Hides `spec` too (absolute; a directory hides all it holds).
    pub fn hide(&mut self, spec: &str) -> Result<(), HideError> {
        let path = absolute(spec)?;
        self.taken_back.remove(&path);
        self.added.insert(path);
        Ok(())
    }

    /// Hides `path` too, whatever is taken back (the server's own token
    /// files).
    pub fn hide_secret(&mut self, path: PathBuf) {
        self.secrets.insert(path);
    }

    /// Stops hiding `spec` and everything beneath it: a credential file of
    /// a home in `homes`, a directory holding some (`~/.ssh`), or a path
    /// given to [`HiddenPaths::hide`].
    pub fn unhide(&mut self, spec: &str, homes: &[PathBuf]) -> Result<(), HideError> {
        let path = absolute(spec)?;
        let added = self.added.iter().any(|a| a.starts_with(&path));
        let credential = self.credentials
            && homes.iter().any(|home| {
                CREDENTIAL_FILES
                    .iter()
                    .any(|pattern| relates(&path, home, pattern))
            });
        if !added && !credential {
            return Err(HideError::NotHidden {
                given: spec.into(),
                homes: homes
                    .iter()
                    .map(|h| h.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                table: CREDENTIAL_FILES.join(", "),
            });
        }
        self.added.retain(|a| !a.starts_with(&path));
        self.taken_back.insert(path);
        Ok(())
    }

    /// True if and only if nothing can be hidden.
    pub fn is_empty(&self) -> bool {
        !self.credentials && self.added.is_empty() && self.secrets.is_empty()
    }

    /// The files and directories to hide now in `homes` (see the module
    /// docs): existing ones only, canonical, each with its other paths
    /// through bind mounts, none beneath another, at most [`MAX_HIDDEN`].
    pub fn resolve(&self, homes: &[PathBuf]) -> Vec<HiddenPath> {
        self.resolve_with(homes, CONTROL_SOCKETS)
    }

    /// [`HiddenPaths::resolve`] with `sockets` for [`CONTROL_SOCKETS`].
    fn resolve_with(&self, homes: &[PathBuf], sockets: &[&str]) -> Vec<HiddenPath> {
        let mut found = BTreeSet::new();
        if self.credentials {
            for home in homes {
                for pattern in CREDENTIAL_FILES {
                    credentials_in(home, pattern, &mut found);
                }
            }
            found.extend(
                sockets
                    .iter()
                    .map(PathBuf::from)
                    .filter(|path| std::fs::symlink_metadata(path).is_ok()),
            );
        }
        found.extend(self.added.iter().cloned());
        let taken_back = |path: &Path| self.taken_back.iter().any(|t| path.starts_with(t));
        let mut canonical = BTreeSet::new();
        for path in found.into_iter().filter(|p| !taken_back(p)) {
            if let Ok(real) = std::fs::canonicalize(&path) {
                if !taken_back(&real) {
                    canonical.insert(real);
                }
            }
        }
        for secret in &self.secrets {
            canonical.extend(std::fs::canonicalize(secret));
        }
        let aliases = mount_aliases(&canonical);
        canonical.extend(aliases);
        let mut hidden: Vec<HiddenPath> = Vec::new();
        for path in canonical {
            if hidden.iter().any(|h| path.starts_with(&h.path)) || hidden.len() >= MAX_HIDDEN {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            hidden.push(HiddenPath {
                directory: meta.is_dir(),
                path,
            });
        }
        hidden
    }
}

/// Adds the paths `pattern` names in `home` that exist.
fn credentials_in(home: &Path, pattern: &str, found: &mut BTreeSet<PathBuf>) {
    let Some(prefix) = pattern.strip_suffix('*') else {
        let path = home.join(pattern);
        if std::fs::symlink_metadata(&path).is_ok() {
            found.insert(path);
        }
        return;
    };
    let (dir, start) = prefix.rsplit_once('/').unwrap_or(("", prefix));
    let Ok(entries) = std::fs::read_dir(home.join(dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(start) && !name.ends_with(".pub") {
            found.insert(entry.path());
        }
    }
}

/// The homes a command can see: the server's `HOME`, `/root` and every
/// directory in `/home`, canonical, each once.
pub fn homes() -> Vec<PathBuf> {
    let mut homes = Vec::new();
    let mut candidates: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute())
        .into_iter()
        .collect();
    candidates.push("/root".into());
    if let Ok(entries) = std::fs::read_dir("/home") {
        candidates.extend(entries.flatten().map(|entry| entry.path()));
    }
    for candidate in candidates {
        if let Ok(real) = std::fs::canonicalize(&candidate) {
            if real.is_dir() && real != Path::new("/") && !homes.contains(&real) {
                homes.push(real);
            }
        }
    }
    homes
}

/// One line of `/proc/self/mountinfo`: the device, the path inside its
/// file system the mount shows, and where.
#[derive(Debug)]
struct Mount {
    device: String,
    root: PathBuf,
    point: PathBuf,
}

/// A mountinfo field with its octal escapes (`\040`) undone.
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

fn mounts(table: &str) -> Vec<Mount> {
    table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let device = fields.nth(2)?.to_owned();
            let root = unescape(fields.next()?);
            let point = unescape(fields.next()?);
            Some(Mount {
                device,
                root,
                point,
            })
        })
        .collect()
}

/// The mount `path` is on: the last one whose mount point is the longest
/// prefix of it (a later mount over the same point hides the earlier).
fn mount_of<'m>(all: &'m [Mount], path: &Path) -> Option<&'m Mount> {
    let mut best: Option<&Mount> = None;
    for mount in all.iter().filter(|m| path.starts_with(&m.point)) {
        if best.is_none_or(|b| mount.point.components().count() >= b.point.components().count()) {
            best = Some(mount);
        }
    }
    best
}

/// The other paths the mount table shows `paths` at: a bind mount of a
/// home (or of any directory above a hidden file) elsewhere. Only paths
/// that exist and are not covered by a later mount.
pub fn mount_aliases(paths: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    aliases_in(&mounts(&table), paths)
        .into_iter()
        .filter(|alias| std::fs::symlink_metadata(alias).is_ok())
        .collect()
}

fn aliases_in(all: &[Mount], paths: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let mut aliases = Vec::new();
    for path in paths {
        let Some(home) = mount_of(all, path) else {
            continue;
        };
        let Ok(rest) = path.strip_prefix(&home.point) else {
            continue;
        };
        let inside = home.root.join(rest);
        for other in all.iter().filter(|m| m.device == home.device) {
            let Ok(rest) = inside.strip_prefix(&other.root) else {
                continue;
            };
            let alias = if rest.as_os_str().is_empty() {
                other.point.clone()
            } else {
                other.point.join(rest)
            };
            let shown_there = mount_of(all, &alias).is_some_and(|m| std::ptr::eq(m, other));
            if &alias != path && shown_there && !aliases.contains(&alias) {
                aliases.push(alias);
            }
        }
    }
    aliases
}

#[cfg(test)]
mod tests {

    #[test]
    fn control_sockets_are_told_apart() {
        assert!(is_control_socket(Path::new("/run/docker.sock")));
        assert!(is_control_socket(Path::new("/run/user/1000/bus")));
        assert!(is_control_socket(Path::new(
            "/home/me/.gnupg/S.gpg-agent.ssh"
        )));
        assert!(!is_control_socket(Path::new("/home/me/.gnupg/pubring.kbx")));
        assert!(!is_control_socket(Path::new("/run/lock")));
        assert!(!is_control_socket(Path::new("/home/me/.npmrc")));
    }

    use super::*;

    #[test]
    fn the_credentials_of_a_home_are_found_and_public_keys_are_not() {
        let home = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(home.path()).unwrap();
        for file in [
            ".ssh/id_ed25519",
            ".ssh/id_ed25519.pub",
            ".ssh/known_hosts",
            ".aws/credentials",
            ".netrc",
            ".config/gh/hosts.yml",
        ] {
            let path = home.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        std::fs::create_dir_all(home.join(".gnupg/private-keys-v1.d")).unwrap();
        let hidden = HiddenPaths::default().resolve_with(std::slice::from_ref(&home), &[]);
        let names: Vec<_> = hidden
            .iter()
            .map(|h| h.path.strip_prefix(&home).unwrap().to_owned())
            .collect();
        let expected: Vec<PathBuf> = [
            ".aws/credentials",
            ".config/gh/hosts.yml",
            ".gnupg/private-keys-v1.d",
            ".netrc",
            ".ssh/id_ed25519",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(names, expected);
        assert!(hidden
            .iter()
            .any(|h| h.directory && h.path.ends_with("private-keys-v1.d")));

        let mut some_back = HiddenPaths::default();
        let homes = [home.clone()];
        some_back
            .unhide(home.join(".ssh").to_str().unwrap(), &homes)
            .unwrap();
        some_back
            .hide(home.join(".config").to_str().unwrap())
            .unwrap();
        let hidden = some_back.resolve_with(&homes, &[]);
        assert!(hidden
            .iter()
            .all(|h| !h.path.starts_with(home.join(".ssh"))));
        assert!(
            hidden
                .iter()
                .any(|h| h.path == home.join(".config") && h.directory),
            "{hidden:?}"
        );
        assert!(
            !hidden
                .iter()
                .any(|h| h.path == home.join(".config/gh/hosts.yml")),
            "nothing beneath another"
        );
    }

    #[test]
    fn a_link_to_a_credential_hides_its_target() {
        let home = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(home.path()).unwrap();
        std::fs::create_dir(home.join("vault")).unwrap();
        std::fs::write(home.join("vault/netrc"), "x").unwrap();
        std::os::unix::fs::symlink("vault/netrc", home.join(".netrc")).unwrap();
        let hidden = HiddenPaths::default().resolve_with(std::slice::from_ref(&home), &[]);
        assert_eq!(
            hidden,
            [HiddenPath {
                path: home.join("vault/netrc"),
                directory: false
            }]
        );
    }

    #[test]
    fn bad_arguments_are_refused_with_what_is_allowed() {
        let mut paths = HiddenPaths::default();
        assert!(matches!(
            paths.hide("relative/x"),
            Err(HideError::NotAbsolute(_))
        ));
        assert!(matches!(
            paths.hide("/a/../b"),
            Err(HideError::NotAbsolute(_))
        ));
        let homes = [PathBuf::from("/home/me")];
        let err = paths.unhide("/etc/passwd", &homes).unwrap_err();
        assert!(err.to_string().contains(".ssh/id_*"), "{err}");
        paths.unhide("/home/me/.ssh/id_rsa", &homes).unwrap();
        paths.unhide("/home/me/.config", &homes).unwrap();
        paths.unhide("/home/me/.netrc", &homes).unwrap();
        assert!(paths.unhide("/home/me/.ssh/id_rsa.pub", &homes).is_err());
        paths.hide("/srv/token").unwrap();
        paths.unhide("/srv/token", &homes).unwrap();
    }

    #[test]
    fn a_second_mount_of_a_home_is_an_alias() {
        let table = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
30 22 8:1 /home/me /mnt/me\\040home rw - ext4 /dev/sda1 rw
31 22 8:2 / /data rw - ext4 /dev/sdb1 rw
32 22 8:1 /home /data/h rw - ext4 /dev/sda1 rw
";
        let all = mounts(table);
        let paths = BTreeSet::from([PathBuf::from("/home/me/.netrc")]);
        let aliases = aliases_in(&all, &paths);
        assert_eq!(
            aliases,
            [
                PathBuf::from("/mnt/me home/.netrc"),
                PathBuf::from("/data/h/me/.netrc")
            ]
        );
    }
}
