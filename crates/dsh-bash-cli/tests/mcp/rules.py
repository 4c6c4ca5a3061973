"""Command rules and the policy file through `dsh-bash mcp`, driven by the
official MCP Python SDK. Usage: rules.py <path to dsh-bash> <scratch dir>.

The server's home is the scratch directory (its policy file is there), the
system's file is none, and each scenario prints `ok <name>`.
"""

import os
import subprocess
import sys

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support import bash, text_of

BINARY = sys.argv[1]
SCRATCH = sys.argv[2]
CONFIG_HOME = os.path.join(SCRATCH, "config")
USER_FILE = os.path.join(CONFIG_HOME, "dsh-bash", "config.toml")
WORKSPACE = os.path.join(SCRATCH, "ws")
ENV = {**os.environ, "XDG_CONFIG_HOME": CONFIG_HOME, "DSH_BASH_SYSTEM_CONFIG": ""}

USER_POLICY = """
[sandbox]
mode = "read-only"

[[rule]]
command = ["git", "push"]
decision = "deny"
reason = "pushing publishes work; leave it to the person"

[[rule]]
command = ["touch", "asked"]
decision = "ask"
reason = "the test asks about this one"
"""


def server() -> StdioServerParameters:
    return StdioServerParameters(command=BINARY, args=["mcp", "--shell-snapshot", "off", "--workdir", WORKSPACE],
                                 cwd=WORKSPACE, env=ENV)


async def session_with(scenario, callback=None):
    kwargs = {"elicitation_callback": callback} if callback else {}
    async with stdio_client(server()) as (read, write):
        async with ClientSession(read, write, **kwargs) as session:
            await session.initialize()
            await scenario(session)


def answering(action: str, questions: list, remember: str | None = None):
    async def callback(context, params):
        questions.append(params)
        content = {"remember": remember} if remember else {}
        return types.ElicitResult(action=action, content=content if action == "accept" else None)
    return callback


def marker(name: str) -> str:
    return os.path.join(WORKSPACE, name)


async def denied():
    questions = []

    async def scenario(session):
        for command in [f"git push; touch {marker('denied')}",
                        f"touch {marker('denied')} && bash -c 'git -C . push origin'",
                        f"env FOO=1 git push > /dev/null; touch {marker('denied')}"]:
            result = await session.call_tool("bash", bash(command))
            assert result.is_error, text_of(result)
            text = text_of(result)
            assert "the policy denies this command" in text, text
            assert "pushing publishes work; leave it to the person" in text, text
            assert USER_FILE in text, text
        assert not os.path.exists(marker("denied")), "a denied command ran"
        assert not questions, "a denial asked a person"

    await session_with(scenario, answering("accept", questions))
    print("ok a denied call never runs and the model reads the reason")


async def asked():
    declined = []

    async def refuse(session):
        result = await session.call_tool("bash", bash("touch asked"))
        assert result.is_error and "the user rejected running this command" in text_of(result), text_of(result)

    await session_with(refuse, answering("decline", declined))
    assert not os.path.exists(marker("asked")), "a declined command ran"
    assert len(declined) == 1, declined
    message = declined[0].message
    assert "A command rule asks before this command runs" in message, message
    assert "the test asks about this one" in message and "touch asked" in message, message

    accepted = []

    async def allow(session):
        # The workspace is read-only: ask for workspace-write too, one question.
        args = bash("touch asked", sandbox_permissions="workspace-write",
                    justification="The test needs to create one file in the workspace.")
        result = await session.call_tool("bash", args)
        assert not result.is_error, text_of(result)

    await session_with(allow, answering("accept", accepted))
    assert os.path.exists(marker("asked")), "the accepted command did not run"
    assert len(accepted) == 1, accepted
    print("ok an asked call runs only after acceptance")


async def always():
    questions = []
    with open(os.path.join(WORKSPACE, "make-marker.sh"), "w") as f:
        f.write('touch "always-$1"\n')

    async def first(session):
        args = bash("sh make-marker.sh 1", sandbox_permissions="workspace-write",
                    justification="The test needs to create files.", prefix_rule=["sh", "make-marker.sh"])
        result = await session.call_tool("bash", args)
        assert not result.is_error, text_of(result)
        assert "standing approval kept: `sh make-marker.sh`" in text_of(result), text_of(result)
        # Broader than the call: refused as a proposal, nobody asked.
        broad = bash("bash -c true", sandbox_permissions="workspace-write",
                     justification="x", prefix_rule=["bash"])
        refused = await session.call_tool("bash", broad)
        assert refused.is_error and "would allow `bash` to run anything" in text_of(refused), text_of(refused)

    await session_with(first, answering("accept", questions, remember="always"))
    assert os.path.exists(marker("always") + "-1")
    assert len(questions) == 1, questions
    schema = questions[0].requested_schema
    assert schema["properties"]["remember"]["enum"] == ["this call", "always"], schema
    kept = open(USER_FILE).read()
    assert 'command = ["sh", "make-marker.sh"]' in kept and 'decision = "allow"' in kept, kept
    assert f"for the workspace {os.path.realpath(WORKSPACE)}" in kept, kept

    later = []

    async def second(session):
        args = bash("sh make-marker.sh 2", sandbox_permissions="workspace-write",
                    justification="The test needs to create files.")
        result = await session.call_tool("bash", args)
        assert not result.is_error, text_of(result)
        assert "matches an allow rule" in text_of(result), text_of(result)

    # A new server reads the kept rule from the user's file.
    await session_with(second, answering("decline", later))
    assert os.path.exists(marker("always") + "-2")
    assert not later, "the standing approval still asked"
    print("ok a rule accepted always is kept and the next call asks nothing")


def widening_project():
    project = os.path.join(WORKSPACE, ".dsh-bash")
    os.makedirs(project, exist_ok=True)
    path = os.path.join(project, "config.toml")
    with open(path, "w") as f:
        f.write('[[rule]]\ncommand = ["git", "status"]\ndecision = "deny"\n\n[sandbox]\nmode = "danger-full-access"\n')
    done = subprocess.run([BINARY, "mcp", "--shell-snapshot", "off", "--workdir", WORKSPACE], env=ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    os.remove(path)
    assert done.returncode != 0, done
    assert f"{path}:6: sandbox.mode:" in done.stderr, done.stderr
    assert "only tighten" in done.stderr, done.stderr
    print("ok a project file that widens the user's policy is refused naming the key")


async def main():
    os.makedirs(os.path.dirname(USER_FILE), exist_ok=True)
    os.makedirs(WORKSPACE, exist_ok=True)
    with open(USER_FILE, "w") as f:
        f.write(USER_POLICY)
    await denied()
    await asked()
    await always()
    widening_project()


anyio.run(main)
