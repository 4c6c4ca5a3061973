//! The policy file.
//!
//! TOML, read from up to three places in this order, each optional:
//!
//! 1. the system's, `/etc/dsh-bash/config.toml` (`DSH_BASH_SYSTEM_CONFIG`
//!    names another; empty: none);
//! 2. the user's, `$XDG_CONFIG_HOME/dsh-bash/config.toml`, else
//!    `~/.config/dsh-bash/config.toml` — or the file `--config` names,
//!    which must exist; an approval "always" is appended here;
//! 3. the workspace's, `.dsh-bash/config.toml` in the workspace (never
//!    through a symbolic link).
//!
//! The user's file sets what the system's did not, or over it; lists
//! (protected and hidden paths, denied hosts, rules) add up. The
//! workspace's file — which the project's authors, and anything that runs
//! in the workspace, can write — only tightens: a narrower sandbox mode
//! or network, fewer allowed hosts (each one the user allows), more
//! protected and hidden paths and denied hosts, lower limits, ask and
//! deny rules; anything wider is an error naming its file, line and key.
//! Flags given on the command line win over every file.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::too_many_lines))]

use std::path::{Path, PathBuf};

use dsh_rules::{Decision, Rule};
use dsh_sandbox::{HostPattern, HostPreset, NetworkPolicy, SandboxMode};
use toml::Spanned;

mod doc;
mod keep;
mod layer;
mod read;
mod show;
pub mod values;

pub use keep::{keep_rule, Kept};
pub use read::Sources;
pub use values::Limit;

/// Which file a value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The system's file.
    System,
    /// The user's file (or `--config`).
    User,
    /// The workspace's file: only tightens.
    Workspace,
}

/// Where a value was written: a file and a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The file.
    pub path: PathBuf,
    /// Its line, from 1.
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.line)
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Set<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub from: Origin,
    /// Only a workspace's file set it, over no value of the user's: it
    /// may only lower the built-in default, never raise it.
    pub lowers_only: bool,
}

/// The policy the files give together.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// `sandbox.mode`.
    pub mode: Option<Set<SandboxMode>>,
    /// `sandbox.backend`: auto, bwrap or landlock.
    pub backend: Option<Set<String>>,
    /// `sandbox.workspace`.
    pub workspace: Option<Set<PathBuf>>,
    /// `sandbox.protect`.
    pub protect: Vec<Set<String>>,
    /// `sandbox.unprotect`.
    pub unprotect: Vec<Set<String>>,
    /// `sandbox.hide`.
    pub hide: Vec<Set<String>>,
    /// `sandbox.unhide`.
    pub unhide: Vec<Set<String>>,
    /// `network.mode`.
    pub network: Option<Set<NetworkPolicy>>,
    /// `network.allow_hosts` (none: not set).
    pub allow_hosts: Option<Vec<Set<HostPattern>>>,
    /// `network.deny_hosts`.
    pub deny_hosts: Vec<Set<HostPattern>>,
    /// `network.presets` (none: not set).
    pub presets: Option<Vec<Set<HostPreset>>>,
    /// `limits.processes`.
    pub processes: Option<Set<Limit>>,
    /// `limits.memory`, bytes.
    pub memory: Option<Set<Limit>>,
    /// `limits.cpu`, millicores.
    pub cpu: Option<Set<Limit>>,
    /// `limits.spill_bytes`.
    pub spill_bytes: Option<Set<u64>>,
    /// `limits.commands`: commands one session may run at once.
    pub commands: Option<Set<u64>>,
    /// `timeouts.default_ms`.
    pub timeout_ms: Option<Set<f64>>,
    /// `timeouts.max_ms`.
    pub max_timeout_ms: Option<Set<f64>>,
    /// `timeouts.yield_ms`.
    pub yield_ms: Option<Set<f64>>,
    /// `output.max_bytes`.
    pub output_bytes: Option<Set<u64>>,
    /// Every `[[rule]]`, in the order read (origin set).
    pub rules: Vec<Rule>,
    /// The files read, in order.
    pub read: Vec<(Place, PathBuf)>,
    /// Where an approval "always" is kept (the user's file or
    /// `--config`), if there is a home to keep it in.
    pub user_file: Option<PathBuf>,
    /// Files that were not read, and why (to be told as warnings).
    pub skipped: Vec<String>,
}

/// Why the policy cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A file exists but cannot be read.
    #[error("cannot read the policy file {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The user's file lies where this user may not look (a home that is
    /// another user's): skipped, with a warning (see [`Policy::skipped`]).
    #[error("the policy file {0} is not this user's to read (permission denied); skipped")]
    NotOurs(PathBuf),
    /// `--config` names no file.
    #[error("--config {0}: no such file; name an existing TOML policy file (see `dsh-bash config show`)")]
    Missing(PathBuf),
    /// Not TOML, or a key the file may not hold.
    #[error("{at}: {message}")]
    Syntax {
        /// Where.
        at: Origin,
        /// What the TOML reader said.
        message: String,
    },
    /// A value that is not one of the allowed ones.
    #[error("{at}: {key}: {what}")]
    Value {
        /// Where.
        at: Origin,
        /// The key (`network.mode`).
        key: String,
        /// What was wrong and what is allowed.
        what: String,
    },
    /// A workspace's file that would widen what the user's allows.
    #[error("{at}: {key}: {what} (a workspace's policy file can only tighten the user's)")]
    Widens {
        /// Where.
        at: Origin,
        /// The key.
        key: String,
        /// What it would widen.
        what: String,
    },
}

impl Policy {
    /// The policy of the files `sources` finds.
    pub fn load(sources: &Sources) -> Result<Policy, PolicyError> {
        let mut policy = Policy {
            user_file: sources.user.clone(),
            ..Policy::default()
        };
        for (place, path) in sources.places() {
            let text = match read::text(place, &path, sources.explicit) {
                Ok(Some(text)) => text,
                Ok(None) => continue,
                Err(err @ PolicyError::NotOurs(_)) => {
                    policy.skipped.push(err.to_string());
                    policy.user_file = None;
                    continue;
                }
                Err(err) => return Err(err),
            };
            let doc: doc::Doc = toml::from_str(&text).map_err(|err| PolicyError::Syntax {
                at: Origin {
                    path: path.clone(),
                    line: err.span().map_or(1, |span| line_of(&text, span.start)),
                },
                message: err.message().trim().to_owned(),
            })?;
            let file = layer::File {
                place,
                path: &path,
                text: &text,
                operator: layer::Operator {
                    mode: sources.operator_mode,
                    network: sources.operator_network,
                },
            };
            file.apply(doc, &mut policy)?;
            policy.read.push((place, path));
        }
        Ok(policy)
    }

    /// The rules, ready to judge with (each was checked when its file was
    /// read; a rule that cannot be used is an error, never dropped).
    pub fn rules(&self) -> Result<dsh_rules::Rules, PolicyError> {
        dsh_rules::Rules::new(self.rules.clone()).map_err(|(at, err)| PolicyError::Value {
            at: self.rules[at].origin.as_ref().map_or_else(
                || Origin {
                    path: PathBuf::new(),
                    line: 0,
                },
                |origin| {
                    let (path, line) = origin.rsplit_once(':').unwrap_or((origin, "0"));
                    Origin {
                        path: path.into(),
                        line: line.parse().unwrap_or(0),
                    }
                },
            ),
            key: "rule.command".into(),
            what: err.to_string(),
        })
    }

    /// The policy as TOML, each value with a comment saying where it came
    /// from.
    pub fn shown(&self) -> String {
        show::shown(self)
    }

    /// True if any rule says `decision`.
    pub fn has_rules(&self, decision: Decision) -> bool {
        self.rules.iter().any(|r| r.decision == decision)
    }
}

/// The line (from 1) of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(1, |before| {
        before.bytes().filter(|b| *b == b'\n').count() + 1
    })
}

/// Where a spanned value was written.
fn origin<T>(path: &Path, text: &str, value: &Spanned<T>) -> Origin {
    Origin {
        path: path.to_owned(),
        line: line_of(text, value.span().start),
    }
}

#[cfg(test)]
mod tests;
