//! Spawning with `clone(CLONE_VM | CLONE_VFORK)`, as glibc's `posix_spawn`
//! does (`clone3` with `CLONE_INTO_CGROUP` too, straight into the
//! command's cgroup, where the kernel allows it): the child borrows the
//! parent's memory until it execs, so no page
//! tables are copied and nothing is torn down afterwards (a plain `fork`
//! from a multi-threaded runtime costs more than the `bash` it starts).
//!
//! Everything the child needs (argv, envp, cwd, fds) is prepared in the
//! parent. The child runs on its own stack and only makes raw
//! async-signal-safe syscalls: reset signal dispositions and mask, dup2 the
//! standard fds, `setsid`, `prctl`s, close every inherited descriptor above
//! 2 at exec, the restriction (see `restrict.rs`), `chdir`, `execve`. A failure is reported as an errno through a close-on-exec
//! pipe. All signals are blocked in the spawning thread around the clone,
//! so no handler of the parent can run on the shared memory in the child.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::enter;
use super::restrict::{self, Prepared};
use super::{contain_child, errno};

/// Everything needed to clone and exec one command.
pub struct Exec {
    /// The program (found on the launcher's PATH when it has no slash).
    pub program: PathBuf,
    /// Its arguments, `argv[0]` first.
    pub args: Vec<OsString>,
    /// The directory it starts in.
    pub workdir: PathBuf,
    /// Refuse a symlink on the workdir's path (see [`dsh_bash::BashExecRequest::workdir_pinned`]).
    pub workdir_pinned: bool,
    /// Its whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// Its stdin is a pipe we write (else `/dev/null`, or its terminal).
    pub piped_stdin: bool,
    /// What it is confined by between clone and exec.
    pub restriction: dsh_sandbox::Restriction,
    /// Run in a fresh terminal of this size (stdin, stdout and stderr).
    pub terminal: Option<dsh_bash::TerminalSize>,
    /// The command takes the terminal as controlling terminal itself (a
    /// runner's new session): the launcher leaves it nobody's.
    pub takes_terminal: bool,
}

/// Our ends of a started command's pipes, or of its terminal.
pub struct Pipes {
    /// Its stdin, when it was given bytes or kept open (else it reads
    /// `/dev/null`, or its terminal).
    pub stdin: Option<OwnedFd>,
    /// Its stdout, or the terminal's output (a non-blocking pty master).
    pub stdout: OwnedFd,
    /// Its stderr; `None` in a terminal (one stream).
    pub stderr: Option<OwnedFd>,
    /// The terminal's master, to type into; `None` without a terminal.
    pub terminal: Option<OwnedFd>,
}

/// A command's standard streams: the child's ends (closed here once it
/// has execed) and ours.
struct Standard {
    child: [RawFd; 3],
    child_ends: Vec<OwnedFd>,
    ours: Pipes,
}

impl Standard {
    fn new(launch: &Exec) -> io::Result<Standard> {
        if let Some(size) = launch.terminal {
            let (master, slave) = open_terminal(size)?;
            let fd = slave.as_raw_fd();
            return Ok(Standard {
                child: [fd; 3],
                child_ends: vec![slave],
                ours: Pipes {
                    stdin: None,
                    stdout: master.try_clone()?,
                    stderr: None,
                    terminal: Some(master),
                },
            });
        }
        let (stdin_read, stdin_write) = if launch.piped_stdin {
            let (r, w) = pipe()?;
            (r, Some(w))
        } else {
            (dev_null()?, None)
        };
        let (stdout_read, stdout_write) = pipe()?;
        let (stderr_read, stderr_write) = pipe()?;
        Ok(Standard {
            child: [
                stdin_read.as_raw_fd(),
                stdout_write.as_raw_fd(),
                stderr_write.as_raw_fd(),
            ],
            child_ends: vec![stdin_read, stdout_write, stderr_write],
            ours: Pipes {
                stdin: stdin_write,
                stdout: stdout_read,
                stderr: Some(stderr_read),
                terminal: None,
            },
        })
    }
}

/// A fresh pseudo-terminal of `size`: its master (non-blocking) and its
/// slave, opened without becoming our controlling terminal.
fn open_terminal(size: dsh_bash::TerminalSize) -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::fs::{Mode, OFlags};
    use rustix::pty::OpenptFlags;
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let name = rustix::pty::ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let winsize = rustix::termios::Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&master, winsize)?;
    let flags = rustix::fs::fcntl_getfl(&master)?;
    rustix::fs::fcntl_setfl(&master, flags | OFlags::NONBLOCK)?;
    Ok((master, slave))
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte"))
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just handed us these two fds.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn dev_null() -> io::Result<OwnedFd> {
    // SAFETY: open with a static NUL-terminated path.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just handed us this fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The program's path: as given when it contains a slash, else the first
/// executable match on `path` (this process's own).
fn resolve(program: &Path, path: &OsStr) -> io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_owned());
    }
    // Relative entries are skipped: they name whatever the working
    // directory holds (a checkout's `bin/bash`), and were looked up here
    // against the host's directory, not the command's.
    for dir in std::env::split_paths(path).filter(|dir| dir.is_absolute()) {
        let candidate = dir.join(program);
        if let Ok(c) = cstring(candidate.as_os_str().as_bytes()) {
            // SAFETY: access with a valid NUL-terminated path.
            if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
                return Ok(candidate);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found on PATH (absolute entries)", program.display()),
    ))
}

/// A pinned working directory (canonical, as a person approved it),
/// opened here without following any symlink and entered by descriptor in
/// the child: one put on its path since is refused, never followed. (An
/// unpinned one is entered by path: a descriptor more per command would
/// cost a host at its descriptor limit its commands.)
fn open_pinned(workdir: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let moved = |err: rustix::io::Errno| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the working directory {} has a symbolic link on its path since it was approved ({err}); the command did not run: ask again to be shown where it leads now",
                workdir.display()
            ),
        )
    };
    match rustix::fs::openat2(
        CWD,
        workdir,
        flags,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    ) {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::NOSYS) => {
            // Before Linux 5.6: one component at a time, none followed.
            let mut at = rustix::fs::open("/", flags, Mode::empty())?;
            for part in workdir.components().skip(1) {
                at = rustix::fs::openat(
                    &at,
                    part.as_os_str(),
                    flags | OFlags::NOFOLLOW,
                    Mode::empty(),
                )
                .map_err(moved)?;
            }
            Ok(at)
        }
        Err(err @ rustix::io::Errno::LOOP) => Err(moved(err)),
        Err(err) => Err(err.into()),
    }
}

/// Everything the child reads, by raw pointer, while the parent waits.
#[derive(Clone, Copy)]
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// The working directory by path, or (`pinned`) by a descriptor the
    /// parent opened (close-on-exec), `-1` when by path.
    cwd: *const libc::c_char,
    pinned: RawFd,
    stdio: [RawFd; 3],
    report: RawFd,
    parent: libc::pid_t,
    restriction: *const Prepared,
    cgroup: *const libc::c_char,
    /// v1 `cgroup.procs` files to write `0` to (`v1_len` of them).
    v1: *const CString,
    v1_len: usize,
    /// `RLIMIT_DATA`, or `u64::MAX` for none.
    memory_rlimit: u64,
    /// The standard streams are a terminal to make controlling.
    terminal: bool,
    /// The top of the stack a warm sandbox's command is cloned on (the
    /// lower half of the launcher's).
    inner_top: *mut libc::c_void,
    /// Where this process's command line is in memory (blanked in a warm
    /// sandbox's first process).
    command_line: Option<(usize, usize)>,
}

/// What a child reports through the report pipe: `errno` it failed with
/// before exec, or the pid of the process that runs the command when it is
/// not the cloned child (a warm sandbox's pid namespace's first process).
const REPORT_ERRNO: i32 = 0;
const REPORT_STARTED: i32 = 1;

/// Writes one report (`what`, `value`) to the parent.
fn report_to(report: RawFd, what: i32, value: i32) {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&what.to_ne_bytes());
    bytes[4..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: write from a stack buffer; async-signal-safe.
    unsafe { libc::write(report, bytes.as_ptr().cast(), bytes.len()) };
}

/// Reports `errno` to the parent and exits.
fn fail(report: RawFd, errno: i32) -> ! {
    report_to(report, REPORT_ERRNO, errno);
    // SAFETY: _exit is async-signal-safe and never returns.
    unsafe { libc::_exit(127) }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs` (writes `0`), or reports the errno and exits.
fn join(procs: *const libc::c_char, report: RawFd) {
    // SAFETY: open/write/close with a NUL-terminated path the parent keeps
    // alive and a static buffer; all async-signal-safe.
    unsafe {
        let fd = libc::open(procs, libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            fail(report, errno());
        }
        libc::close(fd);
    }
}

extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points at the ChildArgs the suspended parent keeps alive.
    let args = unsafe { &*(arg as *const ChildArgs) };
    // Default dispositions for every signal, then an empty mask. A handler
    // of ours would run on the parent's memory; a signal the host ignores
    // was ignored by whoever started the host (`host &` in a script ignores
    // SIGINT and SIGQUIT, `nohup` SIGHUP), not chosen by the command:
    // inherited, ^C in a terminal reaches nothing and `trap ... INT` is
    // silently void (a shell cannot trap what was ignored at its entry).
    for signal in 1..65 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        let mut old = MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: rt_sigaction query into a stack buffer.
        if unsafe { libc::sigaction(signal, std::ptr::null(), old.as_mut_ptr()) } != 0 {
            continue;
        }
        // SAFETY: sigaction succeeded, so `old` is initialised.
        let handler = unsafe { old.assume_init() }.sa_sigaction;
        if handler != libc::SIG_DFL {
            // SAFETY: installing SIG_DFL via a zeroed sigaction.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
    }
    // SAFETY: sigprocmask with a stack-allocated empty set.
    unsafe {
        let mut empty = MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigemptyset(empty.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut());
    }
    for (target, fd) in args.stdio.iter().enumerate() {
        // SAFETY: dup2 onto the standard fds; clears close-on-exec on them.
        if unsafe { libc::dup2(*fd, target as RawFd) } < 0 {
            fail(args.report, errno());
        }
    }
    // SAFETY: we are the freshly cloned child, before exec.
    if let Err(err) = unsafe { contain_child(args.parent) } {
        fail(args.report, err.raw_os_error().unwrap_or(libc::EIO));
    }
    // The session leader (setsid above) takes its terminal as controlling
    // terminal: ^C reaches its foreground job, a hang-up its session.
    // SAFETY: ioctl(TIOCSCTTY) on our stdin, a raw syscall.
    if args.terminal && unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
        fail(args.report, errno());
    }
    if !args.cgroup.is_null() {
        join(args.cgroup, args.report);
    }
    for at in 0..args.v1_len {
        // SAFETY: the parent keeps `v1_len` CStrings alive at `v1`.
        join(unsafe { (*args.v1.add(at)).as_ptr() }, args.report);
    }
    if args.memory_rlimit != u64::MAX {
        let limit = libc::rlimit64 {
            rlim_cur: args.memory_rlimit,
            rlim_max: args.memory_rlimit,
        };
        // SAFETY: a raw prlimit64 on ourselves with a stack struct.
        let set = unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0,
                libc::RLIMIT_DATA,
                &limit as *const libc::rlimit64,
                std::ptr::null_mut::<libc::rlimit64>(),
            )
        };
        if set != 0 {
            fail(args.report, errno());
        }
    }
    // SAFETY: the parent keeps the prepared restriction alive until we exec.
    match unsafe { &(*args.restriction).entry } {
        // SAFETY: we are the freshly cloned child, before exec.
        Some(entry) => unsafe { enter_warm(args, entry) },
        None => finish(args),
    }
}

/// The restriction, the working directory and exec.
fn finish(args: &ChildArgs) -> ! {
    // SAFETY: we are the freshly cloned child (own descriptor table); the
    // parent keeps the prepared restriction alive until we exec.
    if let Err(errno) = unsafe { restrict::apply(&*args.restriction) } {
        fail(args.report, errno);
    }
    // SAFETY: fchdir to a descriptor the parent holds open, or chdir to a
    // NUL-terminated path it prepared; execve with NUL-terminated strings
    // and arrays the parent prepared.
    unsafe {
        let entered = if args.pinned >= 0 {
            libc::fchdir(args.pinned)
        } else {
            libc::chdir(args.cwd)
        };
        if entered != 0 {
            fail(args.report, errno());
        }
        libc::execve(args.path, args.argv, args.envp);
    }
    fail(args.report, errno())
}

/// Enters a warm sandbox (see `enter.rs`): joins it, clones the pid
/// namespace's first process as the server's own child, reports its pid
/// and exits; that process starts the command and waits for it.
///
/// # Safety
///
/// Only in the freshly cloned child, before exec.
unsafe fn enter_warm(args: &ChildArgs, entry: &enter::PreparedEntry) -> ! {
    // SAFETY: forwarded from the caller.
    if let Err(errno) = unsafe { enter::enter(entry) } {
        fail(args.report, errno);
    }
    // SAFETY: a fork-like clone (no CLONE_VM, no stack): the child runs on
    // its own copy of this memory; integer arguments only.
    let first = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_PARENT | libc::SIGCHLD,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if first < 0 {
        fail(args.report, errno());
    }
    if first > 0 {
        report_to(args.report, REPORT_STARTED, first as i32);
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(0) };
    }
    // This process never execs: what it inherited close-on-exec (every
    // other pipe and lock of the server's) is closed first, but what the
    // command needs.
    // SAFETY: the parent keeps the prepared restriction alive.
    unsafe { enter::close_all_but(&(*args.restriction).inherited) };
    // The pid namespace's first process: a copy of the server's memory,
    // so not dumpable (the command cannot read it, its environment, maps
    // or descriptors through /proc/1) and with the server's command line
    // blanked (/proc/1/cmdline is anyone's to read); it dies with the
    // server's spawning thread (its parent, through CLONE_PARENT), and
    // leads a session of its own, as bubblewrap's `--new-session` makes.
    // SAFETY: prctl and setsid with integer arguments (and a static
    // name); the command line is this process's own copy of the memory.
    unsafe {
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
            || libc::setsid() < 0
        {
            fail(args.report, errno());
        }
        libc::prctl(libc::PR_SET_NAME, c"dsh-bash-init".as_ptr(), 0, 0, 0);
        if let Some((start, end)) = args.command_line {
            std::ptr::write_bytes(start as *mut u8, 0, end - start);
        }
    }
    // SAFETY: in the first process, before the command starts.
    if let Err(errno) = unsafe { enter::mount_proc() } {
        fail(args.report, errno);
    }

    // Every signal blocked here: none can run a handler while the command
    // runs on this memory, and signals to the namespace's first process
    // are for the command (which gets them from the tree itself).
    // SAFETY: sigprocmask with a stack-allocated full set.
    unsafe {
        let mut all = MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigfillset(all.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, all.as_ptr(), std::ptr::null_mut());
    }
    // SAFETY: CLONE_VM|CLONE_VFORK on the lower half of the launcher's
    // stack (this process runs on the upper half) in this process's own
    // memory; `command` only makes async-signal-safe syscalls.
    let command = unsafe {
        libc::clone(
            warm_command,
            args.inner_top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            args as *const ChildArgs as *mut libc::c_void,
        )
    };
    if command < 0 {
        fail(args.report, errno());
    }
    // The command has exec'd or exited: nothing is needed here any more
    // (the report pipe's last copy, the command's streams).
    enter::close_all_but(&[]);
    enter::wait_for(command)
}

/// The command in a warm sandbox: the signal mask back to empty, then as
/// any command (the working directory by path: a descriptor opened on
/// the host would lead out of the sandbox's mounts).
extern "C" fn warm_command(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points at the ChildArgs in this process's memory.
    let args = unsafe { &*(arg as *const ChildArgs) };
    // SAFETY: sigprocmask with a stack-allocated empty set.
    unsafe {
        let mut empty = MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigemptyset(empty.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut());
    }
    let by_path = ChildArgs {
        pinned: -1,
        ..*args
    };
    finish(&by_path)
}

/// What one spawner thread reuses across spawns: the child's stack and the
/// last program resolved on `PATH` (the same shell, every time).
pub struct Launcher {
    stack: Vec<u8>,
    resolved: Option<(PathBuf, OsString, CString)>,
    /// `clone3` into a cgroup failed here once: commands move themselves.
    clone3_refused: bool,
    /// Where this process's command line is in memory (`/proc/self/stat`).
    command_line: Option<(usize, usize)>,
}

impl Default for Launcher {
    fn default() -> Self {
        Launcher {
            stack: vec![0u8; 256 * 1024],
            resolved: None,
            clone3_refused: false,
            command_line: command_line(),
        }
    }
}

/// Where this process's command line is in memory: `arg_start` and
/// `arg_end` of `/proc/self/stat` (fields 48 and 49).
pub(crate) fn command_line() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(45);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start > 0 && end > start).then_some((start, end))
}

impl Launcher {
    /// The executable path of `program` on this process's own `PATH`
    /// (absolute entries), from the cache when neither changed. Never the
    /// command's `PATH`: that one is the caller's, the shell snapshot's or a
    /// sandbox's, and a directory on it may be one a confined command could
    /// write (a planted `bin/bash` would otherwise run first, unconfined,
    /// on the next approved escalation).
    fn path_of(&mut self, program: &Path) -> io::Result<CString> {
        let path = std::env::var_os("PATH")
            .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
        if let Some((cached, cached_path, resolved)) = &self.resolved {
            if cached == program && *cached_path == path {
                return Ok(resolved.clone());
            }
        }
        let resolved = cstring(resolve(program, &path)?.as_os_str().as_bytes())?;
        self.resolved = Some((program.to_owned(), path, resolved.clone()));
        Ok(resolved)
    }
}

/// `clone3`'s arguments (`struct clone_args` of `linux/sched.h`), up to
/// `cgroup` (Linux 5.7).
#[cfg(target_arch = "x86_64")]
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7), as a `clone_args` flag.
#[cfg(target_arch = "x86_64")]
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `clone3(args, size)` whose child runs `child(arg)` on the stack
/// `args` names and exits with its return value, never returning here; in
/// the parent, the syscall's result (the child's pid, or `-errno`). A raw
/// `clone3` with `CLONE_VM` and a stack of its own needs this: the child
/// cannot return through Rust frames that live on the parent's stack (it
/// is what glibc's `clone` does for `clone(2)`).
///
/// # Safety
///
/// `args` is a valid `clone_args` naming a stack that stays valid until the
/// child execs or exits; `child` only makes async-signal-safe syscalls.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_on_stack(
    args: *mut CloneArgs,
    child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract; the child never leaves the asm block
    // (it calls `child` on its own stack, then `exit`s with its result).
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            // The child, on its own stack: rsp is 16-byte aligned here.
            "xor ebp, ebp",
            "mov rdi, r9",
            "call r8",
            "mov edi, eax",
            "mov eax, 60",
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            in("rdi") args,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r8") child,
            in("r9") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Clones the child straight into the cgroup `dir`: `clone3` with
/// `CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP`, on the launcher's stack,
/// like the `clone` below. Moving a running process into a cgroup instead
/// takes the kernel's cgroup-wide write lock, which waits for an RCU grace
/// period: 7–15 ms per command when commands come seconds apart. `None`
/// where it cannot (an architecture other than x86_64, whose trampoline is
/// not written, or `clone3` refused once on this launcher (`refused`), for
/// whatever reason: no child exists after a failed clone, so the caller's
/// fallback never spawns twice). A refusal (a kernel before 5.7, a seccomp
/// profile) is remembered: every later command moves itself.
///
/// # Safety
///
/// As for `clone` below: `args`, the strings and `stack_top`'s stack stay
/// valid until the child execs or exits (this thread is suspended until
/// then); every signal is blocked by the caller.
#[cfg(target_arch = "x86_64")]
unsafe fn clone_into_cgroup(
    dir: &std::ffi::CStr,
    args: &ChildArgs,
    stack: (*mut u8, usize),
    refused: &mut bool,
) -> Option<libc::pid_t> {
    if *refused {
        return None;
    }
    // SAFETY: open with a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: we own the descriptor just opened.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut clone_args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.0 as u64,
        stack_size: stack.1 as u64,
        cgroup: fd.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: the caller's contract.
    let pid = unsafe {
        clone3_on_stack(
            &mut clone_args,
            child,
            args as *const ChildArgs as *mut libc::c_void,
        )
    };
    drop(fd);
    if pid > 0 {
        return libc::pid_t::try_from(pid).ok();
    }
    tracing::debug!(
        errno = -pid,
        "clone3 into a cgroup refused; commands move themselves into their cgroups"
    );
    *refused = true;
    None
}

/// Elsewhere the trampoline is not written: every command moves itself.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone_into_cgroup(
    _dir: &std::ffi::CStr,
    _args: &ChildArgs,
    _stack: (*mut u8, usize),
    _refused: &mut bool,
) -> Option<libc::pid_t> {
    None
}

/// The C strings a child execs with, and the pointer arrays over them.
struct ExecStrings {
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    /// Owns what `argv` and `envp` point into.
    _owned: (Vec<CString>, Vec<CString>),
}

impl ExecStrings {
    fn new(launch: &Exec) -> io::Result<ExecStrings> {
        let mut argv_owned = vec![cstring(launch.program.as_os_str().as_bytes())?];
        for arg in &launch.args {
            argv_owned.push(cstring(arg.as_bytes())?);
        }
        let envp_owned = launch
            .env
            .iter()
            .map(|(k, v)| {
                let mut entry = k.as_bytes().to_vec();
                entry.push(b'=');
                entry.extend_from_slice(v.as_bytes());
                cstring(&entry)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let pointers = |owned: &[CString]| -> Vec<*const libc::c_char> {
            owned
                .iter()
                .map(|c| c.as_ptr())
                .chain([std::ptr::null()])
                .collect()
        };
        Ok(ExecStrings {
            argv: pointers(&argv_owned),
            envp: pointers(&envp_owned),
            cwd: cstring(OsStr::new(&launch.workdir).as_bytes())?,
            _owned: (argv_owned, envp_owned),
        })
    }
}

/// The two ways into a command's cgroup: its directory (a child cloned
/// straight into it, `CLONE_INTO_CGROUP`) and its `cgroup.procs` (a child
/// that moves itself, where `clone3` cannot).
pub struct Entry<'a> {
    /// The cgroup's directory.
    pub dir: &'a CStr,
    /// Its `cgroup.procs`.
    pub procs: &'a CStr,
    /// The `cgroup.procs` of its v1 cgroups (the limits of a hybrid
    /// host), which the child writes `0` to before exec.
    pub v1: &'a [CString],
}

/// Starts `launch` in a new process, inside `cgroup` (if any) before exec
/// (cloned into it where the kernel can, else moving itself there); its
/// pid and our ends of its pipes. The calling thread is the child's parent
/// thread (relevant for `PR_SET_PDEATHSIG`).
pub fn launch(
    launch: &Exec,
    cgroup: Option<Entry<'_>>,
    memory_rlimit: Option<u64>,
    launcher: &mut Launcher,
) -> io::Result<(libc::pid_t, Pipes)> {
    let path = launcher.path_of(&launch.program)?;
    let strings = ExecStrings::new(launch)?;
    let pinned = launch
        .workdir_pinned
        .then(|| open_pinned(&launch.workdir))
        .transpose()?;
    let mut restriction = Prepared::new(&launch.restriction)?;
    let standard = Standard::new(launch)?;
    let (report_read, report_write) = pipe()?;
    restriction.inherit(report_write.as_raw_fd());
    let mut args = ChildArgs {
        path: path.as_ptr(),
        argv: strings.argv.as_ptr(),
        envp: strings.envp.as_ptr(),
        cwd: strings.cwd.as_ptr(),
        pinned: pinned.as_ref().map_or(-1, AsRawFd::as_raw_fd),
        stdio: standard.child,
        report: report_write.as_raw_fd(),
        parent: libc::pid_t::try_from(std::process::id()).unwrap_or(0),
        restriction: &restriction as *const Prepared,
        cgroup: std::ptr::null(),
        v1: cgroup
            .as_ref()
            .map_or(std::ptr::null(), |entry| entry.v1.as_ptr()),
        v1_len: cgroup.as_ref().map_or(0, |entry| entry.v1.len()),
        memory_rlimit: memory_rlimit.unwrap_or(u64::MAX),
        terminal: launch.terminal.is_some() && !launch.takes_terminal,
        command_line: launcher.command_line,
        inner_top: {
            let half = launcher.stack.len() / 2;
            (launcher.stack.as_mut_ptr().wrapping_add(half) as usize & !15) as *mut libc::c_void
        },
    };
    // SAFETY: `args` points into `strings`, `path` and `restriction`, which
    // outlive the call; the child's end of every pipe stays open until it
    // returns.
    let pid = unsafe {
        clone_child(
            &mut args,
            cgroup.as_ref(),
            (&mut launcher.stack, &mut launcher.clone3_refused),
        )
    }?;
    drop((standard.child_ends, report_write));
    match started(&report_read, pid) {
        Ok(pid) => Ok((pid, standard.ours)),
        Err(errno) => {
            // The program may have moved: resolve it afresh next time.
            launcher.resolved = None;
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// Clones the child that runs [`child`] with `args` on `stack`, into the
/// cgroup's directory where the kernel can (else `args` tells it to move
/// itself through `cgroup.procs`), with every signal blocked around it.
///
/// # Safety
///
/// Everything `args` points to must stay valid until this returns (the
/// child runs on our memory until it execs or exits: `CLONE_VFORK`
/// suspends this thread until then).
unsafe fn clone_child(
    args: &mut ChildArgs,
    cgroup: Option<&Entry<'_>>,
    (stack, clone3_refused): (&mut [u8], &mut bool),
) -> io::Result<libc::pid_t> {
    let base = stack.as_mut_ptr();
    // 16-byte aligned top of the stack buffer.
    let top = base.wrapping_add(stack.len()) as usize & !15;
    let mut previous = MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: block every signal around the clone so no handler runs in the
    // child on shared memory; restored right after.
    unsafe {
        let mut all = MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), previous.as_mut_ptr());
    }
    // SAFETY: CLONE_VM|CLONE_VFORK suspends this thread until the child
    // execs or exits; the caller keeps `args` valid that long; signals are
    // blocked.
    let cloned = cgroup.and_then(|entry| unsafe {
        clone_into_cgroup(entry.dir, args, (base, top - base as usize), clone3_refused)
    });
    let pid = match cloned {
        Some(pid) => Ok(pid),
        None => {
            if let Some(entry) = cgroup {
                args.cgroup = entry.procs.as_ptr();
            }
            // SAFETY: as above; the child only makes async-signal-safe
            // syscalls (see `child`).
            let pid = unsafe {
                libc::clone(
                    child,
                    top as *mut libc::c_void,
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    args as *mut ChildArgs as *mut libc::c_void,
                )
            };
            if pid < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(pid)
            }
        }
    };
    // SAFETY: restoring the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, previous.as_ptr(), std::ptr::null_mut());
    }
    pid
}

/// The pid of the process that runs the command (the cloned child, or
/// the first process of a warm sandbox's pid namespace it started, once
/// the cloned child is reaped), or the errno reported before exec (every
/// process it made reaped then); read until the report pipe closes at
/// exec.
fn started(report: &OwnedFd, cloned: libc::pid_t) -> Result<libc::pid_t, i32> {
    let reap = |pid: libc::pid_t| {
        let mut status = 0;
        // SAFETY: reap a child of ours that has exited or is exiting.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    };
    let mut running = cloned;
    loop {
        let mut bytes = [0u8; 8];
        // SAFETY: read into a stack buffer from the report pipe we own.
        let n = unsafe { libc::read(report.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        if n != 8 {
            return Ok(running);
        }
        let what = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let value = i32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if what == REPORT_STARTED && running == cloned {
            reap(cloned);
            running = value;
            continue;
        }
        // The cloned child was reaped when it reported a start.
        reap(running);
        return Err(value);
    }
}
