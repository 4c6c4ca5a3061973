//! The host-death watchdog: one per host process, in a process group of
//! its own, that outlives the host for one purpose: when the host dies
//! (even by SIGKILL) it kills what the host's commands left. It is the
//! host's own binary run as the watchdog (`watchdog_main.rs`, blocking on a
//! pidfd of the host): forked from `main` while the process had one thread
//! ([`crate::fork_watchdog`], no exec: the `dsh-bash` binary does so for
//! `run` and `mcp`), else executed again when the host named a program with
//! [`crate::use_watchdog_program`], else a tiny `bash` loop. A watchdog
//! that dies is replaced by an executed one (the program named, else the
//! `bash` loop: the host has threads by then).
//!
//! It learns of the death by EOF on its stdin, a pipe whose write end only
//! the host holds and never gives up: a dedicated writer thread owns it and
//! writes in blocking mode, while callers only queue messages in memory. So
//! a watchdog that is merely slow or stopped makes the queue grow, never
//! the pipe drop (EOF means death, nothing else), and nothing is killed.
//! The writer also reaps the watchdog: if it dies or stops listening, that
//! is logged and a new one is started and told every group still recorded.
//!
//! Under cgroups the watchdog needs no message at all: at EOF it writes
//! `cgroup.kill` of the host's parent cgroup (every process of every task,
//! escapees included) and removes it. For process-tree commands it SIGKILLs
//! every process group still recorded.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::adopt::Adoption;
use crate::sys;

/// `$1`: the host's parent cgroup (may be empty), killed whole at host
/// death, then removed with everything below it. `$2` and `$3`: the host's
/// pid and start time. `$4`: the host's environment marker; at host death
/// every process still carrying it is killed too (escapees of the
/// process-tree containment that no recorded group holds). The host's death is seen either way: EOF on stdin,
/// or (checked every second) the host pid gone or reused, so a process that
/// keeps the pipe open cannot keep the watchdog waiting. SIGHUP (sent when
/// the host dies while the watchdog is stopped) and SIGINT are ignored;
/// only plain group ids above 1 are ever recorded.
const SCRIPT: &str = r#"trap '' HUP INT
host_alive() {
  local want=$1 stat
  stat=$(< "/proc/$2/stat") 2>/dev/null || return 1
  [ -n "$stat" ] || return 1
  [ -z "$want" ] && return 0
  stat=${stat##*) }
  set -- $stat
  [ "${20}" = "$want" ]
}
declare -A groups
while :; do
  if read -r -t 1 op id; then
    [[ $id =~ ^[0-9]+$ ]] && (( id > 1 )) || continue
    case $op in
      +) groups[$id]=1 ;;
      -) unset "groups[$id]" ;;
    esac
  elif (( $? > 128 )); then
    host_alive "$3" "$2" || break
  else
    break
  fi
done
for id in "${!groups[@]}"; do kill -KILL -- "-$id"; done
[ -n "$1" ] && echo 1 > "$1/cgroup.kill"
# What no group or cgroup held: every process that still carries the host's
# marker in its environment (descendants of its commands that kept it).
if [ -n "$4" ]; then
  for proc in /proc/[0-9]*; do
    while IFS= read -r -d '' entry; do
      if [ "$entry" = "$4" ]; then kill -KILL "${proc#/proc/}"; break; fi
    done < "$proc/environ"
  done 2>/dev/null
fi
if [ -n "$1" ]; then
  for try in 1 2 3 4 5 6 7 8 9 10; do
    find "$1" -depth -mindepth 1 -type d -exec rmdir {} + 2>/dev/null
    rmdir "$1" 2>/dev/null && break
    sleep 0.1
  done
fi
"#;

/// The value of the environment entry every command of this host carries:
/// the host's pid and start time, unique to this host.
fn host_marker() -> String {
    let host = std::process::id();
    marker_of(host, crate::scratch::start_time(host))
}

/// The marker of host `host` started at `start`.
fn marker_of(host: u32, start: Option<u64>) -> String {
    format!("{host}.{}", start.unwrap_or(0))
}

/// The marker's name.
const MARKER: &str = "DSH_BASH_HOST";

/// The name the watchdog runs under (`$0`), so it can be found.
pub(crate) const NAME: &str = "dsh-bash-watchdog";

/// Its process name (`comm`, 15 bytes at most), set by the Rust watchdog
/// whether forked or executed.
pub(crate) const COMM: &std::ffi::CStr = c"dsh-bash-watchd";

/// How often the writer checks that its watchdog still lives (and replaces
/// a lost one).
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// The watchdog's stdin pipe size: small, so a stalled watchdog fills it
/// quickly and the queue (not the pipe) absorbs the rest.
const PIPE_BYTES: libc::c_int = 4096;

enum Message {
    Record(libc::pid_t),
    Forget(libc::pid_t),
}

/// What the watchdog kills and removes at host death, beside the groups
/// it is told: the host's parent cgroup (if cgroups hold its commands) and
/// its parents on the v1 hierarchies of its limits.
#[derive(Clone, Debug, Default)]
pub(crate) struct Watched {
    pub(crate) cgroup: Option<std::path::PathBuf>,
    pub(crate) v1: Vec<std::path::PathBuf>,
}

/// The host's link to its watchdog: the writer's queue (none where the
/// writer could not start) and the marker its commands carry. Cheap to
/// clone; one per host (`host.rs`).
#[derive(Clone, Debug)]
pub(crate) struct Watchdog {
    queue: Option<mpsc::Sender<Message>>,
    marker: String,
}

impl Watchdog {
    /// Starts the watchdog over `watched` (run as `program` if the host
    /// named one), before any command is spawned (its transient
    /// descriptors never compete with a spawn's), and the writer thread
    /// that feeds it and reaps `adoption`'s exited orphans.
    pub(crate) fn start(
        watched: Watched,
        program: Option<std::path::PathBuf>,
        forked: Option<Forked>,
        adoption: Arc<Adoption>,
    ) -> Watchdog {
        let marker = host_marker();
        let (sender, receiver) = mpsc::channel();
        let mut writer = Writer {
            watched,
            program,
            marker: format!("{MARKER}={marker}"),
            adoption,
            groups: BTreeSet::new(),
            running: None,
            checked: Instant::now(),
        };
        match forked {
            Some(forked) => writer.adopt(forked),
            None => writer.restart(),
        }
        let queue = match std::thread::Builder::new()
            .name("dsh-bash-watchdog-writer".into())
            .spawn(move || writer.serve(&receiver))
        {
            Ok(_) => Some(sender),
            Err(err) => {
                tracing::warn!(%err, "cannot start the host-death watchdog's writer; commands' children may outlive a killed host");
                None
            }
        };
        Watchdog { queue, marker }
    }

    /// The environment entry every command of this host carries.
    pub(crate) fn marker(&self) -> (&'static str, String) {
        (MARKER, self.marker.clone())
    }

    /// Records process group `pgid` (kill it at host death).
    pub(crate) fn record(&self, pgid: libc::pid_t) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Message::Record(pgid));
        }
    }

    /// Forgets process group `pgid` (it is gone; its number may be reused).
    pub(crate) fn forget(&self, pgid: libc::pid_t) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Message::Forget(pgid));
        }
    }
}

/// A watchdog forked from this process while it had one thread, before
/// its host started (see [`Forked::start`]).
///
/// Held by its pid, not a pidfd: a child's pid is not reused before its
/// parent reaps it, and only the writer reaps it; the descriptor saved
/// counts for a host under a low descriptor limit.
#[derive(Debug)]
pub(crate) struct Forked {
    pid: libc::pid_t,
    stdin: File,
}

impl Forked {
    /// Forks the watchdog of this process (to be its host): the child
    /// detaches (its own group, stdin the pipe from the host, stdout and
    /// stderr `/dev/null`, nothing else open, named [`COMM`], its command
    /// line [`NAME`]) and serves until the host dies. Refused (an error)
    /// unless this process has exactly one thread.
    pub(crate) fn start() -> std::io::Result<Forked> {
        let host = std::process::id();
        let start = crate::scratch::start_time(host);
        let marker = format!("{MARKER}={}", marker_of(host, start)).into_bytes();
        // The name every cgroup the host makes has (see `watchdog_main.rs`).
        let cgroup_name = std::ffi::OsString::from(crate::cgroupfs::host_dir_name());
        let host = libc::pid_t::try_from(host).map_err(std::io::Error::other)?;
        // Never on 0, 1 or 2 (a host started with them closed): the host's
        // output must not feed its watchdog.
        let (read, write) = sys::pipe()?;
        let (read, write) = (sys::above_standard(read)?, sys::above_standard(write)?);
        let null = File::options().read(true).write(true).open("/dev/null")?;
        let null = sys::above_standard(null.into())?;
        match sys::fork_alone()? {
            sys::Forked::Child => {
                drop(write);
                if sys::detach(read, null, COMM, NAME.as_bytes()).is_ok() {
                    // A panic ends the watchdog, never unwinds into the
                    // copy of the host's `main`.
                    let _ = std::panic::catch_unwind(move || {
                        crate::watchdog_main::serve_forked(host, start, marker, cgroup_name);
                    });
                }
                sys::exit_now(0);
            }
            sys::Forked::Parent(pid) => {
                sys::set_pipe_size(write.as_fd(), PIPE_BYTES);
                Ok(Forked {
                    pid,
                    stdin: write.into(),
                })
            }
        }
    }
}

/// A watchdog process: executed (a `Child`) or forked (its pid, see
/// [`Forked`]).
enum Process {
    Executed(Child),
    Forked(libc::pid_t),
}

impl Process {
    fn pid(&self) -> libc::pid_t {
        match self {
            Process::Executed(child) => libc::pid_t::try_from(child.id()).unwrap_or(0),
            Process::Forked(pid) => *pid,
        }
    }

    /// Why it is gone, if it exited (reaped then); `None` while it runs.
    fn gone(&mut self) -> Option<String> {
        use rustix::process::{waitid, WaitId, WaitIdOptions};
        match self {
            Process::Executed(child) => match child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => None,
                Err(err) => Some(err.to_string()),
            },
            Process::Forked(pid) => {
                let pid = rustix::process::Pid::from_raw(*pid)?;
                match waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOHANG) {
                    Ok(Some(status)) => Some(format!("{status:?}")),
                    Ok(None) => None,
                    Err(err) => Some(err.to_string()),
                }
            }
        }
    }

    /// Kills and reaps it (blocking: on the writer's thread). Only for one
    /// not yet reaped (`gone` said `None`).
    fn end(self) {
        match self {
            Process::Executed(mut child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Process::Forked(pid) => {
                // Not yet reaped (only `gone` and this reap it), so `pid`
                // is still this child.
                if let Some(held) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(held, rustix::process::Signal::KILL);
                }
                sys::wait_pid(pid);
            }
        }
    }
}

/// One running watchdog process.
struct Running {
    process: Process,
    stdin: File,
}

struct Writer {
    watched: Watched,
    /// The program run as the watchdog; `bash` with the script if none.
    program: Option<std::path::PathBuf>,
    /// `DSH_BASH_HOST=<marker>`.
    marker: String,
    adoption: Arc<Adoption>,
    groups: BTreeSet<libc::pid_t>,
    running: Option<Running>,
    checked: Instant,
}

/// `bash` on this process's `PATH`, absolute entries only (a relative one
/// names whatever the working directory holds: a checkout's `bin/bash`),
/// else the usual places.
fn shell() -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .chain(["/usr/bin", "/bin", "/usr/local/bin"].map(std::path::PathBuf::from))
        .map(|dir| dir.join("bash"))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no bash on an absolute PATH entry for the host-death watchdog",
            )
        })
}

/// The watchdog's command line: `program` as [`NAME`] if one is set, else
/// `bash` with the script; then the cgroup, host pid, start time, marker.
fn watchdog_command(program: Option<&Path>) -> std::io::Result<Command> {
    let mut command = match program {
        Some(program) => {
            let mut command = Command::new(program);
            command.arg0(NAME);
            command
        }
        None => {
            let mut command = Command::new(shell()?);
            command.args(["--noprofile", "--norc", "-c", SCRIPT, NAME]);
            command
        }
    };
    command.current_dir("/");
    Ok(command)
}

fn start(writer: &Writer) -> std::io::Result<Running> {
    let watched = &writer.watched;
    let cgroup = watched.cgroup.as_deref().unwrap_or(Path::new(""));
    let mut command = watchdog_command(writer.program.as_deref())?;
    command
        .arg(cgroup)
        .arg(std::process::id().to_string())
        .arg(crate::scratch::start_time(std::process::id()).map_or_else(String::new, |t| t.to_string()))
        .arg(&writer.marker)
        .args(&watched.v1)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // A process group of its own: a Ctrl-C aimed at the host's foreground
    // group must not reach the watchdog first.
    command.process_group(0);
    let gate = writer.adoption.spawning();
    let mut child = command.spawn()?;
    writer.adoption.register(libc::pid_t::try_from(child.id()).unwrap_or(0));
    drop(gate);
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the watchdog has no stdin"))?;
    sys::set_pipe_size(stdin.as_fd(), PIPE_BYTES);
    Ok(Running {
        process: Process::Executed(child),
        stdin: File::from(OwnedFd::from(stdin)),
    })
}

/// The messages that tell a forked watchdog what its host made after it
/// started (`c PATH`, `v PATH`), said before the host's first command
/// starts; `None` if a path holds a newline (which a
/// line cannot carry: such a host executes a watchdog with them as
/// arguments instead).
fn announce(watched: &Watched) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt as _;
    let lines = watched
        .cgroup
        .iter()
        .map(|dir| (b'c', dir))
        .chain(watched.v1.iter().map(|dir| (b'v', dir)));
    let mut bytes = Vec::new();
    for (kind, dir) in lines {
        let dir = dir.as_os_str().as_bytes();
        if dir.contains(&b'\n') {
            return None;
        }
        bytes.extend_from_slice(&[kind, b' ']);
        bytes.extend_from_slice(dir);
        bytes.push(b'\n');
    }
    Some(bytes)
}

impl Writer {
    fn serve(mut self, receiver: &mpsc::Receiver<Message>) {
        loop {
            match receiver.recv_timeout(CHECK_EVERY) {
                Ok(message) => {
                    let line = match message {
                        Message::Record(pgid) => {
                            self.groups.insert(pgid);
                            format!("+ {pgid}\n")
                        }
                        Message::Forget(pgid) => {
                            self.groups.remove(&pgid);
                            format!("- {pgid}\n")
                        }
                    };
                    self.write(&line);
                    if self.checked.elapsed() > CHECK_EVERY {
                        self.check();
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.check(),
                // Every sender is gone: the process is exiting. Keep the
                // pipe open until it does, so EOF still means death.
                Err(RecvTimeoutError::Disconnected) => loop {
                    std::thread::park();
                },
            }
        }
    }

    /// Writes one line (blocking: a stopped watchdog stalls this thread
    /// only); a broken pipe restarts the watchdog, which then gets every
    /// recorded group instead.
    fn write(&mut self, line: &str) {
        let Some(running) = self.running.as_mut() else {
            self.restart();
            return;
        };
        if let Err(err) = running.stdin.write_all(line.as_bytes()) {
            tracing::warn!(%err, "the host-death watchdog stopped listening; starting a new one");
            self.restart();
        }
    }

    /// Takes the watchdog forked before the host started: registered as
    /// the host's own child and told the host's cgroups. One that cannot
    /// be told (it is gone, a path cannot be said) is ended and an
    /// executed one started instead. The lines are written here, on the
    /// thread starting the host (a few hundred bytes into an empty pipe:
    /// they never block), so they are in before the first command runs.
    fn adopt(&mut self, forked: Forked) {
        let gate = self.adoption.spawning();
        self.adoption.register(forked.pid);
        drop(gate);
        let mut running = Running {
            process: Process::Forked(forked.pid),
            stdin: forked.stdin,
        };
        let told = announce(&self.watched)
            .ok_or_else(|| std::io::Error::other("a cgroup path holds a newline"))
            .and_then(|lines| running.stdin.write_all(&lines));
        self.running = Some(running);
        if let Err(err) = told {
            tracing::debug!(%err, "the forked watchdog cannot be told the host's cgroups; executing one");
            self.restart();
        }
    }

    /// Reaps a watchdog that exited (logging it) and starts a new one.
    fn check(&mut self) {
        self.checked = Instant::now();
        // Adopted orphans that exited are reaped here (off the runtime).
        self.adoption.reap_exited();
        let exited = match self.running.as_mut() {
            Some(running) => running.process.gone(),
            None => Some("it was never started".into()),
        };
        if let Some(why) = exited {
            // Reaped by `gone`: its pid may be another process's already,
            // so it is let go, never signalled or waited for again.
            if let Some(gone) = self.running.take() {
                self.adoption.unregister(gone.process.pid());
            }
            tracing::warn!(%why, "the host-death watchdog is gone; starting a new one");
            self.restart();
        }
    }

    fn restart(&mut self) {
        if let Some(old) = self.running.take() {
            let pid = old.process.pid();
            old.process.end();
            self.adoption.unregister(pid);
        }
        match start(self) {
            Ok(mut running) => {
                let lines: String = self.groups.iter().map(|g| format!("+ {g}\n")).collect();
                if let Err(err) = running.stdin.write_all(lines.as_bytes()) {
                    tracing::warn!(%err, "the new host-death watchdog did not listen either");
                }
                self.running = Some(running);
            }
            Err(err) => {
                tracing::warn!(%err, "cannot start the host-death watchdog; commands' children may outlive a killed host (retrying)");
            }
        }
    }
}
