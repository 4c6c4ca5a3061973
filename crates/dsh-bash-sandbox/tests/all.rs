//! `SandboxBashExecutor` with a recording provider double and real backends.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod suite;
