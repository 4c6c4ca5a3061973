"""What the Python client scripts share: process liveness and the shape
of a `bash` call."""

import time

import anyio


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except OSError:
        return False


async def gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(0.02)
    return True


async def read_pid(path: str, seconds: float = 10.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return int(text)
        except OSError:
            pass
        await anyio.sleep(0.02)
    raise AssertionError(f"no pid appeared in {path}")


def text_of(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


def bash(command: str, **extra):
    return {"command": command, "description": "a test command for the suite", **extra}
