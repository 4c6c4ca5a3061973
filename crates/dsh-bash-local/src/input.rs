//! A command's terminal and open stdin: what the host reads its output
//! from ([`Source`]) and types into ([`Input`], kept in a task's
//! [`InputSlot`] while it runs).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::unix::pipe;

/// Where a command's output is read from: a pipe, or its terminal's
/// master (which reports `EIO` once every process has closed the terminal:
/// the end of its output).
pub(crate) enum Source {
    Pipe(pipe::Receiver),
    Terminal(AsyncFd<OwnedFd>),
}

impl Source {
    pub(crate) fn pipe(fd: OwnedFd) -> io::Result<Source> {
        Ok(Source::Pipe(pipe::Receiver::from_owned_fd(fd)?))
    }

    /// The terminal's master, already non-blocking.
    pub(crate) fn terminal(master: OwnedFd) -> io::Result<Source> {
        Ok(Source::Terminal(crate::sys::readable_fd(master)?))
    }

    /// Reads what is there without waiting (`WouldBlock` when nothing is).
    pub(crate) fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Pipe(pipe) => pipe.try_read(buf),
            Source::Terminal(master) => read_master(master.get_ref().as_fd(), buf),
        }
    }

    /// Grows a pipe for a heavy stream (fewer wake-ups); a terminal's
    /// buffer is the kernel's.
    pub(crate) fn grow(&self) {
        if let Source::Pipe(pipe) = self {
            crate::sys::set_pipe_size(pipe.as_fd(), 1 << 20);
        }
    }
}

/// One read of a terminal master: `Ok(0)` at `EIO` (every slave closed).
fn read_master(master: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    match rustix::io::read(master, buf) {
        Ok(n) => Ok(n),
        Err(rustix::io::Errno::IO) => Ok(0),
        Err(err) => Err(err.into()),
    }
}

impl AsyncRead for Source {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Source::Pipe(pipe) => Pin::new(pipe).poll_read(cx, buf),
            Source::Terminal(master) => loop {
                let mut ready = ready!(master.poll_read_ready(cx))?;
                let unfilled = buf.initialize_unfilled();
                match ready.try_io(|fd| read_master(fd.get_ref().as_fd(), unfilled)) {
                    Ok(Ok(n)) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Ok(Err(err)) => return Poll::Ready(Err(err)),
                    Err(_would_block) => continue,
                }
            },
        }
    }
}

/// What a running command is typed into: its terminal's master, or the
/// write end of its stdin pipe.
pub(crate) enum Input {
    Terminal(AsyncFd<OwnedFd>),
    Pipe(pipe::Sender),
}

impl Input {
    /// The terminal's master (non-blocking).
    pub(crate) fn terminal(master: OwnedFd) -> io::Result<Input> {
        Ok(Input::Terminal(crate::sys::writable_fd(master)?))
    }

    pub(crate) fn pipe(fd: OwnedFd) -> io::Result<Input> {
        Ok(Input::Pipe(pipe::Sender::from_owned_fd(fd)?))
    }

    /// Writes all of `bytes`, waiting while the terminal or pipe is full.
    pub(crate) async fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        match self {
            Input::Pipe(pipe) => pipe.write_all(bytes).await,
            Input::Terminal(master) => {
                while !bytes.is_empty() {
                    let mut ready = master.writable().await?;
                    match ready.try_io(|fd| Ok(rustix::io::write(fd.get_ref(), bytes)?)) {
                        Ok(Ok(n)) => bytes = &bytes[n..],
                        Ok(Err(err)) => return Err(err),
                        Err(_would_block) => continue,
                    }
                }
                Ok(())
            }
        }
    }
}

/// A task's input while it runs: filled when its process starts, emptied
/// (closing the terminal or pipe) when it ends. Writers take turns.
#[derive(Default)]
pub(crate) struct InputSlot {
    slot: tokio::sync::Mutex<Slot>,
    /// Told when the slot is filled or closed.
    changed: tokio::sync::Notify,
    /// Fired when the task ends: a write waiting for room gives up, so
    /// closing never waits for a command that does not read.
    closing: tokio_util::sync::CancellationToken,
}

/// How long a write waits for a just-started task's process to exist.
const START_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Default)]
enum Slot {
    /// Not started yet.
    #[default]
    Waiting,
    Open(Input),
    /// Ended, or its input failed: why.
    Closed(String),
}

impl InputSlot {
    pub(crate) async fn fill(&self, input: Input) {
        *self.slot.lock().await = Slot::Open(input);
        self.changed.notify_waiters();
    }

    pub(crate) async fn close(&self, why: &str) {
        self.closing.cancel();
        *self.slot.lock().await = Slot::Closed(why.to_owned());
        self.changed.notify_waiters();
    }

    /// Writes `bytes` to the open input (waiting for a just-started task's
    /// process to exist); `Err` with why it is not open (or the write's
    /// failure, after which it is closed).
    pub(crate) async fn write(&self, bytes: &[u8]) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + START_WAIT;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let mut slot = self.slot.lock().await;
            match &mut *slot {
                Slot::Waiting => {}
                Slot::Closed(why) => return Err(why.clone()),
                Slot::Open(input) => {
                    let written = tokio::select! {
                        written = input.write_all(bytes) => written,
                        () = self.closing.cancelled() => {
                            return Err("the task has ended".into());
                        }
                    };
                    return match written {
                        Ok(()) => Ok(()),
                        Err(err) => {
                            let why = format!("its input is closed ({err})");
                            *slot = Slot::Closed(why.clone());
                            Err(why)
                        }
                    }
                }
            }
            drop(slot);
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(format!("its process has not started after {START_WAIT:?}"));
            }
        }
    }
}
