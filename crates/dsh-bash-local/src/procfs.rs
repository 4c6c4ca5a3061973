//! The process table as `/proc` shows it: the fields of
//! `/proc/<pid>/stat` containment and adoption read.

use std::fs;

/// One line of `/proc/<pid>/stat`, the fields we need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcEntry {
    pub(crate) pid: libc::pid_t,
    pub(crate) ppid: libc::pid_t,
    pub(crate) pgrp: libc::pid_t,
    /// The session: every command starts one of its own (`setsid`), so a
    /// process in the host's session is none of theirs.
    pub(crate) session: libc::pid_t,
    /// True if and only if the process has exited (a zombie awaiting its reaper).
    pub(crate) exited: bool,
}

/// Parses `/proc/<pid>/stat` (the command name may contain spaces and parens).
fn parse_stat(pid: libc::pid_t, stat: &str) -> Option<ProcEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    Some(ProcEntry {
        pid,
        ppid,
        pgrp,
        session,
        exited: matches!(state, "Z" | "X"),
    })
}

/// Process `pid` as `/proc/<pid>/stat` shows it; `None` once it is gone.
pub(crate) fn entry(pid: libc::pid_t) -> Option<ProcEntry> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &stat)
}

/// Every process visible in `/proc` (those that vanish mid-scan are skipped).
pub(crate) fn scan() -> Vec<ProcEntry> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|dirent| entry(dirent.ok()?.file_name().to_str()?.parse().ok()?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_the_name() {
        let entry = parse_stat(42, "42 (we ird) (x) S 7 42 42 0 -1 4194560").unwrap();
        assert_eq!(
            entry,
            ProcEntry {
                pid: 42,
                ppid: 7,
                pgrp: 42,
                session: 42,
                exited: false,
            }
        );
        assert!(parse_stat(9, "9 (sh) Z 1 9 9 0").unwrap().exited);
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn scan_sees_this_process() {
        let me = libc::pid_t::try_from(std::process::id()).unwrap();
        assert!(scan().iter().any(|entry| entry.pid == me));
    }
}
