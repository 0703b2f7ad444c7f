//! Assembles an Anthropic Messages reply from its SSE events, or from a
//! whole JSON message when a server answers without streaming.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::model::{
    Block, Message, ModelError, ModelProgress, ModelReply, ProgressSink, Role, StopReason, Usage,
};

/// A content block being streamed.
#[derive(Debug)]
enum Partial {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        /// The `input` of `content_block_start` (normally `{}`).
        start_input: Value,
        json: String,
    },
    /// Thinking, server tool use and other blocks this runner does not keep.
    Ignored,
}

/// The state of one streamed message.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    blocks: BTreeMap<u64, Partial>,
    usage: Usage,
    model: Option<String>,
    stop_reason: Option<String>,
    started: bool,
    stopped: bool,
}

/// Stream error types worth retrying the whole call for.
fn stream_error_is_retryable(kind: &str) -> bool {
    matches!(
        kind,
        "overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error"
    )
}

impl StreamState {
    /// Whether `message_stop` arrived.
    pub(crate) fn is_done(&self) -> bool {
        self.stopped
    }

    /// Handles one SSE event. Unknown event types are ignored, as the API
    /// versioning policy asks.
    pub(crate) fn handle(
        &mut self,
        event: Option<&str>,
        data: &str,
        progress: ProgressSink<'_>,
    ) -> Result<(), ModelError> {
        if data.is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            ModelError::Protocol(format!(
                "stream event {} is not JSON ({e}): {}",
                event.unwrap_or("(unnamed)"),
                crate::model::http::snippet(data)
            ))
        })?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(event)
            .unwrap_or("");
        match kind {
            "message_start" => {
                self.started = true;
                let msg = &v["message"];
                self.model = msg["model"].as_str().map(str::to_string);
                merge_usage(&mut self.usage, &msg["usage"]);
            }
            "content_block_start" => {
                let index = index_of(&v)?;
                let b = &v["content_block"];
                let partial = match b["type"].as_str() {
                    Some("text") => Partial::Text(b["text"].as_str().unwrap_or("").to_string()),
                    Some("tool_use") => Partial::ToolUse {
                        id: b["id"].as_str().unwrap_or("").to_string(),
                        name: b["name"].as_str().unwrap_or("").to_string(),
                        start_input: b.get("input").cloned().unwrap_or_else(|| json!({})),
                        json: String::new(),
                    },
                    _ => Partial::Ignored,
                };
                self.blocks.insert(index, partial);
            }
            "content_block_delta" => {
                let index = index_of(&v)?;
                let d = &v["delta"];
                match (self.blocks.get_mut(&index), d["type"].as_str()) {
                    (Some(Partial::Text(t)), Some("text_delta")) => {
                        let piece = d["text"].as_str().unwrap_or("");
                        t.push_str(piece);
                        if !piece.is_empty() {
                            progress(ModelProgress::TextDelta {
                                text: piece.to_string(),
                            });
                        }
                    }
                    (Some(Partial::ToolUse { json, .. }), Some("input_json_delta")) => {
                        json.push_str(d["partial_json"].as_str().unwrap_or(""));
                    }
                    (None, _) => {
                        return Err(ModelError::Protocol(format!(
                            "delta for block {index} that never started"
                        )));
                    }
                    // Thinking, signature and citation deltas are not kept.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(r.to_string());
                }
                merge_usage(&mut self.usage, &v["usage"]);
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let kind = v["error"]["type"].as_str().unwrap_or("unknown").to_string();
                let message = v["error"]["message"].as_str().unwrap_or("").to_string();
                return Err(ModelError::StreamError {
                    retryable: stream_error_is_retryable(&kind),
                    kind,
                    message,
                });
            }
            // content_block_stop, ping and event types added later.
            _ => {}
        }
        Ok(())
    }

    /// The reply, once the stream has ended. A stream cut before its stop
    /// reason is a retryable error.
    pub(crate) fn finish(self) -> Result<ModelReply, ModelError> {
        let Some(stop) = self.stop_reason else {
            return Err(ModelError::StreamError {
                kind: "incomplete".into(),
                message: if self.started {
                    "the stream ended before the message was complete".into()
                } else {
                    "the stream ended before message_start".into()
                },
                retryable: true,
            });
        };
        let content = self
            .blocks
            .into_values()
            .filter_map(|p| match p {
                Partial::Text(text) => Some(Block::Text { text }),
                Partial::ToolUse {
                    id,
                    name,
                    start_input,
                    json,
                } => Some(tool_use(id, name, start_input, &json)),
                Partial::Ignored => None,
            })
            .filter(|b| !matches!(b, Block::Text { text } if text.is_empty()))
            .collect();
        Ok(ModelReply {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop_reason: StopReason::from_anthropic(&stop),
            usage: self.usage,
            model: self.model,
        })
    }
}

/// A tool_use block from its accumulated JSON. Empty JSON means no input
/// (`{}`); JSON that does not parse to an object (a max_tokens cut, a
/// model mistake) is kept in `raw_input` with an empty `input`.
fn tool_use(id: String, name: String, start_input: Value, json: &str) -> Block {
    let (input, raw_input) = if json.trim().is_empty() {
        match start_input {
            Value::Object(_) => (start_input, None),
            _ => (json!({}), None),
        }
    } else {
        match serde_json::from_str::<Value>(json) {
            Ok(v @ Value::Object(_)) => (v, None),
            _ => (json!({}), Some(json.to_string())),
        }
    };
    Block::ToolUse {
        id,
        name,
        input,
        raw_input,
    }
}

fn index_of(v: &Value) -> Result<u64, ModelError> {
    v["index"].as_u64().ok_or_else(|| {
        ModelError::Protocol(format!(
            "{} event without a block index",
            v["type"].as_str().unwrap_or("stream")
        ))
    })
}

/// Takes the usage fields present in `u` (message_delta repeats some,
/// message_start has the input side).
fn merge_usage(usage: &mut Usage, u: &Value) {
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

/// A reply from a whole (non-streaming) Messages API response body.
pub(crate) fn reply_from_json(v: &Value) -> Result<ModelReply, ModelError> {
    let Some(blocks) = v.get("content").and_then(Value::as_array) else {
        return Err(ModelError::Protocol(format!(
            "response has no content array: {}",
            crate::model::http::snippet(&v.to_string())
        )));
    };
    let mut content = Vec::new();
    for b in blocks {
        match b["type"].as_str() {
            Some("text") => {
                let text = b["text"].as_str().unwrap_or("").to_string();
                if !text.is_empty() {
                    content.push(Block::Text { text });
                }
            }
            Some("tool_use") => {
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                let block = match input {
                    Value::Object(_) => Block::ToolUse {
                        id: b["id"].as_str().unwrap_or("").to_string(),
                        name: b["name"].as_str().unwrap_or("").to_string(),
                        input,
                        raw_input: None,
                    },
                    other => Block::ToolUse {
                        id: b["id"].as_str().unwrap_or("").to_string(),
                        name: b["name"].as_str().unwrap_or("").to_string(),
                        input: json!({}),
                        raw_input: Some(other.to_string()),
                    },
                };
                content.push(block);
            }
            _ => {}
        }
    }
    let mut usage = Usage::default();
    merge_usage(&mut usage, &v["usage"]);
    let stop = v["stop_reason"].as_str().unwrap_or("end_turn");
    Ok(ModelReply {
        message: Message {
            role: Role::Assistant,
            content,
        },
        stop_reason: StopReason::from_anthropic(stop),
        usage,
        model: v["model"].as_str().map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn run(events: &[(&str, Value)]) -> (Result<ModelReply, ModelError>, Vec<String>) {
        let seen = Mutex::new(Vec::new());
        let sink = |p: ModelProgress| {
            if let ModelProgress::TextDelta { text } = p
                && let Ok(mut s) = seen.lock()
            {
                s.push(text);
            }
        };
        let mut st = StreamState::default();
        for (name, data) in events {
            if let Err(e) = st.handle(Some(name), &data.to_string(), &sink) {
                return (Err(e), Vec::new());
            }
        }
        let texts = seen.into_inner().unwrap_or_default();
        (st.finish(), texts)
    }

    fn start() -> (&'static str, Value) {
        (
            "message_start",
            json!({"type":"message_start","message":{"model":"claude-m","usage":{"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":1}}}),
        )
    }

    fn tool_start(i: u64) -> (&'static str, Value) {
        (
            "content_block_start",
            json!({"type":"content_block_start","index":i,"content_block":{"type":"tool_use","id":format!("t{i}"),"name":"bash","input":{}}}),
        )
    }

    fn json_delta(i: u64, s: &str) -> (&'static str, Value) {
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":i,"delta":{"type":"input_json_delta","partial_json":s}}),
        )
    }

    fn stop(reason: &str, out: u64) -> Vec<(&'static str, Value)> {
        vec![
            (
                "message_delta",
                json!({"type":"message_delta","delta":{"stop_reason":reason},"usage":{"output_tokens":out}}),
            ),
            ("message_stop", json!({"type":"message_stop"})),
        ]
    }

    #[test]
    fn text_and_tool_use_with_usage() {
        let mut ev = vec![
            start(),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            ),
            ("ping", json!({"type":"ping"})),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}),
            ),
            tool_start(1),
            json_delta(1, ""),
            json_delta(1, "{\"command\": \"l"),
            json_delta(1, "s\"}"),
            ("something_new", json!({"type":"something_new"})),
        ];
        ev.extend(stop("tool_use", 42));
        let (r, texts) = run(&ev);
        let r = r.expect("reply");
        assert_eq!(texts, vec!["Hi"]);
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 42,
                cache_creation_input_tokens: 3,
                cache_read_input_tokens: 4
            }
        );
        assert_eq!(r.model.as_deref(), Some("claude-m"));
        assert_eq!(r.message.content.len(), 2);
        assert_eq!(
            r.message.content[1],
            Block::ToolUse {
                id: "t1".into(),
                name: "bash".into(),
                input: json!({"command":"ls"}),
                raw_input: None
            }
        );
    }

    #[test]
    fn empty_json_is_an_empty_object_and_bad_json_is_kept_raw() {
        let mut ev = vec![start(), tool_start(0), json_delta(0, ""), tool_start(1)];
        ev.push(json_delta(1, "[1,"));
        ev.extend(stop("tool_use", 1));
        let r = run(&ev).0.expect("reply");
        let calls: Vec<_> = r.message.tool_calls().collect();
        assert_eq!(calls[0].input, &json!({}));
        assert_eq!(calls[0].raw_input, None);
        assert_eq!(calls[1].raw_input, Some("[1,"));
        assert_eq!(calls[1].input, &json!({}));
    }

    #[test]
    fn max_tokens_mid_tool_use_keeps_the_partial_input() {
        let mut ev = vec![start(), tool_start(0), json_delta(0, "{\"path\": \"a")];
        ev.extend(stop("max_tokens", 5));
        let r = run(&ev).0.expect("reply");
        assert_eq!(r.stop_reason, StopReason::MaxTokens);
        let call = r.message.tool_calls().next().expect("call");
        assert_eq!(call.raw_input, Some("{\"path\": \"a"));
    }

    #[test]
    fn error_event_is_a_stream_error() {
        let ev = vec![
            start(),
            (
                "error",
                json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            ),
        ];
        match run(&ev).0 {
            Err(ModelError::StreamError {
                kind, retryable, ..
            }) => {
                assert_eq!(kind, "overloaded_error");
                assert!(retryable);
            }
            other => panic!("{other:?}"),
        }
        let ev = vec![(
            "error",
            json!({"type":"error","error":{"type":"invalid_request_error","message":"no"}}),
        )];
        assert!(matches!(
            run(&ev).0,
            Err(ModelError::StreamError {
                retryable: false,
                ..
            })
        ));
    }

    #[test]
    fn a_cut_stream_is_retryable_and_garbage_is_a_protocol_error() {
        let r = run(&[start(), tool_start(0)]).0;
        assert!(matches!(r, Err(ref e) if e.is_retryable()), "{r:?}");
        let mut st = StreamState::default();
        let sink = |_: ModelProgress| {};
        assert!(matches!(
            st.handle(Some("message_start"), "{not json", &sink),
            Err(ModelError::Protocol(_))
        ));
        assert!(matches!(
            st.handle(None, &json_delta(9, "x").1.to_string(), &sink),
            Err(ModelError::Protocol(_))
        ));
    }

    #[test]
    fn whole_json_message() {
        let v = json!({"content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"a"},
            {"type":"tool_use","id":"x","name":"n","input":{"k":1}}],
            "stop_reason":"stop_sequence","model":"m","usage":{"input_tokens":1,"output_tokens":2}});
        let r = reply_from_json(&v).expect("reply");
        assert_eq!(r.stop_reason, StopReason::StopSequence);
        assert_eq!(r.message.content.len(), 2);
        assert!(reply_from_json(&json!({"nope":1})).is_err());
    }
}
