//! `deploy/`: the Containerfile and the Kubernetes example cannot be built
//! or applied here, so they are parsed (the Containerfile's instructions by
//! hand, the YAML by PyYAML) and checked for what they promise — a build
//! stage and an unprivileged runtime stage, a token from a Secret, a
//! readiness probe on the port the server listens on — and the server is
//! started with their very arguments.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use common::crds::validated;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file)
}

/// The Containerfile's instructions: (keyword, arguments), continuation
/// lines joined, comments dropped.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (keyword, rest) = current.split_once(char::is_whitespace).unwrap();
        out.push((keyword.to_owned(), rest.trim().to_owned()));
        current.clear();
    }
    assert!(current.is_empty(), "a continuation runs off the end");
    out
}

/// Starts the server with `args` (the listen address and workdir made
/// local), checks it listens and answers its health probe.
fn starts_with(args: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = args.to_vec();
    for (flag, value) in [
        ("--listen", "127.0.0.1:0".to_owned()),
        ("--workdir", dir.path().display().to_string()),
    ] {
        let at = args.iter().position(|a| a == flag).unwrap();
        args[at + 1] = value;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh-bash"))
        .args(&args)
        .env("DSH_BASH_TOKEN", "a-token-from-the-secret-0123456789")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    /// Killed when dropped, a failed assertion included.
    struct Server(std::process::Child);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut stderr = child.stderr.take().unwrap();
    let _server = Server(child);
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    let text = loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if text.contains("/mcp\n") {
            break text;
        }
        if stderr.read(&mut byte).unwrap() == 0 {
            panic!("the server did not start with {args:?}: {text}");
        }
        seen.push(byte[0]);
    };
    let address = text
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_owned();
    let answer = common::listening::exchange(
        &address,
        &format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        Duration::from_secs(30),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn the_containerfile_builds_in_one_stage_and_runs_unprivileged_in_another() {
    let text = std::fs::read_to_string(deploy("Containerfile")).unwrap();
    let steps = instructions(&text);
    const KNOWN: [&str; 18] = [
        "FROM",
        "RUN",
        "CMD",
        "LABEL",
        "EXPOSE",
        "ENV",
        "ADD",
        "COPY",
        "ENTRYPOINT",
        "VOLUME",
        "USER",
        "WORKDIR",
        "ARG",
        "ONBUILD",
        "STOPSIGNAL",
        "HEALTHCHECK",
        "SHELL",
        "MAINTAINER",
    ];
    for (keyword, _) in &steps {
        assert!(
            KNOWN.contains(&keyword.as_str()),
            "unknown instruction {keyword}"
        );
    }
    let stages: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, (k, _))| k == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    assert_eq!(stages[0], 0, "it starts with FROM");
    assert!(steps[0].1.ends_with(" AS build"), "{:?}", steps[0]);
    let build = &steps[stages[0]..stages[1]];
    assert!(build
        .iter()
        .any(|(k, a)| k == "RUN" && a.contains("cargo build --release --locked -p dsh-bash-cli")));
    let runtime = &steps[stages[1]..];
    let installs = runtime
        .iter()
        .find(|(k, a)| k == "RUN" && a.contains("apt-get install"))
        .map(|(_, a)| a.as_str())
        .unwrap();
    for package in ["bash", "bubblewrap"] {
        assert!(
            installs.split_whitespace().any(|w| w == package),
            "{package} is not installed"
        );
    }
    assert!(runtime.iter().any(|(k, a)| k == "COPY"
        && a.starts_with("--from=build ")
        && a.contains("target/release/dsh-bash")));
    let user = runtime
        .iter()
        .rev()
        .find(|(k, _)| k == "USER")
        .map(|(_, a)| a)
        .unwrap();
    let uid = user.split(':').next().unwrap();
    assert!(uid != "root" && uid != "0", "runs as {user}");
    let exec_form = |keyword: &str| -> Vec<String> {
        let (_, args) = runtime.iter().rev().find(|(k, _)| k == keyword).unwrap();
        serde_json::from_str(args).unwrap_or_else(|e| panic!("{keyword} is not exec form: {e}"))
    };
    let entrypoint = exec_form("ENTRYPOINT");
    let cmd = exec_form("CMD");
    assert!(entrypoint[0].ends_with("/dsh-bash"), "{entrypoint:?}");
    let args: Vec<String> = entrypoint[1..].iter().chain(&cmd).cloned().collect();
    let listen = &args[args.iter().position(|a| a == "--listen").unwrap() + 1];
    let port = listen.rsplit(':').next().unwrap();
    let exposed = runtime
        .iter()
        .find(|(k, _)| k == "EXPOSE")
        .map(|(_, a)| a.as_str());
    assert_eq!(exposed, Some(port), "EXPOSE and --listen disagree");
    starts_with(&args);
    // `COPY . .` must not send the build output or the history along.
    for ignore in [".containerignore", ".dockerignore"] {
        let text = std::fs::read_to_string(deploy("..").join(ignore)).unwrap();
        for excluded in ["target/", ".git/"] {
            assert!(
                text.lines().any(|l| l.trim() == excluded),
                "{ignore} does not exclude {excluded}"
            );
        }
    }
}

/// The YAML documents as JSON, through PyYAML.
fn yaml_documents(path: &Path) -> Option<Vec<Value>> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(path)
        .output();
    match out {
        Ok(out) if out.status.success() => Some(serde_json::from_slice(&out.stdout).unwrap()),
        other => {
            let why = format!("cannot parse YAML with python3 and PyYAML: {other:?}");
            assert!(
                std::env::var("DSH_TEST_REQUIRE_MCP_CLIENT").is_err(),
                "{why} (DSH_TEST_REQUIRE_MCP_CLIENT is set)"
            );
            eprintln!("SKIP the Kubernetes example: {why}");
            None
        }
    }
}

/// The container's first port is the one `args` listen on, and both its
/// probes ask that port's `/healthz`; the port.
fn probes_the_port_it_listens_on<'a>(container: &'a Value, args: &[String]) -> &'a Value {
    let port = &container["ports"][0];
    let listen = &args[args.iter().position(|a| a == "--listen").unwrap() + 1];
    assert_eq!(
        listen.rsplit(':').next().unwrap(),
        port["containerPort"].to_string()
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        let probe = &container[probe]["httpGet"];
        assert_eq!(probe["path"], "/healthz");
        assert_eq!(probe["port"], port["name"]);
    }
    port
}

#[test]
fn the_kubernetes_example_takes_its_token_from_a_secret_and_probes_the_server() {
    let Some(documents) = yaml_documents(&deploy("kubernetes.yaml")) else {
        return;
    };
    let kinds: Vec<&str> = documents
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Deployment", "Service"]);
    let deployment = &documents[0];
    assert_eq!(deployment["apiVersion"], "apps/v1");
    assert_eq!(
        deployment["spec"]["replicas"], 1,
        "sessions live in one server's memory"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        deployment["spec"]["template"]["metadata"]["labels"]
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    let env = container["env"].as_array().unwrap();
    let token = env.iter().find(|e| e["name"] == "DSH_BASH_TOKEN").unwrap();
    assert!(
        token["valueFrom"]["secretKeyRef"]["name"].is_string(),
        "{token}"
    );
    assert!(
        token.get("value").is_none(),
        "the token is written in the manifest"
    );
    let port = probes_the_port_it_listens_on(container, &args);
    let service = &documents[1];
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], port["name"]);
    let mut argv = vec!["mcp".to_owned()];
    argv.extend(args);
    starts_with(&argv);
}

#[test]
fn the_agent_sandbox_manifests_meet_the_crds_and_serve_with_their_own_arguments() {
    let Some(documents) = yaml_documents(&deploy("agent-sandbox/dsh-bash.yaml")) else {
        return;
    };
    let Some(verdicts) = validated(&documents) else {
        return;
    };
    assert_eq!(verdicts, ["ok SandboxTemplate", "ok SandboxWarmPool"]);
    // The validator refuses what the CRDs refuse.
    let mut broken = documents.clone();
    broken[1]["spec"]["replicas"] = "two".into();
    broken[0]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("podTemplate");
    let verdicts = validated(&broken).unwrap();
    assert!(
        verdicts[0].starts_with("invalid SandboxTemplate: 'podTemplate' is a required property"),
        "{verdicts:?}"
    );
    assert!(
        verdicts[1].starts_with("invalid SandboxWarmPool"),
        "{verdicts:?}"
    );

    let (template, pool) = (&documents[0], &documents[1]);
    assert_eq!(
        pool["spec"]["sandboxTemplateRef"]["name"],
        template["metadata"]["name"]
    );
    let pod = &template["spec"]["podTemplate"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["automountServiceAccountToken"], false);
    // The binary comes from the project's image into a volume the agent's
    // image mounts read-only, and is what the container runs.
    let init = &pod["initContainers"][0];
    let volume = init["volumeMounts"][0]["name"].as_str().unwrap();
    let container = &pod["containers"][0];
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume)
        .unwrap();
    assert_eq!(mount["readOnly"], true);
    let command: Vec<String> = serde_json::from_value(container["command"].clone()).unwrap();
    assert!(
        command[0].starts_with(mount["mountPath"].as_str().unwrap()),
        "{command:?}"
    );
    assert!(
        init["command"][2].as_str().unwrap().contains(&command[0]),
        "{init}"
    );
    let token = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "DSH_BASH_TOKEN")
        .unwrap();
    assert!(
        token["valueFrom"]["secretKeyRef"]["name"].is_string(),
        "{token}"
    );
    probes_the_port_it_listens_on(container, &command);
    starts_with(&command[1..]);
}
