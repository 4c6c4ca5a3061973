//! Structured content that stands alone: every tool result as one JSON
//! object carrying the rendered text (exactly what the text content says)
//! and every fact behind it, with a declared output schema generated from
//! these types. Clients that hand the model only `structuredContent`
//! (Codex, VS Code) lose nothing.

use dsh_bash::{BashRunResult, BashSandboxInfo, BashTask, BashTaskRead, CollectedOutput};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// One output stream.
#[derive(Debug, Serialize, JsonSchema)]
struct StreamContent {
    /// The text kept in memory: the whole stream, or its tail when
    /// truncated.
    text: String,
    /// True if and only if the stream was longer than what is kept.
    truncated: bool,
    /// How many bytes the stream produced in all.
    total_bytes: u64,
    /// The file with the stream's bytes, when it was truncated.
    spill_path: Option<String>,
    /// Why that file is partial or missing, if it is.
    spill_note: Option<String>,
}

impl From<&CollectedOutput> for StreamContent {
    fn from(stream: &CollectedOutput) -> Self {
        StreamContent {
            text: stream.text.clone(),
            truncated: stream.truncated,
            total_bytes: stream.total_bytes,
            spill_path: stream.spill_path.as_ref().map(|p| p.display().to_string()),
            spill_note: stream.spill_note.clone(),
        }
    }
}

/// What the sandbox did.
#[derive(Debug, Serialize, JsonSchema)]
struct SandboxContent {
    /// The mode the command ran under.
    mode: String,
    /// The backend that confined it (`bwrap`, `landlock`), if any.
    backend: Option<String>,
    /// `full` or `partial`; absent for `danger-full-access`.
    enforcement: Option<String>,
    /// What the backend does not govern here (empty when `full`).
    gaps: Vec<String>,
    /// The command failed and its stderr looks like this backend's denial:
    /// a guess from the output (a command can print the same words), not
    /// a report from the kernel.
    looks_denied: bool,
    /// The sandbox runner failed; the command did not run.
    runner_failed: bool,
    /// The workspace as resolved.
    workspace: Option<String>,
    /// `off` or `on`: whether the command could use the network.
    network: Option<String>,
    /// Paths inside the workspace kept read-only (`workspace-write`).
    protected: Vec<String>,
}

impl From<&BashSandboxInfo> for SandboxContent {
    fn from(info: &BashSandboxInfo) -> Self {
        SandboxContent {
            mode: info.mode.to_string(),
            backend: info.backend.as_ref().map(ToString::to_string),
            enforcement: info.enforcement.map(|e| e.to_string()),
            gaps: info.gaps.iter().map(ToString::to_string).collect(),
            looks_denied: info.denied,
            runner_failed: info.runner_failed,
            workspace: path(&info.workspace),
            network: info.network.map(|n| n.to_string()),
            protected: info
                .protected
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
        }
    }
}

/// The structured result of `bash`: a finished foreground run, or a
/// background task just started (then only `text`, `task_id`, `status`).
#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct BashContent {
    /// The result exactly as the text content renders it (output, markers).
    text: String,
    /// The background task started by this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    task_id: Option<String>,
    /// `running` for a task just started.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    /// The exit code; null when the shell was killed by a signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<Option<i32>>,
    /// The signal that killed the shell (`SIGTERM`), or null.
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<Option<String>>,
    /// The timeout fired.
    #[serde(skip_serializing_if = "Option::is_none")]
    timed_out: Option<bool>,
    /// The timeout in force, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    /// Either stream was truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    /// Stdout.
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout: Option<StreamContent>,
    /// Stderr.
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr: Option<StreamContent>,
    /// Stdout's spill file (also in `stdout.spill_path`), or null.
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout_spill_path: Option<Option<String>>,
    /// Stderr's spill file (also in `stderr.spill_path`), or null.
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr_spill_path: Option<Option<String>>,
    /// Processes still running when the command exited, stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    leftovers_stopped: Option<u32>,
    /// `cgroup` or `process-tree`, or null.
    #[serde(skip_serializing_if = "Option::is_none")]
    containment: Option<Option<String>>,
    /// Sandbox facts (sandboxing executors only), or null.
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<Option<SandboxContent>>,
}

fn path(p: &Option<std::path::PathBuf>) -> Option<String> {
    p.as_ref().map(|p| p.display().to_string())
}

/// A finished foreground run.
pub(crate) fn run(text: String, result: &BashRunResult) -> Value {
    let content = BashContent {
        text,
        exit_code: Some(result.exit_code),
        signal: Some(result.signal.clone()),
        timed_out: Some(result.timed_out),
        timeout_ms: Some(result.timeout_ms),
        truncated: Some(result.stdout.truncated || result.stderr.truncated),
        stdout: Some((&result.stdout).into()),
        stderr: Some((&result.stderr).into()),
        stdout_spill_path: Some(path(&result.stdout.spill_path)),
        stderr_spill_path: Some(path(&result.stderr.spill_path)),
        leftovers_stopped: Some(result.leftovers_stopped),
        containment: Some(result.containment.map(|c| {
            serde_json::to_value(c)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        })),
        sandbox: Some(result.sandbox.as_ref().map(Into::into)),
        ..BashContent::default()
    };
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// A background task just started.
pub(crate) fn started(text: String, task: &BashTask) -> Value {
    let content = BashContent {
        text,
        task_id: Some(task.id.to_string()),
        status: Some("running".into()),
        ..BashContent::default()
    };
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// The structured result of `bash_output`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct OutputContent {
    /// The read exactly as the text content renders it.
    text: String,
    /// The task read.
    task_id: String,
    /// `running`, `completed` or `killed`.
    status: String,
    /// The exit code once settled by an exit, else null.
    exit_code: Option<i32>,
    /// The signal that ended the shell, or null.
    signal: Option<String>,
    /// The new output since the last read (stdout, then `[stderr]`).
    delta: String,
    /// Some unread output had slid out of memory (see the spill paths).
    lossy: bool,
    /// Stdout's spill file, or null.
    stdout_spill_path: Option<String>,
    /// Stderr's spill file, or null.
    stderr_spill_path: Option<String>,
    /// Sandbox facts once settled (sandboxing executors only), or null.
    sandbox: Option<SandboxContent>,
}

/// A `bash_output` read.
pub(crate) fn read(text: String, read: &BashTaskRead) -> Value {
    let task = &read.task;
    let content = OutputContent {
        text,
        task_id: task.id.to_string(),
        status: serde_json::to_value(task.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        exit_code: task.exit_code,
        signal: task.signal.clone(),
        delta: read.delta.clone(),
        lossy: read.lossy,
        stdout_spill_path: path(&read.stdout_spill_path),
        stderr_spill_path: path(&read.stderr_spill_path),
        sandbox: task.sandbox.as_ref().map(Into::into),
    };
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// The structured result of `bash_kill`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct KillContent {
    /// The outcome exactly as the text content says it.
    text: String,
    /// The task.
    task_id: String,
    /// True if and only if this call stopped a running task.
    killed: bool,
}

/// A `bash_kill` outcome.
pub(crate) fn kill(text: String, task_id: &str, killed: bool) -> Value {
    serde_json::to_value(KillContent {
        text,
        task_id: task_id.to_owned(),
        killed,
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
    schema
}

/// Removes what strict validators reject or clients need not see:
/// non-standard `format`s, the root `$schema`/`title`.
fn strip(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in ["format", "$schema", "title"] {
                map.remove(key);
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

    #[test]
    fn schemas_are_self_contained_objects_with_the_text() {
        for schema in [
            schema::<BashContent>(),
            schema::<OutputContent>(),
            schema::<KillContent>(),
        ] {
            assert_eq!(schema["type"], "object", "{schema}");
            assert!(schema["properties"]["text"].is_object(), "{schema}");
            assert!(schema["required"]
                .as_array()
                .unwrap()
                .contains(&Value::from("text")));
            let flat = schema.to_string();
            assert!(
                !flat.contains("$ref") && !flat.contains("\"format\""),
                "{flat}"
            );
        }
    }
}
