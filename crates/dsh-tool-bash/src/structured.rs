//! Structured content designed to be read as JSON: the agents people use
//! (Claude Code, Codex) hand the model `structuredContent`, serialized, not
//! the text content. So every result carries the output once, in `text`
//! (exactly what the text content says, markers included), and before it
//! only the facts that are not defaults: nothing null, false, empty or
//! zero. Keys are declared in alphabetical order, so a client that sorts
//! them (or one that keeps them) shows the same order: the short facts
//! (`exit_code`, `sandbox`, `status`) before the long `text`. The full fact
//! set stays with programs: `dsh-bash run --json`, the executor API, and
//! the executor `_meta` of `dsh_bash::wire`.

use dsh_bash::{BashRunResult, BashSandboxInfo, BashTask, BashTaskRead, SandboxEnforcement};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// What the sandbox did, when it is worth saying: a partial enforcement,
/// a failure that looks like a denial, a runner failure, the network on.
#[derive(Debug, Default, Serialize, JsonSchema)]
struct SandboxContent {
    /// What the backend does not govern here (absent when `full`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    gaps: Vec<String>,
    /// The command failed and its stderr looks like this backend's denial:
    /// a guess from the output (a command can print the same words), not
    /// a report from the kernel.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    looks_denied: bool,
    /// What the kernel refused the failed command (its own audit records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    refused: Vec<String>,
    /// The mode the command ran under.
    mode: String,
    /// `on` when a confined command could use the network; `allow` when
    /// its allow-list refused hosts.
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<String>,
    /// The hosts the allow-list's proxy refused (`host:port`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    refused_hosts: Vec<String>,
    /// The sandbox runner failed; the command did not run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    runner_failed: bool,
}

/// The sandbox facts worth a model's attention, if any.
fn sandbox(info: Option<&BashSandboxInfo>) -> Option<SandboxContent> {
    let info = info?;
    let partial = info.enforcement == Some(SandboxEnforcement::Partial);
    let network = info.network.as_ref();
    let network_on =
        info.mode.confines() && network.is_some_and(|n| n.mode == dsh_bash::NetworkPolicy::On);
    let refused_hosts = network.map(|n| n.denied.clone()).unwrap_or_default();
    if !(partial || info.denied || info.runner_failed || network_on || !refused_hosts.is_empty()) {
        return None;
    }
    Some(SandboxContent {
        gaps: info.gaps.iter().map(ToString::to_string).collect(),
        looks_denied: info.denied && info.denial_evidence == dsh_bash::DenialEvidence::Stderr,
        mode: info.mode.to_string(),
        network: (network_on || !refused_hosts.is_empty())
            .then(|| network.map(|n| n.mode.to_string()))
            .flatten(),
        refused_hosts,
        refused: info.refused.clone(),
        runner_failed: info.runner_failed,
    })
}

/// The files holding the complete streams, when what `text` shows was cut.
fn output_files(paths: [Option<&std::path::PathBuf>; 2]) -> Vec<String> {
    paths
        .into_iter()
        .flatten()
        .map(|p| p.display().to_string())
        .collect()
}

/// The structured result of `bash`: a finished foreground run, or a
/// background task just started.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct BashContent {
    /// What the command created, modified and deleted in the workspace,
    /// when anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    changed: Option<ChangedContent>,
    /// The exit code, when it is not 0 (absent also when a signal ended
    /// the shell: see `signal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    /// Processes still running when the command exited, stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    leftovers_stopped: Option<u32>,
    /// The kernel's OOM killer ended a process at the memory limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    oom_killed: bool,
    /// The files with the complete output, when `text` shows only part.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    output_files: Vec<String>,
    /// A fork failed at the process limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    process_limit_hit: bool,
    /// What the sandbox did, when it is worth saying.
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxContent>,
    /// The signal that ended the shell (`SIGTERM`).
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<String>,
    /// In a few words: `ok`, `exit 3`, `killed by SIGKILL`, `timed out
    /// after 1500 ms`, `started in the background`.
    status: String,
    /// The background task started by this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    task_id: Option<String>,
    /// The result exactly as the text content renders it: the output
    /// (cleaned for reading), then the markers.
    text: String,
}

/// What a command changed in the workspace, as the text's
/// `[changed: …]` line says it (paths relative to the workspace).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ChangedContent {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    created: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    modified: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    deleted: Vec<String>,
    /// Changed paths not listed.
    #[serde(skip_serializing_if = "is_zero")]
    more: u64,
    /// Why the lists may be incomplete.
    #[serde(skip_serializing_if = "Option::is_none")]
    incomplete: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn changed(changes: Option<&dsh_bash::WorkspaceChanges>) -> Option<ChangedContent> {
    changes
        .filter(|changes| !changes.is_empty())
        .map(|changes| ChangedContent {
            created: changes.created.clone(),
            modified: changes.modified.clone(),
            deleted: changes.deleted.clone(),
            more: changes.more,
            incomplete: changes.incomplete.clone(),
        })
}

/// The few words of a run's ending.
fn run_status(result: &BashRunResult) -> String {
    let ending = match (&result.signal, result.exit_code) {
        (Some(signal), _) => format!("killed by {signal}"),
        (None, Some(0) | None) => "ok".to_owned(),
        (None, Some(code)) => format!("exit {code}"),
    };
    if result.timed_out {
        format!("timed out after {} ms, {ending}", result.timeout_ms)
    } else {
        ending
    }
}

/// A finished foreground run.
pub(crate) fn run(text: String, result: &BashRunResult) -> Value {
    let content = BashContent {
        changed: changed(result.changed.as_ref()),
        exit_code: result.exit_code.filter(|code| *code != 0),
        leftovers_stopped: Some(result.leftovers_stopped).filter(|n| *n > 0),
        output_files: output_files([
            result
                .stdout
                .spill_path
                .as_ref()
                .filter(|_| result.stdout.truncated),
            result
                .stderr
                .spill_path
                .as_ref()
                .filter(|_| result.stderr.truncated),
        ]),
        oom_killed: result.limits.as_ref().is_some_and(|l| l.oom_killed),
        process_limit_hit: result.limits.as_ref().is_some_and(|l| l.process_limit_hit),
        sandbox: sandbox(result.sandbox.as_ref()),
        signal: result.signal.clone(),
        status: run_status(result),
        task_id: None,
        text,
    };
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// A run handed over as a background task: settled within its yield
/// (`settled`: its facts, and the task that ran it), or still running.
pub(crate) fn yielded(text: String, result: &BashRunResult, id: &str, settled: bool) -> Value {
    let mut content = run(text, result);
    if let Some(object) = content.as_object_mut() {
        object.insert("task_id".into(), Value::String(id.to_owned()));
        if !settled {
            object.insert(
                "status".into(),
                Value::String("still running in the background".into()),
            );
        }
    }
    content
}

/// A background task just started.
pub(crate) fn started(text: String, task: &BashTask) -> Value {
    let content = BashContent {
        status: "started in the background".into(),
        task_id: Some(task.id.to_string()),
        text,
        ..BashContent::default()
    };
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// The structured result of `bash_output`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct OutputContent {
    /// Once settled, what the task changed in the workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    changed: Option<ChangedContent>,
    /// The exit code once settled by an exit, when it is not 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    /// Some unread output had slid out of memory (see `output_files`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    lossy: bool,
    /// The files with the task's complete output, when it spilled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    output_files: Vec<String>,
    /// What the sandbox did, once settled, when it is worth saying.
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxContent>,
    /// Where this read ended (`STDOUT:STDERR` bytes): pass it as `since`
    /// to read again from here.
    position: String,
    /// The signal that ended the shell.
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<String>,
    /// `running`, `completed`, `killed` or `failed_to_start`.
    status: String,
    /// The task read.
    task_id: String,
    /// The read exactly as the text content renders it: the new output
    /// since the last read (cleaned), then the status line (and the
    /// screen, when asked for).
    text: String,
}

/// A `bash_output` read.
pub(crate) fn read(text: String, read: &BashTaskRead) -> Value {
    let task = &read.task;
    let content = OutputContent {
        changed: changed(task.changed.as_ref()),
        exit_code: task.exit_code.filter(|code| *code != 0),
        lossy: read.lossy,
        output_files: output_files([
            read.stdout_spill_path.as_ref(),
            read.stderr_spill_path.as_ref(),
        ]),
        position: read.to.to_string(),
        sandbox: sandbox(task.sandbox.as_ref()),
        signal: task.signal.clone(),
        status: serde_json::to_value(task.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        task_id: task.id.to_string(),
        text,
    };
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// The structured result of `bash_kill`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct KillContent {
    /// True if and only if this call stopped a running task.
    killed: bool,
    /// The task.
    task_id: String,
    /// The outcome exactly as the text content says it.
    text: String,
}

/// A `bash_kill` outcome.
pub(crate) fn kill(text: String, task_id: &str, killed: bool) -> Value {
    serde_json::to_value(KillContent {
        killed,
        task_id: task_id.to_owned(),
        text,
    })
    .unwrap_or(Value::Null)
}

/// The output schema of `T`: self-contained (subschemas inlined), closed.
pub(crate) fn schema<T: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let mut schema = schemars::SchemaGenerator::new(settings)
        .into_root_schema_for::<T>()
        .to_value();
    strip(&mut schema);
    // A nested fact (`sandbox`) is an object, its fields left open: every
    // request of every turn carries these schemas, and the nested fields
    // are documented in the crate.
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            if property.get("properties").is_some() {
                *property = serde_json::json!({"type": "object"});
            }
        }
    }
    schema
}

/// Removes what strict validators reject or clients need not see:
/// non-standard `format`s, the root `$schema`/`title`, and the `null` that
/// `Option` adds (`"type": ["integer", "null"]`, an `anyOf` with a null
/// branch): an absent field is how a fact says "none", and some clients'
/// validators refuse type arrays.
fn strip(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in ["format", "$schema", "title"] {
                map.remove(key);
            }
            // The facts' documentation is for hosts (the crate docs): every
            // request of every turn carries these schemas.
            if map.get("description").is_some_and(Value::is_string) {
                map.remove("description");
            }
            if let Some(Value::Array(types)) = map.get("type") {
                let named: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                if let [only] = named.as_slice() {
                    map.insert("type".into(), only.clone());
                }
            }
            if let Some(Value::Array(branches)) = map.get("anyOf") {
                let named: Vec<Value> = branches
                    .iter()
                    .filter(|b| b.get("type").is_none_or(|t| t != "null"))
                    .cloned()
                    .collect();
                if let [Value::Object(only)] = named.as_slice() {
                    let only = only.clone();
                    map.remove("anyOf");
                    map.extend(only);
                }
            }
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(stdout: &str, exit_code: Option<i32>) -> BashRunResult {
        let out = |text: &str| dsh_bash::CollectedOutput {
            text: text.into(),
            truncated: false,
            spill_path: None,
            total_bytes: text.len() as u64,
            spill_note: None,
        };
        BashRunResult {
            exit_code,
            signal: None,
            stdout: out(stdout),
            stderr: out("err\n"),
            timed_out: false,
            timeout_ms: 120_000,
            aborted: false,
            leftovers_stopped: 0,
            containment: None,
            sandbox: None,
            limits: None,
            shell: None,
            changed: None,
            claim: None,
        }
    }

    /// The output once, the facts that are not defaults first, nothing
    /// else: for `echo hello; echo err >&2; exit 3` well under 200 bytes.
    #[test]
    fn a_run_says_its_output_once_and_only_facts_that_matter() {
        let result = fact("hello\n", Some(3));
        let text = "hello\n[stderr]\nerr\n[exit code: 3]".to_owned();
        let value = run(text.clone(), &result);
        let json = value.to_string();
        assert_eq!(
            json,
            format!(
                "{{\"exit_code\":3,\"status\":\"exit 3\",\"text\":{}}}",
                Value::from(text)
            )
        );
        assert!(json.len() < 200, "{} bytes: {json}", json.len());
        let ok = run("hello\n".into(), &fact("hello\n", Some(0))).to_string();
        assert_eq!(ok, "{\"status\":\"ok\",\"text\":\"hello\\n\"}");
        // A timeout says so before the text.
        let mut slow = fact("1\n", None);
        slow.timed_out = true;
        slow.timeout_ms = 1500;
        slow.signal = Some("SIGTERM".into());
        let slow = run("1\n".into(), &slow).to_string();
        assert!(
            slow.starts_with(
                "{\"signal\":\"SIGTERM\",\"status\":\"timed out after 1500 ms, killed by SIGTERM\""
            ),
            "{slow}"
        );
    }

    #[test]
    fn schemas_are_self_contained_objects_with_the_text() {
        for schema in [
            schema::<BashContent>(),
            schema::<OutputContent>(),
            schema::<KillContent>(),
        ] {
            assert_eq!(schema["type"], "object", "{schema}");
            assert!(schema["properties"]["text"].is_object(), "{schema}");
            let required = schema["required"].as_array().unwrap();
            assert!(required.contains(&Value::from("text")));
            // Only what every result carries is required.
            for optional in ["exit_code", "output_files", "sandbox", "lossy", "signal"] {
                assert!(!required.contains(&Value::from(optional)), "{schema}");
            }
            let flat = schema.to_string();
            assert!(
                !flat.contains("$ref") && !flat.contains("\"format\""),
                "{flat}"
            );
            // Portable: every `type` is one name, never an array.
            assert!(!flat.contains("\"type\":["), "{flat}");
        }
    }
}
