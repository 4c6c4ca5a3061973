//! Blocking work without tokio's blocking pool: a few threads started
//! before the first command exists, fed through queues. Nothing a command
//! does later (a fork bomb filling `RLIMIT_NPROC` or `pid_max`) can keep a
//! stop or a spill from running: no thread is ever created on their path,
//! and a job never queues behind a blocked stdin read the way it would in
//! tokio's pool (whose `spawn_blocking` panics, or waits for a busy
//! thread, when the OS refuses a new one).

use std::future::Future;
use std::io;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// Which queue a job waits in: stops never wait behind spill files.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lane {
    /// Freezing, killing and counting trees, cgroup writes.
    Stop,
    /// Spill files and retention.
    Io,
}

const STOP_THREADS: usize = 2;
const IO_THREADS: usize = 2;

/// The stop and I/O lanes: their queues (cheap to clone). Started once,
/// with the host (`host.rs`).
#[derive(Clone)]
pub(crate) struct Lanes {
    stop: mpsc::Sender<Job>,
    io: mpsc::Sender<Job>,
}

impl Lanes {
    /// Starts both lanes' threads. A host that cannot start them runs no
    /// command it could not stop.
    pub(crate) fn start() -> io::Result<Lanes> {
        let lanes = lane("stop", STOP_THREADS).and_then(|stop| Ok((stop, lane("io", IO_THREADS)?)));
        let (stop, io) = lanes.map_err(|err| io::Error::new(io::ErrorKind::WouldBlock, err))?;
        Ok(Lanes { stop, io })
    }

    /// Queues `f` on `lane`. Never creates a thread, never panics.
    pub(crate) fn spawn<R: Send + 'static>(
        &self,
        lane: Lane,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> io::Result<Handle<R>> {
        let (reply, result) = oneshot::channel();
        self.submit(lane, move || {
            let _ = reply.send(f());
        })?;
        Ok(Handle(result))
    }

    /// Runs `f` on `lane` and waits for it.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        lane: Lane,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> io::Result<R> {
        self.spawn(lane, f)?.await
    }

    /// Queues `f` without waiting for it (a drop's work).
    pub(crate) fn submit(&self, lane: Lane, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
        let queue = match lane {
            Lane::Stop => &self.stop,
            Lane::Io => &self.io,
        };
        queue
            .send(Box::new(f))
            .map_err(|_| io::Error::other("the blocking lane is gone"))
    }
}

/// A queue served by up to `threads` threads (at least one, or an error).
fn lane(name: &str, threads: usize) -> Result<mpsc::Sender<Job>, String> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let queue = Arc::new(Mutex::new(queue));
    let mut started = 0;
    let mut last = None;
    for index in 0..threads {
        let queue = Arc::clone(&queue);
        let spawned = std::thread::Builder::new()
            .name(format!("dsh-bash-{name}-{index}"))
            .spawn(move || loop {
                let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                let Ok(job) = job else { return };
                // A panicking job loses its reply (the caller reads an
                // error), not the thread.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
            });
        match spawned {
            Ok(_) => started += 1,
            Err(err) => last = Some(err),
        }
    }
    match (started, last) {
        (0, Some(err)) => Err(format!("cannot start a {name} thread: {err}")),
        _ => Ok(jobs),
    }
}

/// A job's result, or an error once it is known it will never come.
pub(crate) struct Handle<R>(oneshot::Receiver<R>);

impl<R> Future for Handle<R> {
    type Output = io::Result<R>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|got| got.map_err(|_| io::Error::other("a blocking job panicked")))
    }
}
