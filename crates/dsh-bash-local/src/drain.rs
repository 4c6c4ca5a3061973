//! Draining a pipe into a [`Stream`]: reads without blocking a runtime
//! thread, and once the stream overflows, writes the complete stream to a
//! spill file from the blocking pool in batches.

use std::fs::File;
use std::io::{self, Write as _};
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::input::Source;
use crate::offload::{self, Lane, Lanes};
use crate::output::{Pushed, Spill, Stream};
use crate::spill::SpillDir;

/// The first read buffer of a stream, and the most it grows to.
const READ_MIN: usize = 4 * 1024;
const READ_MAX: usize = 1 << 20;

/// Bytes written to a spill file per blocking write. Two batches may be in
/// flight per stream, which bounds the memory of a spilling stream.
const SPILL_BATCH: usize = 1 << 20;

/// A batch being written on the blocking pool; hands the file and the
/// buffer back.
type Landing = offload::Handle<io::Result<(File, Vec<u8>)>>;

/// Writes a spill file from the async reader without blocking it: batches
/// are written on the blocking pool, one batch in flight while the next
/// fills. Never writes more than `cap` bytes.
struct SpillWriter {
    file: Option<File>,
    pending: Vec<u8>,
    in_flight: Option<Landing>,
    written: u64,
    cap: u64,
    /// Where to make room when the filesystem is full, for whom.
    room: (Arc<SpillDir>, Option<dsh_bash::OwnerToken>),
    lanes: Lanes,
}

/// Writes all of `batch`; on a full filesystem, makes room once (the
/// oldest finished spill files, `room`'s owner's first) and goes on from
/// where the write stopped. Blocking.
fn write_making_room(
    file: &mut File,
    batch: &[u8],
    room: &(Arc<SpillDir>, Option<dsh_bash::OwnerToken>),
) -> io::Result<()> {
    let mut rest = batch;
    let mut reclaimed = false;
    while !rest.is_empty() {
        match file.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
                ) && !reclaimed =>
            {
                reclaimed = true;
                if room.0.reclaim(&room.1, rest.len() as u64) == 0 {
                    return Err(err);
                }
            }
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

impl SpillWriter {
    fn new(
        file: File,
        (cap, lanes): (u64, Lanes),
        room: (Arc<SpillDir>, Option<dsh_bash::OwnerToken>),
    ) -> Self {
        SpillWriter {
            file: Some(file),
            pending: Vec::with_capacity(SPILL_BATCH),
            in_flight: None,
            written: 0,
            cap,
            room,
            lanes,
        }
    }

    /// True once the file has (or is about to have) all the cap allows.
    fn full(&self) -> bool {
        self.written + self.pending.len() as u64 >= self.cap
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
                let (file, mut buffer) = handle.await??;
                self.file = Some(file);
                buffer.clear();
                Ok(buffer)
            }
            None => Ok(Vec::with_capacity(SPILL_BATCH)),
        }
    }

    async fn flush(&mut self) -> io::Result<()> {
        let spare = self.land().await?;
        let mut batch = std::mem::replace(&mut self.pending, spare);
        let room = usize::try_from(self.cap.saturating_sub(self.written)).unwrap_or(usize::MAX);
        batch.truncate(room);
        let Some(mut file) = self.file.take() else {
            return Err(io::Error::other("spill file lost"));
        };
        self.written += batch.len() as u64;
        let room = self.room.clone();
        self.in_flight = Some(self.lanes.spawn(Lane::Io, move || {
            write_making_room(&mut file, &batch, &room)?;
            Ok((file, batch))
        })?);
        Ok(())
    }

    /// Writes everything pending (up to the cap) and closes the file; the
    /// byte count on success.
    async fn finish(mut self) -> io::Result<u64> {
        self.flush().await?;
        self.land().await?;
        Ok(self.written)
    }
}

/// One turn of the reader: a read (and whether it went straight into the
/// spill batch), or the linger is over and the reader gives up on EOF.
enum Step {
    Read(io::Result<usize>, bool),
    LingerOver,
}

/// What a stream's reader needs besides the pipe.
pub(crate) struct Drain {
    pub(crate) stream: Arc<Stream>,
    pub(crate) spill: Arc<SpillDir>,
    pub(crate) label: &'static str,
    /// The most bytes a spill file may hold.
    pub(crate) cap: u64,
    /// Whose spill budget the file counts against.
    pub(crate) owner: Option<dsh_bash::OwnerToken>,
    /// Bytes of this stream's spill file already counted as running in the
    /// spill directory's budget.
    pub(crate) counted: std::sync::atomic::AtomicU64,
    /// Fires when the command has ended and lingered long enough: the
    /// reader no longer waits for an EOF a leftover process may withhold.
    pub(crate) linger_over: CancellationToken,
    /// Where its spill file's blocking work runs.
    pub(crate) lanes: Lanes,
}

impl Drain {
    /// Reads the pipe until EOF (or `linger_over`), feeding the stream and its
    /// spill file.
    pub(crate) async fn run(self, mut pipe: Source) {
        // Small to start (most commands print little; a thousand idle tasks
        // must stay cheap), growing while reads fill it.
        let mut buf = vec![0u8; READ_MIN];
        let mut writer: Option<SpillWriter> = None;
        loop {
            // Once the stream spills, reads land straight in the spill batch
            // (no copy); before that, in `buf`.
            let step = match writer.as_mut() {
                Some(active) => tokio::select! {
                    biased;
                    read = pipe.read_buf(&mut active.pending) => Step::Read(read, true),
                    () = self.linger_over.cancelled() => Step::LingerOver,
                },
                None => tokio::select! {
                    biased;
                    read = pipe.read(&mut buf) => Step::Read(read, false),
                    () = self.linger_over.cancelled() => Step::LingerOver,
                },
            };
            match step {
                Step::LingerOver => {
                    // Take what is already buffered in the pipe, then leave.
                    while let Ok(n @ 1..) = pipe.try_read(&mut buf) {
                        self.feed(&pipe, &buf[..n], &mut writer).await;
                    }
                    break;
                }
                Step::Read(Ok(0), _) => break,
                Step::Read(Ok(n), true) => self.landed(n, &mut writer).await,
                Step::Read(Ok(n), false) => {
                    self.feed(&pipe, &buf[..n], &mut writer).await;
                    if n == buf.len() && buf.len() < READ_MAX {
                        buf.resize(buf.len() * 4, 0);
                    }
                }
                Step::Read(Err(err), _) if err.kind() == io::ErrorKind::Interrupted => {}
                Step::Read(Err(err), _) => {
                    tracing::debug!(%err, label = self.label, "reading command output failed");
                    break;
                }
            }
        }
        if let Some(writer) = writer {
            self.close_spill(writer, None).await;
        }
        self.stream.finish();
    }

    /// After a write: a spill file that reached the cap is closed (the tail
    /// keeps updating in memory); a failed write closes it as partial.
    async fn after_write(&self, wrote: io::Result<()>, writer: &mut Option<SpillWriter>) {
        if let Some(active) = writer.as_ref() {
            let before = self
                .counted
                .swap(active.written, std::sync::atomic::Ordering::Relaxed);
            self.spill
                .grew(&self.owner, active.written.saturating_sub(before));
        }
        match wrote {
            Ok(()) if writer.as_ref().is_some_and(SpillWriter::full) => {
                if let Some(full) = writer.take() {
                    let cap = full.cap;
                    self.close_spill(full, Some(format!("capped at {cap} bytes")))
                        .await;
                }
            }
            Ok(()) => {}
            Err(err) => {
                if let Some(failed) = writer.take() {
                    drop(failed);
                    self.spill_failed(err).await;
                }
            }
        }
    }

    /// `n` bytes were read straight into the spill batch: keep the tail,
    /// and hand the batch to the blocking pool once it is full.
    async fn landed(&self, n: usize, writer: &mut Option<SpillWriter>) {
        let Some(active) = writer.as_mut() else {
            return;
        };
        let start = active.pending.len() - n;
        self.stream.push(&active.pending[start..]);
        let wrote = if active.pending.len() >= SPILL_BATCH {
            active.flush().await
        } else {
            Ok(())
        };
        self.after_write(wrote, writer).await;
    }

    async fn feed(&self, pipe: &Source, chunk: &[u8], writer: &mut Option<SpillWriter>) {
        match self.stream.push(chunk) {
            Pushed::Kept => {}
            Pushed::Overflowed(earlier) => {
                // A heavy stream: a bigger pipe means fewer wake-ups.
                pipe.grow();
                *writer = self.open_spill(&earlier, chunk).await;
            }
            Pushed::Spilling => {
                if let Some(active) = writer.as_mut() {
                    let wrote = active.write(chunk).await;
                    self.after_write(wrote, writer).await;
                }
            }
        }
    }

    async fn open_spill(&self, earlier: &[u8], chunk: &[u8]) -> Option<SpillWriter> {
        let spill = Arc::clone(&self.spill);
        let label = self.label;
        let owner = self.owner.clone();
        // Out of threads or out of disk alike: the tail stays, the reason is
        // in the result.
        let created = self.lanes.run(Lane::Io, move || spill.create(label, &owner)).await;
        let (file, path) = match created.and_then(|made| made) {
            Ok(created) => created,
            Err(err) => {
                tracing::warn!(%err, "cannot create a spill file; keeping the tail only");
                self.stream
                    .spill_lost(format!("the spill file could not be created: {err}"));
                return None;
            }
        };
        self.stream.set_spill(Spill::Active(path));
        let room = (Arc::clone(&self.spill), self.owner.clone());
        let mut active = Some(SpillWriter::new(file, (self.cap, self.lanes.clone()), room));
        for part in [earlier, chunk] {
            let Some(writer) = active.as_mut() else {
                break;
            };
            let wrote = writer.write(part).await;
            self.after_write(wrote, &mut active).await;
        }
        active
    }

    /// A write failed: the file keeps what reached it, stays advertised as
    /// partial with the reason, and is tracked for retention like any other.
    async fn spill_failed(&self, err: io::Error) {
        let Some(path) = self.stream.spill_path() else {
            return;
        };
        tracing::warn!(%err, path = %path.display(), "writing a spill file failed; keeping it as partial");
        let measured = path.clone();
        let bytes = self.lanes.run(Lane::Io, move || std::fs::metadata(measured).map(|m| m.len()))
            .await
            .and_then(|len| len)
            .unwrap_or(0);
        self.stream.spill_cut(format!("{err} after {bytes} bytes"));
        self.retain(path, bytes).await;
    }

    async fn retain(&self, path: std::path::PathBuf, bytes: u64) {
        self.spill
            .finished_writing(&self.owner, self.counted.swap(0, std::sync::atomic::Ordering::Relaxed));
        let spill = Arc::clone(&self.spill);
        let stream = Arc::downgrade(&self.stream);
        let owner = self.owner.clone();
        let retained = self.lanes.run(Lane::Io, move || spill.retain(path, bytes, stream, owner)).await;
        if let Err(err) = retained {
            tracing::warn!(%err, "spill retention did not run");
        }
    }

    /// Finishes the file; `cut` says why it stops short of the stream.
    async fn close_spill(&self, writer: SpillWriter, cut: Option<String>) {
        let Some(path) = self.stream.spill_path() else {
            return;
        };
        match writer.finish().await {
            Ok(bytes) => {
                if let Some(why) = cut {
                    self.stream.spill_cut(why);
                }
                self.retain(path, bytes).await;
            }
            Err(err) => self.spill_failed(err).await,
        }
    }
}
