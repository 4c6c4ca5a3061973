//! The effective policy as TOML, each value with where it came from.

use std::fmt::Write;

use crate::{Place, Policy, Set};

/// A TOML basic string.
pub fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn line<T>(out: &mut String, key: &str, set: &Option<Set<T>>, shown: impl Fn(&T) -> String) {
    if let Some(set) = set {
        let lowers = if set.lowers_only {
            ", lowers the default only"
        } else {
            ""
        };
        let _ = writeln!(out, "{key} = {}  # {}{lowers}", shown(&set.value), set.from);
    }
}

fn list<T>(out: &mut String, key: &str, sets: &[Set<T>], shown: impl Fn(&T) -> String) {
    if sets.is_empty() {
        return;
    }
    let _ = writeln!(out, "{key} = [");
    for set in sets {
        let _ = writeln!(out, "  {},  # {}", shown(&set.value), set.from);
    }
    let _ = writeln!(out, "]");
}

fn text<T: ToString>(value: &T) -> String {
    quoted(&value.to_string())
}

/// The files read, and where approvals go.
fn heading(policy: &Policy, out: &mut String) {
    for (place, path) in &policy.read {
        let what = match place {
            Place::System => "system",
            Place::User => "user",
            Place::Workspace => "workspace (only tightens)",
        };
        let _ = writeln!(out, "# read: {} ({what})", path.display());
    }
    for skipped in &policy.skipped {
        let _ = writeln!(out, "# skipped: {skipped}");
    }
    if policy.read.is_empty() {
        let _ = writeln!(out, "# read: no policy file");
    }
    if let Some(user) = &policy.user_file {
        let _ = writeln!(
            out,
            "# approvals \"always\" are kept in: {}",
            user.display()
        );
    }
}

/// See [`Policy::shown`].
pub fn shown(policy: &Policy) -> String {
    let mut out = String::new();
    heading(policy, &mut out);
    out.push_str("\n[sandbox]\n");
    line(&mut out, "mode", &policy.mode, text);
    line(&mut out, "backend", &policy.backend, text);
    line(&mut out, "workspace", &policy.workspace, |p| {
        quoted(&p.display().to_string())
    });
    list(&mut out, "protect", &policy.protect, text);
    list(&mut out, "unprotect", &policy.unprotect, text);
    list(&mut out, "hide", &policy.hide, text);
    list(&mut out, "unhide", &policy.unhide, text);
    out.push_str("\n[network]\n");
    line(&mut out, "mode", &policy.network, text);
    list(
        &mut out,
        "allow_hosts",
        policy.allow_hosts.as_deref().unwrap_or_default(),
        text,
    );
    list(&mut out, "deny_hosts", &policy.deny_hosts, text);
    list(
        &mut out,
        "presets",
        policy.presets.as_deref().unwrap_or_default(),
        text,
    );
    out.push_str("\n[limits]\n");
    line(&mut out, "processes", &policy.processes, text);
    line(&mut out, "memory", &policy.memory, text);
    line(&mut out, "cpu", &policy.cpu, |l| match l.0 {
        Some(millicores) => (millicores as f64 / 1000.0).to_string(),
        None => quoted("none"),
    });
    line(
        &mut out,
        "spill_bytes",
        &policy.spill_bytes,
        ToString::to_string,
    );
    line(&mut out, "commands", &policy.commands, ToString::to_string);
    out.push_str("\n[timeouts]\n");
    line(
        &mut out,
        "default_ms",
        &policy.timeout_ms,
        ToString::to_string,
    );
    line(
        &mut out,
        "max_ms",
        &policy.max_timeout_ms,
        ToString::to_string,
    );
    line(&mut out, "yield_ms", &policy.yield_ms, ToString::to_string);
    out.push_str("\n[output]\n");
    line(
        &mut out,
        "max_bytes",
        &policy.output_bytes,
        ToString::to_string,
    );
    for rule in &policy.rules {
        out.push_str(&rule_text(rule, rule.origin.as_deref()));
    }
    out
}

/// One `[[rule]]` table, with a comment line first if given.
pub fn rule_text(rule: &dsh_rules::Rule, comment: Option<&str>) -> String {
    let mut out = String::from("\n");
    if let Some(comment) = comment {
        let _ = writeln!(out, "# {}", comment.replace('\n', " "));
    }
    let words: Vec<String> = rule
        .command
        .iter()
        .map(|word| match word {
            dsh_rules::RuleWord::One(word) => quoted(word),
            dsh_rules::RuleWord::Any(words) => {
                let words: Vec<String> = words.iter().map(|w| quoted(w)).collect();
                format!("[{}]", words.join(", "))
            }
        })
        .collect();
    let _ = writeln!(out, "[[rule]]\ncommand = [{}]", words.join(", "));
    let _ = writeln!(out, "decision = {}", quoted(&rule.decision.to_string()));
    if let Some(reason) = &rule.reason {
        let _ = writeln!(out, "reason = {}", quoted(reason));
    }
    if let Some(grants) = &rule.grants {
        let mut fields = Vec::new();
        if let Some(mode) = &grants.sandbox {
            fields.push(format!("sandbox = {}", quoted(mode)));
        }
        if let Some(network) = &grants.network {
            fields.push(format!("network = {}", quoted(network)));
        }
        let hosts: Vec<String> = grants.hosts.iter().map(|h| quoted(h)).collect();
        fields.push(format!("hosts = [{}]", hosts.join(", ")));
        let _ = writeln!(out, "grants = {{ {} }}", fields.join(", "));
    }
    out
}
