//! The sandbox's own caches on disk: made once per executor under a root
//! of the server's user (default `~/.cache/dsh-bash/sandbox/<uid>/`,
//! 0700), one directory per workspace (`ws/<hash of its path>/`, no cache
//! shared between workspaces: see `dsh_sandbox::SandboxCaches`), swept at
//! start beside the first commands, at most once an hour per user (a
//! locked stamp in the root says when; shutdown waits for a sweep begun,
//! so a one-shot run finishes it): another workspace's directory unused
//! for [`CacheConfig::max_age`] goes, then, while the whole root holds
//! more than [`CacheConfig::max_bytes`], the least recently used one goes
//! whole. Each walk is beneath descriptors and never follows a link (a
//! command writes inside these directories).
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
use rustix::fs::{Mode, OFlags};

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
    /// The persistent plan, made once, or why not.
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

    /// The persistent caches once they are made, without waiting or
    /// touching the file system: what nearly every command gets.
    pub(crate) fn ready(&self) -> Option<Arc<SandboxCaches>> {
        match self.prepared.get() {
            Some(Ok(plan)) => Some(Arc::clone(plan)),
            _ => None,
        }
    }

    /// The caches of a command whose private TMPDIR is `private_tmp`: the
    /// persistent ones, made on first use; else ephemeral ones in the
    /// TMPDIR. Blocking (the first call makes the root).
    pub(crate) fn for_command(&self, private_tmp: &Path) -> io::Result<Arc<SandboxCaches>> {
        if self.config.place == CachePlace::Nowhere {
            return Ok(Arc::default());
        }
        match self.prepared() {
            Ok(plan) => Ok(Arc::clone(plan)),
            Err(_) => {
                let root = private_tmp.join(".dsh-bash-cache");
                let mut plan = SandboxCaches::plan(&root, &self.host);
                plan.ephemeral = true;
                make_all(private_tmp, &plan)?;
                Ok(Arc::new(plan))
            }
        }
    }

    /// The persistent plan (made on the first call; later ones wait for
    /// it), or why there is none.
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
        let placed =
            dsh_protect::resolved_as_far_as_it_exists(&root).unwrap_or_else(|| root.clone());
        if placed.starts_with(&self.workspace) {
            return Err(format!(
                "the cache root {} lies inside the writable workspace {}; give --sandbox-cache a directory outside it",
                root.display(),
                self.workspace.display()
            ));
        }
        own_directory(&root).map_err(|err| format!("cannot use {}: {err}", root.display()))?;
        let real = std::fs::canonicalize(&root).map_err(|err| err.to_string())?;
        let plan = SandboxCaches::plan(
            &real.join(WORKSPACES).join(workspace_key(&self.workspace)),
            &self.host,
        );
        make_all(&real, &plan)
            .map_err(|err| format!("cannot make the caches in {}: {err}", real.display()))?;
        Ok(plan)
    }

    /// Marks this workspace's directory used now (the sweeps go by that
    /// time), then sweeps the root (this workspace's directory excepted)
    /// when its last sweep is an hour old or more. Run once, after
    /// [`Caches::prepared`], beside the first commands (none waits for
    /// it). Blocking.
    pub(crate) fn sweep_and_stamp(&self) {
        let Ok(plan) = self.prepared() else {
            return;
        };
        let Some(this) = plan.roots.first() else {
            return;
        };
        let Some(root) = this.parent().and_then(Path::parent) else {
            return;
        };
        if let Ok(file) = File::open(this) {
            let _ = file.set_modified(SystemTime::now());
        }
        // The root is walked once per interval, whatever number of
        // processes start: a one-shot `dsh-bash run` per command must not
        // walk every workspace's caches each time.
        if let Some(stamp) = SweepStamp::due(root, SWEEP_EVERY) {
            sweep(root, &self.config, this.file_name());
            stamp.swept();
        }
    }
}

/// How often a start sweeps the caches' root (per user).
const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// The file in the user's caches root whose modification time says when
/// the root was last swept.
const SWEPT: &str = ".dsh-bash-swept";

/// The right to sweep the root now: the stamp, locked (one sweep at a
/// time; a process that finds it locked leaves the sweep to its holder).
struct SweepStamp(File);

impl SweepStamp {
    /// The stamp of `root` when its last sweep is older than `every` (or
    /// never was, or lies in the future: a clock set back), locked for
    /// this process; none when a sweep is not due or runs elsewhere. A
    /// stamp that is not a regular file of this user is replaced.
    fn due(root: &Path, every: Duration) -> Option<SweepStamp> {
        let path = root.join(SWEPT);
        let file = match Self::open(&path) {
            Some(file) => file,
            None => {
                tracing::warn!(path = %path.display(), "the caches' sweep stamp is not a file of this user's: replaced");
                let _ = std::fs::remove_file(&path);
                Self::open(&path)?
            }
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
        let last = file.metadata().ok()?.modified().ok()?;
        let due = SystemTime::now()
            .duration_since(last)
            .map_or(true, |age| age >= every);
        due.then_some(SweepStamp(file))
    }

    /// The stamp at `path`, made when missing (dated long ago: due, for
    /// whichever process locks it first); none when it is not a regular
    /// file of this user's.
    fn open(path: &Path) -> Option<File> {
        // Read-only: dating it and locking it need only ownership.
        let open = |create: OFlags| {
            rustix::fs::open(
                path,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | create,
                Mode::from_raw_mode(0o600),
            )
            .map(File::from)
        };
        let file = match open(OFlags::CREATE | OFlags::EXCL) {
            Ok(made) => {
                let _ = made.set_modified(SystemTime::UNIX_EPOCH);
                made
            }
            Err(rustix::io::Errno::EXIST) => open(OFlags::empty()).ok()?,
            Err(_) => return None,
        };
        let meta = file.metadata().ok()?;
        (meta.is_file() && meta.uid() == current_uid()).then_some(file)
    }

    /// Marks the root swept now (the lock goes with the stamp).
    fn swept(self) {
        let _ = self.0.set_modified(SystemTime::now());
    }
}

/// The workspaces' directories, under the user's root (one each).
const WORKSPACES: &str = "ws";

/// Names the sweep renames a directory to before removing it.
const TRASH_PREFIX: &str = ".dsh-bash-trash-";

impl CacheConfig {
    /// Sweeps the caches' root of this user as a server does at start
    /// (nothing excepted): workspaces' directories unused for
    /// [`CacheConfig::max_age`], then the least recently used directories
    /// while the root holds more than [`CacheConfig::max_bytes`]. Nothing
    /// when the caches are not kept [`CachePlace::Under`] a root. Blocking.
    pub fn sweep_now(&self) {
        if let CachePlace::Under(base) = &self.place {
            if let Ok(root) = std::fs::canonicalize(base.join(current_uid().to_string())) {
                sweep(&root, self, None);
            }
        }
    }
}

fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
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

/// Makes every directory of `plan` beneath `root` (the user's, made by
/// [`own_directory`]), one component at a time from descriptors, never
/// through a link: a command may have replaced a tool's directory with a
/// link to anywhere its user can write. A directory that cannot be made
/// so is left out (that tool fails on it); the roots must be made.
fn make_all(root: &Path, plan: &SandboxCaches) -> io::Result<()> {
    let top = File::open(root)?;
    for dir in plan.directories() {
        let Ok(relative) = dir.strip_prefix(root) else {
            continue;
        };
        let made = make_beneath(&top, relative);
        if plan.roots.iter().any(|r| r == dir) {
            made?;
        } else if let Err(err) = made {
            tracing::warn!(dir = %dir.display(), %err, "a sandbox cache cannot be made");
        }
    }
    Ok(())
}

/// Makes `relative` beneath the directory `top` (0700), component by
/// component, refusing a link on the way.
fn make_beneath(top: &File, relative: &Path) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let mut dir: std::os::fd::OwnedFd = top.try_clone()?.into();
    for component in relative.components() {
        let name = component.as_os_str();
        match rustix::fs::mkdirat(&dir, name, Mode::RWXU) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(err) => return Err(err.into()),
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        dir = rustix::fs::openat(&dir, name, flags, Mode::empty())?;
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

/// The directories in `dir` (but `keep`), each with its size (beneath
/// descriptors); what an earlier sweep left in the trash is removed now.
fn entries(dir: &Path, keep: Option<&OsStr>) -> Vec<Entry> {
    let Ok(parent) = File::open(dir) else {
        return Vec::new();
    };
    let parent = Arc::new(parent);
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in listing.filter_map(Result::ok) {
        let name = entry.file_name();
        if Some(name.as_os_str()) == keep {
            continue;
        }
        if name.to_string_lossy().starts_with(TRASH_PREFIX) {
            let _ = dsh_bash_local::scratch::remove_tree_at(&*parent, &name);
            continue;
        }
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if meta.is_dir() {
            found.push(Entry {
                bytes: dsh_bash_local::scratch::size_at(&*parent, &name),
                parent: Arc::clone(&parent),
                name,
                used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
    }
    found
}

/// Removes workspaces' directories unused for `max_age`, then the least
/// recently used ones while the root holds more than `max_bytes`; never
/// the workspace directory `keep` (in use: it counts toward the cap).
fn sweep(root: &Path, config: &CacheConfig, keep: Option<&OsStr>) {
    let mut all = entries(&root.join(WORKSPACES), keep);
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
    // What this workspace holds counts toward the cap; it is never removed.
    let kept = match (keep, File::open(root.join(WORKSPACES))) {
        (Some(name), Ok(dir)) => dsh_bash_local::scratch::size_at(&dir, name),
        _ => 0,
    };
    let mut total: u64 = kept + all.iter().map(|entry| entry.bytes).sum::<u64>();
    all.sort_by_key(|entry| entry.used);
    for entry in all {
        if total <= config.max_bytes {
            break;
        }
        remove(&entry, "over the cap");
        total = total.saturating_sub(entry.bytes);
    }
}

/// Removes `entry`: renamed into the trash first (a command using it from
/// now on meets a missing directory, which tools make again, not one
/// half gone), then emptied beneath descriptors, never following a link.
fn remove(entry: &Entry, why: &str) {
    let trash = std::ffi::OsString::from(format!(
        "{TRASH_PREFIX}{}-{}",
        std::process::id(),
        entry.name.to_string_lossy()
    ));
    let renamed = rustix::fs::renameat(&*entry.parent, &entry.name, &*entry.parent, &trash);
    let name = if renamed.is_ok() { &trash } else { &entry.name };
    match dsh_bash_local::scratch::remove_tree_at(&*entry.parent, name) {
        Ok(_) => {
            tracing::info!(name = ?entry.name, bytes = entry.bytes, why, "a sandbox cache was swept");
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
        assert!(npm.path.starts_with(root.join("ws")));
        let xdg = plan.dirs.iter().find(|d| d.tool == "XDG cache").unwrap();
        assert!(xdg.path.starts_with(root.join("ws")));
        assert!(plan.directories().all(Path::is_dir));
        // Another workspace: caches of its own, none shared.
        let other = tempfile::tempdir().unwrap();
        let again = Caches::new(
            config(&home.path().join("c")),
            &Workspace::open(other.path()).unwrap(),
        );
        let second = again.prepared().as_ref().unwrap();
        assert_ne!(second.roots, plan.roots);
        assert!(second
            .dirs
            .iter()
            .all(|d| !plan.dirs.iter().any(|p| p.path == d.path)));
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
    fn a_start_sweeps_once_an_hour_and_one_process_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let hour = Duration::from_secs(3600);
        let first = SweepStamp::due(root, hour).expect("never swept: due");
        // Another process meanwhile: the holder sweeps, this one does not.
        assert!(SweepStamp::due(root, hour).is_none(), "locked: not due");
        first.swept();
        assert!(SweepStamp::due(root, hour).is_none(), "swept just now");
        let stamp = File::options().write(true).open(root.join(SWEPT)).unwrap();
        stamp
            .set_modified(SystemTime::now() - Duration::from_secs(3601))
            .unwrap();
        assert!(SweepStamp::due(root, hour).is_some(), "an hour old: due");
        // A clock set back leaves a stamp in the future: due.
        stamp
            .set_modified(SystemTime::now() + Duration::from_secs(86_400))
            .unwrap();
        assert!(SweepStamp::due(root, hour).is_some(), "in the future: due");
        drop(stamp);
        // A link in its place is never followed: it is replaced by a
        // stamp of this user's, due.
        std::fs::remove_file(root.join(SWEPT)).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join(SWEPT)).unwrap();
        assert!(SweepStamp::due(root, hour).is_some());
        assert!(!root.join("elsewhere").exists());
        assert!(std::fs::symlink_metadata(root.join(SWEPT))
            .unwrap()
            .is_file());
    }

    #[test]
    fn the_sweep_removes_the_old_and_the_least_recently_used_past_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (name, days, kib) in [
            ("ws/old", 40, 4),
            ("ws/new", 1, 64),
            ("ws/this", 90, 64),
            ("ws/mid", 10, 64),
            ("ws/recent", 2, 64),
        ] {
            let path = root.join(name);
            std::fs::create_dir_all(path.join("sub")).unwrap();
            std::fs::write(path.join("sub/blob"), vec![7u8; kib * 1024]).unwrap();
            // A link out is never followed (nor counted, nor removed).
            std::os::unix::fs::symlink("/etc", path.join("etc")).unwrap();
            let when = SystemTime::now() - Duration::from_secs(days * 24 * 3600);
            File::open(&path).unwrap().set_modified(when).unwrap();
        }
        // A directory swapped for a link: neither measured nor followed;
        // what a killed sweep left in the trash goes.
        std::os::unix::fs::symlink("/etc", root.join("ws/linked")).unwrap();
        std::fs::create_dir_all(root.join("ws/.dsh-bash-trash-1-x/y")).unwrap();
        let cap = CacheConfig {
            place: CachePlace::PerCommand,
            max_bytes: 220 * 1024,
            max_age: Duration::from_secs(30 * 24 * 3600),
        };
        sweep(root, &cap, Some(OsStr::new("this")));
        assert!(!root.join("ws/old").exists(), "unused too long");
        // This workspace's directory is older still, and stays.
        assert!(root.join("ws/this/sub/blob").exists());
        // 4 x 64 KiB (and their directories) is past 220 KiB: the least
        // recently used goes first, and one is enough.
        assert!(!root.join("ws/mid").exists());
        assert!(root.join("ws/recent/sub/blob").exists());
        assert!(root.join("ws/new/sub/blob").exists());
        assert!(!root.join("ws/.dsh-bash-trash-1-x").exists());
        assert!(std::fs::symlink_metadata(root.join("ws/linked")).is_ok());
        assert!(Path::new("/etc/passwd").exists());
    }

    #[test]
    fn nothing_is_made_through_a_link_a_command_left() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(ws.path()).unwrap();
        let base = home.path().join("c");
        let root = base
            .join(current_uid().to_string())
            .join("ws")
            .join(workspace_key(workspace.path()));
        std::fs::create_dir_all(&root).unwrap();
        // A command (writing inside its workspace's root) swapped yarn's
        // directory for a link to a directory of its user's.
        std::os::unix::fs::symlink(outside.path(), root.join("yarn")).unwrap();
        let caches = Caches::new(config(&base), &workspace);
        let plan = caches.prepared().as_ref().unwrap();
        assert!(plan.roots.iter().all(|r| r.is_dir()));
        assert!(
            std::fs::read_dir(outside.path()).unwrap().next().is_none(),
            "made something through the link"
        );
    }
}
