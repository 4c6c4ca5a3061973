use std::fmt;

use serde::{Deserialize, Serialize};

/// The id of a background task (`bash-1`, `bash-2`, … per executor).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BashTaskId(String);

impl BashTaskId {
    /// Wraps an id string (as a model or client sent it back).
    pub fn new(id: impl Into<String>) -> Self {
        BashTaskId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BashTaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An opaque isolation key: the session that owns a background task.
///
/// Executors store it and hand it back verbatim; they never interpret it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// Wraps an owner key.
    pub fn new(token: impl Into<String>) -> Self {
        OwnerToken(token.into())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
