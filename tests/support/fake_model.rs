//! A fake model API server for integration tests: it serves a queue of
//! canned responses on 127.0.0.1 (random port), records every request, and
//! checks the tool-call protocol of each one.
//!
//! The server runs on its own thread with its own Tokio runtime, so it keeps
//! answering while a test blocks (for example on a `runner` subprocess via
//! `std::process::Command`).
//!
//! ```ignore
//! let server = FakeServer::start(vec![
//!     FakeResponse::anthropic_tool_use("toolu_1", "bash", r#"{"command":"ls"}"#),
//!     FakeResponse::anthropic_text("done"),
//! ]).await;
//! // Anthropic: ANTHROPIC_BASE_URL=server.url()  (no /v1)
//! // OpenAI:    OPENAI_BASE_URL=server.openai_url()  (with /v1)
//! // ... run the client or the binary ...
//! server.assert_protocol_ok();
//! assert_eq!(server.requests().len(), 2);
//! ```
//!
//! Protocol checks, recorded as violations (see [`FakeServer::violations`]):
//! - Anthropic (`…/messages`): every `tool_use` of an assistant message has
//!   exactly one `tool_result` in the next message, which is a user message
//!   whose results come before its other blocks; every `tool_result`
//!   references a `tool_use` of the previous assistant message; tool ids are
//!   non-empty and unique; the `anthropic-version` header is present.
//! - OpenAI (`…/chat/completions`): every `tool_calls[].id` of an assistant
//!   message is answered by exactly one directly following `role: "tool"`
//!   message; every tool message references a call of that assistant
//!   message; ids are non-empty and unique; `arguments` is a string.
//! - Any path: the body is JSON; a request that finds the queue empty is
//!   answered 500 (with `x-should-retry: false`) and recorded.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// The path, e.g. `/v1/messages` (query string not included).
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// Headers with lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` if it was not JSON).
    pub body: Value,
    /// The body as text.
    pub raw_body: String,
    /// When the server had read it whole (for the waits between retries).
    pub at: std::time::Instant,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A canned response. Build one with the constructors, then adjust it with
/// the `with_*` methods.
#[derive(Debug, Clone)]
pub struct FakeResponse {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body, sent as these chunks in order.
    pub chunks: Vec<Bytes>,
    /// A pause before each chunk.
    pub chunk_delay: Duration,
    /// After the chunks, keep the connection open and silent (a stalled
    /// stream) instead of ending the body.
    pub stall: bool,
    /// A pause before the response head (a server that is reachable but
    /// slow to answer).
    pub head_delay: Duration,
}

const SSE: &str = "text/event-stream; charset=utf-8";
const JSON: &str = "application/json";

impl FakeResponse {
    /// Any status, headers and JSON body.
    pub fn status(code: u16, headers: &[(&str, &str)], body: Value) -> Self {
        let mut r = FakeResponse::raw(code, JSON, body.to_string());
        for (k, v) in headers {
            r = r.with_header(k, v);
        }
        r
    }

    /// A 200 JSON body (a non-streaming completion, for instance).
    pub fn json(body: Value) -> Self {
        FakeResponse::status(200, &[], body)
    }

    /// Any status, content type and body text, sent in one chunk.
    pub fn raw(code: u16, content_type: &str, body: impl Into<String>) -> Self {
        FakeResponse {
            status: code,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: vec![Bytes::from(body.into())],
            chunk_delay: Duration::ZERO,
            stall: false,
            head_delay: Duration::ZERO,
        }
    }

    /// A 200 SSE stream replayed verbatim (a vector file, say).
    pub fn raw_sse(text: impl Into<String>) -> Self {
        FakeResponse::raw(200, SSE, text)
    }

    /// Anthropic SSE from event objects: each is sent as `event: <type>`
    /// plus a `data:` line padded with trailing spaces, as the API does,
    /// one chunk per event.
    pub fn anthropic_sse(events: Vec<Value>) -> Self {
        let chunks = events
            .iter()
            .map(|e| {
                let name = e["type"].as_str().unwrap_or("message");
                Bytes::from(format!("event: {name}\ndata: {e}      \n\n"))
            })
            .collect();
        FakeResponse {
            status: 200,
            headers: vec![
                ("content-type".into(), SSE.into()),
                ("request-id".into(), "req_fake_stream".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            chunks,
            chunk_delay: Duration::ZERO,
            stall: false,
            head_delay: Duration::ZERO,
        }
    }

    /// A streamed Anthropic text answer, stop reason `end_turn`.
    pub fn anthropic_text(text: &str) -> Self {
        FakeResponse::anthropic_sse(anthropic_events(Some(text), &[], "end_turn"))
    }

    /// A streamed Anthropic tool call; `input_json` is sent in fragments.
    pub fn anthropic_tool_use(id: &str, name: &str, input_json: &str) -> Self {
        FakeResponse::anthropic_tool_uses(&[(id, name, input_json)])
    }

    /// Several streamed tool calls in one answer (parallel tool use).
    pub fn anthropic_tool_uses(calls: &[(&str, &str, &str)]) -> Self {
        FakeResponse::anthropic_sse(anthropic_events(None, calls, "tool_use"))
    }

    /// A 429 `rate_limit_error` asking for `retry_after_secs`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        FakeResponse::status(
            429,
            &[("retry-after", &retry_after_secs.to_string())],
            anthropic_error(
                "rate_limit_error",
                "This request would exceed your rate limit.",
            ),
        )
    }

    /// A 529 `overloaded_error`, body as logged from the real API.
    pub fn overloaded() -> Self {
        FakeResponse::status(529, &[], anthropic_error("overloaded_error", "Overloaded"))
    }

    /// A 401 `authentication_error`.
    pub fn unauthorized() -> Self {
        FakeResponse::status(
            401,
            &[],
            anthropic_error("authentication_error", "invalid x-api-key"),
        )
    }

    /// A 404 `not_found_error` for `model`, as the real API words it.
    pub fn not_found(model: &str) -> Self {
        FakeResponse::status(
            404,
            &[],
            anthropic_error("not_found_error", &format!("model: {model}")),
        )
    }

    /// A streamed Chat Completions text answer (chunks, usage, `[DONE]`).
    pub fn openai_text(text: &str) -> Self {
        FakeResponse::openai_sse(openai_chunks(Some(text), &[], "stop"))
    }

    /// A streamed Chat Completions tool call.
    pub fn openai_tool_call(id: &str, name: &str, arguments: &str) -> Self {
        FakeResponse::openai_tool_calls(&[(id, name, arguments)])
    }

    /// Several streamed tool calls in one answer.
    pub fn openai_tool_calls(calls: &[(&str, &str, &str)]) -> Self {
        FakeResponse::openai_sse(openai_chunks(None, calls, "tool_calls"))
    }

    /// Chat Completions SSE from chunk objects, then `data: [DONE]`.
    pub fn openai_sse(chunks: Vec<Value>) -> Self {
        let mut body: Vec<Bytes> = chunks
            .iter()
            .map(|c| Bytes::from(format!("data: {c}\n\n")))
            .collect();
        body.push(Bytes::from_static(b"data: [DONE]\n\n"));
        FakeResponse {
            status: 200,
            headers: vec![("content-type".into(), SSE.into())],
            chunks: body,
            chunk_delay: Duration::ZERO,
            stall: false,
            head_delay: Duration::ZERO,
        }
    }

    /// An OpenAI-style error `{error:{message,type,param,code}}`.
    pub fn openai_error(status: u16, kind: &str, code: Option<&str>, message: &str) -> Self {
        FakeResponse::status(
            status,
            &[],
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
        )
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        let name = name.to_ascii_lowercase();
        self.headers.retain(|(k, _)| *k != name);
        self.headers.push((name, value.to_string()));
        self
    }

    /// Re-splits the body into chunks of `size` bytes (which may cut lines
    /// and UTF-8 characters: clients must cope).
    pub fn chunked(mut self, size: usize) -> Self {
        let all: Vec<u8> = self.chunks.iter().flat_map(|c| c.to_vec()).collect();
        self.chunks = all
            .chunks(size.max(1))
            .map(Bytes::copy_from_slice)
            .collect();
        self
    }

    /// Waits `delay` before sending the response head.
    pub fn with_head_delay(mut self, delay: Duration) -> Self {
        self.head_delay = delay;
        self
    }

    /// Waits `delay` before each chunk.
    pub fn with_chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Sends only the first `bytes` bytes of the body, then stalls (the
    /// connection stays open and silent), to exercise idle timeouts.
    pub fn stall_after(self, bytes: usize) -> Self {
        let all: Vec<u8> = self.chunks.iter().flat_map(|c| c.to_vec()).collect();
        let cut = bytes.min(all.len());
        FakeResponse {
            chunks: vec![Bytes::copy_from_slice(&all[..cut])],
            stall: true,
            ..self
        }
    }
}

/// An Anthropic error body.
pub fn anthropic_error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"})
}

/// Splits `s` into up to `n` pieces on character boundaries.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The event objects of a faithful Anthropic stream.
pub fn anthropic_events(
    text: Option<&str>,
    calls: &[(&str, &str, &str)],
    stop: &str,
) -> Vec<Value> {
    let mut ev = vec![json!({"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake",
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 100, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": 1}}})];
    let mut index = 0;
    if let Some(text) = text {
        ev.push(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}));
        ev.push(json!({"type": "ping"}));
        for p in pieces(text, 2) {
            ev.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}));
        }
        ev.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    for (id, name, input) in calls {
        ev.push(
            json!({"type": "content_block_start", "index": index, "content_block":
            {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        );
        ev.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": ""}}));
        for p in pieces(input, 3) {
            ev.push(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": p}}));
        }
        ev.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    }
    ev.push(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 20}}));
    ev.push(json!({"type": "message_stop"}));
    ev
}

/// The chunk objects of a faithful Chat Completions stream.
pub fn openai_chunks(text: Option<&str>, calls: &[(&str, &str, &str)], finish: &str) -> Vec<Value> {
    let chunk = |choices: Value, usage: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-fake", "choices": choices, "usage": usage})
    };
    let mut out = vec![chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
        Value::Null,
    )];
    if let Some(text) = text {
        for p in pieces(text, 2) {
            out.push(chunk(
                json!([{"index": 0, "delta": {"content": p}, "finish_reason": null}]),
                Value::Null,
            ));
        }
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        out.push(chunk(
            json!([{"index": 0, "delta": {"tool_calls": [{"index": i, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}, "finish_reason": null}]),
            Value::Null,
        ));
        for p in pieces(args, 3) {
            out.push(chunk(
                json!([{"index": 0, "delta": {"tool_calls": [{"index": i,
                "function": {"arguments": p}}]}, "finish_reason": null}]),
                Value::Null,
            ));
        }
    }
    out.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
        Value::Null,
    ));
    out.push(chunk(
        json!([]),
        json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}),
    ));
    out
}

#[derive(Default)]
struct Shared {
    queue: VecDeque<FakeResponse>,
    requests: Vec<RecordedRequest>,
    violations: Vec<String>,
}

/// The running server; it stops answering when dropped.
pub struct FakeServer {
    addr: std::net::SocketAddr,
    shared: Arc<Mutex<Shared>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic in a test thread must not hide the record.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeServer {
    /// Starts a server that answers requests with `responses`, in order.
    pub async fn start(responses: Vec<FakeResponse>) -> FakeServer {
        FakeServer::start_blocking(responses)
    }

    /// Same as [`FakeServer::start`], for tests without a runtime.
    pub fn start_blocking(responses: Vec<FakeResponse>) -> FakeServer {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("fake server: bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("fake server: set_nonblocking");
        let addr = listener.local_addr().expect("fake server: local_addr");
        let shared = Arc::new(Mutex::new(Shared {
            queue: responses.into(),
            ..Shared::default()
        }));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        std::thread::Builder::new()
            .name(format!("fake-model-{}", addr.port()))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("fake server: runtime");
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("fake server: tokio listener");
                    let app = Router::new().fallback(handle).with_state(state);
                    let server = axum::serve(listener, app);
                    tokio::select! {
                        r = server => { let _ = r; }
                        _ = rx => {}
                    }
                });
            })
            .expect("fake server: thread");
        FakeServer {
            addr,
            shared,
            shutdown: Some(tx),
        }
    }

    /// The base URL for Anthropic clients (`ANTHROPIC_BASE_URL`), without
    /// `/v1`: `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL for OpenAI-compatible clients (`OPENAI_BASE_URL`),
    /// with `/v1`: `http://127.0.0.1:PORT/v1`.
    pub fn openai_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Appends a response to the queue.
    pub fn push(&self, response: FakeResponse) {
        lock(&self.shared).queue.push_back(response);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared).requests.clone()
    }

    /// Responses not yet served.
    pub fn remaining(&self) -> usize {
        lock(&self.shared).queue.len()
    }

    /// Protocol violations seen so far, each naming the request number.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.shared).violations.clone()
    }

    /// Panics with the violations and the offending request bodies, if any.
    pub fn assert_protocol_ok(&self) {
        let s = lock(&self.shared);
        if s.violations.is_empty() {
            return;
        }
        let mut msg = format!(
            "fake model server saw {} protocol violation(s):\n",
            s.violations.len()
        );
        for v in &s.violations {
            msg.push_str(&format!("  - {v}\n"));
        }
        for (i, r) in s.requests.iter().enumerate() {
            let body = serde_json::to_string_pretty(&r.body).unwrap_or_default();
            msg.push_str(&format!("request #{i} {} {}:\n{body}\n", r.method, r.path));
        }
        drop(s);
        panic!("{msg}");
    }

    /// Panics unless every queued response was served.
    pub fn assert_all_served(&self) {
        let n = self.remaining();
        assert_eq!(n, 0, "{n} queued response(s) were never requested");
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

async fn handle(
    State(shared): State<Arc<Mutex<Shared>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let parsed: Value = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
    let req = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: parsed,
        raw_body,
        at: std::time::Instant::now(),
    };
    let mut problems = check_request(&req);
    let next = {
        let mut s = lock(&shared);
        let n = s.requests.len();
        let next = s.queue.pop_front();
        if next.is_none() {
            problems.push("no response queued for this request (answered 500)".into());
        }
        for p in problems {
            s.violations
                .push(format!("request #{n} ({} {}): {p}", req.method, req.path));
        }
        s.requests.push(req);
        next
    };
    let r = next.unwrap_or_else(|| {
        FakeResponse::status(
            500,
            &[("x-should-retry", "false")],
            anthropic_error("api_error", "fake model server: no response queued"),
        )
    });
    if !r.head_delay.is_zero() {
        tokio::time::sleep(r.head_delay).await;
    }
    render(r)
}

fn render(r: FakeResponse) -> Response {
    let delay = r.chunk_delay;
    let stall = r.stall;
    let chunks = futures::stream::iter(r.chunks).then(move |c| async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok::<Bytes, std::io::Error>(c)
    });
    let tail = futures::stream::once(async move {
        if stall {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Ok::<Bytes, std::io::Error>(Bytes::new())
    });
    let mut b = Response::builder()
        .status(StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    for (k, v) in &r.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(Body::from_stream(chunks.chain(tail)))
        .unwrap_or_else(|_| Response::new(Body::from("fake server: bad canned response")))
}

/// The protocol problems of one request.
pub fn check_request(r: &RecordedRequest) -> Vec<String> {
    let mut out = Vec::new();
    if r.body.is_null() && !r.raw_body.trim().is_empty() {
        out.push("body is not JSON".into());
        return out;
    }
    if r.path.ends_with("/messages") {
        if r.header("anthropic-version").is_none() {
            out.push("missing anthropic-version header".into());
        }
        check_anthropic(&r.body, &mut out);
    } else if r.path.ends_with("/chat/completions") {
        check_openai(&r.body, &mut out);
    }
    out
}

fn blocks(m: &Value) -> Vec<Value> {
    m["content"].as_array().cloned().unwrap_or_default()
}

fn ids_of(blocks: &[Value], kind: &str, key: &str) -> Vec<String> {
    blocks
        .iter()
        .filter(|b| b["type"] == kind)
        .map(|b| b[key].as_str().unwrap_or("").to_string())
        .collect()
}

/// Anthropic: tool_use ids answered exactly once, in the next message.
pub fn check_anthropic(body: &Value, out: &mut Vec<String>) {
    let Some(msgs) = body["messages"].as_array() else {
        out.push("no messages array".into());
        return;
    };
    let mut all_ids = HashSet::new();
    for (i, m) in msgs.iter().enumerate() {
        let bl = blocks(m);
        let uses = ids_of(&bl, "tool_use", "id");
        let results = ids_of(&bl, "tool_result", "tool_use_id");
        if m["role"] == "assistant" {
            if !results.is_empty() {
                out.push(format!(
                    "messages[{i}] (assistant) holds tool_result blocks"
                ));
            }
            for id in &uses {
                if id.is_empty() {
                    out.push(format!("messages[{i}] has a tool_use with an empty id"));
                } else if !all_ids.insert(id.clone()) {
                    out.push(format!("tool_use id {id} appears more than once"));
                }
            }
            if uses.is_empty() {
                continue;
            }
            let Some(next) = msgs.get(i + 1) else {
                out.push(format!(
                    "messages[{i}] ends the conversation with unanswered tool_use {uses:?}"
                ));
                continue;
            };
            if next["role"] != "user" {
                out.push(format!(
                    "messages[{i}] tool_use {uses:?} not followed by a user message"
                ));
                continue;
            }
            let nb = blocks(next);
            let answers = ids_of(&nb, "tool_result", "tool_use_id");
            for id in &uses {
                let n = answers.iter().filter(|a| *a == id).count();
                if n != 1 {
                    out.push(format!(
                        "tool_use {id} has {n} tool_result(s) in messages[{}]",
                        i + 1
                    ));
                }
            }
            let first_other = nb.iter().position(|b| b["type"] != "tool_result");
            let last_result = nb.iter().rposition(|b| b["type"] == "tool_result");
            if let (Some(o), Some(r)) = (first_other, last_result)
                && o < r
            {
                out.push(format!(
                    "messages[{}] has a non-result block before a tool_result",
                    i + 1
                ));
            }
        } else {
            if !uses.is_empty() {
                out.push(format!("messages[{i}] (user) holds tool_use blocks"));
            }
            if results.is_empty() {
                continue;
            }
            let prev_uses = match i.checked_sub(1).map(|p| &msgs[p]) {
                Some(p) if p["role"] == "assistant" => ids_of(&blocks(p), "tool_use", "id"),
                _ => Vec::new(),
            };
            for id in &results {
                if !prev_uses.contains(id) {
                    out.push(format!(
                        "messages[{i}] tool_result {id} has no tool_use in the previous assistant message"
                    ));
                }
            }
        }
    }
}

/// OpenAI: each assistant tool call answered by one following tool message.
pub fn check_openai(body: &Value, out: &mut Vec<String>) {
    let Some(msgs) = body["messages"].as_array() else {
        out.push("no messages array".into());
        return;
    };
    let mut all_ids = HashSet::new();
    // The calls of the latest assistant message still open for answers.
    let mut open: Option<(usize, HashMap<String, usize>)> = None;
    let close = |open: &mut Option<(usize, HashMap<String, usize>)>, out: &mut Vec<String>| {
        if let Some((at, calls)) = open.take() {
            let mut ids: Vec<_> = calls.into_iter().filter(|(_, n)| *n != 1).collect();
            ids.sort();
            for (id, n) in ids {
                out.push(format!(
                    "messages[{at}] tool call {id} answered by {n} tool message(s)"
                ));
            }
        }
    };
    for (i, m) in msgs.iter().enumerate() {
        match m["role"].as_str() {
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                match open.as_mut() {
                    Some((_, calls)) if calls.contains_key(id) => {
                        *calls.entry(id.to_string()).or_default() += 1;
                    }
                    _ => out.push(format!(
                        "messages[{i}] tool message for '{id}' does not answer a call of the preceding assistant message"
                    )),
                }
            }
            role => {
                close(&mut open, out);
                if role != Some("assistant") {
                    continue;
                }
                let Some(calls) = m["tool_calls"].as_array().filter(|c| !c.is_empty()) else {
                    continue;
                };
                let mut map = HashMap::new();
                for c in calls {
                    let id = c["id"].as_str().unwrap_or("").to_string();
                    if id.is_empty() {
                        out.push(format!("messages[{i}] has a tool call without an id"));
                    } else if !all_ids.insert(id.clone()) {
                        out.push(format!("tool call id {id} appears more than once"));
                    }
                    if !c["function"]["arguments"].is_string() {
                        out.push(format!(
                            "messages[{i}] tool call {id}: arguments is not a string"
                        ));
                    }
                    map.insert(id, 0);
                }
                open = Some((i, map));
            }
        }
    }
    close(&mut open, out);
}
