//! The header a run records in `run_started` (and each `continuation`):
//! the effective configuration with its secrets left out, typed
//! ([`RecordedSettings`]), and what the run observed about itself (its
//! workspace, the sandbox's loosenings and what the engine enforced). One
//! serde type, written when a run starts (by an eval attempt inside
//! [`StartedConfig::Eval`]) and read back by `runner continue` and
//! `runner view`; it reads the headers of earlier runners too (a missing
//! field is `None`), and refuses one with a value no runner writes,
//! naming its key. It lives below the events that carry it.

mod names;
mod settings;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::Config;
pub use names::Named;
pub use settings::RecordedSettings;

/// A run's header as recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    /// The configuration's settings, each one compared or taken back by
    /// `runner continue` under its own rule (boxed: they are most of a
    /// header, which travels inside every event).
    #[serde(flatten)]
    pub settings: Box<RecordedSettings>,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
pub enum HeaderError {
    /// One recorded value is not what a runner writes there.
    #[error("the recorded configuration's {key} is not one this runner reads: {source}")]
    Setting {
        key: String,
        source: serde_json::Error,
    },
    #[error("the recorded configuration is not a run header: {0}")]
    Shape(serde_json::Error),
}

impl RunHeader {
    /// The header of `config`, before anything was observed.
    pub fn of(config: &Config) -> RunHeader {
        RunHeader {
            settings: Box::new(RecordedSettings::of(config)),
            ..RunHeader::default()
        }
    }

    /// Reads a recorded header (`run_started.config` or
    /// `continuation.config`), of this runner or an earlier one.
    pub fn read(recorded: &Value) -> Result<RunHeader, HeaderError> {
        RunHeader::deserialize(recorded).map_err(|source| match culprit(recorded) {
            Some(key) => HeaderError::Setting { key, source },
            None => HeaderError::Shape(source),
        })
    }

    /// The header as the JSON the trajectory holds.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The key of `recorded` whose value alone is not a header's: serde's
/// error on a JSON value does not say where it was. Every field of a
/// header is optional, so a header of one key reads unless its value is
/// wrong.
fn culprit(recorded: &Value) -> Option<String> {
    let alone = |k: &String, v: &Value| Value::Object(Map::from_iter([(k.clone(), v.clone())]));
    recorded
        .as_object()?
        .iter()
        .find(|(k, v)| RunHeader::deserialize(&alone(k, v)).is_err())
        .map(|(k, _)| k.clone())
}

impl StartedConfig {
    /// Reads a recorded `run_started.config`: an eval attempt's (with its
    /// `eval` part) or a run's header.
    pub fn read(recorded: &Value) -> Result<StartedConfig, HeaderError> {
        if !is_eval(recorded) {
            return RunHeader::read(recorded).map(StartedConfig::Run);
        }
        let attempt = EvalAttempt::deserialize(recorded).map_err(HeaderError::Shape)?;
        let run = match &attempt.run {
            Value::Null => None,
            run => Some(RunHeader::read(run)?),
        };
        Ok(StartedConfig::Eval {
            eval: attempt.eval,
            run,
        })
    }

    /// The config as the JSON the trajectory holds.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// An eval attempt's `run_started.config` before its run's header is read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvalAttempt {
    eval: EvalPart,
    #[serde(default)]
    run: Value,
}

/// Whether `recorded` (a `run_started.config`) is an eval attempt's.
pub fn is_eval(recorded: &Value) -> bool {
    recorded.get("eval").is_some()
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
        let local = Some(crate::backend_kind::BackendKind::Local);
        assert_eq!(h.settings.executor, local);
        assert_eq!(h.settings.model, None, "not recorded");
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
        assert!(matches!(
            RunHeader::read(&json!("run")),
            Err(HeaderError::Shape(_))
        ));
    }

    /// A run directory is data anyone may have edited: a value no runner
    /// writes is an error naming its key, whatever else is recorded.
    #[test]
    fn an_edited_value_is_an_error_naming_its_key() {
        for (key, value, says) in [
            (
                "executor",
                json!("bogus"),
                "unknown value `bogus`, expected docker, local",
            ),
            ("network", json!(5), "invalid type: integer `5`"),
            ("max_steps", json!("many"), "invalid type: string \"many\""),
            ("max_steps", json!(1u64 << 40), "invalid value"),
            ("tool_choice", json!("a b"), "'a b' is not a tool name"),
            ("workspace", json!(["/"]), "invalid type: sequence"),
            (
                "sandbox_security",
                json!({"runtime": 1}),
                "invalid type: integer",
            ),
        ] {
            let mut v = json!({"provider": "scripted", "executor": "docker", "model": "m"});
            v[key] = value;
            let e = RunHeader::read(&v).expect_err(key);
            assert!(
                matches!(&e, HeaderError::Setting { key: k, .. } if k == key),
                "{e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("the recorded configuration's {key} is not one")),
                "{text}"
            );
            assert!(text.contains(says), "{text}");
        }
    }

    #[test]
    fn an_eval_attempts_config_reads_back_as_one() {
        let h = RunHeader::of(&crate::config::ConfigBuilder::default().build().expect("ok"));
        let part = EvalPart {
            task: "t".into(),
            attempt: 1,
            agent: "model".into(),
            network: "none".into(),
            grading: "shared".into(),
        };
        for run in [Some(h), None] {
            let started = StartedConfig::Eval {
                eval: part.clone(),
                run,
            };
            let v = started.to_value();
            assert!(is_eval(&v));
            assert_eq!(StartedConfig::read(&v).expect("reads"), started);
        }
        let bad = json!({"eval": part, "run": {"executor": "bogus"}});
        assert!(matches!(
            StartedConfig::read(&bad),
            Err(HeaderError::Setting { key, .. }) if key == "executor"
        ));
        let run = json!({"provider": "openai"});
        assert!(!is_eval(&run));
        assert!(matches!(
            StartedConfig::read(&run),
            Ok(StartedConfig::Run(RunHeader { .. }))
        ));
    }
}
