//! Anthropic's words for the neutral types: stop reasons, usage, content
//! blocks, and a whole (non-streamed) Messages reply.

use serde_json::{Value, json};

use crate::model::{Block, Message, ModelError, ModelReply, Role, StopReason, Usage};

/// The `provider` of the [`Block::Opaque`] blocks this client keeps; only
/// they go back to the Messages API.
pub const PROVIDER: &str = "anthropic";

/// Maps a Messages API `stop_reason`: the trajectory names reasons as this
/// API does, so the neutral names are Anthropic's.
pub(crate) fn stop_reason(s: &str) -> StopReason {
    StopReason::from_name(s)
}

/// Takes the usage fields present in `u` (message_delta repeats some,
/// message_start has the input side).
pub(crate) fn merge_usage(usage: &mut Usage, u: &Value) {
    let set = |field: &mut u64, key: &str| {
        if let Some(n) = u.get(key).and_then(Value::as_u64) {
            *field = n;
        }
    };
    set(&mut usage.input_tokens, "input_tokens");
    set(&mut usage.output_tokens, "output_tokens");
    set(
        &mut usage.cache_creation_input_tokens,
        "cache_creation_input_tokens",
    );
    set(
        &mut usage.cache_read_input_tokens,
        "cache_read_input_tokens",
    );
}

/// A tool_use block from its input: an object is kept; anything else (a
/// max_tokens cut, a model mistake) goes to `raw_input` with an empty
/// `input`.
pub(crate) fn tool_use(id: String, name: String, input: Result<Value, String>) -> Block {
    let (input, raw_input) = match input {
        Ok(v @ Value::Object(_)) => (v, None),
        Ok(other) => (json!({}), Some(other.to_string())),
        Err(raw) => (json!({}), Some(raw)),
    };
    Block::ToolUse {
        id,
        name,
        input,
        raw_input,
    }
}

/// A block runner does not interpret, kept as received; `None` for
/// something that is no block at all (no `type`), which the API would
/// refuse to take back.
pub(crate) fn opaque(value: Value) -> Option<Block> {
    value.get("type").and_then(Value::as_str)?;
    Some(Block::Opaque {
        provider: PROVIDER.to_string(),
        value,
    })
}

/// A string field of a JSON object, or "".
pub(crate) fn text_of(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or("").to_string()
}

/// The block of one element of a reply's `content`. Empty text is dropped
/// (the API refuses it when it goes back).
fn block(b: &Value) -> Option<Block> {
    match b["type"].as_str() {
        Some("text") => {
            let text = text_of(b, "text");
            (!text.is_empty()).then_some(Block::Text { text })
        }
        Some("tool_use") => Some(tool_use(
            text_of(b, "id"),
            text_of(b, "name"),
            Ok(b.get("input").cloned().unwrap_or_else(|| json!({}))),
        )),
        // Thinking, server tool calls and their results, and kinds added
        // later: they must go back unchanged.
        _ => opaque(b.clone()),
    }
}

/// A reply from a whole (non-streaming) Messages API response body.
pub(crate) fn reply_from_json(v: &Value) -> Result<ModelReply, ModelError> {
    let Some(blocks) = v.get("content").and_then(Value::as_array) else {
        return Err(ModelError::Protocol(format!(
            "response has no content array: {}",
            crate::model::http::snippet(&v.to_string())
        )));
    };
    let mut usage = Usage::default();
    merge_usage(&mut usage, &v["usage"]);
    Ok(ModelReply {
        message: Message {
            role: Role::Assistant,
            content: blocks.iter().filter_map(block).collect(),
        },
        stop_reason: stop_reason(v["stop_reason"].as_str().unwrap_or("end_turn")),
        usage,
        model: v["model"].as_str().map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_map_and_unknown_ones_are_kept() {
        for (s, r) in [
            ("end_turn", StopReason::EndTurn),
            ("stop_sequence", StopReason::StopSequence),
            ("tool_use", StopReason::ToolUse),
            ("pause_turn", StopReason::PauseTurn),
            ("refusal", StopReason::Refusal),
            ("max_tokens", StopReason::MaxTokens),
            (
                "model_context_window_exceeded",
                StopReason::ModelContextWindowExceeded,
            ),
        ] {
            assert_eq!(stop_reason(s), r);
        }
        assert_eq!(stop_reason("new_one"), StopReason::Other("new_one".into()));
    }

    #[test]
    fn whole_message_keeps_thinking_and_server_blocks_as_sent() {
        let thinking = json!({"type":"thinking","thinking":"hm","signature":"EsQD"});
        let server = json!({"type":"server_tool_use","id":"srvtoolu_1","name":"web_search",
            "input":{"query":"q"}});
        let result = json!({"type":"web_search_tool_result","tool_use_id":"srvtoolu_1",
            "content":{"type":"web_search_tool_result_error","error_code":"max_uses_exceeded"}});
        let v = json!({"content":[thinking, {"type":"text","text":"a"}, {"type":"text","text":""},
            {"type":"tool_use","id":"x","name":"n","input":{"k":1}}, server, result],
            "stop_reason":"stop_sequence","model":"m","usage":{"input_tokens":1,"output_tokens":2}});
        let r = reply_from_json(&v).expect("reply");
        assert_eq!(r.stop_reason, StopReason::StopSequence);
        assert_eq!(r.message.text(), "a");
        assert_eq!(
            r.message.tool_calls().count(),
            1,
            "server tools are not ours"
        );
        let kept = |v: Value| opaque(v).expect("a block");
        assert_eq!(
            r.message.content,
            vec![
                kept(thinking),
                Block::Text { text: "a".into() },
                tool_use("x".into(), "n".into(), Ok(json!({"k":1}))),
                kept(server),
                kept(result),
            ]
        );
        assert!(reply_from_json(&json!({"nope":1})).is_err());
        // Something without a type is no block: dropped, not sent back.
        let r =
            reply_from_json(&json!({"content":[{"data":"x"}, 7, null],"stop_reason":"end_turn"}))
                .expect("reply");
        assert!(r.message.content.is_empty());
    }

    #[test]
    fn tool_input_that_is_not_an_object_is_kept_raw() {
        let b = tool_use("t".into(), "n".into(), Ok(json!([1])));
        assert!(matches!(b, Block::ToolUse { raw_input: Some(ref r), .. } if r == "[1]"));
        let b = tool_use("t".into(), "n".into(), Err("{\"a\":".into()));
        assert!(matches!(b, Block::ToolUse { ref input, .. } if input == &json!({})));
    }
}
