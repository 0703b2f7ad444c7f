use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::exec::local::{LocalConfig, LocalExecutor};
use crate::tools::ToolContext;

fn tool(dir: &tempfile::TempDir, shell: ShellMode, native: bool) -> BashTool {
    let executor = LocalExecutor::new(LocalConfig {
        workdir: dir.path().to_path_buf(),
        shell,
        ..Default::default()
    });
    BashTool::new(
        Arc::new(executor),
        Policy::default(),
        BashSettings {
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(10),
            max_output_bytes: 1000,
            shell,
            native,
        },
    )
}

fn ctx() -> ToolContext {
    ToolContext {
        cancel: CancellationToken::new(),
        full_output: None,
    }
}

#[test]
fn the_spec_states_the_shell_and_offers_anthropics_tool_only_when_persistent() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = tool(&dir, ShellMode::Fresh, true).spec();
    assert_eq!(fresh.native, None);
    assert!(
        fresh.description.contains("fresh shell"),
        "{}",
        fresh.description
    );
    assert_eq!(fresh.input_schema["required"], json!(["command"]));
    assert!(fresh.input_schema["properties"].get("restart").is_none());

    let persistent = tool(&dir, ShellMode::Persistent, true).spec();
    assert_eq!(
        persistent.native,
        Some(json!({"type": "bash_20250124", "name": "bash"}))
    );
    assert!(persistent.description.contains("carry over"));
    assert!(persistent.description.contains("restart"));
    assert_eq!(
        persistent.input_schema["properties"]["restart"]["type"],
        "boolean"
    );
    assert_eq!(persistent.input_schema["required"], json!([]));

    // An OpenAI-compatible model: the function tool, with `restart`.
    let function = tool(&dir, ShellMode::Persistent, false).spec();
    assert_eq!(function.native, None);
    assert_eq!(
        function.input_schema["properties"]["restart"]["type"],
        "boolean"
    );
}

#[tokio::test]
async fn restart_drops_the_state_and_answers_as_anthropics_tool_does() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let t = tool(&dir, ShellMode::Persistent, true);
    let out = t.call(&json!({"command": "mkdir d; cd d"}), &ctx()).await;
    assert!(!out.is_error, "{}", out.content);
    let out = t.call(&json!({"command": "pwd"}), &ctx()).await;
    assert_eq!(out.content, format!("{}/d\n[exit code: 0]", ws.display()));

    let out = t.call(&json!({"restart": true}), &ctx()).await;
    assert_eq!((out.content.as_str(), out.is_error), (RESTARTED, false));
    assert!(out.exec.is_none());
    let out = t.call(&json!({"command": "pwd"}), &ctx()).await;
    assert_eq!(out.content, format!("{}\n[exit code: 0]", ws.display()));

    let out = t
        .call(&json!({"restart": true, "command": "ls"}), &ctx())
        .await;
    assert!(out.content.starts_with(RESTARTED) && out.content.contains("not run"));
    let out = t.call(&json!({"restart": "yes"}), &ctx()).await;
    assert!(
        out.is_error && out.content.contains("'restart'"),
        "{}",
        out.content
    );
    // `restart: false` is no restart: the command is needed.
    let out = t.call(&json!({"restart": false}), &ctx()).await;
    assert!(
        out.is_error && out.content.contains("'command'"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn a_fresh_shell_knows_no_restart() {
    let dir = tempfile::tempdir().unwrap();
    let t = tool(&dir, ShellMode::Fresh, false);
    let out = t.call(&json!({"restart": true}), &ctx()).await;
    assert!(out.is_error && out.content.contains("missing required field 'command'"));
}
