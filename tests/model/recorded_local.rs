//! Vectors 25-32: what llama-cpp-python's server and LiteLLM's proxy really
//! sent (recorded on loopback by tests/fixtures/llm-vectors/
//! record_local_servers.py), replayed through the clients, so `make test`
//! covers them without building llama.cpp (`make test-real-model` runs the
//! servers themselves).

use runner::model::{Message, ModelError, StopReason};
use serde_json::{Value, json};

use crate::recorded::*;
use crate::support::fake_model::FakeServer;
use crate::vectors::{Api, anthropic_model, call, one_call, replay_turns, retries};

/// The ids of the tool calls of a recorded Chat Completions answer (JSON or SSE).
fn recorded_call_ids(name: &str, turn: usize) -> Vec<String> {
    let v = load(name);
    let r = &v["interactions"][turn]["response"];
    let mut ids: Vec<String> = Vec::new();
    let mut push = |id: &Value| {
        if let Some(id) = id.as_str().filter(|id| !ids.iter().any(|x| x == id)) {
            ids.push(id.to_string());
        }
    };
    if let Some(sse) = r["body_sse"].as_str() {
        for line in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let chunk: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            for c in chunk["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                push(&c["id"]);
            }
        }
    } else {
        for c in r["body"]["choices"][0]["message"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            push(&c["id"]);
        }
    }
    ids
}

/// The follow-up request's assistant messages carry `content` as a string
/// (llama.cpp answers HTTP 500 to `null` and to a missing one, vector 27).
fn assert_assistant_content_is_text(server: &FakeServer, name: &str) {
    for (k, req) in server.requests().iter().enumerate() {
        for m in req.body["messages"].as_array().into_iter().flatten() {
            if m["role"] == "assistant" {
                assert!(
                    m["content"].is_string(),
                    "{name}: request {k} sends an assistant message without string content: {m}"
                );
            }
        }
    }
}

/// One call of a tool loop with one bash call: its name is `bash` once,
/// its id the server's, its input the arguments parsed.
fn assert_one_bash_call(name: &str, reply: &runner::model::ModelReply, id: &str) {
    let calls: Vec<_> = reply.message.tool_calls().collect();
    assert_eq!(calls.len(), 1, "{name}: {:?}", reply.message);
    assert_eq!((calls[0].id, calls[0].name), (id, "bash"), "{name}");
    assert!(
        calls[0].input["command"].is_string(),
        "{name}: {:?}",
        calls[0].input
    );
    assert_eq!(reply.stop_reason, StopReason::ToolUse, "{name}");
}

/// HTTP 500, at once or after retries.
fn is_500<T>(r: &Result<T, ModelError>) -> bool {
    match r {
        Err(ModelError::Api { status: 500, .. }) => true,
        Err(ModelError::RetriesExhausted { last, .. }) => {
            matches!(**last, ModelError::Api { status: 500, .. })
        }
        _ => false,
    }
}

#[tokio::test]
async fn v25_llamacpp_stream_repeats_id_and_name_in_every_chunk() {
    let name = "25_llamacpp_stream_named_tool_call.json";
    let v = load(name);
    for i in 0..2 {
        assert_eq!(
            v["interactions"][i]["response"]["body_sse"],
            json!(text(&format!("25_llamacpp_stream_named_tool_call.{i}.sse")))
        );
    }
    let (replies, server) = replay_turns(name, Api::OpenAi).await;
    for (turn, reply) in replies.iter().enumerate() {
        assert_one_bash_call(name, reply, &recorded_call_ids(name, turn)[0]);
    }
    assert_assistant_content_is_text(&server, name);
}

#[tokio::test]
async fn v26_llamacpp_tool_call_with_legacy_function_call() {
    let name = "26_llamacpp_tool_call_auto.json";
    let (replies, server) = replay_turns(name, Api::OpenAi).await;
    for (turn, reply) in replies.iter().enumerate() {
        // The call's name is tool_calls[].function.name, never the legacy
        // `function_call.name` beside it ("bash:").
        assert_one_bash_call(name, reply, &recorded_call_ids(name, turn)[0]);
    }
    assert_assistant_content_is_text(&server, name);
}

#[tokio::test]
async fn v27_llamacpp_500_validation_error_is_final() {
    let ex = exchanges("27_llamacpp_500_content_null.json");
    let many = vec![ex[0].response.clone(); 8];
    let (r, p, s) = one_call(Api::OpenAi, "smollm2", many).await;
    match r {
        Err(ModelError::Api {
            status: 500,
            message,
            retryable: false,
            ..
        }) => {
            assert!(message.contains("validation error"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((retries(&p), s.requests().len()), (0, 1));
}

#[tokio::test]
async fn v28_llamacpp_empty_200_for_a_streamed_auto_choice_is_final() {
    let ex = exchanges("28_llamacpp_stream_auto_empty_200.json");
    assert_eq!(text("28_llamacpp_stream_auto_empty_200.0.sse"), "");
    let many = vec![ex[0].response.clone(); 8];
    let (r, p, s) = one_call(Api::OpenAi, "smollm2", many).await;
    assert!(matches!(r, Err(ModelError::EmptyBody { .. })), "{r:?}");
    assert_eq!((retries(&p), s.requests().len()), (0, 1));
}

#[tokio::test]
async fn v29_llamacpp_500_for_tool_choice_required_is_an_api_error() {
    let ex = exchanges("29_llamacpp_500_tool_choice_required.json");
    let many = vec![ex[0].response.clone(); 8];
    let (r, _, _) = one_call(Api::OpenAi, "gemma3", many).await;
    // A 500 that says nothing may be retried; it ends as that 500.
    assert!(is_500(&r), "{r:?}");
}

#[tokio::test]
async fn v30_litellm_messages_stream_one_tool_use_split_into_blocks_with_one_id() {
    // LiteLLM opens a tool_use block per upstream chunk, each with the same
    // id and name and one fragment of the input. The client returns the
    // blocks as sent (fragments as raw input); the loop joins them into the
    // one call they are before anything runs (runner::agent::call_ids).
    let name = "30_litellm_messages_stream_tool_use.json";
    let ex = exchanges(name);
    let server = FakeServer::start(vec![ex[0].response.clone()]).await;
    let first = &ex[0].request;
    let (r, _) = call(
        &anthropic_model(&server, "smollm2"),
        &content_text(&first["system"]),
        &anthropic_messages(&first["messages"]),
        &anthropic_tools(first),
    )
    .await;
    let mut message = r.expect("turn 1").message;
    let blocks = message.tool_calls().count();
    assert!(blocks > 1, "{message:?}");
    let notes = runner::agent::call_ids::join_split_calls(&mut message);
    assert_eq!(notes.len(), 1, "{notes:?}");
    let calls: Vec<_> = message.tool_calls().collect();
    assert_eq!(calls.len(), 1, "{message:?}");
    assert_eq!(calls[0].name, "bash");
    assert!(
        calls[0].input["command"].is_string(),
        "{:?}",
        calls[0].input
    );
    let recorded_id = ex[1].request["messages"][2]["content"][0]["tool_use_id"].clone();
    assert_eq!(json!(calls[0].id), recorded_id);
}

#[tokio::test]
async fn v31_litellm_messages_tool_use_then_upstream_500() {
    let name = "31_litellm_messages_tool_use.json";
    let ex = exchanges(name);
    let mut responses = vec![ex[0].response.clone()];
    responses.extend(vec![ex[1].response.clone(); 8]);
    let server = FakeServer::start(responses).await;
    let model = anthropic_model(&server, "gemma3");
    let first = &ex[0].request;
    let system = content_text(&first["system"]);
    let mut msgs: Vec<Message> = anthropic_messages(&first["messages"]);
    let tools = anthropic_tools(first);
    let (r, _) = call(&model, &system, &msgs, &tools).await;
    let reply = r.expect("turn 1");
    let id = load(name)["interactions"][0]["response"]["body"]["content"][0]["id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_one_bash_call(name, &reply, &id);
    msgs.push(reply.message.clone());
    msgs.extend(anthropic_messages(&ex[1].request["messages"]).drain(2..));
    let (r, _) = call(&model, &system, &msgs, &tools).await;
    assert!(is_500(&r), "{r:?}");
}

#[tokio::test]
async fn v32_litellm_chat_stream_named_tool_call() {
    let name = "32_litellm_chat_stream_named_tool_call.json";
    let (replies, server) = replay_turns(name, Api::OpenAi).await;
    for (turn, reply) in replies.iter().enumerate() {
        assert_one_bash_call(name, reply, &recorded_call_ids(name, turn)[0]);
    }
    assert_assistant_content_is_text(&server, name);
}
