//! The tools over real executors and a recording double.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod suite;
