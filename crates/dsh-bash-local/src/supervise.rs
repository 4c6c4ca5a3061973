//! Supervising one command: spawn, read both streams, wait for the exit,
//! the timeout, a cancellation or a kill, stop the whole tree, and return
//! promptly even when a leftover holds the pipes open.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use dsh_bash::Containment;

use crate::contain::{CgroupTree, Shell, WalkedTree};
use crate::lifecycle::{GraceFor, Run, Tree};
use crate::drain::Drain;
use crate::host::Host;
use crate::input::{Input, InputSlot, Source};
use crate::output::Stream;
use crate::spawn::{self, Launch};
use crate::spill::SpillDir;
use crate::stop::{Deadlines, StopCause};
use crate::sys::ExitStatus;

/// A command's streams: the bytes for its stdin, where its output goes.
pub(crate) struct Capture<'a> {
    pub(crate) stdin: Option<Vec<u8>>,
    pub(crate) stdout: Arc<Stream>,
    pub(crate) stderr: Arc<Stream>,
    pub(crate) spill: &'a Arc<SpillDir>,
    pub(crate) max_spill_bytes: u64,
    /// Whose spill budget the files count against.
    pub(crate) owner: Option<dsh_bash::OwnerToken>,
    /// Where a task that takes input keeps its terminal or open stdin
    /// while it runs; `None`: stdin gets `stdin` and is closed.
    pub(crate) input: Option<Arc<InputSlot>>,
    /// The host that spawns and stops it.
    pub(crate) host: &'a Arc<Host>,
}

/// How long stopping and draining wait, and where the stops that outlive
/// a result run.
pub(crate) struct Patience<'a> {
    /// SIGTERM to SIGKILL.
    pub(crate) grace: Duration,
    /// The grace when the executor shuts down (at most `grace`): a server
    /// told to stop must be gone within a second.
    pub(crate) shutdown_grace: Duration,
    /// How long a held pipe may delay a result after the command ended.
    pub(crate) linger: Duration,
    pub(crate) tracker: &'a tokio_util::task::TaskTracker,
}

/// Completes when a stop has waited long enough: `grace`, cut short to
/// `short` once `shutdown` fires (a host told to stop does not wait out a
/// long grace).
async fn grace_over(grace: Duration, short: Duration, shutdown: CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(grace) => {}
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(short.min(grace)).await;
        } => {}
    }
}

/// How a supervised command ended.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) status: ExitStatus,
    pub(crate) cause: Option<StopCause>,
    pub(crate) leftovers: usize,
    pub(crate) containment: Containment,
    /// Its limits, and whether it hit one before it ended.
    pub(crate) limits: Option<dsh_bash::BashLimits>,
}

/// The tasks moving a command's bytes: a reader per output stream, the
/// stdin writer, and the terminal kept open while it runs.
struct Plumbing {
    readers: [tokio::task::JoinHandle<()>; 2],
    writer: Option<tokio::task::JoinHandle<()>>,
    /// Fired when the linger is over: the readers stop waiting for EOF.
    linger: CancellationToken,
    /// A terminal nobody types into (a foreground command's): closing it
    /// would hang the command up.
    terminal: Option<OwnedFd>,
    input: Option<Arc<InputSlot>>,
}

impl Plumbing {
    async fn start(pipes: spawn::Pipes, capture: &Capture<'_>) -> io::Result<Plumbing> {
        let linger = CancellationToken::new();
        let drain = |stream: &Arc<Stream>, label| Drain {
            stream: Arc::clone(stream),
            spill: Arc::clone(capture.spill),
            label,
            cap: capture.max_spill_bytes,
            owner: capture.owner.clone(),
            counted: std::sync::atomic::AtomicU64::new(0),
            linger_over: linger.clone(),
            lanes: capture.host.lanes.clone(),
        };
        let stdout = match &pipes.terminal {
            Some(_) => Source::terminal(pipes.stdout)?,
            None => Source::pipe(pipes.stdout)?,
        };
        let stderr = pipes.stderr.map(Source::pipe).transpose()?;
        let readers = [
            tokio::spawn(drain(&capture.stdout, "stdout").run(stdout)),
            match stderr {
                Some(stderr) => tokio::spawn(drain(&capture.stderr, "stderr").run(stderr)),
                // One stream in a terminal.
                None => {
                    capture.stderr.finish();
                    tokio::spawn(async {})
                }
            },
        ];
        let typed = pipes.terminal.as_ref().map(OwnedFd::try_clone).transpose()?;
        let input = match (typed, pipes.stdin) {
            (Some(master), _) => Some(Input::terminal(master)?),
            (None, Some(stdin)) => Some(Input::pipe(stdin)?),
            (None, None) => None,
        };
        let stdin = capture.stdin.clone().unwrap_or_default();
        let mut plumbing = Plumbing {
            readers,
            writer: None,
            linger,
            terminal: None,
            input: None,
        };
        match (input, &capture.input) {
            (Some(input), Some(slot)) => {
                slot.fill(input).await;
                plumbing.input = Some(Arc::clone(slot));
                if !stdin.is_empty() {
                    let slot = Arc::clone(slot);
                    plumbing.writer = Some(tokio::spawn(async move {
                        let _ = slot.write(&stdin).await;
                    }));
                }
            }
            (Some(mut input), None) => {
                plumbing.terminal = pipes.terminal;
                // A pipe closes once the bytes are in (EPIPE from a child
                // that exits without reading is not our failure).
                plumbing.writer = Some(tokio::spawn(async move {
                    let _ = input.write_all(&stdin).await;
                }));
            }
            (None, _) => {}
        }
        Ok(plumbing)
    }

    /// Everything the command wrote before it ended is in the pipes; a
    /// leftover or daemon may hold them open, so EOF gets a bounded wait.
    async fn finish(self, linger: Duration) {
        if let Some(writer) = &self.writer {
            writer.abort();
        }
        if let Some(input) = &self.input {
            input.close("the task has ended").await;
        }
        let [out_reader, err_reader] = self.readers;
        let both = async {
            let _ = out_reader.await;
            let _ = err_reader.await;
        };
        tokio::pin!(both);
        if tokio::time::timeout(linger, &mut both).await.is_err() {
            self.linger.cancel();
            both.await;
        }
        if let Some(writer) = self.writer {
            writer.abort();
        }
        drop(self.terminal);
    }
}

/// Runs `launch` to its end: its streams through `capture`, ended early by
/// `ends`, stopped with `patience`; `held` is dropped once the whole tree
/// is gone (after this returns when leftovers are still being stopped).
/// `Err` only when it could not be spawned or supervised.
pub(crate) async fn supervise(
    mut launch: Launch,
    capture: Capture<'_>,
    ends: Deadlines<'_>,
    patience: Patience<'_>,
    held: Vec<Arc<dyn dsh_sandbox::Held>>,
) -> io::Result<Ended> {
    let command = launch.command;
    let observers = std::mem::take(&mut launch.observers);
    let spawned = capture.host.spawners.spawn(launch).await?;
    for observer in &observers {
        observer.started(u32::try_from(spawned.pid).unwrap_or(0));
    }
    // From here on `held` goes with the tree on every path, `?` ones too:
    // a dropped tree drops it once the shell is reaped.
    let shell = Shell::new(
        Arc::clone(capture.host),
        (spawned.pid, spawned.pidfd),
        command,
        held,
    );
    let plumbing = Plumbing::start(spawned.pipes, &capture).await?;
    let shell = shell?;
    let ended = match spawned.cgroup {
        Some(cgroup) => drive(CgroupTree::new(shell, cgroup), &ends, &patience).await?,
        None => drive(WalkedTree::new(shell, spawned.rlimits), &ends, &patience).await?,
    };
    plumbing.finish(patience.linger).await;
    Ok(ended)
}

/// Drives `tree`'s machine until the result may go out; what lingers is
/// stopped on the tracker after.
async fn drive<T: Tree + Send + 'static>(
    tree: T,
    ends: &Deadlines<'_>,
    patience: &Patience<'_>,
) -> io::Result<Ended> {
    let containment = tree.containment();
    let (grace, short, shutdown) = (patience.grace, patience.shutdown_grace, ends.shutdown.clone());
    let grace_for: GraceFor = Box::new(move |cause| {
        let grace = if cause == StopCause::Shutdown {
            grace.min(short)
        } else {
            grace
        };
        Box::pin(grace_over(grace, short, shutdown.clone()))
    });
    let mut run = Run::new(tree, grace_for);
    let report = run.until_report(ends).await?;
    let limits = run.limits.clone();
    if !run.settled() {
        patience.tracker.spawn(async move { run.until_settled().await });
    }
    Ok(Ended {
        status: report.status,
        cause: report.cause,
        leftovers: report.leftovers,
        containment,
        limits,
    })
}
