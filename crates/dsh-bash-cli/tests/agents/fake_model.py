"""A fake model server for the real-agent tests.

It answers the two model APIs the agents speak -- OpenAI's Responses API
(Codex CLI, `POST .../responses`) and Anthropic's Messages API (Claude Code,
`POST .../messages`) -- with a script of tool calls, one per turn, then a
closing text. Every request is appended to a JSON-lines record, so the test
reads exactly what the agent gave its model: the tool results.

Usage: fake_model.py SCRIPT.json RECORD.jsonl
SCRIPT.json: {"calls": [{"tool": "bash", "arguments": {...}}, ...]}
It prints the port it listens on (127.0.0.1), then serves until killed.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT = json.load(open(sys.argv[1]))
RECORD = sys.argv[2]
LOCK = threading.Lock()


def record(entry):
    with LOCK, open(RECORD, "a") as out:
        out.write(json.dumps(entry) + "\n")


def sse(events):
    return "".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events
    ).encode()


# ---- Codex: the Responses API -------------------------------------------


def codex_tool_name(tools, wanted):
    """(namespace, name) under which the request offers our tool `wanted`."""
    for tool in tools or []:
        if tool.get("type") == "namespace" and "dsh" in tool.get("name", ""):
            for inner in tool.get("tools", []):
                if inner.get("name") == wanted:
                    return tool["name"], wanted
        name = tool.get("name", "")
        if "dsh" in name and name.endswith("__" + wanted):
            return None, name
    return None, None


def codex_turn(body):
    done = [i for i in body.get("input", []) if i.get("type") == "function_call_output"]
    calls = SCRIPT["calls"]
    rid = f"resp_{len(done)}"
    events = [("response.created", {"type": "response.created", "response": {"id": rid}})]
    searched = any(i.get("type") == "tool_search_output" for i in body.get("input", []))
    offers_search = any(t.get("type") == "tool_search" for t in body.get("tools") or [])
    if len(done) < len(calls):
        call = calls[len(done)]
        found = [t for i in body.get("input", []) if i.get("type") == "tool_search_output"
                 for t in i.get("tools", [])]
        namespace, name = codex_tool_name((body.get("tools") or []) + found, call["tool"])
        if name is None and offers_search and not searched:
            item = {"type": "tool_search_call", "id": "ts_0", "call_id": "ts_0",
                    "execution": "client", "status": "completed",
                    "arguments": {"query": "dsh bash run a shell command", "limit": 8}}
        elif name is None:
            item = text_item("the tool is not offered")
        else:
            item = {
                "type": "function_call",
                "id": f"fc_{len(done)}",
                "call_id": f"call_{len(done)}",
                "name": name,
                "arguments": json.dumps(call["arguments"]),
            }
            if namespace:
                item["namespace"] = namespace
    else:
        item = text_item("done")
    events.append(
        ("response.output_item.done",
         {"type": "response.output_item.done", "output_index": 0, "item": item})
    )
    usage = {"input_tokens": 1, "input_tokens_details": None, "output_tokens": 1,
             "output_tokens_details": None, "total_tokens": 2}
    events.append(
        ("response.completed",
         {"type": "response.completed", "response": {"id": rid, "usage": usage}})
    )
    return sse(events)


def text_item(text):
    return {"type": "message", "role": "assistant", "id": "msg_text",
            "content": [{"type": "output_text", "text": text}]}


# ---- Claude Code: the Messages API --------------------------------------


def claude_results(body):
    results = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            results += [b for b in content if b.get("type") == "tool_result"]
    return results


def claude_turn(body):
    """One turn: search for our tools once if they are deferred, then the
    script's next call, then a closing text."""
    tools = [t.get("name", "") for t in body.get("tools", []) or []]
    results = claude_results(body)
    searched = any(r.get("tool_use_id") == "toolu_search" for r in results)
    done = [r for r in results if r.get("tool_use_id", "").startswith("toolu_call")]
    calls = SCRIPT["calls"]
    call = calls[len(done)] if len(done) < len(calls) else None
    name = None
    if call:
        name = next((t for t in tools if "dsh" in t and t.endswith("__" + call["tool"])), None)
    if call and name is None and "ToolSearch" in tools and not searched:
        names = ",".join(f"mcp__dsh-bash__{t}" for t in ("bash", "bash_output", "bash_kill"))
        block = tool_use("toolu_search", "ToolSearch", {"query": f"select:{names}"})
    elif call:
        block = tool_use(f"toolu_call_{len(done)}", name or f"mcp__dsh-bash__{call['tool']}",
                         call["arguments"])
    else:
        block = None
    return sse(claude_events(body, block))


def tool_use(use_id, name, arguments):
    return {"type": "tool_use", "id": use_id, "name": name, "input": arguments}


def claude_events(body, tool):
    start = {"id": "msg_fake", "type": "message", "role": "assistant",
             "model": body.get("model", "fake"), "content": [], "stop_reason": None,
             "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
    if tool:
        block = dict(tool, input={})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(tool["input"])}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": "done"}
        stop = "end_turn"
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 1}}),
        ("message_stop", {"type": "message_stop"}),
    ]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, kind):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        record({"method": "GET", "path": self.path})
        if self.path.rstrip("/").endswith("/models"):
            self.reply(200, b'{"object":"list","data":[],"models":[]}', "application/json")
        else:
            self.reply(404, b"{}", "application/json")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        record({"method": "POST", "path": self.path, "body": body})
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/responses"):
            self.reply(200, codex_turn(body), "text/event-stream")
        elif path.endswith("/messages/count_tokens"):
            self.reply(200, b'{"input_tokens":1}', "application/json")
        elif path.endswith("/messages"):
            self.reply(200, claude_turn(body), "text/event-stream")
        else:
            self.reply(404, b"{}", "application/json")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
