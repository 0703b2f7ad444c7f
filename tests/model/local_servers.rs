//! The clients against the bytes of local model servers (llama-cpp-python's
//! server, LiteLLM, FastAPI's bare 404), rebuilt from their source in
//! `tests/fixtures/local-servers/` (see its index.md): each test fails on
//! the client before issue 22's fixes.

use std::sync::Mutex;
use std::time::Duration;

use runner::model::anthropic::{AnthropicModel, DEFAULT_ANTHROPIC_BASE_URL};
use runner::model::http::{ApiConfig, HttpTimeouts};
use runner::model::openai::{DEFAULT_OPENAI_BASE_URL, OpenAiModel};
use runner::model::retry::RetryPolicy;
use runner::model::tool_choice::ToolChoice;
use runner::model::{
    Block, Hint, Message, Model, ModelError, ModelProgress, ModelReply, ModelRequest, Role,
    ToolSpec,
};
use serde_json::{Value, json};

use crate::support::fake_model::{FakeResponse, FakeServer};

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/local-servers")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn config(base: &str, model: &str) -> ApiConfig {
    let mut cfg = ApiConfig::new(model, Some("k".into()), DEFAULT_OPENAI_BASE_URL);
    cfg.base_url = base.to_string();
    cfg.retry = RetryPolicy {
        max_attempts: 5,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        ..RetryPolicy::default()
    };
    cfg.timeouts = HttpTimeouts {
        connect: Duration::from_secs(2),
        idle_read: Duration::from_secs(5),
    };
    cfg
}

fn openai(base: &str, tune: impl FnOnce(&mut ApiConfig)) -> OpenAiModel {
    let mut cfg = config(base, "smollm2");
    tune(&mut cfg);
    OpenAiModel::new(cfg).expect("model")
}

fn anthropic(base: &str, tune: impl FnOnce(&mut ApiConfig)) -> AnthropicModel {
    let mut cfg = config(base, "smollm2");
    cfg.base_url = base.to_string();
    let _ = DEFAULT_ANTHROPIC_BASE_URL;
    tune(&mut cfg);
    AnthropicModel::new(cfg).expect("model")
}

fn bash_tool() -> ToolSpec {
    ToolSpec {
        name: "bash".into(),
        description: "run a command".into(),
        input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        native: None,
    }
}

async fn call(
    model: &dyn Model,
    messages: &[Message],
    tools: &[ToolSpec],
) -> (Result<ModelReply, ModelError>, Vec<ModelProgress>) {
    let seen = Mutex::new(Vec::new());
    let sink = |p: ModelProgress| seen.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    let req = ModelRequest {
        system: "s",
        messages,
        tools,
        max_tokens: 64,
    };
    let r = model.complete(req, &sink).await;
    (r, seen.into_inner().unwrap_or_else(|e| e.into_inner()))
}

fn hello() -> Vec<Message> {
    vec![Message::user_text("list the files")]
}

/// A conversation after one tool call with no text: the turn llama.cpp's
/// server refused with `content: null`.
fn after_a_call() -> Vec<Message> {
    vec![
        Message::user_text("list the files"),
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: "call_1".into(),
                name: "bash".into(),
                input: json!({"command": "ls"}),
                raw_input: None,
            }],
        },
        Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: "call_1".into(),
                content: "notes.txt".into(),
                is_error: false,
            }],
        },
    ]
}

#[tokio::test]
async fn llama_cpp_streamed_call_repeats_id_and_name_in_every_chunk_and_gets_them_once() {
    let server = FakeServer::start(vec![FakeResponse::raw_sse(fixture(
        "llama_cpp_python_stream_named_tool.sse",
    ))])
    .await;
    let (r, _) = call(
        &openai(&server.openai_url(), |_| {}),
        &hello(),
        &[bash_tool()],
    )
    .await;
    let reply = r.expect("reply");
    let calls: Vec<_> = reply.message.tool_calls().collect();
    assert_eq!(calls.len(), 1, "{:?}", reply.message);
    assert_eq!(calls[0].name, "bash");
    assert_eq!(
        calls[0].id,
        "call__0_bash_cmpl-8f3b2c1e-5d4a-4e7b-9c2f-1a2b3c4d5e6f"
    );
    assert_eq!(calls[0].input, &json!({"command": "ls -la"}));
}

#[tokio::test]
async fn another_name_for_the_same_call_mid_stream_is_an_error() {
    let bad = fixture("llama_cpp_python_stream_named_tool.sse").replacen(
        "\"function\": {\"name\": \"bash\", \"arguments\": \"command\"}",
        "\"function\": {\"name\": \"python\", \"arguments\": \"command\"}",
        1,
    );
    assert!(bad.contains("\"python\""), "the fixture changed");
    let server = FakeServer::start(vec![FakeResponse::raw_sse(bad)]).await;
    let (r, _) = call(
        &openai(&server.openai_url(), |c| c.retry.max_attempts = 1),
        &hello(),
        &[bash_tool()],
    )
    .await;
    let e = r.expect_err("a contradiction");
    assert!(e.to_string().contains("'python' after 'bash'"), "{e}");
}

#[tokio::test]
async fn an_assistant_turn_of_tool_calls_sends_an_empty_string_not_null() {
    let server = FakeServer::start(vec![FakeResponse::openai_text("done")]).await;
    let (r, _) = call(
        &openai(&server.openai_url(), |_| {}),
        &after_a_call(),
        &[bash_tool()],
    )
    .await;
    r.expect("reply");
    let body = &server.requests()[0].body;
    let assistant = &body["messages"][2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], json!(""), "{assistant}");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
}

#[tokio::test]
async fn a_500_naming_a_validation_error_is_not_retried() {
    let server = FakeServer::start(vec![
        FakeResponse::raw(
            500,
            "application/json",
            fixture("llama_cpp_python_500_content_null.json"),
        ),
        FakeResponse::openai_text("never asked"),
    ])
    .await;
    let (r, _) = call(
        &openai(&server.openai_url(), |_| {}),
        &after_a_call(),
        &[bash_tool()],
    )
    .await;
    let e = r.expect_err("refused");
    assert!(!e.is_retryable(), "{e:?}");
    assert!(
        e.to_string().contains("Input should be a valid string"),
        "{e}"
    );
    assert_eq!(server.requests().len(), 1, "retried");
}

#[tokio::test]
async fn an_empty_200_stream_is_not_retried_and_hints_no_stream() {
    let server = FakeServer::start(vec![
        FakeResponse::raw(200, "text/event-stream; charset=utf-8", ""),
        FakeResponse::openai_text("never asked"),
    ])
    .await;
    let (r, _) = call(
        &openai(&server.openai_url(), |c| {
            c.tool_choice = Some(ToolChoice::Auto)
        }),
        &hello(),
        &[bash_tool()],
    )
    .await;
    let e = r.expect_err("empty");
    assert!(matches!(e, ModelError::EmptyBody { .. }), "{e:?}");
    assert_eq!(e.hint(), Some(Hint::NoStream));
    assert_eq!(server.requests().len(), 1, "retried");
}

#[tokio::test]
async fn one_json_body_for_a_streamed_request_is_shown_as_text() {
    let body: Value =
        serde_json::from_str(&fixture("llama_cpp_python_whole_text.json")).expect("json");
    for provider in ["openai", "anthropic"] {
        let server = FakeServer::start(vec![FakeResponse::json(match provider {
            "openai" => body.clone(),
            _ => json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "The listing shows one file, notes.txt."}],
                "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 9}}),
        })])
        .await;
        let model: Box<dyn Model> = match provider {
            "openai" => Box::new(openai(&server.openai_url(), |_| {})),
            _ => Box::new(anthropic(&server.url(), |_| {})),
        };
        let (r, progress) = call(model.as_ref(), &hello(), &[]).await;
        assert_eq!(
            r.expect("reply").message.text(),
            "The listing shows one file, notes.txt."
        );
        let shown: String = progress
            .iter()
            .filter_map(|p| match p {
                ModelProgress::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            shown, "The listing shows one file, notes.txt.",
            "{provider}"
        );
    }
}

#[tokio::test]
async fn tool_choice_and_no_stream_are_sent_in_each_apis_words() {
    let server = FakeServer::start(vec![FakeResponse::json(
        serde_json::from_str(&fixture("llama_cpp_python_whole_text.json")).expect("json"),
    )])
    .await;
    let model = openai(&server.openai_url(), |c| {
        c.tool_choice = Some(ToolChoice::Required);
        c.stream = false;
    });
    call(&model, &hello(), &[bash_tool()])
        .await
        .0
        .expect("reply");
    let body = &server.requests()[0].body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "bash"}})
    );
    assert_eq!(body["stream"], json!(false));
    assert!(body.get("stream_options").is_none(), "{body}");

    let server = FakeServer::start(vec![FakeResponse::anthropic_text("ok")]).await;
    let model = anthropic(&server.url(), |c| {
        c.tool_choice = Some(ToolChoice::Required)
    });
    call(&model, &hello(), &[bash_tool()])
        .await
        .0
        .expect("reply");
    let body = &server.requests()[0].body;
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(body["stream"], json!(true));

    // Unset: no tool_choice at all (the API's default).
    let server = FakeServer::start(vec![FakeResponse::openai_text("ok")]).await;
    call(
        &openai(&server.openai_url(), |_| {}),
        &hello(),
        &[bash_tool()],
    )
    .await
    .0
    .expect("reply");
    assert!(server.requests()[0].body.get("tool_choice").is_none());
}

#[tokio::test]
async fn a_404_that_names_no_model_is_a_missing_route() {
    // FastAPI's bare 404 (llama-cpp-python at a base URL without /v1).
    let server = FakeServer::start(vec![FakeResponse::raw(
        404,
        "application/json",
        r#"{"detail":"Not Found"}"#,
    )])
    .await;
    let (r, _) = call(&openai(&server.url(), |_| {}), &hello(), &[]).await;
    let e = r.expect_err("404");
    assert!(matches!(e, ModelError::RouteNotFound { .. }), "{e:?}");
    let hint = e
        .hint()
        .map(|h| runner::hints::model(&h))
        .unwrap_or_default();
    assert!(
        hint.contains("the server has no /v1/chat/completions here; is --base-url missing /v1?"),
        "{hint}"
    );
    assert_eq!(server.requests().len(), 1);

    // LiteLLM relaying its upstream's 404 names the model group it used.
    let litellm = json!({"error": {"message": "litellm.NotFoundError: NotFoundError: OpenAIException - Not Found. Received Model Group=smollm2\nAvailable Model Group Fallbacks=None", "type": null, "param": null, "code": "404"}});
    let server = FakeServer::start(vec![FakeResponse::status(404, &[], litellm)]).await;
    let (r, _) = call(&openai(&server.openai_url(), |_| {}), &hello(), &[]).await;
    let e = r.expect_err("404");
    assert!(matches!(e, ModelError::RouteNotFound { .. }), "{e:?}");

    // A 404 about the model is still one.
    let server = FakeServer::start(vec![FakeResponse::openai_error(
        404,
        "invalid_request_error",
        Some("model_not_found"),
        "The model `smollm3` does not exist",
    )])
    .await;
    let (r, _) = call(&openai(&server.openai_url(), |_| {}), &hello(), &[]).await;
    assert!(matches!(r, Err(ModelError::ModelNotFound { .. })), "{r:?}");
}

#[tokio::test]
async fn context_window_auto_reads_llama_cpp_props_or_vllm_models() {
    let server = FakeServer::start(vec![FakeResponse::json(
        json!({"default_generation_settings": {"n_ctx": 4096, "n_predict": -1}, "total_slots": 1}),
    )])
    .await;
    let w = openai(&server.openai_url(), |_| {})
        .context_window()
        .await
        .expect("a window");
    assert_eq!(w.tokens, 4096);
    assert_eq!(server.requests()[0].path, "/props");

    let server = FakeServer::start(vec![
        FakeResponse::raw(404, "application/json", r#"{"detail":"Not Found"}"#),
        FakeResponse::json(json!({"object": "list", "data": [
            {"id": "smollm2", "object": "model", "max_model_len": 8192}]})),
    ])
    .await;
    let w = openai(&server.openai_url(), |_| {})
        .context_window()
        .await
        .expect("a window");
    assert_eq!(w.tokens, 8192);
    assert_eq!(server.requests()[1].path, "/v1/models");

    // llama-cpp-python's /v1/models says no size, and it has no /props.
    let server = FakeServer::start(vec![
        FakeResponse::raw(404, "application/json", r#"{"detail":"Not Found"}"#),
        FakeResponse::json(json!({"object": "list", "data": [
            {"id": "smollm2", "object": "model", "owned_by": "me", "permissions": []}]})),
    ])
    .await;
    assert_eq!(
        openai(&server.openai_url(), |_| {}).context_window().await,
        None
    );
}

#[tokio::test]
async fn prompt_too_long_errors_state_the_window() {
    let e = ModelError::PromptTooLong {
        message: "This model's maximum context length is 4096 tokens. However, you requested 5101 tokens (5101 in the messages, None in the completion). Please reduce the length of the messages or completion.".into(),
    };
    assert_eq!(e.context_limit(), Some(4096));
    let e = ModelError::PromptTooLong {
        message: "prompt is too long: 210000 tokens > 200000 maximum".into(),
    };
    assert_eq!(e.context_limit(), Some(200000));
    let e = ModelError::PromptTooLong {
        message: "too long".into(),
    };
    assert_eq!(e.context_limit(), None);
}
