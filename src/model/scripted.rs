//! The scripted model: replays turns from a file, with no network. For
//! tests, demos and CI of the harness itself.
//!
//! A script is JSON: either `{"turns": [TURN, ...]}` or `[TURN, ...]`.
//! Each TURN is an object:
//!
//! | field | meaning |
//! |---|---|
//! | `text` | assistant text (optional) |
//! | `tool_calls` | list of `{"name", "input"}`, or `{"name", "raw_input"}` to send input that is not valid JSON; optional `id` |
//! | `stop_reason` | a reason as the trajectory names it (`end_turn`, `tool_use`, `pause_turn`, `max_tokens`, `refusal`, ...); default `tool_use` with calls, else `end_turn` |
//! | `usage` | `{"input_tokens", "output_tokens", ...}`; default all zero |
//! | `expect` | a string the previous tool results must contain, else the run fails |
//! | `delay_ms` | wait this long before answering (to test interrupts) |
//! | `panic` | panic with this message instead of answering (to test that a bug in runner still ends the run cleanly) |
//!
//! When the turns run out the model answers `end_turn` with no tools.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use super::{
    Block, Message, Model, ModelError, ModelProgress, ModelReply, ModelRequest, ProgressSink, Role,
    StopReason, Usage,
};

/// One scripted tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub name: String,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub input: Option<Value>,
    #[serde(default)]
    pub raw_input: Option<String>,
}

/// One scripted assistant turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub expect: Option<String>,
    #[serde(default)]
    pub delay_ms: Option<u64>,
    #[serde(default)]
    pub panic: Option<String>,
}

/// Replays a script.
#[derive(Debug)]
pub struct ScriptedModel {
    turns: Vec<ScriptedTurn>,
    next: AtomicUsize,
}

impl ScriptedModel {
    /// Builds a model from turns.
    pub fn new(turns: Vec<ScriptedTurn>) -> Self {
        ScriptedModel {
            turns,
            next: AtomicUsize::new(0),
        }
    }

    /// Parses script text; the error says what is wrong and where: the
    /// line and column of a JSON syntax error, the shape a script must
    /// have, or the turn whose fields are wrong.
    pub fn parse(text: &str) -> Result<Self, ModelError> {
        let file: Value = serde_json::from_str(text).map_err(|e| {
            ModelError::ScriptFormat(format!(
                "not valid JSON (line {}, column {}): {e}",
                e.line(),
                e.column()
            ))
        })?;
        let list = match &file {
            Value::Array(list) => list,
            Value::Object(map) => match map.get("turns") {
                Some(Value::Array(list)) if map.len() == 1 => list,
                Some(Value::Array(_)) => {
                    let extra: Vec<&str> = map
                        .keys()
                        .map(String::as_str)
                        .filter(|k| *k != "turns")
                        .collect();
                    return Err(shape(&format!(
                        "an object with keys besides \"turns\" ({})",
                        extra.join(", ")
                    )));
                }
                Some(other) => {
                    return Err(shape(&format!(
                        "an object whose \"turns\" is {}, not a list",
                        kind(other)
                    )));
                }
                None => return Err(shape("an object without \"turns\"")),
            },
            other => return Err(shape(&kind(other))),
        };
        let mut turns = Vec::with_capacity(list.len());
        for (i, turn) in list.iter().enumerate() {
            if !turn.is_object() {
                return Err(ModelError::ScriptFormat(format!(
                    "turn {} is {}, not an object",
                    i + 1,
                    kind(turn)
                )));
            }
            let turn = ScriptedTurn::deserialize(turn)
                .map_err(|e| ModelError::ScriptFormat(format!("turn {}: {e}", i + 1)))?;
            turns.push(turn);
        }
        for (i, turn) in turns.iter().enumerate() {
            for call in &turn.tool_calls {
                if call.input.is_some() == call.raw_input.is_some() {
                    return Err(ModelError::ScriptFormat(format!(
                        "turn {}: tool call '{}' needs exactly one of 'input' or 'raw_input'",
                        i + 1,
                        call.name
                    )));
                }
            }
        }
        Ok(ScriptedModel::new(turns))
    }

    /// Reads and parses a script file.
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ModelError::Script(format!("cannot read script {}: {e}", path.display()))
        })?;
        Self::parse(&text).map_err(|e| match e {
            ModelError::ScriptFormat(msg) => {
                ModelError::ScriptFormat(format!("{}: {msg}", path.display()))
            }
            other => other,
        })
    }
}

/// The error for valid JSON of the wrong shape: what a script is, and what
/// this was instead.
fn shape(what: &str) -> ModelError {
    ModelError::ScriptFormat(format!(
        "not a script: a script is {{\"turns\": [TURN, ...]}} or [TURN, ...], and this is {what}"
    ))
}

/// A JSON value's kind, as the messages name it.
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(_) => "a number".into(),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// The text of the tool results in the newest user message.
fn latest_results(messages: &[Message]) -> String {
    let Some(last) = messages.last() else {
        return String::new();
    };
    let mut out = String::new();
    for b in &last.content {
        if let Block::ToolResult { content, .. } = b {
            out.push_str(content);
            out.push('\n');
        }
    }
    out
}

#[async_trait]
impl Model for ScriptedModel {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn complete(
        &self,
        req: ModelRequest<'_>,
        progress: ProgressSink<'_>,
    ) -> Result<ModelReply, ModelError> {
        let index = self.next.fetch_add(1, Ordering::SeqCst);
        let Some(turn) = self.turns.get(index) else {
            return Ok(ModelReply {
                message: Message {
                    role: Role::Assistant,
                    content: vec![Block::Text {
                        text: "(the script has no more turns)".into(),
                    }],
                },
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
                model: Some("scripted".into()),
            });
        };
        if let Some(ms) = turn.delay_ms {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if let Some(expected) = &turn.expect {
            let got = latest_results(req.messages);
            if !got.contains(expected.as_str()) {
                return Err(ModelError::Script(format!(
                    "turn {}: expected the previous tool results to contain {expected:?}; got {got:?}",
                    index + 1
                )));
            }
        }
        if let Some(message) = &turn.panic {
            panic!("{message}");
        }
        if let Some(text) = &turn.text {
            progress(ModelProgress::TextDelta { text: text.clone() });
        }
        let stop_reason = match &turn.stop_reason {
            Some(s) => StopReason::from_name(s),
            None if turn.tool_calls.is_empty() => StopReason::EndTurn,
            None => StopReason::ToolUse,
        };
        Ok(ModelReply {
            message: Message {
                role: Role::Assistant,
                content: content(turn, index),
            },
            stop_reason,
            usage: turn.usage.unwrap_or_default(),
            model: Some("scripted".into()),
        })
    }
}

/// The blocks of turn number `index` (0-based): its text, then its calls,
/// each with its own id or a generated one unique in the script.
fn content(turn: &ScriptedTurn, index: usize) -> Vec<Block> {
    let mut content = Vec::new();
    if let Some(text) = &turn.text {
        content.push(Block::Text { text: text.clone() });
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        let (input, raw_input) = match (&call.input, &call.raw_input) {
            (Some(v), _) => (v.clone(), None),
            (None, raw) => (Value::Object(Default::default()), raw.clone()),
        };
        content.push(Block::ToolUse {
            id: call
                .id
                .clone()
                .unwrap_or_else(|| format!("toolu_script_{}_{}", index + 1, i + 1)),
            name: call.name.clone(),
            input,
            raw_input,
        });
    }
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_parse_and_bad_calls_are_named() {
        assert!(ScriptedModel::parse(r#"[{"text":"hi"}]"#).is_ok());
        assert!(
            ScriptedModel::parse(r#"{"turns":[{"tool_calls":[{"name":"bash","input":{}}]}]}"#)
                .is_ok()
        );
        let err = ScriptedModel::parse(r#"[{"tool_calls":[{"name":"bash"}]}]"#)
            .expect_err("a call with no input is refused");
        assert!(err.to_string().contains("turn 1"), "{err}");
        let err = ScriptedModel::parse("[{\"txt\": 1}]").expect_err("unknown field");
        assert!(
            err.to_string().contains("turn 1: unknown field `txt`"),
            "{err}"
        );
    }

    #[test]
    fn valid_json_of_the_wrong_shape_is_told_what_a_script_is() {
        let format = "a script is {\"turns\": [TURN, ...]} or [TURN, ...]";
        for (text, what) in [
            (r#"{"steps": []}"#, "an object without \"turns\""),
            (
                r#"{"turns": {"text": "hi"}}"#,
                "\"turns\" is an object, not a list",
            ),
            (
                r#"{"turns": [], "model": "x"}"#,
                "keys besides \"turns\" (model)",
            ),
            (r#""hello""#, "this is a string"),
            ("3", "this is a number"),
        ] {
            let err = ScriptedModel::parse(text).expect_err(text);
            let msg = err.to_string();
            assert!(msg.contains(format), "{text}: {msg}");
            assert!(msg.contains(what), "{text}: {msg}");
            assert!(!msg.contains("untagged"), "{msg}");
            assert_eq!(err.hint(), Some(crate::model::Hint::ScriptFormat), "{text}");
        }
        let err = ScriptedModel::parse(r#"["hi"]"#).expect_err("a turn that is a string");
        assert!(
            err.to_string()
                .contains("turn 1 is a string, not an object"),
            "{err}"
        );
        let err = ScriptedModel::parse("[\n{\"text\": }]").expect_err("a syntax error");
        assert!(
            err.to_string().contains("not valid JSON (line 2, column"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn replays_in_order_then_ends() {
        let m = ScriptedModel::parse(
            r#"[{"text":"a","tool_calls":[{"name":"bash","input":{"command":"ls"}}]},{"text":"done"}]"#,
        )
        .expect("parses");
        let sink = |_: ModelProgress| {};
        let req = ModelRequest {
            system: "",
            messages: &[],
            tools: &[],
            max_tokens: 10,
        };
        let r1 = m.complete(req, &sink).await.expect("turn 1");
        assert_eq!(r1.stop_reason, StopReason::ToolUse);
        assert_eq!(r1.message.tool_calls().count(), 1);
        let r2 = m.complete(req, &sink).await.expect("turn 2");
        assert_eq!(r2.stop_reason, StopReason::EndTurn);
        let r3 = m.complete(req, &sink).await.expect("exhausted");
        assert_eq!(r3.message.text(), "(the script has no more turns)");
    }
}
