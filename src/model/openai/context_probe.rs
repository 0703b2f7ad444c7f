//! `--context-window auto`: asks an OpenAI-compatible server the context
//! size it serves, where it says one: llama.cpp's server in `GET /props`
//! (`default_generation_settings.n_ctx`, or `n_ctx`), vLLM in
//! `GET /v1/models` (`max_model_len` of the served model). OpenAI's own
//! API, llama-cpp-python's and Ollama's `/v1` say none.

use std::time::Duration;

use serde_json::Value;

use crate::model::ContextWindow;

/// How long each probe may take: a server that is slow to say it has no
/// such route must not delay the run.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks `base` (the configured base URL, `/v1` included) for `model`'s
/// context window.
pub(crate) async fn probe(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    model: &str,
) -> Option<ContextWindow> {
    let root = base.strip_suffix("/v1").unwrap_or(base);
    if let Some(v) = get_json(client, &format!("{root}/props"), key).await
        && let Some(tokens) = n_ctx(&v)
    {
        return Some(ContextWindow {
            tokens,
            source: format!("{root}/props n_ctx"),
        });
    }
    let models = format!("{base}/models");
    let v = get_json(client, &models, key).await?;
    Some(ContextWindow {
        tokens: max_model_len(&v, model)?,
        source: format!("{models} max_model_len"),
    })
}

async fn get_json(client: &reqwest::Client, url: &str, key: Option<&str>) -> Option<Value> {
    let mut req = client.get(url);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let resp = tokio::time::timeout(PROBE_TIMEOUT, req.send())
        .await
        .ok()?
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body = tokio::time::timeout(PROBE_TIMEOUT, resp.bytes())
        .await
        .ok()?
        .ok()?;
    serde_json::from_slice(&body).ok()
}

/// llama.cpp's `/props`: the slot settings carry the serving `n_ctx`.
fn n_ctx(v: &Value) -> Option<u64> {
    v["default_generation_settings"]["n_ctx"]
        .as_u64()
        .or_else(|| v["n_ctx"].as_u64())
        .filter(|n| *n > 0)
}

/// vLLM's `/v1/models`: the entry of `model`, or the only one.
fn max_model_len(v: &Value, model: &str) -> Option<u64> {
    let data = v["data"].as_array()?;
    let entry = data
        .iter()
        .find(|m| m["id"] == model)
        .or_else(|| (data.len() == 1).then(|| &data[0]))?;
    entry["max_model_len"].as_u64().filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_llama_cpp_props_and_vllm_models() {
        assert_eq!(
            n_ctx(&json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1})),
            Some(4096)
        );
        assert_eq!(n_ctx(&json!({"n_ctx": 8192})), Some(8192));
        assert_eq!(n_ctx(&json!({"detail": "Not Found"})), None);
        let vllm = json!({"object": "list", "data": [
            {"id": "a", "max_model_len": 2048},
            {"id": "qwen", "object": "model", "max_model_len": 32768}]});
        assert_eq!(max_model_len(&vllm, "qwen"), Some(32768));
        assert_eq!(max_model_len(&vllm, "other"), None);
        let one = json!({"data": [{"id": "x", "max_model_len": 1024}]});
        assert_eq!(max_model_len(&one, "other"), Some(1024));
        let llama_cpp_python = json!({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "me", "permissions": []}]});
        assert_eq!(max_model_len(&llama_cpp_python, "m"), None);
    }
}
