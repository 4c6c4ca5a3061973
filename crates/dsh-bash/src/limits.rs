//! The resource limits a command runs under, as facts of its result.

use serde::{Deserialize, Serialize};

/// How a command's limits were applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum LimitMechanism {
    /// Controllers of the command's own cgroup v2 (`pids.max`,
    /// `memory.max` with `memory.swap.max`, `cpu.max`): the whole tree.
    CgroupV2,
    /// The command's own cgroups on the v1 `pids`, `memory` and `cpu`
    /// hierarchies of a hybrid host: the whole tree.
    CgroupV1,
    /// `setrlimit` in the command's first process, inherited by each of
    /// its processes: per process, not per tree (`RLIMIT_DATA` for
    /// memory); no process or CPU limit.
    Rlimit,
    /// The cgroup a container engine made for the session's container:
    /// the whole container, every command of the session together.
    Container,
}

impl std::fmt::Display for LimitMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitMechanism::CgroupV2 => "cgroup v2",
            LimitMechanism::CgroupV1 => "cgroup v1",
            LimitMechanism::Rlimit => "rlimit",
            LimitMechanism::Container => "container",
        })
    }
}

/// The limits a command ran under and whether it hit one. Every limit
/// named here was in force; one configured but not applied is in
/// `missing` (and `partial` is true), never silently absent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashLimits {
    /// How they were applied.
    pub mechanism: LimitMechanism,
    /// At most this many processes at once in the command's tree (the
    /// kernel counts threads).
    pub processes: Option<u64>,
    /// At most this many bytes of memory (swap included where the
    /// mechanism covers it; per process under [`LimitMechanism::Rlimit`]).
    pub memory_bytes: Option<u64>,
    /// At most this much CPU time per second of wall time, in thousandths
    /// of a CPU (500 is half of one CPU).
    pub cpu_millicores: Option<u32>,
    /// True when a configured limit could not be applied.
    pub partial: bool,
    /// The configured limits not applied: `processes`, `memory`, `cpu`.
    #[serde(default)]
    pub missing: Vec<String>,
    /// The kernel's OOM killer killed a process of the command at its
    /// memory limit (from `memory.events` `oom_kill`, not guessed from a
    /// SIGKILL).
    #[serde(default)]
    pub oom_killed: bool,
    /// A fork failed at the process limit (`pids.events` `max`).
    #[serde(default)]
    pub process_limit_hit: bool,
}
