//! The command's side of one connection: every byte counted against the
//! door's budget and stamped for the idle timeout, and the first byte read
//! to tell SOCKS5 (`0x05`) from HTTP.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use crate::DoorState;

/// When the connection last moved a byte, in milliseconds since `start`.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    /// Returns once nothing moved for `idle`.
    async fn until_idle(&self, idle: std::time::Duration) {
        loop {
            let last = std::time::Duration::from_millis(self.last.load(Ordering::Relaxed));
            let quiet = self.start.elapsed().saturating_sub(last);
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    }
}

/// A stream whose bytes are metered; a byte read before is handed out
/// first (the one that told the protocol).
pub(crate) struct Metered<S> {
    inner: S,
    first: Option<u8>,
    state: Arc<DoorState>,
    activity: Arc<Activity>,
}

pub(crate) fn spent() -> io::Error {
    io::Error::other("the command's network byte budget is spent")
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(byte) = self.first.take() {
            buf.put_slice(&[byte]);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len() - before;
                this.activity.touch();
                if n > 0 && !this.state.spend(n) {
                    return Poll::Ready(Err(spent()));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.activity.touch();
                if n > 0 && !this.state.spend(n) {
                    return Poll::Ready(Err(spent()));
                }
                Poll::Ready(Ok(n))
            }
            other => other,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a connection's bytes count against once they no longer pass
/// through [`Metered`] (a spliced tunnel): the command's budget and the
/// connection's activity.
pub(crate) struct Meter {
    state: Arc<DoorState>,
    activity: Arc<Activity>,
}

impl Meter {
    /// Counts `n` bytes moved either way; false once the budget is spent.
    pub(crate) fn count(&self, n: usize) -> bool {
        self.activity.touch();
        self.state.spend(n)
    }

    /// Notes that bytes moved (already counted).
    pub(crate) fn touch(&self) {
        self.activity.touch();
    }
}

impl<S> Metered<S> {
    /// The stream and what its bytes count against (a byte peeked and not
    /// yet read back is lost: take it only after the handshake).
    pub(crate) fn into_parts(self) -> (S, Meter) {
        let meter = Meter {
            state: self.state,
            activity: self.activity,
        };
        (self.inner, meter)
    }

    /// The stream metered again.
    pub(crate) fn from_parts(inner: S, meter: Meter) -> Metered<S> {
        Metered {
            inner,
            first: None,
            state: meter.state,
            activity: meter.activity,
        }
    }
}

/// Serves one connection of the door until it ends, idles out or the door
/// closes.
pub(crate) async fn serve<S>(stream: S, state: Arc<DoorState>)
where
    S: AsyncRead + AsyncWrite + crate::splice::Spliced + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    activity.touch();
    let mut metered = Metered {
        inner: stream,
        first: None,
        state: Arc::clone(&state),
        activity: Arc::clone(&activity),
    };
    let idle = state.limits.idle;
    let work = async move {
        let Ok(first) = metered.read_u8().await else {
            return;
        };
        if first == 5 {
            crate::socks::serve(metered, state).await;
        } else {
            metered.first = Some(first);
            crate::http::serve(metered, state).await;
        }
    };
    tokio::select! {
        () = work => {}
        () = activity.until_idle(idle) => {
            tracing::debug!(target: "dsh_net_proxy", "closed an idle connection");
        }
    }
}
