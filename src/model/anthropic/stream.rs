//! Assembles an Anthropic Messages reply from its SSE events.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::reply::{merge_usage, opaque, stop_reason, text_of, tool_use};
use crate::model::event_stream::EventParser;
use crate::model::sse::SseEvent;
use crate::model::{
    Block, Message, ModelError, ModelProgress, ModelReply, ProgressSink, Role, Usage,
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
    /// Thinking, server tool use and result blocks, and kinds added later:
    /// the `content_block_start` object with its deltas applied, to go
    /// back as the API sent it.
    Opaque {
        block: Map<String, Value>,
        /// `input_json_delta` pieces (a server tool call's input).
        json: String,
    },
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

impl EventParser for StreamState {
    fn event(&mut self, ev: &SseEvent, progress: ProgressSink<'_>) -> Result<(), ModelError> {
        self.handle(ev.event.as_deref(), &ev.data, progress)
    }

    fn is_done(&self) -> bool {
        self.stopped
    }
}

impl StreamState {
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
                self.blocks
                    .insert(index_of(&v)?, partial(&v["content_block"]));
            }
            "content_block_delta" => self.delta(index_of(&v)?, &v["delta"], progress)?,
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(r.to_string());
                }
                merge_usage(&mut self.usage, &v["usage"]);
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let kind = v["error"]["type"].as_str().unwrap_or("unknown").to_string();
                let message = text_of(&v["error"], "message");
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

    /// Applies one `content_block_delta` to its block.
    fn delta(
        &mut self,
        index: u64,
        d: &Value,
        progress: ProgressSink<'_>,
    ) -> Result<(), ModelError> {
        let Some(block) = self.blocks.get_mut(&index) else {
            return Err(ModelError::Protocol(format!(
                "delta for block {index} that never started"
            )));
        };
        match (block, d["type"].as_str()) {
            (Partial::Text(t), Some("text_delta")) => {
                let piece = d["text"].as_str().unwrap_or("");
                t.push_str(piece);
                if !piece.is_empty() {
                    progress(ModelProgress::TextDelta {
                        text: piece.to_string(),
                    });
                }
            }
            (
                Partial::ToolUse { json, .. } | Partial::Opaque { json, .. },
                Some("input_json_delta"),
            ) => {
                json.push_str(d["partial_json"].as_str().unwrap_or(""));
            }
            // A thinking block's text, then the signature that covers it.
            (Partial::Opaque { block, .. }, Some("thinking_delta")) => {
                append(block, "thinking", d["thinking"].as_str().unwrap_or(""));
            }
            (Partial::Opaque { block, .. }, Some("signature_delta")) => {
                append(block, "signature", d["signature"].as_str().unwrap_or(""));
            }
            // Citations of text, and delta kinds added later, are not kept.
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
            .filter_map(Partial::finish)
            .filter(|b| !matches!(b, Block::Text { text } if text.is_empty()))
            .collect();
        Ok(ModelReply {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop_reason: stop_reason(&stop),
            usage: self.usage,
            model: self.model,
        })
    }
}

/// The partial block a `content_block_start` opens.
fn partial(b: &Value) -> Partial {
    match b["type"].as_str() {
        Some("text") => Partial::Text(text_of(b, "text")),
        Some("tool_use") => Partial::ToolUse {
            id: text_of(b, "id"),
            name: text_of(b, "name"),
            start_input: b.get("input").cloned().unwrap_or_else(|| json!({})),
            json: String::new(),
        },
        _ => Partial::Opaque {
            block: b.as_object().cloned().unwrap_or_default(),
            json: String::new(),
        },
    }
}

impl Partial {
    /// The finished block; `None` for an opaque start that was no block.
    fn finish(self) -> Option<Block> {
        match self {
            Partial::Text(text) => Some(Block::Text { text }),
            Partial::ToolUse {
                id,
                name,
                start_input,
                json,
            } => Some(tool_use(id, name, tool_input(start_input, &json))),
            Partial::Opaque { mut block, json } => {
                // A thinking block cut before its signature (max_tokens)
                // cannot go back: the API checks the signature.
                let unsigned = |b: &Map<String, Value>| {
                    b.get("signature")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                };
                if block.get("type").and_then(Value::as_str) == Some("thinking") && unsigned(&block)
                {
                    return None;
                }
                // A server tool call's input arrives like a client one's;
                // JSON that does not parse (a max_tokens cut) leaves the
                // start's input, as the API never ran such a call.
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&json) {
                    block.insert("input".into(), v);
                }
                opaque(Value::Object(block))
            }
        }
    }
}

/// A tool call's input from its start and its JSON deltas. No deltas means
/// the start's input (normally `{}`); JSON that is not an object is kept
/// raw (`Err`).
fn tool_input(start_input: Value, json: &str) -> Result<Value, String> {
    if json.trim().is_empty() {
        return Ok(match start_input {
            v @ Value::Object(_) => v,
            _ => json!({}),
        });
    }
    match serde_json::from_str::<Value>(json) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(json.to_string()),
    }
}

/// Appends `piece` to the string field `key` (created when missing).
fn append(block: &mut Map<String, Value>, key: &str, piece: &str) {
    match block.get_mut(key) {
        Some(Value::String(s)) => s.push_str(piece),
        _ => {
            block.insert(key.into(), Value::String(piece.to_string()));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StopReason;
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
    fn thinking_and_server_tool_blocks_are_assembled_as_sent() {
        let result = json!({"type":"web_search_tool_result","tool_use_id":"srvtoolu_1",
            "content":[{"type":"web_search_result","url":"https://example.com","title":"t",
                        "encrypted_content":"Eq","page_age":null}]});
        let redacted = json!({"type":"redacted_thinking","data":"EmwKAhgB"});
        let delta = |i: u64, d: Value| {
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":i,"delta":d}),
            )
        };
        let open = |i: u64, b: &Value| {
            (
                "content_block_start",
                json!({"type":"content_block_start","index":i,"content_block":b}),
            )
        };
        let mut ev = vec![
            start(),
            // As recorded from the API: the start carries empty fields.
            open(0, &json!({"type":"thinking","thinking":"","signature":""})),
            delta(0, json!({"type":"thinking_delta","thinking":"Let me "})),
            delta(0, json!({"type":"thinking_delta","thinking":"look."})),
            delta(0, json!({"type":"signature_delta","signature":"EsQDCkYI"})),
            // As in the docs: no signature field until its delta.
            open(1, &json!({"type":"thinking","thinking":""})),
            delta(1, json!({"type":"signature_delta","signature":"EqQB"})),
            open(
                2,
                &json!({"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}),
            ),
            json_delta(2, ""),
            json_delta(2, "{\"query\": \"w"),
            json_delta(2, "x\"}"),
            open(3, &result),
            open(4, &redacted),
            // A server call whose input was cut keeps its start input.
            open(
                5,
                &json!({"type":"server_tool_use","id":"srvtoolu_2","name":"web_fetch","input":{}}),
            ),
            json_delta(5, "{\"url\": \"ht"),
            // No block at all: dropped rather than sent back.
            open(6, &Value::Null),
            // Thinking cut before its signature: it could not go back.
            open(7, &json!({"type":"thinking","thinking":"","signature":""})),
            delta(7, json!({"type":"thinking_delta","thinking":"and then"})),
        ];
        ev.extend(stop("pause_turn", 9));
        let (r, texts) = run(&ev);
        let r = r.expect("reply");
        assert!(texts.is_empty(), "thinking is not shown as text: {texts:?}");
        assert_eq!(r.stop_reason, StopReason::PauseTurn);
        assert_eq!(r.message.tool_calls().count(), 0);
        let values: Vec<Value> = r
            .message
            .content
            .iter()
            .map(|b| match b {
                Block::Opaque { provider, value } if provider == "anthropic" => value.clone(),
                other => panic!("not an Anthropic opaque block: {other:?}"),
            })
            .collect();
        assert_eq!(
            values,
            vec![
                json!({"type":"thinking","thinking":"Let me look.","signature":"EsQDCkYI"}),
                json!({"type":"thinking","thinking":"","signature":"EqQB"}),
                json!({"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"wx"}}),
                result,
                redacted,
                json!({"type":"server_tool_use","id":"srvtoolu_2","name":"web_fetch","input":{}}),
            ]
        );
    }
}
