//! The background task registry and completion listeners.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use dsh_bash::{BashTask, BashTaskId, OwnerToken, TaskListener, TaskPublisher};

use crate::output::Stream;
use crate::supervise::Stop;

/// One background task as the executor keeps it.
pub(crate) struct TaskEntry {
    pub(crate) publisher: TaskPublisher,
    pub(crate) owner: Option<OwnerToken>,
    pub(crate) stdout: Arc<Stream>,
    pub(crate) stderr: Arc<Stream>,
    /// Whole-stream offsets of the next read (stdout, stderr).
    pub(crate) offsets: Mutex<(u64, u64)>,
    pub(crate) stop: Arc<Stop>,
}

impl TaskEntry {
    pub(crate) fn spill_paths(&self) -> Vec<PathBuf> {
        [&self.stdout, &self.stderr]
            .into_iter()
            .filter_map(|stream| stream.spill_path())
            .collect()
    }
}

/// Every retained task, in start order, and which have finished.
#[derive(Default)]
pub(crate) struct Registry {
    tasks: HashMap<BashTaskId, Arc<TaskEntry>>,
    order: VecDeque<BashTaskId>,
    finished: VecDeque<BashTaskId>,
}

impl Registry {
    pub(crate) fn insert(&mut self, id: BashTaskId, entry: Arc<TaskEntry>) {
        self.order.push_back(id.clone());
        self.tasks.insert(id, entry);
    }

    pub(crate) fn get(&self, id: &BashTaskId) -> Option<Arc<TaskEntry>> {
        self.tasks.get(id).cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<TaskEntry>> {
        self.order
            .iter()
            .filter_map(|id| self.tasks.get(id).cloned())
            .collect()
    }

    /// Records that `id` settled; returns the entries evicted to keep at
    /// most `keep` finished tasks.
    pub(crate) fn settled(&mut self, id: &BashTaskId, keep: usize) -> Vec<Arc<TaskEntry>> {
        self.finished.push_back(id.clone());
        let mut evicted = Vec::new();
        while self.finished.len() > keep {
            let Some(old) = self.finished.pop_front() else {
                break;
            };
            self.order.retain(|id| *id != old);
            evicted.extend(self.tasks.remove(&old));
        }
        evicted
    }

    pub(crate) fn clear(&mut self) {
        self.tasks.clear();
        self.order.clear();
        self.finished.clear();
    }
}

/// Completion listeners; closed for good at shutdown.
#[derive(Default)]
pub(crate) struct Listeners {
    next: u64,
    listeners: Vec<(u64, TaskListener)>,
    closed: bool,
}

impl Listeners {
    pub(crate) fn add(&mut self, listener: TaskListener) -> u64 {
        self.next += 1;
        self.listeners.push((self.next, listener));
        self.next
    }

    pub(crate) fn remove(&mut self, key: u64) {
        self.listeners.retain(|(k, _)| *k != key);
    }

    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.listeners.clear();
    }
}

/// Calls every listener once for `task`; a panicking listener is logged
/// and the others still run.
pub(crate) fn notify(listeners: &Mutex<Listeners>, task: &BashTask) {
    let current: Vec<TaskListener> = {
        let listeners = listeners.lock().unwrap_or_else(PoisonError::into_inner);
        if listeners.closed {
            return;
        }
        listeners
            .listeners
            .iter()
            .map(|(_, l)| Arc::clone(l))
            .collect()
    };
    for listener in current {
        if catch_unwind(AssertUnwindSafe(|| listener(task))).is_err() {
            tracing::error!(task = %task.id, "a task completion listener panicked");
        }
    }
}
