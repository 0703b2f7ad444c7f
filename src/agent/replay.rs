//! The conversation of a recorded run, rebuilt from its trajectory's events
//! for `runner continue`: the messages the loop held when the run ended,
//! made the way the loop makes them (see [`super::Agent::run`]), so the
//! model is sent again what it was sent before. Tool results are the
//! `output` of each `tool_result` event: what the model was shown, after
//! the output limit and redaction. Old outputs the loop elided to fit the
//! context window come back whole; the loop elides them again when needed.

use serde_json::Value;

use super::{CUT_OFF_NOTE, is_empty_reply};
use crate::model::{Block, Message, ModelReply, Role, StopReason, Usage};

/// The result given to a tool call whose `tool_result` was never recorded
/// (runner was killed while it ran): every call must have one.
pub const UNRECORDED_RESULT: &str =
    "error: no result was recorded for this call: the run was stopped while it ran.";

/// A rebuilt conversation.
#[derive(Debug, Default, PartialEq)]
pub struct Replayed {
    pub messages: Vec<Message>,
    /// The highest step number recorded (model calls made so far).
    pub steps: u32,
    /// Calls that got [`UNRECORDED_RESULT`].
    pub unanswered_calls: usize,
    /// Events that could not be read as what their type says (left out).
    pub unreadable_events: usize,
}

/// The tool calls of the last assistant message, waiting for results.
struct Pending {
    ids: Vec<String>,
    results: Vec<Option<Block>>,
}

/// Rebuilds the conversation from `events`, in trajectory order.
pub fn rebuild(events: &[Value]) -> Replayed {
    let mut out = Replayed::default();
    let mut pending: Option<Pending> = None;
    for ev in events {
        let kind = ev.get("type").and_then(Value::as_str).unwrap_or("");
        if let Some(step) = ev.get("step").and_then(Value::as_u64) {
            out.steps = out.steps.max(u32::try_from(step).unwrap_or(u32::MAX));
        }
        match kind {
            "tool_result" => {
                let id = ev.get("id").and_then(Value::as_str).unwrap_or("");
                let slot = pending.as_mut().and_then(|p| {
                    let i = p.ids.iter().position(|c| c == id)?;
                    p.results.get_mut(i).filter(|r| r.is_none())
                });
                match (slot, ev.get("output").and_then(Value::as_str)) {
                    (Some(slot), Some(output)) => {
                        *slot = Some(Block::ToolResult {
                            tool_use_id: id.to_string(),
                            content: output.to_string(),
                            is_error: ev.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                        });
                    }
                    _ => out.unreadable_events += 1,
                }
            }
            "user_message" => {
                flush(&mut pending, &mut out);
                match ev.get("text").and_then(Value::as_str) {
                    Some(text) => push_user_text(&mut out.messages, text),
                    None => out.unreadable_events += 1,
                }
            }
            "model_reply" => {
                flush(&mut pending, &mut out);
                match reply_of(ev) {
                    Some(reply) => pending = keep(reply, &mut out.messages),
                    None => out.unreadable_events += 1,
                }
            }
            "model_request" | "run_finished" | "continuation" => flush(&mut pending, &mut out),
            _ => {}
        }
    }
    flush(&mut pending, &mut out);
    out
}

/// Adds the user's `text` as the next turn: a block of the last message
/// when that is the user's (tool results, or a message no reply followed:
/// a run stopped before its model answered), else a message of its own.
/// Two user messages in a row are never sent.
pub fn push_user_text(messages: &mut Vec<Message>, text: impl Into<String>) {
    let block = Block::Text { text: text.into() };
    match messages.last_mut() {
        Some(last) if last.role == Role::User => last.content.push(block),
        _ => messages.push(Message {
            role: Role::User,
            content: vec![block],
        }),
    }
}

/// The reply a `model_reply` event records.
fn reply_of(ev: &Value) -> Option<ModelReply> {
    let message: Message = serde_json::from_value(ev.get("message")?.clone()).ok()?;
    let stop_reason = match ev.get("stop_reason")? {
        Value::String(s) => StopReason::from_name(s),
        other => serde_json::from_value(other.clone()).ok()?,
    };
    let usage: Usage = ev
        .get("usage")
        .and_then(|u| serde_json::from_value(u.clone()).ok())
        .unwrap_or_default();
    Some(ModelReply {
        message,
        stop_reason,
        usage,
        model: None,
    })
}

/// Adds `reply` to `messages` as the loop does, returning its tool calls
/// when their results are to follow.
fn keep(reply: ModelReply, messages: &mut Vec<Message>) -> Option<Pending> {
    // Asked again; never part of the conversation.
    if is_empty_reply(&reply) {
        return None;
    }
    let has_calls = reply.message.tool_calls().next().is_some();
    // Trimmed and asked again, or the end of the run: not kept.
    if (reply.stop_reason == StopReason::ModelContextWindowExceeded && !has_calls)
        || reply.stop_reason == StopReason::Refusal
    {
        return None;
    }
    let cut_off = reply.stop_reason == StopReason::MaxTokens;
    if !has_calls {
        if reply.message.content.is_empty() && !cut_off {
            return None;
        }
        messages.push(reply.message);
        if cut_off {
            messages.push(Message::user_text(CUT_OFF_NOTE));
        }
        return None;
    }
    let ids: Vec<String> = reply
        .message
        .tool_calls()
        .map(|c| c.id.to_string())
        .collect();
    messages.push(reply.message);
    Some(Pending {
        results: vec![None; ids.len()],
        ids,
    })
}

/// Adds the results of the pending calls as one user message, in call
/// order, each missing one as [`UNRECORDED_RESULT`].
fn flush(pending: &mut Option<Pending>, out: &mut Replayed) {
    let Some(p) = pending.take() else {
        return;
    };
    let content = p
        .ids
        .into_iter()
        .zip(p.results)
        .map(|(id, r)| {
            r.unwrap_or_else(|| {
                out.unanswered_calls += 1;
                Block::ToolResult {
                    tool_use_id: id,
                    content: UNRECORDED_RESULT.to_string(),
                    is_error: true,
                }
            })
        })
        .collect();
    out.messages.push(Message {
        role: Role::User,
        content,
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::agent::{Agent, AgentSettings, Conversation, Limits};
    use crate::event::Event;
    use crate::model::ToolSpec;
    use crate::model::scripted::ScriptedModel;
    use crate::tools::{Registry, Tool, ToolContext, ToolOutcome};

    /// Echoes its input's `command`.
    struct Echo;

    #[async_trait]
    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "bash".into(),
                description: "echo".into(),
                input_schema: json!({"type": "object"}),
                native: None,
            }
        }
        async fn call(&self, input: &Value, _ctx: &ToolContext) -> ToolOutcome {
            ToolOutcome {
                content: format!("ran {}", input["command"]),
                is_error: false,
                exec: None,
                fatal: None,
            }
        }
    }

    /// Runs the real loop on `turns` and returns its conversation and its
    /// events as the trajectory holds them.
    async fn run_loop(turns: Value, max_steps: u32) -> (Vec<Message>, Vec<Value>) {
        let model = ScriptedModel::parse(&turns.to_string()).expect("script");
        let mut tools = Registry::new();
        tools.register(Box::new(Echo));
        let settings = AgentSettings {
            system: "sys".into(),
            limits: Limits {
                max_steps: Some(max_steps),
                ..Limits::default()
            },
            max_tokens: 100,
            context_window_tokens: 1_000_000,
            context_window_auto: false,
        };
        let cost = |_: &Usage| 0.0;
        let agent = Agent {
            model: &model,
            tools: &tools,
            settings: &settings,
            cost: &cost,
            outputs: None,
            approver: None,
        };
        let events = Mutex::new(Vec::new());
        let sink = |e: &Event| {
            if !matches!(e, Event::TextDelta { .. }) {
                let v = serde_json::to_value(e).expect("serializes");
                events.lock().expect("lock").push(v);
            }
        };
        let mut convo = Conversation::default();
        sink(&Event::UserMessage {
            text: "the task".into(),
        });
        convo.messages.push(Message::user_text("the task"));
        agent
            .run(&mut convo, &sink, &CancellationToken::new())
            .await;
        (convo.messages, events.into_inner().expect("lock"))
    }

    fn call(cmd: &str) -> Value {
        json!({"name": "bash", "input": {"command": cmd}})
    }

    #[tokio::test]
    async fn the_rebuilt_conversation_is_the_loops() {
        let out = json!({"output_tokens": 5, "input_tokens": 1});
        let cases = [
            // Calls, parallel calls, a final text.
            (
                json!([
                    {"tool_calls": [call("a")], "usage": out},
                    {"tool_calls": [call("b"), call("c")], "usage": out},
                    {"text": "done", "usage": out}
                ]),
                10,
            ),
            // A reply cut off by max_tokens (the loop adds its note), an
            // empty reply (asked again, never kept), a paused turn.
            (
                json!([
                    {"text": "half", "stop_reason": "max_tokens", "usage": out},
                    {"text": "", "usage": {"output_tokens": 0, "input_tokens": 1}},
                    {"text": "paused", "stop_reason": "pause_turn", "usage": out},
                    {"tool_calls": [call("d")], "usage": out},
                    {"text": "end", "usage": out}
                ]),
                10,
            ),
            // Ended by the step limit after a call: results last.
            (
                json!([
                    {"tool_calls": [call("e")], "usage": out},
                    {"tool_calls": [call("f")], "usage": out},
                    {"text": "never", "usage": out}
                ]),
                2,
            ),
            // A refusal is not kept.
            (
                json!([
                    {"tool_calls": [call("g")], "usage": out},
                    {"text": "no", "stop_reason": "refusal", "usage": out}
                ]),
                10,
            ),
        ];
        for (turns, max_steps) in cases {
            let (messages, events) = run_loop(turns.clone(), max_steps).await;
            let r = rebuild(&events);
            assert_eq!(r.messages, messages, "turns {turns}");
            assert_eq!((r.unanswered_calls, r.unreadable_events), (0, 0));
            let steps = events
                .iter()
                .filter(|e| e["type"] == "model_request")
                .count();
            assert_eq!(r.steps as usize, steps);
        }
    }

    #[test]
    fn a_call_without_a_recorded_result_gets_one_saying_so() {
        let reply = json!({"type": "model_reply", "step": 1, "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 5},
            "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "a"}},
                {"type": "tool_use", "id": "t2", "name": "bash", "input": {"command": "b"}}]}});
        let events = [
            json!({"type": "user_message", "text": "task"}),
            reply,
            json!({"type": "tool_call", "step": 1, "id": "t1"}),
            json!({"type": "tool_result", "step": 1, "id": "t1", "is_error": false, "output": "A"}),
            // An answer to no call, and a garbled reply, are left out.
            json!({"type": "tool_result", "step": 1, "id": "zz", "output": "?"}),
            json!({"type": "tool_call", "step": 1, "id": "t2"}),
        ];
        let r = rebuild(&events);
        assert_eq!(r.steps, 1);
        assert_eq!((r.unanswered_calls, r.unreadable_events), (1, 1));
        assert_eq!(r.messages.len(), 3);
        assert_eq!(
            r.messages[2].content,
            vec![
                Block::ToolResult {
                    tool_use_id: "t1".into(),
                    content: "A".into(),
                    is_error: false
                },
                Block::ToolResult {
                    tool_use_id: "t2".into(),
                    content: UNRECORDED_RESULT.into(),
                    is_error: true
                },
            ]
        );
    }
}
