//! Loading the recorded LLM API exchanges in `tests/fixtures/llm-vectors` and
//! converting them to and from the neutral conversation types.

#![allow(dead_code)]

use std::path::PathBuf;

use runner::model::{Block, Message, Role, ToolSpec};
use serde_json::{Value, json};

use crate::support::fake_model::FakeResponse;

// ---------------------------------------------------------------- loading

/// The vector directory; panics (never skips) when it is missing.
pub fn dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm-vectors");
    assert!(
        d.join("index.md").is_file(),
        "the LLM test vectors are missing: expected them at {} (they are part of the repository: is the checkout complete?)",
        d.display()
    );
    d
}

/// A vector file as text.
pub fn text(name: &str) -> String {
    let p = dir().join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

/// A vector file as JSON.
pub fn load(name: &str) -> Value {
    serde_json::from_str(&text(name)).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"))
}

/// One recorded request/response pair.
pub struct Exchange {
    /// The recorded request body.
    pub request: Value,
    /// The recorded response, ready to serve.
    pub response: FakeResponse,
}

/// A recorded header value (a string, or the first of a list).
pub fn header_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => a.first().and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// A recorded response served verbatim (status, headers, body bytes).
pub fn response_of(r: &Value) -> FakeResponse {
    let status = r["status_code"]
        .as_u64()
        .or_else(|| r["status"].as_u64())
        .or_else(|| r["status"]["code"].as_u64())
        .and_then(|s| u16::try_from(s).ok())
        .expect("recorded response without a status");
    let headers = r["headers"].as_object().cloned().unwrap_or_default();
    let ct = headers
        .get("content-type")
        .and_then(header_value)
        .unwrap_or_else(|| "application/json".into());
    let body = match (&r["body_sse"], &r["body"]) {
        (Value::String(s), _) => s.clone(),
        (_, Value::String(s)) => s.clone(),
        (_, other) => other.to_string(),
    };
    let mut resp = FakeResponse::raw(status, &ct, body);
    for (k, v) in headers {
        let skip = [
            "content-type",
            "content-length",
            "transfer-encoding",
            "connection",
            "content-encoding",
        ];
        if let Some(v) = header_value(&v).filter(|_| !skip.contains(&k.as_str())) {
            resp = resp.with_header(&k, &v);
        }
    }
    resp
}

/// The request/response pairs of a recorded JSON vector.
pub fn exchanges(name: &str) -> Vec<Exchange> {
    let v = load(name);
    v["interactions"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: no interactions"))
        .iter()
        .map(|it| Exchange {
            request: it["request"]["body"].clone(),
            response: response_of(&it["response"]),
        })
        .collect()
}

// ------------------------------------------------ recorded -> neutral types

/// Message or tool-result content (a string or text blocks) as text.
pub fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Recorded Anthropic messages as neutral messages.
pub fn anthropic_messages(msgs: &Value) -> Vec<Message> {
    let mut out = Vec::new();
    for m in msgs.as_array().cloned().unwrap_or_default() {
        let role = if m["role"] == "assistant" {
            Role::Assistant
        } else {
            Role::User
        };
        let content = match &m["content"] {
            Value::String(s) => vec![Block::Text { text: s.clone() }],
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| match b["type"].as_str()? {
                    "text" => Some(Block::Text {
                        text: b["text"].as_str()?.to_string(),
                    }),
                    "tool_use" => Some(Block::ToolUse {
                        id: b["id"].as_str()?.to_string(),
                        name: b["name"].as_str()?.to_string(),
                        input: b["input"].clone(),
                        raw_input: None,
                    }),
                    "tool_result" => Some(Block::ToolResult {
                        tool_use_id: b["tool_use_id"].as_str()?.to_string(),
                        content: content_text(&b["content"]),
                        is_error: b["is_error"].as_bool().unwrap_or(false),
                    }),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        out.push(Message { role, content });
    }
    out
}

/// Recorded Chat messages as the system prompt and neutral messages.
pub fn openai_messages(msgs: &Value) -> (String, Vec<Message>) {
    let mut system = String::new();
    let mut out: Vec<Message> = Vec::new();
    for m in msgs.as_array().cloned().unwrap_or_default() {
        match m["role"].as_str().unwrap_or("") {
            "system" => system = content_text(&m["content"]),
            "assistant" => {
                let mut content = Vec::new();
                let t = content_text(&m["content"]);
                if !t.is_empty() {
                    content.push(Block::Text { text: t });
                }
                for c in m["tool_calls"].as_array().cloned().unwrap_or_default() {
                    let args = c["function"]["arguments"].as_str().unwrap_or("{}");
                    content.push(Block::ToolUse {
                        id: c["id"].as_str().unwrap_or("").to_string(),
                        name: c["function"]["name"].as_str().unwrap_or("").to_string(),
                        input: serde_json::from_str(args).unwrap_or(json!({})),
                        raw_input: None,
                    });
                }
                out.push(Message {
                    role: Role::Assistant,
                    content,
                });
            }
            role => {
                let block = if role == "tool" {
                    Block::ToolResult {
                        tool_use_id: m["tool_call_id"].as_str().unwrap_or("").to_string(),
                        content: content_text(&m["content"]),
                        is_error: false,
                    }
                } else {
                    Block::Text {
                        text: content_text(&m["content"]),
                    }
                };
                match out.last_mut() {
                    Some(last) if last.role == Role::User && role == "tool" => {
                        last.content.push(block)
                    }
                    Some(last)
                        if last.role == Role::User
                            && last
                                .content
                                .iter()
                                .any(|b| matches!(b, Block::ToolResult { .. })) =>
                    {
                        last.content.push(block)
                    }
                    _ => out.push(Message {
                        role: Role::User,
                        content: vec![block],
                    }),
                }
            }
        }
    }
    (system, out)
}

/// The tools of a recorded Anthropic request.
pub fn anthropic_tools(req: &Value) -> Vec<ToolSpec> {
    req["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| ToolSpec {
            native: None,
            name: t["name"].as_str().unwrap_or("").to_string(),
            description: t["description"].as_str().unwrap_or("").to_string(),
            input_schema: t
                .get("input_schema")
                .cloned()
                .unwrap_or(json!({"type": "object"})),
        })
        .collect()
}

/// The tools of a recorded Chat request.
pub fn openai_tools(req: &Value) -> Vec<ToolSpec> {
    req["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| ToolSpec {
            native: None,
            name: t["function"]["name"].as_str().unwrap_or("").to_string(),
            description: t["function"]["description"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            input_schema: t["function"]["parameters"].clone(),
        })
        .collect()
}

// ------------------------------------------------------- shapes to compare

/// Anthropic messages reduced to what the protocol cares about.
pub fn anthropic_shape(msgs: &Value) -> Vec<Value> {
    msgs.as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let blocks: Vec<Value> = match &m["content"] {
                Value::String(s) => vec![json!({"text": s})],
                Value::Array(a) => a
                    .iter()
                    .filter_map(|b| match b["type"].as_str()? {
                        "text" => Some(json!({"text": b["text"]})),
                        "tool_use" => Some(
                            json!({"tool_use": b["id"], "name": b["name"], "input": b["input"]}),
                        ),
                        "tool_result" => Some(json!({"tool_result": b["tool_use_id"],
                            "content": content_text(&b["content"]),
                            "is_error": b["is_error"].as_bool().unwrap_or(false)})),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            json!({"role": m["role"], "content": blocks})
        })
        .collect()
}

/// Chat messages reduced to what the protocol cares about.
pub fn openai_shape(msgs: &Value) -> Vec<Value> {
    msgs.as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let content = match content_text(&m["content"]) {
                t if t.is_empty() => Value::Null,
                t => json!(t),
            };
            let calls: Vec<Value> = m["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|c| {
                    let args = c["function"]["arguments"].as_str().unwrap_or("null");
                    json!({"id": c["id"], "name": c["function"]["name"],
                           "arguments": serde_json::from_str::<Value>(args).unwrap_or(Value::Null)})
                })
                .collect();
            json!({"role": m["role"], "content": content, "tool_calls": calls, "tool_call_id": m["tool_call_id"]})
        })
        .collect()
}

/// Replaces string values equal to a key of `map` (tool ids) everywhere.
pub fn remap_ids(v: &mut Value, map: &[(String, String)]) {
    match v {
        Value::String(s) => {
            if let Some((_, to)) = map.iter().find(|(from, _)| from == s) {
                *s = to.clone();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| remap_ids(x, map)),
        Value::Object(o) => o.values_mut().for_each(|x| remap_ids(x, map)),
        _ => {}
    }
}
