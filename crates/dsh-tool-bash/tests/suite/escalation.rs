//! ESC-01..15 and MODE-01..06: escalation and the effective mode.

use std::sync::Arc;

use serde_json::json;

use dsh_bash::SandboxMode;
use dsh_tool_bash::{set_sandbox_mode, ApprovalOutcome, ApprovalService, BashTools, CallContext};

use super::fixture::{bash, call, ctx, session, Approver, Recording};

fn escalate(mode: &str) -> serde_json::Value {
    let mut args = bash("echo ran");
    args["sandbox_permissions"] = json!(mode);
    args["justification"] = json!("the build writes its cache");
    args
}

fn with_approver(session_id: Option<&str>, approver: &Arc<Approver>) -> CallContext {
    CallContext {
        approvals: Some(Arc::clone(approver) as Arc<dyn ApprovalService>),
        ..ctx(session_id.map(session))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_offered_without_a_confining_executor() {
    let recording = Recording::new(None);
    let tools = BashTools::new(recording.clone());
    let approver = Approver::new(ApprovalOutcome::AllowedOnce);
    let err = call(
        &tools,
        "bash",
        escalate("workspace-write"),
        &with_approver(Some("s"), &approver),
    )
    .await
    .unwrap_err();
    assert_eq!(err.text(), "sandbox_permissions is not available in this composition (no sandboxing executor to escalate)");
    assert!(approver.asked.lock().unwrap().is_empty());
    assert_eq!(recording.ran.load(std::sync::atomic::Ordering::SeqCst), 0);
    // MODE: no stamping under a non-confining executor, even with a standing override.
    let s = session("s");
    set_sandbox_mode(&s, SandboxMode::WorkspaceWrite);
    call(&tools, "bash", bash("true"), &ctx(Some(s)))
        .await
        .unwrap();
    assert_eq!(recording.last().sandbox_mode, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_in_order_each_failing_closed() {
    let recording = Recording::new(Some(SandboxMode::ReadOnly));
    let tools = BashTools::new(recording.clone());
    let approver = Approver::new(ApprovalOutcome::AllowedOnce);

    // Not wider than the session's standing workspace-write.
    let standing = session("s");
    set_sandbox_mode(&standing, SandboxMode::WorkspaceWrite);
    let ctx_standing = CallContext {
        approvals: Some(approver.clone() as Arc<dyn ApprovalService>),
        ..ctx(Some(standing))
    };
    let err = call(&tools, "bash", escalate("workspace-write"), &ctx_standing)
        .await
        .unwrap_err();
    assert_eq!(err.text(), "sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"workspace-write\" mode");
    assert!(
        approver.asked.lock().unwrap().is_empty(),
        "nobody is asked for a non-widening"
    );

    let no_service = ctx(Some(session("s")));
    let err = call(&tools, "bash", escalate("danger-full-access"), &no_service)
        .await
        .unwrap_err();
    assert_eq!(err.text(), "sandbox escalation to \"danger-full-access\" requires approval, but no approval service is composed");

    let no_session = with_approver(None, &approver);
    let err = call(&tools, "bash", escalate("workspace-write"), &no_session)
        .await
        .unwrap_err();
    assert_eq!(err.text(), "sandbox escalation to \"workspace-write\" requires approval, but the call has no agent to route it through");

    for (outcome, message) in [
        (ApprovalOutcome::Unavailable, "sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available"),
        (ApprovalOutcome::Rejected, "the user rejected escalating this command to \"workspace-write\""),
        (ApprovalOutcome::Cancelled, "approval for escalating to \"workspace-write\" was cancelled"),
    ] {
        let answer = Approver::new(outcome);
        let err = call(&tools, "bash", escalate("workspace-write"), &with_approver(Some("s"), &answer)).await.unwrap_err();
        assert_eq!(err.text(), message);
    }
    assert_eq!(
        recording.ran.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a refused escalation ran something"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_applies_to_that_one_call_only() {
    let recording = Recording::new(Some(SandboxMode::ReadOnly));
    let tools = BashTools::new(recording.clone());
    let approver = Approver::new(ApprovalOutcome::AllowedOnce);
    let ctx = with_approver(Some("s"), &approver);
    let out = call(&tools, "bash", escalate("workspace-write"), &ctx)
        .await
        .unwrap();
    assert_eq!(out.text, "ran\n");
    assert_eq!(
        recording.last().sandbox_mode,
        Some(SandboxMode::WorkspaceWrite)
    );
    let asked = approver.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0].reason,
        "escalate sandbox to workspace-write: the build writes its cache"
    );
    assert_eq!(asked[0].session_id, "s");
    assert_eq!(asked[0].command, "echo ran");
    // Not stored: the next call runs under the default again (unstamped).
    call(&tools, "bash", bash("true"), &ctx).await.unwrap();
    assert_eq!(recording.last().sandbox_mode, None);
    // A background grant works the same way.
    let mut background = escalate("danger-full-access");
    background["run_in_background"] = json!(true);
    call(&tools, "bash", background, &ctx).await.unwrap();
    assert_eq!(
        recording.last().sandbox_mode,
        Some(SandboxMode::DangerFullAccess)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standing_override_is_stamped_and_judged_against() {
    let recording = Recording::new(Some(SandboxMode::ReadOnly));
    let tools = BashTools::new(recording.clone());
    let s = session("s");
    set_sandbox_mode(&s, SandboxMode::WorkspaceWrite);
    call(&tools, "bash", bash("true"), &ctx(Some(s.clone())))
        .await
        .unwrap();
    assert_eq!(
        recording.last().sandbox_mode,
        Some(SandboxMode::WorkspaceWrite)
    );
    set_sandbox_mode(&s, SandboxMode::ReadOnly);
    call(&tools, "bash", bash("true"), &ctx(Some(s)))
        .await
        .unwrap();
    assert_eq!(recording.last().sandbox_mode, Some(SandboxMode::ReadOnly));
}

fn ask_hosts(hosts: serde_json::Value) -> serde_json::Value {
    let mut args = bash("echo ran");
    args["allow_hosts"] = hosts;
    args["justification"] = json!("pip fetches the wheel from there");
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_hosts_is_asked_for_and_granted_for_one_call() {
    let recording = Recording::new(Some(SandboxMode::ReadOnly));
    let tools = BashTools::new(recording.clone());
    let approver = Approver::new(ApprovalOutcome::AllowedOnce);
    let ctx = with_approver(Some("s"), &approver);
    let out = call(
        &tools,
        "bash",
        ask_hosts(json!(["files.example.org", "127.0.0.1:8080"])),
        &ctx,
    )
    .await
    .unwrap();
    assert_eq!(out.text, "ran\n");
    let granted: Vec<String> = recording
        .last()
        .allow_hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(granted, ["files.example.org", "127.0.0.1:8080"]);
    let asked = approver.asked.lock().unwrap().clone();
    assert_eq!(
        asked[0].reason,
        "let it reach files.example.org, 127.0.0.1:8080: pip fetches the wheel from there"
    );
    assert_eq!(asked[0].hosts.len(), 2);
    // Not stored.
    call(&tools, "bash", bash("true"), &ctx).await.unwrap();
    assert!(recording.last().allow_hosts.is_empty());

    let rejecting = Approver::new(ApprovalOutcome::Rejected);
    let runs = recording.ran.load(std::sync::atomic::Ordering::SeqCst);
    let err = call(
        &tools,
        "bash",
        ask_hosts(json!(["files.example.org"])),
        &with_approver(Some("s"), &rejecting),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.text(),
        "the user rejected letting this command reach files.example.org"
    );
    assert_eq!(
        recording.ran.load(std::sync::atomic::Ordering::SeqCst),
        runs,
        "a rejected call ran"
    );

    // With the network on too, the hosts ride along in the same question.
    let mut both = ask_hosts(json!(["files.example.org"]));
    both["sandbox_permissions"] = json!("workspace-write");
    call(&tools, "bash", both, &ctx).await.unwrap();
    let asked = approver.asked.lock().unwrap().clone();
    assert_eq!(
        asked.last().unwrap().reason,
        "escalate sandbox to workspace-write and access to files.example.org: pip fetches the wheel from there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_hosts_where_the_network_is_on_asks_for_nothing() {
    let recording = Recording::new(Some(SandboxMode::ReadOnly));
    let tools = BashTools::new(recording.clone());
    let approver = Approver::new(ApprovalOutcome::AllowedOnce);
    let mut asked = ask_hosts(json!(["files.example.org"]));
    asked["sandbox_permissions"] = json!("danger-full-access");
    let err = call(&tools, "bash", asked, &with_approver(Some("s"), &approver))
        .await
        .unwrap_err();
    assert_eq!(
        err.text(),
        "allow_hosts asks for nothing here: this call's network is \"on\" under \"danger-full-access\" mode"
    );
    assert!(approver.asked.lock().unwrap().is_empty());
}
