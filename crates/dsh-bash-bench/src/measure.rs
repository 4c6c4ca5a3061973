//! Timing, repetition, memory and the printed table.

use std::future::Future;
use std::time::{Duration, Instant};

/// Median and spread (min, max) of repeated measurements.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// The median.
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Stats {
    /// Statistics of `values` (at least one).
    pub fn of(mut values: Vec<f64>) -> Stats {
        values.sort_by(f64::total_cmp);
        let median = if values.is_empty() {
            f64::NAN
        } else if values.len() % 2 == 1 {
            values[values.len() / 2]
        } else {
            (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0
        };
        Stats {
            median,
            min: values.first().copied().unwrap_or(f64::NAN),
            max: values.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    /// What was measured.
    pub scenario: String,
    /// Our figure.
    pub ours: Stats,
    /// The baseline's figure (same unit), if the scenario has one.
    pub baseline: Option<Stats>,
    /// The unit of both figures (`ms`, `ms/cmd`, `MiB/s`, …).
    pub unit: &'static str,
    /// Peak RSS growth of this process during the scenario, in MiB.
    pub peak_rss_mib: Option<f64>,
    /// Anything else worth knowing (targets, checks).
    pub note: String,
}

impl Row {
    /// A row that could not be measured, and why.
    pub fn skipped(scenario: &str, unit: &'static str, why: impl std::fmt::Display) -> Row {
        Row {
            scenario: scenario.into(),
            ours: Stats::of(vec![f64::NAN]),
            baseline: None,
            unit,
            peak_rss_mib: None,
            note: format!("skipped: {why}"),
        }
    }

    /// `ours` beside `baseline`, in `unit`, with `note`.
    pub fn against(
        scenario: &str,
        (ours, baseline): (Vec<f64>, Vec<f64>),
        unit: &'static str,
        note: String,
    ) -> Row {
        Row {
            scenario: scenario.into(),
            ours: Stats::of(ours),
            baseline: Some(Stats::of(baseline)),
            unit,
            peak_rss_mib: None,
            note,
        }
    }

    /// ours / baseline, by medians.
    pub fn ratio(&self) -> Option<f64> {
        self.baseline.map(|b| self.ours.median / b.median)
    }
}

fn figure(stats: &Stats) -> String {
    format!("{:.3} ({:.3}–{:.3})", stats.median, stats.min, stats.max)
}

/// The table, one row per scenario.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<46} | {:<30} | {:<30} | {:<7} | {:<9} | {}\n",
        "scenario",
        "ours: median (min–max)",
        "baseline: median (min–max)",
        "ratio",
        "peak RSS",
        "notes"
    ));
    out.push_str(&format!("{}\n", "-".repeat(160)));
    for row in rows {
        let ours = format!("{} {}", figure(&row.ours), row.unit);
        let base = row.baseline.map_or_else(
            || "-".to_owned(),
            |b| format!("{} {}", figure(&b), row.unit),
        );
        let ratio = row
            .ratio()
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}x"));
        let rss = row
            .peak_rss_mib
            .map_or_else(|| "-".to_owned(), |m| format!("{m:.1} MiB"));
        out.push_str(&format!(
            "{:<46} | {:<30} | {:<30} | {:<7} | {:<9} | {}\n",
            row.scenario, ours, base, ratio, rss, row.note
        ));
    }
    out
}

/// Peak resident set size of this process so far, in KiB.
pub fn peak_rss_kib() -> u64 {
    status_field("VmHWM:")
}

/// Current resident set size, in KiB.
pub fn rss_kib() -> u64 {
    status_field("VmRSS:")
}

fn status_field(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix(name)?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

/// Resets the RSS peak to the current RSS (Linux 4.0+), so a scenario's
/// peak is its own.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

/// Milliseconds in a duration.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Times an async block in milliseconds.
pub async fn time_ms<Fut: Future>(work: Fut) -> (f64, Fut::Output) {
    let started = Instant::now();
    let out = work.await;
    (ms(started.elapsed()), out)
}
