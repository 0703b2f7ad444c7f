//! The retry policy shared by every HTTP model client: which failures are
//! worth another attempt, and how long to wait before it.

use std::future::Future;
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;

use super::{ModelError, ModelProgress, ProgressSink};
use crate::convert::u64_from_f64;

/// Attempts in all (the first try plus retries), as the official SDKs' default of 2 retries plus headroom.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// First backoff step.
pub const DEFAULT_BASE_DELAY_MS: u64 = 500;
/// Largest single backoff step.
pub const DEFAULT_MAX_DELAY_MS: u64 = 8_000;
/// The longest server-requested wait we honour for one retry.
pub const MAX_RETRY_AFTER_MS: u64 = 60_000;
/// Overall budget for one model call, retries included.
pub const DEFAULT_DEADLINE_SECS: u64 = 600;

/// How a model client retries.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Overall budget for one call, all attempts and waits included.
    pub deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            base_delay: Duration::from_millis(DEFAULT_BASE_DELAY_MS),
            max_delay: Duration::from_millis(DEFAULT_MAX_DELAY_MS),
            deadline: Duration::from_secs(DEFAULT_DEADLINE_SECS),
        }
    }
}

impl RetryPolicy {
    /// Backoff before retry number `retry` (1-based): exponential with full
    /// jitter in [delay/2, delay], capped at `max_delay`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << retry.saturating_sub(1).min(16));
        let capped = exp.min(self.max_delay);
        let ms = crate::convert::millis_u64(capped);
        let jittered = ms / 2 + fastrand::u64(0..=ms / 2);
        Duration::from_millis(jittered)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the attempts or
    /// the deadline run out. Each retry is reported through `progress`.
    pub async fn run<T, F, Fut>(
        &self,
        progress: ProgressSink<'_>,
        mut attempt: F,
    ) -> Result<T, ModelError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ModelError>>,
    {
        let start = Instant::now();
        let mut n = 0u32;
        loop {
            n += 1;
            let remaining = self.deadline.saturating_sub(start.elapsed());
            let result = match tokio::time::timeout(remaining, attempt()).await {
                Ok(r) => r,
                // The whole call's budget: the API may have answered
                // every attempt, slowly; this is not "cannot reach".
                Err(_) => Err(ModelError::TimedOut {
                    what: "the model call, retries included,".into(),
                    secs: self.deadline.as_secs(),
                    flag: None,
                }),
            };
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if !err.is_retryable() {
                return Err(err);
            }
            let wait = err
                .retry_after_ms()
                .map(|ms| Duration::from_millis(ms.min(MAX_RETRY_AFTER_MS)))
                .unwrap_or_else(|| self.backoff(n));
            let out_of_time = start.elapsed() + wait >= self.deadline;
            if n >= self.max_attempts || out_of_time {
                return Err(ModelError::RetriesExhausted {
                    attempts: n,
                    last: Box::new(err),
                });
            }
            progress(ModelProgress::Retry {
                attempt: n,
                status: status_of(&err),
                wait_ms: crate::convert::millis_u64(wait),
                reason: err.to_string(),
            });
            tokio::time::sleep(wait).await;
        }
    }
}

fn status_of(err: &ModelError) -> Option<u16> {
    match err {
        ModelError::Api { status, .. } => Some(*status),
        _ => None,
    }
}

/// Whether an HTTP status is worth retrying, as the official SDKs decide:
/// an explicit `x-should-retry` header wins; otherwise 408, 409, 429 and
/// every 5xx (529 included).
pub fn status_is_retryable(status: u16, headers: &HeaderMap) -> bool {
    if let Some(v) = headers.get("x-should-retry").and_then(|v| v.to_str().ok()) {
        match v.trim() {
            "true" => return true,
            "false" => return false,
            _ => {}
        }
    }
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// The wait the server asked for: `retry-after-ms`, then `retry-after` in
/// seconds or as an HTTP date; then the same headers as LiteLLM's proxy
/// passes on the upstream's, renamed `llm_provider-retry-after(-ms)`.
pub fn retry_after_ms(headers: &HeaderMap) -> Option<u64> {
    ["", "llm_provider-"]
        .iter()
        .find_map(|prefix| retry_after_named(headers, prefix))
}

/// [`retry_after_ms`] for the headers named `{prefix}retry-after(-ms)`.
fn retry_after_named(headers: &HeaderMap, prefix: &str) -> Option<u64> {
    let get = |name: &str| {
        headers
            .get(format!("{prefix}{name}").as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(u64_from_f64(ms));
    }
    let value = get("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(u64_from_f64(secs * 1000.0));
        }
        return None;
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let ms = (when.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_milliseconds();
    // A date in the past means "now".
    Some(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn statuses_follow_the_sdk_rules() {
        let none = HeaderMap::new();
        for s in [408, 409, 429, 500, 502, 503, 529] {
            assert!(status_is_retryable(s, &none), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert!(!status_is_retryable(s, &none), "{s}");
        }
        assert!(!status_is_retryable(
            429,
            &headers(&[("x-should-retry", "false")])
        ));
        assert!(status_is_retryable(
            400,
            &headers(&[("x-should-retry", "true")])
        ));
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after-ms", "250")])),
            Some(250)
        );
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", "2")])),
            Some(2000)
        );
        assert_eq!(retry_after_ms(&headers(&[("retry-after", "soon")])), None);
        // LiteLLM's proxy renames the upstream's headers.
        assert_eq!(
            retry_after_ms(&headers(&[("llm_provider-retry-after", "1")])),
            Some(1000)
        );
        assert_eq!(
            retry_after_ms(&headers(&[("llm_provider-retry-after-ms", "40")])),
            Some(40)
        );
        // The proxy's own header wins over the upstream's.
        assert_eq!(
            retry_after_ms(&headers(&[
                ("retry-after", "3"),
                ("llm_provider-retry-after", "1")
            ])),
            Some(3000)
        );
        assert_eq!(
            retry_after_ms(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            Some(0)
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        for retry in 1..10 {
            let d = p.backoff(retry);
            assert!(d <= p.max_delay);
            assert!(d >= p.base_delay.min(p.max_delay) / 2);
        }
    }

    #[tokio::test]
    async fn stops_on_a_final_error_and_bounds_attempts() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
            ..RetryPolicy::default()
        };
        let calls = AtomicU32::new(0);
        let sink = |_: ModelProgress| {};
        let r: Result<(), _> = p
            .run(&sink, || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(ModelError::Api {
                    status: 529,
                    kind: "overloaded_error".into(),
                    message: "Overloaded".into(),
                    retryable: true,
                    retry_after_ms: None,
                })
            })
            .await;
        assert!(matches!(
            r,
            Err(ModelError::RetriesExhausted { attempts: 5, .. })
        ));
        assert_eq!(calls.load(Ordering::SeqCst), 5);

        calls.store(0, Ordering::SeqCst);
        let r: Result<(), _> = p
            .run(&sink, || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(ModelError::Unauthorized {
                    status: 401,
                    var: "ANTHROPIC_API_KEY",
                })
            })
            .await;
        assert!(matches!(r, Err(ModelError::Unauthorized { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
