//! What a command changed in its workspace, as facts.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The files a command created, modified or deleted under its workspace
/// while it ran, as paths relative to the workspace (a directory ends in
/// `/`). A file created and deleted again is not listed; a file deleted
/// and made again is `modified`. Files under a directory whose contents
/// are not followed one by one (`node_modules/`, `target/`, `.git/`…) are
/// listed as that directory.
///
/// The changes are the workspace's, not the command's alone: what another
/// process (a command beside it, the user's editor) changed there at the
/// same time is listed too, and `beside` says when other commands ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceChanges {
    /// The workspace watched (canonical path).
    pub workspace: PathBuf,
    /// Files and directories that did not exist before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<String>,
    /// Files whose contents or attributes changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modified: Vec<String>,
    /// Files and directories that are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<String>,
    /// How many more changed paths there were than are listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: u64,
    /// Other commands that ran in the workspace at the same time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub beside: u64,
    /// Why the list may be incomplete (too many changes to follow, a
    /// directory the watch limit left out); `None` when it is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl WorkspaceChanges {
    /// True if nothing changed (and nothing is unknown).
    pub fn is_empty(&self) -> bool {
        self.created.is_empty()
            && self.modified.is_empty()
            && self.deleted.is_empty()
            && self.more == 0
            && self.incomplete.is_none()
    }
}
