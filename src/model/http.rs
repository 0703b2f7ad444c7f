//! HTTP plumbing shared by the model clients: timeouts, URL joining,
//! sending with connection errors mapped, reading a body chunk by chunk
//! under an idle deadline, and parsing provider error bodies.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::Value;

use super::ModelError;
use super::retry::RetryPolicy;
use super::tool_choice::ToolChoice;

/// How long to wait for a TCP/TLS connection.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: u64 = 15;
/// How long a response may stay silent (no header, no byte) before the
/// attempt fails and is retried. Anthropic pings every few seconds while
/// streaming; a non-streaming local server must answer within this.
pub const DEFAULT_IDLE_READ_TIMEOUT_SECS: u64 = 300;
/// The most of an error body we keep.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// The most of a success body we accept, whole or streamed.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Per-request time limits of an HTTP model client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// Limit on establishing the connection.
    pub connect: Duration,
    /// Limit on silence: waiting for the response head, and between two
    /// chunks of the body. A stalled stream fails with a retryable error.
    pub idle_read: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> Self {
        HttpTimeouts {
            connect: Duration::from_secs(DEFAULT_CONNECT_TIMEOUT_SECS),
            idle_read: Duration::from_secs(DEFAULT_IDLE_READ_TIMEOUT_SECS),
        }
    }
}

/// Builds the reqwest client for one model.
pub(crate) fn build_client(t: &HttpTimeouts) -> Result<reqwest::Client, ModelError> {
    reqwest::Client::builder()
        .connect_timeout(t.connect)
        .build()
        .map_err(|e| ModelError::Protocol(format!("cannot build the HTTP client: {e}")))
}

/// `base` without trailing slashes.
pub(crate) fn trim_base(base: &str) -> &str {
    base.trim().trim_end_matches('/')
}

/// The flag that sets [`HttpTimeouts::idle_read`], for messages.
pub const MODEL_TIMEOUT_FLAG: &str = "--model-timeout";

/// Sends a request. A connection that cannot be made is `Unreachable`; a
/// server that took the request but stays silent is `TimedOut` (slow, not
/// unreachable); a connection that breaks before the response is a broken
/// stream. All three are retryable.
pub(crate) async fn send(
    req: reqwest::RequestBuilder,
    url: &str,
    idle: Duration,
) -> Result<reqwest::Response, ModelError> {
    match tokio::time::timeout(idle, req.send()).await {
        Err(_) => Err(ModelError::TimedOut {
            what: format!("the model API at {url}"),
            secs: idle.as_secs(),
            flag: Some(MODEL_TIMEOUT_FLAG),
        }),
        Ok(Err(e)) if e.is_connect() => Err(ModelError::Unreachable {
            url: url.to_string(),
            detail: error_chain(&e),
        }),
        Ok(Err(e)) => Err(ModelError::StreamError {
            kind: "connection".into(),
            message: format!(
                "{url} closed the connection before answering: {}",
                error_chain(&e)
            ),
            retryable: true,
        }),
        Ok(Ok(resp)) => Ok(resp),
    }
}

/// The error and its sources on one line (reqwest's top-level message
/// alone says little, the cause says "connection refused").
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        src = s.source();
    }
    out
}

/// Body chunks; a failure is already worded (its error chain on one line).
type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

/// A response body read chunk by chunk, each wait bounded by the idle
/// timeout.
pub(crate) struct BodyReader {
    stream: ByteStream,
    idle: Duration,
}

impl BodyReader {
    /// Wraps a response whose head has arrived.
    pub(crate) fn new(resp: reqwest::Response, idle: Duration) -> Self {
        BodyReader::from_stream(resp.bytes_stream(), idle)
    }

    /// Wraps any stream of body chunks (a response's, or a test's).
    pub(crate) fn from_stream<S, E>(stream: S, idle: Duration) -> Self
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: std::error::Error,
    {
        BodyReader {
            stream: Box::pin(stream.map(|r| r.map_err(|e| error_chain(&e)))),
            idle,
        }
    }

    /// The next chunk, `None` at the end. A stall or a broken connection is
    /// a retryable `StreamError`.
    pub(crate) async fn next_chunk(&mut self) -> Result<Option<Bytes>, ModelError> {
        match tokio::time::timeout(self.idle, self.stream.next()).await {
            Err(_) => Err(ModelError::StreamError {
                kind: "idle_timeout".into(),
                message: format!("no data for {}s", self.idle.as_secs()),
                retryable: true,
            }),
            Ok(None) => Ok(None),
            Ok(Some(Err(message))) => Err(ModelError::StreamError {
                kind: "connection".into(),
                message,
                retryable: true,
            }),
            Ok(Some(Ok(b))) => Ok(Some(b)),
        }
    }

    /// Reads the rest of the body as text, keeping at most `limit` bytes.
    async fn read_limited(&mut self, limit: usize) -> Result<(String, bool), ModelError> {
        let mut buf = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = self.next_chunk().await? {
            let room = limit.saturating_sub(buf.len());
            if chunk.len() > room {
                buf.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            buf.extend_from_slice(&chunk);
        }
        Ok((String::from_utf8_lossy(&buf).into_owned(), truncated))
    }
}

/// Reads an error body (bounded); a read failure yields what was read.
pub(crate) async fn read_error_body(resp: reqwest::Response, idle: Duration) -> String {
    let mut r = BodyReader::new(resp, idle);
    r.read_limited(MAX_ERROR_BODY_BYTES)
        .await
        .map(|(s, _)| s)
        .unwrap_or_default()
}

/// Reads and parses a whole JSON success body.
pub(crate) async fn read_json_body(
    resp: reqwest::Response,
    idle: Duration,
) -> Result<Value, ModelError> {
    let mut r = BodyReader::new(resp, idle);
    let (text, truncated) = r.read_limited(MAX_BODY_BYTES).await?;
    if truncated {
        return Err(ModelError::Protocol(format!(
            "response body larger than {MAX_BODY_BYTES} bytes"
        )));
    }
    serde_json::from_str(&text).map_err(|e| {
        ModelError::Protocol(format!(
            "response is not valid JSON ({e}): {}",
            snippet(&text)
        ))
    })
}

/// Whether a response's content type says JSON (as opposed to SSE).
pub(crate) fn is_json(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|ct| ct.to_ascii_lowercase().contains("json"))
        .unwrap_or(false)
}

/// The first 300 characters of a body, on one line, for messages.
pub(crate) fn snippet(text: &str) -> String {
    let one_line: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut s: String = one_line.chars().take(300).collect();
    if one_line.chars().count() > 300 {
        s.push('…');
    }
    if s.is_empty() {
        s.push_str("(empty body)");
    }
    s
}

/// The useful fields of a provider error body, whatever its dialect:
/// Anthropic `{type:"error", error:{type, message}}`, OpenAI
/// `{error:{message, type, code, param}}`, vLLM `{object:"error",
/// message, type, code}`, Ollama `{error:"..."}`, or not JSON at all.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ErrorBody {
    /// `error.type` (e.g. `rate_limit_error`), or "unknown".
    pub kind: String,
    /// A human-readable message (the body itself when it is not JSON).
    pub message: String,
    /// `error.code` as text (OpenAI: `model_not_found`, ...).
    pub code: Option<String>,
    /// Anthropic `error.details.error_code` (e.g. a spend limit).
    pub detail_code: Option<String>,
}

impl ErrorBody {
    /// Parses an error body; never fails.
    pub(crate) fn parse(body: &str) -> ErrorBody {
        let Ok(v) = serde_json::from_str::<Value>(body) else {
            return ErrorBody {
                kind: "unknown".into(),
                message: snippet(body),
                ..ErrorBody::default()
            };
        };
        let err = match v.get("error") {
            Some(Value::String(s)) => {
                return ErrorBody {
                    kind: "error".into(),
                    message: s.clone(),
                    ..ErrorBody::default()
                };
            }
            Some(e @ Value::Object(_)) => e,
            _ => &v,
        };
        let text = |key: &str| -> Option<String> {
            match err.get(key)? {
                Value::String(s) if !s.is_empty() => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        let kind = text("type")
            .filter(|t| t != "error")
            .unwrap_or_else(|| "unknown".into());
        let message = text("message").unwrap_or_else(|| snippet(body));
        let detail_code = err
            .get("details")
            .and_then(|d| d.get("error_code"))
            .and_then(Value::as_str)
            .map(str::to_string);
        ErrorBody {
            kind,
            message,
            code: text("code"),
            detail_code,
        }
    }

    /// The message without the note a LiteLLM proxy appends to every
    /// error ("Received Model Group=NAME ..."), which names the model
    /// whatever went wrong.
    fn own_message(&self) -> String {
        let m = self.message.to_ascii_lowercase();
        match m.find("received model group") {
            Some(i) => m[..i].to_string(),
            None => m,
        }
    }

    /// Whether a 404 is about the model (rather than a route the server
    /// does not have): OpenAI's `model_not_found`, "The model `x` does
    /// not exist", Ollama's "model \"q\" not found", Anthropic's
    /// "model: NAME". A framework's bare 404 (`{"detail":"Not Found"}`,
    /// "404 page not found") names no model.
    pub(crate) fn is_missing_model(&self) -> bool {
        self.code.as_deref() == Some("model_not_found") || self.own_message().contains("model")
    }

    /// Whether the server says the request itself is malformed (a schema
    /// validation error, reported by some servers as a 500): the same
    /// request will fail the same way, so it is not retried.
    pub(crate) fn is_validation_error(&self) -> bool {
        let m = self.own_message();
        [
            "validation error",
            "input should be",
            "validationerror",
            "field required",
        ]
        .iter()
        .any(|p| m.contains(p))
    }

    /// Whether this is a spend, credit or quota limit: the account is out
    /// of money, so waiting a few seconds will not help.
    pub(crate) fn is_spend_limit(&self) -> bool {
        let codes = [self.code.as_deref(), self.detail_code.as_deref()];
        if codes.iter().flatten().any(|c| {
            c.contains("insufficient_quota")
                || c.contains("spend_limit")
                || c.contains("billing")
                || c.contains("credit")
        }) {
            return true;
        }
        let m = self.message.to_ascii_lowercase();
        [
            "spend limit",
            "credit balance",
            "insufficient credit",
            "exceeded your current quota",
            "api usage limits",
            "billing",
        ]
        .iter()
        .any(|p| m.contains(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_dialects() {
        let a = ErrorBody::parse(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#,
        );
        assert_eq!(
            (a.kind.as_str(), a.message.as_str()),
            ("overloaded_error", "Overloaded")
        );
        let o = ErrorBody::parse(
            r#"{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#,
        );
        assert_eq!(o.code.as_deref(), Some("model_not_found"));
        let l = ErrorBody::parse(
            r#"{"error":{"code":400,"message":"big","type":"exceed_context_size_error"}}"#,
        );
        assert_eq!(l.code.as_deref(), Some("400"));
        let v = ErrorBody::parse(
            r#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#,
        );
        assert_eq!(v.message, "bad");
        let s = ErrorBody::parse(r#"{"error":"model \"x\" not found, try pulling it first"}"#);
        assert!(s.message.contains("not found"));
        let h = ErrorBody::parse("<html>502 Bad Gateway</html>\n");
        assert_eq!(h.kind, "unknown");
        assert_eq!(h.message, "<html>502 Bad Gateway</html>");
        assert_eq!(ErrorBody::parse("").message, "(empty body)");
    }

    #[test]
    fn spend_limits_are_told_apart_from_rate_limits() {
        let rate = ErrorBody::parse(
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 20,000,000 prompt bytes per hour. Please reduce the prompt length or the maximum tokens requested, or try again later."}}"#,
        );
        assert!(!rate.is_spend_limit());
        let spend = ErrorBody::parse(
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"limit","details":{"error_code":"enforced_spend_limit_reached"}}}"#,
        );
        assert!(spend.is_spend_limit());
        let quota = ErrorBody::parse(
            r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}"#,
        );
        assert!(quota.is_spend_limit());
    }

    #[test]
    fn snippets_are_short_and_one_line() {
        let long = "x\n".repeat(400);
        let s = snippet(&long);
        assert!(!s.contains('\n'));
        assert!(s.chars().count() <= 301);
    }
}

/// What an HTTP model client needs.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The API key; whether it is required is the client's call.
    pub api_key: Option<String>,
    /// The API base URL (a trailing slash is fine; Anthropic's may end in
    /// `/v1`, OpenAI-compatible ones include it).
    pub base_url: String,
    /// The model name sent with each request.
    pub model: String,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// Connect and idle-read limits of each attempt.
    pub timeouts: HttpTimeouts,
    /// `tool_choice` sent with every request that offers tools; `None`
    /// sends none (the API's default).
    pub tool_choice: Option<ToolChoice>,
    /// Ask for a stream (`false`: one JSON body, `--no-stream`).
    pub stream: bool,
}

impl ApiConfig {
    /// A config with the default retry policy and timeouts.
    pub fn new(model: impl Into<String>, api_key: Option<String>, base_url: &str) -> Self {
        ApiConfig {
            api_key,
            base_url: base_url.to_string(),
            model: model.into(),
            retry: RetryPolicy::default(),
            timeouts: HttpTimeouts::default(),
            tool_choice: None,
            stream: true,
        }
    }
}
