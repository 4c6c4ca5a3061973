//! A session's working directory following `cd`
//! ([`crate::BashTools::with_persist_cwd`]): where a command ended, as its
//! shell reported it, checked against the allowed tree before the next
//! call may start there.

use std::path::{Path, PathBuf};

use dsh_bash::BashRunResult;

use crate::Session;

/// Where a session's directory went after a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Moved {
    /// Where the next call starts.
    now: PathBuf,
    /// Where the command ended, when that was outside the allowed tree
    /// (and `now` is the configured directory again).
    outside: Option<(PathBuf, PathBuf)>,
}

impl Moved {
    /// Where the next call starts.
    pub(crate) fn now(&self) -> &Path {
        &self.now
    }

    /// The one line the model reads.
    pub(crate) fn line(&self) -> String {
        match &self.outside {
            None => format!("[cwd: {}]", self.now.display()),
            Some((ended, tree)) => format!(
                "[cwd: the command ended in {}, outside the workspace {}; the next call starts in {}]",
                ended.display(),
                tree.display(),
                self.now.display()
            ),
        }
    }
}

/// Follows where `result`'s shell ended, for the session's next call; the
/// change, if any. A directory that is gone, or a report that names no
/// directory (a command can write there itself), changes nothing. The
/// file system is asked off the runtime threads.
pub(crate) async fn settle(
    session: &Session,
    started: &Path,
    result: &BashRunResult,
) -> Option<Moved> {
    let reported = result.shell.as_ref()?.final_cwd.clone()?;
    let workspace = result
        .sandbox
        .as_ref()
        .filter(|facts| facts.mode.confines())
        .and_then(|facts| facts.workspace.clone());
    let started = started.to_owned();
    let (ended, started, tree) = tokio::task::spawn_blocking(move || {
        let ended = std::fs::canonicalize(reported)
            .ok()
            .filter(|dir| dir.is_dir())?;
        let started = std::fs::canonicalize(&started).unwrap_or(started);
        let tree = workspace.map(|ws| std::fs::canonicalize(&ws).unwrap_or(ws));
        Some((ended, started, tree))
    })
    .await
    .ok()??;
    if let Some(tree) = tree.filter(|tree| !ended.starts_with(tree)) {
        session.follow(None);
        let now = session.cwd().map_or_else(|| tree.clone(), Path::to_owned);
        return Some(Moved {
            now,
            outside: Some((ended, tree)),
        });
    }
    if ended == started {
        return None;
    }
    session.follow(Some(ended.clone()));
    Some(Moved {
        now: ended,
        outside: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_where_the_next_call_starts() {
        let moved = Moved {
            now: "/ws/sub".into(),
            outside: None,
        };
        assert_eq!(moved.line(), "[cwd: /ws/sub]");
        let outside = Moved {
            now: "/ws".into(),
            outside: Some(("/".into(), "/ws".into())),
        };
        assert_eq!(
            outside.line(),
            "[cwd: the command ended in /, outside the workspace /ws; the next call starts in /ws]"
        );
    }
}
