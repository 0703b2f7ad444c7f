//! The model providers runner can talk to, and what each needs: one row of
//! [`Provider::info`] and one arm of `runtime::models::build` per provider.

use std::fmt;
use std::str::FromStr;

use super::anthropic::DEFAULT_ANTHROPIC_BASE_URL;
use super::openai::DEFAULT_OPENAI_BASE_URL;

/// Which model API to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    /// The Anthropic Messages API.
    #[default]
    Anthropic,
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp, Ollama).
    Openai,
    /// Replays turns from a script file, no network.
    Scripted,
}

/// What a provider takes from the environment, and its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderInfo {
    /// Its name on the command line and in the trajectory.
    pub name: &'static str,
    /// The variable holding the API key; `None`: it needs none.
    pub key_var: Option<&'static str>,
    /// The variable that may override the base URL.
    pub url_var: Option<&'static str>,
    pub default_base_url: &'static str,
    pub default_model: &'static str,
    /// What `--help` says of it.
    pub about: &'static str,
}

/// Default Anthropic model.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
/// Default OpenAI model.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o";

impl Provider {
    /// Every provider, in the order `--help` lists them.
    pub const ALL: [Provider; 3] = [Provider::Anthropic, Provider::Openai, Provider::Scripted];

    pub fn info(self) -> ProviderInfo {
        match self {
            Provider::Anthropic => ProviderInfo {
                name: "anthropic",
                key_var: Some("ANTHROPIC_API_KEY"),
                url_var: Some("ANTHROPIC_BASE_URL"),
                default_base_url: DEFAULT_ANTHROPIC_BASE_URL,
                default_model: DEFAULT_ANTHROPIC_MODEL,
                about: "The Anthropic Messages API",
            },
            Provider::Openai => ProviderInfo {
                name: "openai",
                key_var: Some("OPENAI_API_KEY"),
                url_var: Some("OPENAI_BASE_URL"),
                default_base_url: DEFAULT_OPENAI_BASE_URL,
                default_model: DEFAULT_OPENAI_MODEL,
                about: "OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp, Ollama)",
            },
            Provider::Scripted => ProviderInfo {
                name: "scripted",
                key_var: None,
                url_var: None,
                default_base_url: "",
                default_model: "scripted",
                about: "Replay turns from --script, no network",
            },
        }
    }

    pub fn as_str(self) -> &'static str {
        self.info().name
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown provider '{s}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Provider::ALL {
            assert_eq!(p.as_str().parse::<Provider>(), Ok(p));
        }
        assert!("nope".parse::<Provider>().is_err());
    }
}
