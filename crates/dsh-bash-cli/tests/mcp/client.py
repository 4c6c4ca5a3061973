"""Drives `dsh-bash mcp` with the official MCP Python SDK (a client this
project did not write). Usage: client.py <path to dsh-bash> <scratch dir>.

Each scenario prints `ok <name>`; the first failed assertion exits non-zero.
"""

import json
import os
import sys
import tempfile
import time

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support import alive, bash, gone, read_pid, text_of

BINARY = sys.argv[1]
SCRATCH = sys.argv[2]














def server(*extra: str, cwd: str | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=BINARY, args=["mcp", "--shell-snapshot", "off", *extra], cwd=cwd or SCRATCH)


async def session_with(params, scenario, **callbacks):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, **callbacks) as session:
            init = await session.initialize()
            await scenario(session, init)





async def wait_for_status(session, task_id: str, status: str, seconds: float = 20.0) -> str:
    seen = ""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = await session.call_tool("bash_output", {"task_id": task_id})
        text = text_of(result)
        seen += text + "\n"
        if status in text:
            return seen
        await anyio.sleep(0.05)
    raise AssertionError(f"{task_id} never reached {status!r}; saw {seen!r}")


async def set_level(session, init):
    """The server advertises logging, so it answers logging/setLevel."""
    assert init.capabilities.logging is not None
    for level in ["warning", "debug"]:
        await session.set_logging_level(level)
    print("ok logging/setLevel is answered")


TOOL_SCHEMAS = {}


def standalone(name: str, result: types.CallToolResult):
    """Structured content that stands alone: it validates against the
    tool's declared output schema (draft 2020-12, a real validator) and
    carries the text exactly as the text content says it."""
    import jsonschema

    schema = TOOL_SCHEMAS[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(result.structured_content)
    assert result.structured_content["text"] == text_of(result), (result.structured_content, text_of(result))
    return result.structured_content


async def listing(session, init):
    assert init.server_info.name == "dsh-bash", init.server_info
    assert "[exit code: N]" in (init.instructions or ""), init.instructions
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert sorted(tools) == ["bash", "bash_kill", "bash_output", "bash_write"], sorted(tools)
    for name, tool in tools.items():
        assert tool.output_schema and tool.output_schema["type"] == "object", name
        TOOL_SCHEMAS[name] = tool.output_schema
    schema = tools["bash"].input_schema
    assert schema["required"] == ["command", "description"], schema
    assert "sandbox_permissions" not in schema["properties"], schema
    assert "run_in_background" in tools["bash"].description
    assert tools["bash_output"].annotations.read_only_hint is True
    assert tools["bash"].annotations.destructive_hint is True
    assert tools["bash_kill"].input_schema["required"] == ["task_id"]
    print("ok initialize and list tools")


async def confined_listing(session, init):
    schema = {t.name: t for t in (await session.list_tools()).tools}["bash"].input_schema
    assert schema["properties"]["sandbox_permissions"]["enum"] == ["workspace-write", "danger-full-access"], schema
    assert "justification" in schema["properties"], schema
    print("ok escalation fields exactly with --sandbox")


async def foreground(session, init):
    result = await session.call_tool("bash", bash("echo out; echo err >&2; exit 3"))
    assert not result.is_error
    assert text_of(result) == "out\n[stderr]\nerr\n[exit code: 3]", text_of(result)
    assert result.structured_content["exit_code"] == 3, result.structured_content
    facts = standalone("bash", result)
    # The output once (in text), only the facts that are not defaults.
    assert facts == {"exit_code": 3, "status": "exit 3", "text": text_of(result)}, facts
    assert len(json.dumps(facts, separators=(",", ":"))) < 200, facts
    print("ok foreground call with exit code and stderr")
    print("ok structured content stands alone and validates")

    result = await session.call_tool("bash", bash("sleep 30", timeoutMs=300))
    assert text_of(result) == "(no output)\n[timed out after 300ms]\n[killed by signal: SIGTERM]", text_of(result)
    assert result.structured_content["status"].startswith("timed out after 300 ms"), result.structured_content
    print("ok timeout")

    result = await session.call_tool("bash", {"command": "", "description": "x"})
    assert result.is_error and text_of(result) == "Error: invalid command: expected a non-empty string"
    print("ok validation error")

    payload = "y" * 300_000
    result = await session.call_tool("bash", bash(f"cat <<'EOF' | wc -c\n{payload}\nEOF"))
    assert not result.is_error and text_of(result) == "300001\n", text_of(result)[-200:]
    print("ok a command over 128 KiB runs")

    marker = os.path.join(SCRATCH, "timeout-alias-ran")
    result = await session.call_tool("bash", bash(f"touch {marker}", timeout=100))
    assert result.is_error, text_of(result)
    assert 'unknown argument "timeout" (did you mean "timeoutMs"?)' in text_of(result), text_of(result)
    assert not os.path.exists(marker), "the call ran anyway"
    print("ok an unknown argument is an error naming it")


async def background(session, init):
    notices = []
    # (the logging callback is installed by the caller)
    result = await session.call_tool("bash", bash("sleep 0.3; echo done", run_in_background=True))
    text = text_of(result)
    assert text.startswith("started background task bash-"), text
    task_id = standalone("bash", result)["task_id"]
    seen = await wait_for_status(session, task_id, "[status: completed, exit code: 0]")
    assert "done\n" in seen, seen
    print("ok background task polled to completion")

    result = await session.call_tool("bash", bash("sleep 1000", run_in_background=True))
    killed_id = result.structured_content["task_id"]
    result = await session.call_tool("bash_kill", {"task_id": killed_id})
    assert text_of(result) == f"killed background task {killed_id}", text_of(result)
    assert standalone("bash_kill", result)["killed"] is True
    result = await session.call_tool("bash_output", {"task_id": killed_id})
    assert text_of(result).endswith("[status: killed by SIGTERM] [position: 0:0]"), text_of(result)
    assert standalone("bash_output", result)["status"] == "killed"
    assert "finished" not in text_of(result), text_of(result)
    print("ok background task killed")

    # A completion the model has not read reaches it on the next result of
    # any tool, on this (2025) protocol too, exactly once; the task's own
    # settled read carries none.
    result = await session.call_tool("bash", bash("echo quick", run_in_background=True))
    quick = result.structured_content["task_id"]
    notice = f"background bash task {quick} finished [status: completed, exit code: 0]"
    with anyio.fail_after(30):
        while True:
            text = text_of(await session.call_tool("bash", bash("echo next")))
            if notice in text:
                break
            await anyio.sleep(0.05)
    assert notice not in text_of(await session.call_tool("bash", bash("echo again"))), "told twice"
    read = await session.call_tool("bash_output", {"task_id": quick})
    assert "finished" not in text_of(read), text_of(read)
    print("ok a completion notice rides on the next result, once")


async def progress(session, init):
    beats = []

    async def on_progress(value, total, message):
        beats.append((value, message))

    result = await session.call_tool("bash", bash("sleep 2.5; echo slow"), progress_callback=on_progress)
    assert text_of(result) == "slow\n", text_of(result)
    assert beats and beats[0][1].startswith("running for"), beats
    print("ok progress reported while a call runs")


async def cancellation(session, init):
    pidfile = os.path.join(SCRATCH, "cancel.pid")
    async with anyio.create_task_group() as tasks:
        async def call():
            with anyio.move_on_after(30):
                await session.call_tool("bash", bash(f"echo $$ > {pidfile}; exec sleep 1000"))

        tasks.start_soon(call)
        pid = await read_pid(pidfile)
        assert alive(pid)
        tasks.cancel_scope.cancel()
    assert await gone(pid), f"the cancelled command {pid} is still running"
    # The session still works afterwards.
    result = await session.call_tool("bash", bash("echo still here"))
    assert text_of(result) == "still here\n", text_of(result)
    print("ok cancelling a long foreground call kills it")


def answering(action: str):
    async def callback(context, params):
        # The question says what, how wide and why, and asks nothing more:
        # Accept means yes.
        assert "workspace-write" in params.message, params.message
        assert "touch " in params.message and "The test needs" in params.message, params.message
        assert not params.requested_schema.get("properties"), params.requested_schema
        assert not params.requested_schema.get("required"), params.requested_schema
        return types.ElicitResult(action=action, content={} if action == "accept" else None)
    return callback


async def withdrawn_question(workspace: str):
    """A call cancelled while its approval question is open withdraws it."""
    asked = anyio.Event()
    withdrawn = anyio.Event()

    async def callback(context, params):
        asked.set()
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            withdrawn.set()
            raise
        return types.ElicitResult(action="accept", content={})

    target = os.path.join(workspace, "withdrawn.txt")

    async def scenario(session, init):
        async with anyio.create_task_group() as tasks:
            async def call():
                args = bash(f"touch {target}", sandbox_permissions="workspace-write",
                            justification="The test needs to create one file in the workspace.")
                await session.call_tool("bash", args)
            tasks.start_soon(call)
            with anyio.fail_after(20):
                await asked.wait()
            tasks.cancel_scope.cancel()
        with anyio.fail_after(20):
            await withdrawn.wait()
        assert not os.path.exists(target), "a withdrawn question ran the command"

    await session_with(server("--sandbox", "read-only", "--workdir", workspace), scenario,
                       elicitation_callback=callback)


async def escalation(workspace: str, callback, expect_ok: bool, name: str):
    target = os.path.join(workspace, f"{name}.txt")

    async def scenario(session, init):
        denied = await session.call_tool("bash", bash(f"touch {target}"))
        assert "[sandbox: stderr looks like a permission error under read-only mode; a guess from the output, not a report from the kernel]" in text_of(denied), text_of(denied)
        assert not os.path.exists(target)
        args = bash(f"touch {target}", sandbox_permissions="workspace-write",
                    justification="The test needs to create one file in the workspace.")
        result = await session.call_tool("bash", args)
        if expect_ok:
            assert not result.is_error, text_of(result)
            assert os.path.exists(target), "the approved command did not run"
        else:
            assert result.is_error, text_of(result)
            assert not os.path.exists(target), "a declined escalation ran the command"
            return text_of(result)

    params = server("--sandbox", "read-only", "--workdir", workspace)
    kwargs = {"elicitation_callback": callback} if callback else {}
    holder = {}

    async def run(session, init):
        holder["text"] = await scenario(session, init)

    await session_with(params, run, **kwargs)
    return holder.get("text")


async def closing(params):
    pidfile = os.path.join(SCRATCH, "close.pid")
    server_pid = None
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("bash", bash(f"echo $$ > {pidfile}; exec sleep 1000", run_in_background=True))
            pid = await read_pid(pidfile)
            assert alive(pid)
            result = await session.call_tool("bash", bash("echo $PPID"))
            server_pid = int(text_of(result))
    assert await gone(pid), f"closing the connection left {pid} running"
    assert await gone(server_pid), "the server outlived its connection"
    print("ok closing the connection stops background tasks")


async def terminated(params):
    """SIGTERM to the server stops its commands before it exits."""
    pidfile = os.path.join(SCRATCH, "term.pid")
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("bash", bash(f"echo $$ > {pidfile}; exec sleep 1000", run_in_background=True))
            pid = await read_pid(pidfile)
            server_pid = int(text_of(await session.call_tool("bash", bash("echo $PPID"))))
            os.kill(server_pid, 15)
            assert await gone(server_pid), "the server ignored SIGTERM"
            assert await gone(pid), f"SIGTERM to the server left {pid} running"
    print("ok SIGTERM stops the server and its commands")


async def killed_host():
    """SIGKILL of the server takes every process of its tasks with it,
    escapees (setsid, double fork) of a background task included."""
    pidfile = os.path.join(SCRATCH, "killed-host.pids")
    if os.path.exists(pidfile):
        os.remove(pidfile)
    async with stdio_client(server()) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            if (await session.call_tool("bash", bash("true"))).structured_content.get("containment") != "cgroup":
                print("ok SIGKILL of the server takes background escapees (skipped: no cgroup containment here)")
                return
            command = (f"setsid sleep 1000 & echo $! >> {pidfile}; ( ( sleep 1000 & echo $! >> {pidfile} ) & ); "
                       f"echo $$ >> {pidfile}; exec sleep 1000")
            await session.call_tool("bash", bash(command, run_in_background=True))
            deadline = time.monotonic() + 10
            while not (os.path.exists(pidfile) and len(open(pidfile).read().split()) == 3):
                assert time.monotonic() < deadline, "the task never started"
                await anyio.sleep(0.05)
            pids = [int(p) for p in open(pidfile).read().split()]
            server_pid = int(text_of(await session.call_tool("bash", bash("echo $PPID"))))
            os.kill(server_pid, 9)
            for pid in pids:
                assert await gone(pid), f"{pid} outlived its SIGKILLed server"
    print("ok SIGKILL of the server takes background escapees")


async def spill_removed():
    """A session's full-output files go with the session."""
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        params = StdioServerParameters(
            command=BINARY, args=["mcp", "--shell-snapshot", "off"], cwd=SCRATCH, env={**os.environ, "TMPDIR": tmp}
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                text = text_of(await session.call_tool("bash", bash("seq 1 100000")))
                marker = "; full output: "
                assert marker in text, text[-300:]
                path = text.split(marker, 1)[1].split("]", 1)[0]
                assert os.path.isfile(path), path
                server_pid = int(text_of(await session.call_tool("bash", bash("echo $PPID"))))
        assert await gone(server_pid), "the server outlived its connection"
        assert not os.path.exists(path), f"{path} outlived its session"
        assert os.listdir(tmp) == [], os.listdir(tmp)
    print("ok the session's spill directory is removed at exit")


async def main():
    await session_with(server(), listing)
    await session_with(server(), set_level)
    await session_with(server("--sandbox", "read-only"), confined_listing)
    await session_with(server(), foreground)

    notices = []

    async def logged(params):
        notices.append(str(params.data))

    await session_with(server(), background, logging_callback=logged)
    deadline = time.monotonic() + 10
    while not any("background bash task bash-1 finished [status: completed, exit code: 0]" in n for n in notices):
        assert time.monotonic() < deadline, notices
        await anyio.sleep(0.05)
    print("ok completion announced by notification")

    await session_with(server(), cancellation)
    await session_with(server(), progress)

    with tempfile.TemporaryDirectory(dir=SCRATCH) as workspace:
        await escalation(workspace, answering("accept"), True, "approved")
        print("ok escalation approved through elicitation")
        text = await escalation(workspace, answering("decline"), False, "declined")
        assert text == 'Error: the user rejected escalating this command to "workspace-write"', text
        print("ok escalation declined through elicitation")
        text = await escalation(workspace, None, False, "unasked")
        assert "no approval channel is available" in text, text
        print("ok escalation without elicitation fails closed")
        await withdrawn_question(workspace)
        print("ok a cancelled call withdraws its approval question")

    await closing(server())
    await terminated(server())
    await spill_removed()
    await killed_host()


anyio.run(main)
