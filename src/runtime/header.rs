//! The header a run records in `run_started` (and each `continuation`):
//! the effective configuration with its secrets left out, and what the
//! run observed about itself (its workspace, the sandbox's loosenings and
//! what the engine enforced). One serde type, written by [`super::Run`]
//! and by an eval attempt (inside [`StartedConfig::Eval`]) and read back
//! by `runner continue`; it reads the headers of earlier runners too (a
//! missing field is `None`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::Config;

/// A run's header as recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    /// The configuration's settings ([`Config::public_json`]), each one
    /// compared or taken back by `runner continue` under its own rule.
    #[serde(flatten)]
    pub settings: Map<String, Value>,
    /// The directory the commands ran in (an eval attempt's is its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// Whether runner made that directory (and removes it on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch_workspace: Option<bool>,
    /// Every loosening an isolated sandbox had to make (none recorded on
    /// the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loosenings: Option<Vec<String>>,
    /// What the engine enforced on the started sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_security: Option<Enforced>,
}

/// What the engine enforced on a started sandbox, as its executor
/// reports it: the facts runner reads back by name, and the rest as
/// they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Enforced {
    /// The container's runtime (`runc`, `runsc`...).
    #[serde(default)]
    pub runtime: Option<String>,
    /// The seccomp filter in force (`runner`, `default`, `file <path>`...).
    #[serde(default)]
    pub seccomp: Option<String>,
    /// The digest of the profile the engine holds, when it holds one.
    #[serde(default)]
    pub seccomp_profile_sha256: Option<String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Enforced {
    /// What an executor's `sandbox_security` reports; `None` when it
    /// reports nothing, or nothing of this shape.
    pub fn of(reported: Option<Value>) -> Option<Enforced> {
        reported.and_then(|v| Enforced::deserialize(v).ok())
    }
}

/// What an eval attempt records about itself beside its run's header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalPart {
    pub task: String,
    pub attempt: u32,
    /// `model`, `oracle` or `nop`.
    pub agent: String,
    /// The agent's network, as the attempt's report says it.
    pub network: String,
    /// The grading mode.
    pub grading: String,
}

/// The `config` of a `run_started` event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StartedConfig {
    /// `runner TASK` and the REPL: the header itself.
    Run(RunHeader),
    /// An eval attempt: its part, and its run's header (`None` when the
    /// attempt failed before it had a configuration).
    Eval {
        eval: EvalPart,
        run: Option<RunHeader>,
    },
}

/// A recorded header that is not one.
#[derive(Debug, thiserror::Error)]
#[error("the recorded configuration is not a run header: {0}")]
pub struct HeaderError(#[from] serde_json::Error);

impl RunHeader {
    /// The header of `config`, before anything was observed.
    pub fn of(config: &Config) -> RunHeader {
        let settings = match config.public_json() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        RunHeader {
            settings,
            ..RunHeader::default()
        }
    }

    /// Reads a recorded header (`run_started.config` or
    /// `continuation.config`), of this runner or an earlier one.
    pub fn read(recorded: &Value) -> Result<RunHeader, HeaderError> {
        Ok(RunHeader::deserialize(recorded)?)
    }

    /// The header as the JSON the trajectory holds.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_header_round_trips_and_keeps_its_settings() {
        let mut h = RunHeader::of(&crate::config::ConfigBuilder::default().build().expect("ok"));
        h.workspace = Some(PathBuf::from("/w"));
        h.scratch_workspace = Some(true);
        h.loosenings = Some(vec!["x".into()]);
        h.sandbox_security = Enforced::of(Some(json!({"runtime": "runsc", "kernel": "gvisor"})));
        let v = h.to_value();
        assert_eq!(v["workspace"], "/w");
        assert_eq!(v["executor"], "docker");
        assert_eq!(v["sandbox_security"]["kernel"], "gvisor");
        let enforced = h.sandbox_security.as_ref().expect("read");
        assert_eq!(enforced.runtime.as_deref(), Some("runsc"));
        assert_eq!(RunHeader::read(&v).expect("reads"), h);
    }

    #[test]
    fn the_header_of_an_older_runner_reads_back() {
        // Before the workspace was recorded, and with a null scratch flag.
        let old = json!({"provider": "scripted", "executor": "local", "scratch_workspace": null});
        let h = RunHeader::read(&old).expect("reads");
        assert_eq!((h.workspace, h.scratch_workspace), (None, None));
        assert_eq!(h.settings["executor"], "local");
        assert!(h.loosenings.is_none() && h.sandbox_security.is_none());
        // The written shape of an older runner: flat, the observed keys beside the settings.
        let v = json!({"provider": "scripted", "workspace": "/w", "scratch_workspace": false,
            "loosenings": [], "sandbox_security": {"runtime": "runc", "seccomp": "runner",
            "seccomp_profile_sha256": null, "userns": false}});
        let h = RunHeader::read(&v).expect("reads");
        assert_eq!(h.workspace, Some(PathBuf::from("/w")));
        assert_eq!(h.scratch_workspace, Some(false));
        assert_eq!(h.to_value(), v);
    }

    #[test]
    fn a_run_and_an_eval_attempt_record_the_same_header() {
        let h = RunHeader::of(&crate::config::ConfigBuilder::default().build().expect("ok"));
        let run = serde_json::to_value(StartedConfig::Run(h.clone())).expect("json");
        let eval = StartedConfig::Eval {
            eval: EvalPart {
                task: "t".into(),
                attempt: 1,
                agent: "model".into(),
                network: "none".into(),
                grading: "shared".into(),
            },
            run: Some(h),
        };
        let eval = serde_json::to_value(eval).expect("json");
        assert_eq!(eval["run"], run);
        assert_eq!(eval["eval"]["attempt"], 1);
        let early = StartedConfig::Eval {
            eval: EvalPart {
                task: "t".into(),
                attempt: 2,
                agent: "nop".into(),
                network: "none".into(),
                grading: "shared".into(),
            },
            run: None,
        };
        assert!(serde_json::to_value(early).expect("json")["run"].is_null());
    }

    #[test]
    fn a_header_of_the_wrong_shape_is_refused() {
        assert!(RunHeader::read(&json!({"workspace": 3})).is_err());
        assert!(RunHeader::read(&json!("run")).is_err());
    }
}
