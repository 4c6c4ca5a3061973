// dsh-bash mcp driven by the official TypeScript SDK: schemas compiled by
// ajv in strict mode (draft 2020-12), structured content validated against
// them, cancellation kills the command, progress arrives, logging/setLevel
// is answered. Prints "ok <scenario>" per scenario; any failure throws.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import Ajv2020 from "ajv/dist/2020.js";

const [binary, scratch] = process.argv.slice(2);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function alive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

async function until(what, check, seconds = 20) {
  const deadline = Date.now() + seconds * 1000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

const bash = (command, extra = {}) => ({
  name: "bash",
  arguments: { command, description: "a test command for the suite", ...extra },
});

const transport = new StdioClientTransport({ command: binary, args: ["mcp", "--shell-snapshot", "off"], cwd: scratch });
const client = new Client({ name: "dsh-bash-js-suite", version: "0.0.0" });
await client.connect(transport);

const ajv = new Ajv2020({ strict: true, allErrors: true });
const { tools } = await client.listTools();
const validators = {};
for (const tool of tools) {
  ajv.compile(tool.inputSchema);
  validators[tool.name] = ajv.compile(tool.outputSchema);
}
assert(
  JSON.stringify(Object.keys(validators).sort()) === JSON.stringify(["bash", "bash_kill", "bash_output", "bash_write"]),
  `tools: ${Object.keys(validators)}`,
);
console.log("ok schemas compile under ajv strict mode");

function standalone(name, result) {
  const validate = validators[name];
  assert(validate(result.structuredContent), `${name}: ${ajv.errorsText(validate.errors)}`);
  const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
  assert(result.structuredContent.text === text, `${name}: text differs`);
  return result.structuredContent;
}

const ran = await client.callTool(bash("echo out; echo err >&2; exit 3"));
const facts = standalone("bash", ran);
assert(facts.exit_code === 3 && facts.status === "exit 3" && !("stdout" in facts), JSON.stringify(facts));
assert(facts.text === "out\n[stderr]\nerr\n[exit code: 3]", JSON.stringify(facts.text));
console.log("ok structured content validates and stands alone");

const started = standalone("bash", await client.callTool(bash("sleep 1000", { run_in_background: true })));
const killed = standalone("bash_kill", await client.callTool({ name: "bash_kill", arguments: { task_id: started.task_id } }));
assert(killed.killed === true, JSON.stringify(killed));
const read = standalone("bash_output", await client.callTool({ name: "bash_output", arguments: { task_id: started.task_id } }));
assert(read.status === "killed", JSON.stringify(read));
console.log("ok background start, kill and read validate");

const pidfile = join(scratch, "js-cancel.pid");
const abort = new AbortController();
const call = client
  .callTool(bash(`echo $$ > ${pidfile}; exec sleep 1000`), undefined, { signal: abort.signal })
  .catch((err) => err);
await until("the command to start", () => existsSync(pidfile) && readFileSync(pidfile, "utf8").trim() !== "");
const pid = Number(readFileSync(pidfile, "utf8").trim());
assert(alive(pid), `${pid} is not running`);
abort.abort();
await call;
await until(`the cancelled command ${pid} to be killed`, () => !alive(pid));
console.log("ok cancelling a call kills its command");

const beats = [];
await client.callTool(bash("sleep 2.5; echo done"), undefined, {
  onprogress: (progress) => beats.push(progress),
  resetTimeoutOnProgress: true,
});
assert(beats.length >= 1, "no progress notification arrived");
console.log("ok progress arrives while a call runs");

await client.setLoggingLevel("warning");
console.log("ok logging/setLevel is answered");

const unknown = await client.callTool({ name: "bash", arguments: { command: "true", description: "d", timeout: 100 } });
assert(unknown.isError, "an unknown argument was accepted");
console.log("ok an unknown argument is an error");

await client.close();
