use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use dsh_bash::{
    BashError, BashExecRequest, BashExecutor, BashTaskId, ListenerHandle, NetworkPolicy,
    SandboxMode,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::approval::{ApprovalOutcome, ApprovalRequest, ApprovalService};
use crate::args::{self, BashCall, Escalate};
use crate::render::{
    render_run_result, render_run_result_with, render_task_read, status_line, Heads,
};
use crate::rules::RuleBook;
use crate::session::{effective_sandbox_mode, Session};
use crate::structured;
use dsh_rules::{Judgement, Verdict};

/// The standing instruction that accompanies the tools (an MCP server
/// carries it in its instructions).
pub const STANDING_INSTRUCTION: &str = "Every bash result ends with a status marker when something went wrong: check for \"[exit code: N]\", \"[killed by signal: …]\", \"[timed out after …]\" and \"[sandbox: …]\" on every result, and investigate a failure before moving on.";

const OUTPUT_DESCRIPTION: &str = "Read a background task's new output, then \"[status: running|completed, exit code: N|killed] [position: …]\"; since reads again from an earlier position.";

const WRITE_DESCRIPTION: &str = "Type into a background tty task (a REPL, a prompt, vi): text, then keys (C-c interrupts, C-d ends input). Returns its new output once quiet, as bash_output does.";

const KILL_DESCRIPTION: &str = "Stop a background task and everything it started.";

/// Hints a host can show about a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolAnnotations {
    /// The tool never changes anything.
    pub read_only: bool,
    /// The tool may destroy or change things.
    pub destructive: bool,
    /// Calling it twice has the effect of calling it once.
    pub idempotent: bool,
}

/// One tool as data a host can register anywhere.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// `bash`, `bash_output` or `bash_kill`.
    pub name: &'static str,
    /// The byte-stable description.
    pub description: String,
    /// The JSON Schema of the parameters.
    pub parameters: Value,
    /// The JSON Schema (draft 2020-12) of the structured result: an object
    /// with the rendered `text` and every fact behind it.
    pub output_schema: Value,
    /// Hints for the host.
    pub annotations: ToolAnnotations,
}

/// What a call knows about its caller.
#[derive(Clone, Debug, Default)]
pub struct CallContext {
    /// The calling session, if the host has one.
    pub session: Option<Arc<Session>>,
    /// The tool call id.
    pub call_id: String,
    /// Cancelled when the call is cancelled: kills a foreground command, and
    /// a background task started by this call.
    pub cancel: CancellationToken,
    /// Who to ask about sandbox escalation.
    pub approvals: Option<Arc<dyn ApprovalService>>,
}

impl std::fmt::Debug for dyn ApprovalService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalService")
    }
}

/// A successful tool result: the text a model reads and the same facts as
/// fields for hosts that want them.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    /// The rendered text.
    pub text: String,
    /// Structured facts (exit code, signal, spill paths, task id, status…).
    pub structured: Value,
}

/// What the rules said of a call before it ran.
#[derive(Debug, Default)]
struct Judged {
    /// None: the host has no rules.
    judgement: Option<Judgement>,
    /// The standing approval the call proposes, checked.
    proposal: Option<dsh_rules::Rule>,
}

impl Judged {
    fn verdict(&self) -> Verdict {
        self.judgement
            .as_ref()
            .map_or(Verdict::Default, |j| j.decision)
    }
}

/// What the user allowed one call.
#[derive(Clone, Debug, Default)]
struct Grant {
    mode: Option<SandboxMode>,
    network: Option<NetworkPolicy>,
    hosts: Vec<dsh_bash::HostPattern>,
    /// A line for the result: a standing approval used or kept.
    note: Option<String>,
}

impl Grant {
    /// Everything `asked` asks for (none: the command as it stands).
    fn of(asked: Option<&Escalate>) -> Grant {
        asked.map_or_else(Grant::default, |asked| Grant {
            mode: asked.mode,
            network: asked.network,
            hosts: asked.hosts.clone(),
            note: None,
        })
    }
}

/// What a person's answer grants (`words`: [`asking_words`]), or why
/// the command does not run.
fn granted(
    outcome: ApprovalOutcome,
    asked: Option<&Escalate>,
    words: &[String; 4],
) -> Result<Grant, ToolError> {
    let [_, rejected, cancelled, unavailable] = words;
    let refused = match outcome {
        ApprovalOutcome::AllowedOnce | ApprovalOutcome::AllowedAlways => {
            return Ok(Grant::of(asked))
        }
        ApprovalOutcome::Rejected => format!("the user rejected {rejected}"),
        ApprovalOutcome::Cancelled => format!("approval for {cancelled} was cancelled"),
        ApprovalOutcome::Unavailable => {
            format!("{unavailable} requires approval, but no approval channel is available")
        }
        ApprovalOutcome::Stale => format!(
            "the answer about {unavailable} was to a question that now reads differently (the working directory leads elsewhere since); the command did not run: call again without the answer to be asked"
        ),
        ApprovalOutcome::Deferred => {
            format!("{unavailable} awaits the user's answer; the command did not run")
        }
    };
    Err(ToolError::Escalation(refused))
}

/// True if every allowed part's rule grants what `asked` asks (running
/// under `mode`): a rule with no grants written grants whatever is asked.
fn covers(judgement: &Judgement, asked: &Escalate, mode: Option<SandboxMode>) -> bool {
    judgement.parts.iter().all(|part| {
        let Some(grants) = &part.grants else {
            return true;
        };
        let granted_mode = grants
            .sandbox
            .as_deref()
            .and_then(|m| m.parse::<SandboxMode>().ok());
        let mode_ok = match (asked.mode, mode, granted_mode) {
            (None, _, _) => true,
            (Some(_), Some(wanted), Some(granted)) => !wanted.is_wider_than(granted),
            (Some(_), _, _) => false,
        };
        let network_ok = asked.network.is_none() || grants.network.as_deref() == Some("on");
        let hosts_ok = asked
            .hosts
            .iter()
            .all(|host| grants.hosts.contains(&host.to_string()));
        mode_ok && network_ok && hosts_ok
    })
}

/// What a call a rule asks about asks for, in the words of each outcome
/// (see [`asking_words`]).
fn rule_words() -> [String; 4] {
    [
        "a command rule asks before it runs".to_owned(),
        "running this command".to_owned(),
        "running this command".to_owned(),
        "running this command".to_owned(),
    ]
}

/// What an escalation asks for, in the words of each outcome: the reason's
/// lead, what was rejected, cancelled, and what is unavailable.
fn asking_words(asked: &Escalate) -> [String; 4] {
    let hosts: Vec<String> = asked.hosts.iter().map(ToString::to_string).collect();
    let hosts = hosts.join(", ");
    let mut words = match (asked.mode, asked.network) {
        (Some(wanted), None) => [
            format!("escalate sandbox to {wanted}"),
            format!("escalating this command to \"{wanted}\""),
            format!("escalating to \"{wanted}\""),
            format!("sandbox escalation to \"{wanted}\""),
        ],
        (Some(wanted), Some(_)) => [
            format!("escalate sandbox to {wanted} with the network on"),
            format!("escalating this command to \"{wanted}\" with the network on"),
            format!("escalating to \"{wanted}\" with the network on"),
            format!("sandbox escalation to \"{wanted}\" with the network on"),
        ],
        (None, Some(_)) => [
            "turn the network on".to_owned(),
            "turning the network on for this command".to_owned(),
            "turning the network on".to_owned(),
            "network access".to_owned(),
        ],
        (None, None) => {
            return [
                format!("let it reach {hosts}"),
                format!("letting this command reach {hosts}"),
                format!("letting it reach {hosts}"),
                format!("access to {hosts}"),
            ]
        }
    };
    if !hosts.is_empty() {
        for phrase in &mut words {
            phrase.push_str(&format!(" and access to {hosts}"));
        }
    }
    words
}

/// Why a tool call has no result; shown to the model as its `Display`,
/// `Error: <what happened>`. Nothing ran, but with `Aborted` (the call was
/// cancelled and its command stopped).
#[derive(Debug)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments do not fit the tool; the text says what was wrong and
    /// what is allowed.
    Invalid(String),
    /// A sandbox escalation was refused, cancelled, deferred or cannot be
    /// asked; the text says which.
    Escalation(String),
    /// The policy's command rules deny the command; the text names the
    /// rule and its reason.
    Denied(String),
    /// The task belongs to another session.
    NotOwner(BashTaskId),
    /// The call was cancelled before the command produced a result.
    Aborted,
    /// The executor could not run the command (or knows no such task).
    Exec(BashError),
}

impl ToolError {
    /// What happened, without the `Error: ` the model is shown.
    pub fn text(&self) -> String {
        match self {
            ToolError::Invalid(text) | ToolError::Escalation(text) | ToolError::Denied(text) => {
                text.clone()
            }
            ToolError::NotOwner(id) => format!("task {id} belongs to another session"),
            ToolError::Aborted | ToolError::Exec(BashError::AbortedBeforeSpawn) => {
                "command aborted".into()
            }
            ToolError::Exec(err) => err.to_string(),
        }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Error: {}", self.text())
    }
}

impl std::error::Error for ToolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ToolError::Exec(err) => Some(err),
            _ => None,
        }
    }
}

impl From<String> for ToolError {
    fn from(text: String) -> Self {
        ToolError::Invalid(text)
    }
}

impl From<BashError> for ToolError {
    fn from(err: BashError) -> Self {
        ToolError::Exec(err)
    }
}

/// Live sessions by id, for completion notices.
type Sessions = Mutex<HashMap<String, Weak<Session>>>;

/// The `bash`, `bash_output`, `bash_write` and `bash_kill` tools over any executor.
pub struct BashTools {
    executor: Arc<dyn BashExecutor>,
    sessions: Arc<Sessions>,
    listener: Option<ListenerHandle>,
    /// Every foreground call's yield when it names none.
    yield_after: Option<std::time::Duration>,
    /// Each session's next call starts where its last one ended.
    persist_cwd: bool,
    /// What the descriptions say beyond what the tools know themselves.
    told: Told,
    /// The command rules calls are judged by, if the host has any.
    rules: Option<Arc<dyn RuleBook>>,
}

/// What the server tells the model about itself beyond what the tools
/// know: each said in the descriptions only when true.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Told {
    /// The user's shell snapshot (PATH, functions, aliases) is loaded into
    /// every command.
    pub snapshot: bool,
    /// A person can be asked to widen one call (the escalation fields).
    pub escalation: bool,
    /// Results list the files a command changed in the workspace.
    pub changes: bool,
}

impl Default for Told {
    fn default() -> Self {
        Told {
            snapshot: false,
            escalation: true,
            changes: false,
        }
    }
}

impl std::fmt::Debug for BashTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BashTools")
            .field("sandbox_mode", &self.executor.sandbox_mode())
            .finish_non_exhaustive()
    }
}

impl Drop for BashTools {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.take() {
            listener.unregister();
        }
    }
}

fn owner_notice(sessions: &Sessions, executor: &dyn BashExecutor, task: &dsh_bash::BashTask) {
    let Some(owner) = executor.owner_of(&task.id) else {
        return;
    };
    let session = sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(owner.as_str())
        .and_then(Weak::upgrade);
    if let Some(session) = session {
        session.notify(&completion_notice(task));
    }
}

/// The notice of a background task's completion, as its owner receives it.
pub fn completion_notice(task: &dsh_bash::BashTask) -> String {
    format!(
        "background bash task {} finished {}. Read its output with bash_output.",
        task.id,
        status_line(task)
    )
}

/// True if and only if `notice` is the completion notice of task `id`.
pub fn notice_is_about(notice: &str, id: &str) -> bool {
    notice
        .strip_prefix("background bash task ")
        .and_then(|rest| rest.strip_prefix(id))
        .is_some_and(|rest| rest.starts_with(" finished "))
}

impl BashTools {
    /// The tools over `executor`; completion notices go to the owning
    /// session's notice sink while it is live.
    pub fn new(executor: Arc<dyn BashExecutor>) -> Self {
        let sessions: Arc<Sessions> = Arc::default();
        let weak_executor = Arc::downgrade(&executor);
        let notices = Arc::downgrade(&sessions);
        let listener = executor.on_task_done(Arc::new(move |task| {
            if let (Some(executor), Some(sessions)) = (weak_executor.upgrade(), notices.upgrade()) {
                owner_notice(&sessions, executor.as_ref(), task);
            }
        }));
        BashTools {
            executor,
            sessions,
            listener: Some(listener),
            yield_after: None,
            persist_cwd: false,
            told: Told::default(),
            rules: None,
        }
    }

    /// The same tools, judging every `bash` call by `rules` before
    /// anything runs: deny refuses it, ask puts it to a person, allow
    /// lets an escalation of it run without a question; a person's
    /// "always" for a proposed prefix is kept there.
    pub fn with_rules(mut self, rules: Option<Arc<dyn RuleBook>>) -> Self {
        self.rules = rules;
        self
    }

    /// The same tools, handing every foreground command still running
    /// after `after` over as a background task (a call's `yieldMs` wins).
    pub fn with_yield(mut self, after: Option<std::time::Duration>) -> Self {
        self.yield_after = after;
        self
    }

    /// The same tools, with each session's working directory following
    /// `cd`: after a foreground command that started in the session's
    /// directory (no `workdir` argument), the session's next call starts
    /// where it ended, if that is still inside the allowed tree (the
    /// workspace under a sandbox; any directory unconfined), else back in
    /// the configured directory; the result says so in one line when it
    /// changed. Learned from the shell ([`dsh_bash::ShellFacts::final_cwd`]),
    /// never from the output.
    pub fn with_persist_cwd(mut self, persist: bool) -> Self {
        self.persist_cwd = persist;
        self
    }

    /// The same tools, telling the model `told`.
    pub fn with_told(mut self, told: Told) -> Self {
        self.told = told;
        self
    }

    /// What the descriptions tell beyond the tools' own settings.
    pub fn told(&self) -> Told {
        self.told
    }

    /// Whether each session's directory follows `cd`.
    pub fn persist_cwd(&self) -> bool {
        self.persist_cwd
    }

    /// Every foreground call's yield when it names none.
    pub fn yield_after(&self) -> Option<std::time::Duration> {
        self.yield_after
    }

    /// The executor underneath.
    pub fn executor(&self) -> &Arc<dyn BashExecutor> {
        &self.executor
    }

    /// True if and only if the executor confines in a mode something is
    /// wider than and a person can be asked (escalation is offered).
    fn confining(&self) -> bool {
        self.told.escalation
            && self
                .executor
                .sandbox_mode()
                .is_some_and(|mode| mode != SandboxMode::DangerFullAccess)
    }

    /// What `bash`'s description says, from this server's settings.
    fn described(&self) -> crate::describe::Described {
        let mode = self.executor.sandbox_mode();
        crate::describe::Described {
            persist_cwd: self.persist_cwd,
            snapshot: self.told.snapshot,
            changes: self.told.changes,
            sandbox: mode.filter(|mode| mode.confines()).map(|mode| {
                let network = self.executor.network_policy(mode);
                (
                    mode,
                    network.unwrap_or_else(|| NetworkPolicy::default_for(mode)),
                )
            }),
            escalation: self.confining(),
            yields: self.yield_after.is_some(),
        }
    }

    /// The four tools, as data.
    pub fn tools(&self) -> Vec<Tool> {
        let escalation = self.confining();
        vec![
            Tool {
                name: "bash",
                description: crate::describe::bash(&self.described()),
                parameters: args::bash_schema(self.executor.sandbox_mode().filter(|_| escalation)),
                output_schema: structured::schema::<structured::BashContent>(),
                annotations: ToolAnnotations {
                    read_only: false,
                    destructive: true,
                    idempotent: false,
                },
            },
            Tool {
                name: "bash_output",
                description: OUTPUT_DESCRIPTION.into(),
                parameters: args::output_schema(),
                output_schema: structured::schema::<structured::OutputContent>(),
                annotations: ToolAnnotations {
                    read_only: true,
                    destructive: false,
                    idempotent: false,
                },
            },
            Tool {
                name: "bash_write",
                description: WRITE_DESCRIPTION.into(),
                parameters: args::write_schema(),
                output_schema: structured::schema::<structured::OutputContent>(),
                annotations: ToolAnnotations {
                    read_only: false,
                    destructive: true,
                    idempotent: false,
                },
            },
            Tool {
                name: "bash_kill",
                description: KILL_DESCRIPTION.into(),
                parameters: args::task_schema(),
                output_schema: structured::schema::<structured::KillContent>(),
                annotations: ToolAnnotations {
                    read_only: false,
                    destructive: true,
                    idempotent: true,
                },
            },
        ]
    }

    /// Calls the tool `name` with the model's `args`.
    pub async fn call(
        &self,
        name: &str,
        args: Value,
        ctx: &CallContext,
    ) -> Result<ToolOutput, ToolError> {
        if let Some(session) = &ctx.session {
            self.remember(session);
        }
        match name {
            "bash" => self.bash(&args, ctx).await,
            "bash_output" => self.output(&args, ctx).await,
            "bash_write" => self.write(&args, ctx).await,
            "bash_kill" => self.kill(&args, ctx).await,
            other => Err(format!(
                "unknown tool \"{other}\": expected bash, bash_output, bash_write or bash_kill"
            )
            .into()),
        }
    }

    /// Records `session` for its completion notices; a session not seen
    /// before first prunes the ones that ended (a server that opens a
    /// session per connection must not keep one entry per connection ever
    /// made).
    fn remember(&self, session: &Arc<Session>) {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let known = sessions
            .get(session.id())
            .is_some_and(|weak| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(session)));
        if known {
            return;
        }
        sessions.retain(|_, weak| weak.strong_count() > 0);
        sessions.insert(session.id().to_owned(), Arc::downgrade(session));
    }

    /// How many sessions are remembered for notices (live ones, and ended
    /// ones not yet pruned).
    pub fn remembered_sessions(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The session's standing override; only meaningful (and only ever
    /// stamped) under a confining executor.
    fn standing_mode(&self, ctx: &CallContext) -> Option<SandboxMode> {
        self.executor.sandbox_mode()?;
        ctx.session
            .as_ref()
            .and_then(|session| effective_sandbox_mode(&session.events()))
    }

    /// The mode this call runs under before any escalation.
    fn current_mode(&self, ctx: &CallContext) -> Option<SandboxMode> {
        self.standing_mode(ctx).or(self.executor.sandbox_mode())
    }

    /// What the rules say of the call, before anything runs: a denied
    /// command is refused here, naming the rule and its reason; a proposed
    /// prefix broader than the call is refused as a proposal.
    async fn judged(&self, call: &BashCall) -> Result<Judged, ToolError> {
        let prefix = call
            .escalation
            .as_ref()
            .and_then(|asked| asked.prefix_rule.clone());
        let book = self.rules.clone().filter(|book| !book.is_empty());
        if prefix.is_none() && book.is_none() {
            return Ok(Judged::default());
        }
        // Parsing is work (a deep command is parsed on a thread of its
        // own): off the runtime's threads.
        let command = call.command.clone();
        let judging = tokio::task::spawn_blocking(move || {
            let proposal = prefix.map(|prefix| dsh_rules::proposal(&prefix, &command));
            (proposal, book.map(|book| book.judge(&command)))
        });
        let Ok((proposal, judgement)) = judging.await else {
            return Err(ToolError::Invalid(
                "the command could not be judged by the policy's rules; it did not run".into(),
            ));
        };
        let proposal = proposal
            .transpose()
            .map_err(|err| ToolError::Invalid(err.to_string()))?;
        if let Some(judgement) = judgement.as_ref().filter(|j| j.decision == Verdict::Deny) {
            let why = judgement.explained().unwrap_or_default();
            return Err(ToolError::Denied(format!(
                "the policy denies this command: {why}; it did not run"
            )));
        }
        Ok(Judged {
            judgement,
            proposal,
        })
    }

    /// Checks an escalation and asks a person for it, or for a command a
    /// rule asks about; what was granted, or the error. A call every part
    /// of which a rule allows gets its escalation without a question.
    async fn authorize(
        &self,
        call: &BashCall,
        spec: Option<&dsh_bash::BashExecSpec>,
        judged: Judged,
        ctx: &CallContext,
    ) -> Result<Grant, ToolError> {
        let verdict = judged.verdict();
        let asked = call.escalation.as_ref();
        if asked.is_none() && verdict != Verdict::Ask {
            return Ok(Grant::default());
        }
        let mode = asked.map(|asked| self.widening(asked, ctx)).transpose()?;
        let covered = match (asked, &judged.judgement) {
            (Some(asked), Some(judgement)) => covers(judgement, asked, mode),
            _ => false,
        };
        if let (Some(_), Verdict::Allow, true) = (asked, verdict, covered) {
            let mut grant = Grant::of(asked);
            grant.note = Some("[allowed without a question: every part of it matches an allow rule of the policy]".into());
            return Ok(grant);
        }
        let words = asked.map_or_else(rule_words, asking_words);
        let [asking, _, _, unavailable] = &words;
        let Some(approvals) = &ctx.approvals else {
            return Err(ToolError::Escalation(format!(
                "{unavailable} requires approval, but no approval service is composed"
            )));
        };
        let Some(session) = &ctx.session else {
            return Err(ToolError::Escalation(format!(
                "{unavailable} requires approval, but the call has no agent to route it through"
            )));
        };
        let rule = (verdict == Verdict::Ask)
            .then(|| judged.judgement.as_ref().and_then(Judgement::explained))
            .flatten();
        let reason = match (asked, &rule) {
            (Some(asked), _) => format!("{asking}: {}", asked.justification),
            (None, Some(rule)) => format!("{asking}: {rule}"),
            (None, None) => asking.clone(),
        };
        let offered = judged.proposal.as_ref().filter(|_| self.rules.is_some());
        let outcome = approvals
            .request(ApprovalRequest {
                session_id: session.id().to_owned(),
                call_id: ctx.call_id.clone(),
                command: call.command.clone(),
                mode: mode
                    .or_else(|| self.current_mode(ctx))
                    .unwrap_or(SandboxMode::DangerFullAccess),
                network: asked.and_then(|a| a.network),
                hosts: asked.map(|a| a.hosts.clone()).unwrap_or_default(),
                workdir: spec.map(|spec| spec.workdir.clone()),
                background: call.background,
                timeout_ms: spec
                    .filter(|_| !call.background)
                    .map(|spec| u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX)),
                reason,
                escalates: asked.is_some(),
                rule,
                prefix_rule: offered.and(asked.and_then(|a| a.prefix_rule.clone())),
                cancel: ctx.cancel.clone(),
            })
            .await;
        let mut grant = granted(outcome, asked, &words)?;
        if let (ApprovalOutcome::AllowedAlways, Some(rule), Some(asked)) = (outcome, offered, asked)
        {
            // The rule grants what the person approved, no more.
            let mut rule = rule.clone();
            rule.grants = Some(dsh_rules::Grants {
                sandbox: asked.mode.map(|m| m.to_string()),
                network: asked.network.map(|n| n.to_string()),
                hosts: asked.hosts.iter().map(ToString::to_string).collect(),
            });
            grant.note = Some(self.keep(rule, spec).await);
        }
        Ok(grant)
    }

    /// Keeps a person's "always" for `rule`: the line that says where, or
    /// that it applied to this call only.
    async fn keep(&self, rule: dsh_rules::Rule, spec: Option<&dsh_bash::BashExecSpec>) -> String {
        let Some(book) = self.rules.clone() else {
            return "[approved for this call only: this server keeps no rules]".into();
        };
        let shown = rule.shown();
        let workspace = spec.map(|spec| spec.workdir.clone());
        let kept = tokio::task::spawn_blocking(move || book.keep(rule, workspace.as_deref())).await;
        match kept {
            Ok(Ok(place)) => format!("[standing approval kept: `{shown}` runs without a question from now on ({place})]"),
            Ok(Err(why)) => format!("[approved for this call only: the standing approval for `{shown}` could not be kept: {why}]"),
            Err(_) => format!("[approved for this call only: the standing approval for `{shown}` could not be kept]"),
        }
    }

    /// The mode an escalation would run under, if everything it asks is
    /// wider than what this call has (see [`crate::escalation`]); else why
    /// the ask is refused without a question.
    fn widening(&self, asked: &Escalate, ctx: &CallContext) -> Result<SandboxMode, ToolError> {
        let Some(current) = self.current_mode(ctx) else {
            let what = if asked.mode.is_some() {
                "sandbox_permissions"
            } else if asked.network.is_some() {
                "network"
            } else {
                "allow_hosts"
            };
            return Err(ToolError::Escalation(format!(
                "{what} is not available in this composition (no sandboxing executor to escalate)"
            )));
        };
        let ask = crate::escalation::Asked {
            mode: asked.mode,
            network: asked.network,
            hosts: &asked.hosts,
        };
        let compared =
            crate::escalation::compare(current, &|mode| self.executor.network_policy(mode), &ask);
        let mode = compared.mode;
        if let Some(wanted) = asked.mode.filter(|_| !compared.wider_mode) {
            return Err(ToolError::Escalation(format!(
                "sandbox escalation to \"{wanted}\" is not strictly wider than this call's current \"{current}\" mode"
            )));
        }
        if let Some(wanted) = asked.network.filter(|_| !compared.wider_network) {
            let standing = compared.standing_network;
            return Err(ToolError::Escalation(format!(
                "network \"{wanted}\" is not wider than this call's network policy \"{standing}\" under \"{mode}\" mode"
            )));
        }
        if !asked.hosts.is_empty() && !compared.hosts_widen {
            return Err(ToolError::Escalation(format!(
                "allow_hosts asks for nothing here: this call's network is \"on\" under \"{mode}\" mode"
            )));
        }
        Ok(mode)
    }

    async fn bash(&self, args: &Value, ctx: &CallContext) -> Result<ToolOutput, ToolError> {
        let confining = self.confining();
        let call = args::bash_call(args, args::Caller::Model { confining })?;
        let judged = self.judged(&call).await?;
        let mut request = BashExecRequest::new(call.command.clone());
        let gone = self.followed_dir_checked(ctx).await;
        request.workdir = session_workdir(ctx.session.as_deref(), call.workdir.as_deref());
        // Only a call that starts in the session's own directory moves it.
        let follows = self.persist_cwd && ctx.session.is_some() && call.workdir.is_none();
        request.timeout = call.timeout;
        request.cancel = Some(ctx.cancel.clone());
        request.sandbox_mode = self.standing_mode(ctx);
        if call.tty {
            request.terminal = Some(dsh_bash::TerminalSize::default());
        }
        let yield_after = call
            .yield_after
            .or(self.yield_after)
            .filter(|_| !call.background);
        if call.background || yield_after.is_some() {
            request.owner = ctx.session.as_ref().map(|s| s.owner());
        }
        // A call the executor would refuse (too long, a missing workdir, a
        // bad timeout) is refused before anyone is asked about it; what the
        // person is asked shows the call as it would run.
        let asked = if call.escalation.is_some() || judged.verdict() == Verdict::Ask {
            Some(self.pin_workdir(&mut request).await?)
        } else {
            None
        };
        let granted = self.authorize(&call, asked.as_ref(), judged, ctx).await?;
        // Stamp a grant or a standing override; the executor applies its default.
        let mode = granted.mode.or_else(|| self.standing_mode(ctx));
        request.sandbox_mode = mode;
        request.network = granted.network;
        request.allow_hosts = granted.hosts;
        let note = granted.note;
        // Only a foreground run reports where it ended (a yielded or
        // background one is a task).
        request.report_cwd = follows && !call.background && yield_after.is_none();
        let spec = self.executor.resolve(request)?;
        if let Some(after) = yield_after {
            return self.yielded(spec, after).await;
        }
        if call.background {
            let task = self.executor.start(spec).await?;
            let text = format!("started background task {}", task.id);
            return Ok(ToolOutput {
                structured: structured::started(text.clone(), &task),
                text,
            });
        }
        let started = spec.workdir.clone();
        let result = self.executor.run(spec).await?;
        if result.aborted {
            return Err(ToolError::Aborted);
        }
        let moved = match ctx.session.as_deref().filter(|_| follows) {
            Some(session) => crate::cwd::settle(session, &started, &result).await,
            None => None,
        };
        let heads = Heads::read(&result).await;
        let mut text = render_run_result_with(&result, &heads);
        let line = moved.as_ref().map(crate::cwd::Moved::line).or(gone);
        for line in [&note, &line].into_iter().flatten() {
            crate::render::push_line(&mut text, line);
        }
        let mut structured = structured::run(text.clone(), &result);
        if let (Some(moved), Some(object)) = (&moved, structured.as_object_mut()) {
            object.insert(
                "cwd".into(),
                Value::String(moved.now().display().to_string()),
            );
        }
        Ok(ToolOutput { structured, text })
    }

    /// Pins `request`'s working directory for a question to a person: its
    /// canonical path now (what the question shows, where a symlink on the
    /// way leads), which the executor then refuses to start in if a link
    /// is put on its path before the command starts. The spec as asked.
    async fn pin_workdir(
        &self,
        request: &mut BashExecRequest,
    ) -> Result<dsh_bash::BashExecSpec, ToolError> {
        let spec = self.executor.resolve(request.clone())?;
        let real = tokio::fs::canonicalize(&spec.workdir)
            .await
            .map_err(|cause| BashError::WorkdirInaccessible {
                path: spec.workdir.clone(),
                cause,
            })?;
        request.workdir = Some(real);
        request.workdir_pinned = true;
        Ok(self.executor.resolve(request.clone())?)
    }

    /// The directory a session followed, re-checked now: when it is gone,
    /// or a symlink was put on its path since (it was followed as a
    /// canonical path, so its canonical path changed), the session starts
    /// over in its configured one: the line that says so.
    async fn followed_dir_checked(&self, ctx: &CallContext) -> Option<String> {
        let session = ctx.session.as_deref().filter(|_| self.persist_cwd)?;
        let current = session.current_dir()?;
        if Some(current.as_path()) == session.cwd() {
            return None;
        }
        let real = tokio::fs::canonicalize(&current).await.ok();
        let is_dir = match &real {
            Some(real) => tokio::fs::metadata(real).await.is_ok_and(|m| m.is_dir()),
            None => false,
        };
        let what = match real {
            Some(real) if is_dir && real == current => return None,
            Some(real) if is_dir => format!(
                "now leads to {} (a symbolic link was put on its path)",
                real.display()
            ),
            _ => "is gone".to_owned(),
        };
        session.follow(None);
        let back = session.cwd().map_or_else(
            || "the default directory".to_owned(),
            |d| d.display().to_string(),
        );
        Some(format!(
            "[cwd: {} {what}; this call ran in {back}]",
            current.display()
        ))
    }

    /// The task, if this caller may touch it.
    fn owned_task(&self, args: &Value, ctx: &CallContext) -> Result<BashTaskId, ToolError> {
        let id = BashTaskId::new(args::task_id(args)?);
        owned_task(&*self.executor, ctx.session.as_deref(), id)
    }

    async fn output(&self, args: &Value, ctx: &CallContext) -> Result<ToolOutput, ToolError> {
        let call = args::output_call(args)?;
        let id = owned_task(
            &*self.executor,
            ctx.session.as_deref(),
            BashTaskId::new(call.task_id),
        )?;
        let read = self.executor.read_output(&id, call.since)?;
        let mut text = render_task_read(&read);
        if call.screen {
            text.push_str(&screen_section(&self.executor.screen(&id).await?));
        }
        Ok(ToolOutput {
            structured: structured::read(text.clone(), &read),
            text,
        })
    }

    /// `bash_write`: types the input and keys, waits for the output to go
    /// quiet, reads what came.
    async fn write(&self, args: &Value, ctx: &CallContext) -> Result<ToolOutput, ToolError> {
        let call = args::write_call(args)?;
        let id = owned_task(
            &*self.executor,
            ctx.session.as_deref(),
            BashTaskId::new(call.task_id),
        )?;
        let terminal = self.executor.screen(&id).await.is_ok();
        let mut bytes = if terminal {
            // Enter in a terminal is a carriage return.
            call.input.replace('\n', "\r").into_bytes()
        } else {
            call.input.into_bytes()
        };
        for key in &call.keys {
            bytes.extend_from_slice(key.bytes());
        }
        if !bytes.is_empty() {
            // A command that does not read cannot hold the call: the input
            // gets the same wait as the output.
            let writing = tokio::time::timeout(call.wait, self.executor.write_input(&id, &bytes));
            tokio::select! {
                written = writing => match written {
                    Ok(written) => written?,
                    Err(_) => {
                        return Err(ToolError::Invalid(format!(
                            "task {id} did not take all the input within {} ms: it is not reading it; read its output with bash_output, or stop it with bash_kill",
                            call.wait.as_millis()
                        )))
                    }
                },
                () = ctx.cancel.cancelled() => return Err(ToolError::Aborted),
            }
        }
        let read = quiet_read(&*self.executor, &id, call.wait, &ctx.cancel).await?;
        let text = render_task_read(&read);
        Ok(ToolOutput {
            structured: structured::read(text.clone(), &read),
            text,
        })
    }

    /// A `bash` call with a yield: started as a task of the caller's, waited
    /// for up to `after`; settled by then, it reads as a foreground run,
    /// else it is handed over.
    async fn yielded(
        &self,
        spec: dsh_bash::BashExecSpec,
        after: std::time::Duration,
    ) -> Result<ToolOutput, ToolError> {
        let task = self.executor.start(spec).await?;
        let settled = tokio::time::timeout(after, task.settled()).await.is_ok();
        let read = self.executor.read_output(&task.id, None)?;
        let result = run_of(&read, after);
        let id = task.id.as_str();
        let text = if settled {
            render_run_result(&result)
        } else {
            // A terminal's stream is drawing: its screen reads better.
            let shown = match self.executor.screen(&task.id).await {
                Ok(screen) => screen_section(&screen).trim_start().to_owned(),
                Err(_) => render_run_result(&result),
            };
            let seconds = after.as_secs_f64();
            format!("{shown}\n[still running as {id} after {seconds} s: the output so far is above; read more with bash_output, type into it with bash_write (if it runs in a tty), stop it with bash_kill]")
        };
        Ok(ToolOutput {
            structured: structured::yielded(text.clone(), &result, id, settled),
            text,
        })
    }

    async fn kill(&self, args: &Value, ctx: &CallContext) -> Result<ToolOutput, ToolError> {
        let id = self.owned_task(args, ctx)?;
        let killed = self.executor.kill(&id).await?;
        let text = if killed {
            format!("killed background task {id}")
        } else {
            format!("task {id} had already finished")
        };
        Ok(ToolOutput {
            structured: structured::kill(text.clone(), id.as_str(), killed),
            text,
        })
    }
}

/// A call's working directory: `workdir` (relative to the session's
/// working directory), else the session's; `None` leaves it to the
/// executor's default. The one rule for the model's calls and executor
/// calls.
pub fn session_workdir(session: Option<&Session>, workdir: Option<&str>) -> Option<PathBuf> {
    let cwd = session.and_then(Session::current_dir);
    match (workdir.map(PathBuf::from), cwd) {
        (Some(dir), Some(cwd)) if dir.is_relative() => Some(cwd.join(dir)),
        (Some(dir), _) => Some(dir),
        (None, cwd) => cwd,
    }
}

/// `id` if `session` may read or kill it: the task exists, and it has no
/// owner or `session` owns it. The one ownership rule for `bash_output`,
/// `bash_kill` and their executor calls.
pub fn owned_task(
    executor: &dyn BashExecutor,
    session: Option<&Session>,
    id: BashTaskId,
) -> Result<BashTaskId, ToolError> {
    if executor.get(&id).is_none() {
        return Err(BashError::UnknownTask { id }.into());
    }
    if let Some(owner) = executor.owner_of(&id) {
        if session.map(Session::owner).as_ref() != Some(&owner) {
            return Err(ToolError::NotOwner(id));
        }
    }
    Ok(id)
}

/// The screen of a terminal task, after its read, cleaned by the same
/// function as the output (a program can put bidi overrides, zero-width
/// and tag characters on its screen as easily as in its output).
fn screen_section(screen: &str) -> String {
    let cleaned = crate::clean::clean(screen);
    let trimmed = cleaned.text.trim_end_matches('\n');
    let mut section = format!("\n[screen]\n{trimmed}\n[end of screen]");
    if let Some(note) = cleaned.note() {
        section.push_str(&format!("\n[screen cleaned for reading: {note}]"));
    }
    section
}

/// How long the output must stay quiet for `bash_write` to return.
const QUIET: std::time::Duration = std::time::Duration::from_millis(150);

/// Reads a task's new output until it has gone quiet for [`QUIET`] after
/// printing something (or has settled), at most `wait`: every read in
/// one.
async fn quiet_read(
    executor: &dyn BashExecutor,
    id: &BashTaskId,
    wait: std::time::Duration,
    cancel: &CancellationToken,
) -> Result<dsh_bash::BashTaskRead, ToolError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut read = executor.read_output(id, None)?;
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        let settled = read.task.status != dsh_bash::TaskStatus::Running;
        let quiet = !read.delta.is_empty() && now - quiet_since >= QUIET;
        if settled || quiet || now >= deadline {
            return Ok(read);
        }
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
            () = cancel.cancelled() => return Ok(read),
        }
        let more = executor.read_output(id, None)?;
        if !more.delta.is_empty() {
            quiet_since = tokio::time::Instant::now();
        }
        read = joined(read, more);
    }
}

/// Two successive reads of one task as one.
fn joined(first: dsh_bash::BashTaskRead, then: dsh_bash::BashTaskRead) -> dsh_bash::BashTaskRead {
    let (stdout, stderr) = (first.stdout + &then.stdout, first.stderr + &then.stderr);
    dsh_bash::BashTaskRead {
        task: then.task,
        delta: dsh_bash::join_streams(&stdout, &stderr),
        stdout,
        stderr,
        lossy: first.lossy || then.lossy,
        asked: first.asked,
        from: first.from,
        to: then.to,
        stdout_spill_path: then.stdout_spill_path.or(first.stdout_spill_path),
        stderr_spill_path: then.stderr_spill_path.or(first.stderr_spill_path),
    }
}

/// A yielded task's read as a foreground run's result.
fn run_of(read: &dsh_bash::BashTaskRead, after: std::time::Duration) -> dsh_bash::BashRunResult {
    let collected = |text: &str, spill: &Option<PathBuf>| dsh_bash::CollectedOutput {
        text: text.to_owned(),
        truncated: read.lossy && spill.is_some(),
        spill_path: spill.clone(),
        total_bytes: text.len() as u64,
        spill_note: None,
    };
    let task = &read.task;
    dsh_bash::BashRunResult {
        exit_code: task.exit_code,
        signal: task.signal.clone(),
        timed_out: false,
        aborted: false,
        timeout_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        stdout: collected(&read.stdout, &read.stdout_spill_path),
        stderr: collected(&read.stderr, &read.stderr_spill_path),
        leftovers_stopped: 0,
        sandbox: task.sandbox.clone(),
        containment: None,
        limits: task.limits.clone(),
        shell: None,
        changed: task.changed.clone(),
        claim: None,
    }
}

#[cfg(test)]
mod screen_tests {
    /// Invisible and bidi characters never reach the model from a screen
    /// either, and it says what was taken out.
    #[test]
    fn the_screen_is_cleaned_like_the_text() {
        let screen = "pay \u{202e}evil\u{202c} to\u{200b} x\u{e0041}\u{e0042}\n$ \n";
        let section = super::screen_section(screen);
        assert!(
            !section.contains(['\u{202e}', '\u{200b}', '\u{e0041}', '\u{202c}']),
            "{section:?}"
        );
        assert!(
            section.starts_with("\n[screen]\npay evil to x\n$ \n[end of screen]"),
            "{section:?}"
        );
        assert!(
            section.contains("[screen cleaned for reading: "),
            "{section:?}"
        );
    }
}
