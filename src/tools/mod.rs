//! Tools the model can call: the registry and each tool. A failure the
//! model can fix (bad input, unknown tool, a blocked command) becomes an
//! error result for the model to read, never a crash.

pub mod bash;
pub mod edit;
#[cfg(test)]
mod fuzz;
pub mod policy;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::exec::{ExecError, ExecOutput};
use crate::hostfs::OutputFile;
use crate::model::{ToolCall, ToolSpec};

/// What a tool call may use besides its input.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub cancel: CancellationToken,
    /// Where the tool may write its full, untruncated output.
    pub full_output: Option<OutputFile>,
}

/// What a tool call produced.
#[derive(Debug)]
pub struct ToolOutcome {
    /// The text the model sees.
    pub content: String,
    pub is_error: bool,
    /// The raw executor result, when a command ran.
    pub exec: Option<ExecOutput>,
    /// Set when the executor itself failed for good (the sandbox died):
    /// the run must end without calling the model again.
    pub fatal: Option<ExecError>,
}

impl ToolOutcome {
    /// An error the model can read and fix.
    pub fn error(message: impl Into<String>) -> Self {
        ToolOutcome {
            content: message.into(),
            is_error: true,
            exec: None,
            fatal: None,
        }
    }
}

/// One tool offered to the model.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Name, description and input schema sent to the model.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool on already-parsed JSON input.
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutcome;

    /// The shell command this input would run, for a person to approve
    /// (`--approve`); `None` when it runs none: the tool runs no commands,
    /// the input is invalid, or the policy refuses it anyway.
    fn command(&self, _input: &Value) -> Option<String> {
        None
    }

    /// `input` with its command replaced by `command` (a person's edit).
    fn with_command(&self, input: &Value, _command: &str) -> Value {
        input.clone()
    }
}

/// The tools of one run, by name.
#[derive(Default)]
pub struct Registry {
    tools: Vec<Box<dyn Tool>>,
}

impl Registry {
    pub fn new() -> Self {
        Registry::default()
    }

    /// Adds a tool; a later tool with the same name replaces an earlier one.
    pub fn register(&mut self, tool: Box<dyn Tool>) {
        let name = tool.spec().name;
        self.tools.retain(|t| t.spec().name != name);
        self.tools.push(tool);
    }

    /// The schemas sent to the model, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec()).collect()
    }

    /// Dispatches one call. Unknown tools and input that is not valid JSON
    /// come back as error results.
    pub async fn dispatch(&self, call: ToolCall<'_>, ctx: &ToolContext) -> ToolOutcome {
        if let Some(raw) = call.raw_input {
            return ToolOutcome::error(format!(
                "error: the input of tool call '{}' is not valid JSON, so it was not run: {}. \
                 Send the input again as a JSON object.",
                call.name,
                preview(raw)
            ));
        }
        match self.tools.iter().find(|t| t.spec().name == call.name) {
            Some(tool) => tool.call(call.input, ctx).await,
            None => {
                let names: Vec<String> = self.specs().into_iter().map(|s| s.name).collect();
                ToolOutcome::error(format!(
                    "error: unknown tool '{}'. Available tools: {}.",
                    call.name,
                    names.join(", ")
                ))
            }
        }
    }

    /// The command `call` would run, if any (see [`Tool::command`]).
    pub fn command(&self, call: ToolCall<'_>) -> Option<String> {
        if call.raw_input.is_some() {
            return None;
        }
        self.find(call.name)?.command(call.input)
    }

    /// The input of `call` with its command replaced by `command`.
    pub fn with_command(&self, call: ToolCall<'_>, command: &str) -> Option<Value> {
        Some(self.find(call.name)?.with_command(call.input, command))
    }

    fn find(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|t| t.spec().name == name)
            .map(|t| t.as_ref())
    }
}

fn preview(raw: &str) -> String {
    const MAX_PREVIEW_CHARS: usize = 200;
    let mut s: String = raw.chars().take(MAX_PREVIEW_CHARS).collect();
    if raw.chars().count() > MAX_PREVIEW_CHARS {
        s.push_str("...");
    }
    format!("{s:?}")
}
