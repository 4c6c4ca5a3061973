//! A background task as seen from here: its published state, the output
//! pulled from the server and not read yet, and the poller that pulls it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dsh_bash::wire::{ReadFacts, Reply};
use dsh_bash::{
    task_channel, BashError, BashTask, BashTaskId, BashTaskRead, OutputCursor, OwnerToken,
    TaskPublisher, TaskState, TaskStatus,
};

use crate::{Inner, RemoteConfig};

/// One stream as pulled from the server: the last `cap` bytes of text,
/// each piece at the server's byte positions, so a read can start at any
/// position still held. Where the server replaced invalid bytes the text
/// is longer or shorter than the bytes it stands for; a read from inside
/// such a piece starts at the nearest character instead.
#[derive(Default)]
struct Held {
    pieces: VecDeque<Piece>,
    bytes: usize,
    /// The first server position held.
    start: u64,
    /// The server position after the last byte pulled: where the next
    /// pull asks from.
    end: u64,
    spill_path: Option<PathBuf>,
}

struct Piece {
    start: u64,
    end: u64,
    text: String,
}

impl Held {
    /// Adds a pull's text, `from` the server position it starts at, `to`
    /// where it ends. Text the server no longer held (its memory slid past
    /// what this side asked for) leaves a gap: what came before it is
    /// dropped, so a read across it says it is lossy.
    fn append(&mut self, from: u64, to: u64, text: &str, cap: usize) {
        if from > self.end {
            self.pieces.clear();
            self.bytes = 0;
            self.start = from;
        }
        if !text.is_empty() {
            self.pieces.push_back(Piece {
                start: from,
                end: to.max(from),
                text: text.to_owned(),
            });
            self.bytes += text.len();
        }
        self.end = self.end.max(to);
        self.keep(cap);
    }

    /// Drops the oldest text until at most `cap` bytes are held.
    fn keep(&mut self, cap: usize) {
        while self.bytes > cap {
            let excess = self.bytes - cap;
            let Some(front) = self.pieces.front_mut() else {
                break;
            };
            if front.text.len() <= excess {
                self.bytes -= front.text.len();
                self.pieces.pop_front();
                self.start = self.pieces.front().map_or(self.end, |p| p.start);
                continue;
            }
            let mut cut = excess;
            while !front.text.is_char_boundary(cut) {
                cut += 1;
            }
            front.text.drain(..cut);
            front.start = (front.start + cut as u64).min(front.end);
            self.bytes -= cut;
            self.start = front.start;
        }
    }

    /// The text held from `asked` on, and where it starts (`asked`, or
    /// the first position held).
    fn read(&self, asked: u64) -> (String, u64) {
        let from = asked.max(self.start);
        let mut text = String::new();
        for piece in self.pieces.iter().filter(|p| p.end > from) {
            let mut skip = usize::try_from(from.saturating_sub(piece.start))
                .unwrap_or(usize::MAX)
                .min(piece.text.len());
            while !piece.text.is_char_boundary(skip) {
                skip += 1;
            }
            text.push_str(&piece.text[skip..]);
        }
        (text, from)
    }
}

/// Both streams as pulled, and where the next read without a position
/// starts.
#[derive(Default)]
struct Pulled {
    stdout: Held,
    stderr: Held,
    read_to: OutputCursor,
}

impl Pulled {
    fn end(&self) -> OutputCursor {
        OutputCursor {
            stdout: self.stdout.end,
            stderr: self.stderr.end,
        }
    }
}

pub(crate) struct Mirror {
    pub(crate) id: BashTaskId,
    pub(crate) owner: Option<OwnerToken>,
    publisher: TaskPublisher,
    pulled: Mutex<Pulled>,
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
            pulled: Mutex::default(),
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

    /// The output pulled from `since` on (by default from where the
    /// previous read ended). The snapshot is taken first: a settled one
    /// means every byte is in.
    pub(crate) fn read(&self, since: Option<OutputCursor>) -> Result<BashTaskRead, BashError> {
        let task = self.publisher.snapshot();
        let mut pulled = self.pulled.lock().unwrap_or_else(PoisonError::into_inner);
        let asked = since.unwrap_or(pulled.read_to);
        let end = pulled.end();
        if !asked.within(end) {
            return Err(BashError::PositionAhead {
                id: self.id.clone(),
                asked,
                end,
            });
        }
        let (stdout, out_from) = pulled.stdout.read(asked.stdout);
        let (stderr, err_from) = pulled.stderr.read(asked.stderr);
        let from = OutputCursor {
            stdout: out_from,
            stderr: err_from,
        };
        pulled.read_to = end;
        Ok(BashTaskRead {
            task,
            delta: dsh_bash::join_streams(&stdout, &stderr),
            stdout,
            stderr,
            lossy: from != asked,
            asked,
            from,
            to: end,
            stdout_spill_path: pulled.stdout.spill_path.clone(),
            stderr_spill_path: pulled.stderr.spill_path.clone(),
        })
    }

    /// Where the next pull asks the server to read from.
    fn pulled_to(&self) -> OutputCursor {
        self.pulled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .end()
    }

    /// Adds one pull's output.
    fn append(&self, facts: &ReadFacts) {
        let mut pulled = self.pulled.lock().unwrap_or_else(PoisonError::into_inner);
        let (from, to) = (facts.from, facts.to);
        pulled
            .stdout
            .append(from.stdout, to.stdout, &facts.stdout, self.cap);
        pulled
            .stderr
            .append(from.stderr, to.stderr, &facts.stderr, self.cap);
        if facts.stdout_spill_path.is_some() {
            pulled
                .stdout
                .spill_path
                .clone_from(&facts.stdout_spill_path);
        }
        if facts.stderr_spill_path.is_some() {
            pulled
                .stderr
                .spill_path
                .clone_from(&facts.stderr_spill_path);
        }
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

    /// Settles the task on this side alone (shutdown, a lost connection),
    /// with why on its stderr; true if this call settled it.
    pub(crate) fn settle_here(&self, status: TaskStatus, note: &str) -> bool {
        if self.settled.swap(true, Ordering::AcqRel) {
            return false;
        }
        {
            // The note is this side's: it follows the server's last byte.
            let mut pulled = self.pulled.lock().unwrap_or_else(PoisonError::into_inner);
            let stderr = &mut pulled.stderr;
            let ends_open = stderr
                .pieces
                .back()
                .is_some_and(|p| !p.text.ends_with('\n'));
            let note = format!(
                "{}[dsh-bash-remote: {note}]\n",
                if ends_open { "\n" } else { "" }
            );
            let end = stderr.end;
            stderr.append(end, end + note.len() as u64, &note, self.cap);
        }
        self.publisher.publish(TaskState {
            status,
            exit_code: None,
            signal: None,
            sandbox: None,
            limits: None,
            changed: None,
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
    // Asked by position: a pull whose answer was lost is asked again from
    // the same place, and nothing the server handed out is missed.
    let reply = inner.read_call(&mirror.id, mirror.pulled_to()).await?;
    let facts = match reply {
        Reply::Read(facts) => facts,
        Reply::Failed(facts) => return Err(facts.into_error()),
        other => return Err(crate::unexpected(&other)),
    };
    mirror.append(&facts);
    let flowed = !(facts.stdout.is_empty() && facts.stderr.is_empty());
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

#[cfg(test)]
mod tests {
    use super::Held;

    #[test]
    fn reads_by_server_position_across_pieces() {
        let mut held = Held::default();
        held.append(0, 6, "alpha\n", 64);
        held.append(6, 11, "beta\n", 64);
        assert_eq!(held.read(0), ("alpha\nbeta\n".to_owned(), 0));
        assert_eq!(held.read(3), ("ha\nbeta\n".to_owned(), 3));
        assert_eq!(held.read(6), ("beta\n".to_owned(), 6));
        assert_eq!(held.read(11), (String::new(), 11));
        assert_eq!(held.end, 11);
    }

    #[test]
    fn the_oldest_text_goes_past_the_cap_and_a_read_from_it_starts_later() {
        let mut held = Held::default();
        held.append(0, 6, "alpha\n", 8);
        held.append(6, 11, "beta\n", 8);
        // 11 bytes, 8 kept: "ha\nbeta\n" from position 3.
        assert_eq!(held.start, 3);
        assert_eq!(held.read(0), ("ha\nbeta\n".to_owned(), 3));
        // A cut never splits a character.
        let mut held = Held::default();
        held.append(0, 5, "é€", 3);
        assert_eq!(held.read(0), ("€".to_owned(), 2));
    }

    #[test]
    fn a_gap_the_server_no_longer_held_drops_what_came_before() {
        let mut held = Held::default();
        held.append(0, 4, "one\n", 64);
        // The server's memory slid: this pull starts at 100.
        held.append(100, 104, "two\n", 64);
        assert_eq!(held.read(0), ("two\n".to_owned(), 100));
        assert_eq!(held.read(102), ("o\n".to_owned(), 102));
    }
}
