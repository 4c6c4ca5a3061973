//! Spawning: every command is forked from one dedicated thread that lives
//! as long as the process.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
//! not the process. Tokio's worker and blocking threads come and go (a
//! blocking thread retires after 10 s idle, a runtime can be dropped), so
//! forking from them would kill commands at random. The spawner thread never
//! exits, so the death signal fires exactly when the host process dies.
//!
//! The same thread also feeds the **watchdog**: a tiny `bash` loop in a
//! session of its own that records the process group of every running
//! command. When the host dies, even by SIGKILL, the watchdog's stdin
//! reaches EOF and it SIGKILLs every group still recorded, so the shell's
//! children die with the host too, not only the shell.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;

use tokio::sync::oneshot;

use crate::sys;

pub use dsh_sandbox::PreExec;

/// Everything needed to fork and exec one command.
pub(crate) struct Launch {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) workdir: PathBuf,
    pub(crate) env: BTreeMap<OsString, OsString>,
    pub(crate) piped_stdin: bool,
    pub(crate) pre_exec: Option<PreExec>,
}

/// A freshly spawned command: its pid (also its process group), a pidfd
/// holding its identity, and our ends of its pipes.
pub(crate) struct Spawned {
    pub(crate) pid: libc::pid_t,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

enum Job {
    Spawn(Box<Launch>, oneshot::Sender<io::Result<Spawned>>),
    Release(libc::pid_t),
}

fn spawner() -> io::Result<&'static mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Result<mpsc::Sender<Job>, String>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("dsh-bash-spawner".into())
            .spawn(move || serve(queue))
            .map(|_| jobs)
            .map_err(|err| format!("cannot start the spawner thread: {err}"))
    });
    spawner
        .as_ref()
        .map_err(|err| io::Error::other(err.clone()))
}

fn serve(queue: mpsc::Receiver<Job>) {
    let mut watchdog = Watchdog::start();
    while let Ok(job) = queue.recv() {
        match job {
            Job::Spawn(launch, reply) => {
                let spawned = spawn_now(*launch);
                if let (Ok(spawned), Some(dog)) = (&spawned, watchdog.as_mut()) {
                    if !dog.send('+', spawned.pid) {
                        watchdog = None;
                    }
                }
                if let Err(Ok(orphan)) = reply.send(spawned) {
                    // The caller is gone: nobody will supervise this process.
                    sys::pidfd_signal(orphan.pidfd.as_fd(), libc::SIGKILL);
                    sys::signal_group(orphan.pid, libc::SIGKILL);
                }
            }
            Job::Release(pgid) => {
                if let Some(dog) = watchdog.as_mut() {
                    if !dog.send('-', pgid) {
                        watchdog = None;
                    }
                }
            }
        }
    }
}

fn spawn_now(launch: Launch) -> io::Result<Spawned> {
    let mut command = Command::new(&launch.program);
    command
        .args(&launch.args)
        .current_dir(&launch.workdir)
        .env_clear()
        .envs(&launch.env)
        .stdin(if launch.piped_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    let restriction = launch.pre_exec;
    // SAFETY: the closure runs in the forked child before exec and only makes
    // raw async-signal-safe syscalls (setsid, prctl, getppid, and the
    // restriction, whose contract is the same).
    unsafe {
        command.pre_exec(move || {
            sys::contain_child(parent, true)?;
            match &restriction {
                Some(restrict) => restrict(),
                None => Ok(()),
            }
        });
    }
    let mut child = command.spawn()?;
    let pid = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
    let pidfd = match sys::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(err) => {
            sys::signal_group(pid, libc::SIGKILL);
            let _ = child.wait();
            return Err(io::Error::new(
                err.kind(),
                format!("pidfd_open failed (Linux 5.3 or newer is required): {err}"),
            ));
        }
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(io::Error::other("child pipes missing"));
    };
    Ok(Spawned {
        pid,
        pidfd,
        stdin: child.stdin.take().map(OwnedFd::from),
        stdout: stdout.into(),
        stderr: stderr.into(),
    })
}

/// Spawns `launch` on the spawner thread.
pub(crate) async fn spawn(launch: Launch) -> io::Result<Spawned> {
    let (reply, spawned) = oneshot::channel();
    spawner()?
        .send(Job::Spawn(Box::new(launch), reply))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    spawned
        .await
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}

/// Tells the watchdog that group `pgid` is gone and must not be killed at
/// host death (its number may be reused).
pub(crate) fn release(pgid: libc::pid_t) {
    if let Ok(spawner) = spawner() {
        let _ = spawner.send(Job::Release(pgid));
    }
}

const WATCHDOG_SCRIPT: &str = r#"declare -A groups
while read -r op id; do
  case $op in
    +) groups[$id]=1 ;;
    -) unset "groups[$id]" ;;
  esac
done
for id in "${!groups[@]}"; do kill -KILL -- "-$id"; done
"#;

struct Watchdog {
    stdin: ChildStdin,
}

impl Watchdog {
    fn start() -> Option<Watchdog> {
        let mut command = Command::new("bash");
        command
            .args(["--noprofile", "--norc", "-c", WATCHDOG_SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and only calls setsid.
        unsafe {
            command.pre_exec(|| sys::own_session());
        }
        match command.spawn() {
            Ok(mut child) => {
                let stdin = child.stdin.take()?;
                // Never let a stalled watchdog block spawning.
                sys::set_nonblocking(stdin.as_fd());
                Some(Watchdog { stdin })
            }
            Err(err) => {
                tracing::warn!(%err, "cannot start the host-death watchdog; commands' children may outlive a killed host");
                None
            }
        }
    }

    /// False if the watchdog can no longer be told anything.
    fn send(&mut self, op: char, pgid: libc::pid_t) -> bool {
        // One write per line: a partial line must never reach the watchdog.
        let line = format!("{op} {pgid}\n");
        match self.stdin.write_all(line.as_bytes()) {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(%err, "the host-death watchdog stopped listening");
                false
            }
        }
    }
}
