//! Tool arguments: the JSON Schemas (generated from these types, closed
//! with `additionalProperties: false`) and the validation that turns a
//! model's JSON into named values with the exact error texts. An argument
//! the schema does not know is an error that names it, the allowed ones and
//! the likely intended one (`timeout` → `timeoutMs`): never silently
//! ignored (a deliberate difference from VAL-09, whose silence let
//! `timeout: 100` run for the 120 s default). `stdin` and `env` are not
//! arguments at all, so they never reach the executor.

use dsh_bash::{NetworkPolicy, SandboxMode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

/// A wider sandbox mode a call may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Escalation {
    // Variants carry no doc comments so the schema stays a plain string enum.
    #[allow(missing_docs)]
    WorkspaceWrite,
    #[allow(missing_docs)]
    DangerFullAccess,
}

impl From<Escalation> for SandboxMode {
    fn from(escalation: Escalation) -> Self {
        match escalation {
            Escalation::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            Escalation::DangerFullAccess => SandboxMode::DangerFullAccess,
        }
    }
}

/// Parameters of `bash`.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // the fields exist for the schema; `BashCall` carries the values
struct BashParams {
    /// The command line.
    command: String,
    /// What it does, in 5-10 words (shown to the user).
    description: String,
    /// Timeout in ms (foreground).
    #[serde(rename = "timeoutMs")]
    #[schemars(range(min = 1))]
    timeout_ms: Option<u64>,
    /// Working directory (relative: to the session's).
    workdir: Option<String>,
    /// Run as a background task; returns its id.
    run_in_background: Option<bool>,
    /// Run in a terminal (REPLs, prompts, full-screen programs): type with bash_write, see its screen with bash_output.
    tty: Option<bool>,
    /// After this many ms a command still running becomes a background task.
    #[serde(rename = "yieldMs")]
    #[schemars(range(min = 1))]
    yield_ms: Option<u64>,
}

/// The network a call may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
enum NetworkAsk {
    #[allow(missing_docs)]
    On,
}

/// Parameters of `bash` under a confining executor.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct ConfinedBashParams {
    #[serde(flatten)]
    base: BashParams,
    #[serde(flatten)]
    escalation: EscalationParams,
}

/// The escalation fields of `bash` under a confining executor.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct EscalationParams {
    /// A wider mode for this one call.
    sandbox_permissions: Option<Escalation>,
    /// Why this call needs more, in one sentence (required when asking for more).
    justification: Option<String>,
    /// The network for this one call.
    network: Option<NetworkAsk>,
    /// Hosts this one call may reach (exact, optional :port, at most 8).
    allow_hosts: Option<Vec<String>>,
    /// The command's first words, proposed to run unasked from now on.
    prefix_rule: Option<Vec<String>>,
}

/// Parameters of `bash_kill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct TaskParams {
    /// A task id from bash (bash-1).
    task_id: String,
}

/// Parameters of `bash_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct OutputParams {
    /// A task id from bash (bash-1).
    task_id: String,
    /// Also return a tty task's screen.
    screen: Option<bool>,
    /// Read again from a [position: …] an earlier read showed.
    since: Option<String>,
}

/// A named key `bash_write` can press.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
pub(crate) enum Key {
    #[serde(rename = "C-c")]
    #[allow(missing_docs)]
    CtrlC,
    #[serde(rename = "C-d")]
    #[allow(missing_docs)]
    CtrlD,
    #[serde(rename = "C-z")]
    #[allow(missing_docs)]
    CtrlZ,
    #[allow(missing_docs)]
    Enter,
    #[allow(missing_docs)]
    Tab,
    #[allow(missing_docs)]
    Esc,
    #[allow(missing_docs)]
    Up,
    #[allow(missing_docs)]
    Down,
    #[allow(missing_docs)]
    Left,
    #[allow(missing_docs)]
    Right,
    #[allow(missing_docs)]
    Backspace,
}

impl Key {
    /// The bytes a terminal sends for it.
    pub(crate) fn bytes(self) -> &'static [u8] {
        match self {
            Key::CtrlC => b"\x03",
            Key::CtrlD => b"\x04",
            Key::CtrlZ => b"\x1a",
            Key::Enter => b"\r",
            Key::Tab => b"\t",
            Key::Esc => b"\x1b",
            Key::Up => b"\x1b[A",
            Key::Down => b"\x1b[B",
            Key::Right => b"\x1b[C",
            Key::Left => b"\x1b[D",
            Key::Backspace => b"\x7f",
        }
    }
}

/// Parameters of `bash_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)]
struct WriteParams {
    /// A task id from bash (bash-1).
    task_id: String,
    /// Text to type ("\n" is Enter); none: just wait for output.
    input: Option<String>,
    /// Keys pressed after the text.
    keys: Option<Vec<Key>>,
    /// Wait at most this many ms for output to go quiet (default 1000).
    #[serde(rename = "yieldMs")]
    #[schemars(range(min = 1, max = 30000))]
    yield_ms: Option<u64>,
}

/// A validated `bash_write` call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WriteCall {
    pub(crate) task_id: String,
    pub(crate) input: String,
    pub(crate) keys: Vec<Key>,
    pub(crate) wait: std::time::Duration,
}

/// A self-contained schema: no `$ref`, optional fields simply not required
/// (no `null` types), no root title or description.
fn schema_of<T: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let mut schema = schemars::SchemaGenerator::new(settings)
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(object) = schema.as_object_mut() {
        for key in ["$schema", "title", "description", "$defs"] {
            object.remove(key);
        }
        if let Some(Value::Object(properties)) = object.get_mut("properties") {
            properties.values_mut().for_each(drop_null);
            // Number formats (`uint64`, `double`) are not JSON Schema
            // vocabulary; strict validators reject them.
            for property in properties.values_mut().filter_map(Value::as_object_mut) {
                property.remove("format");
            }
        }
        object.insert("additionalProperties".into(), Value::Bool(false));
    }
    schema
}

/// `Option<T>` fields become plain `T`: absence is how "not given" is said.
fn drop_null(property: &mut Value) {
    let Some(object) = property.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(types)) = object.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if let [single] = kept.as_slice() {
            object.insert("type".into(), single.clone());
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(options)) = object.remove("anyOf") {
        let mut kept: Vec<Value> = options
            .into_iter()
            .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"))
            .collect();
        if kept.len() == 1 {
            if let Some(Value::Object(inner)) = kept.pop() {
                for (key, value) in inner {
                    object.entry(key).or_insert(value);
                }
            }
        } else {
            object.insert("anyOf".into(), Value::Array(kept));
        }
    }
}

/// The JSON Schema of `bash`; with the escalation fields exactly when the
/// executor confines in a mode something is wider than, offering only the
/// modes strictly wider than `standing` (asking for the current one always
/// fails).
pub(crate) fn bash_schema(standing: Option<SandboxMode>) -> Value {
    let Some(standing) = standing.filter(|m| *m != SandboxMode::DangerFullAccess) else {
        return schema_of::<BashParams>();
    };
    let mut schema = schema_of::<ConfinedBashParams>();
    if let Some(Value::Array(modes)) = schema.pointer_mut("/properties/sandbox_permissions/enum") {
        modes.retain(|mode| {
            serde_json::from_value::<Escalation>(mode.clone())
                .is_ok_and(|m| SandboxMode::from(m).is_wider_than(standing))
        });
    }
    schema
}

/// The JSON Schema of `bash_output` and `bash_kill`.
pub(crate) fn task_schema() -> Value {
    schema_of::<TaskParams>()
}

/// Names a model might use for an argument, and the one it means.
const LIKELY: [(&str, &str); 8] = [
    ("timeout", "timeoutMs"),
    ("timeout_ms", "timeoutMs"),
    ("timeoutms", "timeoutMs"),
    ("cwd", "workdir"),
    ("dir", "workdir"),
    ("working_directory", "workdir"),
    ("background", "run_in_background"),
    ("cmd", "command"),
];

/// The names a parameter type declares, in declaration order: what the
/// schema generated from the same type lists, so the parser's allowed
/// arguments can never drift from it. (Read through serde: a struct's
/// `Deserialize` hands its field names to `deserialize_struct`.)
fn fields_of<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    struct Names(Option<&'static [&'static str]>);
    impl<'de> serde::Deserializer<'de> for &mut Names {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(
            self,
            _: V,
        ) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("names only"))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0 = Some(fields);
            Err(serde::de::Error::custom("names only"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut names = Names(None);
    let _ = T::deserialize(&mut names);
    names.0.unwrap_or(&[])
}

/// The escalation fields: known to every `bash` call, so that without a
/// confining executor the call gets the specific "not available" answer.
fn escalation_fields() -> &'static [&'static str] {
    fields_of::<EscalationParams>()
}

/// Refuses arguments outside `allowed` (and the escalation pair), naming
/// them, the allowed ones and the likely intended one.
fn only(args: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    let mut unknown: Vec<&str> = args
        .keys()
        .map(String::as_str)
        .filter(|key| !allowed.contains(key) && !escalation_fields().contains(key))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort_unstable();
    let names = unknown
        .iter()
        .map(|k| format!("\"{k}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let hint = unknown
        .iter()
        .find_map(|k| {
            let lower = k.to_ascii_lowercase();
            LIKELY
                .iter()
                .find(|(alias, _)| *alias == lower)
                .filter(|(_, meant)| allowed.contains(meant))
                .map(|(_, meant)| format!(" (did you mean \"{meant}\"?)"))
        })
        .unwrap_or_default();
    let plural = if unknown.len() > 1 { "s" } else { "" };
    Err(format!(
        "unknown argument{plural} {names}{hint}; allowed: {}",
        allowed.join(", ")
    ))
}

/// The arguments of an executor call's `bash` (no terminal, no hand-over:
/// a remote executor runs neither through executor calls).
const EXECUTOR_ARGUMENTS: [&str; 5] = [
    "command",
    "description",
    "timeoutMs",
    "workdir",
    "run_in_background",
];

/// The arguments of `bash`; the escalation fields only when the executor
/// confines.
fn bash_arguments(confining: bool) -> Vec<&'static str> {
    let mut names = fields_of::<BashParams>().to_vec();
    if confining {
        names.extend_from_slice(escalation_fields());
    }
    names
}

/// A validated `bash` call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BashCall {
    pub(crate) command: String,
    pub(crate) timeout: Option<std::time::Duration>,
    pub(crate) workdir: Option<String>,
    pub(crate) background: bool,
    pub(crate) escalation: Option<Escalate>,
    /// Run in a terminal.
    pub(crate) tty: bool,
    /// Hand over as a background task after this long.
    pub(crate) yield_after: Option<std::time::Duration>,
}

/// What a call asks the user for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Escalate {
    /// A wider mode.
    pub(crate) mode: Option<SandboxMode>,
    /// The network.
    pub(crate) network: Option<NetworkPolicy>,
    /// Hosts beside the allow-list.
    pub(crate) hosts: Vec<dsh_bash::HostPattern>,
    /// Why.
    pub(crate) justification: String,
    /// The prefix proposed as a standing approval.
    pub(crate) prefix_rule: Option<Vec<String>>,
}

fn object(args: &Value) -> Result<&Map<String, Value>, String> {
    args.as_object()
        .ok_or_else(|| format!("invalid arguments: expected an object, got {args}"))
}

fn non_empty(args: &Map<String, Value>, field: &str) -> Result<String, String> {
    match args.get(field) {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        _ => Err(format!("invalid {field}: expected a non-empty string")),
    }
}

fn present<'a>(args: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    args.get(field).filter(|value| !value.is_null())
}

/// Who makes a `bash` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A model, through the tool: a description is required, and under a
    /// confining executor it may ask for an escalation.
    Model {
        /// Whether the executor confines (the escalation arguments exist).
        confining: bool,
    },
    /// A remote executor (an executor call): the same arguments, the
    /// description optional, no escalation (an executor call widens
    /// nothing).
    Executor,
}

/// Validates `bash` arguments. The order of checks is fixed: command,
/// description, timeoutMs, workdir, run_in_background, the escalation
/// pair, then unknown arguments.
pub(crate) fn bash_call(args: &Value, caller: Caller) -> Result<BashCall, String> {
    let args = object(args)?;
    let command = non_empty(args, "command")?;
    if caller != Caller::Executor || present(args, "description").is_some() {
        non_empty(args, "description")?;
    }
    let timeout = millis(args, "timeoutMs")?;
    let workdir = match present(args, "workdir") {
        None => None,
        Some(Value::String(dir)) if !dir.trim().is_empty() => Some(dir.clone()),
        Some(value) => {
            return Err(format!(
                "invalid workdir: expected a non-empty string, got {value}"
            ))
        }
    };
    let background = match present(args, "run_in_background") {
        None => false,
        Some(Value::Bool(flag)) => *flag,
        Some(value) => {
            return Err(format!(
                "invalid run_in_background: expected a boolean, got {value}"
            ))
        }
    };
    let tty = match present(args, "tty") {
        None => false,
        Some(Value::Bool(flag)) => *flag,
        Some(value) => return Err(format!("invalid tty: expected a boolean, got {value}")),
    };
    let yield_after = millis(args, "yieldMs")?;
    let (escalation, allowed) = match caller {
        Caller::Model { confining } => (escalation(args)?, bash_arguments(confining)),
        Caller::Executor => {
            if let Some(field) = escalation_fields().iter().find(|f| args.contains_key(**f)) {
                return Err(format!("unknown argument \"{field}\" (an executor call widens nothing: a wider sandbox or the network is asked for through the model's bash call); allowed: {}", EXECUTOR_ARGUMENTS.join(", ")));
            }
            (None, EXECUTOR_ARGUMENTS.to_vec())
        }
    };
    only(args, &allowed)?;
    Ok(BashCall {
        command,
        timeout,
        workdir,
        background,
        escalation,
        tty,
        yield_after,
    })
}

/// A positive integer number of milliseconds (`30000.0` is 30000, `1500.5`
/// is not), if `field` is given.
fn millis(args: &Map<String, Value>, field: &str) -> Result<Option<std::time::Duration>, String> {
    match present(args, field) {
        None => Ok(None),
        Some(value) => match value.as_f64() {
            // Past u64 milliseconds it saturates: capped by the executor
            // anyway.
            Some(ms) if ms.is_finite() && ms >= 1.0 && ms.fract() == 0.0 => {
                Ok(Some(std::time::Duration::from_millis(ms as u64)))
            }
            _ => Err(format!(
                "invalid {field}: expected a positive integer number of milliseconds, got {value}"
            )),
        },
    }
}

/// The longest `bash_write` waits for output to go quiet.
pub(crate) const MAX_WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long `bash_write` waits by default.
pub(crate) const WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Validates `bash_write` arguments.
pub(crate) fn write_call(args: &Value) -> Result<WriteCall, String> {
    let object = object(args)?;
    let task_id = non_empty(object, "task_id")?;
    let input = match present(object, "input") {
        None => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(value) => return Err(format!("invalid input: expected a string, got {value}")),
    };
    let keys = match present(object, "keys") {
        None => Vec::new(),
        Some(value) => serde_json::from_value::<Vec<Key>>(value.clone()).map_err(|_| {
            format!("invalid keys: expected an array of C-c, C-d, C-z, Enter, Tab, Esc, Up, Down, Left, Right, Backspace; got {value}")
        })?,
    };
    let wait = millis(object, "yieldMs")?.map_or(WRITE_WAIT, |wait| wait.min(MAX_WRITE_WAIT));
    only(object, fields_of::<WriteParams>())?;
    Ok(WriteCall {
        task_id,
        input,
        keys,
        wait,
    })
}

/// A valid `bash_output` call.
#[derive(Debug)]
pub(crate) struct OutputCall {
    pub(crate) task_id: String,
    pub(crate) screen: bool,
    pub(crate) since: Option<dsh_bash::OutputCursor>,
}

/// Validates `bash_output` arguments: the task, whether to show its
/// screen, and the position to read from.
pub(crate) fn output_call(args: &Value) -> Result<OutputCall, String> {
    let object = object(args)?;
    let task_id = non_empty(object, "task_id")?;
    let screen = match present(object, "screen") {
        None => false,
        Some(Value::Bool(flag)) => *flag,
        Some(value) => return Err(format!("invalid screen: expected a boolean, got {value}")),
    };
    let since = match present(object, "since") {
        None => None,
        Some(Value::String(text)) => Some(text.trim().parse()?),
        Some(value) => {
            return Err(format!(
                "invalid since: expected a position as a read shows it (\"812:0\"), got {value}"
            ))
        }
    };
    only(object, fields_of::<OutputParams>())?;
    Ok(OutputCall {
        task_id,
        screen,
        since,
    })
}

/// The JSON Schema of `bash_output`.
pub(crate) fn output_schema() -> Value {
    schema_of::<OutputParams>()
}

/// The JSON Schema of `bash_write`.
pub(crate) fn write_schema() -> Value {
    schema_of::<WriteParams>()
}

/// The most hosts one call may ask for.
const MAX_ASKED_HOSTS: usize = 8;

/// The hosts a call asks for: exact names or addresses, each with an
/// optional port (a wildcard is the operator's to give, not the model's).
fn asked_hosts(value: &Value) -> Result<Vec<dsh_bash::HostPattern>, String> {
    let expected = "invalid allow_hosts: expected 1 to 8 exact host names or addresses, each with an optional :port (\"files.example.org\", \"files.example.org:443\")";
    let Some(list) = value
        .as_array()
        .filter(|l| (1..=MAX_ASKED_HOSTS).contains(&l.len()))
    else {
        return Err(format!("{expected}, got {value}"));
    };
    list.iter()
        .map(|entry| {
            let text = entry.as_str().ok_or_else(|| format!("{expected}, got {entry}"))?;
            if text.contains('*') {
                return Err(format!("{expected}: \"{text}\" has a wildcard; ask for the exact hosts the command needs"));
            }
            text.parse::<dsh_bash::HostPattern>().map_err(|err| format!("invalid allow_hosts: {err}"))
        })
        .collect()
}

/// The most words a proposed prefix may have.
const MAX_PREFIX_WORDS: usize = 16;

/// A proposed prefix: one to [`MAX_PREFIX_WORDS`] non-empty words.
fn prefix_words(value: &Value) -> Result<Vec<String>, String> {
    let expected = format!("invalid prefix_rule: expected an array of 1 to {MAX_PREFIX_WORDS} non-empty words the command starts with, e.g. [\"npm\", \"run\", \"test\"], got {value}");
    let words: Vec<String> = serde_json::from_value(value.clone()).map_err(|_| expected.clone())?;
    if words.is_empty()
        || words.len() > MAX_PREFIX_WORDS
        || words.iter().any(|w| w.trim().is_empty())
    {
        return Err(expected);
    }
    Ok(words)
}

/// What a confined call asks the user for, if anything; every asking
/// field needs the justification, and the justification needs one.
fn escalation(args: &Map<String, Value>) -> Result<Option<Escalate>, String> {
    let permissions = present(args, "sandbox_permissions");
    let network = present(args, "network");
    let hosts = present(args, "allow_hosts");
    let asking = [
        ("sandbox_permissions", permissions),
        ("network", network),
        ("allow_hosts", hosts),
    ]
    .into_iter()
    .find_map(|(name, value)| value.map(|_| name));
    let prefix_rule = present(args, "prefix_rule");
    if let (None, Some(_)) = (asking, prefix_rule) {
        return Err("invalid prefix_rule: it proposes a standing approval for an escalation; only valid together with sandbox_permissions, network or allow_hosts".into());
    }
    let reason = match (asking, present(args, "justification")) {
        (None, None) => return Ok(None),
        (Some(name), None) => {
            return Err(format!("invalid escalation: {name} requires a justification"))
        }
        (None, Some(_)) => {
            return Err(
                "invalid escalation: justification is only valid together with sandbox_permissions, network or allow_hosts"
                    .into(),
            )
        }
        (Some(_), Some(reason)) => reason,
    };
    let mode = permissions
        .map(|mode| {
            serde_json::from_value::<Escalation>(mode.clone()).map_err(|_| {
                format!("invalid sandbox_permissions: expected one of workspace-write, danger-full-access, got {mode}")
            })
        })
        .transpose()?;
    let network = network
        .map(|network| {
            serde_json::from_value::<NetworkAsk>(network.clone()).map_err(|_| {
                format!("invalid network: expected \"on\" (the network is off in the sandbox; ask for it only when the command needs it), got {network}")
            })
        })
        .transpose()?;
    let hosts = hosts.map(asked_hosts).transpose()?.unwrap_or_default();
    let justification = match reason {
        Value::String(text) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => return Err("invalid justification: expected a non-empty sentence".into()),
    };
    Ok(Some(Escalate {
        mode: mode.map(Into::into),
        network: network.map(|NetworkAsk::On| NetworkPolicy::On),
        hosts,
        justification,
        prefix_rule: prefix_rule.map(prefix_words).transpose()?,
    }))
}

/// A remote executor's `bash` call (an executor call), validated by the
/// model's rules: the same arguments and errors, the description
/// optional, no escalation arguments (an executor call widens nothing).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutorBashCall {
    /// The command line.
    pub command: String,
    /// `timeoutMs`.
    pub timeout: Option<std::time::Duration>,
    /// `workdir`, as given (see [`crate::session_workdir`]).
    pub workdir: Option<String>,
    /// `run_in_background`.
    pub background: bool,
}

/// Validates an executor call's `bash` arguments; the error says what was
/// wrong and what is allowed.
pub fn executor_bash_call(args: &Value) -> Result<ExecutorBashCall, String> {
    let call = bash_call(args, Caller::Executor)?;
    Ok(ExecutorBashCall {
        command: call.command,
        timeout: call.timeout,
        workdir: call.workdir,
        background: call.background,
    })
}

/// Validates an executor call's `bash_kill` (and `bash_write`,
/// `bash_screen`) arguments.
pub fn executor_task_id(args: &Value) -> Result<String, String> {
    task_id(args)
}

/// Validates an executor call's `bash_output` arguments: the task, and
/// the position to read from.
pub fn executor_output_call(
    args: &Value,
) -> Result<(String, Option<dsh_bash::OutputCursor>), String> {
    let call = output_call(args)?;
    if call.screen {
        return Err("screen: ask for it with bash_screen".to_owned());
    }
    Ok((call.task_id, call.since))
}

/// Validates `bash_output` / `bash_kill` arguments.
pub(crate) fn task_id(args: &Value) -> Result<String, String> {
    let args = object(args)?;
    let id = non_empty(args, "task_id")?;
    let allowed = fields_of::<TaskParams>();
    if let Some(field) = escalation_fields().iter().find(|f| args.contains_key(**f)) {
        return Err(format!(
            "unknown argument \"{field}\"; allowed: {}",
            allowed.join(", ")
        ));
    }
    only(args, allowed)?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"command": "ls", "description": "list the files here"})
    }

    /// The names each parser accepts are exactly the properties its
    /// schema offers (both read from one type), and an executor call's are
    /// the first of `bash`'s.
    #[test]
    fn parsers_accept_what_their_schemas_offer() {
        let properties = |schema: Value| -> std::collections::BTreeSet<String> {
            schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        let names = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        let standing = Some(SandboxMode::ReadOnly);
        assert_eq!(properties(bash_schema(None)), names(&bash_arguments(false)));
        assert_eq!(
            properties(bash_schema(standing)),
            names(&bash_arguments(true))
        );
        assert_eq!(
            properties(write_schema()),
            names(fields_of::<WriteParams>())
        );
        assert_eq!(
            properties(output_schema()),
            names(fields_of::<OutputParams>())
        );
        assert_eq!(properties(task_schema()), names(fields_of::<TaskParams>()));
        assert_eq!(
            fields_of::<BashParams>()[..EXECUTOR_ARGUMENTS.len()],
            EXECUTOR_ARGUMENTS
        );
        assert_eq!(
            bash_arguments(false).len(),
            7,
            "{:?}",
            bash_arguments(false)
        );
    }

    fn with(extra: Value) -> Value {
        let mut args = base();
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        args
    }

    #[test]
    fn exact_validation_texts() {
        let cases = [
            (json!({"command": "  ", "description": "d"}), "invalid command: expected a non-empty string"),
            (json!({"command": 7, "description": "d"}), "invalid command: expected a non-empty string"),
            (json!({"command": "ls"}), "invalid description: expected a non-empty string"),
            (json!({"command": "ls", "description": " \n"}), "invalid description: expected a non-empty string"),
            (with(json!({"timeoutMs": -5})), "invalid timeoutMs: expected a positive integer number of milliseconds, got -5"),
            (with(json!({"timeoutMs": 0})), "invalid timeoutMs: expected a positive integer number of milliseconds, got 0"),
            (with(json!({"timeoutMs": "10"})), "invalid timeoutMs: expected a positive integer number of milliseconds, got \"10\""),
            (with(json!({"timeoutMs": 1500.5})), "invalid timeoutMs: expected a positive integer number of milliseconds, got 1500.5"),
            (with(json!({"timeout": 100})), "unknown argument \"timeout\" (did you mean \"timeoutMs\"?); allowed: command, description, timeoutMs, workdir, run_in_background, tty, yieldMs"),
            (with(json!({"env": {}, "stdin": "x"})), "unknown arguments \"env\", \"stdin\"; allowed: command, description, timeoutMs, workdir, run_in_background, tty, yieldMs"),
            (with(json!({"sandbox_permissions": "workspace-write"})), "invalid escalation: sandbox_permissions requires a justification"),
            (with(json!({"justification": "needs it"})), "invalid escalation: justification is only valid together with sandbox_permissions, network or allow_hosts"),
            (with(json!({"sandbox_permissions": "workspace-write", "justification": "  "})), "invalid justification: expected a non-empty sentence"),
            (with(json!({"sandbox_permissions": "root", "justification": "x"})), "invalid sandbox_permissions: expected one of workspace-write, danger-full-access, got \"root\""),
            (with(json!({"run_in_background": "yes"})), "invalid run_in_background: expected a boolean, got \"yes\""),
            (with(json!({"network": "on"})), "invalid escalation: network requires a justification"),
            (with(json!({"network": "off", "justification": "x"})), "invalid network: expected \"on\" (the network is off in the sandbox; ask for it only when the command needs it), got \"off\""),
        ];
        for (args, message) in cases {
            assert_eq!(
                bash_call(&args, Caller::Model { confining: false }).unwrap_err(),
                message,
                "{args}"
            );
        }
        assert_eq!(
            task_id(&json!({"task_id": ""})).unwrap_err(),
            "invalid task_id: expected a non-empty string"
        );
        assert_eq!(
            task_id(&json!({"task_id": "bash-1", "id": "x"})).unwrap_err(),
            "unknown argument \"id\"; allowed: task_id"
        );
        // Confining: the escalation pair is allowed, still nothing else.
        assert_eq!(
            bash_call(&with(json!({"cwd": "/"})), Caller::Model { confining: true }).unwrap_err(),
            "unknown argument \"cwd\" (did you mean \"workdir\"?); allowed: command, description, timeoutMs, workdir, run_in_background, tty, yieldMs, sandbox_permissions, justification, network, allow_hosts, prefix_rule"
        );
        let network = bash_call(
            &with(json!({"network": "on", "justification": "fetch the crate index"})),
            Caller::Model { confining: true },
        )
        .unwrap();
        assert_eq!(
            network.escalation,
            Some(Escalate {
                mode: None,
                network: Some(NetworkPolicy::On),
                hosts: Vec::new(),
                justification: "fetch the crate index".into(),
                prefix_rule: None,
            })
        );
        let proposed = bash_call(
            &with(
                json!({"network": "on", "justification": "x", "prefix_rule": ["npm", "install"]}),
            ),
            Caller::Model { confining: true },
        )
        .unwrap();
        assert_eq!(
            proposed.escalation.unwrap().prefix_rule,
            Some(vec!["npm".to_owned(), "install".to_owned()])
        );
        let hosts = bash_call(
            &with(json!({"allow_hosts": ["files.example.org", "127.0.0.1:8080"], "justification": "fetch the wheel"})),
            Caller::Model { confining: true },
        )
        .unwrap();
        assert_eq!(
            hosts.escalation.unwrap().hosts,
            [
                "files.example.org".parse().unwrap(),
                "127.0.0.1:8080".parse().unwrap()
            ]
        );
        for (asked, says) in [
            (
                json!({"prefix_rule": ["npm"]}),
                "invalid prefix_rule: it proposes a standing approval for an escalation",
            ),
            (
                json!({"network": "on", "justification": "x", "prefix_rule": []}),
                "invalid prefix_rule: expected an array of 1 to 16",
            ),
            (
                json!({"network": "on", "justification": "x", "prefix_rule": "npm"}),
                "invalid prefix_rule: expected an array",
            ),
            (
                json!({"allow_hosts": ["x.org"]}),
                "invalid escalation: allow_hosts requires a justification",
            ),
            (
                json!({"allow_hosts": [], "justification": "x"}),
                "invalid allow_hosts: expected 1 to 8",
            ),
            (
                json!({"allow_hosts": "x.org", "justification": "x"}),
                "invalid allow_hosts: expected 1 to 8",
            ),
            (
                json!({"allow_hosts": ["*.example.org"], "justification": "x"}),
                "has a wildcard; ask for the exact hosts",
            ),
            (
                json!({"allow_hosts": ["exa mple"], "justification": "x"}),
                "is not a host name",
            ),
            (
                json!({"allow_hosts": [1], "justification": "x"}),
                "invalid allow_hosts: expected",
            ),
        ] {
            let err =
                bash_call(&with(asked.clone()), Caller::Model { confining: true }).unwrap_err();
            assert!(err.contains(says), "{asked}: {err}");
        }
    }

    #[test]
    fn an_executor_call_follows_the_same_rules_without_description_or_escalation() {
        let bare = json!({"command": "ls", "timeoutMs": 1500});
        let call = bash_call(&bare, Caller::Executor).unwrap();
        assert_eq!(call.timeout, Some(std::time::Duration::from_millis(1500)));
        assert_eq!(
            bash_call(&bare, Caller::Model { confining: false }).unwrap_err(),
            "invalid description: expected a non-empty string"
        );
        for (args, message) in [
            (json!({"command": "ls", "description": ""}), "invalid description: expected a non-empty string"),
            (json!({"command": "ls", "timeoutMs": 1.5}), "invalid timeoutMs: expected a positive integer number of milliseconds, got 1.5"),
            (json!({"command": "ls", "timeout": 9}), "unknown argument \"timeout\" (did you mean \"timeoutMs\"?); allowed: command, description, timeoutMs, workdir, run_in_background"),
            (json!({"command": "ls", "network": "on", "justification": "x"}), "unknown argument \"justification\" (an executor call widens nothing: a wider sandbox or the network is asked for through the model's bash call); allowed: command, description, timeoutMs, workdir, run_in_background"),
        ] {
            assert_eq!(bash_call(&args, Caller::Executor).unwrap_err(), message, "{args}");
        }
    }

    #[test]
    fn known_values_are_kept() {
        let call = bash_call(
            &with(json!({
                "timeoutMs": 30000.0, "workdir": "sub", "run_in_background": true,
                "tty": true, "yieldMs": 500
            })),
            Caller::Model { confining: false },
        )
        .unwrap();
        assert_eq!(
            call,
            BashCall {
                command: "ls".into(),
                timeout: Some(std::time::Duration::from_millis(30000)),
                workdir: Some("sub".into()),
                background: true,
                escalation: None,
                tty: true,
                yield_after: Some(std::time::Duration::from_millis(500)),
            }
        );
    }

    #[test]
    fn write_and_output_calls_name_what_is_wrong() {
        let call = write_call(&json!({"task_id": "bash-1", "input": "x = 1\n", "keys": ["Enter", "C-c"], "yieldMs": 99999})).unwrap();
        assert_eq!(call.keys, vec![Key::Enter, Key::CtrlC]);
        assert_eq!(call.wait, MAX_WRITE_WAIT);
        assert_eq!(
            write_call(&json!({"task_id": "bash-1"})).unwrap().wait,
            WRITE_WAIT
        );
        for (args, message) in [
            (json!({"input": "x"}), "invalid task_id: expected a non-empty string"),
            (json!({"task_id": "bash-1", "keys": ["C-x"]}), "invalid keys: expected an array of C-c, C-d, C-z, Enter, Tab, Esc, Up, Down, Left, Right, Backspace; got [\"C-x\"]"),
            (json!({"task_id": "bash-1", "input": 7}), "invalid input: expected a string, got 7"),
            (json!({"task_id": "bash-1", "text": "x"}), "unknown argument \"text\"; allowed: task_id, input, keys, yieldMs"),
        ] {
            assert_eq!(write_call(&args).unwrap_err(), message, "{args}");
        }
        let call = output_call(&json!({"task_id": "bash-1", "screen": true})).unwrap();
        assert_eq!(
            (call.task_id.as_str(), call.screen, call.since),
            ("bash-1", true, None)
        );
        let call = output_call(&json!({"task_id": "bash-1", "since": " 812:3 "})).unwrap();
        assert_eq!(
            call.since,
            Some(dsh_bash::OutputCursor {
                stdout: 812,
                stderr: 3
            })
        );
        for (args, message) in [
            (json!({"task_id": "bash-1", "screen": "yes"}), "invalid screen: expected a boolean, got \"yes\""),
            (json!({"task_id": "bash-1", "since": 812}), "invalid since: expected a position as a read shows it (\"812:0\"), got 812"),
            (json!({"task_id": "bash-1", "since": "812"}), "invalid position \"812\": expected STDOUT:STDERR byte counts as a read's [position: …] shows them (\"812:0\")"),
            (json!({"task_id": "bash-1", "since": "-1:0"}), "invalid position \"-1:0\": expected STDOUT:STDERR byte counts as a read's [position: …] shows them (\"812:0\")"),
            (json!({"task_id": "bash-1", "from": "0:0"}), "unknown argument \"from\"; allowed: task_id, screen, since"),
        ] {
            assert_eq!(output_call(&args).unwrap_err(), message, "{args}");
        }
        assert_eq!(Key::Up.bytes(), b"\x1b[A");
    }

    #[test]
    fn schemas_carry_escalation_fields_exactly_when_confining() {
        let plain = bash_schema(None);
        let props = plain["properties"].as_object().unwrap();
        assert_eq!(
            props.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "command",
                "description",
                "run_in_background",
                "timeoutMs",
                "tty",
                "workdir",
                "yieldMs"
            ]
        );
        assert_eq!(plain["required"], json!(["command", "description"]));
        let confined = bash_schema(Some(SandboxMode::ReadOnly));
        let wide = bash_schema(Some(SandboxMode::WorkspaceWrite));
        assert_eq!(
            wide["properties"]["sandbox_permissions"]["enum"],
            json!(["danger-full-access"]),
            "only strictly wider modes are offered"
        );
        assert!(
            !bash_schema(Some(SandboxMode::DangerFullAccess))["properties"]
                .as_object()
                .unwrap()
                .contains_key("sandbox_permissions")
        );
        let props = confined["properties"].as_object().unwrap();
        assert!(props.contains_key("sandbox_permissions") && props.contains_key("justification"));
        assert_eq!(
            props["sandbox_permissions"]["enum"],
            json!(["workspace-write", "danger-full-access"])
        );
        assert_eq!(props["timeoutMs"]["type"], "integer");
        assert_eq!(props["timeoutMs"]["minimum"], 1);
        assert!(!confined.to_string().contains("format"));
        assert_eq!(confined["additionalProperties"], false);
        assert_eq!(task_schema()["additionalProperties"], false);
        assert!(!confined.to_string().contains("$ref"));
        assert!(!confined.to_string().contains("read-only"));
        assert_eq!(task_schema()["required"], json!(["task_id"]));
    }
}
