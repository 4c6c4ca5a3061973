//! Approval questions over MCP, per protocol version.
//!
//! - Up to 2025-11-25 the server asks mid-call: an `elicitation/create`
//!   request to the client ([`Elicitation`]), withdrawn with
//!   `notifications/cancelled` when the call is cancelled.
//! - From 2026-07-28 on a server may not send requests of its own; the call
//!   is answered with an input-required result carrying the question
//!   ([`Deferral`]), and the client retries the same call with the person's
//!   answer and the `requestState` it was given ([`Questions::answer`]).
//!   The state is an unguessable handle to a question kept here, bound to
//!   the tool and its exact arguments and good for one answer: an answer
//!   cannot approve a command it was not asked about.
//!
//! Either way Accept means yes, Decline or Cancel means no, and the message
//! shows the command, the mode and the justification with nothing to fill
//! in.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use dsh_bash::BoxFuture;
use dsh_tool_bash::{ApprovalOutcome, ApprovalRequest, ApprovalService};
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientResult, ElicitRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
    InputRequiredResult, InputResponses, ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleServer};
use serde_json::Value;

/// Lines of the command the question shows before it says how many more
/// there are.
const SHOWN_LINES: usize = 40;

/// Characters of the command the question shows at most.
const SHOWN_CHARS: usize = 4000;

/// Characters of a one-line field (the reason, the workdir) shown at most.
const SHOWN_FIELD_CHARS: usize = 300;

/// True for a character that can change how the text around it reads:
/// controls, line and paragraph separators, bidirectional overrides and
/// isolates, zero-width and invisible format characters.
fn deceptive(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{2028}' | '\u{2029}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}' | '\u{feff}' | '\u{061c}')
}

/// `text` with every deceptive character made visible (`\u{1b}`), but
/// newlines and tabs when `lines` allows them.
fn visible(text: &str, lines: bool) -> String {
    let mut shown = String::new();
    for c in text.chars() {
        if deceptive(c) && !(lines && (c == '\n' || c == '\t')) {
            shown.push_str(&c.escape_unicode().to_string());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// A field the question shows on one line: made visible, cut.
fn one_line(text: &str) -> String {
    let shown = visible(text, false);
    let count = shown.chars().count();
    if count <= SHOWN_FIELD_CHARS {
        return shown;
    }
    let kept: String = shown.chars().take(SHOWN_FIELD_CHARS).collect();
    format!("{kept}… ({} more characters)", count - SHOWN_FIELD_CHARS)
}

/// The command as the question shows it: deceptive characters but
/// newlines and tabs made visible (`\u{1b}`), cut after [`SHOWN_LINES`]
/// lines or [`SHOWN_CHARS`] characters with what was left out said, inside
/// a fence longer than any backtick run in it, so its text cannot pass for
/// the question's own lines.
fn shown(command: &str) -> String {
    let visible = visible(command.trim_end_matches('\n'), true);
    let lines = visible.lines().count().max(1);
    let mut kept: String = visible
        .lines()
        .take(SHOWN_LINES)
        .collect::<Vec<_>>()
        .join("\n");
    if kept.chars().count() > SHOWN_CHARS {
        kept = kept.chars().take(SHOWN_CHARS).collect();
    }
    let longest_run = kept.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run.max(2) + 1);
    let mut text = format!("{fence}\n{kept}\n{fence}");
    let left_out = visible.chars().count() - kept.chars().count();
    if left_out > 0 {
        text.push_str(&format!(
            "\n(not shown: {left_out} more characters; {lines} lines in all)"
        ));
    }
    text
}

/// The answer "always" of a question that offers a standing approval.
const ALWAYS: &str = "always";

/// The form: empty (Accept is the yes), or, when a prefix is proposed, one
/// choice between this call and always.
fn form(request: &ApprovalRequest) -> Option<ElicitationSchema> {
    if request.prefix_rule.is_none() {
        return ElicitationSchema::builder().build().ok();
    }
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "remember": {
                "type": "string",
                "title": "Allow",
                "enum": ["this call", ALWAYS],
                "default": "this call"
            }
        }
    });
    match schema {
        Value::Object(object) => ElicitationSchema::from_json_schema(object).ok(),
        _ => None,
    }
}

/// The question's first line: what is asked.
fn headline(request: &ApprovalRequest) -> String {
    if !request.escalates {
        return "A command rule asks before this command runs. Allow it to run?".to_owned();
    }
    let network = if request.network.is_some() {
        " and network access".to_owned()
    } else if !request.hosts.is_empty() {
        let hosts: Vec<String> = request.hosts.iter().map(ToString::to_string).collect();
        format!(" and network access to {}", one_line(&hosts.join(", ")))
    } else {
        String::new()
    };
    format!(
        "Allow one command to run with {} file access{network}?",
        request.mode
    )
}

/// How to answer, with the standing approval offered if one is.
fn answering(request: &ApprovalRequest) -> String {
    match &request.prefix_rule {
        Some(prefix) => format!(
            "Accept to allow it; choose \"{ALWAYS}\" to also let every command starting with `{}` run so without asking from now on (kept in your policy file). Decline to refuse.",
            one_line(&prefix.join(" "))
        ),
        None => "Accept to allow it once; decline to refuse.".to_owned(),
    }
}

/// The question put to the person (Accept is the yes): what is asked and
/// why first, then where and how the command would run, then the command
/// itself, fenced.
fn question(request: &ApprovalRequest) -> Option<ElicitRequestParams> {
    let schema = form(request)?;
    let workdir = request.workdir.as_ref().map_or_else(
        || "(the session's)".to_owned(),
        |dir| one_line(&dir.display().to_string()),
    );
    let how = match (request.background, request.timeout_ms) {
        (true, _) => "as a background task (no timeout)".to_owned(),
        (false, Some(ms)) => format!("in the foreground, timeout {ms} ms"),
        (false, None) => "in the foreground".to_owned(),
    };
    let rule = match (&request.rule, request.escalates) {
        (Some(rule), true) => format!("\nRule: {}", one_line(rule)),
        _ => String::new(),
    };
    Some(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!(
            "{}\n\nReason: {}{rule}\nWorking directory: {workdir}\nRuns: {how}\n\nCommand:\n{}\n\n{}",
            headline(request),
            one_line(&request.reason),
            shown(&request.command),
            answering(request),
        ),
        requested_schema: schema,
    })
}

/// What an answer means: only Accept is a yes; "always" chosen in the
/// form keeps the proposed prefix.
fn outcome(answer: &ElicitResult) -> ApprovalOutcome {
    let always = answer
        .content
        .as_ref()
        .and_then(|content| content.get("remember"))
        .is_some_and(|chosen| chosen == ALWAYS);
    match answer.action {
        ElicitationAction::Accept if always => ApprovalOutcome::AllowedAlways,
        ElicitationAction::Accept => ApprovalOutcome::AllowedOnce,
        ElicitationAction::Decline => ApprovalOutcome::Rejected,
        // Cancel, and any action a newer protocol adds: not a yes.
        _ => ApprovalOutcome::Cancelled,
    }
}

/// No way to ask: the client did not declare elicitation.
pub(super) struct NoChannel;

impl ApprovalService for NoChannel {
    fn request(&self, _request: ApprovalRequest) -> BoxFuture<'_, ApprovalOutcome> {
        Box::pin(async { ApprovalOutcome::Unavailable })
    }
}

/// Asks mid-call through `elicitation/create` (protocols up to 2025-11-25).
pub(super) struct Elicitation {
    pub(super) peer: Peer<RoleServer>,
}

impl ApprovalService for Elicitation {
    /// A question whose call is cancelled is withdrawn
    /// (`notifications/cancelled` for the elicitation request).
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalOutcome> {
        Box::pin(async move {
            let Some(params) = question(&request) else {
                return ApprovalOutcome::Unavailable;
            };
            let asked = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            let handle = match self
                .peer
                .send_request_with_option(asked, PeerRequestOptions::no_options())
                .await
            {
                Ok(handle) => handle,
                Err(err) => {
                    tracing::warn!(%err, "elicitation failed");
                    return ApprovalOutcome::Unavailable;
                }
            };
            let id = handle.id.clone();
            let answer = tokio::select! {
                answer = handle.await_response() => answer,
                () = request.cancel.cancelled() => {
                    let withdrawn = CancelledNotification::new(CancelledNotificationParam::new(
                        Some(id),
                        Some("the tool call that asked was cancelled".into()),
                    ));
                    if let Err(err) = self.peer.send_notification(withdrawn.into()).await {
                        tracing::debug!(%err, "cannot withdraw an approval question");
                    }
                    return ApprovalOutcome::Cancelled;
                }
            };
            match answer {
                Ok(ClientResult::ElicitResult(answer)) => outcome(&answer),
                Ok(other) => {
                    tracing::warn!(?other, "unexpected answer to an elicitation");
                    ApprovalOutcome::Unavailable
                }
                Err(err) => {
                    tracing::warn!(%err, "elicitation failed");
                    ApprovalOutcome::Unavailable
                }
            }
        })
    }
}

/// Keeps the question of a 2026-07-28 call, to go back with its answer.
#[derive(Default)]
pub(super) struct Deferral {
    asked: Mutex<Option<ElicitRequestParams>>,
}

impl Deferral {
    /// The question the call put, if it put one.
    pub(super) fn take(&self) -> Option<ElicitRequestParams> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl ApprovalService for Deferral {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalOutcome> {
        Box::pin(async move {
            let Some(params) = question(&request) else {
                return ApprovalOutcome::Unavailable;
            };
            *self.asked.lock().unwrap_or_else(PoisonError::into_inner) = Some(params);
            ApprovalOutcome::Deferred
        })
    }
}

/// The answer a retried call brought back, and the question it answered
/// as the person read it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Answered {
    pub(super) outcome: ApprovalOutcome,
    pub(super) shown: String,
}

impl ApprovalService for Answered {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalOutcome> {
        // The retry's question, worked out again now (its working
        // directory canonical now): an answer counts only for the very
        // question the person read.
        let now = question(&request).map(|params| message_of(&params).to_owned());
        let outcome = if now.as_deref() == Some(self.shown.as_str()) {
            self.outcome
        } else {
            ApprovalOutcome::Stale
        };
        Box::pin(async move { outcome })
    }
}

/// The text of a question.
fn message_of(params: &ElicitRequestParams) -> &str {
    match params {
        ElicitRequestParams::FormElicitationParams { message, .. } => message,
        _ => "",
    }
}

/// The key of the one input request an approval carries.
const KEY: &str = "approval";

/// How long a question waits for its answer.
const QUESTION_TTL: Duration = Duration::from_secs(30 * 60);

/// Questions kept at once; the oldest goes first past this.
const MAX_QUESTIONS: usize = 64;

struct Pending {
    /// What the call was (see [`Questions::fingerprint`]): the arguments
    /// themselves, up to megabytes of command, are not kept.
    call: u128,
    /// The question as the person reads it (its command shortened).
    shown: String,
    asked: Instant,
}

/// The questions handed out with input-required results and not answered
/// yet, by their `requestState`.
#[derive(Default)]
pub(super) struct Questions {
    pending: Mutex<HashMap<String, Pending>>,
    /// Two independently keyed hashers (random keys of this process): a
    /// 128-bit fingerprint nobody outside can aim a collision at.
    keys: (RandomState, RandomState),
}

impl Questions {
    /// The fingerprint of one call: its tool and its exact arguments.
    fn fingerprint(&self, tool: &str, arguments: &Value) -> u128 {
        let text = serde_json::to_string(&(tool, arguments)).unwrap_or_default();
        let high = u128::from(self.keys.0.hash_one(&text));
        let low = u128::from(self.keys.1.hash_one(&text));
        (high << 64) | low
    }

    /// The input-required result that asks `params` about this call.
    pub(super) fn ask(
        &self,
        tool: &str,
        arguments: Value,
        params: ElicitRequestParams,
    ) -> InputRequiredResult {
        let state = uuid::Uuid::new_v4().simple().to_string();
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retain(|_, question| question.asked.elapsed() < QUESTION_TTL);
        while pending.len() >= MAX_QUESTIONS {
            let Some(oldest) = pending
                .iter()
                .min_by_key(|(_, question)| question.asked)
                .map(|(state, _)| state.clone())
            else {
                break;
            };
            pending.remove(&oldest);
        }
        let call = self.fingerprint(tool, &arguments);
        pending.insert(
            state.clone(),
            Pending {
                call,
                shown: message_of(&params).to_owned(),
                asked: Instant::now(),
            },
        );
        let requests = [(
            KEY.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        )]
        .into_iter()
        .collect();
        InputRequiredResult::new(Some(requests), Some(state))
    }

    /// The person's answer to the question `state` names, which must have
    /// been asked about this very call; the question is used up.
    pub(super) fn answer(
        &self,
        state: &str,
        tool: &str,
        arguments: &Value,
        responses: Option<&InputResponses>,
    ) -> Result<Answered, String> {
        let asked = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(state)
            .filter(|q| q.asked.elapsed() < QUESTION_TTL);
        let Some(asked) = asked else {
            return Err("this call's requestState names no open approval question (unknown, expired or already answered); call again without requestState and inputResponses to be asked".into());
        };
        if asked.call != self.fingerprint(tool, arguments) {
            return Err("the approval answer belongs to a different call: retry with exactly the tool and arguments that were asked about".into());
        }
        let Some(answer) = responses.and_then(|r| r.get(KEY)) else {
            return Err(format!(
                "the retry carries no answer to the approval question (inputResponses.{KEY}); call again to be asked"
            ));
        };
        let answer: ElicitResult = serde_json::from_value(answer.clone()).map_err(|err| {
            format!(
                "inputResponses.{KEY} is not an elicitation result ({err}); call again to be asked"
            )
        })?;
        Ok(Answered {
            outcome: outcome(&answer),
            shown: asked.shown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_bash::SandboxMode;
    use tokio_util::sync::CancellationToken;

    fn request() -> ApprovalRequest {
        ApprovalRequest {
            session_id: "s".into(),
            call_id: "1".into(),
            command: "touch /outside".into(),
            mode: SandboxMode::DangerFullAccess,
            network: None,
            hosts: Vec::new(),
            workdir: Some("/srv/project".into()),
            background: false,
            timeout_ms: Some(120_000),
            reason: "escalate sandbox to danger-full-access: needs it".into(),
            escalates: true,
            rule: None,
            prefix_rule: None,
            cancel: CancellationToken::new(),
        }
    }

    fn answered(action: &str) -> InputResponses {
        [(KEY.to_owned(), serde_json::json!({"action": action}))]
            .into_iter()
            .collect()
    }

    #[tokio::test]
    async fn a_question_is_answered_once_and_only_for_its_own_call() {
        let deferral = Deferral::default();
        assert_eq!(deferral.request(request()).await, ApprovalOutcome::Deferred);
        let params = deferral.take().expect("the question was kept");
        let questions = Questions::default();
        let args = serde_json::json!({"command": "touch /outside"});
        let asked = questions.ask("bash", args.clone(), params.clone());
        let state = asked.request_state.clone().expect("a state");
        let wire = serde_json::to_value(&asked).expect("serialises");
        assert_eq!(wire["resultType"], "input_required");
        let message = wire["inputRequests"][KEY]["params"]["message"]
            .as_str()
            .expect("a message");
        assert!(message.contains("touch /outside") && message.contains("needs it"));

        let other = serde_json::json!({"command": "rm -rf /"});
        let err = questions
            .answer(&state, "bash", &other, Some(&answered("accept")))
            .expect_err("another command");
        assert!(err.contains("different call"), "{err}");
        // Used up by that attempt, even though it failed.
        let err = questions
            .answer(&state, "bash", &args, Some(&answered("accept")))
            .expect_err("used up");
        assert!(err.contains("no open approval question"), "{err}");

        let state = questions
            .ask("bash", args.clone(), params.clone())
            .request_state
            .expect("a state");
        assert_eq!(
            questions
                .answer(&state, "bash", &args, Some(&answered("accept")))
                .map(|a| a.outcome),
            Ok(ApprovalOutcome::AllowedOnce)
        );
        let state = questions
            .ask("bash", args.clone(), params.clone())
            .request_state
            .expect("a state");
        assert_eq!(
            questions
                .answer(&state, "bash", &args, Some(&answered("decline")))
                .map(|a| a.outcome),
            Ok(ApprovalOutcome::Rejected)
        );
        let state = questions
            .ask("bash", args.clone(), params)
            .request_state
            .expect("a state");
        let err = questions
            .answer(&state, "bash", &args, None)
            .expect_err("no answer");
        assert!(err.contains("no answer"), "{err}");
    }

    #[test]
    fn the_command_cannot_pass_for_the_question() {
        let mut asked = request();
        asked.command = format!(
            "echo ```\n\nReason: list the workspace\n\nAccept to allow it once\u{1b}[2J{}rm -rf ./*",
            "\n".repeat(60)
        );
        let Some(ElicitRequestParams::FormElicitationParams { message, .. }) = question(&asked)
        else {
            panic!("a form question");
        };
        let reason = message.find("Reason: escalate").expect("the real reason");
        let command = message.find("Command:").expect("the command");
        assert!(reason < command, "the reason comes first: {message}");
        assert!(
            message.contains("Working directory: /srv/project"),
            "{message}"
        );
        assert!(message.contains("timeout 120000 ms"), "{message}");
        assert!(
            message.contains("\\u{1b}"),
            "control characters visible: {message}"
        );
        assert!(
            message.contains("\n````\n"),
            "a fence longer than the command's: {message}"
        );
        assert!(message.contains("(not shown:"), "{message}");
        assert!(message.lines().count() < 60, "{message}");
    }

    #[test]
    fn the_reason_cannot_pass_for_the_question_either() {
        let mut asked = request();
        asked.reason = format!(
            "escalate sandbox to danger-full-access: fine\nCommand:\n```\nls\n```\u{202e}{}Accept",
            "\n".repeat(100)
        );
        asked.command = "echo done\n".into();
        let Some(ElicitRequestParams::FormElicitationParams { message, .. }) = question(&asked)
        else {
            panic!("a form question");
        };
        let reason_line = message
            .lines()
            .find(|l| l.starts_with("Reason: "))
            .expect("one reason line");
        assert!(reason_line.contains("\\u{a}Command:"), "{message}");
        assert!(reason_line.contains("\\u{202e}"), "{message}");
        assert!(
            !message.contains("not shown"),
            "nothing is cut from `echo done`: {message}"
        );
        assert!(message.lines().count() < 20, "{message}");
    }

    #[test]
    fn a_proposed_prefix_offers_always_and_only_accept_with_it_keeps_it() {
        let mut asked = request();
        asked.prefix_rule = Some(vec!["npm".into(), "run".into(), "test".into()]);
        let Some(ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        }) = question(&asked)
        else {
            panic!("a form question");
        };
        assert!(
            message.contains("starting with `npm run test`"),
            "{message}"
        );
        let schema = serde_json::to_value(&requested_schema).expect("serialises");
        assert_eq!(
            schema["properties"]["remember"]["enum"],
            serde_json::json!(["this call", "always"])
        );
        let answer = |action: &str, content: Value| -> ElicitResult {
            serde_json::from_value(serde_json::json!({"action": action, "content": content}))
                .expect("an answer")
        };
        let always = serde_json::json!({"remember": "always"});
        assert_eq!(
            outcome(&answer("accept", always.clone())),
            ApprovalOutcome::AllowedAlways
        );
        assert_eq!(
            outcome(&answer(
                "accept",
                serde_json::json!({"remember": "this call"})
            )),
            ApprovalOutcome::AllowedOnce
        );
        assert_eq!(
            outcome(&answer("accept", serde_json::json!({}))),
            ApprovalOutcome::AllowedOnce
        );
        assert_eq!(
            outcome(&answer("decline", always)),
            ApprovalOutcome::Rejected
        );
        // A rule that asks, without an escalation: said as such.
        let mut ruled = request();
        ruled.escalates = false;
        ruled.rule = Some("`npm publish` matches the rule `npm publish`".into());
        let Some(ElicitRequestParams::FormElicitationParams { message, .. }) = question(&ruled)
        else {
            panic!("a form question");
        };
        assert!(
            message.starts_with("A command rule asks before this command runs"),
            "{message}"
        );
    }

    #[test]
    fn questions_are_bounded() {
        let questions = Questions::default();
        let params = question(&request()).expect("a question");
        let first = questions
            .ask("bash", Value::Null, params.clone())
            .request_state
            .expect("a state");
        for _ in 0..MAX_QUESTIONS {
            questions.ask("bash", Value::Null, params.clone());
        }
        assert_eq!(
            questions
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            MAX_QUESTIONS
        );
        assert!(questions
            .answer(&first, "bash", &Value::Null, Some(&answered("accept")))
            .is_err());
    }
}
