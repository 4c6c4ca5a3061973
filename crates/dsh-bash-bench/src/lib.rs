//! The dsh-bash benchmark suite: every scenario is measured side by side
//! with a physical baseline in the same run, repeated, and printed as one
//! table (median, spread, baseline, ratio, peak RSS). It is a benchmark,
//! not a test: nothing here passes or fails.
//!
//! # Example
//!
//! ```no_run
//! // no_run: the suite takes minutes and wants a quiet machine.
//! # async fn demo() {
//! let options = dsh_bash_bench::Options::default();
//! let rows = dsh_bash_bench::run_all(&options).await;
//! print!("{}", dsh_bash_bench::table(&rows));
//! # }
//! ```
//!
//! # Platform support
//!
//! Linux (reads `/proc/self/status`, resets the RSS peak through
//! `/proc/self/clear_refs`).
//!
//! # Caveats
//!
//! Figures are wall-clock times on whatever else the machine is doing;
//! compare ratios from one run, not absolute numbers across machines.
// Functions stay under 80 lines (clippy.toml); tests may run longer.
#![cfg_attr(not(test), deny(clippy::too_many_lines))]
#![forbid(unsafe_code)]

mod cli;
mod container;
mod http_client;
mod mcp_client;
mod measure;
mod network;
mod remote;
mod rules;
mod scenarios;
mod shell;
mod terminal;
mod warm;

pub use measure::{table, Row};
pub use scenarios::{run_all, Options};
