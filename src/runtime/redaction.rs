//! The one redactor of a run (or of a whole suite: its `--env` pairs are
//! the same for every attempt), built once from the effective config.

use crate::config::Config;
use crate::redact::{self, RedactError, Redactor};
use crate::render::Human;

/// The runner's API key and credential-looking environment, and the
/// credential-looking `--env` pairs (see `redact::collect`). Names each
/// `--env` credential too short to redact, and hands the redactor to the
/// human output.
pub fn run_redactor(config: &Config, human: &Human) -> Result<Redactor, RedactError> {
    // vars_os: std::env::vars panics on a variable that is not UTF-8.
    let host_env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let secrets = redact::collect(host_env, config.api_key.as_deref(), &config.command_env)?;
    for short in &secrets.too_short {
        human.say(&format!(
            "warning: --env {}: its value is {} character{}, too short to redact reliably; \
             it will appear unredacted in trajectories, outputs and on the terminal",
            short.name,
            short.chars,
            if short.chars == 1 { "" } else { "s" }
        ));
    }
    if !secrets.too_short.is_empty() {
        human.say(&format!(
            "hint: credentials of {} or more characters are redacted; use a longer value, \
             or a name that does not look like a credential if it is not one",
            redact::MIN_SECRET_CHARS
        ));
    }
    human.set_redactor(secrets.redactor.clone());
    Ok(secrets.redactor)
}
