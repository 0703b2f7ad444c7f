//! The Anthropic Messages API client (streaming).

#[cfg(test)]
mod fuzz;
mod reply;
mod request;
mod stream;

pub use reply::PROVIDER;

use async_trait::async_trait;
use reqwest::header::HeaderMap;

use super::event_stream;
use super::http::ApiConfig;
use super::http::{self, BodyReader, ErrorBody, HttpTimeouts};
use super::retry::{RetryPolicy, retry_after_ms, status_is_retryable};
use super::{Model, ModelError, ModelReply, ModelRequest, ProgressSink};

/// The public API endpoint.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The API version this client speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The environment variable named in key errors.
pub const ANTHROPIC_KEY_VAR: &str = "ANTHROPIC_API_KEY";

/// A [`Model`] backed by the Anthropic Messages API.
#[derive(Debug)]
pub struct AnthropicModel {
    client: reqwest::Client,
    url: String,
    key: String,
    model: String,
    wire: request::Wire,
    policy: RetryPolicy,
    timeouts: HttpTimeouts,
}

impl AnthropicModel {
    /// Checks the config and builds the client; a missing or empty key is
    /// `ModelError::MissingKey { var: "ANTHROPIC_API_KEY" }`.
    pub fn new(cfg: ApiConfig) -> Result<Self, ModelError> {
        let key = cfg
            .api_key
            .filter(|k| !k.trim().is_empty())
            .ok_or(ModelError::MissingKey {
                var: ANTHROPIC_KEY_VAR,
            })?;
        Ok(AnthropicModel {
            client: http::build_client(&cfg.timeouts)?,
            url: messages_url(&cfg.base_url),
            key,
            model: cfg.model,
            wire: request::Wire {
                stream: cfg.stream,
                tool_choice: cfg.tool_choice,
            },
            policy: cfg.retry,
            timeouts: cfg.timeouts,
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
        let req = self
            .client
            .post(&self.url)
            .header("x-api-key", &self.key)
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header("content-type", "application/json")
            .header(
                "accept",
                if self.wire.stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .json(body);
        let resp = http::send(req, &self.url, idle).await?;
        let status = resp.status().as_u16();
        if !resp.status().is_success() {
            let headers = resp.headers().clone();
            let text = http::read_error_body(resp, idle).await;
            return Err(map_error(status, &headers, &text, &self.model, &self.url));
        }
        if http::is_json(&resp) {
            let v = http::read_json_body(resp, idle).await?;
            let reply = reply::reply_from_json(&v)?;
            // Shown as a stream's text would be (a server may answer a
            // streamed request with one body).
            let text = reply.message.text();
            if !text.is_empty() {
                progress(super::ModelProgress::TextDelta { text });
            }
            return Ok(reply);
        }
        let mut state = stream::StreamState::default();
        event_stream::read(
            &self.url,
            &mut BodyReader::new(resp, idle),
            &mut state,
            progress,
        )
        .await?;
        state.finish()
    }
}

#[async_trait]
impl Model for AnthropicModel {
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
}

/// `{base}/v1/messages`, tolerating a trailing slash and a base that
/// already ends in `/v1`.
fn messages_url(base: &str) -> String {
    let base = http::trim_base(base);
    if base.ends_with("/v1") {
        format!("{base}/messages")
    } else {
        format!("{base}/v1/messages")
    }
}

/// Maps a non-2xx answer to the error that states the policy.
fn map_error(status: u16, headers: &HeaderMap, body: &str, model: &str, url: &str) -> ModelError {
    let e = ErrorBody::parse(body);
    match status {
        401 | 403 => ModelError::Unauthorized {
            status,
            var: ANTHROPIC_KEY_VAR,
        },
        404 if e.is_missing_model() => ModelError::ModelNotFound {
            model: model.to_string(),
            message: e.message,
        },
        404 => ModelError::RouteNotFound {
            url: url.to_string(),
            message: e.message,
        },
        400 | 413 if is_prompt_too_long(&e.message) => {
            ModelError::PromptTooLong { message: e.message }
        }
        _ => {
            let retryable = status_is_retryable(status, headers)
                && !e.is_spend_limit()
                && !e.is_validation_error();
            ModelError::Api {
                status,
                kind: e.kind,
                message: e.message,
                retryable,
                retry_after_ms: retry_after_ms(headers),
            }
        }
    }
}

/// The API says "prompt is too long: 210000 tokens > 200000 maximum"; the
/// other phrasings cover proxies and later wordings.
fn is_prompt_too_long(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("prompt is too long")
        || m.contains("context window")
        || m.contains("context length")
        || m.contains("input is too long")
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
            "http://127.0.0.1:9/v1/messages",
        )
    }
    use reqwest::header::HeaderValue;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, HeaderValue::from_static(v));
        }
        m
    }

    fn body(kind: &str, msg: &str) -> String {
        serde_json::json!({"type":"error","error":{"type":kind,"message":msg}}).to_string()
    }

    #[test]
    fn urls() {
        for base in [
            "https://api.anthropic.com",
            "https://api.anthropic.com/",
            "https://api.anthropic.com/v1",
            "https://api.anthropic.com/v1/",
        ] {
            assert_eq!(messages_url(base), "https://api.anthropic.com/v1/messages");
        }
        assert_eq!(
            messages_url("http://127.0.0.1:9/proxy"),
            "http://127.0.0.1:9/proxy/v1/messages"
        );
    }

    #[test]
    fn missing_key_is_reported_at_construction() {
        let err = AnthropicModel::new(ApiConfig::new("m", None, DEFAULT_ANTHROPIC_BASE_URL)).err();
        assert_eq!(
            err.map(|e| e.to_string()),
            Some("ANTHROPIC_API_KEY is not set".into())
        );
        assert!(
            AnthropicModel::new(ApiConfig::new(
                "m",
                Some("  ".into()),
                DEFAULT_ANTHROPIC_BASE_URL
            ))
            .is_err()
        );
        assert!(
            AnthropicModel::new(ApiConfig::new(
                "m",
                Some("k".into()),
                DEFAULT_ANTHROPIC_BASE_URL
            ))
            .is_ok()
        );
    }

    #[test]
    fn statuses_map_to_policy() {
        let none = HeaderMap::new();
        assert!(matches!(
            map_error(401, &none, &body("authentication_error", "bad key"), "m"),
            ModelError::Unauthorized {
                status: 401,
                var: "ANTHROPIC_API_KEY"
            }
        ));
        assert!(matches!(
            map_error(403, &none, "", "m"),
            ModelError::Unauthorized { .. }
        ));
        match map_error(
            404,
            &none,
            &body("not_found_error", "model: claude-sonet-4-5"),
            "claude-sonet-4-5",
        ) {
            ModelError::ModelNotFound { model, message } => {
                assert_eq!(model, "claude-sonet-4-5");
                assert_eq!(message, "model: claude-sonet-4-5");
            }
            e => panic!("{e:?}"),
        }
        assert!(matches!(
            map_error(
                400,
                &none,
                &body(
                    "invalid_request_error",
                    "prompt is too long: 210000 tokens > 200000 maximum"
                ),
                "m"
            ),
            ModelError::PromptTooLong { .. }
        ));
        let e = map_error(
            400,
            &h(&[("x-should-retry", "false")]),
            &body("invalid_request_error", "bad"),
            "m",
        );
        assert!(!e.is_retryable());
        let e = map_error(413, &none, &body("request_too_large", "too big"), "m");
        assert!(matches!(
            e,
            ModelError::Api {
                status: 413,
                retryable: false,
                ..
            }
        ));
        for s in [408, 409, 429, 500, 502, 529] {
            let e = map_error(
                s,
                &h(&[("retry-after", "3")]),
                &body("overloaded_error", "Overloaded"),
                "m",
            );
            assert!(e.is_retryable(), "{s}");
            assert_eq!(e.retry_after_ms(), Some(3000));
        }
        let e = map_error(
            429,
            &h(&[("x-should-retry", "false")]),
            &body("rate_limit_error", "x"),
            "m",
        );
        assert!(!e.is_retryable());
        let e = map_error(
            429,
            &none,
            &body(
                "rate_limit_error",
                "You have reached your specified API usage limits. You will regain access on 2025-09-01.",
            ),
            "m",
        );
        assert!(!e.is_retryable());
        let e = map_error(502, &none, "<html>bad gateway</html>", "m");
        assert!(e.is_retryable());
        assert_eq!(
            e.to_string(),
            "API error (HTTP 502, unknown): <html>bad gateway</html>"
        );
    }
}
