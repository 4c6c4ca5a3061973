//! Signal names as results report them (`SIGTERM`, `SIGRT6`), from this
//! platform's own numbers (`libc`), not a table of hard-coded ones.

/// The named signals of this platform.
const SIGNALS: &[(libc::c_int, &str)] = &[
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTRAP, "SIGTRAP"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGKILL, "SIGKILL"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGPIPE, "SIGPIPE"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGTERM, "SIGTERM"),
    #[cfg(target_os = "linux")]
    (libc::SIGSTKFLT, "SIGSTKFLT"),
    (libc::SIGCHLD, "SIGCHLD"),
    (libc::SIGCONT, "SIGCONT"),
    (libc::SIGSTOP, "SIGSTOP"),
    (libc::SIGTSTP, "SIGTSTP"),
    (libc::SIGTTIN, "SIGTTIN"),
    (libc::SIGTTOU, "SIGTTOU"),
    (libc::SIGURG, "SIGURG"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGWINCH, "SIGWINCH"),
    (libc::SIGIO, "SIGIO"),
    #[cfg(target_os = "linux")]
    (libc::SIGPWR, "SIGPWR"),
    (libc::SIGSYS, "SIGSYS"),
];

/// The first real-time signal as this process's C library numbers it.
#[cfg(target_os = "linux")]
fn rt_min() -> libc::c_int {
    libc::SIGRTMIN()
}

#[cfg(not(target_os = "linux"))]
fn rt_min() -> libc::c_int {
    libc::c_int::MAX
}

/// The name of signal `number` (15 → `SIGTERM`; a real-time one as
/// `SIGRT<offset>`, 40 → `SIGRT6` with glibc).
pub fn signal_name(number: i32) -> String {
    SIGNALS.iter().find(|(n, _)| *n == number).map_or_else(
        || format!("SIGRT{}", number - rt_min()),
        |(_, name)| (*name).to_owned(),
    )
}

/// The number of a signal name as [`signal_name`] produces it
/// (`SIGTERM` → 15).
pub fn signal_number(name: &str) -> Option<i32> {
    if let Some((number, _)) = SIGNALS.iter().find(|(_, n)| *n == name) {
        return Some(*number);
    }
    let offset = name.strip_prefix("SIGRT")?.parse::<i32>().ok()?;
    Some(rt_min() + offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_round_trip() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(rt_min() + 6), "SIGRT6");
        for n in 1..=64 {
            assert_eq!(signal_number(&signal_name(n)), Some(n), "{n}");
        }
    }
}
