//! The forwarder: the host's own binary, re-executed inside a network
//! namespace that holds only loopback, listening on `127.0.0.1:3128` there
//! and relaying each connection to the proxy door's unix socket bound into
//! the sandbox. It binds, forks the relay into a session of its own (so
//! the signals a stop or a terminal sends the command's group do not cut
//! the command's network), and execs the command in its own place: the
//! command keeps its pid, its exit status and its death by signal. The
//! relay ends with the sandbox (bubblewrap's pid namespace goes with the
//! command).
//!
//! A host opts in by calling [`run_if_asked`] first in `main`; a sandbox
//! provider puts [`argv`] before the command's own argv.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;

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
    // SAFETY: called first in `main` (`run_if_asked`), before any thread
    // exists, so the child is a whole copy of a single-threaded process
    // and may run any code.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!(
                "dsh-bash: the network forwarder cannot fork its relay: {}",
                io::Error::last_os_error()
            );
            125
        }
        0 => {
            relay_alone();
            serve(&listener, Path::new(socket));
            0
        }
        _ => {
            drop(listener);
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

/// The relay leaves the command's session and process group and lets go
/// of its standard streams (the command's output pipes end with the
/// command, not with the relay).
fn relay_alone() {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null");
    // SAFETY: plain syscalls on descriptors this process owns; `setsid`
    // cannot fail for a freshly forked child (it leads no group).
    unsafe {
        libc::setsid();
        if let Ok(null) = &null {
            for fd in 0..3 {
                libc::dup2(std::os::fd::AsRawFd::as_raw_fd(null), fd);
            }
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

/// Copies `from` to `to` in 64 KiB steps until `from` ends, then says so
/// to `to`'s reader.
fn pump(mut from: impl Read, mut to: impl Write, done: impl FnOnce()) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    done();
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
        let half = unix_out.try_clone();
        pump(&mut tcp_in, &mut unix_out, move || {
            if let Ok(half) = half {
                let _ = half.shutdown(Shutdown::Write);
            }
        });
    });
    let half = tcp.try_clone();
    pump(&unix, &tcp, move || {
        if let Ok(half) = half {
            let _ = half.shutdown(Shutdown::Write);
        }
    });
    let _ = upward.join();
}
