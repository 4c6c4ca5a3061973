"""Drives the interactive tools of `dsh-bash mcp` with the official MCP
Python SDK: a REPL and a prompt in a terminal, ^C, a yield hand-over, `vi`
(unconfined and under each backend named in $DSH_VI_BACKENDS) and a
full-screen program's screen. Usage: interactive.py <dsh-bash> <scratch>.

Each scenario prints `ok <name>`; the first failed assertion exits non-zero.
"""

import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support import text_of

BINARY = sys.argv[1]
SCRATCH = sys.argv[2]


def server(*extra: str) -> StdioServerParameters:
    return StdioServerParameters(command=BINARY, args=["mcp", "--shell-snapshot", "off", *extra], cwd=SCRATCH)


async def session_with(params, scenario):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await scenario(session)


async def call(session, name: str, **arguments) -> str:
    return text_of(await session.call_tool(name, arguments))


async def start(session, command: str) -> str:
    text = await call(session, "bash", command=command, description="interactive", tty=True,
                      run_in_background=True)
    assert text.startswith("started background task "), text
    return text.split()[-1]


async def until(session, task: str, needle: str, seconds: float = 20.0, **write) -> str:
    """Writes `write` once (if given), then reads until `needle` shows."""
    seen = await call(session, "bash_write", task_id=task, **write) if write else ""
    deadline = time.monotonic() + seconds
    while needle not in seen:
        assert time.monotonic() < deadline, f"no {needle!r} from {task}: {seen!r}"
        seen += await call(session, "bash_write", task_id=task, yieldMs=200)
    return seen


async def repl(session):
    task = await start(session, "python3 -q")
    await until(session, task, ">>> ")
    await call(session, "bash_write", task_id=task, input="def f(x):\n    return x * 7\n\n")
    seen = await until(session, task, "42", input="print(f(6))\n")
    assert "42" in seen, seen
    seen = await until(session, task, "[status: completed", keys=["C-d"])
    print("ok a python REPL in a terminal is driven with bash_write")


async def prompt(session):
    task = await start(session, "read -p 'name? ' n; echo \"hi $n\"")
    await until(session, task, "name? ")
    seen = await until(session, task, "hi bob", input="bob\n")
    assert "hi bob" in seen, seen
    print("ok a prompt is answered")


def interrupting(name: str):
    async def scenario(session):
        await interrupt(session)
        print(f"ok C-c interrupts sleep in a loop and the loop goes on {name}")
    return scenario


async def interrupt(session):
    task = await start(session, "trap 'echo caught' INT; echo ready; "
                                "for i in 1 2; do sleep 100; echo \"next $i\"; done")
    await until(session, task, "ready")
    deadline = time.monotonic() + 20
    seen = ""
    while "next 1" not in seen:
        assert time.monotonic() < deadline, seen
        seen += await call(session, "bash_write", task_id=task, keys=["C-c"], yieldMs=300)
    assert "[status: running]" in seen, seen
    await call(session, "bash_kill", task_id=task)


async def yielded(session):
    text = await call(session, "bash", command="sleep 2; echo done", description="slow", yieldMs=500)
    assert "[still running as bash-" in text, text
    task = text.split("[still running as ")[1].split()[0]
    deadline = time.monotonic() + 20
    seen = ""
    while "[status: completed" not in seen:
        assert time.monotonic() < deadline, seen
        seen += await call(session, "bash_output", task_id=task)
        await anyio.sleep(0.1)
    assert "done" in seen, seen
    quick = await call(session, "bash", command="echo quick", description="quick", yieldMs=5000)
    assert quick.strip() == "quick", repr(quick)
    print("ok yieldMs hands a slow command over and bash_output reads it later")


async def full_screen(session):
    task = await start(session, "top -d 0.2")
    deadline = time.monotonic() + 20
    while True:
        screen = await call(session, "bash_output", task_id=task, screen=True)
        if "[screen]" in screen and "load average" in screen.split("[screen]")[1]:
            break
        assert time.monotonic() < deadline, screen
        await anyio.sleep(0.1)
    await call(session, "bash_kill", task_id=task)
    print("ok the screen of top is read")


def vi_in(workdir: str, name: str):
    async def scenario(session):
        path = os.path.join(workdir, "notes.txt")
        text = await call(session, "bash", command="vi notes.txt", description="edit",
                          tty=True, yieldMs=1000, workdir=workdir)
        assert "[still running as bash-" in text, text
        task = text.split("[still running as ")[1].split()[0]
        await until(session, task, "INSERT", input="ihello from vi")
        await call(session, "bash_write", task_id=task, keys=["Esc"], input="")
        seen = await until(session, task, "written", input=":wq\n")
        deadline = time.monotonic() + 20
        while "[status: completed" not in seen:
            assert time.monotonic() < deadline, seen
            # A sandbox refuses ~/.viminfo: vi asks for Enter.
            seen += await call(session, "bash_write", task_id=task, keys=["Enter"], yieldMs=300)
        with open(path) as f:
            assert f.read() == "hello from vi\n", path
        print(f"ok vi edits and saves a file {name}")
    return scenario


async def main():
    await session_with(server(), repl)
    await session_with(server(), prompt)
    await session_with(server(), interrupting("unconfined"))
    await session_with(server(), yielded)
    await session_with(server(), full_screen)
    plain = os.path.join(SCRATCH, "plain")
    os.mkdir(plain)
    await session_with(server(), vi_in(plain, "unconfined"))
    for backend in filter(None, os.environ.get("DSH_VI_BACKENDS", "").split(",")):
        workspace = os.path.join(os.environ["DSH_VI_WORKSPACES"], backend)
        os.makedirs(workspace)
        confined = server("--sandbox", "workspace-write", "--sandbox-backend", backend,
                          "--workdir", workspace)
        await session_with(confined, vi_in(workspace, f"under workspace-write with {backend}"))
        await session_with(confined, interrupting(f"under workspace-write with {backend}"))


anyio.run(main)
