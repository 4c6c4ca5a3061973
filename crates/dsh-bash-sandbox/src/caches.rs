//! The sandbox's own caches on disk: made once per executor under a root
//! of the server's user (default `~/.cache/dsh-bash/sandbox/<uid>/`,
//! 0700), per-user tools beside one directory per workspace
//! (`ws/<hash of its path>/`), swept at start: a workspace's directory
//! unused for [`CacheConfig::max_age`] goes, then, while the whole root
//! holds more than [`CacheConfig::max_bytes`], the least recently used
//! directory goes whole. Each walk is beneath descriptors and never
//! follows a link (a command writes inside these directories).
//!
//! With [`CachePlace::Nowhere`] there are none (tools meet the host's
//! caches, read-only). Where the root cannot be used (switched off, no home, not the user's
//! own, inside the writable workspace, a full disk) the caches live in the
//! command's private TMPDIR and end with it: tools work, nothing persists,
//! and the reason is logged once.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use dsh_sandbox::{HostDirs, SandboxCaches, Workspace};

/// Where confined commands' tool caches live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CachePlace {
    /// Under this root (the user's uid is a directory beneath it), kept
    /// from one command to the next.
    Under(PathBuf),
    /// In each command's private TMPDIR, gone with it.
    PerCommand,
    /// Nowhere: no variables, no binds; tools meet the host's own caches,
    /// read-only, and fail on them.
    Nowhere,
}

/// Where the sandbox's caches are kept and how much of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// Where (default: under [`CacheConfig::default_root`], else per
    /// command when there is no home).
    pub place: CachePlace,
    /// Past this many bytes in all, the least recently used directories
    /// are removed at start. Default 10 GiB.
    pub max_bytes: u64,
    /// A workspace's directory unused this long is removed at start.
    /// Default 30 days.
    pub max_age: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            place: Self::default_root().map_or(CachePlace::PerCommand, CachePlace::Under),
            max_bytes: 10 << 30,
            max_age: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

impl CacheConfig {
    /// `$XDG_CACHE_HOME/dsh-bash/sandbox`, else `~/.cache/dsh-bash/sandbox`.
    pub fn default_root() -> Option<PathBuf> {
        let host = HostDirs::from_env(|name| std::env::var_os(name));
        host.xdg_cache.map(|cache| cache.join("dsh-bash/sandbox"))
    }
}

/// The caches of one executor's workspace.
#[derive(Debug)]
pub(crate) struct Caches {
    config: CacheConfig,
    host: HostDirs,
    workspace: PathBuf,
    /// The persistent plan, made (and the root swept) once, or why not.
    prepared: OnceLock<Result<Arc<SandboxCaches>, String>>,
}

impl Caches {
    pub(crate) fn new(config: CacheConfig, workspace: &Workspace) -> Self {
        Caches {
            config,
            host: HostDirs::from_env(|name| std::env::var_os(name)),
            workspace: workspace.path().to_owned(),
            prepared: OnceLock::new(),
        }
    }

    /// The caches of a command whose private TMPDIR is `private_tmp`: the
    /// persistent ones, made on first use; else ephemeral ones in the
    /// TMPDIR. Blocking (the first call makes and sweeps the root).
    pub(crate) fn for_command(&self, private_tmp: &Path) -> io::Result<Arc<SandboxCaches>> {
        if self.config.place == CachePlace::Nowhere {
            return Ok(Arc::default());
        }
        match self.prepared() {
            Ok(plan) => Ok(Arc::clone(plan)),
            Err(_) => {
                let root = private_tmp.join(".dsh-bash-cache");
                let mut plan = SandboxCaches::plan(&root, &root, &self.host);
                plan.ephemeral = true;
                make_all(&plan)?;
                Ok(Arc::new(plan))
            }
        }
    }

    /// The persistent plan (made and swept on the first call; later ones
    /// wait for it), or why there is none.
    pub(crate) fn prepared(&self) -> &Result<Arc<SandboxCaches>, String> {
        self.prepared.get_or_init(|| {
            let prepared = self.prepare().map(Arc::new);
            if let Err(why) = &prepared {
                tracing::warn!(%why, "the sandbox's caches last one command each");
            }
            prepared
        })
    }

    fn prepare(&self) -> Result<SandboxCaches, String> {
        let base = match &self.config.place {
            CachePlace::Under(root) => root,
            CachePlace::PerCommand | CachePlace::Nowhere => {
                return Err(
                    "persistent caches are switched off (--sandbox-cache per-command)".into(),
                )
            }
        };
        let root = base.join(current_uid().to_string());
        // Judged before anything is made: nothing of the server's is
        // created where a command could rename it.
        if resolved_as_far_as_it_exists(&root).starts_with(&self.workspace) {
            return Err(format!(
                "the cache root {} lies inside the writable workspace {}; give --sandbox-cache a directory outside it",
                root.display(),
                self.workspace.display()
            ));
        }
        own_directory(&root).map_err(|err| format!("cannot use {}: {err}", root.display()))?;
        let real = std::fs::canonicalize(&root).map_err(|err| err.to_string())?;
        sweep(&real, &self.config);
        let workspace_root = real.join("ws").join(workspace_key(&self.workspace));
        let plan = SandboxCaches::plan(&real, &workspace_root, &self.host);
        make_all(&plan)
            .map_err(|err| format!("cannot make the caches in {}: {err}", real.display()))?;
        // Used now: the sweep of a later start goes by these times.
        for dir in plan
            .dirs
            .iter()
            .map(|d| d.path.as_path())
            .chain([workspace_root.as_path()])
        {
            if let Ok(file) = File::open(dir) {
                let _ = file.set_modified(SystemTime::now());
            }
        }
        Ok(plan)
    }
}

/// `path` canonical as far as it exists, the rest appended.
fn resolved_as_far_as_it_exists(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |path, name| path.join(name));
        }
        match (at.file_name(), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

fn current_uid() -> u32 {
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// Makes `path` (and its parents) as a directory of this user's only
/// (0700), refusing one that is a link or another user's.
fn own_directory(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return Err(io::Error::other("not a directory (a link?)"));
    }
    if meta.uid() != current_uid() {
        return Err(io::Error::other(format!(
            "it belongs to uid {}, not to this user",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

fn make_all(plan: &SandboxCaches) -> io::Result<()> {
    for dir in plan.directories() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    Ok(())
}

/// A workspace's directory name: 16 hex digits of FNV-1a over its
/// canonical path (stable across builds and processes).
fn workspace_key(workspace: &Path) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in workspace.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// One directory the sweep may remove: where it is, when it was last
/// used, how much it holds.
struct Entry {
    parent: Arc<File>,
    name: std::ffi::OsString,
    used: SystemTime,
    bytes: u64,
}

/// The entries of `dir`, each with its size (beneath descriptors).
fn entries(dir: &Path, skip: Option<&OsStr>) -> Vec<Entry> {
    let Ok(parent) = File::open(dir) else {
        return Vec::new();
    };
    let parent = Arc::new(parent);
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    listing
        .filter_map(Result::ok)
        .filter(|entry| Some(entry.file_name().as_os_str()) != skip)
        .filter_map(|entry| {
            let meta = entry.path().symlink_metadata().ok()?;
            meta.is_dir().then(|| Entry {
                bytes: dsh_bash_local::scratch::size_at(&*parent, &entry.file_name()),
                parent: Arc::clone(&parent),
                name: entry.file_name(),
                used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            })
        })
        .collect()
}

/// Removes workspaces' directories unused for `max_age`, then the least
/// recently used directories while the root holds more than `max_bytes`.
fn sweep(root: &Path, config: &CacheConfig) {
    let mut all = entries(&root.join("ws"), None);
    let now = SystemTime::now();
    all.retain(|entry| {
        let old = now
            .duration_since(entry.used)
            .is_ok_and(|age| age > config.max_age);
        if old {
            remove(entry, "unused too long");
        }
        !old
    });
    all.extend(entries(root, Some(OsStr::new("ws"))));
    let mut total: u64 = all.iter().map(|entry| entry.bytes).sum();
    all.sort_by_key(|entry| entry.used);
    for entry in all {
        if total <= config.max_bytes {
            break;
        }
        remove(&entry, "over the cap");
        total = total.saturating_sub(entry.bytes);
    }
}

fn remove(entry: &Entry, why: &str) {
    match dsh_bash_local::scratch::remove_tree_at(&*entry.parent, &entry.name) {
        Ok(_) => {
            tracing::info!(name = ?entry.name, bytes = entry.bytes, why, "a sandbox cache was swept")
        }
        Err(err) => tracing::warn!(name = ?entry.name, %err, "cannot sweep a sandbox cache"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(root: &Path) -> CacheConfig {
        CacheConfig {
            place: CachePlace::Under(root.to_owned()),
            ..CacheConfig::default()
        }
    }

    #[test]
    fn made_once_private_and_per_workspace() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(ws.path()).unwrap();
        let caches = Caches::new(config(&home.path().join("c")), &workspace);
        let plan = Arc::clone(caches.prepared().as_ref().unwrap());
        assert!(!plan.ephemeral);
        let root = std::fs::canonicalize(home.path().join("c"))
            .unwrap()
            .join(current_uid().to_string());
        let mode = std::fs::metadata(&root).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let npm = plan.dirs.iter().find(|d| d.tool == "npm").unwrap();
        assert_eq!(npm.path, root.join("npm"));
        let xdg = plan.dirs.iter().find(|d| d.tool == "XDG cache").unwrap();
        assert!(xdg.path.starts_with(root.join("ws")));
        assert!(plan.directories().all(Path::is_dir));
        // Another workspace: its own directory, the same user caches.
        let other = tempfile::tempdir().unwrap();
        let again = Caches::new(
            config(&home.path().join("c")),
            &Workspace::open(other.path()).unwrap(),
        );
        let second = again.prepared().as_ref().unwrap();
        assert_eq!(second.dirs[0].path, plan.dirs[0].path);
        assert_ne!(
            second
                .dirs
                .iter()
                .find(|d| d.tool == "XDG cache")
                .unwrap()
                .path,
            xdg.path
        );
    }

    #[test]
    fn a_root_inside_the_workspace_or_switched_off_is_ephemeral() {
        let ws = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(ws.path()).unwrap();
        let inside = Caches::new(config(&ws.path().join(".cache")), &workspace);
        let why = inside.prepared().as_ref().unwrap_err();
        assert!(why.contains("inside the writable workspace"), "{why}");
        assert!(!ws.path().join(".cache").exists(), "nothing made inside");
        let tmp = tempfile::tempdir().unwrap();
        let plan = inside.for_command(tmp.path()).unwrap();
        assert!(plan.ephemeral);
        assert!(plan
            .dirs
            .iter()
            .all(|d| d.path.starts_with(tmp.path()) && d.path.is_dir()));
        let off = Caches::new(
            CacheConfig {
                place: CachePlace::PerCommand,
                ..CacheConfig::default()
            },
            &workspace,
        );
        assert!(off
            .prepared()
            .as_ref()
            .unwrap_err()
            .contains("switched off"));
        // Nowhere: no caches at all, not even ephemeral ones.
        let nowhere = Caches::new(
            CacheConfig {
                place: CachePlace::Nowhere,
                ..CacheConfig::default()
            },
            &workspace,
        );
        assert!(nowhere.for_command(tmp.path()).unwrap().dirs.is_empty());
    }

    #[test]
    fn the_sweep_removes_the_old_and_the_least_recently_used_past_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (name, days, kib) in [
            ("ws/old", 40, 4),
            ("ws/new", 1, 64),
            ("npm", 10, 64),
            ("pip", 2, 64),
        ] {
            let path = root.join(name);
            std::fs::create_dir_all(path.join("sub")).unwrap();
            std::fs::write(path.join("sub/blob"), vec![7u8; kib * 1024]).unwrap();
            // A link out is never followed (nor counted, nor removed).
            std::os::unix::fs::symlink("/etc", path.join("etc")).unwrap();
            let when = SystemTime::now() - Duration::from_secs(days * 24 * 3600);
            File::open(&path).unwrap().set_modified(when).unwrap();
        }
        let cap = CacheConfig {
            place: CachePlace::PerCommand,
            max_bytes: 150 * 1024,
            max_age: Duration::from_secs(30 * 24 * 3600),
        };
        sweep(root, &cap);
        assert!(!root.join("ws/old").exists(), "unused too long");
        // 3 x 64 KiB (and their directories) is past 150 KiB: the least
        // recently used goes first, and one is enough.
        assert!(!root.join("npm").exists());
        assert!(root.join("pip/sub/blob").exists());
        assert!(root.join("ws/new/sub/blob").exists());
        assert!(Path::new("/etc/hostname").exists() || Path::new("/etc/passwd").exists());
    }
}
