//! Command rules: allow, ask or deny a bash command by what it really
//! runs.
//!
//! A command is read by a real bash parser ([`brush_parser`], the parser
//! of the brush shell: MIT, maintained, pure Rust, a syntax tree of every
//! construct bash has; `tree-sitter-bash` would bring a C library and a
//! grammar that recovers from errors instead of reporting them). Every
//! simple command is found — in lists, pipelines, subshells, groups,
//! `if`/`for`/`while`/`case` bodies, function bodies, command and process
//! substitutions, here-documents fed to a shell, `bash -c`/`sh -c`
//! strings, `eval`, `trap`, `watch`, `su -c`, `find -exec` — after its
//! wrappers (`env`, `timeout`, `nice`, `nohup`, `command`, `exec`,
//! `xargs`, `sudo`, `doas`, `stdbuf`, `time`, `ionice`, `setsid`,
//! leading `NAME=value`) with its words as they will run (quotes and
//! backslashes removed; a path to a program compares by its basename).
//!
//! Each part is judged on its own and the strictest decides: deny, then
//! ask; allow only when every part is allowed (an allow must not carry
//! `npm test; curl … | sh` past the question), else no rule applies. A
//! word that cannot be known before the command runs (`$CMD`, `$(…)`, a
//! glob, a brace expansion) never lets a rule allow, and asks wherever a
//! deny or ask rule could match with it; a program that cannot be known
//! (`$CMD push`, `eval "$X"`, `source ./s.sh`, a shell reading its
//! input) and a command the parser cannot read ask whenever any deny or
//! ask rule exists.
//!
//! Deny and ask rules find their words after the program in order,
//! anywhere (`git -C dir --no-pager push` is `git push`), and a rule word
//! like `-rf` is satisfied by those letters among the command's short
//! options (`rm -r -f`, `rm -fr`, `rm -rfv`); an allow rule is a plain
//! prefix of the words. What no parser can know — what a script file, a
//! Makefile target or an interpreter's own code runs, aliases and
//! functions from the user's shell start-up files — is not judged.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::too_many_lines))]

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

mod programs;
mod walk;
mod words;

pub use programs::INTERPRETERS;
pub use walk::Part;
pub use words::Arg;

/// What a rule says of the commands it matches, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Runs without a question, even when the call asks for a wider
    /// sandbox or the network (a standing approval).
    Allow,
    /// A person is asked first.
    Ask,
    /// Never runs.
    Deny,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        })
    }
}

/// One word of a rule: a word, or a list of alternatives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RuleWord {
    /// This word.
    One(String),
    /// Any of these words.
    Any(Vec<String>),
}

impl RuleWord {
    fn alternatives(&self) -> &[String] {
        match self {
            RuleWord::One(word) => std::slice::from_ref(word),
            RuleWord::Any(words) => words,
        }
    }
}

/// One rule, as a policy file writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The program, then the words that must follow it.
    pub command: Vec<RuleWord>,
    /// What it says.
    pub decision: Decision,
    /// Shown to the model when the rule applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For an allow rule, the most it grants a call that asks for more
    /// (none: whatever the call asks). An approval "always" records what
    /// the person approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<Grants>,
    /// Where it was written (`file:line`), for what the rule says.
    #[serde(skip)]
    pub origin: Option<String>,
}

/// The most a standing approval grants: the host's own words for a
/// sandbox mode, a network policy and hosts (checked by the policy file's
/// reader and compared by the tool that grants).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// The widest sandbox mode granted (`workspace-write`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The network granted (`on`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Hosts granted beside the allow-list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

/// Why a rule cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuleError {
    /// No words.
    #[error(
        "`command` is empty: give the program and the words after it, e.g. [\"git\", \"push\"]"
    )]
    Empty,
    /// An empty word or an empty list of alternatives.
    #[error("word {0} of `command` is empty: every word (and every alternative) needs text")]
    EmptyWord(usize),
    /// The first word names a wrapper the judge removes.
    #[error("`{0}` is a wrapper the rules look through (its command is judged instead): name the program it runs")]
    Wrapper(String),
}

impl Rule {
    /// Checks the rule can match something.
    pub fn check(&self) -> Result<(), RuleError> {
        let Some(first) = self.command.first() else {
            return Err(RuleError::Empty);
        };
        for (at, word) in self.command.iter().enumerate() {
            let alternatives = word.alternatives();
            if alternatives.is_empty() || alternatives.iter().any(String::is_empty) {
                return Err(RuleError::EmptyWord(at + 1));
            }
        }
        if let Some(wrapper) = first
            .alternatives()
            .iter()
            .find(|w| programs::is_wrapper(w))
        {
            return Err(RuleError::Wrapper(wrapper.clone()));
        }
        Ok(())
    }

    /// The rule's words as written (`git push`, `git {push|pull}`).
    pub fn shown(&self) -> String {
        let words: Vec<String> = self
            .command
            .iter()
            .map(|word| match word {
                RuleWord::One(word) => word.clone(),
                RuleWord::Any(words) => format!("{{{}}}", words.join("|")),
            })
            .collect();
        words.join(" ")
    }
}

/// How a rule's words meet a part's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fit {
    Yes,
    /// Only if unknown words turn out so.
    Maybe,
    No,
}

/// True if `word` is one option cluster like `-rf`.
fn is_cluster(word: &str) -> bool {
    word.len() > 1
        && word.starts_with('-')
        && !word.starts_with("--")
        && word[1..].bytes().all(|b| b.is_ascii_alphabetic())
}

/// How a deny or ask rule's words after the program fit `args`: each in
/// order anywhere; a cluster by its letters among the short options.
fn loose_fit(rule: &[RuleWord], args: &[Arg]) -> Fit {
    let unknown = args.iter().any(|a| a.known().is_none());
    let shorts: String = args
        .iter()
        .filter_map(Arg::known)
        .filter(|w| is_cluster(w))
        .map(|w| &w[1..])
        .collect();
    let mut at = 0;
    let mut fit = Fit::Yes;
    for word in rule {
        let alternatives = word.alternatives();
        if alternatives
            .iter()
            .any(|w| is_cluster(w) && w[1..].chars().all(|c| shorts.contains(c)))
        {
            continue;
        }
        let found = args[at.min(args.len())..].iter().position(|a| {
            a.known()
                .is_some_and(|a| alternatives.iter().any(|w| w == a))
        });
        match found {
            Some(offset) => at += offset + 1,
            None if unknown => fit = Fit::Maybe,
            None => return Fit::No,
        }
    }
    fit
}

/// How an allow rule's words after the program fit `args`: a prefix of
/// known words.
fn exact_fit(rule: &[RuleWord], args: &[Arg]) -> Fit {
    for (at, word) in rule.iter().enumerate() {
        match args.get(at).and_then(Arg::known) {
            Some(arg) if word.alternatives().iter().any(|w| w == arg) => {}
            _ => return Fit::No,
        }
    }
    Fit::Yes
}

/// The rules, indexed by program.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    rules: Vec<Rule>,
    by_program: HashMap<String, Vec<usize>>,
    /// Some deny or ask rule exists: unknowable parts ask.
    guarded: bool,
}

/// What the rules say of one part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartVerdict {
    /// The simple command (`…` for a word not known before it runs).
    pub command: String,
    /// What applies to it; none: no rule.
    pub decision: Option<Decision>,
    /// The rule that decided (its words), if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Where that rule was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// What the allow rule that decided grants at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grants: Option<Grants>,
    /// Why it asks or is denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The decision over a whole command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// No rule applies: the session's sandbox does.
    Default,
    /// Every part is allowed.
    Allow,
    /// A person is asked.
    Ask,
    /// Refused.
    Deny,
}

/// What the rules say of one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Judgement {
    /// The decision.
    pub decision: Verdict,
    /// Each simple command found, in order.
    pub parts: Vec<PartVerdict>,
}

impl Judgement {
    /// The part that decided a deny or an ask (the first strictest).
    pub fn deciding(&self) -> Option<&PartVerdict> {
        let wanted = match self.decision {
            Verdict::Deny => Decision::Deny,
            Verdict::Ask => Decision::Ask,
            Verdict::Allow | Verdict::Default => return None,
        };
        self.parts.iter().find(|p| p.decision == Some(wanted))
    }

    /// One line for the model or the person: what decided and why.
    pub fn explained(&self) -> Option<String> {
        let part = self.deciding()?;
        let mut line = format!("`{}`", part.command);
        if let Some(rule) = &part.rule {
            line.push_str(&format!(" matches the rule `{rule}`"));
            if let Some(origin) = &part.origin {
                line.push_str(&format!(" ({origin})"));
            }
        }
        if let Some(why) = &part.why {
            line.push_str(&format!(": {why}"));
        }
        Some(line)
    }
}

impl Rules {
    /// The rules (each [`Rule::check`]ed).
    pub fn new(rules: Vec<Rule>) -> Result<Self, (usize, RuleError)> {
        let mut by_program: HashMap<String, Vec<usize>> = HashMap::new();
        for (at, rule) in rules.iter().enumerate() {
            rule.check().map_err(|err| (at, err))?;
            for program in rule.command[0].alternatives() {
                by_program
                    .entry(programs::basename(program).to_owned())
                    .or_default()
                    .push(at);
            }
        }
        let guarded = rules.iter().any(|r| r.decision > Decision::Allow);
        Ok(Rules {
            rules,
            by_program,
            guarded,
        })
    }

    /// The rules, in order.
    pub fn list(&self) -> &[Rule] {
        &self.rules
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// What the rules say of `command`.
    pub fn judge(&self, command: &str) -> Judgement {
        if self.rules.is_empty() {
            return Judgement {
                decision: Verdict::Default,
                parts: Vec::new(),
            };
        }
        let parts: Vec<PartVerdict> = walk::Walk::of(command)
            .parts
            .iter()
            .map(|part| self.part(part))
            .collect();
        let strictest = parts.iter().filter_map(|p| p.decision).max();
        let decision = match strictest {
            Some(Decision::Deny) => Verdict::Deny,
            Some(Decision::Ask) => Verdict::Ask,
            _ if !parts.is_empty() && parts.iter().all(|p| p.decision == Some(Decision::Allow)) => {
                Verdict::Allow
            }
            _ => Verdict::Default,
        };
        Judgement { decision, parts }
    }

    fn part(&self, part: &Part) -> PartVerdict {
        let mut verdict = PartVerdict {
            command: part.shown(),
            decision: None,
            rule: None,
            origin: None,
            grants: None,
            why: None,
        };
        if let Some(why) = &part.unknowable {
            if self.guarded {
                verdict.decision = Some(Decision::Ask);
                verdict.why = Some(format!("{why}; what it runs is not known before it runs"));
            }
            return verdict;
        }
        let Some(program) = part.words.first().and_then(Arg::known) else {
            return verdict;
        };
        let args = &part.words[1..];
        for &at in self.by_program.get(program).into_iter().flatten() {
            let rule = &self.rules[at];
            let fit = match rule.decision {
                Decision::Allow if part.by_path || part.writes || part.dressed => Fit::No,
                Decision::Allow => exact_fit(&rule.command[1..], args),
                Decision::Ask | Decision::Deny => loose_fit(&rule.command[1..], args),
            };
            let decision = match fit {
                Fit::Yes => rule.decision,
                Fit::Maybe => Decision::Ask,
                Fit::No => continue,
            };
            if verdict.decision.is_some_and(|d| d >= decision) {
                continue;
            }
            verdict.decision = Some(decision);
            verdict.rule = Some(rule.shown());
            verdict.origin = rule.origin.clone();
            verdict.grants = (decision == Decision::Allow)
                .then(|| rule.grants.clone())
                .flatten();
            verdict.why = match fit {
                Fit::Maybe => Some(format!(
                    "a word not known before it runs could make it `{}` ({})",
                    rule.shown(),
                    rule.decision
                )),
                _ => rule.reason.clone(),
            };
        }
        verdict
    }
}

/// Why a proposed rule is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProposalError {
    /// Not a usable rule.
    #[error("prefix_rule: {0}")]
    Rule(RuleError),
    /// One word (and options) allows a program to do anything it can.
    #[error("prefix_rule {0:?} would allow `{1}` to run anything at all: propose the program and the words that make this call what it is (e.g. [\"npm\", \"run\", \"test\"])")]
    Broad(Vec<String>, String),
    /// Its program is named by a path (an allow rule stands for the
    /// program found on PATH).
    #[error("prefix_rule names the program by a path ({0}): propose the name it is found by on PATH, or none")]
    Path(String),
    /// The command does not start with it.
    #[error("prefix_rule {0:?} is not how this command starts (it runs `{1}` first): propose words the command starts with")]
    NotThisCall(Vec<String>, String),
}

/// The allow rule a model proposes with a call, if it is no broader than
/// the call: its words are how the command's first simple command starts,
/// and not an interpreter or wrapper with nothing after it but options.
pub fn proposal(prefix: &[String], command: &str) -> Result<Rule, ProposalError> {
    let rule = Rule {
        command: prefix.iter().cloned().map(RuleWord::One).collect(),
        decision: Decision::Allow,
        reason: None,
        grants: None,
        origin: None,
    };
    rule.check().map_err(ProposalError::Rule)?;
    let program = programs::basename(&prefix[0]);
    // One word (or one and its options) lets a program do anything it can.
    if prefix[1..].iter().all(|w| w.starts_with('-')) {
        return Err(ProposalError::Broad(prefix.to_vec(), program.to_owned()));
    }
    if prefix[0].contains('/') {
        return Err(ProposalError::Path(prefix[0].clone()));
    }
    let walked = walk::Walk::of(command);
    let first = walked.parts.first();
    let starts = first.is_some_and(|part| {
        part.unknowable.is_none()
            && !part.by_path
            && !part.dressed
            && part.words.first().and_then(Arg::known) == Some(program)
            && exact_fit(&rule.command[1..], &part.words[1..]) == Fit::Yes
    });
    if !starts {
        let runs = first.map_or_else(|| "nothing".to_owned(), Part::shown);
        return Err(ProposalError::NotThisCall(prefix.to_vec(), runs));
    }
    Ok(rule)
}
