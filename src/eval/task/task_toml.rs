//! `task.toml` as written, deserialized section by section (`[agent]`,
//! `[verifier]`, `[environment]`, `[solution]`); [`super::resolve`] turns it
//! into a [`super::Task`].

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};

/// `[agent]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AgentSection {
    pub timeout_sec: Option<f64>,
    /// A name or a uid (a TOML integer becomes its decimal string).
    #[serde(default, deserialize_with = "user_or_uid")]
    pub user: Option<String>,
    pub network_mode: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
}

/// `[verifier]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct VerifierSection {
    pub timeout_sec: Option<f64>,
    /// As written (templates unresolved); the resolved values are
    /// [`Task::verifier_env`].
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A name or a uid (a TOML integer becomes its decimal string).
    #[serde(default, deserialize_with = "user_or_uid")]
    pub user: Option<String>,
    pub network_mode: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub environment_mode: Option<String>,
    pub environment: Option<EnvironmentSection>,
    /// `[[verifier.collect]]`: refused.
    #[serde(default)]
    pub collect: Vec<toml::Value>,
}

/// `[environment]` (and `[verifier.environment]`, the same schema).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EnvironmentSection {
    pub docker_image: Option<String>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    /// The older form: "2G", "512M".
    pub memory: Option<String>,
    pub storage_mb: Option<u64>,
    /// The older form: "10G".
    pub storage: Option<String>,
    /// The older form of `network_mode`.
    pub allow_internet: Option<bool>,
    pub network_mode: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub build_timeout_sec: Option<f64>,
    pub os: Option<String>,
    pub gpus: Option<i64>,
    pub gpu_types: Option<Vec<String>>,
    pub tpu: Option<toml::Value>,
    #[serde(default)]
    pub mcp_servers: Vec<toml::Value>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub skills_dir: Option<String>,
    pub healthcheck: Option<HealthcheckSection>,
    pub workdir: Option<String>,
}

/// `[environment.healthcheck]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct HealthcheckSection {
    pub command: String,
    pub interval_sec: Option<f64>,
    pub timeout_sec: Option<f64>,
    pub start_period_sec: Option<f64>,
    pub start_interval_sec: Option<f64>,
    pub retries: Option<i64>,
}

/// `[solution]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SolutionSection {
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// `task.toml` as written; keys outside Harbor's schema are ignored here
/// and listed in [`Task::warnings`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TaskToml {
    pub schema_version: Option<String>,
    /// The older name of `schema_version`.
    pub version: Option<String>,
    pub source: Option<String>,
    /// Package information: free-form here.
    #[serde(default)]
    pub task: toml::Table,
    #[serde(default)]
    pub agent: AgentSection,
    #[serde(default)]
    pub verifier: VerifierSection,
    #[serde(default)]
    pub environment: EnvironmentSection,
    #[serde(default)]
    pub solution: SolutionSection,
    #[serde(default)]
    pub metadata: toml::Table,
    pub multi_step_reward_strategy: Option<String>,
    /// `[[steps]]`: refused.
    pub steps: Option<Vec<toml::Value>>,
    /// Strings or tables; validated into [`Task::artifacts`].
    #[serde(default)]
    pub artifacts: Vec<toml::Value>,
}

fn user_or_uid<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a user name or a uid")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
            Ok(Some(s.to_string()))
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
            Ok(Some(n.to_string()))
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
            if n < 0 {
                return Err(E::custom(format!("a uid is >= 0, got {n}")));
            }
            Ok(Some(n.to_string()))
        }
    }
    d.deserialize_any(V)
}
