//! One file applied over the ones before it: the user's sets, the
//! workspace's only tightens.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use dsh_rules::Decision;
use dsh_sandbox::{HostPattern, NetworkPolicy, SandboxMode};
use toml::Spanned;

use crate::doc::{self, Doc, LimitsDoc, NetworkDoc, SandboxDoc, TimeoutsDoc};
use crate::values::{self, Limit};
use crate::{origin, Origin, Place, Policy, PolicyError, Set};

/// The longest duration a file may give, in milliseconds (about 31 years).
const MAX_MS: i64 = 1_000_000_000_000;

/// What the operator's flags set, which a workspace's file tightens too.
#[derive(Clone, Copy, Debug, Default)]
pub struct Operator {
    pub mode: Option<SandboxMode>,
    pub network: Option<NetworkPolicy>,
}

/// One file being applied.
pub struct File<'a> {
    pub place: Place,
    pub path: &'a Path,
    pub text: &'a str,
    pub operator: Operator,
}

impl File<'_> {
    /// Applies `doc` over `policy`.
    pub fn apply(&self, doc: Doc, policy: &mut Policy) -> Result<(), PolicyError> {
        // What the files before this one let the network do.
        let standing = standing_network(policy, self.operator);
        self.sandbox(doc.sandbox, policy)?;
        self.network(doc.network, standing, policy)?;
        self.limits(doc.limits, policy)?;
        self.timeouts(doc.timeouts, doc.output, policy)?;
        for rule in doc.rule {
            let at = self.at(&rule);
            let mut rule = rule.into_inner();
            rule.check().map_err(|err| PolicyError::Value {
                at: at.clone(),
                key: "rule.command".into(),
                what: err.to_string(),
            })?;
            check_grants(&rule).map_err(|what| PolicyError::Value {
                at: at.clone(),
                key: "rule.grants".into(),
                what,
            })?;
            if self.tightens_only() && rule.decision == Decision::Allow {
                return Err(PolicyError::Widens {
                    at,
                    key: "rule.decision".into(),
                    what: format!("\"allow\" for `{}` is a standing approval only the user's file gives; a workspace's file may add \"ask\" and \"deny\" rules", rule.shown()),
                });
            }
            rule.origin = Some(at.to_string());
            policy.rules.push(rule);
        }
        Ok(())
    }

    fn tightens_only(&self) -> bool {
        self.place == Place::Workspace
    }

    fn at<T>(&self, value: &Spanned<T>) -> Origin {
        origin(self.path, self.text, value)
    }

    fn set<T, U>(&self, spanned: &Spanned<U>, value: T, lowers_only: bool) -> Set<T> {
        Set {
            value,
            from: self.at(spanned),
            lowers_only,
        }
    }

    fn value_error<T>(&self, spanned: &Spanned<T>, key: &str, what: String) -> PolicyError {
        PolicyError::Value {
            at: self.at(spanned),
            key: key.into(),
            what,
        }
    }

    fn widens<T>(&self, spanned: &Spanned<T>, key: &str, what: String) -> PolicyError {
        PolicyError::Widens {
            at: self.at(spanned),
            key: key.into(),
            what,
        }
    }

    /// A key only the system's or the user's file may set.
    fn users_only<T>(&self, value: &Option<Spanned<T>>, key: &str) -> Result<(), PolicyError> {
        match value {
            Some(value) if self.tightens_only() => Err(self.widens(
                value,
                key,
                "only the system's or the user's file (or --config) may set it".into(),
            )),
            _ => Ok(()),
        }
    }

    fn parsed<T: FromStr>(&self, text: &Spanned<String>, key: &str) -> Result<T, PolicyError>
    where
        T::Err: std::fmt::Display,
    {
        text.get_ref()
            .parse()
            .map_err(|err| self.value_error(text, key, format!("{err}")))
    }

    fn sandbox(&self, doc: SandboxDoc, policy: &mut Policy) -> Result<(), PolicyError> {
        if let Some(mode) = &doc.mode {
            let new: SandboxMode = self.parsed(mode, "sandbox.mode")?;
            let current = match (self.operator.mode, &policy.mode) {
                (Some(flag), _) => Some((flag, "--sandbox".to_owned())),
                (None, Some(set)) => Some((set.value, set.from.to_string())),
                (None, None) => None,
            };
            match current {
                Some((current, from)) if self.tightens_only() && new.is_wider_than(current) => {
                    return Err(self.widens(
                        mode,
                        "sandbox.mode",
                        format!("\"{new}\" is wider than \"{current}\" ({from})"),
                    ));
                }
                _ => policy.mode = Some(self.set(mode, new, false)),
            }
        }
        self.users_only(&doc.backend, "sandbox.backend")?;
        if let Some(backend) = &doc.backend {
            if !["auto", "bwrap", "landlock"].contains(&backend.get_ref().as_str()) {
                return Err(self.value_error(
                    backend,
                    "sandbox.backend",
                    format!(
                        "{:?} is not a backend; expected auto, bwrap or landlock",
                        backend.get_ref()
                    ),
                ));
            }
            policy.backend = Some(self.set(backend, backend.get_ref().clone(), false));
        }
        self.users_only(&doc.workspace, "sandbox.workspace")?;
        if let Some(workspace) = &doc.workspace {
            let path = PathBuf::from(workspace.get_ref());
            if !path.is_absolute() {
                return Err(self.value_error(
                    workspace,
                    "sandbox.workspace",
                    "expected an absolute directory".into(),
                ));
            }
            policy.workspace = Some(self.set(workspace, path, false));
        }
        self.users_only(&doc.unprotect, "sandbox.unprotect")?;
        self.users_only(&doc.unhide, "sandbox.unhide")?;
        self.paths(
            doc.protect.as_ref(),
            "sandbox.protect",
            false,
            &mut policy.protect,
        )?;
        self.paths(
            doc.unprotect.as_ref(),
            "sandbox.unprotect",
            false,
            &mut policy.unprotect,
        )?;
        self.paths(doc.hide.as_ref(), "sandbox.hide", true, &mut policy.hide)?;
        self.paths(
            doc.unhide.as_ref(),
            "sandbox.unhide",
            true,
            &mut policy.unhide,
        )
    }

    fn paths(
        &self,
        list: Option<&Spanned<Vec<String>>>,
        key: &str,
        absolute: bool,
        into: &mut Vec<Set<String>>,
    ) -> Result<(), PolicyError> {
        let Some(list) = list else { return Ok(()) };
        for path in list.get_ref() {
            if path.is_empty() || (absolute && !Path::new(path).is_absolute()) {
                let expected = if absolute {
                    "an absolute path"
                } else {
                    "a path relative to the workspace"
                };
                return Err(self.value_error(list, key, format!("{path:?}: expected {expected}")));
            }
            into.push(self.set(list, path.clone(), false));
        }
        Ok(())
    }

    fn network(
        &self,
        doc: NetworkDoc,
        standing: NetworkPolicy,
        policy: &mut Policy,
    ) -> Result<(), PolicyError> {
        if let Some(mode) = &doc.mode {
            let new: NetworkPolicy = self.parsed(mode, "network.mode")?;
            if self.tightens_only() && new.is_wider_than(standing) {
                return Err(self.widens(mode, "network.mode", format!("\"{new}\" is wider than \"{standing}\", the network the user's policy gives")));
            }
            policy.network = Some(self.set(mode, new, false));
        }
        let hosts = doc.allow_hosts.as_ref();
        self.narrowed(
            hosts,
            "network.allow_hosts",
            &mut policy.allow_hosts,
            standing,
        )?;
        let presets = doc.presets.as_ref();
        self.narrowed(presets, "network.presets", &mut policy.presets, standing)?;
        if let Some(hosts) = &doc.deny_hosts {
            policy
                .deny_hosts
                .extend(self.list::<HostPattern>(hosts, "network.deny_hosts")?);
        }
        Ok(())
    }

    fn list<T: FromStr>(
        &self,
        list: &Spanned<Vec<String>>,
        key: &str,
    ) -> Result<Vec<Set<T>>, PolicyError>
    where
        T::Err: std::fmt::Display,
    {
        list.get_ref()
            .iter()
            .map(|text| {
                text.parse()
                    .map(|value| self.set(list, value, false))
                    .map_err(|err| self.value_error(list, key, format!("{text:?}: {err}")))
            })
            .collect()
    }

    /// Sets `current` to `list`, which a workspace's file may only narrow.
    fn narrowed<T: FromStr + ToString>(
        &self,
        list: Option<&Spanned<Vec<String>>>,
        key: &str,
        current: &mut Option<Vec<Set<T>>>,
        standing: NetworkPolicy,
    ) -> Result<(), PolicyError>
    where
        T::Err: std::fmt::Display,
    {
        let Some(list) = list else { return Ok(()) };
        let parsed = self.list::<T>(list, key)?;
        self.fewer(list, key, &parsed, current.as_deref(), standing)?;
        *current = Some(parsed);
        Ok(())
    }

    /// A workspace's hosts or presets are each among the user's, unless
    /// the user's network is on (any list narrows that).
    fn fewer<T: ToString>(
        &self,
        list: &Spanned<Vec<String>>,
        key: &str,
        new: &[Set<T>],
        current: Option<&[Set<T>]>,
        standing: NetworkPolicy,
    ) -> Result<(), PolicyError> {
        if !self.tightens_only() || standing == NetworkPolicy::On {
            return Ok(());
        }
        let allowed: Vec<String> = current
            .unwrap_or_default()
            .iter()
            .map(|s| s.value.to_string())
            .collect();
        match new.iter().find(|s| !allowed.contains(&s.value.to_string())) {
            Some(extra) => Err(self.widens(
                list,
                key,
                format!(
                    "{:?} is not among the user's ({})",
                    extra.value.to_string(),
                    if allowed.is_empty() {
                        "none".to_owned()
                    } else {
                        allowed.join(", ")
                    }
                ),
            )),
            None => Ok(()),
        }
    }

    fn limits(&self, doc: LimitsDoc, policy: &mut Policy) -> Result<(), PolicyError> {
        self.limit(
            doc.processes.as_ref(),
            "limits.processes",
            values::limit_count,
            &mut policy.processes,
        )?;
        self.limit(
            doc.memory.as_ref(),
            "limits.memory",
            values::limit_size,
            &mut policy.memory,
        )?;
        self.limit(
            doc.cpu.as_ref(),
            "limits.cpu",
            values::limit_cpus,
            &mut policy.cpu,
        )?;
        self.count(
            doc.spill_bytes.as_ref(),
            "limits.spill_bytes",
            &mut policy.spill_bytes,
        )?;
        self.count(
            doc.commands.as_ref(),
            "limits.commands",
            &mut policy.commands,
        )
    }

    fn limit(
        &self,
        value: Option<&Spanned<toml::Value>>,
        key: &str,
        parse: fn(&str) -> Result<Limit, String>,
        slot: &mut Option<Set<Limit>>,
    ) -> Result<(), PolicyError> {
        let Some(value) = value else { return Ok(()) };
        let new = parse(&doc::text_of(value.get_ref()))
            .map_err(|what| self.value_error(value, key, what))?;
        if self.tightens_only() {
            let current = slot.as_ref().map_or(Limit(Some(u64::MAX)), |s| s.value);
            if new.is_looser_than(current) {
                return Err(self.widens(
                    value,
                    key,
                    match current.0 {
                        Some(u64::MAX) => format!("{new} lifts the limit"),
                        _ => format!("{new} is more than the user's {current}"),
                    },
                ));
            }
        }
        let lowers_only = self.tightens_only() && slot.is_none();
        *slot = Some(self.set(value, new, lowers_only));
        Ok(())
    }

    fn count(
        &self,
        value: Option<&Spanned<toml::Value>>,
        key: &str,
        slot: &mut Option<Set<u64>>,
    ) -> Result<(), PolicyError> {
        let Some(value) = value else { return Ok(()) };
        let new = match value.get_ref() {
            toml::Value::Integer(n) if *n > 0 => *n as u64,
            other => {
                return Err(self.value_error(
                    value,
                    key,
                    format!("{}: expected a positive whole number", doc::text_of(other)),
                ))
            }
        };
        self.lower(value, key, new, slot)
    }

    fn lower<T: PartialOrd + Copy + std::fmt::Display>(
        &self,
        value: &Spanned<toml::Value>,
        key: &str,
        new: T,
        slot: &mut Option<Set<T>>,
    ) -> Result<(), PolicyError> {
        if let Some(current) = slot.as_ref().filter(|_| self.tightens_only()) {
            if new > current.value {
                return Err(self.widens(
                    value,
                    key,
                    format!(
                        "{new} is more than the user's {} ({})",
                        current.value, current.from
                    ),
                ));
            }
        }
        let lowers_only = self.tightens_only() && slot.is_none();
        *slot = Some(self.set(value, new, lowers_only));
        Ok(())
    }

    fn millis(
        &self,
        value: Option<&Spanned<toml::Value>>,
        key: &str,
        slot: &mut Option<Set<f64>>,
        tightens: bool,
    ) -> Result<(), PolicyError> {
        let Some(value) = value else { return Ok(()) };
        let ms = match value.get_ref() {
            toml::Value::Integer(n) if (1..=MAX_MS).contains(n) => *n as f64,
            toml::Value::Float(n) if (1.0..=MAX_MS as f64).contains(n) => *n,
            other => {
                return Err(self.value_error(
                    value,
                    key,
                    format!(
                        "{}: expected milliseconds from 1 to {MAX_MS}",
                        doc::text_of(other)
                    ),
                ))
            }
        };
        if tightens {
            return self.lower(value, key, ms, slot);
        }
        *slot = Some(self.set(value, ms, false));
        Ok(())
    }

    fn timeouts(
        &self,
        doc: TimeoutsDoc,
        output: doc::OutputDoc,
        policy: &mut Policy,
    ) -> Result<(), PolicyError> {
        self.millis(
            doc.default_ms.as_ref(),
            "timeouts.default_ms",
            &mut policy.timeout_ms,
            true,
        )?;
        self.millis(
            doc.max_ms.as_ref(),
            "timeouts.max_ms",
            &mut policy.max_timeout_ms,
            true,
        )?;
        self.millis(
            doc.yield_ms.as_ref(),
            "timeouts.yield_ms",
            &mut policy.yield_ms,
            true,
        )?;
        self.count(
            output.max_bytes.as_ref(),
            "output.max_bytes",
            &mut policy.output_bytes,
        )
    }
}

/// An allow rule's grants name a mode, a network and hosts this host
/// knows; no other rule has any.
fn check_grants(rule: &dsh_rules::Rule) -> Result<(), String> {
    let Some(grants) = &rule.grants else {
        return Ok(());
    };
    if rule.decision != Decision::Allow {
        return Err(format!(
            "only an \"allow\" rule grants anything; `{}` is \"{}\"",
            rule.shown(),
            rule.decision
        ));
    }
    if let Some(mode) = &grants.sandbox {
        mode.parse::<SandboxMode>()
            .map_err(|err| format!("sandbox {mode:?}: {err}"))?;
    }
    if let Some(network) = &grants.network {
        network
            .parse::<NetworkPolicy>()
            .map_err(|err| format!("network {network:?}: {err}"))?;
    }
    for host in &grants.hosts {
        host.parse::<HostPattern>()
            .map_err(|err| format!("hosts {host:?}: {err}"))?;
    }
    Ok(())
}

/// The network the policy so far gives: its mode, else what its sandbox
/// mode and hosts default to (unconfined: on).
fn standing_network(policy: &Policy, operator: Operator) -> NetworkPolicy {
    if let Some(network) = operator
        .network
        .or(policy.network.as_ref().map(|s| s.value))
    {
        return network;
    }
    let Some(mode) = operator.mode.or(policy.mode.as_ref().map(|s| s.value)) else {
        return NetworkPolicy::On;
    };
    let hosts = policy.allow_hosts.as_ref().is_some_and(|h| !h.is_empty())
        || policy.presets.as_ref().is_some_and(|p| !p.is_empty());
    if hosts && mode.confines() {
        NetworkPolicy::Allow
    } else {
        NetworkPolicy::default_for(mode)
    }
}
