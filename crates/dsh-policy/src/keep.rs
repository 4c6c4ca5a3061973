//! An approval "always": the rule appended to the user's policy file.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use dsh_rules::Rule;

/// Where a kept rule went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The file.
    pub path: PathBuf,
}

/// Appends `rule` to the policy file at `path` (made, with its directory,
/// if missing; owner-only), after a comment saying when it was approved
/// and for which workspace (locked against another keeper, read and
/// appended through one descriptor), unless the file would then not read
/// as a policy file.
pub fn keep_rule(path: &Path, rule: &Rule, workspace: Option<&Path>) -> std::io::Result<Kept> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .read(true)
        .mode(0o600)
        .open(path)?;
    // One keeper at a time (another server, another answer); what is read
    // is the file this descriptor appends to.
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
    let mut existing = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut existing)?;
    let mut text = String::new();
    if !existing.is_empty() && !existing.ends_with(b"\n") {
        text.push('\n');
    }
    let place = workspace.map_or_else(
        || "no workspace".to_owned(),
        |w| format!("the workspace {}", w.display()),
    );
    let comment = format!(
        "Approved \"always\" by a person on {} for {place}, as proposed with a call",
        utc_now()
    );
    text.push_str(&crate::show::rule_text(rule, Some(&comment)));
    // Never leave the file unreadable: the whole of it must still read.
    let whole = format!("{}{text}", String::from_utf8_lossy(&existing));
    if let Err(err) = toml::from_str::<crate::doc::Doc>(&whole) {
        return Err(std::io::Error::other(format!(
            "{} would not read as a policy file with the rule added ({}); fix it first",
            path.display(),
            err.message().trim()
        )));
    }
    file.write_all(text.as_bytes())?;
    file.sync_data()?;
    Ok(Kept {
        path: path.to_owned(),
    })
}

/// Now as `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}
