//! Command rules in the call pipeline: deny refuses before anything runs
//! and names the rule; ask puts the exact command to a person; allow lets
//! an escalation run without a question; a proposed prefix is checked and
//! an "always" answer kept. (The executor is the recording double over a
//! real local executor: what is under test is the tool's authorize step,
//! so the rules name `echo`, whose runs harm nothing.)

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use dsh_bash::SandboxMode;
use dsh_rules::{Decision, Judgement, Rule, RuleWord, Rules};
use dsh_tool_bash::{ApprovalOutcome, ApprovalService, BashTools, CallContext, RuleBook};

use super::fixture::{bash, call, ctx, session, Approver, Recording};

struct Book {
    rules: Mutex<Rules>,
    kept: Mutex<Vec<(Rule, Option<std::path::PathBuf>)>>,
}

impl Book {
    fn new(rules: &[(&[&str], Decision)]) -> Arc<Self> {
        let rules = rules
            .iter()
            .map(|(words, decision)| Rule {
                command: words.iter().map(|w| RuleWord::One((*w).into())).collect(),
                decision: *decision,
                reason: Some(format!("the reason for {}", words.join(" "))),
                origin: Some("policy.toml:1".into()),
                grants: None,
            })
            .collect();
        Arc::new(Book {
            rules: Mutex::new(Rules::new(rules).unwrap()),
            kept: Mutex::new(Vec::new()),
        })
    }
}

impl RuleBook for Book {
    fn judge(&self, command: &str) -> Judgement {
        self.rules.lock().unwrap().judge(command)
    }

    fn is_empty(&self) -> bool {
        self.rules.lock().unwrap().is_empty()
    }

    fn keep(&self, rule: Rule, workspace: Option<&Path>) -> Result<String, String> {
        let mut rules = self.rules.lock().unwrap();
        let mut list = rules.list().to_vec();
        list.push(rule.clone());
        *rules = Rules::new(list).unwrap();
        self.kept
            .lock()
            .unwrap()
            .push((rule, workspace.map(Path::to_owned)));
        Ok("kept in the test's book".into())
    }
}

fn tools(mode: Option<SandboxMode>, book: &Arc<Book>) -> (Arc<Recording>, BashTools) {
    let recording = Recording::new(mode);
    let tools =
        BashTools::new(recording.clone()).with_rules(Some(Arc::clone(book) as Arc<dyn RuleBook>));
    (recording, tools)
}

fn asking(approver: &Arc<Approver>) -> CallContext {
    CallContext {
        approvals: Some(Arc::clone(approver) as Arc<dyn ApprovalService>),
        ..ctx(Some(session("s")))
    }
}

/// Calls `bash` with `args` where `approver` says no: the call is refused
/// as the person's answer, and the person was asked (once so far).
async fn rejected(tools: &BashTools, args: Value, approver: &Arc<Approver>) {
    let err = call(tools, "bash", args, &asking(approver))
        .await
        .unwrap_err();
    assert!(
        err.text().starts_with("the user rejected"),
        "{}",
        err.text()
    );
    assert_eq!(approver.asked.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_command_never_runs_and_the_model_reads_why() {
    let book = Book::new(&[(&["git", "push"], Decision::Deny)]);
    let (recording, tools) = tools(None, &book);
    let approver = Approver::new(ApprovalOutcome::AllowedOnce);
    for command in [
        "git push",
        "ls && bash -c 'git -C . push origin'",
        "FOO=1 nohup git push &",
    ] {
        let err = call(&tools, "bash", bash(command), &asking(&approver))
            .await
            .unwrap_err();
        assert_eq!(
            err.text(),
            format!(
                "the policy denies this command: `{}` matches the rule `git push` (policy.toml:1): the reason for git push; it did not run",
                if command == "git push" || command.starts_with("FOO") { "git push" } else { "git -C . push origin" }
            ),
            "{command}"
        );
    }
    assert_eq!(recording.ran.load(Ordering::SeqCst), 0);
    assert!(
        approver.asked.lock().unwrap().is_empty(),
        "a denial asks nobody"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asked_command_runs_only_after_a_person_says_yes() {
    let book = Book::new(&[(&["echo", "publish"], Decision::Ask)]);
    let (recording, tools) = tools(None, &book);
    let declined = Approver::new(ApprovalOutcome::Rejected);
    let err = call(
        &tools,
        "bash",
        bash("echo publish --tag next"),
        &asking(&declined),
    )
    .await
    .unwrap_err();
    assert_eq!(err.text(), "the user rejected running this command");
    assert_eq!(recording.ran.load(Ordering::SeqCst), 0);
    let asked = declined.asked.lock().unwrap()[0].clone();
    assert_eq!(asked.command, "echo publish --tag next");
    assert!(!asked.escalates);
    assert!(
        asked
            .rule
            .as_deref()
            .unwrap()
            .contains("matches the rule `echo publish`"),
        "{asked:?}"
    );
    // Nobody to ask: refused, saying so.
    let err = call(
        &tools,
        "bash",
        bash("echo publish"),
        &ctx(Some(session("s"))),
    )
    .await
    .unwrap_err();
    assert!(
        err.text()
            .contains("requires approval, but no approval service"),
        "{}",
        err.text()
    );
    let accepted = Approver::new(ApprovalOutcome::AllowedOnce);
    call(&tools, "bash", bash("echo publish"), &asking(&accepted))
        .await
        .unwrap();
    assert_eq!(recording.ran.load(Ordering::SeqCst), 1);
    // A command no rule names runs as before, unasked.
    call(&tools, "bash", bash("echo test"), &asking(&accepted))
        .await
        .unwrap();
    assert_eq!(accepted.asked.lock().unwrap().len(), 1);
}

fn escalating(command: &str, prefix: Option<&[&str]>) -> serde_json::Value {
    escalating_to("danger-full-access", command, prefix)
}

fn escalating_to(mode: &str, command: &str, prefix: Option<&[&str]>) -> serde_json::Value {
    let mut args = bash(command);
    args["sandbox_permissions"] = json!(mode);
    args["justification"] = json!("the install writes outside the workspace");
    if let Some(prefix) = prefix {
        args["prefix_rule"] = json!(prefix);
    }
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_rule_is_a_standing_approval_for_every_part_only() {
    let book = Book::new(&[(&["echo", "install"], Decision::Allow)]);
    let (recording, tools) = tools(Some(SandboxMode::WorkspaceWrite), &book);
    let approver = Approver::new(ApprovalOutcome::Rejected);
    let out = call(
        &tools,
        "bash",
        escalating("echo install left-pad", None),
        &asking(&approver),
    )
    .await
    .unwrap();
    assert!(out.text.contains("matches an allow rule"), "{}", out.text);
    assert_eq!(
        recording.last().sandbox_mode,
        Some(SandboxMode::DangerFullAccess)
    );
    assert!(approver.asked.lock().unwrap().is_empty());
    // A part no rule allows rides on nothing: the person is asked.
    rejected(
        &tools,
        escalating("echo install; echo other", None),
        &approver,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposed_prefix_is_checked_and_always_is_kept() {
    let book = Book::new(&[]);
    let (recording, tools) = tools(Some(SandboxMode::ReadOnly), &book);
    let approver = Approver::new(ApprovalOutcome::AllowedAlways);
    for (command, prefix, says) in [
        (
            "python3 -c 1",
            &["python3"][..],
            "would allow `python3` to run anything",
        ),
        (
            "echo run test",
            &["echo", "publish"][..],
            "is not how this command starts",
        ),
        (
            "ls; echo run test",
            &["echo", "run", "test"][..],
            "it runs `ls` first",
        ),
    ] {
        let err = call(
            &tools,
            "bash",
            escalating(command, Some(prefix)),
            &asking(&approver),
        )
        .await
        .unwrap_err();
        assert!(err.text().contains(says), "{command}: {}", err.text());
    }
    assert!(approver.asked.lock().unwrap().is_empty());
    assert_eq!(recording.ran.load(Ordering::SeqCst), 0);

    let out = call(
        &tools,
        "bash",
        escalating_to(
            "workspace-write",
            "echo run test -x",
            Some(&["echo", "run", "test"]),
        ),
        &asking(&approver),
    )
    .await
    .unwrap();
    assert!(
        out.text.contains("standing approval kept: `echo run test`"),
        "{}",
        out.text
    );
    let asked = approver.asked.lock().unwrap()[0].clone();
    assert_eq!(
        asked.prefix_rule,
        Some(vec!["echo".into(), "run".into(), "test".into()])
    );
    assert_eq!(book.kept.lock().unwrap().len(), 1);
    // The next such call asks nothing.
    let never = Approver::new(ApprovalOutcome::Rejected);
    call(
        &tools,
        "bash",
        escalating_to("workspace-write", "echo run test", None),
        &asking(&never),
    )
    .await
    .unwrap();
    assert!(never.asked.lock().unwrap().is_empty());
    assert_eq!(recording.ran.load(Ordering::SeqCst), 2);
    let kept = book.kept.lock().unwrap()[0].0.grants.clone().unwrap();
    assert_eq!(kept.sandbox.as_deref(), Some("workspace-write"));
    // It grants what the person approved, no more: a wider mode asks.
    rejected(
        &tools,
        escalating_to("danger-full-access", "echo run test", None),
        &never,
    )
    .await;
}
