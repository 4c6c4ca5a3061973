use std::path::PathBuf;
use std::time::Duration;

/// How a [`crate::LocalBashExecutor`] runs commands. `Default` gives the
/// documented defaults.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Workdir for requests without one; `None` = the process cwd at run time.
    pub cwd: Option<PathBuf>,
    /// Foreground timeout when a request gives none. Default 120 s.
    pub default_timeout: Duration,
    /// Cap on any foreground timeout; larger requests are clamped.
    /// Default 600 s.
    pub max_timeout: Duration,
    /// Bytes kept in memory per stream; beyond that the tail is kept and the
    /// complete stream goes to a spill file. Default 64 000.
    pub max_output_bytes: u64,
    /// The most bytes one stream's spill file may hold. Past it the tail
    /// keeps updating in memory, the file keeps its first bytes, and the
    /// result says the full output was capped. Default 1 GiB.
    pub max_spill_bytes: u64,
    /// Time between SIGTERM and SIGKILL when a command is stopped.
    /// Default 3 s.
    pub grace: Duration,
    /// The same when the executor shuts down (at most `grace`): a host told
    /// to stop exits promptly. Default 500 ms.
    pub shutdown_grace: Duration,
    /// How long a finished shell's output pipes may stay open before the
    /// run returns anyway: a leftover `server &` must not hang the call.
    /// Default 250 ms.
    pub linger: Duration,
    /// The shell, run as `<shell> -c <command>`. Default `bash` (from PATH).
    pub shell: PathBuf,
    /// Parent directory of the private spill directory; `None` = the
    /// system temp dir.
    pub spill_parent: Option<PathBuf>,
    /// Which inherited environment variables are dropped.
    pub scrub: ScrubPolicy,
    /// How many finished background tasks of one owner stay readable (one
    /// owner's tasks never push out another's). Default 256.
    pub retain_finished_tasks: usize,
    /// How many spill files one owner keeps at most (the server keeps at
    /// most four times as many over all owners). Default 512.
    pub retain_spill_files: usize,
    /// How many spill bytes one owner keeps at most (its newest file is
    /// always kept; the server keeps at most four times as many over all
    /// owners, running files counted). Default 2 GiB.
    pub retain_spill_bytes: u64,
    /// Which containment to use. Default [`ContainmentChoice::Auto`].
    pub containment: ContainmentChoice,
    /// Remove the spill directory (every full-output file) at shutdown:
    /// right for a server whose paths mean nothing after its session;
    /// wrong for a one-shot `run` whose printed path must stay readable.
    /// Default false.
    pub discard_spill_on_shutdown: bool,
    /// Make the host process the subreaper of its commands' orphans, so the
    /// process-tree containment also stops what a command's shell left
    /// behind when it exited (a fork in its SIGTERM handler, a `setsid`
    /// daemon). Only for a host with no children of its own besides the
    /// executor's: every other child of the host counts as an orphan and is
    /// reaped. Default false.
    pub adopt_orphans: bool,
    /// The resource limits every command (foreground or background) runs
    /// under, set by the operator, never widened by a request. Default:
    /// [`ResourceLimits::for_this_machine`].
    pub limits: ResourceLimits,
    /// Tasks taking input (a terminal or an open stdin) one owner may have
    /// running at once; past it starting one is refused. Default 16.
    pub max_interactive_tasks: usize,
    /// The user's shell snapshot every command sources once it is taken
    /// ([`crate::take_shell_snapshot`]; bash shells only). Default none.
    pub shell_snapshot: Option<std::sync::Arc<crate::SnapshotSlot>>,
    /// List in each result the files that changed under this workspace
    /// while the command ran ([`dsh_bash::WorkspaceChanges`]). Default
    /// none.
    pub changes: Option<ChangeTracking>,
}

/// Which workspace's changes each result lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeTracking {
    /// The workspace.
    pub root: PathBuf,
    /// Past this many directories the workspace is not tracked (its
    /// results list no changes, and the server says why at start).
    pub max_dirs: usize,
}

impl ChangeTracking {
    /// The default limit on directories watched.
    pub const MAX_DIRS: usize = 10_000;
}

/// Which mechanism contains commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContainmentChoice {
    /// A cgroup per command where one can be created (root on a cgroup v2
    /// host, or a writable delegated subtree), else the process-tree walk.
    #[default]
    Auto,
    /// Always the process-tree walk.
    ProcessTree,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            cwd: None,
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            max_output_bytes: 64_000,
            max_spill_bytes: 1 << 30,
            grace: Duration::from_secs(3),
            shutdown_grace: Duration::from_millis(500),
            linger: Duration::from_millis(250),
            shell: PathBuf::from("bash"),
            spill_parent: None,
            scrub: ScrubPolicy::default(),
            retain_finished_tasks: 256,
            retain_spill_files: 512,
            retain_spill_bytes: 2 << 30,
            containment: ContainmentChoice::Auto,
            discard_spill_on_shutdown: false,
            adopt_orphans: false,
            limits: ResourceLimits::for_this_machine(),
            max_interactive_tasks: 16,
            shell_snapshot: None,
            changes: None,
        }
    }
}

/// Per-command resource limits; `None` is no limit of that kind. Applied
/// by the strongest mechanism the host has (cgroup v2 controllers, the v1
/// hierarchies of a hybrid host, else `setrlimit`), named in each result
/// with any limit it could not apply (see [`dsh_bash::BashLimits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Processes at once in the command's tree (threads count).
    pub processes: Option<u64>,
    /// Bytes of memory, swap included where the controller allows.
    pub memory_bytes: Option<u64>,
    /// CPU time per second of wall time, in thousandths of a CPU.
    pub cpu_millicores: Option<u32>,
}

impl ResourceLimits {
    /// No limits at all.
    pub const NONE: ResourceLimits = ResourceLimits {
        processes: None,
        memory_bytes: None,
        cpu_millicores: None,
    };

    /// The defaults: processes the larger of 4096 and 64 per CPU (a
    /// parallel build on a big machine must not hit it), memory the
    /// smaller of 8 GiB and half of the machine's memory, no CPU limit.
    pub fn for_this_machine() -> ResourceLimits {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let half_memory = machine_memory().map_or(8 << 30, |bytes| bytes / 2);
        ResourceLimits {
            processes: Some(4096.max(64 * cpus as u64)),
            memory_bytes: Some(half_memory.min(8 << 30)),
            cpu_millicores: None,
        }
    }

    /// True when no limit is set.
    pub fn is_none(&self) -> bool {
        *self == ResourceLimits::NONE
    }
}

/// The smallest memory limit accepted: below it `bash` itself cannot
/// start, and every command would fail as if it had run out of memory.
pub(crate) const MIN_MEMORY_LIMIT: u64 = 4 << 20;

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`).
fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Which inherited environment variables never reach a command: those
/// whose name matches a pattern or ends in `_PAT`, `_DSN` or `_AUTH` (or
/// in `_PWD`, unless the value is a directory: `_PYENV_VH_PWD`), and those
/// whose value carries a credential (a URL with a
/// password, a connection string's `Password=`, a well-known token shape),
/// unless allowed by name.
#[derive(Clone, Debug)]
pub struct ScrubPolicy {
    /// A variable whose NAME contains one of these (case-insensitively) is
    /// dropped. Default: KEY, SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL.
    pub patterns: Vec<String>,
    /// Exact names that pass even if they match a pattern or carry a
    /// credential.
    pub allow: Vec<String>,
}

impl Default for ScrubPolicy {
    fn default() -> Self {
        ScrubPolicy {
            patterns: ["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL"]
                .map(String::from)
                .to_vec(),
            allow: Vec::new(),
        }
    }
}

/// A configuration value that cannot work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration is zero.
    #[error("invalid {field}: expected a positive duration, got 0")]
    Duration {
        /// The offending field.
        field: &'static str,
    },
    /// A size or count is zero.
    #[error("invalid {field}: expected a positive number, got 0")]
    Zero {
        /// The offending field.
        field: &'static str,
    },
    /// A memory limit too small for `bash` to start.
    #[error("invalid limits.memory_bytes: {bytes} is below the 4 MiB a shell needs to start")]
    MemoryLimit {
        /// The limit given.
        bytes: u64,
    },
    /// The default timeout exceeds the cap.
    #[error("invalid default_timeout: {default:?} exceeds max_timeout {max:?}")]
    DefaultAboveCap {
        /// The default.
        default: Duration,
        /// The cap.
        max: Duration,
    },
    /// The host (the threads every command is spawned from and stopped on,
    /// the watchdog) could not start.
    #[error("{why} (the process may be out of threads: raise RLIMIT_NPROC or end processes, then start again)")]
    Host {
        /// What failed.
        why: String,
    },
    /// This platform cannot run local commands the way this executor
    /// promises (it needs Linux: pidfds, cgroups, `clone`).
    #[error("LocalBashExecutor runs commands on Linux only (pidfds, cgroups, clone), and this is {os}; run them on a Linux machine through dsh-bash-remote (ssh host dsh-bash mcp)")]
    Unsupported {
        /// `std::env::consts::OS`.
        os: &'static str,
    },
}

impl LocalConfig {
    /// Where spill directories are made: `spill_parent`, else the temp dir.
    pub fn spill_parent(&self) -> PathBuf {
        self.spill_parent
            .clone()
            .unwrap_or_else(crate::scratch::temp_dir)
    }
}

impl LocalConfig {
    /// Checks every field; the first bad one is named in the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("default_timeout", self.default_timeout),
            ("max_timeout", self.max_timeout),
            ("grace", self.grace),
            ("shutdown_grace", self.shutdown_grace),
            ("linger", self.linger),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Duration { field });
            }
        }
        for (field, value) in [
            ("max_output_bytes", self.max_output_bytes),
            ("max_spill_bytes", self.max_spill_bytes),
            ("retain_finished_tasks", self.retain_finished_tasks as u64),
            ("retain_spill_files", self.retain_spill_files as u64),
            ("retain_spill_bytes", self.retain_spill_bytes),
            ("max_interactive_tasks", self.max_interactive_tasks as u64),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        for (field, value) in [
            ("limits.processes", self.limits.processes),
            ("limits.memory_bytes", self.limits.memory_bytes),
            (
                "limits.cpu_millicores",
                self.limits.cpu_millicores.map(u64::from),
            ),
        ] {
            if value == Some(0) {
                return Err(ConfigError::Zero { field });
            }
        }
        if self
            .limits
            .memory_bytes
            .is_some_and(|bytes| bytes < MIN_MEMORY_LIMIT)
        {
            return Err(ConfigError::MemoryLimit {
                bytes: self.limits.memory_bytes.unwrap_or(0),
            });
        }
        if self.default_timeout > self.max_timeout {
            return Err(ConfigError::DefaultAboveCap {
                default: self.default_timeout,
                max: self.max_timeout,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_duration_names_its_field() {
        for field in ["default_timeout", "max_timeout", "grace", "linger"] {
            let mut config = LocalConfig::default();
            match field {
                "default_timeout" => config.default_timeout = Duration::ZERO,
                "max_timeout" => config.max_timeout = Duration::ZERO,
                "grace" => config.grace = Duration::ZERO,
                _ => config.linger = Duration::ZERO,
            }
            assert_eq!(
                config.validate().unwrap_err().to_string(),
                format!("invalid {field}: expected a positive duration, got 0")
            );
        }
        let config = LocalConfig {
            max_output_bytes: 0,
            ..LocalConfig::default()
        };
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "invalid max_output_bytes: expected a positive number, got 0"
        );
        assert!(LocalConfig::default().validate().is_ok());
    }
}
