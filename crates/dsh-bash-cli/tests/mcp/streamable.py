"""Drives `dsh-bash mcp --listen` (Streamable HTTP) with the official Python
SDK: a legacy session (initialize, 2025-11-25) and the 2026-07-28 mode
(server/discover, no session), the bearer token on every request.
Usage: streamable.py <path to dsh-bash> <scratch dir>.

Each scenario prints `ok <name>`; the first failed assertion exits non-zero.
"""

import os
import subprocess
import sys

import anyio
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from support import bash, text_of

BINARY = sys.argv[1]
SCRATCH = sys.argv[2]


def start_server():
    token_file = os.path.join(SCRATCH, "token")
    server = subprocess.Popen(
        [BINARY, "mcp", "--shell-snapshot", "off", "--listen", "127.0.0.1:0", "--token-file", token_file],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=SCRATCH,
    )
    for line in server.stderr:
        if line.startswith("dsh-bash: listening on "):
            url = line.split("listening on ", 1)[1].strip()
            break
    else:
        raise AssertionError("the server never listened")
    with open(token_file) as f:
        token = f.read().strip()
    return server, url, token


def transport(url: str, token: str):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return streamable_http_client(url, http_client=client)


async def legacy(url: str, token: str):
    notices = []

    async def logged(params):
        notices.append(params.data)

    async with Client(transport(url, token), mode="legacy", logging_callback=logged) as client:
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} == {"bash", "bash_output", "bash_write", "bash_kill"}, tools
        result = await client.call_tool("bash", bash("echo over http; exit 3"))
        assert text_of(result) == "over http\n[exit code: 3]", text_of(result)
        assert result.structured_content["exit_code"] == 3, result.structured_content
        print("ok a legacy session over HTTP runs a command")

        started = await client.call_tool("bash", bash("echo bg", run_in_background=True))
        task_id = started.structured_content["task_id"]
        with anyio.fail_after(30):
            while not any(task_id in str(n) for n in notices):
                await anyio.sleep(0.05)
        read = await client.call_tool("bash_output", {"task_id": task_id})
        assert read.structured_content["status"] == "completed", read.structured_content
        print("ok a legacy session is told of a finished background task")

        # Another session (same token) cannot touch this session's task.
        async with Client(transport(url, token), mode="legacy") as other:
            refused = await other.call_tool("bash_output", {"task_id": task_id})
            assert refused.is_error and "belongs to another session" in text_of(refused), text_of(refused)
        print("ok two legacy sessions are isolated")


async def modern(url: str, token: str):
    async with Client(transport(url, token)) as client:
        assert client.protocol_version == "2026-07-28", client.protocol_version
        result = await client.call_tool("bash", bash("echo modern"))
        assert text_of(result) == "modern\n", text_of(result)
        started = await client.call_tool("bash", bash("echo first; sleep 300", run_in_background=True))
        task_id = started.structured_content["task_id"]
    print("ok 2026-07-28 over HTTP runs a command")

    # A finished background task is announced on a later result (2026 has
    # no unsolicited messages; over HTTP every request has its own peer).
    async with Client(transport(url, token)) as client:
        quick = await client.call_tool("bash", bash("echo quick", run_in_background=True))
        quick_id = quick.structured_content["task_id"]
        with anyio.fail_after(30):
            while True:
                result = await client.call_tool("bash", bash("true"))
                notices = result.structured_content.get("notices") or []
                if any(quick_id in n for n in notices):
                    break
                await anyio.sleep(0.1)
    print("ok 2026-07-28 over HTTP announces a finished task on a later result")

    # A new connection with the same token reaches the same task.
    async with Client(transport(url, token)) as client:
        seen = ""
        with anyio.fail_after(30):
            while "first" not in seen:
                read = await client.call_tool("bash_output", {"task_id": task_id})
                assert not read.is_error, text_of(read)
                seen += read.structured_content["text"]
                await anyio.sleep(0.05)
        killed = await client.call_tool("bash_kill", {"task_id": task_id})
        assert killed.structured_content["killed"] is True, killed.structured_content
    print("ok 2026-07-28 reaches a task again from a new connection")


async def refused(url: str):
    marker = os.path.join(SCRATCH, "refused-ran")
    try:
        async with Client(transport(url, "wrong-token-0123456789")) as client:
            await client.call_tool("bash", bash(f"touch {marker}"))
    except Exception as err:  # the SDK reports a 401 as its own error types
        assert not os.path.exists(marker), "a refused client's command ran"
        print(f"ok a wrong token is refused ({type(err).__name__})")
        return
    raise AssertionError("a wrong token was let in")


async def main():
    server, url, token = start_server()
    try:
        await legacy(url, token)
        await modern(url, token)
        await refused(url)
    finally:
        server.terminate()
        server.wait(timeout=20)
    assert server.returncode == 0, server.returncode


anyio.run(main)
