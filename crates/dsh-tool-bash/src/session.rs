use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use dsh_bash::{OwnerToken, SandboxMode};
use serde_json::Value;

/// The event kind that sets a session's standing sandbox mode.
pub const SANDBOX_MODE_EVENT: &str = "bash/sandbox-mode";

/// One entry of a session's event log.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionEvent {
    /// What happened (`bash/sandbox-mode`, …).
    pub kind: String,
    /// The event's data (`{"mode": "workspace-write"}` for a mode event).
    pub data: Value,
}

/// Receives completion notices for the background tasks a session owns.
pub type NoticeSink = Arc<dyn Fn(&str) + Send + Sync>;

/// What a host knows about one agent session: its id (the owner of its
/// background tasks), its cwd, its event log, and where its notices go.
pub struct Session {
    id: String,
    cwd: Option<PathBuf>,
    /// Where the last foreground command that started in the session's
    /// directory ended, when the tool layer follows `cd`
    /// ([`crate::BashTools::with_persist_cwd`]).
    followed: Mutex<Option<PathBuf>>,
    events: Mutex<Vec<SessionEvent>>,
    notices: Option<NoticeSink>,
    ended: AtomicBool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A live session with this id and cwd (`None` = the executor default).
    pub fn new(id: impl Into<String>, cwd: Option<PathBuf>) -> Self {
        Session {
            id: id.into(),
            cwd,
            followed: Mutex::new(None),
            events: Mutex::new(Vec::new()),
            notices: None,
            ended: AtomicBool::new(false),
        }
    }

    /// Sends this session's completion notices to `sink`.
    pub fn with_notices(mut self, sink: NoticeSink) -> Self {
        self.notices = Some(sink);
        self
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session's configured cwd, if it has one.
    pub fn cwd(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// Where the session's next call starts: the directory its last
    /// command ended in, when followed, else its configured cwd.
    pub fn current_dir(&self) -> Option<PathBuf> {
        self.followed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .or_else(|| self.cwd.clone())
    }

    /// Sets (or, with `None`, clears) the directory followed.
    pub(crate) fn follow(&self, dir: Option<PathBuf>) {
        *self.followed.lock().unwrap_or_else(PoisonError::into_inner) = dir;
    }

    /// The isolation key of this session's background tasks.
    pub fn owner(&self) -> OwnerToken {
        OwnerToken::new(self.id.clone())
    }

    /// Appends an event to the log.
    pub fn append(&self, event: SessionEvent) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// A copy of the event log.
    pub fn events(&self) -> Vec<SessionEvent> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Marks the session ended: it receives no more notices.
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
    }

    /// True if and only if the session has not ended.
    pub fn is_live(&self) -> bool {
        !self.ended.load(Ordering::Acquire)
    }

    pub(crate) fn notify(&self, text: &str) {
        if let (true, Some(sink)) = (self.is_live(), &self.notices) {
            sink(text);
        }
    }
}

/// The standing sandbox mode of an event log: the mode of the last valid
/// `bash/sandbox-mode` event, if any.
pub fn effective_sandbox_mode(events: &[SessionEvent]) -> Option<SandboxMode> {
    events
        .iter()
        .filter(|event| event.kind == SANDBOX_MODE_EVENT)
        .filter_map(|event| event.data.get("mode")?.as_str()?.parse().ok())
        .next_back()
}

/// Sets the session's standing sandbox mode (the one write path).
pub fn set_sandbox_mode(session: &Session, mode: SandboxMode) {
    session.append(SessionEvent {
        kind: SANDBOX_MODE_EVENT.into(),
        data: serde_json::json!({ "mode": mode.as_str() }),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_mode_event_wins_and_others_are_ignored() {
        let session = Session::new("s", None);
        assert_eq!(effective_sandbox_mode(&session.events()), None);
        set_sandbox_mode(&session, SandboxMode::WorkspaceWrite);
        session.append(SessionEvent {
            kind: "other".into(),
            data: serde_json::json!({"mode": "read-only"}),
        });
        session.append(SessionEvent {
            kind: SANDBOX_MODE_EVENT.into(),
            data: serde_json::json!({"mode": "bogus"}),
        });
        assert_eq!(
            effective_sandbox_mode(&session.events()),
            Some(SandboxMode::WorkspaceWrite)
        );
        set_sandbox_mode(&session, SandboxMode::ReadOnly);
        assert_eq!(
            effective_sandbox_mode(&session.events()),
            Some(SandboxMode::ReadOnly)
        );
    }
}
