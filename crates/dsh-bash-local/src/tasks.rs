//! The background task registry.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_bash::{BashTaskId, OwnerToken, TaskPublisher};

use crate::output::Stream;
use crate::stop::Stop;

/// One background task as the executor keeps it.
pub(crate) struct TaskEntry {
    pub(crate) publisher: TaskPublisher,
    pub(crate) owner: Option<OwnerToken>,
    pub(crate) stdout: Arc<Stream>,
    pub(crate) stderr: Arc<Stream>,
    /// Where the next read without a position starts.
    pub(crate) read_to: Mutex<dsh_bash::OutputCursor>,
    pub(crate) stop: Arc<Stop>,
    /// Its terminal or open stdin while it runs, for a task that takes
    /// input.
    pub(crate) input: Option<Arc<crate::input::InputSlot>>,
}

impl TaskEntry {
    pub(crate) fn spill_paths(&self) -> Vec<PathBuf> {
        [&self.stdout, &self.stderr]
            .into_iter()
            .filter_map(|stream| stream.spill_path())
            .collect()
    }
}

/// Every retained task, in start order, and which have finished, per
/// owner: one owner's finished tasks never push out another's.
#[derive(Default)]
pub(crate) struct Registry {
    tasks: HashMap<BashTaskId, Arc<TaskEntry>>,
    order: VecDeque<BashTaskId>,
    finished: HashMap<Option<OwnerToken>, VecDeque<BashTaskId>>,
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
    /// most `keep` finished tasks of its owner (the unowned count as one
    /// owner), the oldest first.
    pub(crate) fn settled(&mut self, id: &BashTaskId, keep: usize) -> Vec<Arc<TaskEntry>> {
        let Some(owner) = self.tasks.get(id).map(|entry| entry.owner.clone()) else {
            return Vec::new();
        };
        let finished = self.finished.entry(owner.clone()).or_default();
        finished.push_back(id.clone());
        let mut gone = Vec::new();
        while finished.len() > keep {
            let Some(old) = finished.pop_front() else {
                break;
            };
            gone.push(old);
        }
        if finished.is_empty() {
            self.finished.remove(&owner);
        }
        let mut evicted = Vec::new();
        for old in gone {
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

