//! The OpenAI-compatible Chat Completions client (OpenAI, vLLM, llama.cpp
//! server, Ollama's `/v1`), streaming, with a fallback for servers that
//! ignore `stream` and answer with one JSON body.

mod context_probe;
#[cfg(test)]
mod fuzz;
mod request;
mod response;

use std::sync::atomic::AtomicU64;

use async_trait::async_trait;
use reqwest::header::HeaderMap;

use super::event_stream;
use super::http::ApiConfig;
use super::http::{self, BodyReader, ErrorBody, HttpTimeouts};
use super::retry::{RetryPolicy, retry_after_ms, status_is_retryable};
use super::{Model, ModelError, ModelReply, ModelRequest, ProgressSink};

/// The public API endpoint (`/v1` included, as the SDKs have it).
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The environment variable named in key errors.
pub const OPENAI_KEY_VAR: &str = "OPENAI_API_KEY";

/// A [`Model`] backed by an OpenAI-compatible Chat Completions endpoint.
#[derive(Debug)]
pub struct OpenAiModel {
    client: reqwest::Client,
    url: String,
    key: Option<String>,
    model: String,
    wire: request::Wire,
    policy: RetryPolicy,
    timeouts: HttpTimeouts,
    /// Source of ids for tool calls a server sent without one.
    next_id: AtomicU64,
    /// The base URL, `/v1` included, without a trailing slash.
    base: String,
}

impl OpenAiModel {
    /// Checks the config and builds the client. A missing key is
    /// `MissingKey { var: "OPENAI_API_KEY" }` only for api.openai.com.
    pub fn new(cfg: ApiConfig) -> Result<Self, ModelError> {
        let base = http::trim_base(&cfg.base_url);
        let official = base.contains("://api.openai.com");
        let key = cfg.api_key.filter(|k| !k.trim().is_empty());
        if official && key.is_none() {
            return Err(ModelError::MissingKey {
                var: OPENAI_KEY_VAR,
            });
        }
        Ok(OpenAiModel {
            client: http::build_client(&cfg.timeouts)?,
            url: format!("{base}/chat/completions"),
            key,
            model: cfg.model,
            wire: request::Wire {
                official,
                stream: cfg.stream,
                tool_choice: cfg.tool_choice,
            },
            policy: cfg.retry,
            timeouts: cfg.timeouts,
            next_id: AtomicU64::new(0),
            base: base.to_string(),
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn attempt(
        &self,
        body: &serde_json::Value,
        progress: ProgressSink<'_>,
    ) -> Result<ModelReply, ModelError> {
        let idle = self.timeouts.idle_read;
        let mut req = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .json(body);
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        let resp = http::send(req, &self.url, idle).await?;
        let status = resp.status().as_u16();
        if !resp.status().is_success() {
            let headers = resp.headers().clone();
            let text = http::read_error_body(resp, idle).await;
            return Err(map_error(status, &headers, &text, &self.model, &self.url));
        }
        let mut state = response::ChatState::default();
        if http::is_json(&resp) {
            let v = http::read_json_body(resp, idle).await?;
            if v.get("error").is_some_and(|e| !e.is_null()) {
                let e = ErrorBody::parse(&v.to_string());
                return Err(ModelError::Api {
                    status,
                    kind: e.kind,
                    message: e.message,
                    retryable: false,
                    retry_after_ms: None,
                });
            }
            state.handle_whole(&v, progress)?;
            return state.finish(&self.next_id);
        }
        event_stream::read(
            &self.url,
            &mut BodyReader::new(resp, idle),
            &mut state,
            progress,
        )
        .await?;
        state.finish(&self.next_id)
    }
}

#[async_trait]
impl Model for OpenAiModel {
    fn name(&self) -> &str {
        &self.model
    }

    async fn complete(
        &self,
        req: ModelRequest<'_>,
        progress: ProgressSink<'_>,
    ) -> Result<ModelReply, ModelError> {
        let body = request::build_body(&self.model, &req, &self.wire);
        self.policy
            .run(progress, || self.attempt(&body, progress))
            .await
    }

    async fn context_window(&self) -> Option<super::ContextWindow> {
        context_probe::probe(&self.client, &self.base, self.key.as_deref(), &self.model).await
    }
}

/// Maps a non-2xx answer to the error that states the policy.
fn map_error(status: u16, headers: &HeaderMap, body: &str, model: &str, url: &str) -> ModelError {
    let e = ErrorBody::parse(body);
    let code = e.code.as_deref().unwrap_or("");
    let lower = e.message.to_ascii_lowercase();
    if status == 401 {
        return ModelError::Unauthorized {
            status,
            var: OPENAI_KEY_VAR,
        };
    }
    if code == "model_not_found" || (status == 404 && e.is_missing_model()) {
        return ModelError::ModelNotFound {
            model: model.to_string(),
            message: e.message,
        };
    }
    if status == 404 {
        return ModelError::RouteNotFound {
            url: url.to_string(),
            message: e.message,
        };
    }
    if code == "context_length_exceeded"
        || e.kind == "exceed_context_size_error"
        || lower.contains("maximum context length")
        || lower.contains("context length")
        || lower.contains("context window")
    {
        return ModelError::PromptTooLong { message: e.message };
    }
    let retryable =
        status_is_retryable(status, headers) && !e.is_spend_limit() && !e.is_validation_error();
    let kind = if e.kind == "unknown" && !code.is_empty() {
        code.to_string()
    } else {
        e.kind
    };
    ModelError::Api {
        status,
        kind,
        message: e.message,
        retryable,
        retry_after_ms: retry_after_ms(headers),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapping at a fixed endpoint (the tests' calls name no URL).
    fn map_error(status: u16, headers: &HeaderMap, body: &str, model: &str) -> ModelError {
        super::map_error(
            status,
            headers,
            body,
            model,
            "http://127.0.0.1:9/v1/chat/completions",
        )
    }
    use reqwest::header::HeaderValue;
    use serde_json::json;

    fn err(message: &str, kind: &str, code: Option<&str>) -> String {
        json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
            .to_string()
    }

    #[test]
    fn key_is_needed_only_for_the_official_api() {
        let e = OpenAiModel::new(ApiConfig::new("gpt-4o", None, DEFAULT_OPENAI_BASE_URL)).err();
        assert_eq!(
            e.map(|e| e.to_string()),
            Some("OPENAI_API_KEY is not set".into())
        );
        let mut local = ApiConfig::new("llama", None, DEFAULT_OPENAI_BASE_URL);
        local.base_url = "http://127.0.0.1:8080/v1/".into();
        let m = OpenAiModel::new(local).expect("local needs no key");
        assert_eq!(m.url(), "http://127.0.0.1:8080/v1/chat/completions");
    }

    #[test]
    fn statuses_map_to_policy() {
        let none = HeaderMap::new();
        assert!(matches!(
            map_error(
                401,
                &none,
                &err(
                    "Incorrect API key",
                    "invalid_request_error",
                    Some("invalid_api_key")
                ),
                "m"
            ),
            ModelError::Unauthorized {
                var: "OPENAI_API_KEY",
                ..
            }
        ));
        assert!(matches!(
            map_error(
                404,
                &none,
                &err(
                    "The model `x` does not exist",
                    "invalid_request_error",
                    Some("model_not_found")
                ),
                "x"
            ),
            ModelError::ModelNotFound { .. }
        ));
        assert!(matches!(
            map_error(
                404,
                &none,
                r#"{"error":"model \"q\" not found, try pulling it first"}"#,
                "q"
            ),
            ModelError::ModelNotFound { .. }
        ));
        assert!(matches!(
            map_error(
                400,
                &none,
                &err(
                    "This model's maximum context length is 128000 tokens.",
                    "invalid_request_error",
                    Some("context_length_exceeded")
                ),
                "m"
            ),
            ModelError::PromptTooLong { .. }
        ));
        let e = map_error(
            429,
            &none,
            &err(
                "You exceeded your current quota",
                "insufficient_quota",
                Some("insufficient_quota"),
            ),
            "m",
        );
        assert!(!e.is_retryable());
        let mut h = HeaderMap::new();
        h.insert("retry-after-ms", HeaderValue::from_static("20"));
        let e = map_error(
            429,
            &h,
            &err(
                "Rate limit reached",
                "requests",
                Some("rate_limit_exceeded"),
            ),
            "m",
        );
        assert!(e.is_retryable());
        assert_eq!(e.retry_after_ms(), Some(20));
        let e = map_error(
            400,
            &none,
            &err(
                "Tool call validation failed",
                "invalid_request_error",
                Some("tool_use_failed"),
            ),
            "m",
        );
        assert!(matches!(
            e,
            ModelError::Api {
                status: 400,
                retryable: false,
                ..
            }
        ));
        assert!(map_error(503, &none, "upstream connect error", "m").is_retryable());
    }
}
