use dsh_bash::{BoxFuture, NetworkPolicy, SandboxMode};
use tokio_util::sync::CancellationToken;

/// What the person decided about an escalation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// Run this one call under the wider mode. Never stored.
    AllowedOnce,
    /// Run this call, and keep the proposed prefix as a standing approval
    /// (only an answer to a question that offered it).
    AllowedAlways,
    /// The person said no; final for this command.
    Rejected,
    /// The question was dismissed or the call was cancelled.
    Cancelled,
    /// Nobody can be asked right now (no channel to the person).
    Unavailable,
    /// The question went back to the client with the call's answer, to be
    /// asked there; the client retries the same call with the person's
    /// answer (MCP 2026-07-28's input-required results). The command does
    /// not run on this call.
    Deferred,
    /// The answer was to a question that would now read differently (the
    /// working directory now leads elsewhere): not a yes for this call.
    Stale,
}

/// One escalation question.
#[derive(Clone, Debug)]
pub struct ApprovalRequest {
    /// The session asking.
    pub session_id: String,
    /// The tool call asking.
    pub call_id: String,
    /// The command that would run.
    pub command: String,
    /// The mode the command would run under (the one asked for, or the
    /// current one when only the network is asked for).
    pub mode: SandboxMode,
    /// `Some(on)` when the call asks for the network.
    pub network: Option<NetworkPolicy>,
    /// The hosts the call asks to reach beside the allow-list (empty when
    /// it asks for none).
    pub hosts: Vec<dsh_bash::HostPattern>,
    /// Where it would run.
    pub workdir: Option<std::path::PathBuf>,
    /// It would run as a background task (no timeout).
    pub background: bool,
    /// Its timeout in milliseconds, in the foreground.
    pub timeout_ms: Option<u64>,
    /// `escalate sandbox to <mode>: <justification>` (or `turn the network
    /// on`, or both), or why a rule asks.
    pub reason: String,
    /// The call asks for a wider sandbox, the network or hosts (else only
    /// a rule asks, and the command would run as it stands).
    pub escalates: bool,
    /// Why a command rule asks before this command runs, if one does.
    pub rule: Option<String>,
    /// A prefix proposed as a standing approval: the person may answer
    /// "always" for it.
    pub prefix_rule: Option<Vec<String>>,
    /// The call's cancellation: a cancelled call withdraws the question.
    pub cancel: CancellationToken,
}

/// Asks a person whether a command may run under a wider sandbox mode.
pub trait ApprovalService: Send + Sync {
    /// Asks; never fails (a broken channel is `Unavailable`).
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalOutcome>;
}
