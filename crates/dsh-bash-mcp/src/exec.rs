//! Executor calls: `bash`, `bash_output`, `bash_write`, `bash_screen` and `bash_kill` from a remote
//! executor (`dsh-bash-remote`), marked with `_meta["io.dsh-bash/executor"]`
//! (see `dsh_bash::wire`). They run in the calling session, under its owner
//! token, and answer with the executor's exact facts instead of rendered
//! text. What they may add to a model's call (stdin, environment, a
//! narrower sandbox) widens nothing: a wider sandbox mode or the network
//! where it is off still needs a person's approval through the
//! model-facing call.

use std::time::Duration;

use dsh_bash::wire::{ErrorFacts, ExecExtras, ReadFacts, Reply, ServerFacts, TaskFacts};
use dsh_bash::{BashExecRequest, BashExecutor, BashTaskId, NetworkPolicy, SandboxMode};
use dsh_tool_bash::{effective_sandbox_mode, ExecutorBashCall, Session, ToolError};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The facts a server announces to remote executors.
pub(super) fn server_facts(
    executor: &dyn BashExecutor,
    default_timeout: Duration,
    max_timeout: Duration,
    cwd: Option<std::path::PathBuf>,
) -> ServerFacts {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let network = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ]
    .into_iter()
    .filter_map(|mode| Some((mode, executor.network_policy(mode)?)))
    .collect();
    ServerFacts {
        sandbox_mode: executor.sandbox_mode(),
        network,
        default_timeout_ms: millis(default_timeout),
        max_timeout_ms: millis(max_timeout),
        cwd,
    }
}

fn refusal(code: &str, message: impl Into<String>) -> ErrorFacts {
    ErrorFacts {
        code: code.to_owned(),
        message: message.into(),
        task: None,
    }
}

fn failed(code: &str, message: impl Into<String>) -> Reply {
    Reply::Failed(refusal(code, message))
}

/// Runs one executor call in `session`; never fails, a failure is a
/// [`Reply::Failed`].
pub(super) async fn call(
    executor: &dyn BashExecutor,
    session: &Session,
    tool: &str,
    args: Value,
    extras: ExecExtras,
    cancel: CancellationToken,
) -> Reply {
    match tool {
        "bash" => match dsh_tool_bash::executor_bash_call(&args) {
            Ok(call) => run(executor, session, call, extras, cancel).await,
            Err(err) => failed("INVALID_ARGUMENTS", format!("bash: {err}")),
        },
        "bash_write" | "bash_screen" => interact(executor, session, tool, &args, extras).await,
        "bash_output" => {
            let (id, since) = match dsh_tool_bash::executor_output_call(&args) {
                Ok((id, since)) => (BashTaskId::new(id), since),
                Err(err) => return failed("INVALID_ARGUMENTS", format!("{tool}: {err}")),
            };
            let id = match dsh_tool_bash::owned_task(executor, Some(session), id) {
                Ok(id) => id,
                Err(refused) => return Reply::Failed(task_refusal(refused)),
            };
            match executor.read_output(&id, since) {
                Ok(read) => Reply::Read(ReadFacts::from(&read)),
                Err(err) => Reply::Failed(ErrorFacts::from(&err)),
            }
        }
        "bash_kill" => {
            let id = match dsh_tool_bash::executor_task_id(&args) {
                Ok(id) => BashTaskId::new(id),
                Err(err) => return failed("INVALID_ARGUMENTS", format!("{tool}: {err}")),
            };
            match dsh_tool_bash::owned_task(executor, Some(session), id) {
                Ok(id) => killed(executor, id).await,
                Err(refused) => Reply::Failed(task_refusal(refused)),
            }
        }
        other => failed(
            "INVALID_ARGUMENTS",
            format!("unknown tool \"{other}\": expected bash, bash_output, bash_write, bash_screen or bash_kill"),
        ),
    }
}

/// `bash_write` (the extras' `stdin` typed into the task) or
/// `bash_screen` of a task this session owns.
async fn interact(
    executor: &dyn BashExecutor,
    session: &Session,
    tool: &str,
    args: &Value,
    extras: ExecExtras,
) -> Reply {
    let id = match dsh_tool_bash::executor_task_id(args) {
        Ok(id) => BashTaskId::new(id),
        Err(err) => return failed("INVALID_ARGUMENTS", format!("{tool}: {err}")),
    };
    let id = match dsh_tool_bash::owned_task(executor, Some(session), id) {
        Ok(id) => id,
        Err(refused) => return Reply::Failed(task_refusal(refused)),
    };
    let done = if tool == "bash_write" {
        let input = extras.stdin.unwrap_or_default();
        executor
            .write_input(&id, &input)
            .await
            .map(|()| Reply::Wrote)
    } else {
        executor.screen(&id).await.map(Reply::Screen)
    };
    done.unwrap_or_else(|err| Reply::Failed(ErrorFacts::from(&err)))
}

/// The facts of a task this session may not touch.
fn task_refusal(refused: ToolError) -> ErrorFacts {
    match refused {
        ToolError::Exec(err) => ErrorFacts::from(&err),
        ToolError::NotOwner(ref id) => ErrorFacts {
            code: "NOT_OWNER".into(),
            message: refused.text(),
            task: Some(id.clone()),
        },
        other => refusal("INVALID_ARGUMENTS", other.text()),
    }
}

async fn killed(executor: &dyn BashExecutor, id: BashTaskId) -> Reply {
    match executor.kill(&id).await {
        Ok(killed) => match executor.get(&id) {
            Some(task) => Reply::Killed {
                killed,
                task: TaskFacts::from(&task),
            },
            None => Reply::Failed(ErrorFacts::from(&dsh_bash::BashError::UnknownTask { id })),
        },
        Err(err) => Reply::Failed(ErrorFacts::from(&err)),
    }
}

/// Checks that `extras` asks for nothing wider than the session has
/// (its `standing` mode, else the executor's).
fn narrowing(
    executor: &dyn BashExecutor,
    standing: Option<SandboxMode>,
    extras: &ExecExtras,
) -> Result<(), ErrorFacts> {
    let current = standing.or(executor.sandbox_mode());
    let Some(current) = current else {
        if extras
            .sandbox_mode
            .is_some_and(|m| m != SandboxMode::DangerFullAccess)
            || extras.network == Some(NetworkPolicy::Off)
        {
            return Err(refusal(
                "SANDBOX_UNAVAILABLE",
                "this server does not confine commands (it runs them with --sandbox off), so it cannot run one sandboxed or with the network off",
            ));
        }
        return Ok(());
    };
    let asked = dsh_tool_bash::escalation::Asked {
        mode: extras.sandbox_mode,
        network: extras.network,
        hosts: &extras.allow_hosts,
    };
    let compared =
        dsh_tool_bash::escalation::compare(current, &|mode| executor.network_policy(mode), &asked);
    let mode = compared.mode;
    if compared.wider_mode {
        return Err(refusal(
            "ESCALATION",
            format!("the server runs this session's commands under \"{current}\"; \"{mode}\" is wider and needs a person's approval (the bash tool's sandbox_permissions)"),
        ));
    }
    // The server's allow-list is a ceiling: any host beside it is refused,
    // whatever the network.
    if let Some(host) = extras.allow_hosts.first() {
        return Err(refusal(
            "ESCALATION",
            format!("this server's network allow-list is a ceiling its operator set; reaching {host} beside it needs a person's approval (the bash tool's allow_hosts)"),
        ));
    }
    if compared.wider_network {
        let standing = compared.standing_network;
        return Err(refusal(
            "ESCALATION",
            format!("the network is \"{standing}\" under \"{mode}\" on this server; turning it on needs a person's approval (the bash tool's network argument)"),
        ));
    }
    Ok(())
}

async fn run(
    executor: &dyn BashExecutor,
    session: &Session,
    call: ExecutorBashCall,
    extras: ExecExtras,
    cancel: CancellationToken,
) -> Reply {
    let standing = effective_sandbox_mode(&session.events());
    if let Err(refused) = narrowing(executor, standing, &extras) {
        return Reply::Failed(refused);
    }
    let mut request = BashExecRequest::new(call.command);
    request.workdir = dsh_tool_bash::session_workdir(Some(session), call.workdir.as_deref());
    request.timeout = call.timeout;
    request.cancel = Some(cancel);
    request.stdin = extras.stdin;
    request.env = extras.env;
    request.sandbox_mode = extras.sandbox_mode.or(standing);
    request.network = extras.network;
    request.terminal = extras.terminal;
    request.interactive = extras.interactive;
    request.report_cwd = extras.report_cwd;
    request.workdir_pinned = extras.workdir_pinned;
    if call.background {
        request.owner = Some(session.owner());
    }
    let spec = match executor.resolve(request) {
        Ok(spec) => spec,
        Err(err) => return Reply::Failed(ErrorFacts::from(&err)),
    };
    if call.background {
        match executor.start(spec).await {
            Ok(task) => Reply::Started(TaskFacts::from(&task)),
            Err(err) => Reply::Failed(ErrorFacts::from(&err)),
        }
    } else {
        match executor.run(spec).await {
            Ok(result) => Reply::Ran(result),
            Err(err) => Reply::Failed(ErrorFacts::from(&err)),
        }
    }
}
