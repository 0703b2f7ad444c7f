//! Assembles a Chat Completions reply from stream chunks or from a whole
//! JSON body, smoothing over the quirks of compatible servers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::model::event_stream::EventParser;
use crate::model::sse::SseEvent;
use crate::model::{
    Block, Message, ModelError, ModelProgress, ModelReply, ProgressSink, Role, StopReason, Usage,
};

/// Maps a Chat Completions `finish_reason`.
pub(crate) fn stop_reason(s: &str) -> StopReason {
    match s {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refusal,
        other => StopReason::Other(other.to_string()),
    }
}

/// One tool call being assembled.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The state of one streamed (or whole) completion.
#[derive(Debug, Default)]
pub(crate) struct ChatState {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Usage,
    model: Option<String>,
    done: bool,
}

/// Keeps the first `what` (id or name) of call `index`: a repeat of it
/// is no news, anything else contradicts it.
fn keep_first(kept: &mut String, got: &str, what: &str, index: u64) -> Result<(), ModelError> {
    if kept.is_empty() {
        kept.push_str(got);
        Ok(())
    } else if kept == got {
        Ok(())
    } else {
        Err(ModelError::Protocol(format!(
            "the stream gave tool call {index} the {what} '{got}' after '{kept}'"
        )))
    }
}

/// Arguments as text: a string as is, an object (an Ollama quirk) as JSON.
fn arguments_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl EventParser for ChatState {
    fn event(&mut self, ev: &SseEvent, progress: ProgressSink<'_>) -> Result<(), ModelError> {
        self.handle_data(&ev.data, progress)
    }

    /// Whether `data: [DONE]` arrived.
    fn is_done(&self) -> bool {
        self.done
    }
}

impl ChatState {
    /// Handles one SSE data payload.
    pub(crate) fn handle_data(
        &mut self,
        data: &str,
        progress: ProgressSink<'_>,
    ) -> Result<(), ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            ModelError::Protocol(format!(
                "stream chunk is not JSON ({e}): {}",
                crate::model::http::snippet(data)
            ))
        })?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let body = crate::model::http::ErrorBody::parse(&json!({ "error": err }).to_string());
            return Err(ModelError::StreamError {
                kind: body.kind,
                message: body.message,
                retryable: true,
            });
        }
        self.take_common(&v);
        let Some(choice) = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            // The `include_usage` chunk has `choices: []`.
            return Ok(());
        };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str()
            && !t.is_empty()
        {
            self.text.push_str(t);
            progress(ModelProgress::TextDelta {
                text: t.to_string(),
            });
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            self.take_call_deltas(calls)?;
        }
        self.take_finish(choice);
        Ok(())
    }

    /// Adds streamed tool call pieces to the calls they continue (by
    /// `index`; a server without one sends each call whole, in order).
    /// A call's id and name come once, or repeated identically in every
    /// piece (llama.cpp's server): the first is kept, never concatenated;
    /// another name or id for the same call is an error.
    fn take_call_deltas(&mut self, calls: &[Value]) -> Result<(), ModelError> {
        for (pos, c) in calls.iter().enumerate() {
            let index = c["index"].as_u64().unwrap_or(pos as u64);
            let entry = self.calls.entry(index).or_default();
            if let Some(id) = c["id"].as_str().filter(|id| !id.is_empty()) {
                keep_first(&mut entry.id, id, "id", index)?;
            }
            if let Some(name) = c["function"]["name"].as_str().filter(|n| !n.is_empty()) {
                keep_first(&mut entry.name, name, "name", index)?;
            }
            entry
                .arguments
                .push_str(&arguments_text(&c["function"]["arguments"]));
        }
        Ok(())
    }

    /// Takes a whole (non-streaming) completion body; its text is shown as
    /// a stream's would be.
    pub(crate) fn handle_whole(
        &mut self,
        v: &Value,
        progress: ProgressSink<'_>,
    ) -> Result<(), ModelError> {
        let Some(choice) = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Err(ModelError::Protocol(format!(
                "completion has no choices: {}",
                crate::model::http::snippet(&v.to_string())
            )));
        };
        self.take_common(v);
        let msg = &choice["message"];
        if let Some(t) = msg["content"].as_str()
            && !t.is_empty()
        {
            self.text.push_str(t);
            progress(ModelProgress::TextDelta {
                text: t.to_string(),
            });
        }
        if let Some(calls) = msg["tool_calls"].as_array() {
            for (pos, c) in calls.iter().enumerate() {
                self.calls.insert(
                    pos as u64,
                    PartialCall {
                        id: c["id"].as_str().unwrap_or("").to_string(),
                        name: c["function"]["name"].as_str().unwrap_or("").to_string(),
                        arguments: arguments_text(&c["function"]["arguments"]),
                    },
                );
            }
        }
        self.take_finish(choice);
        self.done = true;
        Ok(())
    }

    fn take_common(&mut self, v: &Value) {
        if let Some(m) = v["model"].as_str() {
            self.model = Some(m.to_string());
        }
        let u = &v["usage"];
        if u.is_object() {
            let prompt = u["prompt_tokens"].as_u64().unwrap_or(0);
            let cached = u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
            self.usage = Usage {
                input_tokens: prompt.saturating_sub(cached),
                output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: cached,
            };
        }
    }

    fn take_finish(&mut self, choice: &Value) {
        if let Some(r) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(r.to_string());
        }
    }

    /// The reply. Calls without an id get a unique `call_<n>` from `ids`.
    pub(crate) fn finish(self, ids: &AtomicU64) -> Result<ModelReply, ModelError> {
        let Some(reason) = self.finish_reason else {
            return Err(ModelError::StreamError {
                kind: "incomplete".into(),
                message: "the stream ended without a finish_reason".into(),
                retryable: true,
            });
        };
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(Block::Text { text: self.text });
        }
        for c in self.calls.into_values() {
            let id = if c.id.is_empty() {
                format!(
                    "call_{}",
                    ids.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
                )
            } else {
                c.id
            };
            let (input, raw_input) = if c.arguments.trim().is_empty() {
                (json!({}), None)
            } else {
                match serde_json::from_str::<Value>(&c.arguments) {
                    Ok(v @ Value::Object(_)) => (v, None),
                    _ => (json!({}), Some(c.arguments)),
                }
            };
            content.push(Block::ToolUse {
                id,
                name: c.name,
                input,
                raw_input,
            });
        }
        let has_calls = content.iter().any(|b| matches!(b, Block::ToolUse { .. }));
        let mut stop_reason = stop_reason(&reason);
        // Ollama and others say "stop" although they called a tool.
        if has_calls && stop_reason != StopReason::MaxTokens {
            stop_reason = StopReason::ToolUse;
        }
        Ok(ModelReply {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(chunks: &[Value]) -> Result<ModelReply, ModelError> {
        let sink = |_: ModelProgress| {};
        let mut st = ChatState::default();
        for c in chunks {
            st.handle_data(&c.to_string(), &sink)?;
        }
        st.handle_data("[DONE]", &sink)?;
        st.finish(&AtomicU64::new(0))
    }

    #[test]
    fn finish_reasons_map_and_unknown_ones_are_kept() {
        assert_eq!(stop_reason("stop"), StopReason::EndTurn);
        assert_eq!(stop_reason("tool_calls"), StopReason::ToolUse);
        assert_eq!(stop_reason("function_call"), StopReason::ToolUse);
        assert_eq!(stop_reason("length"), StopReason::MaxTokens);
        assert_eq!(stop_reason("content_filter"), StopReason::Refusal);
        assert_eq!(stop_reason("eos"), StopReason::Other("eos".into()));
    }

    #[test]
    fn tool_call_deltas_by_index_and_usage_chunk() {
        let r = stream(&[
            json!({"model":"g","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"g","arguments":"{}"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}],"obfuscation":"zz"}),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
            json!({"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":20}}}),
        ])
        .expect("reply");
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        let calls: Vec<_> = r.message.tool_calls().collect();
        assert_eq!((calls[0].id, calls[0].name), ("call_a", "f"));
        assert_eq!(calls[0].input, &json!({"x": 1}));
        assert_eq!(calls[1].id, "call_b");
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 30,
                output_tokens: 7,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 20
            }
        );
    }

    #[test]
    fn quirks_object_arguments_missing_ids_and_stop_with_calls() {
        let ids = AtomicU64::new(0);
        let mut st = ChatState::default();
        let sink = |_: ModelProgress| {};
        st.handle_whole(&json!({"choices":[{"finish_reason":"stop","message":{"content":"","reasoning":"hm",
            "tool_calls":[{"function":{"name":"f","arguments":{"a":1}}},{"id":"","function":{"name":"g","arguments":"{}"}}]}}]}), &sink)
            .expect("ok");
        let r = st.finish(&ids).expect("reply");
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        let calls: Vec<_> = r.message.tool_calls().collect();
        assert_eq!(calls[0].id, "call_1");
        assert_eq!(calls[1].id, "call_2");
        assert_eq!(calls[0].input, &json!({"a": 1}));
        assert!(
            r.message
                .content
                .iter()
                .all(|b| !matches!(b, Block::Text { .. }))
        );
    }

    #[test]
    fn length_cut_keeps_raw_arguments_and_errors_are_reported() {
        let r = stream(&[
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\":"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}),
        ])
        .expect("reply");
        assert_eq!(r.stop_reason, StopReason::MaxTokens);
        assert_eq!(
            r.message.tool_calls().next().and_then(|c| c.raw_input),
            Some("{\"a\":")
        );
        let e = stream(&[json!({"error":{"message":"boom","type":"server_error"}})]);
        assert!(matches!(e, Err(ModelError::StreamError { .. })));
        let sink = |_: ModelProgress| {};
        let st = ChatState::default();
        assert!(st.finish(&AtomicU64::new(0)).is_err());
        let mut st = ChatState::default();
        assert!(st.handle_data("{oops", &sink).is_err());
        assert!(st.handle_whole(&json!({"object":"x"}), &sink).is_err());
    }
}
