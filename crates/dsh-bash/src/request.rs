use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{NetworkPolicy, OwnerToken, SandboxMode};

/// What a caller asks an executor to run. Every knob but `command` is
/// optional; [`crate::BashExecutor::resolve`] fills them in.
#[derive(Clone, Debug, Default)]
pub struct BashExecRequest {
    /// The command line, run as `bash -c <command>`.
    pub command: String,
    /// Working directory; absent = the executor's configured cwd, else the
    /// process cwd.
    pub workdir: Option<PathBuf>,
    /// Foreground timeout; absent = the executor default. Capped at the
    /// executor maximum; zero is an error.
    pub timeout: Option<Duration>,
    /// Cancelling this token kills the command (foreground or background).
    pub cancel: Option<CancellationToken>,
    /// Bytes written to the command's stdin, which is then closed. Absent:
    /// stdin is `/dev/null`. Present but empty: an empty pipe.
    pub stdin: Option<Vec<u8>>,
    /// Extra environment entries, merged after the credential scrub and the
    /// fixed overrides, so an explicit entry always wins.
    pub env: Option<BTreeMap<String, String>>,
    /// The owning session of a background task.
    pub owner: Option<OwnerToken>,
    /// An explicit per-call sandbox mode (meaningful to confining executors).
    pub sandbox_mode: Option<SandboxMode>,
    /// An explicit per-call network policy (meaningful to confining
    /// executors); absent = the executor's default for the mode.
    pub network: Option<NetworkPolicy>,
    /// Hosts this one call may reach beside the executor's allow-list (a
    /// person approved them): a confining executor runs it under the
    /// network policy `allow` where the network would be off. The
    /// deny-list still wins.
    pub allow_hosts: Vec<dsh_sandbox::HostPattern>,
    /// Run it in a terminal of this size: its stdin, stdout and stderr are
    /// a fresh pseudo-terminal (one output stream), it is the session
    /// leader with that terminal as its controlling terminal, and a
    /// background task takes input ([`crate::BashExecutor::write_input`])
    /// and has a screen ([`crate::BashExecutor::screen`]).
    pub terminal: Option<TerminalSize>,
    /// A background task whose stdin stays an open pipe to write to
    /// ([`crate::BashExecutor::write_input`]) instead of `/dev/null`.
    pub interactive: bool,
    /// Report the directory a foreground command's shell ended in
    /// ([`crate::ShellFacts::final_cwd`]), for a caller that keeps the
    /// working directory between calls. Learned from the shell itself (an
    /// `EXIT` trap writing to a descriptor), never from its output;
    /// executors whose shell is not bash report none.
    pub report_cwd: bool,
    /// The working directory is canonical as a person approved it: an
    /// executor refuses to start the command if a symlink is on its path
    /// when it starts ([`BashError::WorkdirMoved`](crate::BashError)),
    /// rather than start where the link points.
    pub workdir_pinned: bool,
}

/// The most columns (and rows) a terminal may have: a screen is kept in
/// memory, cell by cell.
pub const MAX_TERMINAL_CELLS: u16 = 500;

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TerminalSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

impl Default for TerminalSize {
    /// 120 columns by 40 rows.
    fn default() -> Self {
        TerminalSize {
            cols: 120,
            rows: 40,
        }
    }
}

impl BashExecRequest {
    /// A request for `command` with every other knob left to the executor.
    pub fn new(command: impl Into<String>) -> Self {
        BashExecRequest {
            command: command.into(),
            ..BashExecRequest::default()
        }
    }

    /// What no executor can run, whatever its limits: a command holding a
    /// NUL byte, an environment name that is empty or holds `=` or NUL
    /// (`A=B` as a name would set `A` to `B=…`, past any check of `A`).
    pub fn check_command_and_env(&self) -> Result<(), crate::BashError> {
        if self.command.contains('\0') {
            return Err(crate::BashError::CommandHasNul);
        }
        if let Some(size) = self.terminal {
            let fits = |n: u16| (1..=MAX_TERMINAL_CELLS).contains(&n);
            if !(fits(size.cols) && fits(size.rows)) {
                return Err(crate::BashError::Unsupported {
                    what: "a terminal of that size",
                    why: format!(
                        "{}x{} was asked for; columns and rows must each be 1 to {MAX_TERMINAL_CELLS}",
                        size.cols, size.rows
                    ),
                });
            }
        }
        if let Some(name) = self
            .env
            .iter()
            .flat_map(|env| env.keys())
            .find(|name| name.is_empty() || name.contains(['=', '\0']))
        {
            return Err(crate::BashError::EnvRefused {
                name: name.clone(),
                why: "a variable's name cannot be empty or hold '=' or NUL".into(),
            });
        }
        Ok(())
    }
}

/// What an executor fills a request's blanks with (see
/// [`BashExecRequest::into_spec`]).
#[derive(Clone, Debug)]
pub struct Defaults {
    /// The timeout when the request names none.
    pub timeout: Duration,
    /// The longest timeout: a longer one asked for is cut to it.
    pub max_timeout: Duration,
    /// The working directory when the request names none, and what a
    /// relative one is joined to.
    pub workdir: PathBuf,
    /// The sandbox mode when the request names none (`None`: the executor
    /// does not confine).
    pub sandbox_mode: Option<SandboxMode>,
    /// The network policy under each mode, for a request that names a
    /// mode but no policy (a mode not listed: none).
    pub networks: Vec<(SandboxMode, NetworkPolicy)>,
}

impl Defaults {
    /// Defaults with no sandbox: a timeout, its ceiling and a directory.
    pub fn unconfined(timeout: Duration, max_timeout: Duration, workdir: PathBuf) -> Defaults {
        Defaults {
            timeout,
            max_timeout,
            workdir,
            sandbox_mode: None,
            networks: Vec::new(),
        }
    }
}

impl BashExecRequest {
    /// The one defaulting of a request into a spec, every executor's: a
    /// zero timeout refused and a long one cut to the ceiling, what no
    /// executor can run refused ([`BashExecRequest::check_command_and_env`]),
    /// the working directory defaulted and a relative one joined to the
    /// default, the sandbox mode and its network defaulted.
    pub fn into_spec(self, defaults: &Defaults) -> Result<BashExecSpec, crate::BashError> {
        let timeout = match self.timeout {
            Some(value) if value.is_zero() => return Err(crate::BashError::InvalidTimeout),
            Some(value) => value.min(defaults.max_timeout),
            None => defaults.timeout.min(defaults.max_timeout),
        };
        self.check_command_and_env()?;
        let workdir = match self.workdir {
            Some(dir) if dir.is_absolute() => dir,
            Some(dir) => defaults.workdir.join(dir),
            None => defaults.workdir.clone(),
        };
        let sandbox_mode = self.sandbox_mode.or(defaults.sandbox_mode);
        let network = self.network.or_else(|| {
            let mode = sandbox_mode?;
            let listed = defaults.networks.iter().find(|(m, _)| *m == mode);
            listed.map(|(_, policy)| *policy)
        });
        Ok(BashExecSpec {
            command: self.command,
            workdir,
            timeout,
            owner: self.owner,
            sandbox_mode,
            network,
            allow_hosts: self.allow_hosts,
            stdin: self.stdin,
            env: self.env,
            cancel: self.cancel,
            terminal: self.terminal,
            interactive: self.interactive,
            report_cwd: self.report_cwd,
            workdir_pinned: self.workdir_pinned,
        })
    }
}

/// What an executor actually runs: the request with every default applied.
#[derive(Clone, Debug)]
pub struct BashExecSpec {
    /// The command line, run as `bash -c <command>`.
    pub command: String,
    /// The absolute working directory.
    pub workdir: PathBuf,
    /// The effective timeout (after defaulting and capping). Background
    /// tasks ignore it.
    pub timeout: Duration,
    /// The owner, always set explicitly by `resolve` (possibly `None`).
    pub owner: Option<OwnerToken>,
    /// The sandbox mode, always set explicitly by `resolve` (`None` under an
    /// executor that never confines).
    pub sandbox_mode: Option<SandboxMode>,
    /// The network policy, set by `resolve` of a confining executor
    /// (`None` under one that never confines).
    pub network: Option<NetworkPolicy>,
    /// Hosts beside the executor's allow-list, carried through verbatim.
    pub allow_hosts: Vec<dsh_sandbox::HostPattern>,
    /// stdin bytes, carried through verbatim.
    pub stdin: Option<Vec<u8>>,
    /// Explicit environment entries, carried through verbatim.
    pub env: Option<BTreeMap<String, String>>,
    /// Cancellation, carried through verbatim.
    pub cancel: Option<CancellationToken>,
    /// The terminal, carried through verbatim.
    pub terminal: Option<TerminalSize>,
    /// An open stdin, carried through verbatim.
    pub interactive: bool,
    /// Whether to report the final directory, carried through verbatim.
    pub report_cwd: bool,
    /// Whether the working directory is pinned (see the request's).
    pub workdir_pinned: bool,
}

impl BashExecSpec {
    /// True if its cancellation has already fired (nothing may start).
    pub fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confined() -> Defaults {
        Defaults {
            sandbox_mode: Some(SandboxMode::WorkspaceWrite),
            networks: vec![(SandboxMode::WorkspaceWrite, NetworkPolicy::Off)],
            ..Defaults::unconfined(
                Duration::from_secs(120),
                Duration::from_secs(600),
                PathBuf::from("/work"),
            )
        }
    }

    #[test]
    fn timeouts_are_defaulted_cut_and_never_zero() {
        let spec = BashExecRequest::new("true").into_spec(&confined()).unwrap();
        assert_eq!(spec.timeout, Duration::from_secs(120));
        let mut long = BashExecRequest::new("true");
        long.timeout = Some(Duration::from_secs(3600));
        assert_eq!(
            long.into_spec(&confined()).unwrap().timeout,
            Duration::from_secs(600)
        );
        let mut zero = BashExecRequest::new("true");
        zero.timeout = Some(Duration::ZERO);
        assert!(matches!(
            zero.into_spec(&confined()),
            Err(crate::BashError::InvalidTimeout)
        ));
        assert!(matches!(
            BashExecRequest::new("a\0b").into_spec(&confined()),
            Err(crate::BashError::CommandHasNul)
        ));
    }

    #[test]
    fn directories_modes_and_networks_are_defaulted() {
        let spec = BashExecRequest::new("true").into_spec(&confined()).unwrap();
        assert_eq!(spec.workdir, PathBuf::from("/work"));
        assert_eq!(spec.sandbox_mode, Some(SandboxMode::WorkspaceWrite));
        assert_eq!(spec.network, Some(NetworkPolicy::Off));
        let mut relative = BashExecRequest::new("true");
        relative.workdir = Some(PathBuf::from("sub/dir"));
        relative.sandbox_mode = Some(SandboxMode::DangerFullAccess);
        let spec = relative.into_spec(&confined()).unwrap();
        assert_eq!(spec.workdir, PathBuf::from("/work/sub/dir"));
        // A mode with no policy listed: none (the executor's own default).
        assert_eq!(spec.network, None);
        let mut absolute = BashExecRequest::new("true");
        absolute.workdir = Some(PathBuf::from("/elsewhere"));
        absolute.network = Some(NetworkPolicy::On);
        let spec = absolute.into_spec(&confined()).unwrap();
        assert_eq!(spec.workdir, PathBuf::from("/elsewhere"));
        assert_eq!(spec.network, Some(NetworkPolicy::On));
    }
}
