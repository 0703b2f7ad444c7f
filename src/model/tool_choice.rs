//! `--tool-choice`: whether the model may, must or must not call a tool,
//! in each API's words.

use serde_json::{Value, json};

use super::ToolSpec;

/// What the model is told about calling tools. Unset (no `tool_choice`
/// in the request) is the API's default: `auto` on every API runner knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call a tool (Anthropic's `any`).
    Required,
    /// The model must not call a tool.
    None,
    /// The model must call this tool.
    Named(String),
}

impl ToolChoice {
    /// Parses `auto`, `required`, `none` or a tool's name.
    pub fn parse(s: &str) -> Result<ToolChoice, String> {
        let s = s.trim();
        Ok(match s {
            "" => return Err("an empty --tool-choice".into()),
            "auto" => ToolChoice::Auto,
            "required" | "any" => ToolChoice::Required,
            "none" => ToolChoice::None,
            name if name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                ToolChoice::Named(name.to_string())
            }
            other => return Err(format!("'{other}' is not a tool name")),
        })
    }

    /// How it is written on the command line and in the trajectory.
    pub fn as_str(&self) -> &str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
            ToolChoice::Named(n) => n,
        }
    }

    /// Chat Completions' `tool_choice`. `required` with a single tool is
    /// sent as that tool's name: the same demand, and the form every
    /// server that knows `tool_choice` accepts (llama.cpp's server with
    /// `chatml-function-calling` fails an assertion on `required`).
    pub fn openai(&self, tools: &[ToolSpec]) -> Value {
        match self {
            ToolChoice::Required if tools.len() == 1 => named(&tools[0].name),
            ToolChoice::Named(n) => named(n),
            other => json!(other.as_str()),
        }
    }

    /// Anthropic Messages' `tool_choice`.
    pub fn anthropic(&self) -> Value {
        match self {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Named(n) => json!({"type": "tool", "name": n}),
        }
    }
}

fn named(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            native: None,
        }
    }

    #[test]
    fn parses_and_renders_for_each_api() {
        assert_eq!(ToolChoice::parse("auto"), Ok(ToolChoice::Auto));
        assert_eq!(ToolChoice::parse("any"), Ok(ToolChoice::Required));
        assert_eq!(
            ToolChoice::parse("bash"),
            Ok(ToolChoice::Named("bash".into()))
        );
        assert!(ToolChoice::parse("").is_err());
        assert!(ToolChoice::parse("rm -rf").is_err());
        let one = [tool("bash")];
        let two = [tool("bash"), tool("edit")];
        assert_eq!(
            ToolChoice::Required.openai(&one),
            json!({"type": "function", "function": {"name": "bash"}})
        );
        assert_eq!(ToolChoice::Required.openai(&two), json!("required"));
        assert_eq!(ToolChoice::None.openai(&two), json!("none"));
        assert_eq!(ToolChoice::Auto.openai(&one), json!("auto"));
        assert_eq!(ToolChoice::Required.anthropic(), json!({"type": "any"}));
        assert_eq!(
            ToolChoice::Named("edit".into()).anthropic(),
            json!({"type": "tool", "name": "edit"})
        );
    }
}
