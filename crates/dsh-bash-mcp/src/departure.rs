//! A client that goes away mid-call: the HTTP gate marks each request of a
//! 2025-era session with a [`Departure`] and watches the body of its
//! response; dropped before its end (hyper drops it when the connection
//! closes), the request's client is gone. A foreground `bash` call that
//! finds its client gone when its command ends does not throw the result
//! away: the session keeps it ([`Kept`]), tells the model in the next
//! tool result, and hands it out through `bash_output`. Best effort: a
//! client gone while the result itself was being written (after the call
//! ended), or a peer that vanished without closing its connection (seen
//! only when TCP gives up), is not noticed.
//!
//! (Under 2026-07-28 a closed stream is how a client cancels: the protocol
//! library cancels the handler, and the command is stopped.)

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use dsh_tool_bash::{ToolError, ToolOutput};
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, SizeHint};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use serde_json::Value;

/// Whether the client of one request went away before its response ended.
#[derive(Clone, Debug, Default)]
pub(crate) struct Departure(Arc<AtomicBool>);

impl Departure {
    /// The client of the call in `context` is gone (false off HTTP).
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> bool {
        context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Departure>())
            .is_some_and(|departure| departure.0.load(Ordering::Acquire))
    }
}

type Boxed = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// A response body that marks its [`Departure`] when dropped unfinished.
/// It also holds the request's [`Busy`](super::idle::Busy) mark: the
/// session has a request in flight until its answer ends.
pub(crate) struct Watched {
    inner: Boxed,
    departure: Departure,
    ended: bool,
    _busy: Option<super::idle::Busy>,
}

impl Watched {
    /// `body`, watched for `departure`, holding `busy` while it lasts.
    pub(crate) fn wrap(
        body: Boxed,
        departure: Departure,
        busy: Option<super::idle::Busy>,
    ) -> Boxed {
        Watched {
            inner: body,
            departure,
            ended: false,
            _busy: busy,
        }
        .boxed()
    }
}

impl Body for Watched {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.ended && !self.inner.is_end_stream() {
            self.departure.0.store(true, Ordering::Release);
            tracing::warn!("a client went away before the answer to its request");
        }
    }
}

/// Results kept for a session whose client went away, at most.
pub(crate) const MAX_KEPT: usize = 16;

/// The prefix of a kept result's id (`kept-1`), which `bash_output` takes.
pub(crate) const KEPT_PREFIX: &str = "kept-";

type Outcome = Result<ToolOutput, ToolError>;

/// A kept outcome: the output, or the error's words.
type KeptOutcome = Result<ToolOutput, String>;

/// The results of one session's calls whose client went away: each can be
/// read as long as it is kept (the newest [`MAX_KEPT`]), so a read whose
/// own client goes away loses nothing either.
#[derive(Default)]
pub(crate) struct Kept {
    results: Mutex<KeptResults>,
}

/// The kept results, oldest first, and how many were ever kept (ids are
/// numbered under the same lock, so the oldest always goes first).
#[derive(Default)]
struct KeptResults {
    kept: u64,
    results: VecDeque<(String, KeptOutcome)>,
}

impl Kept {
    /// Keeps `result` (the oldest goes past [`MAX_KEPT`]); its id.
    pub(crate) fn keep(&self, result: Outcome) -> String {
        let mut guard = self.results.lock().unwrap_or_else(PoisonError::into_inner);
        guard.kept += 1;
        let id = format!("{KEPT_PREFIX}{}", guard.kept);
        let results = &mut guard.results;
        if results.len() >= MAX_KEPT {
            results.pop_front();
        }
        results.push_back((id.clone(), result.map_err(|err| err.to_string())));
        id
    }

    /// The kept result `id`, as `bash_output` reports a settled task:
    /// `task_id` the kept id, `status` `completed` (how it ended is in the
    /// text's markers and the exit code and signal fields).
    pub(crate) fn read(&self, id: &str) -> Option<Outcome> {
        let guard = self.results.lock().unwrap_or_else(PoisonError::into_inner);
        let (_, outcome) = guard.results.iter().find(|(kept, _)| kept == id)?;
        let outcome = outcome.clone();
        drop(guard);
        Some(
            outcome
                .map(|mut output| {
                    if let Value::Object(facts) = &mut output.structured {
                        facts.remove("leftovers_stopped");
                        facts.insert("status".into(), Value::from("completed"));
                        facts.insert("task_id".into(), Value::from(id));
                    }
                    output
                })
                .map_err(ToolError::from),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[test]
    fn a_body_dropped_unfinished_marks_its_departure() {
        /// A stream that has not ended (an SSE stream waiting for its
        /// result).
        struct Open;
        impl Body for Open {
            type Data = Bytes;
            type Error = std::convert::Infallible;
            fn poll_frame(
                self: Pin<&mut Self>,
                _cx: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
                Poll::Pending
            }
        }
        let departure = Departure::default();
        drop(Watched::wrap(Open.boxed(), departure.clone(), None));
        assert!(departure.0.load(Ordering::Acquire));
        // A body read to its end is not a departure.
        let finished = Departure::default();
        let mut body = Watched::wrap(
            Full::new(Bytes::from("done")).boxed(),
            finished.clone(),
            None,
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async { while body.frame().await.is_some() {} });
        drop(body);
        assert!(!finished.0.load(Ordering::Acquire));
    }

    #[test]
    fn kept_results_are_read_while_kept_and_bounded() {
        let kept = Kept::default();
        let ran = || {
            Ok(ToolOutput {
                text: "hi\n[exit code: 3]".into(),
                structured: serde_json::json!({"exit_code": 3, "leftovers_stopped": 1, "status": "exit 3", "text": "hi"}),
            })
        };
        let ids: Vec<String> = (0..MAX_KEPT + 1).map(|_| kept.keep(ran())).collect();
        assert_eq!(ids[0], "kept-1");
        assert!(kept.read("kept-1").is_none(), "the oldest went");
        let read = kept.read("kept-2").unwrap().unwrap();
        assert_eq!(
            read.structured,
            serde_json::json!({"exit_code": 3, "status": "completed", "task_id": "kept-2", "text": "hi"})
        );
        assert!(kept.read("kept-2").is_some(), "read again while kept");
    }
}
