"""Drives `dsh-bash mcp` on MCP 2026-07-28 with the official Python SDK's
`Client` in its default mode (`server/discover`, no `initialize`): the
stateless protocol where the server sends no requests of its own and no
unsolicited notifications. Usage: modern.py <path to dsh-bash> <scratch dir>.

Each scenario prints `ok <name>`; the first failed assertion exits non-zero.
"""

import os
import sys
import time

import anyio
import jsonschema
import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.client import advertise
from support import alive, bash, gone, read_pid, text_of

BINARY = sys.argv[1]
SCRATCH = sys.argv[2]
TASKS = "io.modelcontextprotocol/tasks"

















def server(*extra: str, cwd: str | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=BINARY, args=["mcp", "--shell-snapshot", "off", *extra], cwd=cwd or SCRATCH)


SCHEMAS = {}


def validates(name: str, result) -> dict:
    schema = SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(result.structured_content)
    assert result.structured_content["text"] == text_of(result), (result.structured_content, text_of(result))
    return result.structured_content


async def stamped(client: Client, method: str, params: dict) -> dict:
    """A request the SDK has no typed call for (the tasks extension), sent
    through its own dispatcher with the 2026-07-28 `_meta` it stamps on
    every request."""
    data = {"method": method, "params": params}
    opts = {}
    client.session._stamp(data, opts)
    return await client.session._dispatcher.send_raw_request(method, data["params"], opts)


async def negotiated():
    logs = []

    async def logged(params):
        logs.append(params)

    async with Client(server(), logging_callback=logged) as client:
        assert client.session.protocol_version == "2026-07-28", client.session.protocol_version
        discovered = client.session.discover_result
        assert discovered is not None, "negotiated without server/discover"
        assert "2024-11-05" in discovered.supported_versions, discovered.supported_versions
        assert "2025-11-25" in discovered.supported_versions, discovered.supported_versions
        assert discovered.capabilities.logging is None, "logging advertised on 2026-07-28"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == ["bash", "bash_kill", "bash_output", "bash_write"], sorted(tools)
        for name, tool in tools.items():
            SCHEMAS[name] = tool.output_schema
        print("ok 2026-07-28 negotiated through server/discover, logging not advertised")

        result = await client.call_tool("bash", bash("echo out; exit 2"))
        assert text_of(result) == "out\n[exit code: 2]", text_of(result)
        assert validates("bash", result)["exit_code"] == 2
        print("ok a foreground call on 2026-07-28")

        marker = os.path.join(SCRATCH, "modern-bg.done")
        result = await client.call_tool("bash", bash(f"echo bg; touch {marker}", run_in_background=True))
        task_id = result.structured_content["task_id"]
        deadline = time.monotonic() + 20
        notice = f"background bash task {task_id} finished [status: completed, exit code: 0]"
        while True:
            assert time.monotonic() < deadline, "the completion notice never rode on a result"
            result = await client.call_tool("bash", bash("echo tick"))
            if notice in text_of(result):
                break
            # The task's marker may land while this call runs: the
            # workspace's changes are listed, with the other command named.
            text = text_of(result)
            assert text == "tick\n" or text.startswith("tick\n[changed: created modern-bg.done (with 1 other command"), text
            await anyio.sleep(0.05)
        facts = validates("bash", result)
        assert any(notice in n for n in facts["notices"]), facts
        assert text_of(result).startswith("tick\n"), text_of(result)
        # Carried once.
        result = await client.call_tool("bash", bash("echo again"))
        assert text_of(result) == "again\n", text_of(result)
        assert "notices" not in result.structured_content, result.structured_content
        assert logs == [], f"unsolicited log messages on 2026-07-28: {logs}"
        print("ok a completion notice rides on the next result, once, with no log message")


def answering(action: str, asked: list):
    async def callback(context, params):
        asked.append(params.message)
        assert "workspace-write" in params.message and "The test needs" in params.message, params.message
        assert not params.requested_schema.get("properties"), params.requested_schema
        return types.ElicitResult(action=action, content={} if action == "accept" else None)
    return callback


ESCALATE = {"sandbox_permissions": "workspace-write",
            "justification": "The test needs to create one file in the workspace."}


async def escalations(workspace: str):
    params = server("--sandbox", "read-only", "--workdir", workspace)

    asked = []
    target = os.path.join(workspace, "approved.txt")
    async with Client(params, elicitation_callback=answering("accept", asked)) as client:
        assert client.session.protocol_version == "2026-07-28"
        result = await client.call_tool("bash", bash(f"touch {target}", **ESCALATE))
        assert not result.is_error, text_of(result)
        assert os.path.exists(target), "the approved command did not run"
        assert len(asked) == 1 and target in asked[0], asked
    print("ok escalation approved through an input-required result")

    asked = []
    target = os.path.join(workspace, "declined.txt")
    async with Client(params, elicitation_callback=answering("decline", asked)) as client:
        result = await client.call_tool("bash", bash(f"touch {target}", **ESCALATE))
        assert result.is_error, text_of(result)
        assert text_of(result) == 'Error: the user rejected escalating this command to "workspace-write"', text_of(result)
        assert not os.path.exists(target), "a declined escalation ran the command"
        assert len(asked) == 1, asked
    print("ok escalation declined through an input-required result")

    target = os.path.join(workspace, "unasked.txt")
    async with Client(params) as client:
        result = await client.call_tool("bash", bash(f"touch {target}", **ESCALATE))
        assert result.is_error and "no approval channel is available" in text_of(result), text_of(result)
        assert not os.path.exists(target)
    print("ok escalation without elicitation fails closed on 2026-07-28")

    target = os.path.join(workspace, "forged.txt")
    other = os.path.join(workspace, "swapped.txt")
    accept = {"approval": {"action": "accept", "content": {}}}
    async with Client(params, elicitation_callback=answering("accept", [])) as client:
        # An answer nobody asked for approves nothing.
        result = await client.session.call_tool(
            "bash", bash(f"touch {target}", **ESCALATE), input_responses=accept, request_state="forged")
        assert result.is_error and "no open approval question" in text_of(result), text_of(result)
        assert not os.path.exists(target)
        # An answer to one command does not approve another.
        question = await client.session.call_tool(
            "bash", bash(f"touch {target}", **ESCALATE), allow_input_required=True)
        assert isinstance(question, types.InputRequiredResult), question
        assert list(question.input_requests) == ["approval"], question
        result = await client.session.call_tool(
            "bash", bash(f"touch {other}", **ESCALATE), input_responses=accept,
            request_state=question.request_state)
        assert result.is_error and "different call" in text_of(result), text_of(result)
        assert not os.path.exists(target) and not os.path.exists(other)
        # And a question is answered once.
        result = await client.session.call_tool(
            "bash", bash(f"touch {target}", **ESCALATE), input_responses=accept,
            request_state=question.request_state)
        assert result.is_error and "no open approval question" in text_of(result), text_of(result)
        assert not os.path.exists(target)
    print("ok a forged, swapped or replayed answer approves nothing")


async def network_escalation(workspace: str):
    """The network is off under workspace-write; a call may ask for it with
    a justification, and the person decides."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    port = listener.getsockname()[1]

    def connections() -> int:
        count = 0
        while True:
            try:
                conn, _ = listener.accept()
                conn.close()
                count += 1
            except BlockingIOError:
                return count

    command = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    ask = {"network": "on", "justification": "The test needs to reach its listener."}
    params = server("--sandbox", "workspace-write", "--workdir", workspace)
    asked = []

    async def callback(context, params):
        asked.append(params.message)
        assert "network access" in params.message and "reach its listener" in params.message, params.message
        return types.ElicitResult(action=answer["action"], content={} if answer["action"] == "accept" else None)

    answer = {"action": "accept"}
    async with Client(params, elicitation_callback=callback) as client:
        result = await client.call_tool("bash", bash(command))
        assert "connected" not in text_of(result) and connections() == 0, text_of(result)
        # The network off is the default: not said.
        assert "network" not in result.structured_content.get("sandbox", {}), result.structured_content
        result = await client.call_tool("bash", bash(command, **ask))
        assert not result.is_error and "connected" in text_of(result), text_of(result)
        assert result.structured_content["sandbox"]["network"] == "on", result.structured_content
        assert connections() == 1
        assert len(asked) == 1, asked
    print("ok network escalation approved through an input-required result")

    answer["action"] = "decline"
    async with Client(params, elicitation_callback=callback) as client:
        result = await client.call_tool("bash", bash(command, **ask))
        assert result.is_error, text_of(result)
        assert text_of(result) == "Error: the user rejected turning the network on for this command", text_of(result)
        assert connections() == 0
    print("ok network escalation declined through an input-required result")
    listener.close()


async def commit_through_approval(base: str):
    """Under workspace-write git's daily work goes through (`git status`,
    a commit); what git runs on the host stays protected (a hook is
    refused, the text naming it and what works instead), and the
    documented path for it is one approved call under danger-full-access."""
    import subprocess

    repo = os.path.join(base, "modern-repo")
    os.makedirs(repo, exist_ok=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(git + ["init", "-q"], cwd=repo, check=True)
    with open(os.path.join(repo, "a.txt"), "w") as f:
        f.write("a\n")
    commit = "git add a.txt && git -c user.name=a -c user.email=a@b commit -qm agent && git log --oneline | wc -l"
    hook = "printf '#!/bin/sh\\n' > .git/hooks/pre-commit && echo planted"
    async def approve(context, params):
        assert "danger-full-access" in params.message and "hook" in params.message, params.message
        return types.ElicitResult(action="accept", content={})

    async with Client(server("--sandbox", "workspace-write", "--workdir", repo),
                      elicitation_callback=approve) as client:
        status = await client.call_tool("bash", bash("git status --short"))
        assert text_of(status).startswith("?? a.txt\n"), repr(text_of(status))
        assert status.structured_content["status"] == "ok", repr(text_of(status))
        committed = await client.call_tool("bash", bash(commit))
        assert text_of(committed) == "1\n", text_of(committed)
        refused = await client.call_tool("bash", bash(hook))
        assert "[sandbox: stderr looks like a permission error under workspace-write mode; a guess from the output, not a report from the kernel]" in text_of(refused), text_of(refused)
        assert "/.git/hooks/pre-commit: protected: git hooks run on the host; the operator can lift it with --unprotect .git" in text_of(refused), text_of(refused)
        assert refused.structured_content["sandbox"]["looks_denied"] is True, refused.structured_content
        approved = await client.call_tool("bash", bash(
            hook, sandbox_permissions="danger-full-access",
            justification="The test needs to install a git hook."))
        assert not approved.is_error and text_of(approved) == "planted\n", text_of(approved)
    log = subprocess.run(["git", "log", "--oneline"], cwd=repo, capture_output=True, text=True, check=True)
    assert log.stdout.count("\n") == 1, log.stdout
    assert os.path.exists(os.path.join(repo, ".git/hooks/pre-commit"))
    print("ok git status and a commit work under workspace-write, a hook goes through one approved call")


async def poll(client: Client, task_id: str, statuses: set, seconds: float = 30.0) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        task = await stamped(client, "tasks/get", {"taskId": task_id})
        if task["status"] in statuses:
            return task
        assert time.monotonic() < deadline, task
        await anyio.sleep(0.1)


async def tasks():
    async with Client(server(), extensions=[advertise(TASKS)]) as client:
        discovered = client.session.discover_result
        assert TASKS in (discovered.capabilities.extensions or {}), discovered.capabilities

        quick = await stamped(client, "tools/call",
                              {"name": "bash", "arguments": bash("echo quick")})
        assert quick.get("resultType") != "task", quick
        assert quick["content"][0]["text"] == "quick\n", quick
        print("ok a quick call answers inline even with tasks declared")

        created = await stamped(client, "tools/call",
                                {"name": "bash", "arguments": bash("sleep 2; echo built")})
        assert created["resultType"] == "task", created
        assert created["status"] == "working", created
        done = await poll(client, created["taskId"], {"completed", "failed", "cancelled"})
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "built\n", done
        assert done["result"]["structuredContent"]["status"] == "ok", done
        print("ok a long call becomes a task polled to its result")

        pidfile = os.path.join(SCRATCH, "task-cancel.pid")
        created = await stamped(client, "tools/call",
                                {"name": "bash", "arguments": bash(f"echo $$ > {pidfile}; exec sleep 1000")})
        assert created["resultType"] == "task", created
        pid = await read_pid(pidfile)
        assert alive(pid)
        await stamped(client, "tasks/cancel", {"taskId": created["taskId"]})
        assert await gone(pid), f"tasks/cancel left the command {pid} running"
        done = await poll(client, created["taskId"], {"completed", "failed", "cancelled"})
        assert done["status"] == "cancelled", done
        print("ok tasks/cancel kills the command")

    # Without the extension the same long call answers inline.
    async with Client(server()) as client:
        result = await client.call_tool("bash", bash("sleep 1.5; echo inline"))
        assert text_of(result) == "inline\n", text_of(result)
    print("ok without the tasks extension a long call answers inline")


async def allow_hosts_escalation(workspace: str):
    """Under an allow-list the proxy refuses an unlisted host and the result
    says which; the model asks for that host with allow_hosts and a
    justification, and the person decides for that one call."""
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            body = b"served to the allowed call"
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{httpd.server_address[1]}"
    command = f"curl -sS http://{host}/wheel"
    ask = {"allow_hosts": [host], "justification": "pip needs the local index."}
    params = server("--sandbox", "workspace-write", "--workdir", workspace,
                    "--network", "allow", "--allow-host", "files.example.org")
    asked = []

    async def callback(context, params):
        asked.append(params.message)
        assert f"network access to {host}" in params.message and "local index" in params.message, params.message
        return types.ElicitResult(action=answer["action"], content={} if answer["action"] == "accept" else None)

    answer = {"action": "accept"}
    async with Client(params, elicitation_callback=callback) as client:
        result = await client.call_tool("bash", bash(command))
        text = text_of(result)
        assert "served to the allowed call" not in text, text
        assert result.structured_content["sandbox"]["refused_hosts"] == [host], result.structured_content
        assert text.splitlines()[-1].startswith(f"[network: refused {host} "), text
        assert f'allow_hosts: ["{host}"]' in text, text
        result = await client.call_tool("bash", bash(command, **ask))
        assert not result.is_error and "served to the allowed call" in text_of(result), text_of(result)
        assert "refused_hosts" not in result.structured_content.get("sandbox", {}), result.structured_content
        assert len(asked) == 1, asked
        # One call only: the next is refused again.
        result = await client.call_tool("bash", bash(command))
        assert "served to the allowed call" not in text_of(result), text_of(result)
    print("ok allow_hosts approved for one call through an input-required result")

    answer["action"] = "decline"
    async with Client(params, elicitation_callback=callback) as client:
        result = await client.call_tool("bash", bash(command, **ask))
        assert result.is_error, text_of(result)
        assert text_of(result) == f"Error: the user rejected letting this command reach {host}", text_of(result)
    print("ok allow_hosts declined through an input-required result")
    httpd.shutdown()


async def main():
    await negotiated()
    workspace = os.path.join(SCRATCH, "modern-ws")
    os.makedirs(workspace, exist_ok=True)
    await escalations(workspace)
    await network_escalation(workspace)
    await allow_hosts_escalation(workspace)
    await commit_through_approval(SCRATCH)
    await tasks()


anyio.run(main)
