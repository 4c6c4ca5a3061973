//! The agent-sandbox CRDs vendored in `deploy/agent-sandbox/crds`: what
//! the manifests and the claims a client makes are validated against.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Validates every document of `manifest` against the `v1beta1` schema of
/// its kind's CRD in `deploy/agent-sandbox/crds` (Python's jsonschema);
/// a line per document: `ok KIND` or `invalid KIND: why`.
const VALIDATE: &str = r#"
import glob, json, sys, yaml, jsonschema
schemas = {}
for path in glob.glob(sys.argv[1] + '/*.yaml'):
    crd = yaml.safe_load(open(path))
    for version in crd['spec']['versions']:
        if version['name'] == 'v1beta1':
            schemas[crd['spec']['names']['kind']] = version['schema']['openAPIV3Schema']
for doc in json.load(sys.stdin):
    schema = schemas.get(doc.get('kind'))
    if schema is None:
        print('invalid %s: no CRD for this kind' % doc.get('kind'))
        continue
    try:
        jsonschema.validate(doc, schema)
        print('ok ' + doc['kind'])
    except jsonschema.ValidationError as err:
        print('invalid %s: %s at %s' % (doc['kind'], err.message, list(err.absolute_path)))
"#;

pub fn validated(documents: &[Value]) -> Option<Vec<String>> {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(VALIDATE)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/agent-sandbox/crds"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(documents).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        let why = format!(
            "cannot validate with python3's jsonschema (pip install jsonschema): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            std::env::var("DSH_TEST_REQUIRE_MCP_CLIENT").is_err(),
            "{why} (DSH_TEST_REQUIRE_MCP_CLIENT is set)"
        );
        eprintln!("SKIP the agent-sandbox manifests: {why}");
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect(),
    )
}
