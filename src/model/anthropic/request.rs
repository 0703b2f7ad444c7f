//! Maps the neutral conversation to an Anthropic Messages API request body.

use serde_json::{Map, Value, json};

use super::reply::PROVIDER;
use crate::model::tool_choice::ToolChoice;
use crate::model::{Block, Message, ModelRequest, Role};

/// How requests are written: streamed or one body, and `tool_choice`.
#[derive(Debug, Clone)]
pub(crate) struct Wire {
    pub stream: bool,
    pub tool_choice: Option<ToolChoice>,
}

impl Default for Wire {
    fn default() -> Self {
        Wire {
            stream: true,
            tool_choice: None,
        }
    }
}

/// The Messages API request body for `req`.
///
/// Three cache breakpoints: the system prompt, the last tool, and the last
/// block of the newest user message, so a long run pays for its history
/// once (the API allows four).
pub(crate) fn build_body(model: &str, req: &ModelRequest<'_>, wire: &Wire) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    body.insert("stream".into(), json!(wire.stream));
    if !req.system.is_empty() {
        body.insert(
            "system".into(),
            json!([{"type": "text", "text": req.system, "cache_control": ephemeral()}]),
        );
    }
    if !req.tools.is_empty() {
        let mut tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| match &t.native {
                Some(native) => native.clone(),
                None => json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}),
            })
            .collect();
        if let Some(Value::Object(last)) = tools.last_mut() {
            last.insert("cache_control".into(), ephemeral());
        }
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &wire.tool_choice {
            body.insert("tool_choice".into(), choice.anthropic());
        }
    }
    let mut messages: Vec<Value> = req.messages.iter().map(message).collect();
    let newest_user = req.messages.iter().rposition(|m| m.role == Role::User);
    if let Some(i) = newest_user
        && let Some(Value::Object(last)) = messages[i]
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .and_then(|c| c.last_mut())
    {
        last.insert("cache_control".into(), ephemeral());
    }
    body.insert("messages".into(), Value::Array(messages));
    Value::Object(body)
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

fn message(m: &Message) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    // The API rejects empty text blocks; keep one only if it is all there is.
    let mut content: Vec<Value> = m
        .content
        .iter()
        .filter(|b| !matches!(b, Block::Text { text } if text.is_empty()))
        .filter_map(block)
        .collect();
    if content.is_empty() {
        content.push(json!({"type": "text", "text": "(empty)"}));
    }
    json!({"role": role, "content": content})
}

/// The API form of one block; `None` for a block another provider made.
fn block(b: &Block) -> Option<Value> {
    Some(match b {
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::ToolUse {
            id,
            name,
            input,
            raw_input,
        } => {
            // The API wants an object; input that never parsed goes back as
            // `{}` (the loop told the model about it in the tool result).
            let input = match (raw_input, input) {
                (None, Value::Object(_)) => input.clone(),
                _ => json!({}),
            };
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => json!({
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": is_error,
        }),
        // Exactly as received: a thinking block's signature covers it, and
        // a paused server tool call continues from it.
        Block::Opaque { provider, value } if provider == PROVIDER => value.clone(),
        Block::Opaque { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolSpec;

    fn req<'a>(
        system: &'a str,
        messages: &'a [Message],
        tools: &'a [ToolSpec],
    ) -> ModelRequest<'a> {
        ModelRequest {
            system,
            messages,
            tools,
            max_tokens: 100,
        }
    }

    #[test]
    fn system_tools_and_newest_user_message_carry_cache_breakpoints() {
        let tools = vec![
            ToolSpec {
                native: None,
                name: "a".into(),
                description: "A".into(),
                input_schema: json!({"type": "object"}),
            },
            ToolSpec {
                native: None,
                name: "b".into(),
                description: "B".into(),
                input_schema: json!({"type": "object"}),
            },
        ];
        let msgs = vec![
            Message::user_text("first"),
            Message {
                role: Role::Assistant,
                content: vec![Block::Text { text: "ok".into() }],
            },
            Message::user_text("second"),
        ];
        let body = build_body("claude-x", &req("be good", &msgs, &tools), &Wire::default());
        assert_eq!(body["stream"], json!(true));
        assert_eq!(body["model"], json!("claude-x"));
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert!(body["tools"][0].get("cache_control").is_none());
        assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
        assert!(
            body["messages"][0]["content"][0]
                .get("cache_control")
                .is_none()
        );
        assert_eq!(
            body["messages"][2]["content"][0]["cache_control"]["type"],
            "ephemeral"
        );
    }

    #[test]
    fn tool_blocks_round_trip_and_raw_input_becomes_an_empty_object() {
        let msgs = vec![
            Message::user_text("go"),
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::Text {
                        text: String::new(),
                    },
                    Block::ToolUse {
                        id: "t1".into(),
                        name: "bash".into(),
                        input: json!({"command": "ls"}),
                        raw_input: None,
                    },
                    Block::ToolUse {
                        id: "t2".into(),
                        name: "bash".into(),
                        input: json!({}),
                        raw_input: Some("{\"command\": \"l".into()),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    Block::ToolResult {
                        tool_use_id: "t1".into(),
                        content: "out".into(),
                        is_error: false,
                    },
                    Block::ToolResult {
                        tool_use_id: "t2".into(),
                        content: "bad json".into(),
                        is_error: true,
                    },
                ],
            },
        ];
        let body = build_body("m", &req("", &msgs, &[]), &Wire::default());
        assert!(body.get("system").is_none());
        assert!(body.get("tools").is_none());
        let a = &body["messages"][1]["content"];
        assert_eq!(a.as_array().map(Vec::len), Some(2), "empty text dropped");
        assert_eq!(
            a[0],
            json!({"type":"tool_use","id":"t1","name":"bash","input":{"command":"ls"}})
        );
        assert_eq!(a[1]["input"], json!({}));
        let u = &body["messages"][2]["content"];
        assert_eq!(u[0]["type"], "tool_result");
        assert_eq!(u[0]["is_error"], json!(false));
        assert_eq!(u[1]["tool_use_id"], "t2");
        assert_eq!(u[1]["is_error"], json!(true));
        assert_eq!(u[1]["cache_control"]["type"], "ephemeral");
    }

    #[test]
    fn opaque_blocks_go_back_verbatim_and_only_to_their_provider() {
        let thinking = json!({"type":"thinking","thinking":"hm","signature":"EsQD"});
        let server = json!({"type":"server_tool_use","id":"srvtoolu_1","name":"web_search",
            "input":{"query":"q"}});
        let opaque = |provider: &str, value: &Value| Block::Opaque {
            provider: provider.into(),
            value: value.clone(),
        };
        let msgs = vec![
            Message::user_text("go"),
            Message {
                role: Role::Assistant,
                content: vec![
                    opaque(PROVIDER, &thinking),
                    Block::Text { text: "ok".into() },
                    opaque("other", &json!({"type":"reasoning","encrypted":"x"})),
                    opaque(PROVIDER, &server),
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![opaque("other", &json!({"type":"reasoning"}))],
            },
        ];
        let body = build_body("m", &req("", &msgs, &[]), &Wire::default());
        assert_eq!(
            body["messages"][1]["content"],
            json!([thinking, {"type":"text","text":"ok"}, server])
        );
        // Nothing left: the placeholder the API accepts.
        assert_eq!(
            body["messages"][2]["content"],
            json!([{"type":"text","text":"(empty)"}])
        );
    }
}
