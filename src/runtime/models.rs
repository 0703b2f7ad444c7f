//! The model client of a configuration: one arm per provider (see
//! `model::provider` for what each takes from the environment).

use crate::config::Config;
use crate::model::anthropic::AnthropicModel;
use crate::model::http::ApiConfig;
use crate::model::openai::OpenAiModel;
use crate::model::provider::Provider;
use crate::model::scripted::ScriptedModel;
use crate::model::{Model, ModelError};

/// Builds the configured model client.
pub fn build_model(config: &Config) -> Result<Box<dyn Model>, ModelError> {
    let api = || {
        let mut api = ApiConfig::new(
            config.model.clone(),
            config.api_key.clone(),
            &config.base_url,
        );
        api.timeouts.idle_read = config.model_timeout;
        api.tool_choice = config.tool_choice.clone();
        api.stream = config.stream;
        api
    };
    Ok(match config.provider {
        Provider::Anthropic => Box::new(AnthropicModel::new(api())?),
        Provider::Openai => Box::new(OpenAiModel::new(api())?),
        Provider::Scripted => {
            let path = config
                .script
                .as_deref()
                .ok_or_else(|| ModelError::Script("no --script given".into()))?;
            Box::new(ScriptedModel::from_file(path)?)
        }
    })
}
