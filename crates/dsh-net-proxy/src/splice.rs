//! A tunnel's two directions moved by `splice(2)`, each through a pipe of
//! its own: the bytes go from one socket's receive queue to the other's
//! send queue inside the kernel, never through the proxy's memory. Every
//! byte still counts against the command's budget and as activity
//! ([`Meter`]); a kernel that cannot splice these sockets gets the plain
//! copy instead ([`Tunnel::Unsupported`]).
//!
//! A splice into a socket whose peer has gone raises `SIGPIPE` (the kernel
//! offers no `MSG_NOSIGNAL` there): Rust programs ignore it from their
//! start, and so must any other host of the proxy.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

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
    let (sent, received) = tokio::join!(
        until_failed(pump(client, upstream, &up, meter), &failed),
        until_failed(pump(upstream, client, &down, meter), &failed)
    );
    let refused = |(moved, ended): &(u64, io::Result<()>)| {
        *moved == 0 && matches!(ended, Err(err) if err.raw_os_error() == Some(libc::EINVAL))
    };
    let nothing_moved = sent.0 == 0 && received.0 == 0;
    if nothing_moved && (refused(&sent) || refused(&received)) {
        Tunnel::Unsupported
    } else {
        Tunnel::Ended
    }
}

/// Runs one direction until it ends, or until the other failed; a failure
/// of its own ends the other.
async fn until_failed(
    pump: impl Future<Output = (u64, io::Result<()>)>,
    failed: &tokio_util::sync::CancellationToken,
) -> (u64, io::Result<()>) {
    let ended = tokio::select! {
        ended = pump => ended,
        () = failed.cancelled() => (0, Ok(())),
    };
    if ended.1.is_err() {
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
/// into `to`, until `from` ends; then `to`'s writing half is shut. The
/// bytes moved, and the error that stopped it if one did (`EINVAL` before
/// any byte: these sockets cannot be spliced).
async fn pump<A: Spliced, B: Spliced>(
    from: &A,
    to: &B,
    pipe: &Pipe,
    meter: &Meter,
) -> (u64, io::Result<()>) {
    let mut moved = 0u64;
    loop {
        let n = match fill(from, pipe).await {
            Ok(0) => {
                let _ = rustix::net::shutdown(to.as_fd(), rustix::net::Shutdown::Write);
                return (moved, Ok(()));
            }
            Ok(n) => n,
            Err(err) => return (moved, Err(err)),
        };
        if !meter.count(n) {
            return (moved, Err(crate::meter::spent()));
        }
        if let Err(err) = drain(pipe, to, n).await {
            return (moved, Err(err));
        }
        moved += n as u64;
    }
}

/// Splices what `from` has (at most the pipe's size) into the empty pipe;
/// 0 at `from`'s end.
async fn fill<A: Spliced>(from: &A, pipe: &Pipe) -> io::Result<usize> {
    loop {
        from.ready(Interest::READABLE).await?;
        match from.attempt(Interest::READABLE, || {
            splice(from.as_fd(), pipe.write.as_fd(), pipe.size)
        }) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            done => return done,
        }
    }
}

/// Splices the `n` bytes the pipe holds into `to`.
async fn drain<B: Spliced>(pipe: &Pipe, to: &B, n: usize) -> io::Result<()> {
    let mut left = n;
    while left > 0 {
        to.ready(Interest::WRITABLE).await?;
        match to.attempt(Interest::WRITABLE, || {
            splice(pipe.read.as_fd(), to.as_fd(), left)
        }) {
            Ok(m) => left -= m,
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
