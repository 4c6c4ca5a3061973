//! The host-death watchdog in Rust: the program the host re-executes under
//! the name [`NAME`](crate::watchdog) when it knows one (its own binary,
//! set with [`use_watchdog_program`](crate::use_watchdog_program)); the
//! `bash` loop stays the fallback for hosts that know none.
//!
//! It costs nothing while the host lives: it blocks in `poll` on its stdin
//! (the host's messages, `+ PGID` / `- PGID`) and on a pidfd of the host,
//! and wakes only for a message or the host's exit, whichever way the host
//! ends (a command holding the pipe open cannot keep it waiting). Then it
//! kills every recorded process group, writes `cgroup.kill` of the host's
//! parent cgroup, kills every process that still carries the host's
//! environment marker, and removes the cgroup tree. SIGHUP and SIGINT are
//! ignored, as by the script.
//!
//! The same loop serves a watchdog forked from `main` without exec
//! (`watchdog.rs`, [`serve_forked`]): it starts before the host has made
//! its cgroups, so the host tells it them by message (`c PATH`, `v PATH`).
//! Anyone who can write to the pipe could say such a line too (an
//! unconfined command of the same user, through `/proc`), so a path counts
//! only if it is a cgroup (on a cgroup file system) with the host's own
//! directory name.

use std::collections::BTreeSet;
use std::ffi::OsString;
use rustix::event::{PollFd, PollFlags};
use std::path::PathBuf;
use std::time::Duration;

/// What the host hands its watchdog on the command line, after `argv[0]`:
/// its parent cgroup (may be empty), pid, start time and environment
/// marker (`NAME=VALUE`), then its parent cgroups on the v1 hierarchies
/// of its limits (removed after the host's processes are gone).
struct Watch {
    cgroup: Option<PathBuf>,
    v1: Vec<PathBuf>,
    host: libc::pid_t,
    start: Option<u64>,
    marker: Option<Vec<u8>>,
    /// A forked watchdog's: the name the host's cgroups have (they come
    /// by message and must have it); an executed one has them on its
    /// command line and takes none by message.
    by_message: Option<std::ffi::OsString>,
}

impl Watch {
    fn parse(args: &[OsString]) -> Option<Watch> {
        use std::os::unix::ffi::OsStrExt;
        let [cgroup, host, start, marker, v1 @ ..] = args else {
            return None;
        };
        Some(Watch {
            cgroup: (!cgroup.is_empty()).then(|| PathBuf::from(cgroup)),
            v1: v1.iter().map(PathBuf::from).collect(),
            host: host.to_str()?.parse().ok()?,
            start: start.to_str().and_then(|s| s.parse().ok()),
            marker: (!marker.is_empty()).then(|| marker.as_bytes().to_vec()),
            by_message: None,
        })
    }
}

/// Runs the watchdog and exits if this process was started as one
/// (`argv[0]` is the watchdog's name); returns otherwise. Call it first in
/// `main`, before any thread or runtime starts.
pub fn run_watchdog_if_asked() {
    let mut args = std::env::args_os();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(crate::watchdog::NAME)) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    let Some(watch) = Watch::parse(&rest) else {
        eprintln!("{}: expected CGROUP HOST-PID START-TIME MARKER", crate::watchdog::NAME);
        std::process::exit(2);
    };
    let _ = rustix::thread::set_name(crate::watchdog::COMM);
    watch.serve();
    std::process::exit(0);
}

/// Serves as the watchdog of `host` (started at `start`, its commands
/// carrying `marker`) in a process forked from it: its cgroups come by
/// message, each named `cgroup_name`. Returns when the work after the
/// host's death is done.
pub(crate) fn serve_forked(
    host: libc::pid_t,
    start: Option<u64>,
    marker: Vec<u8>,
    cgroup_name: std::ffi::OsString,
) {
    Watch {
        cgroup: None,
        v1: Vec::new(),
        host,
        start,
        marker: Some(marker),
        by_message: Some(cgroup_name),
    }
    .serve();
}

/// True if `path` is a cgroup (on a cgroup file system, v2 or v1) named
/// `name`.
fn is_cgroup_named(path: &std::path::Path, name: &std::ffi::OsStr) -> bool {
    let on_cgroupfs = rustix::fs::statfs(path).is_ok_and(|fs| {
        fs.f_type == libc::CGROUP2_SUPER_MAGIC || fs.f_type == libc::CGROUP_SUPER_MAGIC
    });
    path.file_name() == Some(name) && on_cgroupfs
}

/// What the watchdog was told: the process groups recorded and not
/// forgotten, and the cgroups named (candidates: see [`Watch::serve`]).
#[derive(Debug, Default, PartialEq)]
struct Heard {
    groups: BTreeSet<libc::pid_t>,
    cgroups: Vec<PathBuf>,
    v1: Vec<PathBuf>,
}

impl Watch {
    fn serve(mut self) {
        crate::sys::ignore_hangup_and_interrupt();
        let heard = self.wait_for_death();
        // Only a forked watchdog takes cgroups by message, and only its
        // host's: the first named `c` line that is one, each such `v`.
        if let Some(name) = &self.by_message {
            if self.cgroup.is_none() {
                self.cgroup = heard.cgroups.into_iter().find(|p| is_cgroup_named(p, name));
            }
            self.v1.extend(heard.v1.into_iter().filter(|p| is_cgroup_named(p, name)));
        }
        for group in &heard.groups {
            crate::sys::signal_group(*group, libc::SIGKILL);
        }
        if let Some(cgroup) = &self.cgroup {
            let _ = std::fs::write(cgroup.join("cgroup.kill"), "1");
        }
        if let Some(marker) = &self.marker {
            kill_marked(marker);
        }
        if let Some(cgroup) = &self.cgroup {
            for _ in 0..10 {
                crate::cgroupfs::remove_tree(cgroup);
                if !cgroup.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        for dir in &self.v1 {
            crate::cgroupfs::remove_tree(dir);
        }
    }

    /// Reads the host's messages until it dies (EOF, or its pidfd becomes
    /// readable); what it said by then.
    fn wait_for_death(&self) -> Heard {
        let mut heard = Heard::default();
        let Some(pidfd) = self.host_pidfd() else {
            return heard;
        };
        let mut pending = Vec::new();
        let stdin = std::io::stdin();
        loop {
            let mut fds = [
                PollFd::new(&stdin, PollFlags::IN),
                PollFd::new(&pidfd, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return heard,
            }
            if !fds[1].revents().is_empty() {
                // The host is gone: what it wrote before it died counts.
                drain(&mut pending, &mut heard);
                return heard;
            }
            if fds[0].revents().is_empty() {
                continue;
            }
            if !read_messages(&mut pending, &mut heard) {
                return heard;
            }
        }
    }

    /// A pidfd of the host, if it is still the process that started us (its
    /// start time matches); `None` if it is already gone or its pid reused.
    fn host_pidfd(&self) -> Option<std::os::fd::OwnedFd> {
        let pidfd = crate::sys::pidfd_open(self.host).ok()?;
        let now = crate::scratch::start_time(u32::try_from(self.host).ok()?);
        match (self.start, now) {
            (Some(want), Some(now)) if want != now => None,
            (_, None) => None,
            _ => Some(pidfd),
        }
    }
}

/// One `read` of stdin (unbuffered: nothing may wait in a buffer `poll`
/// does not see) appended to `pending`: the bytes read, or the error
/// (`Ok(0)` at EOF).
fn read_once(pending: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut buf = [0u8; 4096];
    let n = rustix::io::read(std::io::stdin(), &mut buf)?;
    pending.extend_from_slice(&buf[..n]);
    Ok(n)
}

/// Reads what is on stdin now and applies its whole lines; false at EOF or
/// an error.
fn read_messages(pending: &mut Vec<u8>, heard: &mut Heard) -> bool {
    let going = match read_once(pending) {
        Ok(n) => n > 0,
        Err(err) => err.kind() == std::io::ErrorKind::Interrupted,
    };
    apply_lines(pending, heard);
    going
}

/// Applies the whole lines of `pending`, leaving a partial last one.
fn apply_lines(pending: &mut Vec<u8>, heard: &mut Heard) {
    while let Some(end) = pending.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = pending.drain(..=end).collect();
        record(heard, &line);
    }
}

/// Applies every message still in the pipe (without waiting).
fn drain(pending: &mut Vec<u8>, heard: &mut Heard) {
    // Reads return EAGAIN once the pipe is empty.
    let stdin = std::io::stdin();
    if let Ok(flags) = rustix::fs::fcntl_getfl(&stdin) {
        let _ = rustix::fs::fcntl_setfl(&stdin, flags | rustix::fs::OFlags::NONBLOCK);
    }
    while matches!(read_once(pending), Ok(1..)) {}
    apply_lines(pending, heard);
}

/// Applies one message line: `+ PGID` records a group, `- PGID` forgets
/// it (only plain ids above 1); `c PATH` names a candidate for the host's
/// parent cgroup, `v PATH` one for its v1 parents (absolute paths only;
/// which count is decided at the host's death). Anything else is ignored.
fn record(heard: &mut Heard, line: &[u8]) {
    use std::os::unix::ffi::OsStrExt as _;
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if let Some(path) = line.strip_prefix(b"c ").or_else(|| line.strip_prefix(b"v ")) {
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
        if !path.is_absolute() {
            return;
        }
        if line[0] == b'c' {
            heard.cgroups.push(path);
        } else {
            heard.v1.push(path);
        }
        return;
    }
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (Some(op), Some(id)) = (words.next(), words.next()) else {
        return;
    };
    let Ok(id) = id.parse::<libc::pid_t>() else {
        return;
    };
    if id <= 1 {
        return;
    }
    match op {
        "+" => {
            heard.groups.insert(id);
        }
        "-" => {
            heard.groups.remove(&id);
        }
        _ => {}
    }
}

/// SIGKILLs every process whose environment holds `marker` exactly.
fn kill_marked(marker: &[u8]) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let me = std::process::id();
    for pid in entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
    {
        // The process is held by a pidfd before its environment is read:
        // should it end and its pid be reused in between, the kill goes to
        // the process that ended (a no-op), never to the newcomer.
        let Some(process) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        let held = match rustix::process::pidfd_open(process, rustix::process::PidfdFlags::empty()) {
            Ok(held) => Some(held),
            // A kernel before pidfds (5.3): by pid, as it was.
            Err(rustix::io::Errno::NOSYS) => None,
            Err(_) => continue,
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|entry| entry == marker) {
            let _ = match &held {
                Some(held) => rustix::process::pidfd_send_signal(held, rustix::process::Signal::KILL),
                None => rustix::process::kill_process(process, rustix::process::Signal::KILL),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_record_and_forget_plain_groups_above_one() {
        let mut heard = Heard::default();
        for line in ["+ 10\n", "+ 11\n", "- 10\n", "+ 1\n", "+ -5\n", "+ x\n", "junk\n"] {
            record(&mut heard, line.as_bytes());
        }
        assert_eq!(heard.groups.into_iter().collect::<Vec<_>>(), [11]);
    }

    #[test]
    fn messages_name_absolute_candidates_only() {
        let mut heard = Heard::default();
        for line in [
            "c relative/dir\n",
            "c /sys/fs/cgroup/dsh-bash-1 with space\n",
            "c /sys/fs/cgroup/second\n",
            "v /sys/fs/cgroup/pids/dsh-bash-1\n",
            "v \n",
        ] {
            record(&mut heard, line.as_bytes());
        }
        assert_eq!(
            heard.cgroups,
            [
                PathBuf::from("/sys/fs/cgroup/dsh-bash-1 with space"),
                PathBuf::from("/sys/fs/cgroup/second")
            ]
        );
        assert_eq!(heard.v1, [PathBuf::from("/sys/fs/cgroup/pids/dsh-bash-1")]);
    }

    /// What a writer to the pipe could name instead of the host's cgroup:
    /// a directory of the host's name elsewhere, a cgroup of another name.
    #[test]
    fn only_a_cgroup_with_the_hosts_name_counts() {
        let dir = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::new("dsh-bash-42.7.4026531836");
        let planted = dir.path().join(name);
        std::fs::create_dir(&planted).unwrap();
        assert!(!is_cgroup_named(&planted, name), "not on a cgroup file system");
        let root = std::path::Path::new("/sys/fs/cgroup");
        assert!(!is_cgroup_named(root, name), "a cgroup of another name");
        let own = std::path::Path::new("/proc/self/cgroup");
        let mine = std::fs::read_to_string(own).unwrap_or_default();
        let line = mine.lines().find(|l| l.starts_with("0::"));
        // This process's own v2 cgroup, unless it is the root.
        let relative = line
            .and_then(|l| l.strip_prefix("0::"))
            .map(|r| r.trim_start_matches('/'))
            .filter(|r| !r.is_empty());
        if let Some(relative) = relative {
            let hybrid = root.join("unified");
            let v2 = if hybrid.is_dir() { hybrid } else { root.to_owned() };
            let cgroup = v2.join(relative);
            if cgroup.is_dir() {
                let its_name = cgroup.file_name().unwrap();
                assert!(is_cgroup_named(&cgroup, its_name), "{}", cgroup.display());
            }
        }
    }

    #[test]
    fn the_command_line_is_cgroup_pid_start_marker() {
        let args: Vec<OsString> = ["", "42", "7", "DSH_BASH_HOST=42.7"].map(OsString::from).into();
        let watch = Watch::parse(&args).unwrap();
        assert_eq!((watch.cgroup, watch.host, watch.start), (None, 42, Some(7)));
        assert_eq!(watch.marker.as_deref(), Some(&b"DSH_BASH_HOST=42.7"[..]));
        assert!(Watch::parse(&args[..3]).is_none());
        let mut with_v1 = args.clone();
        with_v1.push("/sys/fs/cgroup/pids/dsh-bash-42".into());
        assert_eq!(
            Watch::parse(&with_v1).unwrap().v1,
            vec![PathBuf::from("/sys/fs/cgroup/pids/dsh-bash-42")]
        );
    }
}
