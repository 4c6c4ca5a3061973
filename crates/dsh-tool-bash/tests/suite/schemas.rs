//! TSC-01..11: the tools as data.

use std::sync::Arc;

use dsh_bash::SandboxMode;
use dsh_tool_bash::{BashTools, STANDING_INSTRUCTION};

use super::fixture::Recording;

#[test]
fn four_tools_with_escalation_fields_only_under_a_confining_executor() {
    let plain = BashTools::new(Recording::new(None));
    let tools = plain.tools();
    let names: Vec<_> = tools.iter().map(|t| t.name).collect();
    assert_eq!(names, ["bash", "bash_output", "bash_write", "bash_kill"]);
    let bash = &tools[0];
    assert!(bash.parameters["properties"]
        .get("sandbox_permissions")
        .is_none());
    assert!(!bash.description.contains("sandbox_permissions"));
    assert_eq!(
        tools[1].parameters["required"],
        serde_json::json!(["task_id"])
    );
    assert!(tools[1].annotations.read_only && !tools[1].annotations.destructive);
    // bash_write types into a task: it changes things.
    assert_eq!(
        tools[2].parameters["required"],
        serde_json::json!(["task_id"])
    );
    assert!(tools[2].parameters["properties"]["keys"]["items"]["enum"]
        .as_array()
        .is_some_and(|keys| keys.contains(&serde_json::json!("C-c"))));
    assert!(!tools[2].annotations.read_only && tools[2].annotations.destructive);
    assert!(bash.annotations.destructive);

    for default in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let confined = BashTools::new(Recording::new(Some(default)));
        let bash = &confined.tools()[0];
        let enumerated = &bash.parameters["properties"]["sandbox_permissions"]["enum"];
        // Only modes strictly wider than the standing one are offered.
        let wider = if default == SandboxMode::ReadOnly {
            serde_json::json!(["workspace-write", "danger-full-access"])
        } else {
            serde_json::json!(["danger-full-access"])
        };
        assert_eq!(*enumerated, wider, "{default}");
        assert!(bash.parameters["properties"].get("justification").is_some());
        assert!(bash.description.contains("sandbox_permissions"));
        // What the mode means is said.
        assert!(
            bash.description.contains("Sandboxed: "),
            "{}",
            bash.description
        );
    }
}

#[test]
fn descriptions_are_byte_stable_and_cover_the_essentials() {
    let first = BashTools::new(Recording::new(Some(SandboxMode::ReadOnly))).tools();
    let second = BashTools::new(Arc::new(Recording {
        inner: Recording::new(None).inner.clone(),
        mode: Some(SandboxMode::ReadOnly),
        requests: Default::default(),
        ran: Default::default(),
    }))
    .tools();
    assert_eq!(first, second);
    let text = &first[0].description;
    for needle in [
        "workdir",
        "[exit code: N]",
        "[sandbox: …]",
        "full output",
        "run_in_background",
        "bash_output",
        "bash_kill",
        "justification",
        "a refusal is final",
    ] {
        assert!(text.contains(needle), "missing {needle:?}");
    }
    assert!(STANDING_INSTRUCTION.contains("[exit code: N]"));
}
