//! A tunnel's two directions moved by `splice(2)`, each through a pipe of
//! its own: the bytes go from one socket's receive queue to the other's
//! send queue inside the kernel, never through the proxy's memory. Every
//! byte still counts against the command's budget and as activity
//! ([`Meter`]); a kernel that cannot splice these sockets gets the plain
//! copy instead ([`Tunnel::Unsupported`]).
//!
//! A splice stops at a TCP peer's urgent (out-of-band) byte: there one
//! `recv` moves past it, skipping the byte as the plain copy does, and the
//! splicing goes on.
//!
//! A splice into a socket whose peer has gone raises `SIGPIPE` (the kernel
//! offers no `MSG_NOSIGNAL` there): Rust programs ignore it from their
//! start, and so must any other host of the proxy.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::meter::{Meter, Metered};

/// Bytes moved per `splice` at most (the pipe is made this large where
/// the system allows; else its own size is used).
const CHUNK: usize = 1 << 20;

/// A socket the reactor watches: what a splice needs of it.
pub(crate) trait Spliced: AsFd + Sync {
    /// Completes once the socket may be ready for `interest`.
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    /// Runs `f` on the socket, clearing its readiness if `f` would block.
    fn attempt(
        &self,
        interest: Interest,
        f: impl FnOnce() -> io::Result<usize>,
    ) -> io::Result<usize>;
}

macro_rules! spliced {
    ($($stream:ty),*) => {$(
        impl Spliced for $stream {
            async fn ready(&self, interest: Interest) -> io::Result<()> {
                <$stream>::ready(self, interest).await.map(|_| ())
            }

            fn attempt(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<usize>,
            ) -> io::Result<usize> {
                self.try_io(interest, f)
            }
        }
    )*};
}

spliced!(tokio::net::TcpStream, tokio::net::UnixStream);

/// How a spliced tunnel ended.
pub(crate) enum Tunnel {
    /// Both directions ended (or one failed after bytes moved).
    Ended,
    /// The kernel refused to splice before any byte moved: copy instead.
    Unsupported,
}

/// Moves bytes both ways between `client` (metered by `meter`) and
/// `upstream` until each direction has ended.
pub(crate) async fn tunnel<A: Spliced, B: Spliced>(
    client: &A,
    upstream: &B,
    meter: &Meter,
) -> Tunnel {
    let (Ok(up), Ok(down)) = (Pipe::new(), Pipe::new()) else {
        return Tunnel::Unsupported;
    };
    // A direction that fails ends the other (an end of input does not: a
    // half-closed tunnel still carries the other way).
    let failed = tokio_util::sync::CancellationToken::new();
    let taken = AtomicU64::new(0);
    let (sent, received) = tokio::join!(
        until_failed(pump(client, upstream, &up, meter, &taken), &failed),
        until_failed(pump(upstream, client, &down, meter, &taken), &failed)
    );
    let refused = |ended: &io::Result<()>| matches!(ended, Err(err) if err.raw_os_error() == Some(libc::EINVAL));
    // Nothing taken from either side: both pipes are empty, and the copy
    // loses nothing.
    if taken.load(Ordering::Relaxed) == 0 && (refused(&sent) || refused(&received)) {
        Tunnel::Unsupported
    } else {
        Tunnel::Ended
    }
}

/// Runs one direction until it ends, or until the other failed; a failure
/// of its own ends the other.
async fn until_failed(
    pump: impl Future<Output = io::Result<()>>,
    failed: &tokio_util::sync::CancellationToken,
) -> io::Result<()> {
    let ended = tokio::select! {
        ended = pump => ended,
        () = failed.cancelled() => Ok(()),
    };
    if ended.is_err() {
        failed.cancel();
    }
    ended
}

/// A pipe to splice through, and how much it holds.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let size = rustix::pipe::fcntl_setpipe_size(&write, CHUNK)
            .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))?;
        Ok(Pipe { read, write, size })
    }
}

fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    Ok(rustix::pipe::splice(from, None, to, None, len, flags)?)
}

/// One direction: `from` into the pipe, the pipe (emptied every time)
/// into `to`, until `from` ends; then `to`'s writing half is shut. What it
/// takes from `from` is added to `taken` as it is taken; the error that
/// stopped it, if one did (`EINVAL`: these sockets cannot be spliced).
async fn pump<A: Spliced, B: Spliced>(
    from: &A,
    to: &B,
    pipe: &Pipe,
    meter: &Meter,
    taken: &AtomicU64,
) -> io::Result<()> {
    loop {
        let filled = fill(from, pipe).await?;
        let n = match filled {
            Filled::Spliced(n) => n,
            Filled::Urgent => past_mark(from, to, meter).await?,
        };
        if n == 0 {
            let _ = rustix::net::shutdown(to.as_fd(), rustix::net::Shutdown::Write);
            return Ok(());
        }
        taken.fetch_add(n as u64, Ordering::Relaxed);
        if !meter.count(n) {
            return Err(crate::meter::spent());
        }
        if let Filled::Spliced(_) = filled {
            drain(pipe, to, n, meter).await?;
        }
    }
}

/// What a fill found.
#[derive(Clone, Copy)]
enum Filled {
    /// This many bytes are in the pipe (0: `from` ended).
    Spliced(usize),
    /// `from` is at its urgent mark: nothing can be spliced until a `recv`
    /// moves past it.
    Urgent,
}

/// Splices what `from` has (at most the pipe's size) into the empty pipe.
async fn fill<A: Spliced>(from: &A, pipe: &Pipe) -> io::Result<Filled> {
    loop {
        from.ready(Interest::READABLE).await?;
        let spliced = from.attempt(Interest::READABLE, || {
            splice(from.as_fd(), pipe.write.as_fd(), pipe.size)
        });
        match spliced {
            Ok(0) | Err(_) if crate::sys::at_urgent_mark(from.as_fd()) => {
                return Ok(Filled::Urgent)
            }
            Ok(n) => return Ok(Filled::Spliced(n)),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
}

/// At `from`'s urgent mark: one `recv` past it (the urgent byte skipped,
/// as a plain read does), what it read sent on to `to`; the bytes moved,
/// 0 at `from`'s end.
async fn past_mark<A: Spliced, B: Spliced>(from: &A, to: &B, meter: &Meter) -> io::Result<usize> {
    let mut buf = vec![0u8; 64 << 10];
    let n = loop {
        let read = from.attempt(Interest::READABLE, || {
            Ok(rustix::net::recv(from.as_fd(), &mut buf[..], rustix::net::RecvFlags::DONTWAIT)?.0)
        });
        match read {
            Ok(n) => break n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                from.ready(Interest::READABLE).await?;
            }
            Err(err) => return Err(err),
        }
    };
    let mut sent = 0;
    while sent < n {
        to.ready(Interest::WRITABLE).await?;
        let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
        match to.attempt(Interest::WRITABLE, || {
            Ok(rustix::net::send(to.as_fd(), &buf[sent..n], flags)?)
        }) {
            Ok(m) => {
                sent += m;
                meter.touch();
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    Ok(n)
}

/// Splices the `n` bytes the pipe holds into `to`, each step counted as
/// activity.
async fn drain<B: Spliced>(pipe: &Pipe, to: &B, n: usize, meter: &Meter) -> io::Result<()> {
    let mut left = n;
    while left > 0 {
        to.ready(Interest::WRITABLE).await?;
        match to.attempt(Interest::WRITABLE, || {
            splice(pipe.read.as_fd(), to.as_fd(), left)
        }) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(m) => {
                left -= m;
                meter.touch();
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// Relays a tunnel between `client` and `upstream` once it is agreed:
/// first the bytes read from the client past its request (`ahead`, already
/// counted), then everything else spliced where the kernel can, else
/// copied.
pub(crate) async fn relay<S>(client: Metered<S>, ahead: &[u8], mut upstream: tokio::net::TcpStream)
where
    S: AsyncRead + AsyncWrite + Spliced + Unpin,
{
    if upstream.write_all(ahead).await.is_err() {
        return;
    }
    let (client, meter) = client.into_parts();
    if let Tunnel::Unsupported = tunnel(&client, &upstream, &meter).await {
        copy(&mut Metered::from_parts(client, meter), &mut upstream).await;
    }
}

/// Copies both ways in 64 KiB steps until each side has ended (where no
/// splice can be had).
pub(crate) async fn copy<A, B>(a: &mut A, b: &mut B)
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let _ = tokio::io::copy_bidirectional_with_sizes(a, b, 64 << 10, 64 << 10).await;
}
