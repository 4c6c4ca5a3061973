//! Output collection: a bounded tail per stream, the complete stream in a
//! spill file once it overflows, and incremental reads in whole-stream byte
//! offsets.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use dsh_bash::CollectedOutput;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::spill::SpillDir;
use crate::sys;

/// The last `cap` bytes of a stream, plus how many bytes it had in all.
#[derive(Debug)]
pub(crate) struct StreamTail {
    cap: usize,
    kept: VecDeque<u8>,
    total: u64,
}

impl StreamTail {
    pub(crate) fn new(cap: usize) -> Self {
        StreamTail {
            cap,
            kept: VecDeque::new(),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if chunk.len() >= self.cap {
            self.kept.clear();
            self.kept.extend(&chunk[chunk.len() - self.cap..]);
            return;
        }
        let overflow = (self.kept.len() + chunk.len()).saturating_sub(self.cap);
        self.kept.drain(..overflow);
        self.kept.extend(chunk);
    }

    /// The whole-stream offset of the first kept byte.
    pub(crate) fn window_start(&self) -> u64 {
        self.total - self.kept.len() as u64
    }

    pub(crate) fn truncated(&self) -> bool {
        self.window_start() > 0
    }

    fn bytes_from(&self, skip: usize) -> Vec<u8> {
        self.kept.range(skip..).copied().collect()
    }
}

/// Decodes bytes as UTF-8 with replacement. When `cut` (the bytes start
/// inside a stream), leading continuation bytes of a character that began
/// before the cut are dropped instead of shown as replacement characters.
pub(crate) fn decode(bytes: &[u8], cut: bool) -> String {
    let skip = if cut {
        bytes
            .iter()
            .take(3)
            .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
            .count()
    } else {
        0
    };
    String::from_utf8_lossy(&bytes[skip..]).into_owned()
}

/// How many bytes at the end of `bytes` are an incomplete UTF-8 character
/// that more input may complete.
pub(crate) fn incomplete_suffix(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue;
        }
        let width = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if width > back { back } else { 0 };
    }
    0
}

#[derive(Debug)]
enum Spill {
    /// The stream fits in memory (so far).
    None,
    /// The file is being created.
    Pending,
    /// The file exists and holds (or will hold) the complete stream.
    Active(PathBuf),
    /// Creating or writing the file failed, or retention deleted it.
    Unavailable,
}

#[derive(Debug)]
struct StreamState {
    tail: StreamTail,
    spill: Spill,
    finished: bool,
}

/// What the reader must do after pushing a chunk.
#[derive(Debug)]
pub(crate) enum Pushed {
    /// Nothing: the chunk is in memory.
    Kept,
    /// The stream just overflowed: create the spill file and write these
    /// earlier bytes, then the chunk.
    Overflowed(Vec<u8>),
    /// The stream is spilling: append the chunk to the file.
    Spilling,
}

/// New output of one stream since a given offset.
#[derive(Debug, Default)]
pub(crate) struct Delta {
    pub(crate) text: String,
    pub(crate) next: u64,
    pub(crate) lossy: bool,
    pub(crate) spill_path: Option<PathBuf>,
}

/// One output stream (stdout or stderr) of a command, shared between its
/// reader and whoever reads the output.
#[derive(Debug)]
pub(crate) struct Stream {
    state: Mutex<StreamState>,
}

impl Stream {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Stream {
            state: Mutex::new(StreamState {
                tail: StreamTail::new(cap),
                spill: Spill::None,
                finished: false,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, StreamState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn push(&self, chunk: &[u8]) -> Pushed {
        let mut state = self.state();
        let pushed = match state.spill {
            Spill::None if state.tail.total + chunk.len() as u64 > state.tail.cap as u64 => {
                state.spill = Spill::Pending;
                Pushed::Overflowed(state.tail.bytes_from(0))
            }
            Spill::None | Spill::Unavailable => Pushed::Kept,
            Spill::Pending | Spill::Active(_) => Pushed::Spilling,
        };
        state.tail.push(chunk);
        pushed
    }

    fn set_spill(&self, spill: Spill) {
        self.state().spill = spill;
    }

    /// Retention deleted the file, or writing it failed: stop advertising it.
    pub(crate) fn spill_lost(&self) {
        self.set_spill(Spill::Unavailable);
    }

    pub(crate) fn finish(&self) {
        self.state().finished = true;
    }

    /// The advertised spill path, if the file exists and is intact so far.
    pub(crate) fn spill_path(&self) -> Option<PathBuf> {
        match &self.state().spill {
            Spill::Active(path) => Some(path.clone()),
            _ => None,
        }
    }

    /// The collected stream: the (tail) text, whether it was truncated, and
    /// the spill file when there is an intact one.
    pub(crate) fn collected(&self) -> CollectedOutput {
        let state = self.state();
        let truncated = state.tail.truncated();
        CollectedOutput {
            text: decode(&state.tail.bytes_from(0), truncated),
            truncated,
            spill_path: match (&state.spill, truncated) {
                (Spill::Active(path), true) => Some(path.clone()),
                _ => None,
            },
        }
    }

    /// Everything produced since `offset`. If `offset` has slid out of
    /// memory the whole kept tail is returned and the read is lossy. While
    /// the stream is open, an incomplete trailing character is held back for
    /// the next read.
    pub(crate) fn read_from(&self, offset: u64) -> Delta {
        let state = self.state();
        let start = state.tail.window_start();
        let lossy = offset < start;
        let skip = usize::try_from(offset.saturating_sub(start)).unwrap_or(usize::MAX);
        let mut bytes = state.tail.bytes_from(skip.min(state.tail.kept.len()));
        let mut next = state.tail.total;
        if !state.finished {
            let held = incomplete_suffix(&bytes);
            bytes.truncate(bytes.len() - held);
            next -= held as u64;
        }
        Delta {
            text: decode(&bytes, lossy && start > 0),
            next,
            lossy,
            spill_path: match &state.spill {
                Spill::Active(path) => Some(path.clone()),
                _ => None,
            },
        }
    }
}

/// The first read buffer of a stream, and the most it grows to.
const READ_MIN: usize = 4 * 1024;
const READ_MAX: usize = 1 << 20;

/// Bytes written to a spill file per blocking write. Two batches may be in
/// flight per stream, which bounds the memory of a spilling stream.
const SPILL_BATCH: usize = 1 << 20;

/// A batch being written on the blocking pool; hands the file and the
/// buffer back.
type Landing = JoinHandle<io::Result<(File, Vec<u8>)>>;

/// Writes a spill file from the async reader without blocking it: batches
/// are written on the blocking pool, one batch in flight while the next
/// fills.
struct SpillWriter {
    file: Option<File>,
    pending: Vec<u8>,
    in_flight: Option<Landing>,
    written: u64,
}

impl SpillWriter {
    fn new(file: File) -> Self {
        SpillWriter {
            file: Some(file),
            pending: Vec::with_capacity(SPILL_BATCH),
            in_flight: None,
            written: 0,
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= SPILL_BATCH {
            self.flush().await?;
        }
        Ok(())
    }

    async fn land(&mut self) -> io::Result<Vec<u8>> {
        match self.in_flight.take() {
            Some(handle) => {
                let (file, mut buffer) = handle.await.map_err(io::Error::other)??;
                self.file = Some(file);
                buffer.clear();
                Ok(buffer)
            }
            None => Ok(Vec::with_capacity(SPILL_BATCH)),
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        let spare = self.land().await?;
        let batch = std::mem::replace(&mut self.pending, spare);
        let Some(mut file) = self.file.take() else {
            return Err(io::Error::other("spill file lost"));
        };
        self.written += batch.len() as u64;
        self.in_flight = Some(tokio::task::spawn_blocking(move || {
            file.write_all(&batch)?;
            Ok((file, batch))
        }));
        Ok(())
    }

    /// Writes everything pending and closes the file; the byte count on success.
    async fn finish(mut self) -> io::Result<u64> {
        self.flush().await?;
        self.land().await?;
        Ok(self.written)
    }
}

/// What a stream's reader needs besides the pipe.
pub(crate) struct Drain {
    pub(crate) stream: Arc<Stream>,
    pub(crate) spill: Arc<SpillDir>,
    pub(crate) label: &'static str,
    /// Fires when the command has ended and the reader should stop waiting
    /// for an EOF that a leftover process may withhold.
    pub(crate) stop: CancellationToken,
}

impl Drain {
    /// Reads the pipe until EOF (or `stop`), feeding the stream and its spill file.
    pub(crate) async fn run(self, mut pipe: pipe::Receiver) {
        // Small to start (most commands print little; a thousand idle tasks
        // must stay cheap), growing while reads fill it.
        let mut buf = vec![0u8; READ_MIN];
        let mut writer: Option<SpillWriter> = None;
        loop {
            let read = tokio::select! {
                biased;
                read = pipe.read(&mut buf) => read,
                () = self.stop.cancelled() => {
                    // Take what is already buffered in the pipe, then stop.
                    while let Ok(n @ 1..) = pipe.try_read(&mut buf) {
                        self.feed(&pipe, &buf[..n], &mut writer).await;
                    }
                    break;
                }
            };
            match read {
                Ok(0) => break,
                Ok(n) => {
                    self.feed(&pipe, &buf[..n], &mut writer).await;
                    if n == buf.len() && buf.len() < READ_MAX {
                        buf.resize(buf.len() * 4, 0);
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    tracing::debug!(%err, label = self.label, "reading command output failed");
                    break;
                }
            }
        }
        if let Some(writer) = writer {
            self.close_spill(writer).await;
        }
        self.stream.finish();
    }

    async fn feed(&self, pipe: &pipe::Receiver, chunk: &[u8], writer: &mut Option<SpillWriter>) {
        match self.stream.push(chunk) {
            Pushed::Kept => {}
            Pushed::Overflowed(earlier) => {
                // A heavy stream: a bigger pipe means fewer wake-ups.
                sys::grow_pipe(pipe.as_fd(), 1 << 20);
                *writer = self.open_spill(&earlier, chunk).await;
            }
            Pushed::Spilling => {
                if let Some(active) = writer.as_mut() {
                    if let Err(err) = active.write(chunk).await {
                        tracing::warn!(%err, label = self.label, "writing a spill file failed");
                        self.stream.spill_lost();
                        *writer = None;
                    }
                }
            }
        }
    }

    async fn open_spill(&self, earlier: &[u8], chunk: &[u8]) -> Option<SpillWriter> {
        let spill = Arc::clone(&self.spill);
        let label = self.label;
        let created = tokio::task::spawn_blocking(move || spill.create(label)).await;
        let (file, path) = match created {
            Ok(Ok(created)) => created,
            Ok(Err(err)) => {
                tracing::warn!(%err, "cannot create a spill file; keeping the tail only");
                self.stream.spill_lost();
                return None;
            }
            Err(err) => {
                tracing::warn!(%err, "spill file creation panicked");
                self.stream.spill_lost();
                return None;
            }
        };
        self.stream.set_spill(Spill::Active(path));
        let mut writer = SpillWriter::new(file);
        let wrote = async {
            writer.write(earlier).await?;
            writer.write(chunk).await
        };
        match wrote.await {
            Ok(()) => Some(writer),
            Err(err) => {
                tracing::warn!(%err, "writing a spill file failed");
                self.stream.spill_lost();
                None
            }
        }
    }

    async fn close_spill(&self, writer: SpillWriter) {
        let Some(path) = self.stream.spill_path() else {
            return;
        };
        match writer.finish().await {
            Ok(bytes) => {
                let spill = Arc::clone(&self.spill);
                let stream = Arc::downgrade(&self.stream);
                let retained =
                    tokio::task::spawn_blocking(move || spill.retain(path, bytes, stream)).await;
                if let Err(err) = retained {
                    tracing::warn!(%err, "spill retention panicked");
                }
            }
            Err(err) => {
                tracing::warn!(%err, path = %path.display(), "finishing a spill file failed; not advertising it");
                self.stream.spill_lost();
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(path)).await;
            }
        }
    }
}

/// The text of a background read: stdout, then (if any) `[stderr]` and stderr.
pub(crate) fn join_delta(stdout: &str, stderr: &str) -> String {
    let mut text = stdout.to_owned();
    if !stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(stderr);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_chunk_over_the_cap_keeps_its_end() {
        let stream = Stream::new(10);
        assert!(
            matches!(stream.push(b"0123456789abcdef"), Pushed::Overflowed(ref e) if e.is_empty())
        );
        let out = stream.collected();
        assert_eq!(out.text, "6789abcdef");
        assert!(out.truncated);
    }

    #[test]
    fn exactly_at_the_cap_is_not_truncated() {
        let stream = Stream::new(5);
        assert!(matches!(stream.push(b"abc"), Pushed::Kept));
        assert!(matches!(stream.push(b"de"), Pushed::Kept));
        let out = stream.collected();
        assert_eq!(
            (out.text.as_str(), out.truncated, out.spill_path),
            ("abcde", false, None)
        );
        assert!(matches!(stream.push(b"f"), Pushed::Overflowed(ref e) if e == b"abcde"));
        assert!(matches!(stream.push(b"g"), Pushed::Spilling));
        assert_eq!(stream.collected().text, "cdefg");
    }

    #[test]
    fn reads_in_whole_stream_offsets() {
        let stream = Stream::new(8);
        stream.push(b"abcd");
        let first = stream.read_from(0);
        assert_eq!(
            (first.text.as_str(), first.next, first.lossy),
            ("abcd", 4, false)
        );
        stream.push(b"efgh");
        let second = stream.read_from(first.next);
        assert_eq!(
            (second.text.as_str(), second.next, second.lossy),
            ("efgh", 8, false)
        );
        stream.push(b"ijkl");
        // Offset 2 slid out of the 8-byte window: the whole tail, lossy.
        let lossy = stream.read_from(2);
        assert_eq!(
            (lossy.text.as_str(), lossy.next, lossy.lossy),
            ("efghijkl", 12, true)
        );
        let inside = stream.read_from(10);
        assert_eq!((inside.text.as_str(), inside.lossy), ("kl", false));
    }

    #[test]
    fn a_cut_tail_never_starts_inside_a_character() {
        let stream = Stream::new(4);
        stream.push("xé€".as_bytes()); // 1 + 2 + 3 bytes; the tail cuts into "é"
        let out = stream.collected();
        assert_eq!(out.text, "€");
        assert!(out.truncated);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_dropped() {
        assert_eq!(decode(b"a\xffb", false), "a\u{fffd}b");
        assert_eq!(decode(b"\x80\x80a", false), "\u{fffd}\u{fffd}a");
    }

    #[test]
    fn an_incomplete_character_waits_for_the_next_read() {
        let stream = Stream::new(64);
        let euro = "€".as_bytes();
        stream.push(&euro[..2]);
        let first = stream.read_from(0);
        assert_eq!((first.text.as_str(), first.next), ("", 0));
        stream.push(&euro[2..]);
        let second = stream.read_from(first.next);
        assert_eq!((second.text.as_str(), second.next), ("€", 3));
        assert_eq!(incomplete_suffix(b"ab"), 0);
        assert_eq!(incomplete_suffix("€".as_bytes()), 0);
        assert_eq!(incomplete_suffix(&"𝄞".as_bytes()[..3]), 3);
    }

    #[test]
    fn delta_sections() {
        assert_eq!(join_delta("out", "err"), "out\n[stderr]\nerr");
        assert_eq!(join_delta("out\n", "err"), "out\n[stderr]\nerr");
        assert_eq!(join_delta("", "err"), "[stderr]\nerr");
        assert_eq!(join_delta("out", ""), "out");
    }
}
