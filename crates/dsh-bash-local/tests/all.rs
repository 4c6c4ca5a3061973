//! Real-process tests of `LocalBashExecutor`, one file per behavior.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod suite;
