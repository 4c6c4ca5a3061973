//! A recording executor double over the real local executor, an approval
//! double, and sessions.

use std::sync::{Arc, Mutex};

use dsh_bash::{
    BashError, BashExecRequest, BashExecSpec, BashExecutor, BashRunResult, BashTask, BashTaskId,
    BashTaskRead, BoxFuture, ListenerHandle, OwnerToken, SandboxMode, TaskListener,
};
use dsh_bash_local::{LocalBashExecutor, LocalConfig};
use dsh_tool_bash::{
    ApprovalOutcome, ApprovalRequest, ApprovalService, BashTools, CallContext, Session, ToolError,
    ToolOutput,
};
use serde_json::Value;

/// Delegates to a real local executor; records every request it resolves
/// and claims a confining default mode when asked to.
pub struct Recording {
    pub inner: LocalBashExecutor,
    pub mode: Option<SandboxMode>,
    pub requests: Mutex<Vec<BashExecRequest>>,
    /// Commands run or started (resolving alone runs nothing).
    pub ran: std::sync::atomic::AtomicUsize,
}

impl Recording {
    pub fn new(mode: Option<SandboxMode>) -> Arc<Self> {
        Arc::new(Recording {
            inner: LocalBashExecutor::new(LocalConfig {
                grace: std::time::Duration::from_millis(400),
                ..LocalConfig::default()
            })
            .unwrap(),
            mode,
            requests: Mutex::new(Vec::new()),
            ran: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    pub fn last(&self) -> BashExecRequest {
        self.requests
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("no request reached the executor")
    }
}

impl BashExecutor for Recording {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.mode
    }
    fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, BashError> {
        self.requests.lock().unwrap().push(request.clone());
        let mode = request.sandbox_mode;
        let mut spec = self.inner.resolve(request)?;
        spec.sandbox_mode = mode.or(self.mode);
        Ok(spec)
    }
    fn run(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashRunResult, BashError>> {
        self.ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.run(spec)
    }
    fn start(&self, spec: BashExecSpec) -> BoxFuture<'_, Result<BashTask, BashError>> {
        self.ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.start(spec)
    }
    fn get(&self, id: &BashTaskId) -> Option<BashTask> {
        self.inner.get(id)
    }
    fn owner_of(&self, id: &BashTaskId) -> Option<OwnerToken> {
        self.inner.owner_of(id)
    }
    fn list(&self) -> Vec<BashTask> {
        self.inner.list()
    }
    fn read_output(
        &self,
        id: &BashTaskId,
        since: Option<dsh_bash::OutputCursor>,
    ) -> Result<BashTaskRead, BashError> {
        self.inner.read_output(id, since)
    }
    fn kill<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<bool, BashError>> {
        self.inner.kill(id)
    }
    fn write_input<'a>(
        &'a self,
        id: &'a BashTaskId,
        input: &'a [u8],
    ) -> BoxFuture<'a, Result<(), BashError>> {
        self.inner.write_input(id, input)
    }
    fn screen<'a>(&'a self, id: &'a BashTaskId) -> BoxFuture<'a, Result<String, BashError>> {
        self.inner.screen(id)
    }
    fn on_task_done(&self, listener: TaskListener) -> ListenerHandle {
        self.inner.on_task_done(listener)
    }
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        self.inner.shutdown()
    }
}

/// Answers every question with a fixed outcome and records the questions.
pub struct Approver {
    pub outcome: ApprovalOutcome,
    pub asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver {
    pub fn new(outcome: ApprovalOutcome) -> Arc<Self> {
        Arc::new(Approver {
            outcome,
            asked: Mutex::new(Vec::new()),
        })
    }
}

impl ApprovalService for Approver {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalOutcome> {
        self.asked.lock().unwrap().push(request);
        Box::pin(async move { self.outcome })
    }
}

pub fn session(id: &str) -> Arc<Session> {
    Arc::new(Session::new(id, Some(std::env::temp_dir())))
}

pub fn ctx(session: Option<Arc<Session>>) -> CallContext {
    CallContext {
        session,
        call_id: "call-1".into(),
        ..CallContext::default()
    }
}

pub async fn call(
    tools: &BashTools,
    name: &str,
    args: Value,
    ctx: &CallContext,
) -> Result<ToolOutput, ToolError> {
    tools.call(name, args, ctx).await
}

/// `bash_output` of task `id`, which must succeed.
pub async fn output_of(tools: &BashTools, id: &str, ctx: &CallContext) -> ToolOutput {
    call(
        tools,
        "bash_output",
        serde_json::json!({"task_id": id}),
        ctx,
    )
    .await
    .unwrap()
}

pub fn bash(command: &str) -> Value {
    serde_json::json!({"command": command, "description": "run a test command"})
}

/// Waits until background task `id` of the recording executor has settled.
pub async fn settled(recording: &Recording, id: &str) -> dsh_bash::BashTask {
    let task = recording
        .inner
        .get(&BashTaskId::new(id))
        .expect("no such task");
    task.settled().await
}

/// A session whose notices land in the returned list.
pub fn noticed(id: &str) -> (Arc<Session>, Arc<Mutex<Vec<String>>>) {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&notices);
    let session = Session::new(id, None).with_notices(Arc::new(move |text: &str| {
        sink.lock().unwrap().push(text.to_owned());
    }));
    (Arc::new(session), notices)
}
