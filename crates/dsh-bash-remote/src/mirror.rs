//! A background task as seen from here: its published state, the output
//! pulled from the server and not read yet, and the poller that pulls it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dsh_bash::wire::{ReadFacts, Reply};
use dsh_bash::{
    task_channel, BashError, BashTask, BashTaskId, BashTaskRead, OwnerToken, TaskPublisher,
    TaskState, TaskStatus,
};

use crate::{Inner, RemoteConfig};

/// Pulled output not read yet.
#[derive(Default)]
struct Unread {
    stdout: String,
    stderr: String,
    lossy: bool,
    stdout_spill_path: Option<PathBuf>,
    stderr_spill_path: Option<PathBuf>,
}

/// Keeps the last `cap` bytes of `text` (on a character boundary); true if
/// anything was dropped.
fn keep_tail(text: &mut String, cap: usize) -> bool {
    if text.len() <= cap {
        return false;
    }
    let mut cut = text.len() - cap;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text.drain(..cut);
    true
}

pub(crate) struct Mirror {
    pub(crate) id: BashTaskId,
    pub(crate) owner: Option<OwnerToken>,
    publisher: TaskPublisher,
    unread: Mutex<Unread>,
    cap: usize,
    /// One pull at a time, so output is appended in the server's order.
    pulling: tokio::sync::Mutex<()>,
    /// A kill is under way.
    pub(crate) killing: AtomicBool,
    /// Reserved by an adopt whose first pull has not answered yet.
    pub(crate) adopting: AtomicBool,
    /// Set by the one settle that publishes.
    settled: AtomicBool,
}

impl Mirror {
    pub(crate) fn new(
        id: BashTaskId,
        owner: Option<OwnerToken>,
        config: &RemoteConfig,
    ) -> (Mirror, BashTask) {
        let (publisher, task) = task_channel(id.clone());
        let mirror = Mirror {
            id,
            owner,
            publisher,
            unread: Mutex::default(),
            cap: config.max_buffered_bytes,
            pulling: tokio::sync::Mutex::new(()),
            killing: AtomicBool::new(false),
            adopting: AtomicBool::new(false),
            settled: AtomicBool::new(false),
        };
        (mirror, task)
    }

    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    pub(crate) fn snapshot(&self) -> BashTask {
        self.publisher.snapshot()
    }

    /// The output pulled since the previous read. The snapshot is taken
    /// first: a settled one means every byte is in.
    pub(crate) fn read(&self) -> BashTaskRead {
        let task = self.publisher.snapshot();
        let mut unread = self.unread.lock().unwrap_or_else(PoisonError::into_inner);
        let stdout = std::mem::take(&mut unread.stdout);
        let stderr = std::mem::take(&mut unread.stderr);
        let lossy = std::mem::take(&mut unread.lossy);
        BashTaskRead {
            task,
            delta: dsh_bash::join_streams(&stdout, &stderr),
            stdout,
            stderr,
            lossy,
            stdout_spill_path: unread.stdout_spill_path.clone(),
            stderr_spill_path: unread.stderr_spill_path.clone(),
        }
    }

    /// Adds one pull's output; true if there was any.
    fn append(&self, facts: &ReadFacts) -> bool {
        let mut unread = self.unread.lock().unwrap_or_else(PoisonError::into_inner);
        unread.stdout.push_str(&facts.stdout);
        unread.stderr.push_str(&facts.stderr);
        let dropped_out = keep_tail(&mut unread.stdout, self.cap);
        let dropped_err = keep_tail(&mut unread.stderr, self.cap);
        unread.lossy |= facts.lossy || dropped_out || dropped_err;
        if facts.stdout_spill_path.is_some() {
            unread
                .stdout_spill_path
                .clone_from(&facts.stdout_spill_path);
        }
        if facts.stderr_spill_path.is_some() {
            unread
                .stderr_spill_path
                .clone_from(&facts.stderr_spill_path);
        }
        !(facts.stdout.is_empty() && facts.stderr.is_empty())
    }

    /// Publishes a settled state once, whoever else tries; true if this
    /// call did.
    pub(crate) fn settle(&self, state: TaskState) -> bool {
        if !state.is_settled() || self.settled.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.publisher.publish(state);
        true
    }

    /// Some output may be gone: a pull's answer never arrived, and the
    /// server hands out each byte once.
    fn mark_lossy(&self) {
        self.unread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .lossy = true;
    }

    /// Settles the task on this side alone (shutdown, a lost connection),
    /// with why on its stderr; true if this call settled it.
    pub(crate) fn settle_here(&self, status: TaskStatus, note: &str) -> bool {
        if self.settled.swap(true, Ordering::AcqRel) {
            return false;
        }
        {
            let mut unread = self.unread.lock().unwrap_or_else(PoisonError::into_inner);
            if !unread.stderr.is_empty() && !unread.stderr.ends_with('\n') {
                unread.stderr.push('\n');
            }
            unread
                .stderr
                .push_str(&format!("[dsh-bash-remote: {note}]\n"));
        }
        self.publisher.publish(TaskState {
            status,
            exit_code: None,
            signal: None,
            sandbox: None,
            limits: None,
        });
        true
    }
}

/// Pulls the task's new output and state once; `Ok(true)` if output came.
/// A settled state is published after its output is in, and announced.
pub(crate) async fn pull(inner: &Inner, mirror: &Mirror) -> Result<bool, BashError> {
    let _one = mirror.pulling.lock().await;
    if mirror.is_settled() {
        return Ok(false);
    }
    let reply = inner
        .task_call("bash_output", &mirror.id)
        .await
        .inspect_err(|err| {
            // The request may have been answered, and its output handed
            // out, without the answer reaching us.
            if matches!(err, BashError::Unreachable { .. }) {
                mirror.mark_lossy();
            }
        })?;
    let facts = match reply {
        Reply::Read(facts) => facts,
        Reply::Failed(facts) => return Err(facts.into_error()),
        other => return Err(crate::unexpected(&other)),
    };
    let flowed = mirror.append(&facts);
    if mirror.settle(facts.task.state) {
        inner.announce(&mirror.snapshot());
    }
    Ok(flowed)
}

/// Pulls until the task settles, the executor stops, or the server is
/// gone (then the task settles here as killed, saying why).
pub(crate) fn spawn_poller(inner: Arc<Inner>, mirror: Arc<Mirror>) {
    tokio::spawn(async move {
        let (min, max) = (inner.config.poll_min, inner.config.poll_max);
        let mut wait = min;
        // Over HTTP a dead server never closes the transport: after this
        // long without an answer the task settles here.
        let give_up = inner.config.patience.saturating_mul(2);
        let mut failing_since: Option<std::time::Instant> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = inner.stopping.cancelled() => return,
            }
            if mirror.is_settled() {
                return;
            }
            let pulled = pull(&inner, &mirror).await;
            if pulled.is_ok() {
                failing_since = None;
            }
            match pulled {
                Ok(true) => wait = min,
                Ok(false) => wait = (wait * 2).min(max),
                Err(BashError::Unreachable { message })
                    if inner.link.is_closed()
                        || failing_since.is_some_and(|since| since.elapsed() > give_up) =>
                {
                    let note = format!("the connection to the server was lost ({message}); what became of the task there is unknown");
                    if mirror.settle_here(TaskStatus::Killed, &note) {
                        inner.announce(&mirror.snapshot());
                    }
                    return;
                }
                // Over HTTP a failed request may be a blip: try again.
                Err(BashError::Unreachable { message }) => {
                    tracing::debug!(task = %mirror.id, %message, "pull failed; retrying");
                    failing_since.get_or_insert_with(std::time::Instant::now);
                    wait = max.max(Duration::from_millis(500));
                }
                Err(err) => {
                    let note = format!("the server no longer answers for the task: {err}");
                    if mirror.settle_here(TaskStatus::Killed, &note) {
                        inner.announce(&mirror.snapshot());
                    }
                    return;
                }
            }
        }
    });
}
