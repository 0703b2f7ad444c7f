//! Maps the neutral conversation to a Chat Completions request body.

use serde_json::{Map, Value, json};

use crate::model::tool_choice::ToolChoice;
use crate::model::{Block, Message, ModelRequest, Role};

/// Prefix put before the content of a failed tool's result: Chat
/// Completions has no `is_error` flag.
pub(crate) const TOOL_ERROR_PREFIX: &str = "ERROR: ";

/// How requests are written for one server.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wire {
    /// api.openai.com: `max_completion_tokens` (its reasoning models
    /// refuse `max_tokens`); local servers know `max_tokens`.
    pub official: bool,
    /// A stream with usage in its last chunk, or one JSON body.
    pub stream: bool,
    /// Sent with every request that offers tools.
    pub tool_choice: Option<ToolChoice>,
}

/// The request body for `req`.
pub(crate) fn build_body(model: &str, req: &ModelRequest<'_>, wire: &Wire) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages(req)));
    body.insert("stream".into(), json!(wire.stream));
    if wire.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let max_key = if wire.official {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    body.insert(max_key.into(), json!(req.max_tokens));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &wire.tool_choice {
            body.insert("tool_choice".into(), choice.openai(req.tools));
        }
    }
    Value::Object(body)
}

fn messages(req: &ModelRequest<'_>) -> Vec<Value> {
    let mut out = Vec::new();
    if !req.system.is_empty() {
        out.push(json!({"role": "system", "content": req.system}));
    }
    for m in req.messages {
        match m.role {
            Role::User => user(m, &mut out),
            Role::Assistant => out.push(assistant(m)),
        }
    }
    out
}

/// One `role: "tool"` message per result, in order, then the user's text
/// (if any) as a following user message: a user message between an
/// assistant's tool calls and their results is rejected.
fn user(m: &Message, out: &mut Vec<Value>) {
    let mut text = Vec::new();
    for b in &m.content {
        match b {
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                let content = if *is_error {
                    format!("{TOOL_ERROR_PREFIX}{content}")
                } else {
                    content.clone()
                };
                out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
            }
            Block::Text { text: t } => text.push(t.as_str()),
            // A tool call in a user message has no Chat Completions form,
            // and another provider's opaque blocks mean nothing here.
            Block::ToolUse { .. } | Block::Opaque { .. } => {}
        }
    }
    if !text.is_empty() {
        out.push(json!({"role": "user", "content": text.join("\n\n")}));
    }
}

/// The assistant's text and tool calls; opaque blocks (Anthropic
/// thinking or server tools) are left out, as no Chat server knows them.
fn assistant(m: &Message) -> Value {
    let text = m.text();
    let calls: Vec<Value> = m
        .tool_calls()
        .map(|c| {
            let arguments = match c.raw_input {
                Some(raw) => raw.to_string(),
                None => c.input.to_string(),
            };
            json!({"id": c.id, "type": "function",
                   "function": {"name": c.name, "arguments": arguments}})
        })
        .collect();
    let mut msg = Map::new();
    msg.insert("role".into(), json!("assistant"));
    // Always a string, "" beside tool calls: OpenAI, vLLM and Ollama take
    // "" as they take null, and llama.cpp's server refuses null (HTTP 500,
    // "Input should be a valid string") and mis-renders a missing key.
    msg.insert("content".into(), json!(text));
    if !calls.is_empty() {
        msg.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolSpec;

    #[test]
    fn tool_calls_and_results_map_to_chat_messages() {
        let msgs = vec![
            Message::user_text("do it"),
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::ToolUse {
                        id: "c1".into(),
                        name: "rm".into(),
                        input: json!({"path": ".env"}),
                        raw_input: None,
                    },
                    Block::ToolUse {
                        id: "c2".into(),
                        name: "mk".into(),
                        input: json!({}),
                        raw_input: Some("{\"pa".into()),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    Block::ToolResult {
                        tool_use_id: "c1".into(),
                        content: "true".into(),
                        is_error: false,
                    },
                    Block::ToolResult {
                        tool_use_id: "c2".into(),
                        content: "bad".into(),
                        is_error: true,
                    },
                    Block::Text {
                        text: "note: 2 steps left".into(),
                    },
                ],
            },
        ];
        let tools = [ToolSpec {
            native: None,
            name: "rm".into(),
            description: "remove".into(),
            input_schema: json!({"type": "object"}),
        }];
        let req = ModelRequest {
            system: "sys",
            messages: &msgs,
            tools: &tools,
            max_tokens: 50,
        };
        let wire = Wire {
            stream: true,
            ..Wire::default()
        };
        let body = build_body("gpt", &req, &wire);
        assert_eq!(body["max_tokens"], json!(50));
        assert_eq!(body["stream_options"]["include_usage"], json!(true));
        assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
        let m = body["messages"].as_array().cloned().unwrap_or_default();
        let roles: Vec<&str> = m.iter().filter_map(|x| x["role"].as_str()).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "tool", "user"]
        );
        assert_eq!(m[2]["content"], "");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\".env\"}"
        );
        assert_eq!(m[2]["tool_calls"][1]["function"]["arguments"], "{\"pa");
        assert_eq!(m[3]["tool_call_id"], "c1");
        assert_eq!(m[4]["tool_call_id"], "c2");
        assert_eq!(m[4]["content"], "ERROR: bad");
        assert_eq!(m[5]["content"], "note: 2 steps left");
        assert!(body.get("tool_choice").is_none());
        let official = Wire {
            official: true,
            stream: false,
            tool_choice: Some(ToolChoice::Required),
        };
        let official = build_body("gpt", &req, &official);
        assert_eq!(official["max_completion_tokens"], json!(50));
        assert!(official.get("max_tokens").is_none());
        assert_eq!(official["stream"], json!(false));
        assert!(official.get("stream_options").is_none());
        assert_eq!(official["tool_choice"]["function"]["name"], "rm");
    }

    #[test]
    fn anthropic_opaque_blocks_are_left_out() {
        let thinking = Block::Opaque {
            provider: "anthropic".into(),
            value: json!({"type":"thinking","thinking":"secret plan","signature":"EsQD"}),
        };
        let msgs = vec![
            Message::user_text("go"),
            Message {
                role: Role::Assistant,
                content: vec![
                    thinking.clone(),
                    Block::Text { text: "ok".into() },
                    Block::ToolUse {
                        id: "c1".into(),
                        name: "bash".into(),
                        input: json!({}),
                        raw_input: None,
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    thinking,
                    Block::ToolResult {
                        tool_use_id: "c1".into(),
                        content: "out".into(),
                        is_error: false,
                    },
                ],
            },
        ];
        let req = ModelRequest {
            system: "",
            messages: &msgs,
            tools: &[],
            max_tokens: 5,
        };
        let body = build_body("gpt", &req, &Wire::default());
        let text = body.to_string();
        assert!(
            !text.contains("secret plan") && !text.contains("EsQD"),
            "{text}"
        );
        let m = &body["messages"];
        assert_eq!(m[1]["content"], "ok");
        assert_eq!(m[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(m[2]["role"], "tool");
        assert_eq!(m.as_array().map(Vec::len), Some(3));
    }
}
