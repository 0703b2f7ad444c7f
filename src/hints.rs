//! The front end's words for the typed hints of lower layers: only here
//! are flags and environment variables named, so the model layer says
//! what is wrong and the command line says what to type.

use crate::model::Hint;
use crate::terminal::{one_line, visible};

/// A failure as the user sees it: one line saying what was wrong and,
/// when something can be done, a hint. `main` prints it (the one place
/// that prints `error:` and `hint:`) and exits 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(message: impl Into<String>, hint: Option<String>) -> Failure {
        Failure {
            message: message.into(),
            hint,
        }
    }

    /// Prints it on stderr, made visible (an error can quote the sandbox,
    /// the engine or a file) and without the credentials of runner's
    /// environment (an error can quote a flag's value, and it may come
    /// before any run's redactor exists).
    pub fn print(&self) {
        // vars_os: std::env::vars panics on a variable that is not UTF-8.
        let host_env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        let redactor = crate::redact::collect(host_env, None, &[])
            .map(|c| c.redactor)
            .unwrap_or_default();
        eprintln!(
            "error: {}",
            visible(&one_line(&redactor.redact(&self.message)))
        );
        if let Some(h) = &self.hint {
            eprintln!("hint: {}", visible(&redactor.redact(h)));
        }
    }
}

/// One `hint:` line (without the prefix) for a model error's hint.
pub fn model(h: &Hint) -> String {
    match h {
        Hint::SetApiKey { var } => {
            format!("export {var}=..., or try without a key: --provider scripted --script FILE")
        }
        Hint::CheckApiKey { var } => format!("check that {var} holds a valid key for this API"),
        Hint::CheckModelName { .. } => {
            "check --model (or RUNNER_MODEL) against the provider's model list".into()
        }
        Hint::CheckBaseUrl { .. } => {
            "check --base-url (or ANTHROPIC_BASE_URL / OPENAI_BASE_URL) and the network".into()
        }
        Hint::CheckRoute { url } => route_hint(url),
        Hint::NoStream => "the server may not stream this request (llama.cpp's server cannot stream with --tool-choice auto); pass --no-stream, or another --tool-choice".into(),
        Hint::TryLater => "the API kept failing; check the server's log, or try again later".into(),
        Hint::RaiseTimeout {
            secs,
            flag: Some(flag),
        } => format!(
            "the API accepted the connection but was slow; raise {flag} (now {secs}s) or try again later"
        ),
        Hint::RaiseTimeout { flag: None, .. } => {
            "the API accepted the connection but was slow; try again later".into()
        }
        Hint::ScriptFormat => "each TURN is an object such as {\"text\": \"...\", \"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": \"ls\"}}]}; the fields are in src/model/scripted.rs, an example in examples/demo/script.json".into(),
    }
}

/// What to check when the server has no route at `url`: a path without
/// `/v1` is the usual slip; otherwise a proxy's upstream lacks it.
fn route_hint(url: &str) -> String {
    let path = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("");
    if path.split('/').any(|segment| segment == "v1") {
        return "check --base-url, and that the server (or the one behind a proxy such as LiteLLM) serves this API".into();
    }
    let endpoint = path.trim_start_matches('/');
    format!(
        "the server has no /v1/{endpoint} here; is --base-url missing /v1? (e.g. http://127.0.0.1:8080/v1)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelError;

    fn hint_of(e: ModelError) -> Option<String> {
        e.hint().map(|h| model(&h))
    }

    #[test]
    fn each_model_error_gets_the_words_it_always_had() {
        assert_eq!(
            hint_of(ModelError::MissingKey {
                var: "ANTHROPIC_API_KEY"
            })
            .as_deref(),
            Some(
                "export ANTHROPIC_API_KEY=..., or try without a key: --provider scripted --script FILE"
            )
        );
        assert_eq!(
            hint_of(ModelError::Unauthorized {
                status: 401,
                var: "OPENAI_API_KEY"
            })
            .as_deref(),
            Some("check that OPENAI_API_KEY holds a valid key for this API")
        );
        assert_eq!(
            hint_of(ModelError::ModelNotFound {
                model: "claude-nope".into(),
                message: "model: claude-nope".into()
            })
            .as_deref(),
            Some("check --model (or RUNNER_MODEL) against the provider's model list")
        );
        assert_eq!(
            hint_of(ModelError::Unreachable {
                url: "http://127.0.0.1:9/v1/messages".into(),
                detail: "connection refused".into()
            })
            .as_deref(),
            Some("check --base-url (or ANTHROPIC_BASE_URL / OPENAI_BASE_URL) and the network")
        );
        assert_eq!(hint_of(ModelError::Cancelled), None);
        assert_eq!(hint_of(ModelError::Protocol("x".into())), None);
    }

    #[test]
    fn exhausted_retries_take_the_last_errors_hint_or_say_try_later() {
        let unreachable = ModelError::Unreachable {
            url: "http://127.0.0.1:9".into(),
            detail: "refused".into(),
        };
        let e = ModelError::RetriesExhausted {
            attempts: 5,
            last: Box::new(unreachable),
        };
        assert!(
            matches!(e.hint(), Some(Hint::CheckBaseUrl { ref url }) if url == "http://127.0.0.1:9")
        );
        let overloaded = ModelError::Api {
            status: 529,
            kind: "overloaded_error".into(),
            message: "Overloaded".into(),
            retryable: true,
            retry_after_ms: None,
        };
        let e = ModelError::RetriesExhausted {
            attempts: 5,
            last: Box::new(overloaded),
        };
        assert_eq!(e.hint(), Some(Hint::TryLater));
        assert_eq!(
            hint_of(e).as_deref(),
            Some("the API kept failing; check the server's log, or try again later")
        );
    }
}
