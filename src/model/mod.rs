//! The model seam: one trait at whole-conversation granularity, with the
//! provider-neutral conversation types every provider maps to and from.

pub mod anthropic;
mod event_stream;
pub mod http;
pub mod openai;
pub mod pricing;
pub mod provider;
pub mod retry;
pub mod scripted;
pub mod sse;
pub mod tool_choice;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One piece of a message. Shaped like Anthropic's content blocks; the
/// OpenAI client maps these to `tool_calls` and `role: "tool"` messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Plain text, the model's or the user's.
    Text { text: String },
    /// A call of one of the loop's tools.
    ToolUse {
        id: String,
        name: String,
        /// The parsed input. When the model sent input that is not valid
        /// JSON, this is an empty object and `raw_input` holds what was sent.
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw_input: Option<String>,
    },
    /// What one tool call returned.
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
    /// A block the loop neither reads nor runs (Anthropic `thinking`,
    /// `redacted_thinking`, `server_tool_use`, `web_search_tool_result`...),
    /// kept exactly as `provider` sent it: such a block must go back
    /// unchanged (a thinking signature covers its text; a paused server
    /// tool continues from its call), and only to the provider that made it.
    Opaque { provider: String, value: Value },
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![Block::Text { text: text.into() }],
        }
    }

    /// The tool calls of this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = ToolCall<'_>> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolUse {
                id,
                name,
                input,
                raw_input,
            } => Some(ToolCall {
                id,
                name,
                input,
                raw_input: raw_input.as_deref(),
            }),
            _ => None,
        })
    }

    /// All text blocks joined.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in &self.content {
            if let Block::Text { text } = b {
                out.push_str(text);
            }
        }
        out
    }
}

/// A borrowed view of one tool call.
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub input: &'a Value,
    pub raw_input: Option<&'a str>,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
    /// The provider-defined tool this one stands for, as Anthropic names
    /// it (`{"type": "text_editor_20250728", "name": ...}`): sent instead
    /// of the custom definition by a client whose API knows it (Anthropic's
    /// Messages); every other client sends name, description and schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<Value>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    StopSequence,
    ToolUse,
    PauseTurn,
    Refusal,
    MaxTokens,
    ModelContextWindowExceeded,
    /// A reason this runner does not know; handled like `end_turn` unless
    /// the reply holds complete tool calls.
    Other(String),
}

impl StopReason {
    /// The reason named as the trajectory names it (`end_turn`,
    /// `tool_use`, `pause_turn`...); any other name is `Other`. Vendor
    /// names are mapped by each client.
    pub fn from_name(s: &str) -> Self {
        match s {
            "end_turn" => StopReason::EndTurn,
            "stop_sequence" => StopReason::StopSequence,
            "tool_use" => StopReason::ToolUse,
            "pause_turn" => StopReason::PauseTurn,
            "refusal" => StopReason::Refusal,
            "max_tokens" => StopReason::MaxTokens,
            "model_context_window_exceeded" => StopReason::ModelContextWindowExceeded,
            other => StopReason::Other(other.to_string()),
        }
    }
}

/// Token usage of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Adds another call's usage. The numbers come from the model server:
    /// sums saturate rather than overflow.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .saturating_add(other.cache_creation_input_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(other.cache_read_input_tokens);
    }

    /// Every input token the call was billed for, cached or not.
    pub fn total_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
    }
}

/// What one model call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    /// The assistant message (text and tool calls, in order).
    pub message: Message,
    pub stop_reason: StopReason,
    pub usage: Usage,
    /// The model name the server reported, when it did.
    pub model: Option<String>,
}

/// What the loop asks of a model.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    pub max_tokens: u32,
}

/// Things a model call reports while it runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelProgress {
    /// Streamed assistant text.
    TextDelta { text: String },
    /// A failed attempt that will be retried after `wait_ms`.
    Retry {
        attempt: u32,
        status: Option<u16>,
        wait_ms: u64,
        reason: String,
    },
}

/// Callback for progress; must be cheap and never block.
pub type ProgressSink<'a> = &'a (dyn Fn(ModelProgress) + Send + Sync);

/// Errors of the model layer. Each variant says whether a retry may help.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{var} is not set")]
    MissingKey { var: &'static str },
    #[error("the API rejected the key (HTTP {status}): check {var}")]
    Unauthorized { status: u16, var: &'static str },
    #[error("model '{model}' was not found (HTTP 404): {message}")]
    ModelNotFound { model: String, message: String },
    /// A 404 that names no model: the server has no such route (a base URL
    /// without `/v1`, or a proxy whose upstream lacks the endpoint).
    #[error("the server has no {url} (HTTP 404): {message}")]
    RouteNotFound { url: String, message: String },
    /// HTTP 200 and not one byte of body: a server that cannot stream
    /// this request (llama.cpp's with `tool_choice: auto`) answers so every
    /// time, so it is not retried.
    #[error("{url} answered HTTP 200 with an empty body")]
    EmptyBody { url: String },
    /// No connection could be made (refused, DNS, connect timeout).
    #[error("cannot reach {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// Connected, but no answer within `secs`: the API is slow, not
    /// unreachable. `flag`, when there is one, raises the limit.
    #[error("{what} timed out: no response within {secs}s")]
    TimedOut {
        what: String,
        secs: u64,
        flag: Option<&'static str>,
    },
    #[error("the prompt is too long for the model's context window: {message}")]
    PromptTooLong { message: String },
    #[error("API error (HTTP {status}, {kind}): {message}")]
    Api {
        status: u16,
        kind: String,
        message: String,
        retryable: bool,
        /// Server-requested wait before retrying, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    #[error("the stream broke: {kind}: {message}")]
    StreamError {
        kind: String,
        message: String,
        retryable: bool,
    },
    #[error("unexpected response from the model API: {0}")]
    Protocol(String),
    #[error("gave up after {}: {last}", crate::plural::count(*.attempts, "attempt", "attempts"))]
    RetriesExhausted {
        attempts: u32,
        last: Box<ModelError>,
    },
    #[error("script: {0}")]
    Script(String),
    /// A script that is not valid JSON or not of a script's shape.
    #[error("script: {0}")]
    ScriptFormat(String),
    #[error("the model call was cancelled")]
    Cancelled,
}

impl ModelError {
    /// Whether another attempt of the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Unreachable { .. } | ModelError::TimedOut { .. } => true,
            ModelError::Api { retryable, .. } => *retryable,
            ModelError::StreamError { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// What the user can do about this error, when there is something.
    /// The front end words it (it knows its flags; this layer does not).
    pub fn hint(&self) -> Option<Hint> {
        Some(match self {
            ModelError::MissingKey { var } => Hint::SetApiKey { var },
            ModelError::Unauthorized { var, .. } => Hint::CheckApiKey { var },
            ModelError::ModelNotFound { model, .. } => Hint::CheckModelName {
                model: model.clone(),
            },
            ModelError::Unreachable { url, .. } => Hint::CheckBaseUrl { url: url.clone() },
            ModelError::RouteNotFound { url, .. } => Hint::CheckRoute { url: url.clone() },
            ModelError::EmptyBody { .. } => Hint::NoStream,
            ModelError::TimedOut { secs, flag, .. } => Hint::RaiseTimeout {
                secs: *secs,
                flag: *flag,
            },
            ModelError::ScriptFormat(_) => Hint::ScriptFormat,
            ModelError::RetriesExhausted { last, .. } => {
                return last.hint().or(Some(Hint::TryLater));
            }
            _ => return None,
        })
    }

    /// The context window a "prompt is too long" error states, when it
    /// states one: OpenAI, vLLM and llama-cpp-python ("maximum context
    /// length is 4096 tokens"), llama.cpp ("context window of 4096",
    /// "available context size (4096 tokens)"), Anthropic ("210000 tokens
    /// > 200000 maximum").
    pub fn context_limit(&self) -> Option<u64> {
        let ModelError::PromptTooLong { message } = self else {
            return None;
        };
        static PATTERNS: std::sync::LazyLock<Vec<regex::Regex>> = std::sync::LazyLock::new(|| {
            [
                r"(?i)maximum context length is (\d+)",
                r"(?i)context window of (\d+)",
                r"(?i)context size \((\d+) tokens\)",
                r"(?i)tokens > (\d+) maximum",
            ]
            .iter()
            .filter_map(|p| regex::Regex::new(p).ok())
            .collect()
        });
        PATTERNS
            .iter()
            .find_map(|re| re.captures(message)?.get(1)?.as_str().parse().ok())
            .filter(|n: &u64| *n > 0)
    }

    /// The wait the server asked for, if any.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            ModelError::Api { retry_after_ms, .. } => *retry_after_ms,
            _ => None,
        }
    }
}

/// What the user can do about a [`ModelError`], as data: the front end
/// renders it with its own flag names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// No key: set the environment variable `var` (or use a model that
    /// needs none).
    SetApiKey { var: &'static str },
    /// The API refused the key in `var`.
    CheckApiKey { var: &'static str },
    /// The API does not know the configured model name.
    CheckModelName { model: String },
    /// The API at `url` did not answer: check the configured base URL and
    /// the network.
    CheckBaseUrl { url: String },
    /// The API at `url` has no such route: check the base URL's path.
    CheckRoute { url: String },
    /// The server sent nothing for a streamed request: ask for one body.
    NoStream,
    /// The API kept failing with errors worth retrying: try later.
    TryLater,
    /// A script of the wrong format: where the format is documented.
    ScriptFormat,
    /// The API was reached but answered too slowly: `flag` (now `secs`)
    /// raises the limit.
    RaiseTimeout {
        secs: u64,
        flag: Option<&'static str>,
    },
}

/// A language model the loop can talk to.
#[async_trait]
pub trait Model: Send + Sync {
    /// The configured model name (used for pricing and messages).
    fn name(&self) -> &str;

    /// Sends the whole conversation and returns the next assistant turn.
    /// Retries inside; a returned error is final for this turn.
    async fn complete(
        &self,
        req: ModelRequest<'_>,
        progress: ProgressSink<'_>,
    ) -> Result<ModelReply, ModelError>;

    /// The context window the server says it serves (`--context-window
    /// auto`), when it says one; `None` when it does not or cannot.
    async fn context_window(&self) -> Option<ContextWindow> {
        None
    }
}

/// A context window a server stated, and where it said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextWindow {
    pub tokens: u64,
    /// "GET /props n_ctx", "GET /v1/models max_model_len".
    pub source: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn opaque_blocks_are_recorded_and_read_back_whole_and_are_neither_text_nor_calls() {
        let value = json!({"type": "thinking", "thinking": "hm", "signature": "EsQD"});
        let m = Message {
            role: Role::Assistant,
            content: vec![
                Block::Opaque {
                    provider: "anthropic".into(),
                    value: value.clone(),
                },
                Block::Text { text: "hi".into() },
            ],
        };
        let recorded = serde_json::to_value(&m).expect("serializes");
        assert_eq!(
            recorded["content"][0],
            json!({"type": "opaque", "provider": "anthropic", "value": value})
        );
        let back: Message = serde_json::from_value(recorded).expect("reads back");
        assert_eq!(back, m);
        assert_eq!(m.text(), "hi");
        assert_eq!(m.tool_calls().count(), 0);
    }

    #[test]
    fn gave_up_counts_attempts_in_the_right_number() {
        let last = || Box::new(ModelError::Protocol("x".into()));
        let one = ModelError::RetriesExhausted {
            attempts: 1,
            last: last(),
        };
        assert_eq!(
            one.to_string(),
            "gave up after 1 attempt: unexpected response from the model API: x"
        );
        let five = ModelError::RetriesExhausted {
            attempts: 5,
            last: last(),
        };
        assert!(five.to_string().starts_with("gave up after 5 attempts:"));
    }

    #[test]
    fn stop_reasons_by_their_trajectory_names() {
        for r in [
            StopReason::EndTurn,
            StopReason::StopSequence,
            StopReason::ToolUse,
            StopReason::PauseTurn,
            StopReason::Refusal,
            StopReason::MaxTokens,
            StopReason::ModelContextWindowExceeded,
        ] {
            let name = serde_json::to_value(&r).expect("serializes");
            assert_eq!(StopReason::from_name(name.as_str().unwrap_or("")), r);
        }
        assert_eq!(StopReason::from_name("x"), StopReason::Other("x".into()));
    }
}
