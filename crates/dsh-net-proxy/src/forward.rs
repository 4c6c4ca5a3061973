//! The forwarder: the host's own binary, re-executed inside a network
//! namespace that holds only loopback, listening on `127.0.0.1:3128` there
//! and relaying each connection to the proxy door's unix socket bound into
//! the sandbox. It starts the command as its child and exits with the
//! child's status (128+n for death by signal n), so it is invisible but for
//! the extra process.
//!
//! A host opts in by calling [`run_if_asked`] first in `main`; a sandbox
//! provider puts [`argv`] before the command's own argv.

use std::ffi::{OsStr, OsString};
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

/// The argument (after the program) that makes the host's binary a
/// forwarder.
pub const ARG: &str = "__dsh-net-forward";

/// The port the forwarder listens on inside the namespace (the namespace
/// is the command's own, so nothing else holds it).
pub const PORT: u16 = 3128;

/// The argv prefix that runs a command behind a forwarder to `socket`:
/// `program __dsh-net-forward 3128 socket --`, the command's argv after it.
pub fn argv(program: &Path, socket: &Path) -> Vec<OsString> {
    vec![
        program.as_os_str().to_owned(),
        ARG.into(),
        PORT.to_string().into(),
        socket.as_os_str().to_owned(),
        "--".into(),
    ]
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
    let [port, socket, separator, command @ ..] = args else {
        eprintln!("dsh-bash: {ARG}: expected PORT SOCKET -- COMMAND...");
        return 125;
    };
    let (Some(port), true, false) = (
        port.to_str().and_then(|p| p.parse::<u16>().ok()),
        separator == "--",
        command.is_empty(),
    ) else {
        eprintln!("dsh-bash: {ARG}: expected PORT SOCKET -- COMMAND...");
        return 125;
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("dsh-bash: the network forwarder cannot listen on 127.0.0.1:{port}: {err}");
            return 125;
        }
    };
    let mut child = match std::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!(
                "dsh-bash: cannot start {}: {err}",
                command[0].to_string_lossy()
            );
            return if err.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    outlive_signals();
    let socket = PathBuf::from(socket);
    std::thread::spawn(move || serve(&listener, &socket));
    match child.wait() {
        Ok(status) => status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        Err(_) => 125,
    }
}

extern "C" fn ignore(_: libc::c_int) {}

/// The signals a stop or a terminal sends to the whole group are the
/// command's to handle: the forwarder outlives them (a handler, not
/// `SIG_IGN`, so the command does not inherit the disposition) and ends
/// with its child.
fn outlive_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        let handler: extern "C" fn(libc::c_int) = ignore;
        // SAFETY: installs a handler that does nothing (async-signal-safe
        // by construction) for a standard signal; no memory is shared.
        unsafe {
            libc::signal(signal, handler as libc::sighandler_t);
        }
    }
}

fn serve(listener: &TcpListener, socket: &Path) {
    for connection in listener.incoming() {
        let Ok(connection) = connection else {
            continue;
        };
        let socket = socket.to_owned();
        std::thread::spawn(move || relay(connection, &socket));
    }
}

/// Copies both ways until each side has said it is done.
fn relay(tcp: TcpStream, socket: &Path) {
    let Ok(unix) = UnixStream::connect(socket) else {
        return;
    };
    let (Ok(mut tcp_in), Ok(mut unix_out)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let upward = std::thread::spawn(move || {
        let _ = io::copy(&mut tcp_in, &mut unix_out);
        let _ = unix_out.shutdown(Shutdown::Write);
    });
    let (mut unix_in, mut tcp_out) = (unix, tcp);
    let _ = io::copy(&mut unix_in, &mut tcp_out);
    let _ = tcp_out.shutdown(Shutdown::Write);
    let _ = upward.join();
}
