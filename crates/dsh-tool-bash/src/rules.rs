//! The command rules a `bash` call is judged by before anything runs (see
//! [`dsh_rules`]), and where a person's "always" is kept.

use std::path::Path;

use dsh_rules::{Judgement, Rule};

/// The rules of the host's policy.
pub trait RuleBook: Send + Sync {
    /// What the rules say of `command`.
    fn judge(&self, command: &str) -> Judgement;

    /// True while there is no rule to judge by (a book kept only for an
    /// approval "always"): calls skip the judge.
    fn is_empty(&self) -> bool;

    /// Keeps `rule` as a standing approval a person gave while working in
    /// `workspace`, and judges by it from now on: where it was kept, or why
    /// it could not be (it then applied to the one call). May block (a
    /// file is written); called off the runtime's threads.
    fn keep(&self, rule: Rule, workspace: Option<&Path>) -> Result<String, String>;
}

impl std::fmt::Debug for dyn RuleBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuleBook")
    }
}
