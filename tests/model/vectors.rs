//! Replays the recorded API exchanges in `tests/fixtures/llm-vectors` through
//! the real clients via the fake server: each response must parse into the
//! right reply or error, and the follow-up request the client builds from
//! its reply must have the structure of the recorded next request.
//!
//! Not replayed: vector 21 (Ollama's native `/api/chat` NDJSON), which no
//! client here speaks; Ollama is covered through its `/v1` API (vector 13).

use std::sync::Mutex;
use std::time::Duration;

use runner::model::anthropic::{AnthropicModel, DEFAULT_ANTHROPIC_BASE_URL};
use runner::model::http::ApiConfig;
use runner::model::openai::{DEFAULT_OPENAI_BASE_URL, OpenAiModel};
use runner::model::retry::RetryPolicy;
use runner::model::{
    Block, Message, Model, ModelError, ModelProgress, ModelReply, ModelRequest, Role, StopReason,
    ToolSpec,
};
use serde_json::{Value, json};

use crate::recorded::*;
use crate::support::fake_model::{FakeResponse, FakeServer};

// ---------------------------------------------------------------- driving

pub(crate) fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        ..RetryPolicy::default()
    }
}

pub(crate) fn anthropic_model(server: &FakeServer, model: &str) -> AnthropicModel {
    let mut cfg = ApiConfig::new(model, Some("test-key".into()), DEFAULT_ANTHROPIC_BASE_URL);
    cfg.base_url = server.url();
    cfg.retry = fast_retry();
    AnthropicModel::new(cfg).expect("anthropic model")
}

pub(crate) fn openai_model(server: &FakeServer, model: &str) -> OpenAiModel {
    let mut cfg = ApiConfig::new(model, Some("sk-test".into()), DEFAULT_OPENAI_BASE_URL);
    cfg.base_url = server.openai_url();
    cfg.retry = fast_retry();
    OpenAiModel::new(cfg).expect("openai model")
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Api {
    Anthropic,
    OpenAi,
}

/// Calls `model` and returns the result and the progress it reported.
pub(crate) async fn call(
    model: &dyn Model,
    system: &str,
    messages: &[Message],
    tools: &[ToolSpec],
) -> (Result<ModelReply, ModelError>, Vec<ModelProgress>) {
    let seen = Mutex::new(Vec::new());
    let sink = |p: ModelProgress| seen.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    let req = ModelRequest {
        system,
        messages,
        tools,
        max_tokens: 1024,
    };
    let r = model.complete(req, &sink).await;
    (r, seen.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// Replays a multi-turn vector: turn 0 from the recorded request; each
/// later turn from our previous reply plus the recorded new messages. After
/// each later turn, the request we sent must have the recorded structure.
pub(crate) async fn replay_turns(name: &str, api: Api) -> (Vec<ModelReply>, FakeServer) {
    let ex = exchanges(name);
    let server = FakeServer::start(ex.iter().map(|e| e.response.clone()).collect()).await;
    let model_name = ex[0].request["model"].as_str().unwrap_or("m").to_string();
    let (model, system, mut msgs, tools): (Box<dyn Model>, String, Vec<Message>, Vec<ToolSpec>) =
        match api {
            Api::Anthropic => (
                Box::new(anthropic_model(&server, &model_name)),
                content_text(&ex[0].request["system"]),
                anthropic_messages(&ex[0].request["messages"]),
                anthropic_tools(&ex[0].request),
            ),
            Api::OpenAi => {
                let (system, msgs) = openai_messages(&ex[0].request["messages"]);
                (
                    Box::new(openai_model(&server, &model_name)),
                    system,
                    msgs,
                    openai_tools(&ex[0].request),
                )
            }
        };
    let mut replies: Vec<ModelReply> = Vec::new();
    for (k, e) in ex.iter().enumerate() {
        let mut expected = e.request["messages"].clone();
        if k > 0 {
            let prev = replies.last().expect("previous reply").clone();
            let recorded = match api {
                Api::Anthropic => anthropic_messages(&expected),
                Api::OpenAi => openai_messages(&expected).1,
            };
            let at = msgs.len();
            assert_eq!(recorded[at].role, Role::Assistant, "{name}: turn {k} shape");
            // Our ids replace the recorded ones (they differ only where the
            // server sent none and we generated `call_<n>`).
            let map: Vec<(String, String)> = recorded[at]
                .tool_calls()
                .zip(prev.message.tool_calls())
                .map(|(r, o)| (r.id.to_string(), o.id.to_string()))
                .collect();
            remap_ids(&mut expected, &map);
            msgs.push(prev.message.clone());
            let mut rest = match api {
                Api::Anthropic => anthropic_messages(&expected),
                Api::OpenAi => openai_messages(&expected).1,
            };
            msgs.extend(rest.drain(at + 1..));
        }
        let (r, _) = call(model.as_ref(), &system, &msgs, &tools).await;
        let reply = r.unwrap_or_else(|e| panic!("{name}: turn {k} failed: {e}"));
        let sent = server.requests().last().expect("a request").body.clone();
        if k > 0 {
            let (ours, theirs) = match api {
                Api::Anthropic => (
                    anthropic_shape(&sent["messages"]),
                    anthropic_shape(&expected),
                ),
                Api::OpenAi => {
                    let drop_system = |v: Vec<Value>| -> Vec<Value> {
                        v.into_iter().filter(|m| m["role"] != "system").collect()
                    };
                    (
                        drop_system(openai_shape(&sent["messages"])),
                        drop_system(openai_shape(&expected)),
                    )
                }
            };
            assert_eq!(
                ours,
                theirs,
                "{name}: follow-up request {k} differs from the recorded one\nours: {}\nrecorded: {}",
                serde_json::to_string_pretty(&ours).unwrap_or_default(),
                serde_json::to_string_pretty(&theirs).unwrap_or_default()
            );
        }
        replies.push(reply);
    }
    server.assert_protocol_ok();
    server.assert_all_served();
    (replies, server)
}

/// Serves `responses` for one call.
pub(crate) async fn one_call(
    api: Api,
    model: &str,
    responses: Vec<FakeResponse>,
) -> (
    Result<ModelReply, ModelError>,
    Vec<ModelProgress>,
    FakeServer,
) {
    let server = FakeServer::start(responses).await;
    let msgs = vec![Message::user_text("hello")];
    let (r, p) = match api {
        Api::Anthropic => call(&anthropic_model(&server, model), "sys", &msgs, &[]).await,
        Api::OpenAi => call(&openai_model(&server, model), "sys", &msgs, &[]).await,
    };
    (r, p, server)
}

fn text_of(progress: &[ModelProgress]) -> String {
    progress
        .iter()
        .filter_map(|p| match p {
            ModelProgress::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

pub(crate) fn retries(progress: &[ModelProgress]) -> usize {
    progress
        .iter()
        .filter(|p| matches!(p, ModelProgress::Retry { .. }))
        .count()
}

// ------------------------------------------------------ Anthropic streams

#[tokio::test]
async fn v01_text_then_tool_use_with_input_json_delta() {
    let sse = text("01_anthropic_sse_text_plus_tool_use_input_json_delta.sse");
    let (r, p, _s) = one_call(
        Api::Anthropic,
        "claude-sonnet-4",
        vec![FakeResponse::raw_sse(sse)],
    )
    .await;
    let r = r.expect("reply");
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(
        r.message.text(),
        "I'll check the current weather in Paris for you."
    );
    assert_eq!(text_of(&p), r.message.text());
    let call = r.message.tool_calls().next().expect("tool call");
    assert_eq!(
        (call.id, call.name),
        ("toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather")
    );
    assert_eq!(call.input, &json!({"location": "Paris"}));
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (377, 65));
    assert_eq!(r.model.as_deref(), Some("claude-sonnet-4-20250514"));
}

#[tokio::test]
async fn v01_survives_any_chunking() {
    let sse = text("01_anthropic_sse_text_plus_tool_use_input_json_delta.sse");
    for size in [1, 7, 64] {
        let resp = FakeResponse::raw_sse(sse.clone()).chunked(size);
        let (r, _, _s) = one_call(Api::Anthropic, "m", vec![resp]).await;
        let r = r.unwrap_or_else(|e| panic!("chunk size {size}: {e}"));
        assert_eq!(r.message.tool_calls().count(), 1, "chunk size {size}");
    }
}

#[tokio::test]
async fn v02_max_tokens_mid_tool_use_keeps_partial_input() {
    let sse = text("02_anthropic_sse_max_tokens_mid_tool_use.sse");
    let (r, _, _s) = one_call(Api::Anthropic, "m", vec![FakeResponse::raw_sse(sse)]).await;
    let r = r.expect("reply");
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    let call = r.message.tool_calls().next().expect("tool call");
    assert_eq!(call.name, "make_file");
    assert_eq!(call.input, &json!({}));
    let raw = call.raw_input.expect("raw input kept");
    assert!(
        raw.starts_with('{') && raw.ends_with("Filing taxes"),
        "{raw}"
    );
    assert!(
        r.message
            .text()
            .starts_with("I'll create a comprehensive tax guide")
    );
}

#[tokio::test]
async fn v03_refusal_with_empty_text() {
    let sse = text("03_anthropic_sse_refusal.sse");
    let (r, _, _s) = one_call(Api::Anthropic, "m", vec![FakeResponse::raw_sse(sse)]).await;
    let r = r.expect("reply");
    assert_eq!(r.stop_reason, StopReason::Refusal);
    assert!(r.message.content.is_empty(), "empty text block dropped");
}

#[tokio::test]
async fn v20_docs_stream_with_split_json_fragments() {
    let sse = text("20_anthropic_docs_sse_text_then_tool_use.sse");
    let (r, _, _s) = one_call(Api::Anthropic, "m", vec![FakeResponse::raw_sse(sse)]).await;
    let r = r.expect("reply");
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    let call = r.message.tool_calls().next().expect("tool call");
    assert_eq!(call.input["location"], "San Francisco, CA");
    assert_eq!(call.input["unit"], "fahrenheit");
    assert!(call.raw_input.is_none());
}

#[tokio::test]
async fn v19_error_event_after_200_is_retried_whole() {
    let (r, p, s) = one_call(
        Api::Anthropic,
        "m",
        vec![
            FakeResponse::raw_sse(text("19_anthropic_sse_error_event_overloaded.sse")),
            FakeResponse::raw_sse(text("03_anthropic_sse_refusal.sse")),
        ],
    )
    .await;
    assert_eq!(
        r.expect("retried to success").stop_reason,
        StopReason::Refusal
    );
    assert_eq!(s.requests().len(), 2);
    assert_eq!(retries(&p), 1);
    // A partial message before the error is discarded, not merged.
    let partial = text("01_anthropic_sse_text_plus_tool_use_input_json_delta.sse");
    let cut = partial
        .find("event: content_block_stop")
        .expect("cut point");
    let broken = format!(
        "{}{}",
        &partial[..cut],
        text("19_anthropic_sse_error_event_overloaded.sse")
    );
    let (r, p, _s) = one_call(
        Api::Anthropic,
        "m",
        vec![
            FakeResponse::raw_sse(broken),
            FakeResponse::anthropic_text("fresh"),
        ],
    )
    .await;
    assert_eq!(r.expect("reply").message.text(), "fresh");
    assert_eq!(
        text_of(&p),
        "I'll check the current weather in Paris for you.fresh"
    );
}

// ------------------------------------------------ Anthropic multi-turn

#[tokio::test]
async fn v04_tool_use_then_is_error_result() {
    let (replies, server) = replay_turns(
        "04_anthropic_tool_use_then_is_error_tool_result.json",
        Api::Anthropic,
    )
    .await;
    assert_eq!(replies[0].stop_reason, StopReason::ToolUse);
    assert_eq!(replies[1].stop_reason, StopReason::EndTurn);
    let sent = &server.requests()[1].body["messages"][2]["content"][0];
    assert_eq!(sent["is_error"], json!(true));
    let h = &server.requests()[0];
    assert_eq!(h.path, "/v1/messages");
    assert_eq!(h.header("x-api-key"), Some("test-key"));
    assert_eq!(h.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(h.body["stream"], json!(true));
}

#[tokio::test]
async fn v07_streamed_tool_loop() {
    for (i, part) in ["0", "1"].iter().enumerate() {
        let inline =
            load("07_anthropic_stream_tool_loop.json")["interactions"][i]["response"]["body"]
                .clone();
        assert_eq!(
            inline,
            json!(text(&format!("07_anthropic_stream_tool_loop.{part}.sse")))
        );
    }
    let (replies, _s) = replay_turns("07_anthropic_stream_tool_loop.json", Api::Anthropic).await;
    let call = replies[0].message.tool_calls().next().expect("tool call");
    assert_eq!(
        call.input,
        &json!({"location": "San Francisco, CA", "units": "f"})
    );
    assert_eq!(replies[0].usage.input_tokens, 656);
    assert_eq!(replies[0].usage.output_tokens, 74);
    assert_eq!(replies[1].stop_reason, StopReason::EndTurn);
}

#[tokio::test]
async fn v08_parallel_tool_use_x4_results_in_one_message() {
    let (replies, server) =
        replay_turns("08_anthropic_parallel_tool_use_x4.json", Api::Anthropic).await;
    let names: Vec<_> = replies[0]
        .message
        .tool_calls()
        .map(|c| c.input["name"].clone())
        .collect();
    assert_eq!(
        names,
        [
            json!("Alice"),
            json!("Bob"),
            json!("Charlie"),
            json!("Daisy")
        ]
    );
    let results = server.requests()[1].body["messages"][2]["content"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|b| b["type"] == "tool_result"));
}

#[tokio::test]
async fn v22_bash_tool_loop() {
    // The recorder renamed the tool to "shell" in its second request; the
    // protocol only needs the id to match, which replay_turns checks, so
    // compare the rest by hand here.
    let ex = exchanges("22_anthropic_bash_20250124_tool_loop.json");
    let server = FakeServer::start(ex.iter().map(|e| e.response.clone()).collect()).await;
    let model = anthropic_model(&server, "claude-sonnet-4-6");
    let mut msgs = anthropic_messages(&ex[0].request["messages"]);
    let (r, _) = call(&model, "Always use the shell tool.", &msgs, &[]).await;
    let r = r.expect("reply");
    let call0 = r.message.tool_calls().next().expect("call");
    assert_eq!(call0.name, "bash");
    assert_eq!(
        call0.input,
        &json!({"command": "python3 -c \"print(2 + 2)\""})
    );
    let recorded = anthropic_messages(&ex[1].request["messages"]);
    msgs.push(r.message.clone());
    msgs.push(recorded[2].clone());
    let (r2, _) = call(&model, "Always use the shell tool.", &msgs, &[]).await;
    assert_eq!(r2.expect("reply").stop_reason, StopReason::ToolUse);
    let ours = anthropic_shape(&server.requests()[1].body["messages"]);
    let mut theirs = anthropic_shape(&ex[1].request["messages"]);
    theirs[1]["content"][0]["name"] = json!("bash");
    assert_eq!(ours, theirs);
    server.assert_protocol_ok();
}

#[tokio::test]
async fn v23_text_editor_view() {
    let (replies, _s) = replay_turns(
        "23_anthropic_text_editor_20250728_view.json",
        Api::Anthropic,
    )
    .await;
    let c = replies[0].message.tool_calls().next().expect("call");
    assert_eq!(
        c.input,
        &json!({"command": "view", "path": "/tmp/example.py"})
    );
    assert!(replies[1].message.text().contains("hello world"));
}

#[tokio::test]
async fn v09_pause_turn_goes_back_verbatim_with_thinking_and_server_tool_blocks() {
    let ex = exchanges("09_anthropic_pause_turn.json");
    let recorded =
        load("09_anthropic_pause_turn.json")["interactions"][0]["response"]["body"]["content"]
            .clone();
    let kinds: Vec<&str> = recorded
        .as_array()
        .map(|a| a.iter().filter_map(|b| b["type"].as_str()).collect())
        .unwrap_or_default();
    assert!(kinds.contains(&"thinking") && kinds.contains(&"server_tool_use"));
    assert!(kinds.contains(&"web_search_tool_result"));
    // The paused turn, then its continuation (the recording has only the
    // first; the second answer is ours).
    let server = FakeServer::start(vec![
        ex[0].response.clone(),
        FakeResponse::anthropic_text("summary"),
    ])
    .await;
    let model = anthropic_model(&server, "claude-sonnet-4-5");
    let mut msgs = anthropic_messages(&ex[0].request["messages"]);
    let (r, _) = call(&model, "", &msgs, &[]).await;
    let r = r.expect("reply");
    assert_eq!(r.stop_reason, StopReason::PauseTurn);
    assert_eq!(r.usage.input_tokens, 401_468);
    assert_eq!(
        r.message.tool_calls().count(),
        0,
        "server tools are not ours to run"
    );
    assert!(r.message.text().starts_with("I'll run these searches"));
    // As the API asks: the paused reply goes back as the last message.
    msgs.push(r.message.clone());
    let (r2, _) = call(&model, "", &msgs, &[]).await;
    assert_eq!(r2.expect("continuation").message.text(), "summary");
    let sent = server.requests()[1].body["messages"][1].clone();
    assert_eq!(sent["role"], "assistant");
    assert!(
        sent["content"] == recorded,
        "the paused turn did not go back verbatim: sent {} blocks {:?}, received {} blocks {:?}",
        sent["content"].as_array().map_or(0, Vec::len),
        sent["content"]
            .as_array()
            .map(|a| a.iter().map(|b| b["type"].clone()).collect::<Vec<_>>()),
        kinds.len(),
        kinds
    );
    server.assert_protocol_ok();
}

#[tokio::test]
async fn v24_stop_sequence() {
    let ex = exchanges("24_anthropic_stop_sequence.json");
    let (r, _, _s) = one_call(Api::Anthropic, "m", vec![ex[0].response.clone()]).await;
    let r = r.expect("reply");
    assert_eq!(r.stop_reason, StopReason::StopSequence);
    assert_eq!(r.message.text(), "The beautiful city of ");
}

// ------------------------------------------------------ Anthropic errors

#[tokio::test]
async fn v06_two_429s_then_stream_is_one_retried_call() {
    let ex = exchanges("06_anthropic_429_rate_limit_then_stream.json");
    assert_eq!(
        load("06_anthropic_429_rate_limit_then_stream.json")["interactions"][2]["response"]["body"],
        json!(text("06_anthropic_429_rate_limit_then_stream.2.sse"))
    );
    let (r, p, s) = one_call(
        Api::Anthropic,
        "claude-sonnet-4-5",
        ex.into_iter().map(|e| e.response).collect(),
    )
    .await;
    let r = r.expect("success after retries");
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(s.requests().len(), 3);
    assert_eq!(retries(&p), 2);
    assert!(p.iter().any(|x| matches!(
        x,
        ModelProgress::Retry {
            status: Some(429),
            ..
        }
    )));
    let reqs = s.requests();
    assert!(
        reqs.windows(2).all(|w| w[0].body == w[1].body),
        "retries resend the same request"
    );
}

#[tokio::test]
async fn v18_529_overloaded_is_retried_then_gives_up() {
    let v = load("18_anthropic_529_overloaded_error.json");
    let status = u16::try_from(v["status"].as_u64().expect("status")).expect("status fits u16");
    let overloaded = || FakeResponse::status(status, &[], v["body"].clone());
    let (r, _, _s) = one_call(
        Api::Anthropic,
        "m",
        vec![overloaded(), FakeResponse::anthropic_text("ok")],
    )
    .await;
    assert_eq!(r.expect("retried").message.text(), "ok");
    let (r, _, s) = one_call(Api::Anthropic, "m", (0..5).map(|_| overloaded()).collect()).await;
    match r {
        Err(ModelError::RetriesExhausted { attempts: 5, last }) => match *last {
            ModelError::Api {
                status: 529,
                ref kind,
                ..
            } => assert_eq!(kind, "overloaded_error"),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert_eq!(s.requests().len(), 5);
}

#[tokio::test]
async fn v10_404_names_the_model() {
    let ex = exchanges("10_anthropic_404_not_found_error.json");
    let (r, _, s) = one_call(
        Api::Anthropic,
        "claude-sonet-4-5",
        vec![ex[0].response.clone()],
    )
    .await;
    match r {
        Err(e @ ModelError::ModelNotFound { .. }) => {
            assert_eq!(
                e.to_string(),
                "model 'claude-sonet-4-5' was not found (HTTP 404): model: claude-sonet-4-5"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test]
async fn v05_400_orphan_tool_result_is_not_retried_and_flagged() {
    let ex = exchanges("05_anthropic_400_orphan_tool_result.json");
    let server = FakeServer::start(ex.iter().map(|e| e.response.clone()).collect()).await;
    let model = anthropic_model(&server, "claude-haiku-4-5");
    let (r, _) = call(
        &model,
        "",
        &anthropic_messages(&ex[0].request["messages"]),
        &[],
    )
    .await;
    assert_eq!(r.expect("turn 1").stop_reason, StopReason::ToolUse);
    let orphan = anthropic_messages(&ex[1].request["messages"]);
    let (r, p) = call(&model, "", &orphan, &[]).await;
    match r {
        Err(ModelError::Api {
            status: 400,
            kind,
            retryable: false,
            message,
            ..
        }) => {
            assert_eq!(kind, "invalid_request_error");
            assert!(message.contains("unexpected `tool_use_id`"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(retries(&p), 0);
    assert_eq!(server.requests().len(), 2);
    let v = server.violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].contains("no tool_use in the previous assistant message"),
        "{v:?}"
    );
}

// ------------------------------------------------------------- OpenAI

#[tokio::test]
async fn v11_openai_parallel_tool_calls() {
    let (replies, server) = replay_turns("11_openai_parallel_tool_calls.json", Api::OpenAi).await;
    let ids: Vec<_> = replies[0]
        .message
        .tool_calls()
        .map(|c| c.id.to_string())
        .collect();
    assert_eq!(
        ids,
        [
            "call_jYdIdRZHxZTn5bWCq5jlMrJi",
            "call_TmlTVWQbzrXCZ4jNsCVNbNqu"
        ]
    );
    assert_eq!(replies[0].stop_reason, StopReason::ToolUse);
    assert_eq!(replies[1].stop_reason, StopReason::EndTurn);
    let sent = &server.requests()[1];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    let tool_msgs: Vec<_> = sent.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_msgs.len(), 2);
    assert_eq!(
        tool_msgs[0]["tool_call_id"],
        "call_jYdIdRZHxZTn5bWCq5jlMrJi"
    );
}

#[tokio::test]
async fn v12_openai_stream_tool_call_deltas() {
    let v = load("12_openai_stream_tool_call_deltas.json");
    for i in 0..2 {
        assert_eq!(
            v["interactions"][i]["response"]["body_sse"],
            json!(text(&format!("12_openai_stream_tool_call_deltas.{i}.sse")))
        );
    }
    let (replies, server) =
        replay_turns("12_openai_stream_tool_call_deltas.json", Api::OpenAi).await;
    let c = replies[0].message.tool_calls().next().expect("call");
    assert_eq!(
        (c.id, c.name),
        ("call_ZR5UUuTt3pf61kjwAJIYdVMj", "get_capital")
    );
    assert_eq!(c.input, &json!({"country": "UK"}));
    assert_eq!(
        (
            replies[0].usage.input_tokens,
            replies[0].usage.output_tokens
        ),
        (53, 15)
    );
    assert!(!replies[1].message.text().is_empty());
    let body = &server.requests()[0].body;
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"]["include_usage"], json!(true));
}

#[tokio::test]
async fn v13_ollama_compat() {
    let (replies, _s) = replay_turns("13_ollama_openai_compat_tool_call.json", Api::OpenAi).await;
    assert_eq!(replies[0].message.text(), "Paris.");
    assert_eq!(replies[0].stop_reason, StopReason::EndTurn);
    let c = replies[1].message.tool_calls().next().expect("call");
    assert_eq!((c.id, c.name), ("call_o2vnpxrw", "final_result"));
    assert_eq!(c.input, &json!({"city": "Paris", "country": "France"}));
    assert_eq!(replies[1].stop_reason, StopReason::ToolUse);
    assert!(
        replies[1]
            .message
            .content
            .iter()
            .all(|b| !matches!(b, Block::Text { .. }))
    );
}

#[tokio::test]
async fn v14_vllm_style() {
    let (replies, _s) = replay_turns("14_vllm_style_tool_call.json", Api::OpenAi).await;
    let c = replies[0].message.tool_calls().next().expect("call");
    assert_eq!(c.id, "chatcmpl-tool-bbb91941bf76335c");
    assert_eq!(c.input, &json!({"city": "Paris"}));
    assert_eq!(replies[1].usage.cache_read_input_tokens, 64);
    assert_eq!(replies[1].usage.input_tokens, 214 - 64);
}

#[tokio::test]
async fn v15_empty_tool_call_id_gets_a_generated_one() {
    let (replies, server) =
        replay_turns("15_openai_compat_empty_tool_call_id.json", Api::OpenAi).await;
    let c = replies[0].message.tool_calls().next().expect("call");
    assert!(c.id.starts_with("call_") && c.id.len() > 5, "{}", c.id);
    let sent = &server.requests()[1].body["messages"];
    let tool = sent
        .as_array()
        .and_then(|m| m.iter().find(|x| x["role"] == "tool"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(tool["tool_call_id"], json!(c.id));
}

#[tokio::test]
async fn v16_openai_404_model_not_found() {
    let ex = exchanges("16_openai_404_model_not_found.json");
    let (r, _, s) = one_call(Api::OpenAi, "gpt-5.2-proo", vec![ex[0].response.clone()]).await;
    match r {
        Err(ModelError::ModelNotFound { model, message }) => {
            assert_eq!(model, "gpt-5.2-proo");
            assert!(message.contains("does not exist"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test]
async fn v16b_and_v17_openai_400s_are_final() {
    for (name, kind) in [
        (
            "16b_openai_400_invalid_request_error.json",
            "invalid_request_error",
        ),
        ("17_groq_400_tool_use_failed.json", "invalid_request_error"),
    ] {
        let ex = exchanges(name);
        let (r, p, s) = one_call(Api::OpenAi, "m", vec![ex[0].response.clone()]).await;
        match r {
            Err(ModelError::Api {
                status: 400,
                kind: k,
                retryable: false,
                ..
            }) => assert_eq!(k, kind, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!((retries(&p), s.requests().len()), (0, 1), "{name}");
    }
}

#[tokio::test]
async fn every_vector_file_is_covered() {
    let covered = [
        "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15",
        "16", "16b", "17", "18", "19", "20", "22", "23", "24", "25", "26", "27", "28", "29", "30",
        "31", "32",
    ];
    // 21: Ollama's native API; `record`: the script that recorded 25-32.
    let skipped = ["21", "record"];
    let mut missing = Vec::new();
    for e in std::fs::read_dir(dir()).expect("vector dir") {
        let name = e.expect("entry").file_name().to_string_lossy().into_owned();
        if name == "index.md" {
            continue;
        }
        let id = name.split('_').next().unwrap_or("");
        if !covered.contains(&id) && !skipped.contains(&id) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "vectors without a replay test: {missing:?}"
    );
}
