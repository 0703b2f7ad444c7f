//! The tool-input path under arbitrary JSON: the bash tool's parsing and
//! the registry's dispatch never panic, and whatever runs gets a timeout
//! within the configured maximum.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use proptest::prelude::*;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::bash::{BashSettings, BashTool};
use super::policy::Policy;
use super::{Registry, ToolContext};
use crate::arbitrary_json::{deep, json, string, tool_input};
use crate::exec::{ExecError, ExecOutput, ExecRequest, Executor, Extras, Owner, SandboxInfo, Work};
use crate::model::ToolCall;

const MAX_TIMEOUT: Duration = Duration::from_secs(37);

/// Runs nothing; remembers the timeout of every request.
#[derive(Default)]
struct Recorder {
    timeouts: Mutex<Vec<Duration>>,
}

/// What [`Recorder`] says it is.
static INFO: std::sync::LazyLock<SandboxInfo> = std::sync::LazyLock::new(|| SandboxInfo {
    kind: "recorder",
    workdir: "/workspace".into(),
    ..SandboxInfo::default()
});

/// The refusal of every file operation: this sandbox has no files.
fn no_files() -> ExecError {
    ExecError::PathOutside("reach files (it only records timeouts)")
}

#[async_trait]
impl Executor for Recorder {
    fn info(&self) -> &SandboxInfo {
        &INFO
    }

    fn extras(&self) -> Extras<'_> {
        Extras::default()
    }

    async fn execute(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        if let Ok(mut t) = self.timeouts.lock() {
            t.push(req.timeout);
        }
        Ok(ExecOutput {
            output: "ran\n".into(),
            exit_code: Some(0),
            ..ExecOutput::default()
        })
    }

    async fn upload(&self, _: &std::path::Path, _: &str, _: Owner) -> Result<(), ExecError> {
        Err(no_files())
    }

    async fn read_file(&self, _path: &str, _max: u64) -> Result<Vec<u8>, ExecError> {
        Err(no_files())
    }

    async fn write_file(&self, _path: &str, _data: &[u8]) -> Result<(), ExecError> {
        Err(no_files())
    }

    async fn download_dir(&self, _: &str, _: &std::path::Path, _: u64) -> Result<(), ExecError> {
        Err(no_files())
    }

    async fn close(&self, _: Work) -> Result<(), ExecError> {
        Ok(())
    }
}

fn registry(recorder: Arc<Recorder>) -> Registry {
    let mut r = Registry::new();
    r.register(Box::new(BashTool::new(
        recorder,
        Policy::default(),
        BashSettings {
            default_timeout: Duration::from_secs(5),
            max_timeout: MAX_TIMEOUT,
            max_output_bytes: 1000,
            shell: crate::exec::shell::ShellMode::Fresh,
            native: false,
        },
    )));
    r
}

fn ctx() -> ToolContext {
    ToolContext {
        cancel: CancellationToken::new(),
        full_output: None,
    }
}

/// Dispatches one call and checks what came back.
fn check_call(name: &str, input: &Value, raw_input: Option<&str>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let recorder = Arc::new(Recorder::default());
    let tools = registry(recorder.clone());
    let call = ToolCall {
        id: "call_1",
        name,
        input,
        raw_input,
    };
    let out = rt.block_on(tools.dispatch(call, &ctx()));
    prop_assert!(!out.content.is_empty());
    let timeouts = recorder
        .timeouts
        .lock()
        .map(|t| t.clone())
        .unwrap_or_default();
    match out.exec {
        Some(_) => {
            prop_assert_eq!(timeouts.len(), 1);
            prop_assert!(timeouts[0] <= MAX_TIMEOUT, "{:?}", timeouts);
            prop_assert!(input.get("command").is_some_and(Value::is_string));
        }
        None => {
            prop_assert!(timeouts.is_empty(), "ran yet reported no output");
            prop_assert!(out.is_error);
            prop_assert!(out.content.starts_with("error:"), "{}", out.content);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn bash_takes_any_tool_input(input in tool_input()) {
        check_call("bash", &input, None)?;
    }

    #[test]
    fn bash_takes_any_json(input in prop_oneof![json(), deep()]) {
        check_call("bash", &input, None)?;
    }

    #[test]
    fn dispatch_takes_any_call(
        name in string(),
        input in prop_oneof![tool_input(), json()],
        raw in prop::option::of(any::<String>()),
    ) {
        check_call(&name, &input, raw.as_deref())?;
    }
}

#[test]
fn odd_timeouts_are_clamped_or_refused() {
    use serde_json::json;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for (timeout, runs, expect) in [
        (json!(1e20), Some(MAX_TIMEOUT), "the command ran with 37s"),
        (json!(1e308), Some(MAX_TIMEOUT), "the command ran with 37s"),
        (json!(u64::MAX), Some(MAX_TIMEOUT), "above the maximum"),
        (
            json!(2.5),
            Some(Duration::from_millis(2500)),
            "[exit code: 0]",
        ),
        (json!(-1), None, "positive number"),
        (json!(0), None, "positive number"),
        (json!("5"), None, "must be a number"),
    ] {
        let recorder = Arc::new(Recorder::default());
        let tools = registry(recorder.clone());
        let input = json!({"command": "echo hi", "timeout": timeout});
        let call = ToolCall {
            id: "c",
            name: "bash",
            input: &input,
            raw_input: None,
        };
        let out = rt.block_on(tools.dispatch(call, &ctx()));
        let ran = recorder.timeouts.lock().expect("lock").first().copied();
        assert_eq!(ran, runs, "{timeout}: {}", out.content);
        assert!(out.content.contains(expect), "{timeout}: {}", out.content);
    }
}
