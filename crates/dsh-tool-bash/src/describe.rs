//! `bash`'s description, generated from the server's settings: what
//! carries over between calls, the sandbox and its network, how to ask for
//! more, each said only when true, in as few words as the agents need.

use dsh_bash::{NetworkPolicy, SandboxMode};

/// What the description is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Described {
    /// The session's working directory follows `cd`.
    pub(crate) persist_cwd: bool,
    /// The user's shell snapshot is loaded into every command.
    pub(crate) snapshot: bool,
    /// Results list the files a command changed in the workspace.
    pub(crate) changes: bool,
    /// The mode commands run under and its network, when it confines.
    pub(crate) sandbox: Option<(SandboxMode, NetworkPolicy)>,
    /// The escalation fields are offered.
    pub(crate) escalation: bool,
    /// Foreground commands still running after a while become tasks.
    pub(crate) yields: bool,
}

/// `bash`'s description.
pub(crate) fn bash(facts: &Described) -> String {
    let mut text = String::from("Run a command with `bash -c`.");
    text.push_str(if facts.persist_cwd {
        " The working directory follows `cd` between calls; variables do not."
    } else {
        " Nothing carries over between calls: pass workdir, not `cd`."
    });
    if facts.snapshot {
        text.push_str(" The user's shell PATH, functions and aliases are loaded.");
    }
    text.push_str(" Failures end with \"[exit code: N]\", \"[killed by signal: SIG]\", \"[timed out after Nms]\" or \"[sandbox: …]\". Cut output names a file with all of it (\"full output: PATH\"). Servers, watchers and work over a minute: run_in_background, then bash_output and bash_kill; a foreground command's leftover processes are stopped.");
    if facts.changes {
        text.push_str(" \"[changed: …]\" lists the files it changed in the workspace.");
    }
    if facts.yields {
        text.push_str(
            " A long foreground command becomes a background task (the result names it).",
        );
    }
    if let Some((mode, network)) = facts.sandbox {
        text.push_str(&format!(
            " Sandboxed: {}; network {}. Its refusals are policy: do not work around them.",
            mode_words(mode),
            network_words(network)
        ));
    }
    if facts.escalation {
        text.push_str(" If a command genuinely needs more, retry it once with sandbox_permissions, allow_hosts: [\"host\"] or network: \"on\" and a justification; a person approves that call. Never ask speculatively; a refusal is final.");
    }
    text
}

fn mode_words(mode: SandboxMode) -> &'static str {
    match mode {
        SandboxMode::ReadOnly => "read-only, credential files hidden",
        SandboxMode::WorkspaceWrite => {
            "writes only the workspace and $TMPDIR (not .git hooks or config), credential files hidden"
        }
        _ => "no limits",
    }
}

fn network_words(network: NetworkPolicy) -> &'static str {
    match network {
        NetworkPolicy::Off => "off",
        NetworkPolicy::Allow => "limited to an allow-list (refused hosts are named)",
        _ => "on",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Described {
        Described {
            persist_cwd: true,
            snapshot: true,
            changes: true,
            sandbox: Some((SandboxMode::WorkspaceWrite, NetworkPolicy::Off)),
            escalation: true,
            yields: false,
        }
    }

    #[test]
    fn each_fact_is_said_only_when_true() {
        let all = bash(&facts());
        assert!(all.contains("follows `cd`"), "{all}");
        assert!(all.contains("PATH, functions and aliases"), "{all}");
        assert!(
            all.contains("Sandboxed: writes only the workspace"),
            "{all}"
        );
        assert!(all.contains("network off"), "{all}");
        assert!(all.contains("sandbox_permissions"), "{all}");
        assert!(all.contains("[changed: …]"), "{all}");
        let plain = bash(&Described {
            persist_cwd: false,
            snapshot: false,
            changes: false,
            sandbox: None,
            escalation: false,
            yields: false,
        });
        assert!(plain.contains("pass workdir, not `cd`"), "{plain}");
        for absent in [
            "follows `cd`",
            "aliases",
            "Sandboxed",
            "justification",
            "[changed",
        ] {
            assert!(!plain.contains(absent), "{absent}: {plain}");
        }
    }
}
