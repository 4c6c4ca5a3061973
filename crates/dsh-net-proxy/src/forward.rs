//! The forwarder: the host's own binary, re-executed inside a network
//! namespace that holds only loopback, listening on `127.0.0.1:3128` there
//! and handing each connection to the proxy's door, which it inherits as a
//! descriptor (one end of a socket pair; no path, so no other process can
//! reach the door): the accepted socket itself goes through
//! (`SCM_RIGHTS`, [`pass_socket`]), and the proxy reads and writes it
//! directly, so no byte is copied in the forwarder and no thread of it
//! waits on a connection. It binds, forks the relay into a session of its
//! own (so the signals a stop or a terminal sends the command's group do
//! not cut the command's network), and execs the command in its own place:
//! the command keeps its pid, its exit status and its death by signal. The
//! relay ends with the sandbox (bubblewrap's pid namespace goes with the
//! command).
//!
//! A host opts in by calling [`run_if_asked`] first in `main`; a sandbox
//! provider puts [`argv`] before the command's own argv.

use std::ffi::{OsStr, OsString};
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::sys::Forked;

/// The argument (after the program) that makes the host's binary a
/// forwarder.
pub const ARG: &str = "__dsh-net-forward";

/// The port the forwarder listens on inside the namespace (the namespace
/// is the command's own, so nothing else holds it).
pub const PORT: u16 = 3128;

/// The argv prefix that runs a command behind a forwarder to the door
/// whose far end the command inherits as descriptor `door`:
/// `program __dsh-net-forward 3128 door --`, the command's argv after it.
pub fn argv(program: &Path, door: RawFd) -> Vec<OsString> {
    vec![
        program.as_os_str().to_owned(),
        ARG.into(),
        PORT.to_string().into(),
        door.to_string().into(),
        "--".into(),
    ]
}

/// [`argv`] for a door at a Unix socket path (a [`crate::DoorAt::Unix`]
/// door, e.g. mounted into a container): `program __dsh-net-forward 3128
/// unix:PATH --`.
pub fn argv_to_path(program: &Path, door: &Path) -> Vec<OsString> {
    let mut at = OsString::from("unix:");
    at.push(door);
    vec![
        program.as_os_str().to_owned(),
        ARG.into(),
        PORT.to_string().into(),
        at,
        "--".into(),
    ]
}

/// Opens one connection through a door's far end `door`: a fresh socket
/// pair, one end passed to the proxy ([`pass_socket`]), the other
/// returned.
///
/// # Errors
///
/// When the pair cannot be made or the proxy is gone.
pub fn pass_connection(door: BorrowedFd<'_>) -> io::Result<UnixStream> {
    let (ours, theirs) = UnixStream::pair()?;
    pass_socket(door, theirs.as_fd())?;
    Ok(ours)
}

/// Hands the connected stream socket `socket` (a TCP connection the
/// forwarder accepted, or a Unix one) to the proxy behind a door's far end
/// `door`, which serves it from then on; the caller may close its copy.
///
/// # Errors
///
/// When the proxy is gone.
pub fn pass_socket(door: BorrowedFd<'_>, socket: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    let fds = [socket];
    ancillary.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(
        door,
        &[io::IoSlice::new(b"c")],
        &mut ancillary,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Runs the forwarder and exits if this process was started as one (its
/// first argument is [`ARG`]); returns otherwise. Call it first in
/// `main`, before any thread or runtime starts.
pub fn run_if_asked() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).map(OsString::as_os_str) != Some(OsStr::new(ARG)) {
        return;
    }
    std::process::exit(run(&args[2..]));
}

fn run(args: &[OsString]) -> i32 {
    let usage = || {
        eprintln!("dsh-bash: {ARG}: expected PORT DOOR -- COMMAND... (DOOR: an inherited descriptor, or unix:PATH)");
        125
    };
    let [port, door, separator, command @ ..] = args else {
        return usage();
    };
    let (Some(port), Some(door), true, false) = (
        port.to_str().and_then(|p| p.parse::<u16>().ok()),
        DoorArg::parse(door),
        separator == "--",
        command.is_empty(),
    ) else {
        return usage();
    };
    let door = match door.open() {
        Ok(door) => door,
        Err(err) => {
            eprintln!("dsh-bash: the network forwarder has no door ({door}): {err}");
            return 125;
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("dsh-bash: the network forwarder cannot listen on 127.0.0.1:{port}: {err}");
            return 125;
        }
    };
    // Called first in `main` (`run_if_asked`), before any thread exists.
    match crate::sys::fork_single_threaded() {
        Err(err) => {
            eprintln!("dsh-bash: the network forwarder cannot fork its relay: {err}");
            125
        }
        Ok(Forked::Child) => {
            crate::sys::leave_session_and_streams();
            // Not dumpable: the command (same user, same namespaces) can
            // neither trace it nor take its door (`pidfd_getfd`).
            let _ = rustix::process::set_dumpable_behavior(
                rustix::process::DumpableBehavior::NotDumpable,
            );
            serve(&listener, &door);
            0
        }
        Ok(Forked::Parent) => {
            drop(listener);
            drop(door);
            let err = std::process::Command::new(&command[0])
                .args(&command[1..])
                .exec();
            eprintln!(
                "dsh-bash: cannot start {}: {err}",
                command[0].to_string_lossy()
            );
            if err.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            }
        }
    }
}

/// Where the forwarder finds its door.
enum DoorArg<'a> {
    /// An inherited descriptor (one end of a socket pair).
    Inherited(RawFd),
    /// A Unix socket to connect to (a [`crate::DoorAt::Unix`] door, e.g.
    /// mounted into a container).
    Path(&'a Path),
}

impl<'a> DoorArg<'a> {
    fn parse(arg: &'a OsStr) -> Option<DoorArg<'a>> {
        use std::os::unix::ffi::OsStrExt as _;
        if let Some(path) = arg.as_bytes().strip_prefix(b"unix:") {
            let path = Path::new(OsStr::from_bytes(path));
            return path.is_absolute().then_some(DoorArg::Path(path));
        }
        arg.to_str()?.parse().ok().map(DoorArg::Inherited)
    }

    fn open(&self) -> io::Result<OwnedFd> {
        match self {
            DoorArg::Inherited(fd) => inherit(*fd),
            // Close-on-exec, as std makes every descriptor.
            DoorArg::Path(path) => UnixStream::connect(path).map(OwnedFd::from),
        }
    }
}

impl std::fmt::Display for DoorArg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DoorArg::Inherited(fd) => write!(f, "descriptor {fd}"),
            DoorArg::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Takes descriptor `fd` as the door: it must be a socket, and it is
/// closed on exec from here on (the command never holds it).
fn inherit(fd: RawFd) -> io::Result<OwnedFd> {
    let owned = crate::sys::take_inherited(fd)?;
    let kind = rustix::fs::fstat(&owned).map_err(io::Error::from)?;
    if rustix::fs::FileType::from_raw_mode(kind.st_mode) != rustix::fs::FileType::Socket {
        return Err(io::Error::other("not a socket"));
    }
    Ok(owned)
}

/// Hands each connection to the proxy as it is accepted (the proxy limits
/// how many it serves at once); a failing accept (out of descriptors)
/// waits a little rather than spin. Ends when the proxy is gone.
fn serve(listener: &TcpListener, door: &OwnedFd) {
    for connection in listener.incoming() {
        let connection = match connection {
            Ok(connection) => connection,
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        let _ = connection.set_nodelay(true);
        let passed = pass_socket(door.as_fd(), connection.as_fd());
        if matches!(passed, Err(err) if err.kind() == io::ErrorKind::BrokenPipe) {
            return;
        }
    }
}
