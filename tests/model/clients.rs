//! Client behaviour against the fake server beyond the recorded vectors:
//! timeouts, unreachable servers, retry-after, key errors, chunking, and
//! the fake server's own protocol checks.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use runner::model::anthropic::{AnthropicModel, DEFAULT_ANTHROPIC_BASE_URL};
use runner::model::http::ApiConfig;
use runner::model::http::HttpTimeouts;
use runner::model::openai::{DEFAULT_OPENAI_BASE_URL, OpenAiModel};
use runner::model::retry::RetryPolicy;
use runner::model::{
    Block, Message, Model, ModelError, ModelProgress, ModelReply, ModelRequest, Role, StopReason,
};
use serde_json::json;

use crate::support::fake_model::{FakeResponse, FakeServer, check_anthropic, check_openai};

fn policy(attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts: attempts,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        ..RetryPolicy::default()
    }
}

fn anthropic(base: &str, attempts: u32, idle_ms: u64) -> AnthropicModel {
    let mut cfg = ApiConfig::new(
        "claude-haiku-4-5",
        Some("k".into()),
        DEFAULT_ANTHROPIC_BASE_URL,
    );
    cfg.base_url = base.to_string();
    cfg.retry = policy(attempts);
    cfg.timeouts = HttpTimeouts {
        connect: Duration::from_secs(2),
        idle_read: Duration::from_millis(idle_ms),
    };
    AnthropicModel::new(cfg).expect("model")
}

fn openai(base: &str) -> OpenAiModel {
    let mut cfg = ApiConfig::new("local-model", None, DEFAULT_OPENAI_BASE_URL);
    cfg.base_url = base.to_string();
    cfg.retry = policy(3);
    OpenAiModel::new(cfg).expect("model")
}

async fn call(
    model: &dyn Model,
    messages: &[Message],
) -> (Result<ModelReply, ModelError>, Vec<ModelProgress>) {
    let seen = Mutex::new(Vec::new());
    let sink = |p: ModelProgress| seen.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    let req = ModelRequest {
        system: "s",
        messages,
        tools: &[],
        max_tokens: 64,
    };
    let r = model.complete(req, &sink).await;
    (r, seen.into_inner().unwrap_or_else(|e| e.into_inner()))
}

fn hello() -> Vec<Message> {
    vec![Message::user_text("hello")]
}

#[tokio::test]
async fn a_stalled_stream_times_out_and_is_retried() {
    let stalled = FakeResponse::anthropic_text("never finished").stall_after(200);
    let server = FakeServer::start(vec![stalled, FakeResponse::anthropic_text("second try")]).await;
    let (r, p) = call(&anthropic(&server.url(), 3, 300), &hello()).await;
    assert_eq!(r.expect("reply").message.text(), "second try");
    assert!(
        p.iter().any(
            |x| matches!(x, ModelProgress::Retry { reason, .. } if reason.contains("idle_timeout"))
        ),
        "{p:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_reported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let base = format!("http://127.0.0.1:{port}");
    let (r, p) = call(&anthropic(&base, 2, 1000), &hello()).await;
    match r {
        Err(ModelError::RetriesExhausted { attempts: 2, last }) => match *last {
            ModelError::Unreachable { ref url, .. } => {
                assert_eq!(url, &format!("{base}/v1/messages"))
            }
            ref other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert_eq!(p.len(), 1);
}

#[tokio::test]
async fn retry_after_is_honoured_and_401_is_final() {
    let server = FakeServer::start(vec![
        FakeResponse::rate_limited(0).with_header("retry-after-ms", "150"),
        FakeResponse::anthropic_text("ok"),
    ])
    .await;
    let t = Instant::now();
    let (r, p) = call(&anthropic(&server.url(), 3, 1000), &hello()).await;
    assert_eq!(r.expect("reply").message.text(), "ok");
    assert!(t.elapsed() >= Duration::from_millis(150));
    assert!(
        matches!(
            p[0],
            ModelProgress::Retry {
                status: Some(429),
                wait_ms: 150,
                ..
            }
        ),
        "{p:?}"
    );

    let server = FakeServer::start(vec![FakeResponse::unauthorized()]).await;
    let (r, _) = call(&anthropic(&server.url(), 3, 1000), &hello()).await;
    let e = r.expect_err("401");
    assert_eq!(
        e.to_string(),
        "the API rejected the key (HTTP 401): check ANTHROPIC_API_KEY"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_base_ending_in_v1_and_non_json_errors_are_handled() {
    let server = FakeServer::start(vec![
        FakeResponse::raw(502, "text/html", "<html>Bad gateway</html>"),
        FakeResponse::anthropic_text("fine"),
    ])
    .await;
    let (r, p) = call(
        &anthropic(&format!("{}/v1/", server.url()), 3, 1000),
        &hello(),
    )
    .await;
    assert_eq!(r.expect("reply").message.text(), "fine");
    assert!(
        matches!(&p[0], ModelProgress::Retry { status: Some(502), reason, .. } if reason.contains("Bad gateway"))
    );
    assert!(server.requests().iter().all(|r| r.path == "/v1/messages"));
}

#[tokio::test]
async fn a_full_anthropic_tool_loop_passes_the_protocol_checks() {
    let server = FakeServer::start(vec![
        FakeResponse::anthropic_tool_uses(&[
            ("toolu_1", "bash", r#"{"command":"ls"}"#),
            ("toolu_2", "bash", ""),
        ]),
        FakeResponse::anthropic_text("all done ✓"),
    ])
    .await;
    let model = anthropic(&server.url(), 2, 1000);
    let mut msgs = hello();
    let (r, _) = call(&model, &msgs).await;
    let r = r.expect("reply");
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    let calls: Vec<_> = r
        .message
        .tool_calls()
        .map(|c| (c.id.to_string(), c.input.clone()))
        .collect();
    assert_eq!(calls[1].1, json!({}));
    let results = calls
        .iter()
        .map(|(id, _)| Block::ToolResult {
            tool_use_id: id.clone(),
            content: "ok".into(),
            is_error: false,
        })
        .collect();
    msgs.push(r.message);
    msgs.push(Message {
        role: Role::User,
        content: results,
    });
    let (r, p) = call(&model, &msgs).await;
    assert_eq!(r.expect("reply").message.text(), "all done ✓");
    let streamed: String = p
        .iter()
        .filter_map(|x| match x {
            ModelProgress::TextDelta { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "all done ✓");
    server.assert_protocol_ok();
    server.assert_all_served();
}

#[tokio::test]
async fn openai_local_server_stream_chunked_and_non_streaming_body() {
    let server = FakeServer::start(vec![
        FakeResponse::openai_tool_call("", "read", r#"{"path":"é.txt"}"#).chunked(5),
        FakeResponse::json(json!({"choices":[{"index":0,"finish_reason":"stop",
            "message":{"role":"assistant","content":"done"}}],
            "usage":{"prompt_tokens":9,"completion_tokens":2}})),
    ])
    .await;
    let model = openai(&server.openai_url());
    let mut msgs = hello();
    let (r, _) = call(&model, &msgs).await;
    let r = r.expect("reply");
    let id = r
        .message
        .tool_calls()
        .next()
        .map(|c| c.id.to_string())
        .expect("call");
    assert_eq!(id, "call_1");
    assert_eq!(
        r.message.tool_calls().next().map(|c| c.input.clone()),
        Some(json!({"path": "é.txt"}))
    );
    msgs.push(r.message);
    msgs.push(Message {
        role: Role::User,
        content: vec![Block::ToolResult {
            tool_use_id: id,
            content: "x".into(),
            is_error: false,
        }],
    });
    let (r, _) = call(&model, &msgs).await;
    let r = r.expect("reply");
    assert_eq!(
        (r.message.text().as_str(), r.usage.input_tokens),
        ("done", 9)
    );
    assert!(
        server.requests()[0].header("authorization").is_none(),
        "no key, no header"
    );
    server.assert_protocol_ok();
}

#[tokio::test]
async fn an_empty_queue_answers_500_once_and_records_it() {
    let server = FakeServer::start(vec![]).await;
    let (r, _) = call(&anthropic(&server.url(), 3, 1000), &hello()).await;
    assert!(
        matches!(
            r,
            Err(ModelError::Api {
                status: 500,
                retryable: false,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.violations().len(), 1);
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.assert_protocol_ok()));
    assert!(caught.is_err());
}

#[test]
fn the_protocol_checker_finds_violations() {
    let mut v = Vec::new();
    check_anthropic(
        &json!({"messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"tool_use","id":"a","name":"x","input":{}},
                                           {"type":"tool_use","id":"b","name":"x","input":{}}]},
            {"role":"user","content":[{"type":"text","text":"note"},
                                      {"type":"tool_result","tool_use_id":"a","content":"r"},
                                      {"type":"tool_result","tool_use_id":"zzz","content":"r"}]}]}),
        &mut v,
    );
    assert_eq!(v.len(), 3, "{v:#?}");
    assert!(v.iter().any(|x| x.contains("tool_use b has 0")));
    assert!(v.iter().any(|x| x.contains("non-result block before")));
    assert!(v.iter().any(|x| x.contains("zzz")));

    let mut v = Vec::new();
    check_openai(
        &json!({"messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},
                {"id":"","type":"function","function":{"name":"g","arguments":{}}}]},
            {"role":"tool","tool_call_id":"c1","content":"r"},
            {"role":"user","content":"more"},
            {"role":"tool","tool_call_id":"c1","content":"late"}]}),
        &mut v,
    );
    assert!(v.iter().any(|x| x.contains("without an id")), "{v:#?}");
    assert!(
        v.iter().any(|x| x.contains("arguments is not a string")),
        "{v:#?}"
    );
    assert!(
        v.iter().any(|x| x.contains("tool call  answered by 0")),
        "{v:#?}"
    );
    assert!(
        v.iter().any(|x| x.contains("'c1' does not answer")),
        "{v:#?}"
    );
    let mut ok = Vec::new();
    check_openai(
        &json!({"messages":[{"role":"user","content":"hi"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"r"},{"role":"user","content":"go on"}]}),
        &mut ok,
    );
    assert!(ok.is_empty(), "{ok:?}");
}

/// A 429 as LiteLLM's proxy sends it: an OpenAI-style error body with the
/// upstream's message, `type` null, and the upstream's `retry-after`
/// passed on as `llm_provider-retry-after`.
fn litellm_rate_limited(secs: &str) -> FakeResponse {
    FakeResponse::status(
        429,
        &[("llm_provider-retry-after", secs)],
        json!({"error": {
            "message": "litellm.RateLimitError: AnthropicException - {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Number of request tokens has exceeded your per-minute rate limit\"}}\nReceived Model Group=claude\nAvailable Model Group Fallbacks=None",
            "type": null, "param": null, "code": "429"}}),
    )
}

fn openai_with(base: &str, retry: RetryPolicy) -> OpenAiModel {
    let mut cfg = ApiConfig::new("claude", None, DEFAULT_OPENAI_BASE_URL);
    cfg.base_url = base.to_string();
    cfg.retry = retry;
    OpenAiModel::new(cfg).expect("model")
}

#[tokio::test]
async fn litellms_llm_provider_retry_after_is_honoured_over_the_backoff() {
    // A backoff far longer than the header's second: the retry must come
    // after about one second, not after 15-30 s.
    let slow_backoff = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_secs(30),
        max_delay: Duration::from_secs(30),
        ..RetryPolicy::default()
    };
    // And one far shorter: the retry must still wait the header's second.
    let quick_backoff = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(2),
        ..RetryPolicy::default()
    };
    for retry in [slow_backoff, quick_backoff] {
        let server = FakeServer::start(vec![
            litellm_rate_limited("1"),
            FakeResponse::openai_text("ok"),
        ])
        .await;
        let (r, p) = call(&openai_with(&server.openai_url(), retry.clone()), &hello()).await;
        assert_eq!(r.expect("reply").message.text(), "ok");
        let retries: Vec<&ModelProgress> = p
            .iter()
            .filter(|x| matches!(x, ModelProgress::Retry { .. }))
            .collect();
        assert!(
            matches!(
                retries[..],
                [ModelProgress::Retry {
                    status: Some(429),
                    wait_ms: 1000,
                    ..
                }]
            ),
            "{p:?}"
        );
        let reqs = server.requests();
        assert_eq!(reqs.len(), 2);
        let gap = reqs[1].at.duration_since(reqs[0].at);
        assert!(
            gap >= Duration::from_millis(1000) && gap < Duration::from_secs(10),
            "retried {gap:?} after the 429 (backoff {:?})",
            retry.base_delay
        );
        server.assert_protocol_ok();
    }
}

#[tokio::test]
async fn a_slow_server_times_out_and_is_not_called_unreachable() {
    let late = FakeResponse::anthropic_text("late").with_head_delay(Duration::from_millis(2500));
    let server = FakeServer::start(vec![late]).await;
    let (r, _) = call(&anthropic(&server.url(), 1, 1000), &hello()).await;
    let e = r.expect_err("too slow");
    let msg = e.to_string();
    match &e {
        ModelError::RetriesExhausted { attempts: 1, last } => assert!(
            matches!(
                **last,
                ModelError::TimedOut {
                    secs: 1,
                    flag: Some("--model-timeout"),
                    ..
                }
            ),
            "{last:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        msg.contains("timed out: no response within 1s") && !msg.contains("cannot reach"),
        "{msg}"
    );
    assert_eq!(
        e.hint(),
        Some(runner::model::Hint::RaiseTimeout {
            secs: 1,
            flag: Some("--model-timeout")
        })
    );
    // The server did receive the request: it was reached.
    assert_eq!(server.requests().len(), 1);
}
