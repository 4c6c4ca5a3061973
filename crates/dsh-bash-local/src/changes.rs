//! What changed in the workspace while a command ran.
//!
//! One inotify watch per directory of the workspace, set up once when the
//! executor starts and kept: a command's cost is two reads of the event
//! queue (a mark when it starts, the changes since when it ends), whatever
//! the workspace's size. Nothing runs to find the changes — no `git`, no
//! program a command could have planted — and the walk that sets up the
//! watches opens each directory relative to its parent without following
//! a link. A thread of the watch's own reads the queue while commands run,
//! so a long `npm install` does not overflow it.
//!
//! Directories whose contents are tools' own (`.git`, `node_modules`,
//! `target`…) are not followed file by file: a change in one reads as that
//! directory (`node_modules/`), and `.git` not at all.

mod fate;
mod tree;

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use dsh_bash::WorkspaceChanges;
use rustix::fs::inotify;

use crate::config::ChangeTracking;
use fate::Change;
use tree::Tree;

/// The most changes kept in the log between a command's start and end;
/// past it the oldest go and the results that needed them say so.
const MAX_LOGGED: usize = 100_000;

/// The most bytes of paths kept in the log.
const MAX_LOGGED_BYTES: usize = 8 << 20;

/// How often the reading thread looks whether its watch is gone.
const LOOK: Duration = Duration::from_secs(1);

/// Events read under one hold of the watch's lock at most.
const MAX_EVENTS_PER_READ: usize = 16 * 1024;

/// How long a watch given up waits before it is built again.
const COOL_DOWN: Duration = Duration::from_secs(10);

/// The workspace's watch: shared by every command of one executor.
#[derive(Debug)]
pub(crate) struct ChangeWatch {
    state: Arc<Mutex<State>>,
    fd: Arc<OwnedFd>,
    workspace: PathBuf,
}

/// A command's place in the log.
#[derive(Debug)]
pub(crate) struct Mark {
    seq: u64,
    /// Commands begun before this one (to count those beside it).
    begun: u64,
    /// Commands running when this one began.
    running: u64,
    /// Times the watch was given up before it began.
    breaks: u64,
}

#[derive(Debug)]
struct State {
    tree: Tree,
    log: VecDeque<(u64, Change)>,
    next_seq: u64,
    /// Changes before this sequence number are gone from the log, with
    /// why.
    lost: Option<(u64, String)>,
    /// How often the watch was given up (see [`State::give_up`]).
    breaks: u64,
    /// Since when, and why, the watch is given up (until it is built
    /// again).
    broken: Option<(std::time::Instant, String)>,
    /// Bytes of paths in the log.
    logged_bytes: usize,
    /// Open marks, by sequence number: the log keeps what they need.
    marks: BTreeMap<u64, usize>,
    begun: u64,
    running: u64,
    /// The workspace and its directory limit, to build the watch again.
    root: PathBuf,
    max_dirs: usize,
}

impl ChangeWatch {
    /// Watches `tracking.root`; `Err` says why it cannot (too many
    /// directories, no inotify).
    pub(crate) fn start(tracking: &ChangeTracking) -> Result<ChangeWatch, String> {
        let workspace = std::fs::canonicalize(&tracking.root)
            .map_err(|err| format!("{}: {err}", tracking.root.display()))?;
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .map_err(|err| format!("inotify: {err}"))?;
        let mut tree = Tree::new(tracking.max_dirs);
        tree.watch_root(&fd, &workspace)?;
        let state = Arc::new(Mutex::new(State {
            tree,
            log: VecDeque::new(),
            next_seq: 0,
            lost: None,
            breaks: 0,
            broken: None,
            logged_bytes: 0,
            marks: BTreeMap::new(),
            begun: 0,
            running: 0,
            root: workspace.clone(),
            max_dirs: tracking.max_dirs,
        }));
        let fd = Arc::new(fd);
        let (weak, reader) = (Arc::downgrade(&state), Arc::clone(&fd));
        std::thread::Builder::new()
            .name("dsh-changes".into())
            .spawn(move || read_while_watched(&weak, &reader))
            .map_err(|err| format!("cannot start its thread: {err}"))?;
        Ok(ChangeWatch {
            state,
            fd,
            workspace,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A command starts: what changed before is not its.
    pub(crate) fn begin(&self) -> Mark {
        let mut state = self.lock();
        state.drain(&self.fd);
        state.rebuild_when_cooled(&self.fd);
        let seq = state.next_seq;
        *state.marks.entry(seq).or_default() += 1;
        let mark = Mark {
            seq,
            begun: state.begun,
            running: state.running,
            breaks: state.breaks,
        };
        state.begun += 1;
        state.running += 1;
        mark
    }

    /// The command ended (its whole tree is gone): what changed since its
    /// mark.
    pub(crate) fn end(&self, mark: Mark) -> WorkspaceChanges {
        let mut state = self.lock();
        state.drain(&self.fd);
        let changes = state.log.iter().filter(|(seq, _)| *seq >= mark.seq);
        let mut facts = fate::judge(changes.map(|(_, change)| change));
        facts.workspace.clone_from(&self.workspace);
        facts.beside = mark.running + (state.begun - mark.begun - 1);
        if let Some((before, why)) = &state.lost {
            if *before > mark.seq {
                facts.incomplete = Some(why.clone());
            }
        }
        if let Some((_, why)) = &state.broken {
            facts.incomplete = Some(format!("changes are not followed right now: {why}"));
        } else if state.breaks > mark.breaks {
            facts.incomplete = Some("the watch was rebuilt while it ran".to_owned());
        }
        if let Some(why) = state.tree.untracked() {
            facts.incomplete.get_or_insert_with(|| why.to_owned());
        }
        state.running -= 1;
        state.release(mark.seq);
        facts
    }
}

impl State {
    /// Reads every queued event into the log.
    fn drain(&mut self, fd: &OwnedFd) {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
        let mut reader = inotify::Reader::new(fd, &mut buf);
        let mut changes = Vec::new();
        let mut lost: Option<String> = None;
        self.tree.tick();
        // At most this many events under one hold of the lock: a command
        // that makes events faster than they are read cannot keep the
        // others waiting; past it the watch is given up.
        let mut left = MAX_EVENTS_PER_READ;
        loop {
            if left == 0 {
                lost = Some("more changes came at once than the watch follows".to_owned());
                break;
            }
            left -= 1;
            match reader.next() {
                Ok(event) => {
                    use inotify::ReadFlags as F;
                    let flags = event.events();
                    if flags.contains(F::QUEUE_OVERFLOW) {
                        lost = Some("more changes came at once than the kernel queues (fs.inotify.max_queued_events)".to_owned());
                    } else if self.broken.is_none() && lost.is_none() {
                        // The workspace itself moved or went: nothing
                        // below it is where the watch thinks.
                        if flags.intersects(F::MOVE_SELF | F::DELETE_SELF) && self.tree.is_root(event.wd()) {
                            lost = Some("the workspace directory was moved or removed".to_owned());
                        }
                        self.tree.apply(fd, &event, &mut changes);
                        if self.tree.over_budget() {
                            lost = Some("a command made the watch follow more directory changes than it bounds (a rename storm)".to_owned());
                        } else if let Some(why) = self.tree.untracked() {
                            lost = Some(why.to_owned());
                        }
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
        // Within one read, the same change again (a file written block by
        // block, two files written in turn) is one change.
        let mut seen: std::collections::HashSet<Change> = std::collections::HashSet::new();
        for change in changes {
            if change.what == fate::What::Altered && !seen.insert(change.clone()) {
                continue;
            }
            self.logged_bytes += change.path.len();
            self.log.push_back((self.next_seq, change));
            self.next_seq += 1;
        }
        if let Some(why) = lost {
            if self.broken.is_none() {
                self.give_up(fd, &why);
            }
        }
        self.trim();
    }

    /// Stops following the workspace (every watch removed, at once) until
    /// [`State::rebuild_when_cooled`] builds it again: what it would list
    /// is no longer known to be right.
    fn give_up(&mut self, fd: &OwnedFd, why: &str) {
        self.tree.clear(fd);
        self.tree = Tree::new(self.max_dirs);
        self.breaks += 1;
        self.broken = Some((std::time::Instant::now(), why.to_owned()));
        tracing::warn!(workspace = %self.root.display(), "stopped following the workspace's changes for now: {why}");
    }

    /// Builds the watch again once it has been given up for
    /// [`COOL_DOWN`] (a command's storm does not cost every command).
    fn rebuild_when_cooled(&mut self, fd: &OwnedFd) {
        let Some((since, _)) = &self.broken else {
            return;
        };
        if since.elapsed() < COOL_DOWN {
            return;
        }
        let mut tree = Tree::new(self.max_dirs);
        match tree.watch_root(fd, &self.root) {
            Ok(()) => {
                self.tree = tree;
                self.broken = None;
            }
            Err(why) => self.broken = Some((std::time::Instant::now(), why)),
        }
    }

    /// Keeps what open marks need, at most [`MAX_LOGGED`] changes and
    /// [`MAX_LOGGED_BYTES`] of paths.
    fn trim(&mut self) {
        let needed = self.marks.keys().next().copied().unwrap_or(self.next_seq);
        while let Some((seq, change)) = self.log.front() {
            let fits = self.log.len() <= MAX_LOGGED && self.logged_bytes <= MAX_LOGGED_BYTES;
            if *seq >= needed && fits {
                break;
            }
            let dropped = *seq;
            self.logged_bytes -= change.path.len();
            self.log.pop_front();
            if dropped >= needed {
                self.lost = Some((
                    dropped + 1,
                    format!(
                        "more changes while it ran than the server keeps ({MAX_LOGGED}, or {} MiB of paths)",
                        MAX_LOGGED_BYTES >> 20
                    ),
                ));
            }
        }
    }

    fn release(&mut self, seq: u64) {
        if let Some(count) = self.marks.get_mut(&seq) {
            *count -= 1;
            if *count == 0 {
                self.marks.remove(&seq);
            }
        }
        self.trim();
    }
}

/// The watch's thread: reads the queue whenever it has events, until the
/// watch is dropped.
fn read_while_watched(state: &Weak<Mutex<State>>, fd: &OwnedFd) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let look = Timespec {
        tv_sec: LOOK.as_secs().try_into().unwrap_or(1),
        tv_nsec: 0,
    };
    loop {
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        let ready = poll(&mut fds, Some(&look));
        let Some(state) = state.upgrade() else {
            return;
        };
        if matches!(ready, Ok(n) if n > 0) {
            state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(fd);
        }
    }
}
