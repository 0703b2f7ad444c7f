//! The `bash` tool: validates its input, applies the permission policy and
//! hands the command to the executor.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::policy::Policy;
use super::{Tool, ToolContext, ToolOutcome};
use crate::exec::ExecutorExt;
use crate::exec::shell::ShellMode;
use crate::exec::{ExecError, ExecOutput, ExecRequest, Executor};
use crate::model::ToolSpec;

/// Settings of the bash tool.
#[derive(Debug, Clone)]
pub struct BashSettings {
    /// Timeout when the model does not ask for one.
    pub default_timeout: Duration,
    /// The most the model may ask for.
    pub max_timeout: Duration,
    /// Bytes of output the model sees (head + tail).
    pub max_output_bytes: usize,
    /// What the executor's shell carries between calls: said in the
    /// description; `persistent` adds `restart` to the input.
    pub shell: ShellMode,
    /// Offer Anthropic's own bash tool (`bash_20250124`, which the models
    /// are trained on) in place of the custom definition: for Anthropic's
    /// API with a persistent shell, whose semantics it has.
    pub native: bool,
}

/// Anthropic's bash tool type (its input: `command`, or `restart`).
pub const ANTHROPIC_BASH_TOOL: &str = "bash_20250124";

/// The answer to a restart, as in Anthropic's reference implementation.
pub const RESTARTED: &str = "tool has been restarted.";

/// Runs shell commands through an [`Executor`].
pub struct BashTool {
    executor: Arc<dyn Executor>,
    policy: Policy,
    settings: BashSettings,
}

impl BashTool {
    pub fn new(executor: Arc<dyn Executor>, policy: Policy, settings: BashSettings) -> Self {
        BashTool {
            executor,
            policy,
            settings,
        }
    }

    /// Reads `{"command": string, "timeout": optional seconds}`, or, with
    /// a persistent shell, `{"restart": true}`. Any JSON is accepted
    /// without panicking: a timeout above the maximum is lowered to it
    /// (with a note for the model), one that is not a positive number is an
    /// error the model can fix.
    fn parse(&self, input: &Value) -> Result<Call, String> {
        let obj = input
            .as_object()
            .ok_or("error: the bash tool takes a JSON object like {\"command\": \"ls\"}.")?;
        if self.settings.shell == ShellMode::Persistent {
            match obj.get("restart") {
                None | Some(Value::Null) | Some(Value::Bool(false)) => {}
                Some(Value::Bool(true)) => {
                    return Ok(Call::Restart {
                        with_command: obj.contains_key("command"),
                    });
                }
                Some(other) => {
                    return Err(format!(
                        "error: 'restart' must be true or left out, got {}.",
                        type_name(other)
                    ));
                }
            }
        }
        let command = match obj.get("command") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => return Err("error: 'command' is empty.".into()),
            Some(other) => {
                return Err(format!(
                    "error: 'command' must be a string, got {}.",
                    type_name(other)
                ));
            }
            None => return Err("error: missing required field 'command' (a string).".into()),
        };
        let (timeout, note) = match obj.get("timeout") {
            None | Some(Value::Null) => (self.settings.default_timeout, None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(secs) if secs > 0.0 && secs.is_finite() => self.clamp_timeout(secs, n),
                _ => return Err("error: 'timeout' must be a positive number of seconds.".into()),
            },
            Some(other) => {
                return Err(format!(
                    "error: 'timeout' must be a number of seconds, got {}.",
                    type_name(other)
                ));
            }
        };
        Ok(Call::Run(Parsed {
            command,
            timeout,
            note,
        }))
    }

    /// Drops the persistent shell's state.
    async fn restart(&self, with_command: bool) -> ToolOutcome {
        let Some(shell) = self.executor.extras().shell else {
            return ToolOutcome::error(
                "error: this sandbox has no shell to restart: each command starts afresh",
            );
        };
        match shell.restart_shell().await {
            Ok(()) if with_command => ToolOutcome {
                content: format!(
                    "{RESTARTED} The command was not run: send it again without 'restart'."
                ),
                is_error: false,
                exec: None,
                fatal: None,
            },
            Ok(()) => ToolOutcome {
                content: RESTARTED.to_string(),
                is_error: false,
                exec: None,
                fatal: None,
            },
            Err(e) => failed(e),
        }
    }

    /// The timeout for `secs` (positive, finite) asked by the model: the
    /// comparison is made in f64, before any conversion, so no value can
    /// overflow a `Duration`.
    fn clamp_timeout(&self, secs: f64, asked: &serde_json::Number) -> (Duration, Option<String>) {
        let max = self.settings.max_timeout;
        if secs > max.as_secs_f64() {
            let note = format!(
                "[the timeout asked for ({asked}s) is above the maximum; the command ran with {}s]",
                max.as_secs_f64()
            );
            return (max, Some(note));
        }
        (Duration::try_from_secs_f64(secs).unwrap_or(max), None)
    }
}

/// What a bash call asks for.
enum Call {
    Run(Parsed),
    /// Back to a fresh shell (`{"restart": true}`).
    Restart {
        with_command: bool,
    },
}

/// A validated command.
struct Parsed {
    command: String,
    timeout: Duration,
    /// Said to the model after the result (a lowered timeout).
    note: Option<String>,
}

/// The outcome of an executor failure: the run ends on a fatal one.
fn failed(e: ExecError) -> ToolOutcome {
    if e.is_fatal() {
        ToolOutcome {
            content: format!("error: {e}"),
            is_error: true,
            exec: None,
            fatal: Some(e),
        }
    } else {
        ToolOutcome::error(format!("error: {e}"))
    }
}

pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The text the model sees for a finished command.
pub fn render_for_model(out: &ExecOutput, timeout: Duration) -> String {
    let mut text = out.output.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if out.timed_out {
        text.push_str(&format!(
            "[timed out after {}s; the command and every process it started were killed]",
            timeout.as_secs_f64()
        ));
    } else if out.cancelled {
        text.push_str("[interrupted by the user; the command was killed]");
    } else if out.oom_killed {
        // The executor's own note names the limit; add one only without it.
        if !text.contains("out of memory") {
            text.push_str("[killed: out of memory (the sandbox's memory limit was reached)]\n");
        }
        // A pipeline member or a child was killed; the command still ended
        // with a code of its own.
        if let Some(code) = out.exit_code {
            text.push_str(&format!("[exit code: {code}]"));
        }
        text.truncate(text.trim_end_matches('\n').len());
    } else {
        match out.exit_code {
            Some(code) => text.push_str(&format!("[exit code: {code}]")),
            None => text.push_str("[killed by a signal]"),
        }
    }
    text
}

#[async_trait]
impl Tool for BashTool {
    fn spec(&self) -> ToolSpec {
        let persistent = self.settings.shell == ShellMode::Persistent;
        let mut description = format!(
            "Run a shell command with bash. {} stdout and stderr come back together, \
             truncated in the middle past {} bytes. The command is killed after `timeout` \
             seconds (default {}, at most {}). No interactive input: stdin is empty.",
            self.settings.shell.semantics(&self.executor.workdir()),
            self.settings.max_output_bytes,
            self.settings.default_timeout.as_secs(),
            self.settings.max_timeout.as_secs(),
        );
        let mut input_schema = json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command to run."},
                "timeout": {"type": "number", "description": "Seconds before the command is killed."}
            },
            "required": ["command"]
        });
        if persistent {
            description.push_str(
                " Send {\"restart\": true} instead of a command to start over in a fresh shell.",
            );
            input_schema["properties"]["restart"] = json!({
                "type": "boolean",
                "description": "true: drop the working directory and variables and start over (no command is run)."
            });
            input_schema["required"] = json!([]);
        }
        ToolSpec {
            native: (persistent && self.settings.native)
                .then(|| json!({"type": ANTHROPIC_BASH_TOOL, "name": "bash"})),
            name: "bash".into(),
            description,
            input_schema,
        }
    }

    fn command(&self, input: &Value) -> Option<String> {
        match self.parse(input) {
            Ok(Call::Run(p)) if self.policy.check(&p.command).is_none() => Some(p.command),
            _ => None,
        }
    }

    fn with_command(&self, input: &Value, command: &str) -> Value {
        let mut input = input.clone();
        if let Some(obj) = input.as_object_mut() {
            obj.insert("command".into(), Value::String(command.to_string()));
        }
        input
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutcome {
        let Parsed {
            command,
            timeout,
            note,
        } = match self.parse(input) {
            Ok(Call::Run(v)) => v,
            Ok(Call::Restart { with_command }) => return self.restart(with_command).await,
            Err(msg) => return ToolOutcome::error(msg),
        };
        if let Some(pattern) = self.policy.check(&command) {
            return ToolOutcome::error(format!(
                "blocked by policy: the command matches the deny pattern `{pattern}` and was not run."
            ));
        }
        let req = ExecRequest {
            command,
            timeout,
            max_output_bytes: self.settings.max_output_bytes,
            full_output: ctx.full_output.clone(),
            cancel: ctx.cancel.clone(),
        };
        match self.executor.execute(req).await {
            Ok(out) => ToolOutcome {
                content: match note {
                    Some(note) => format!("{}\n{note}", render_for_model(&out, timeout)),
                    None => render_for_model(&out, timeout),
                },
                is_error: out.timed_out || out.oom_killed,
                exec: Some(out),
                fatal: None,
            },
            Err(e) => failed(e),
        }
    }
}

#[cfg(test)]
mod tests;
