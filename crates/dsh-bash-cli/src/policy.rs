//! The policy file applied to the flags (flags win), the command rules a
//! server judges by, and `dsh-bash rules check` / `dsh-bash config show`.

use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

use dsh_policy::{Limit, Policy, Set, Sources};
use dsh_rules::{Judgement, Rule, Rules};

use crate::compose::ExecutorArgs;

/// Where the workspace's policy file is looked for: the workspace, else
/// the working directory, else the current directory.
fn workspace_of(args: &ExecutorArgs) -> Option<PathBuf> {
    args.workspace
        .clone()
        .or_else(|| args.workdir.clone())
        .or_else(|| std::env::current_dir().ok())
}

/// The policy of the files for these flags.
pub fn load(args: &ExecutorArgs) -> anyhow::Result<Policy> {
    let mut sources = Sources::find(args.config.as_deref(), workspace_of(args).as_deref());
    // A container is workspace-write with the network off unless a flag
    // says otherwise: a workspace's own file may narrow that, never widen.
    let in_container = args.container.is_some();
    sources.operator_mode = args
        .sandbox
        .or(in_container.then_some(dsh_sandbox::SandboxMode::WorkspaceWrite));
    let listed =
        !args.allow_host.is_empty() || !args.deny_host.is_empty() || !args.allow_preset.is_empty();
    let container_network = if listed {
        dsh_sandbox::NetworkPolicy::Allow
    } else {
        dsh_sandbox::NetworkPolicy::Off
    };
    sources.operator_network = args.network.or(in_container.then_some(container_network));
    loaded(&sources)
}

/// The policy `sources` find, each file skipped said as a warning.
fn loaded(sources: &Sources) -> anyhow::Result<Policy> {
    let policy = Policy::load(sources)?;
    for skipped in &policy.skipped {
        tracing::warn!("{skipped}");
    }
    Ok(policy)
}

/// The flags that only mean something under a sandbox, when given.
fn sandbox_only_flags(args: &ExecutorArgs) -> Vec<&'static str> {
    let given = [
        ("--workspace", args.workspace.is_some()),
        ("--sandbox-backend", args.sandbox_backend.is_some()),
        ("--network", args.network.is_some()),
        ("--allow-host", !args.allow_host.is_empty()),
        ("--deny-host", !args.deny_host.is_empty()),
        ("--allow-preset", !args.allow_preset.is_empty()),
        ("--protect", !args.protect.is_empty()),
        ("--unprotect", !args.unprotect.is_empty()),
        ("--hide", !args.hide.is_empty()),
        ("--unhide", !args.unhide.is_empty()),
        ("--sandbox-cache", args.sandbox_cache.is_some()),
        ("--sandbox-cache-max", args.sandbox_cache_max.is_some()),
    ];
    given
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(flag, _)| flag)
        .collect()
}

/// A limit from the policy: a workspace's that lowers only is held to
/// `default` too.
fn limit(set: Option<&Set<Limit>>, default: Option<u64>) -> Option<Limit> {
    set.map(|set| {
        if set.lowers_only {
            set.value.min(Limit(default))
        } else {
            set.value
        }
    })
}

/// The flags with the policy's values wherever no flag gave one.
pub fn apply(args: &mut ExecutorArgs, policy: &Policy) -> anyhow::Result<()> {
    if args.container.is_some() {
        // The container is the sandbox: its workspace and its network
        // (off, allow and its hosts, or on) are the only sandbox flags
        // that apply.
        let ignored = sandbox_only_flags(args).into_iter().find(|flag| {
            !matches!(
                *flag,
                "--workspace" | "--network" | "--allow-host" | "--deny-host" | "--allow-preset"
            )
        });
        if let Some(flag) = ignored {
            anyhow::bail!("{flag} does not apply under --container: the container is the sandbox (give --workspace DIR, and --network off|on, or allow with --allow-host, --deny-host, --allow-preset)");
        }
    } else if args.sandbox.is_none() && policy.mode.is_none() {
        if let Some(flag) = sandbox_only_flags(args).first() {
            anyhow::bail!("{flag} only applies under a sandbox: give --sandbox MODE (or sandbox.mode in the policy file)");
        }
    }
    args.sandbox = args.sandbox.or(policy.mode.as_ref().map(|s| s.value));
    if args.sandbox_backend.is_none() {
        args.sandbox_backend = policy.backend.as_ref().map(|s| s.value.clone());
    }
    if args.workspace.is_none() {
        args.workspace = policy.workspace.as_ref().map(|s| s.value.clone());
    }
    args.network = args.network.or(policy.network.as_ref().map(|s| s.value));
    let values = |sets: &[Set<String>]| sets.iter().map(|s| s.value.clone()).collect::<Vec<_>>();
    args.protect.splice(0..0, values(&policy.protect));
    args.unprotect.splice(0..0, values(&policy.unprotect));
    args.hide.splice(0..0, values(&policy.hide));
    args.unhide.splice(0..0, values(&policy.unhide));
    if args.allow_host.is_empty() && args.allow_preset.is_empty() {
        let hosts = policy.allow_hosts.iter().flatten();
        args.allow_host = hosts.map(|s| s.value.clone()).collect();
        let presets = policy.presets.iter().flatten();
        args.allow_preset = presets.map(|s| s.value).collect();
    }
    args.deny_host
        .splice(0..0, policy.deny_hosts.iter().map(|s| s.value.clone()));
    let machine = dsh_bash_local::ResourceLimits::for_this_machine();
    args.max_processes = args
        .max_processes
        .or(limit(policy.processes.as_ref(), machine.processes));
    args.max_memory = args
        .max_memory
        .or(limit(policy.memory.as_ref(), machine.memory_bytes));
    let cpus = machine.cpu_millicores.map(u64::from);
    args.max_cpu = args.max_cpu.or(limit(policy.cpu.as_ref(), cpus));
    args.max_spill_bytes = Some(number(
        args.max_spill_bytes,
        policy.spill_bytes.as_ref(),
        crate::compose::DEFAULT_SPILL_BYTES,
    ));
    Ok(())
}

/// A number from the policy where no flag gave one: a workspace's that
/// lowers only is held to `default`.
pub fn number<T: PartialOrd + Copy>(flag: Option<T>, set: Option<&Set<T>>, default: T) -> T {
    match (flag, set) {
        (Some(flag), _) => flag,
        (None, Some(set)) if set.lowers_only && set.value > default => default,
        (None, Some(set)) => set.value,
        (None, None) => default,
    }
}

/// The rules of a server's policy, and its user's file for "always".
pub struct FileRules {
    rules: RwLock<Rules>,
    file: Option<PathBuf>,
}

impl FileRules {
    /// The rules of `policy`; none when it has none and no file to keep
    /// one in.
    pub fn of(policy: &Policy) -> anyhow::Result<Option<Self>> {
        if policy.rules.is_empty() && policy.user_file.is_none() {
            return Ok(None);
        }
        Ok(Some(FileRules {
            rules: RwLock::new(policy.rules()?),
            file: policy.user_file.clone(),
        }))
    }
}

impl dsh_tool_bash::RuleBook for FileRules {
    fn judge(&self, command: &str) -> Judgement {
        self.rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .judge(command)
    }

    fn is_empty(&self) -> bool {
        self.rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    fn keep(&self, rule: Rule, workspace: Option<&Path>) -> Result<String, String> {
        let Some(file) = &self.file else {
            return Err("there is no home directory to keep a policy file in".into());
        };
        let kept = dsh_policy::keep_rule(file, &rule, workspace).map_err(|err| err.to_string())?;
        let mut rules = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        let mut list = rules.list().to_vec();
        list.push(rule);
        if let Ok(now) = Rules::new(list) {
            *rules = now;
        }
        Ok(format!("kept in {}", kept.path.display()))
    }
}

/// Where `rules check` and `config show` look.
#[derive(clap::Args)]
pub struct PolicyArgs {
    /// The policy file to use in place of the user's.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The workspace whose .dsh-bash/config.toml is read (default: the
    /// current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

impl PolicyArgs {
    fn load(&self) -> anyhow::Result<Policy> {
        let workspace = self
            .workspace
            .clone()
            .or_else(|| std::env::current_dir().ok());
        loaded(&Sources::find(self.config.as_deref(), workspace.as_deref()))
    }
}

/// `dsh-bash rules check [--config FILE] -- COMMAND`: the decision as
/// JSON; exits 0 (allow or default), 1 (ask) or 2 (deny).
pub fn check(
    args: &PolicyArgs,
    command: &crate::compose::CommandLine,
) -> anyhow::Result<std::process::ExitCode> {
    let policy = args.load()?;
    let judged = policy.rules()?.judge(&command.joined());
    println!("{}", serde_json::to_string_pretty(&judged)?);
    Ok(std::process::ExitCode::from(match judged.decision {
        dsh_rules::Verdict::Allow | dsh_rules::Verdict::Default => 0,
        dsh_rules::Verdict::Ask => 1,
        dsh_rules::Verdict::Deny => 2,
    }))
}

/// `dsh-bash config show`: the effective policy with where each value came
/// from.
pub fn show(args: &PolicyArgs) -> anyhow::Result<std::process::ExitCode> {
    print!("{}", args.load()?.shown());
    Ok(std::process::ExitCode::SUCCESS)
}
