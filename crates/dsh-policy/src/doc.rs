//! The policy file as TOML: every key it may hold, with where each was
//! written.

use serde::Deserialize;
use toml::Spanned;

type At<T> = Option<Spanned<T>>;

/// One policy file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Doc {
    #[serde(default)]
    pub sandbox: SandboxDoc,
    #[serde(default)]
    pub network: NetworkDoc,
    #[serde(default)]
    pub limits: LimitsDoc,
    #[serde(default)]
    pub timeouts: TimeoutsDoc,
    #[serde(default)]
    pub output: OutputDoc,
    #[serde(default)]
    pub rule: Vec<Spanned<dsh_rules::Rule>>,
}

/// `[sandbox]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxDoc {
    pub mode: At<String>,
    pub backend: At<String>,
    pub workspace: At<String>,
    pub protect: At<Vec<String>>,
    pub unprotect: At<Vec<String>>,
    pub hide: At<Vec<String>>,
    pub unhide: At<Vec<String>>,
}

/// `[network]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkDoc {
    pub mode: At<String>,
    pub allow_hosts: At<Vec<String>>,
    pub deny_hosts: At<Vec<String>>,
    pub presets: At<Vec<String>>,
}

/// `[limits]`: numbers, sizes, or `"none"`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsDoc {
    pub processes: At<toml::Value>,
    pub memory: At<toml::Value>,
    pub cpu: At<toml::Value>,
    pub spill_bytes: At<toml::Value>,
    pub commands: At<toml::Value>,
}

/// `[timeouts]`, in milliseconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsDoc {
    pub default_ms: At<toml::Value>,
    pub max_ms: At<toml::Value>,
    pub yield_ms: At<toml::Value>,
}

/// `[output]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputDoc {
    pub max_bytes: At<toml::Value>,
}

/// A TOML value as the text a flag would carry.
pub fn text_of(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => text.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}
