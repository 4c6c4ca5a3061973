//! What the model of a real agent receives from `dsh-bash mcp`: Codex CLI
//! and Claude Code (the pinned npm packages in tests/agents, installed by
//! `.ci/run`), each run offline against a fake model server
//! (tests/agents/fake_model.py) that plays a script of tool calls and
//! records every request the agent sends back — the tool results, exactly
//! as the agent gave them to its model. Each agent is registered with the
//! book's own snippets, read from docs/src (its guide per agent), so the
//! snippets are tested; the server they name is `dsh-bash` on the agent's
//! PATH, as every install channel leaves it.
//! Without the agents installed the tests skip loudly (a failure under
//! `DSH_TEST_REQUIRE_MCP_CLIENT=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::confined;
use serde_json::{json, Value};

fn agents_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agents"))
}

/// The book's sources, every chapter.
fn docs() -> String {
    let mut text = String::new();
    let mut pending = vec![PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/src"
    ))];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                text.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    text
}

/// The server the agents start, as `dsh-bash` in the directory this
/// returns (first on the agent's PATH): the binary, its log
/// (`RUST_LOG=info`) appended to `server.log` beside the workspace,
/// printed with the agent's own when a test fails.
fn logged_server(workspace: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = workspace.parent().unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\nRUST_LOG=info exec '{}' \"$@\" 2>>'{}'\n",
        confined::binary().display(),
        dir.join("server.log").display()
    );
    let wrapper = bin.join("dsh-bash");
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// PATH with `logged_server`'s directory first.
fn path_with_server(workspace: &Path) -> std::ffi::OsString {
    let mut dirs = vec![logged_server(workspace)];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// What the servers the agent started logged.
fn server_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
}

/// The book's fenced block that follows the marker
/// `<!-- agent snippet: NAME -->` (once in the book), with the placeholder
/// paths replaced.
fn snippet(name: &str, workspace: &Path) -> String {
    let docs = docs();
    let marker = format!("<!-- agent snippet: {name} -->");
    assert_eq!(
        docs.matches(&marker).count(),
        1,
        "the book names the snippet {name} once"
    );
    let after = &docs[docs.find(&marker).unwrap() + marker.len()..];
    let fence = after.find("```").unwrap();
    let body = &after[fence..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let body = &body[..body.find("```").unwrap()];
    body.lines()
        .map(|line| line.strip_prefix("  ").unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("/path/to/project", workspace.to_str().unwrap())
        .replace(
            "/path/to/approve-dsh-bash",
            agents_dir().join("approve.sh").to_str().unwrap(),
        )
}

/// The installed agent `name` (`codex` or `claude`), or a loud skip.
fn agent(name: &str) -> Option<PathBuf> {
    let program = agents_dir().join("node_modules/.bin").join(name);
    let install = format!("npm install --prefix {}", agents_dir().display());
    let runs = Command::new(&program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success());
    common::client_or_skip(runs, &format!("the real agent {name}"), &install).then_some(program)
}

/// A running fake model server and the file it records requests in.
struct FakeModel {
    child: Child,
    port: u16,
    record: PathBuf,
}

impl FakeModel {
    fn start(dir: &Path, calls: &[Value]) -> FakeModel {
        let script = dir.join("script.json");
        std::fs::write(&script, json!({ "calls": calls }).to_string()).unwrap();
        let record = dir.join("record.jsonl");
        let mut child = Command::new("python3")
            .arg(agents_dir().join("fake_model.py"))
            .arg(&script)
            .arg(&record)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the fake model prints its port");
        FakeModel {
            child,
            port,
            record,
        }
    }

    /// Every request the agent sent, in order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command` to its end (120 s fail-safe), returning its output.
fn finish(mut command: Command, what: &str) -> String {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{what} failed:\n{text}");
    text
}

/// A scratch directory for one agent run: outside /tmp (the agents'
/// homes must not be under the sandbox's private /tmp), with a workspace
/// and a directory outside it.
fn scratch(agent: &str) -> PathBuf {
    let dir = confined::base().join(format!("agent-{agent}"));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["workspace", "outside", "home"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    dir
}

/// The script both agents play, as (tool, arguments).
fn calls(outside: &Path) -> Vec<Value> {
    let bash = |arguments: Value| json!({ "tool": "bash", "arguments": arguments });
    let accepted = outside.join("accepted");
    let declined = outside.join("declined");
    vec![
        bash(
            json!({"command": "echo hello; echo err >&2; exit 3", "description": "print and fail"}),
        ),
        bash(json!({"command": "seq 1 5000", "description": "count"})),
        bash(
            json!({"command": "seq 1 200000; sleep 10", "description": "count, then hang", "timeoutMs": 3000}),
        ),
        bash(
            json!({"command": r"printf 'a\033[2K\033[1A\033]52;c;aGk=\007b\033[31mred\033[0m\n'", "description": "escapes"}),
        ),
        bash(
            json!({"command": "exec 9>bg.lock; flock 9; touch bg.locked; echo bg-out", "description": "background", "run_in_background": true}),
        ),
        bash(
            json!({"command": "until [ -e bg.locked ]; do sleep 0.05; done; flock bg.lock echo waited", "description": "wait for it"}),
        ),
        bash(json!({"command": "echo last", "description": "last"})),
        bash(
            json!({"command": format!("echo yes > {} && echo wrote-accepted", accepted.display()),
            "description": "write outside", "sandbox_permissions": "danger-full-access",
            "justification": "the test asks to write outside the workspace: accept"}),
        ),
        bash(
            json!({"command": format!("echo yes > {} && echo wrote-declined", declined.display()),
            "description": "write outside", "sandbox_permissions": "danger-full-access",
            "justification": "the test asks to write outside the workspace: decline"}),
        ),
        bash(json!({"command": "touch made.txt", "description": "make a file"})),
        bash(
            json!({"command": "curl -sS --max-time 10 https://pypi.org/simple/", "description": "reach the network"}),
        ),
        bash(
            json!({"command": "echo alpha-line; touch alpha.done", "description": "background", "run_in_background": true}),
        ),
        bash(
            json!({"command": "until [ -e alpha.done ]; do sleep 0.05; done", "description": "wait for it"}),
        ),
        json!({"tool": "bash_output", "arguments": {"task_id": "bash-2"}}),
        // The answer to the read before is "lost": read it again.
        json!({"tool": "bash_output", "arguments": {"task_id": "bash-2", "since": "0:0"}}),
    ]
}

/// Our `bash` description as the agent gave it to its model: the longest
/// description in any request that opens as ours does.
fn our_description(requests: &[Value]) -> String {
    fn walk(value: &Value, found: &mut String) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(text)) = map.get("description") {
                    if text.starts_with("Run a command with `bash -c`.") && text.len() > found.len()
                    {
                        found.clone_from(text);
                    }
                }
                map.values().for_each(|v| walk(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let mut found = String::new();
    for request in requests {
        walk(&request["body"], &mut found);
    }
    found
}

/// The text of a tool result as the agent gave it to the model: a string,
/// or the texts of a list of content items, joined.
fn text_of(output: &Value) -> String {
    match output {
        Value::String(text) => text.clone(),
        Value::Array(items) => items
            .iter()
            .map(|item| match item.get("text") {
                Some(Value::String(text)) => text.clone(),
                _ => item.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// Codex: the `function_call_output` of each scripted call, in order, from
/// the last request (which carries the whole conversation).
fn codex_results(requests: &[Value], calls: usize) -> Vec<String> {
    let last = requests
        .iter()
        .rev()
        .find(|r| r["path"].as_str().is_some_and(|p| p.contains("/responses")))
        .expect("codex asked its model");
    let items = last["body"]["input"].as_array().unwrap();
    (0..calls)
        .map(|n| {
            let id = format!("call_{n}");
            let item = items
                .iter()
                .find(|i| i["type"] == "function_call_output" && i["call_id"] == id.as_str())
                .unwrap_or_else(|| panic!("no result of {id} reached the model"));
            text_of(&item["output"])
        })
        .collect()
}

/// Claude Code: the `tool_result` of each scripted call, in order.
fn claude_results(requests: &[Value], calls: usize) -> Vec<String> {
    let last = requests
        .iter()
        .rev()
        .find(|r| r["path"].as_str().is_some_and(|p| p.contains("/messages")))
        .expect("claude asked its model");
    let blocks: Vec<&Value> = last["body"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .collect();
    (0..calls)
        .map(|n| {
            let id = format!("toolu_call_{n}");
            let block = blocks
                .iter()
                .find(|b| b["tool_use_id"] == id.as_str())
                .unwrap_or_else(|| panic!("no result of {id} reached the model"));
            text_of(&block["content"])
        })
        .collect()
}

/// Runs Codex CLI (`codex exec`) on the script; what its model received.
fn run_codex(program: &Path, dir: &Path, calls: &[Value]) -> (Vec<String>, String) {
    let model = FakeModel::start(dir, calls);
    let home = dir.join("home/codex");
    std::fs::create_dir_all(&home).unwrap();
    // The model provider is the test's; the server entry is the book's.
    let config = format!(
        "model = \"gpt-5.5\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nwire_api = \"responses\"\n\n{}\n",
        model.port,
        snippet("codex", &dir.join("workspace")),
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    let mut command = Command::new(program);
    command
        .args(["exec", "--skip-git-repo-check", "run the script"])
        .current_dir(dir.join("workspace"))
        // A home of its own: Codex starts the user's login shell (a
        // snapshot of its environment), which must not run the machine's
        // start-up files (pyenv's rehash there leaves a lock behind when
        // Codex exits mid-way, and every later ssh login waits on it).
        .env("HOME", dir.join("home"))
        .env("CODEX_HOME", &home)
        .env("PATH", path_with_server(&dir.join("workspace")))
        .env("OPENAI_API_KEY", "dummy");
    let log = finish(command, "codex exec");
    println!("{log}\n--- the server's log ---\n{}", server_log(dir));
    let requests = model.requests();
    (
        codex_results(&requests, calls.len()),
        our_description(&requests),
    )
}

/// Runs Claude Code (`claude -p`) on the script; what its model received.
fn run_claude(program: &Path, dir: &Path, calls: &[Value]) -> (Vec<String>, String) {
    let model = FakeModel::start(dir, calls);
    let mcp = dir.join("mcp.json");
    std::fs::write(&mcp, snippet("claude-mcp", &dir.join("workspace"))).unwrap();
    let settings = dir.join("settings.json");
    std::fs::write(
        &settings,
        snippet("claude-settings", &dir.join("workspace")),
    )
    .unwrap();
    let tools = "mcp__dsh-bash__bash,mcp__dsh-bash__bash_output,mcp__dsh-bash__bash_kill";
    let mut command = Command::new(program);
    command
        .args([
            "-p",
            "run the script",
            "--strict-mcp-config",
            "--mcp-config",
        ])
        .arg(&mcp)
        .arg("--settings")
        .arg(&settings)
        .args(["--allowedTools", tools])
        .current_dir(dir.join("workspace"))
        .env("HOME", dir.join("home"))
        .env(
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", model.port),
        )
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("PATH", path_with_server(&dir.join("workspace")))
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1");
    let log = finish(command, "claude -p");
    println!("{log}\n--- the server's log ---\n{}", server_log(dir));
    let requests = model.requests();
    (
        claude_results(&requests, calls.len()),
        our_description(&requests),
    )
}

/// The structured result inside what the model read (Codex prefixes its
/// own "Wall time" lines; Claude Code gives the JSON alone).
fn structured(raw: &str) -> Value {
    let json = &raw[raw
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {raw:?}"))..];
    serde_json::from_str(json).unwrap_or_else(|err| panic!("{err}: {raw:?}"))
}

/// The numbers of a `seq` stream in `text`, in order, each run of
/// consecutive ones as (first, last).
fn runs(text: &str) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for n in text.lines().filter_map(|line| line.parse::<u64>().ok()) {
        match runs.last_mut() {
            Some(run) if run.1 + 1 == n => run.1 = n,
            _ => runs.push((n, n)),
        }
    }
    runs
}

/// The output once: what the model read is the JSON of the rendered text
/// and a few short facts, nothing repeated.
fn once(raw: &str, facts: usize) {
    let text = structured(raw)["text"].as_str().unwrap().to_owned();
    let text_cost = serde_json::to_string(&text).unwrap().len();
    assert!(
        raw.len() <= text_cost + facts,
        "{} bytes for {text_cost} bytes of text: {raw:.600}",
        raw.len()
    );
}

/// What every agent's model must have read for the script of [`calls`];
/// `accepts`: whether the agent's approval answered the first escalation
/// question yes.
fn check(results: &[String], outside: &Path, accepts: bool) {
    // A small result is small: the streams and the exit code, once.
    let small = &results[0];
    assert!(small.len() <= 200, "{} bytes: {small}", small.len());
    let s = structured(small);
    assert_eq!(s["text"], "hello\n[stderr]\nerr\n[exit code: 3]", "{small}");
    assert_eq!(s["exit_code"], 3, "{small}");
    assert_eq!(small.matches("hello").count(), 1, "{small}");
    assert_eq!(small.matches("err").count(), 2, "{small}");

    // seq 1 5000 reaches the model whole, inline, once.
    let whole = &results[1];
    let s = structured(whole);
    let seq: String = (1..=5000).map(|n| format!("{n}\n")).collect();
    assert_eq!(s["text"], seq.as_str(), "{whole:.300}");
    assert_eq!(whole.matches("\\n4999\\n").count(), 1);
    once(whole, 200);

    // A timeout and a truncation (with the complete file) are in the first
    // 2 KB; the stream is one head and one contiguous tail to its end,
    // around our marker: no hole of the agent's own.
    let long = &results[2];
    let s = structured(long);
    let mut end = 2048.min(long.len());
    while !long.is_char_boundary(end) {
        end -= 1;
    }
    let first = &long[..end];
    let spill = s["output_files"][0]
        .as_str()
        .expect("the complete output is named");
    for needle in [
        "timed out after 3000 ms",
        "output truncated: 1288895 bytes",
        spill,
    ] {
        assert!(
            first.contains(needle),
            "{needle:?} not in the first 2 KB: {first}"
        );
    }
    let text = s["text"].as_str().unwrap();
    let runs = runs(text);
    assert_eq!(runs.len(), 2, "one head, one tail: {runs:?}");
    assert_eq!((runs[0].0, runs[1].1), (1, 200_000), "{runs:?}");
    let marker = text.find("\n[… ").expect("the cut is marked");
    assert!(
        text[..marker].ends_with(&format!("\n{}", runs[0].1)),
        "{text:.3000}"
    );
    assert!(text[marker..].contains(&format!("left out …]\n{}\n", runs[1].0)));
    assert!(text.len() <= 26_000, "{} bytes of text", text.len());
    once(long, 400);

    // No control sequence reaches the model, and it is told they went.
    let escapes = &results[3];
    let text = structured(escapes)["text"].as_str().unwrap().to_owned();
    assert!(
        !text.contains(['\u{1b}', '\u{7}']) && !escapes.contains("\\u001b"),
        "{escapes}"
    );
    assert!(
        text.contains("red") && text.contains("terminal control sequences removed"),
        "{text}"
    );

    // The background task's completion notice arrives once, in a later
    // result.
    let task = structured(&results[4])["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let notice = format!("task {task} finished");
    assert!(!results[4].contains(&notice));
    let carried = results[5..7].iter().filter(|r| r.contains(&notice)).count();
    assert_eq!(carried, 1, "{:?}", &results[5..7]);
    assert!(results[5].contains("waited") && results[6].contains("last"));

    // The escalations: one answered as the agent's approval said, one
    // declined; a declined command did not run.
    let (yes, no) = (&results[7], &results[8]);
    assert_eq!(outside.join("accepted").exists(), accepts, "{yes}");
    assert_eq!(yes.contains("wrote-accepted"), accepts, "{yes}");
    if !accepts {
        assert!(yes.contains("rejected"), "{yes}");
    }
    assert!(!outside.join("declined").exists(), "{no}");
    assert!(
        no.contains("rejected") && !no.contains("wrote-declined"),
        "{no}"
    );

    // What a command changed, in one line.
    assert!(
        results[9].contains("[changed: created made.txt]"),
        "{}",
        results[9]
    );
    // A network the policy keeps off says so, and how to ask for a host.
    let offline = &results[10];
    assert!(
        offline
            .contains("so this failure is the policy, not an outage (its output names pypi.org)")
            && offline.contains("allow_hosts"),
        "{offline}"
    );
    // A read asked again by position gives the same output again.
    assert_eq!(
        structured(&results[11])["task_id"],
        "bash-2",
        "{}",
        results[11]
    );
    let (read, again) = (structured(&results[13]), structured(&results[14]));
    assert!(
        read["text"].as_str().unwrap().starts_with("alpha-line\n"),
        "{read}"
    );
    assert_eq!(read["text"], again["text"], "{read} / {again}");
    assert_eq!(read["position"], "11:0", "{read}");
}

/// The `bash` description the agent's model read: this server's (the
/// workspace's changes are listed, the sandbox is on), and small.
fn check_description(description: &str) {
    // (Claude Code writes "…" as "...".)
    for said in [
        "follows `cd`",
        "\"[changed: ",
        "Sandboxed: writes only the workspace",
    ] {
        assert!(description.contains(said), "{said}: {description}");
    }
    assert!(
        description.len() <= 1_200,
        "{} bytes: {description}",
        description.len()
    );
}

#[test]
fn codex_cli_gives_its_model_compact_clean_whole_results() {
    let Some(program) = agent("codex") else {
        return;
    };
    if !confined::usable_or_skip(&["--sandbox", "workspace-write"], "the real agents") {
        return;
    }
    let dir = scratch("codex");
    let calls = calls(&dir.join("outside"));
    let (results, description) = run_codex(&program, &dir, &calls);
    // `codex exec` has nobody to ask: it declines every question.
    check(&results, &dir.join("outside"), false);
    check_description(&description);
}

#[test]
fn claude_code_gives_its_model_compact_clean_whole_results() {
    let Some(program) = agent("claude") else {
        return;
    };
    if !confined::usable_or_skip(&["--sandbox", "workspace-write"], "the real agents") {
        return;
    }
    let dir = scratch("claude");
    let calls = calls(&dir.join("outside"));
    let (results, description) = run_claude(&program, &dir, &calls);
    // The book's Elicitation hook runs the test's policy: accept the
    // first question, decline the second.
    check(&results, &dir.join("outside"), true);
    check_description(&description);
}
