//! Output collection: a bounded tail per stream and incremental reads in
//! whole-stream byte offsets. The reader that feeds it (and the spill file)
//! is in `drain.rs`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use dsh_bash::CollectedOutput;

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
pub(crate) enum Spill {
    /// The stream fits in memory (so far).
    None,
    /// The file is being created.
    Pending,
    /// The file exists and holds (or will hold) the complete stream.
    Active(PathBuf),
    /// The file exists but holds only the first part of the stream: it hit
    /// the cap, or a write failed (the note says which).
    Incomplete(PathBuf, String),
    /// Creating the file failed, or retention deleted it (the note says
    /// which).
    Unavailable(String),
}

#[derive(Debug)]
struct StreamState {
    tail: StreamTail,
    spill: Spill,
    finished: bool,
    /// The terminal the bytes draw, for a command run in one.
    screen: Option<Box<Screen>>,
}

/// A terminal emulator's view of a command's output.
struct Screen(vt100::Parser);

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (rows, cols) = self.0.screen().size();
        write!(f, "Screen({cols}x{rows})")
    }
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
    /// Where `text` starts: the offset asked for, or the first byte still
    /// held when that slid out of memory.
    pub(crate) from: u64,
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
        Stream::with_screen(cap, None)
    }

    /// A stream whose bytes also draw a terminal screen of `size` (a
    /// command run in a terminal), read with [`Stream::screen`].
    pub(crate) fn with_screen(cap: usize, size: Option<dsh_bash::TerminalSize>) -> Arc<Self> {
        Arc::new(Stream {
            state: Mutex::new(StreamState {
                tail: StreamTail::new(cap),
                spill: Spill::None,
                finished: false,
                screen: size.map(|size| Box::new(Screen(vt100::Parser::new(size.rows, size.cols, 0)))),
            }),
        })
    }

    /// The terminal screen's contents as text (rows without trailing
    /// blanks), if this stream draws one.
    pub(crate) fn screen(&self) -> Option<String> {
        self.state().screen.as_ref().map(|screen| screen.0.screen().contents())
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
            Spill::None | Spill::Unavailable(_) | Spill::Incomplete(..) => Pushed::Kept,
            Spill::Pending | Spill::Active(_) => Pushed::Spilling,
        };
        state.tail.push(chunk);
        if let Some(screen) = state.screen.as_mut() {
            screen.0.process(chunk);
        }
        pushed
    }

    pub(crate) fn set_spill(&self, spill: Spill) {
        self.state().spill = spill;
    }

    /// There is no usable file (creation failed, retention deleted it):
    /// stop advertising it, and say why.
    pub(crate) fn spill_lost(&self, why: impl Into<String>) {
        self.set_spill(Spill::Unavailable(why.into()));
    }

    /// The file stops short of the stream (the cap, a write error): keep
    /// advertising it as partial, and say why.
    pub(crate) fn spill_cut(&self, why: impl Into<String>) {
        let mut state = self.state();
        let path = match &state.spill {
            Spill::Active(path) | Spill::Incomplete(path, _) => path.clone(),
            _ => return,
        };
        state.spill = Spill::Incomplete(path, why.into());
    }

    pub(crate) fn finish(&self) {
        self.state().finished = true;
    }

    /// The advertised spill path, if the file exists (complete or partial).
    pub(crate) fn spill_path(&self) -> Option<PathBuf> {
        match &self.state().spill {
            Spill::Active(path) | Spill::Incomplete(path, _) => Some(path.clone()),
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
                (Spill::Active(path) | Spill::Incomplete(path, _), true) => Some(path.clone()),
                _ => None,
            },
            total_bytes: state.tail.total,
            spill_note: match (&state.spill, truncated) {
                (Spill::Incomplete(_, why) | Spill::Unavailable(why), true) => Some(why.clone()),
                _ => None,
            },
        }
    }

    /// How many bytes the stream has produced so far.
    pub(crate) fn end(&self) -> u64 {
        self.state().tail.total
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
            // A read from inside the stream (a position handed back, or
            // the first byte still held) never starts inside a character.
            text: decode(&bytes, offset.max(start) > 0),
            from: offset.max(start),
            next,
            lossy,
            spill_path: match &state.spill {
                Spill::Active(path) | Spill::Incomplete(path, _) => Some(path.clone()),
                _ => None,
            },
        }
    }
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
            (lossy.text.as_str(), lossy.from, lossy.next, lossy.lossy),
            ("efghijkl", 4, 12, true)
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
    fn a_read_from_inside_a_character_starts_at_the_next_one() {
        let stream = Stream::new(64);
        stream.push("héllo".as_bytes());
        // Byte 2 is the second byte of "é".
        assert_eq!(stream.read_from(2).text, "llo");
        assert_eq!(stream.read_from(1).text, "éllo");
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
}
