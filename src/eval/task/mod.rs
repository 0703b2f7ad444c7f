//! Loading tasks: discovery under the given paths, Harbor's task layout
//! (instruction.md with canary lines dropped, task.toml in Harbor's current
//! schema, tests/test.sh) and Terminal-Bench 1 task dirs (mapped to Harbor's
//! layout as Harbor's own migration maps them, see [`tb1`]).
//!
//! Every key of Harbor's schema is either honoured (it reaches a field of
//! [`Task`]) or refused here, naming the file and the key; keys Harbor does
//! not know are listed in [`Task::warnings`].

pub mod envsubst;
#[cfg(test)]
mod keys_tests;
mod links;
pub mod schema;
pub mod tb1;
mod toml_error;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::eval::mode::GradingMode;

/// Harbor's default agent timeout, seconds.
pub const DEFAULT_AGENT_TIMEOUT_SECS: f64 = 600.0;
/// Harbor's default verifier timeout, seconds.
pub const DEFAULT_VERIFIER_TIMEOUT_SECS: f64 = 600.0;
/// Harbor's default image build timeout, seconds.
pub const DEFAULT_BUILD_TIMEOUT_SECS: f64 = 600.0;
/// The longest timeout a task (or `--agent-timeout`, `--verifier-timeout`)
/// may set, seconds: a week. Larger values would overflow the deadlines
/// computed from them.
pub const MAX_TASK_TIMEOUT_SECS: f64 = 7.0 * 24.0 * 3600.0;
/// Harbor's default CPUs.
pub const DEFAULT_TASK_CPUS: f64 = 1.0;
/// Harbor's default memory, MiB.
pub const DEFAULT_TASK_MEMORY_MB: u64 = 2048;

/// A task that cannot be loaded; names the file.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// task.toml is not TOML, or not of the schema's types: `message`
    /// names the line, column and key; `line_text` quotes the line.
    #[error("{path}: {message}")]
    Toml {
        path: PathBuf,
        message: String,
        line_text: Option<String>,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// A link in a task directory that leaves it (see [`links`]).
    #[error(
        "{path} is a link to {target}, outside the task directory {dir}; refused (runner never reads a host file through a task)"
    )]
    LinkOut {
        path: PathBuf,
        target: PathBuf,
        dir: PathBuf,
    },
    #[error("{0} is neither a task directory (with instruction.md) nor holds any")]
    NoTasks(PathBuf),
    #[error("two tasks are named '{name}': {a} and {b}")]
    Duplicate {
        name: String,
        a: PathBuf,
        b: PathBuf,
    },
    /// A key of Harbor's schema that runner does not implement.
    #[error("{path}: {key}: {what}")]
    Refused {
        path: PathBuf,
        key: String,
        what: String,
        hint: String,
    },
    /// `${VAR}` without a default, and VAR is not set on the host.
    #[error("{path}: {key} needs ${{{var}}}, which is not set in the host environment")]
    UnsetVar {
        path: PathBuf,
        key: String,
        var: String,
    },
    /// `${VAR}` names a secret of runner's environment (by its name) that
    /// the user did not hand to tasks.
    #[error(
        "{path}: {key} takes ${{{var}}} from runner's environment, and the name says it holds a secret the task's code would see"
    )]
    SecretVar {
        path: PathBuf,
        key: String,
        var: String,
    },
    /// Neither a Harbor task, a Terminal-Bench 1 task nor a directory of them.
    #[error(
        "{path} is not a task: expected instruction.md and tests/test.sh (Harbor) or task.yaml (Terminal-Bench 1), or subdirectories holding them; found {found}"
    )]
    UnknownLayout { path: PathBuf, found: String },
    /// A Terminal-Bench 1 task's YAML that does not parse or has wrong types.
    #[error("{path}: {message}")]
    Yaml { path: PathBuf, message: String },
    /// A file the task needs cannot be written (Terminal-Bench 1 mapping).
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl TaskError {
    /// What to do about it, for the variants that know.
    pub fn hint(&self) -> Option<String> {
        match self {
            TaskError::Refused { hint, .. } => Some(hint.clone()),
            TaskError::LinkOut { path, .. } => Some(format!(
                "put a copy of the file in the task directory instead (cp --remove-destination \"$(readlink -f {p})\" {p}), or point the link at a file inside it",
                p = path.display()
            )),
            TaskError::UnsetVar { var, .. } => Some(format!(
                "export {var} before running runner eval, or give the task a default: ${{{var}:-value}}"
            )),
            TaskError::SecretVar { var, .. } => Some(format!(
                "pass --pass-env {var} to hand it to the task (an LLM judge's key, say), or unset it"
            )),
            TaskError::UnknownLayout { .. } => Some(
                "a Harbor task holds instruction.md, task.toml and tests/test.sh; a Terminal-Bench 1 task holds task.yaml, docker-compose.yaml and run-tests.sh".into(),
            ),
            TaskError::Toml {
                line_text: Some(line),
                ..
            } => Some(format!(
                "{line}; see Harbor's task.toml: [agent], [verifier], [environment], [metadata]"
            )),
            TaskError::Invalid { path, .. } if path.ends_with("task.toml") => {
                Some("see Harbor's task.toml reference; the message names the key".into())
            }
            TaskError::Yaml { .. } => Some(
                "a Terminal-Bench 1 task's task.yaml and docker-compose.yaml must be valid YAML"
                    .into(),
            ),
            _ => None,
        }
    }
}

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

/// Whether `p` is an IP range as Harbor takes them (`10.0.0.0/8`).
fn is_cidr(p: &str) -> bool {
    p.split_once('/').is_some_and(|(ip, len)| {
        ip.parse::<std::net::IpAddr>().is_ok() && len.parse::<u8>().is_ok()
    })
}

/// A network policy of Harbor's that runner can enforce.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TaskNetwork {
    /// `network_mode = "no-network"` (or `allow_internet = false`).
    NoNetwork,
    /// `network_mode = "public"`: Harbor's default.
    #[default]
    Public,
    /// `network_mode = "allowlist"`: only these host patterns (validated,
    /// normalized; none: nothing), through a filtering proxy.
    Allowlist(Vec<String>),
}

impl TaskNetwork {
    /// Harbor's name of the mode.
    pub fn as_str(&self) -> &'static str {
        match self {
            TaskNetwork::NoNetwork => "no-network",
            TaskNetwork::Public => "public",
            TaskNetwork::Allowlist(_) => "allowlist",
        }
    }
}

/// `[environment.healthcheck]` with Harbor's defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Healthcheck {
    pub command: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub start_period: Duration,
    pub start_interval: Duration,
    pub retries: u32,
}

/// One `artifacts` entry, validated as Harbor validates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// A path in the container.
    pub source: String,
    /// Relative to the attempt's artifacts directory; `None`: from `source`.
    pub destination: Option<String>,
    /// `tar --exclude` patterns.
    pub exclude: Vec<String>,
    /// The compose service (`None` or "main": the agent's container).
    pub service: Option<String>,
}

/// One loaded task.
#[derive(Debug, Clone)]
pub struct Task {
    /// The directory's name (the source directory's, for a mapped task).
    pub name: String,
    /// The Harbor-layout directory the task is run from: the task's own, or
    /// the mapped copy of a Terminal-Bench 1 task.
    pub dir: PathBuf,
    /// The directory the task was found in (= `dir` for Harbor tasks).
    pub source_dir: PathBuf,
    pub instruction: String,
    pub config: TaskToml,
    /// Resolved limits (task values or Harbor's defaults).
    pub agent_timeout_secs: f64,
    pub verifier_timeout_secs: f64,
    pub build_timeout_secs: f64,
    pub cpus: f64,
    pub memory_bytes: i64,
    /// The agent phase's effective network is [`TaskNetwork::Public`].
    pub allow_internet: bool,
    /// `[agent] user`.
    pub agent_user: Option<String>,
    /// `[verifier] user`.
    pub verifier_user: Option<String>,
    /// `[environment] workdir`: absolute, no `..`.
    pub workdir: Option<String>,
    /// `[environment] env`, resolved from the host.
    pub env: Vec<(String, String)>,
    /// `[solution] env`, resolved from the host.
    pub solution_env: Vec<(String, String)>,
    /// `[verifier] env`, resolved from the host.
    pub verifier_env: Vec<(String, String)>,
    /// `[verifier] environment_mode` (Separate when only
    /// `[verifier.environment]` is given); `None`: not said.
    pub grading: Option<GradingMode>,
    /// `[verifier.environment] docker_image`.
    pub verifier_image: Option<String>,
    /// `tests/` when it holds a Dockerfile and the task grades in separate
    /// mode without `verifier_image`: Harbor builds the verifier from it.
    pub verifier_build_dir: Option<PathBuf>,
    /// `[environment] storage_mb` (or `storage`), bytes.
    pub storage_bytes: Option<u64>,
    /// `[environment] network_mode` (or `allow_internet`).
    pub network: TaskNetwork,
    /// `[agent] network_mode`: overrides `network` for the agent phase.
    pub agent_network: Option<TaskNetwork>,
    /// `[verifier] network_mode`, else a separate verifier environment's
    /// own policy; `None`: `network`.
    pub verifier_network: Option<TaskNetwork>,
    pub healthcheck: Option<Healthcheck>,
    pub artifacts: Vec<Artifact>,
    /// environment/docker-compose.yaml (or .yml) when present.
    pub compose_file: Option<PathBuf>,
    /// One line per key outside Harbor's schema, and per key that has no
    /// effect; naming the file and the key.
    pub warnings: Vec<String>,
    /// Keeps the mapped copy of a Terminal-Bench 1 task alive.
    materialized: Option<Arc<tempfile::TempDir>>,
}

impl Task {
    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }
    pub fn solution_dir(&self) -> PathBuf {
        self.dir.join("solution")
    }
    pub fn environment_dir(&self) -> PathBuf {
        self.dir.join("environment")
    }
    /// The agent phase's network: `[agent] network_mode`, else the task's.
    pub fn effective_agent_network(&self) -> TaskNetwork {
        self.agent_network
            .clone()
            .unwrap_or_else(|| self.network.clone())
    }
    /// The verifier's network: `verifier_network`, else the task's.
    pub fn effective_verifier_network(&self) -> TaskNetwork {
        self.verifier_network
            .clone()
            .unwrap_or_else(|| self.network.clone())
    }

    /// Loads the Harbor task in `dir`; `${VAR}` templates come from the
    /// host environment.
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        Task::load_with(dir, &envsubst::host_var)
    }

    /// Loads the Harbor task in `dir`, `${VAR}` templates resolved with
    /// `lookup`.
    pub fn load_with(
        dir: &Path,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Task, TaskError> {
        links::refuse_links_out(dir)?;
        let read = |p: PathBuf| {
            std::fs::read_to_string(&p).map_err(|source| TaskError::Read { path: p, source })
        };
        let instruction = strip_canary(&read(dir.join("instruction.md"))?);
        let toml_path = dir.join("task.toml");
        let (config, raw) = if toml_path.exists() {
            let text = read(toml_path.clone())?;
            let config = parse_toml(&text, &toml_path)?;
            let raw: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| toml_error::task_error(&e, &text, &toml_path))?;
            (config, raw)
        } else {
            (TaskToml::default(), toml::Table::new())
        };
        let test_sh = dir.join("tests").join("test.sh");
        if !test_sh.is_file() {
            return Err(TaskError::Invalid {
                path: dir.to_path_buf(),
                message: "tests/test.sh is missing".into(),
            });
        }
        let l = Loader {
            path: &toml_path,
            raw: &raw,
            lookup,
        };
        l.task(dir, instruction, config)
    }
}

/// Resolves one parsed task.toml into a [`Task`]'s fields.
struct Loader<'a> {
    path: &'a Path,
    raw: &'a toml::Table,
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl Loader<'_> {
    fn invalid(&self, key: &str, message: impl fmt::Display) -> TaskError {
        TaskError::Invalid {
            path: self.path.to_path_buf(),
            message: format!("{key}: {message}"),
        }
    }

    fn refused(&self, key: &str, what: impl Into<String>, hint: impl Into<String>) -> TaskError {
        TaskError::Refused {
            path: self.path.to_path_buf(),
            key: key.to_string(),
            what: what.into(),
            hint: hint.into(),
        }
    }

    fn warn(&self, key: &str, what: &str) -> String {
        format!("{}: {key}: {what}", self.path.display())
    }

    fn positive(&self, key: &str, v: f64) -> Result<f64, TaskError> {
        if v > 0.0 && v.is_finite() {
            Ok(v)
        } else {
            Err(self.invalid(key, format!("must be > 0, got {v}")))
        }
    }

    fn timeout(&self, key: &str, v: f64) -> Result<f64, TaskError> {
        let v = self.positive(key, v)?;
        if v > MAX_TASK_TIMEOUT_SECS {
            return Err(self.invalid(
                key,
                format!("must be at most {MAX_TASK_TIMEOUT_SECS} (a week), got {v}"),
            ));
        }
        Ok(v)
    }

    /// A duration of seconds >= 0 and at most a week.
    fn seconds(&self, key: &str, v: f64) -> Result<Duration, TaskError> {
        if !(v.is_finite() && (0.0..=MAX_TASK_TIMEOUT_SECS).contains(&v)) {
            return Err(self.invalid(
                key,
                format!("must be between 0 and {MAX_TASK_TIMEOUT_SECS} (a week), got {v}"),
            ));
        }
        Ok(Duration::from_secs_f64(v))
    }

    fn task(&self, dir: &Path, instruction: String, config: TaskToml) -> Result<Task, TaskError> {
        let mut warnings: Vec<String> = schema::unknown_keys(self.raw)
            .iter()
            .map(|k| self.warn(k, "not a key of Harbor's task.toml schema; ignored"))
            .collect();
        self.refusals(&config, &mut warnings)?;
        let env = &config.environment;
        self.environment_refusals(env, "environment")?;
        let memory_bytes = self.memory_bytes(env)?;
        let storage_bytes = self.storage_bytes(env)?;
        let network = self.baseline_network(env, "environment")?;
        let agent_network = self.network(
            "agent",
            config.agent.network_mode.as_deref(),
            config.agent.allowed_hosts.as_ref(),
        )?;
        let grading = self.grading(&config.verifier)?;
        let (verifier_image, separate_network) = self.verifier_environment(&config)?;
        let verifier_network = self
            .network(
                "verifier",
                config.verifier.network_mode.as_deref(),
                config.verifier.allowed_hosts.as_ref(),
            )?
            .or(separate_network);
        let verifier_build_dir = (grading == Some(GradingMode::Separate)
            && verifier_image.is_none()
            && dir.join("tests").join("Dockerfile").is_file())
        .then(|| dir.join("tests"));
        let compose_file = ["docker-compose.yaml", "docker-compose.yml"]
            .iter()
            .map(|f| dir.join("environment").join(f))
            .find(|p| p.is_file());
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "task".into());
        let agent_timeout_secs = self.timeout(
            "agent.timeout_sec",
            config
                .agent
                .timeout_sec
                .unwrap_or(DEFAULT_AGENT_TIMEOUT_SECS),
        )?;
        let verifier_timeout_secs = self.timeout(
            "verifier.timeout_sec",
            config
                .verifier
                .timeout_sec
                .unwrap_or(DEFAULT_VERIFIER_TIMEOUT_SECS),
        )?;
        let build_timeout_secs = self.timeout(
            "environment.build_timeout_sec",
            env.build_timeout_sec.unwrap_or(DEFAULT_BUILD_TIMEOUT_SECS),
        )?;
        let cpus = self.positive("environment.cpus", env.cpus.unwrap_or(DEFAULT_TASK_CPUS))?;
        Ok(Task {
            name,
            dir: dir.to_path_buf(),
            source_dir: dir.to_path_buf(),
            instruction,
            agent_timeout_secs,
            verifier_timeout_secs,
            build_timeout_secs,
            cpus,
            memory_bytes,
            allow_internet: agent_network.as_ref().unwrap_or(&network) == &TaskNetwork::Public,
            agent_user: self.user("agent.user", config.agent.user.as_deref())?,
            verifier_user: self.user("verifier.user", config.verifier.user.as_deref())?,
            workdir: self.workdir(env.workdir.as_deref())?,
            env: self.env("environment.env", &env.env)?,
            solution_env: self.env("solution.env", &config.solution.env)?,
            verifier_env: self.env("verifier.env", &config.verifier.env)?,
            grading,
            verifier_image,
            verifier_build_dir,
            storage_bytes,
            network,
            agent_network,
            verifier_network,
            healthcheck: self.healthcheck(env.healthcheck.as_ref())?,
            artifacts: config
                .artifacts
                .iter()
                .enumerate()
                .map(|(i, a)| self.artifact(i, a))
                .collect::<Result<_, _>>()?,
            compose_file,
            warnings,
            materialized: None,
            config,
        })
    }

    /// The keys of the whole file that runner refuses, and the ones that
    /// have no effect.
    fn refusals(&self, c: &TaskToml, warnings: &mut Vec<String>) -> Result<(), TaskError> {
        if c.steps.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(self.refused(
                "steps",
                "multi-step tasks ([[steps]]) are not supported yet",
                "grade each step as its own task, or run this task with Harbor",
            ));
        }
        if let Some(s) = &c.multi_step_reward_strategy {
            if !matches!(s.as_str(), "mean" | "final") {
                return Err(self.invalid(
                    "multi_step_reward_strategy",
                    format!("'{s}' is not one of mean, final"),
                ));
            }
            warnings.push(self.warn(
                "multi_step_reward_strategy",
                "has no effect: the task has no [[steps]]",
            ));
        }
        if !c.verifier.collect.is_empty() {
            return Err(self.refused(
                "verifier.collect",
                "collect hooks ([[verifier.collect]]) are not supported yet",
                "write the state test.sh needs to files under /logs/artifacts from the task itself",
            ));
        }
        Ok(())
    }

    /// The keys of an `[environment]` (or `[verifier.environment]`) that
    /// runner cannot give, under `prefix`.
    fn environment_refusals(
        &self,
        env: &EnvironmentSection,
        prefix: &str,
    ) -> Result<(), TaskError> {
        const NO_GPUS: &str = "needs GPUs; runner's engines give none";
        const GPU_HINT: &str =
            "run this task with Harbor on a GPU provider, or leave it out (--filter)";
        match env.gpus {
            Some(n) if n > 0 => {
                return Err(self.refused(&format!("{prefix}.gpus"), NO_GPUS, GPU_HINT));
            }
            Some(n) if n < 0 => {
                return Err(
                    self.invalid(&format!("{prefix}.gpus"), format!("must be >= 0, got {n}"))
                );
            }
            _ => {}
        }
        if env.gpu_types.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(self.refused(&format!("{prefix}.gpu_types"), NO_GPUS, GPU_HINT));
        }
        if env.tpu.is_some() {
            return Err(self.refused(
                &format!("{prefix}.tpu"),
                "needs a TPU; runner's engines give none",
                GPU_HINT,
            ));
        }
        if let Some(os) = &env.os {
            match os.to_ascii_lowercase().as_str() {
                "linux" => {}
                "windows" => {
                    return Err(self.refused(
                        &format!("{prefix}.os"),
                        "Windows containers are not supported",
                        "runner runs Linux containers only; run this task with Harbor on a Windows host",
                    ));
                }
                _ => {
                    return Err(self.invalid(
                        &format!("{prefix}.os"),
                        format!("'{os}' is not one of linux, windows"),
                    ));
                }
            }
        }
        if !env.mcp_servers.is_empty() {
            return Err(self.refused(
                &format!("{prefix}.mcp_servers"),
                "MCP servers are not supported yet",
                "remove [[environment.mcp_servers]] or run this task with Harbor",
            ));
        }
        if env.skills_dir.is_some() {
            return Err(self.refused(
                &format!("{prefix}.skills_dir"),
                "agent skills are not supported yet",
                "remove skills_dir, or put what the agent needs in the instruction",
            ));
        }
        Ok(())
    }

    fn memory_bytes(&self, env: &EnvironmentSection) -> Result<i64, TaskError> {
        let mb = self
            .legacy_size(
                "environment.memory",
                env.memory.as_deref(),
                env.memory_mb,
                "memory_mb",
            )?
            .unwrap_or(DEFAULT_TASK_MEMORY_MB);
        // A value past i64 bytes is refused rather than wrapped into a small limit.
        i64::try_from(mb)
            .ok()
            .and_then(|mb| mb.checked_mul(1 << 20))
            .ok_or_else(|| self.invalid("environment.memory_mb", format!("{mb} is too large")))
    }

    fn storage_bytes(&self, env: &EnvironmentSection) -> Result<Option<u64>, TaskError> {
        let mb = self.legacy_size(
            "environment.storage",
            env.storage.as_deref(),
            env.storage_mb,
            "storage_mb",
        )?;
        mb.map(|mb| {
            mb.checked_mul(1 << 20)
                .filter(|b| i64::try_from(*b).is_ok())
                .ok_or_else(|| self.invalid("environment.storage_mb", format!("{mb} is too large")))
        })
        .transpose()
    }

    /// MiB from `*_mb`, or from the older size string as Harbor maps it; both
    /// given and different is an error, as in Harbor.
    fn legacy_size(
        &self,
        key: &str,
        legacy: Option<&str>,
        mb: Option<u64>,
        mb_key: &str,
    ) -> Result<Option<u64>, TaskError> {
        let Some(s) = legacy else { return Ok(mb) };
        let parsed = harbor_size_mb(s)
            .ok_or_else(|| self.invalid(key, format!("'{s}' is not a size like 1G or 512M")))?;
        if let Some(mb) = mb.filter(|mb| *mb != parsed) {
            return Err(self.invalid(
                key,
                format!("'{s}' ({parsed} MB) conflicts with {mb_key} = {mb}; keep one"),
            ));
        }
        Ok(Some(parsed))
    }

    /// A phase's explicit policy, if any.
    fn network(
        &self,
        section: &str,
        mode: Option<&str>,
        hosts: Option<&Vec<String>>,
    ) -> Result<Option<TaskNetwork>, TaskError> {
        let parsed = match mode {
            None => None,
            Some("no-network") => Some(TaskNetwork::NoNetwork),
            Some("public") => Some(TaskNetwork::Public),
            Some("allowlist") => Some(TaskNetwork::Allowlist(
                self.allowed_hosts(section, hosts.map(Vec::as_slice).unwrap_or_default())?,
            )),
            Some(m) => {
                return Err(self.invalid(
                    &format!("{section}.network_mode"),
                    format!("'{m}' is not one of no-network, public, allowlist"),
                ));
            }
        };
        // As Harbor: the list belongs to the allowlist mode only.
        if hosts.is_some() && !matches!(parsed, Some(TaskNetwork::Allowlist(_))) {
            return Err(self.invalid(
                &format!("{section}.allowed_hosts"),
                "is only valid with network_mode = 'allowlist'",
            ));
        }
        Ok(parsed)
    }

    /// `allowed_hosts`, validated and normalized as Harbor does; IP
    /// addresses and CIDR ranges (which Harbor takes) are refused.
    fn allowed_hosts(&self, section: &str, hosts: &[String]) -> Result<Vec<String>, TaskError> {
        use crate::exec::egress::{HostPatternError, normalize_host_patterns};
        let key = format!("{section}.allowed_hosts");
        normalize_host_patterns(hosts).map_err(|e| match e {
            HostPatternError::Address(_) => self.refused(
                &key,
                format!("{e} (runner's proxy decides by the name asked for)"),
                "list the host names instead of addresses or CIDR ranges",
            ),
            HostPatternError::Path(ref p) if is_cidr(p) => self.refused(
                &key,
                format!("allowed host '{p}' is a CIDR range; runner's proxy admits names only"),
                "list the host names instead of addresses or CIDR ranges",
            ),
            HostPatternError::Port(ref p) if p.parse::<std::net::Ipv6Addr>().is_ok() => self
                .refused(
                    &key,
                    format!(
                        "allowed host '{p}' is an IP address; runner's proxy admits names only"
                    ),
                    "list the host names instead of addresses or CIDR ranges",
                ),
            e => self.invalid(&key, e),
        })
    }

    /// An environment's policy: `network_mode`, else the older
    /// `allow_internet` (as Harbor maps it), else public.
    fn baseline_network(
        &self,
        env: &EnvironmentSection,
        section: &str,
    ) -> Result<TaskNetwork, TaskError> {
        let explicit = self.network(
            section,
            env.network_mode.as_deref(),
            env.allowed_hosts.as_ref(),
        )?;
        let legacy = (env.allowed_hosts.is_none())
            .then_some(env.allow_internet)
            .flatten();
        Ok(explicit
            .or(legacy.map(|a| {
                if a {
                    TaskNetwork::Public
                } else {
                    TaskNetwork::NoNetwork
                }
            }))
            .unwrap_or_default())
    }

    fn grading(&self, v: &VerifierSection) -> Result<Option<GradingMode>, TaskError> {
        match (v.environment_mode.as_deref(), &v.environment) {
            (None, None) => Ok(None),
            (None, Some(_)) | (Some("separate"), _) => Ok(Some(GradingMode::Separate)),
            (Some("shared"), Some(_)) => Err(self.invalid(
                "verifier.environment_mode",
                "'shared' is incompatible with [verifier.environment]; omit the environment or set environment_mode = 'separate'",
            )),
            (Some("shared"), None) => Ok(Some(GradingMode::Shared)),
            (Some(m), _) => Err(self.invalid(
                "verifier.environment_mode",
                format!("'{m}' is not one of shared, separate (runner's snapshot and isolated are chosen with --grading)"),
            )),
        }
    }

    /// `[verifier.environment]`: its image and network policy; its other
    /// keys only as the task's own `[environment]` values.
    fn verifier_environment(
        &self,
        c: &TaskToml,
    ) -> Result<(Option<String>, Option<TaskNetwork>), TaskError> {
        let Some(venv) = &c.verifier.environment else {
            return Ok((None, None));
        };
        const PREFIX: &str = "verifier.environment";
        self.environment_refusals(venv, PREFIX)?;
        let network = self.baseline_network(venv, PREFIX)?;
        let raw = |t: Option<&toml::Value>, k: &str| {
            t.and_then(toml::Value::as_table)
                .and_then(|t| t.get(k))
                .cloned()
        };
        let top = self.raw.get("environment");
        let own = self.raw.get("verifier").and_then(|v| v.get("environment"));
        let handled = [
            "docker_image",
            "network_mode",
            "allowed_hosts",
            "allow_internet",
            "os",
            "gpus",
            "gpu_types",
            "tpu",
            "mcp_servers",
            "skills_dir",
        ];
        for key in schema::ENVIRONMENT.iter().filter(|k| !handled.contains(k)) {
            let mine = raw(own, key);
            if mine.is_some() && mine != raw(top, key) {
                return Err(self.refused(
                    &format!("{PREFIX}.{key}"),
                    "a separate verifier environment with its own value is not supported yet",
                    format!("runner's separate verifier uses the task's [environment]: give environment.{key} the same value, or remove this one"),
                ));
            }
        }
        Ok((venv.docker_image.clone(), Some(network)))
    }

    fn user(&self, key: &str, user: Option<&str>) -> Result<Option<String>, TaskError> {
        match user {
            Some(u) if u.trim().is_empty() || u.contains(['\0', '\n']) => {
                Err(self.invalid(key, format!("{u:?} is not a user name or uid")))
            }
            u => Ok(u.map(str::to_string)),
        }
    }

    fn workdir(&self, w: Option<&str>) -> Result<Option<String>, TaskError> {
        let Some(w) = w else { return Ok(None) };
        if !w.starts_with('/') || w.split('/').any(|p| p == "..") || w.contains('\0') {
            return Err(self.invalid(
                "environment.workdir",
                format!("'{w}' must be an absolute path without '..'"),
            ));
        }
        Ok(Some(w.to_string()))
    }

    fn env(
        &self,
        key: &str,
        table: &BTreeMap<String, String>,
    ) -> Result<Vec<(String, String)>, TaskError> {
        table
            .iter()
            .map(|(name, value)| {
                if name.is_empty() || name.contains(['=', '\0']) {
                    return Err(self.invalid(key, format!("{name:?} is not a variable name")));
                }
                if let Some((var, _)) = envsubst::template(value)
                    && crate::redact::is_credential_name(var)
                    && !envsubst::secret_allowed(var)
                    && (self.lookup)(var).is_some()
                {
                    return Err(TaskError::SecretVar {
                        path: self.path.to_path_buf(),
                        key: format!("{key}.{name}"),
                        var: var.to_string(),
                    });
                }
                let resolved =
                    envsubst::resolve(value, self.lookup).map_err(|var| TaskError::UnsetVar {
                        path: self.path.to_path_buf(),
                        key: format!("{key}.{name}"),
                        var,
                    })?;
                if resolved.contains('\0') {
                    return Err(
                        self.invalid(&format!("{key}.{name}"), "the value holds a NUL byte")
                    );
                }
                Ok((name.clone(), resolved))
            })
            .collect()
    }

    fn healthcheck(
        &self,
        h: Option<&HealthcheckSection>,
    ) -> Result<Option<Healthcheck>, TaskError> {
        let Some(h) = h else { return Ok(None) };
        const P: &str = "environment.healthcheck";
        if h.command.trim().is_empty() {
            return Err(self.invalid(&format!("{P}.command"), "must not be empty"));
        }
        let secs =
            |k: &str, v: Option<f64>, d: f64| self.seconds(&format!("{P}.{k}"), v.unwrap_or(d));
        let retries = h.retries.unwrap_or(3);
        Ok(Some(Healthcheck {
            command: h.command.clone(),
            interval: secs("interval_sec", h.interval_sec, 5.0)?,
            timeout: secs("timeout_sec", h.timeout_sec, 30.0)?,
            start_period: secs("start_period_sec", h.start_period_sec, 0.0)?,
            start_interval: secs("start_interval_sec", h.start_interval_sec, 5.0)?,
            retries: u32::try_from(retries).map_err(|_| {
                self.invalid(
                    &format!("{P}.retries"),
                    format!("must be between 0 and {}, got {retries}", u32::MAX),
                )
            })?,
        }))
    }

    /// One `artifacts` entry, checked as Harbor's `ArtifactConfig` is.
    fn artifact(&self, i: usize, v: &toml::Value) -> Result<Artifact, TaskError> {
        let key = format!("artifacts[{i}]");
        let bad = |k: &str, m: String| self.invalid(&format!("{key}{k}"), m);
        let string = |t: &toml::Table, k: &str| -> Result<Option<String>, TaskError> {
            match t.get(k) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(bad(&format!(".{k}"), "must be a string".into())),
            }
        };
        let mut a = match v {
            toml::Value::String(s) => Artifact {
                source: s.clone(),
                destination: None,
                exclude: Vec::new(),
                service: None,
            },
            toml::Value::Table(t) => {
                let source =
                    string(t, "source")?.ok_or_else(|| bad(".source", "is missing".into()))?;
                let exclude = match t.get("exclude") {
                    None => Vec::new(),
                    Some(toml::Value::Array(list)) => list
                        .iter()
                        .map(|e| e.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| bad(".exclude", "must be a list of strings".into()))?,
                    Some(_) => return Err(bad(".exclude", "must be a list of strings".into())),
                };
                Artifact {
                    source,
                    destination: string(t, "destination")?,
                    exclude,
                    service: string(t, "service")?,
                }
            }
            _ => return Err(bad("", "must be a path or a table with source".into())),
        };
        if a.source.split('/').any(|p| p == "..") {
            return Err(bad(
                ".source",
                format!("must not contain '..', got {:?}", a.source),
            ));
        }
        a.destination = a.destination.filter(|d| !d.is_empty());
        if let Some(d) = &a.destination {
            let parts: Vec<&str> = d
                .split('/')
                .filter(|p| !p.is_empty() && *p != ".")
                .collect();
            let problem = if d.contains('\\') {
                Some("must use '/' as the separator")
            } else if d.starts_with('/') {
                Some("must be a relative path")
            } else if parts.is_empty() {
                Some("must name a file or directory")
            } else if parts.contains(&"..") {
                Some("must not contain '..'")
            } else if d.trim_end_matches('/') == "manifest.json" {
                Some("'manifest.json' is reserved for the collection manifest")
            } else {
                None
            };
            if let Some(p) = problem {
                return Err(bad(".destination", format!("{p}, got {d:?}")));
            }
        }
        if let Some(s) = &a.service {
            let s = s.trim().to_string();
            let ok = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
            if !ok {
                return Err(bad(
                    ".service",
                    format!("{s:?} is not a Docker Compose service name"),
                ));
            }
            let drive = a.source.as_bytes();
            let windows_abs = drive.len() >= 3
                && drive[0].is_ascii_alphabetic()
                && drive[1] == b':'
                && (drive[2] == b'/' || drive[2] == b'\\');
            if s != "main" && !(a.source.starts_with('/') || windows_abs) {
                return Err(bad(
                    ".source",
                    format!(
                        "{:?} collected from service {s:?} must be an absolute path",
                        a.source
                    ),
                ));
            }
            a.service = Some(s);
        }
        Ok(a)
    }
}

/// MiB of a size as Harbor's `_parse_size_to_mb` reads it: `NG`, `NM` or
/// `NK` (case-insensitive, N a decimal number), truncated to whole MiB.
pub fn harbor_size_mb(s: &str) -> Option<u64> {
    let t = s.trim().to_ascii_uppercase();
    let (num, per_unit) = if let Some(n) = t.strip_suffix('G') {
        (n, 1024.0)
    } else if let Some(n) = t.strip_suffix('M') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('K') {
        (n, 1.0 / 1024.0)
    } else {
        return None;
    };
    let n: f64 = num.trim().parse().ok()?;
    let mb = (n * per_unit).trunc();
    (0.0..9.0e18)
        .contains(&mb)
        .then(|| crate::convert::u64_from_f64(mb))
}

/// Parses `task.toml`; a wrong type names the file, line and key.
pub fn parse_toml(text: &str, path: &Path) -> Result<TaskToml, TaskError> {
    toml::from_str(text).map_err(|e| toml_error::task_error(&e, text, path))
}
/// Drops leading canary comment lines (and blank lines among them): HTML
/// comments or `#` lines that mention a canary or benchmark data.
pub fn strip_canary(text: &str) -> String {
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.peek() {
        let t = l.trim();
        let lower = t.to_ascii_lowercase();
        let marked = lower.contains("canary") || lower.contains("benchmark data");
        let comment = (t.starts_with("<!--") && t.ends_with("-->")) || t.starts_with('#');
        if t.is_empty() || (comment && marked) {
            lines.next();
        } else {
            break;
        }
    }
    let rest: Vec<&str> = lines.collect();
    let mut out = rest.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// What a directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Harbor,
    TerminalBench1,
    Other,
}

fn layout(p: &Path) -> Layout {
    if p.join("instruction.md").is_file() {
        Layout::Harbor
    } else if p.join("task.yaml").is_file() {
        Layout::TerminalBench1
    } else {
        Layout::Other
    }
}

fn load_any(p: &Path) -> Result<Task, TaskError> {
    match layout(p) {
        Layout::TerminalBench1 => tb1::load(p),
        _ => Task::load(p),
    }
}

/// The entries of a directory that holds no task, for the message: at most
/// eight names, directories with a trailing `/`.
fn found(entries: &[(String, bool)]) -> String {
    if entries.is_empty() {
        return "an empty directory".into();
    }
    let mut names: Vec<String> = entries
        .iter()
        .map(|(n, dir)| if *dir { format!("{n}/") } else { n.clone() })
        .collect();
    names.sort();
    let more = names.len().saturating_sub(8);
    names.truncate(8);
    let mut s = names.join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

/// Finds the tasks under `paths`: each is a task directory (Harbor's, with
/// instruction.md, or Terminal-Bench 1's, with task.yaml) or a directory
/// whose subdirectories are tasks. Sorted by name; names must be unique.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<Task>, TaskError> {
    let mut tasks: Vec<Task> = Vec::new();
    for p in paths {
        if layout(p) != Layout::Other {
            tasks.push(load_any(p)?);
            continue;
        }
        let entries = std::fs::read_dir(p).map_err(|source| TaskError::Read {
            path: p.clone(),
            source,
        })?;
        let mut seen = Vec::new();
        let mut dirs = Vec::new();
        for e in entries.flatten() {
            let d = e.path();
            seen.push((e.file_name().to_string_lossy().into_owned(), d.is_dir()));
            if d.is_dir() && layout(&d) != Layout::Other {
                dirs.push(d);
            }
        }
        if dirs.is_empty() {
            return Err(TaskError::UnknownLayout {
                path: p.clone(),
                found: found(&seen),
            });
        }
        dirs.sort();
        for d in dirs {
            tasks.push(load_any(&d)?);
        }
    }
    tasks.sort_by(|a, b| a.name.cmp(&b.name));
    for w in tasks.windows(2) {
        if w[0].name == w[1].name {
            return Err(TaskError::Duplicate {
                name: w[0].name.clone(),
                a: w[0].source_dir.clone(),
                b: w[1].source_dir.clone(),
            });
        }
    }
    Ok(tasks)
}

/// Keeps the tasks whose name matches any of the globs (all when none).
pub fn filter(tasks: Vec<Task>, globs: &[String]) -> Result<Vec<Task>, glob::PatternError> {
    if globs.is_empty() {
        return Ok(tasks);
    }
    let pats = globs
        .iter()
        .map(|g| glob::Pattern::new(g))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(tasks
        .into_iter()
        .filter(|t| pats.iter().any(|p| p.matches(&t.name)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_lines_dropped() {
        let t = "<!-- BENCHMARK DATA SHOULD NEVER APPEAR. canary GUID 1234 -->\n# canary: abc\n\n# Title\nDo it.\n";
        assert_eq!(strip_canary(t), "# Title\nDo it.\n");
        assert_eq!(strip_canary("# Title\nx"), "# Title\nx\n");
    }

    #[test]
    fn toml_defaults_unknown_keys_and_errors() {
        let p = Path::new("t/task.toml");
        let c = parse_toml(
            "version = \"1.0\"\n[agent]\ntimeout_sec = 60\n[environment]\ncpus = 2\nmemory = \"2G\"\nfoo = 1\n[metadata]\nx = [1]\n",
            p,
        )
        .expect("valid");
        assert_eq!(c.agent.timeout_sec, Some(60.0));
        assert_eq!(c.environment.cpus, Some(2.0));
        let err = parse_toml("[verifier]\ntimeout_sec = \"long\"\n", p).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("t/task.toml"), "{msg}");
        assert!(msg.contains("timeout_sec"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn timeouts_past_a_week_are_refused_not_converted() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("instruction.md"), "x\n").expect("write");
        std::fs::create_dir(dir.path().join("tests")).expect("mkdir");
        std::fs::write(dir.path().join("tests/test.sh"), "true\n").expect("write");
        for (section, key) in [
            ("agent", "timeout_sec"),
            ("verifier", "timeout_sec"),
            ("environment", "build_timeout_sec"),
        ] {
            let toml = format!("[{section}]\n{key} = 1e20\n");
            std::fs::write(dir.path().join("task.toml"), toml).expect("write");
            let err = Task::load(dir.path()).expect_err("1e20 seconds is refused");
            assert!(err.to_string().contains("at most 604800"), "{err}");
        }
        std::fs::write(
            dir.path().join("task.toml"),
            "[agent]\ntimeout_sec = 604800\n",
        )
        .expect("write");
        assert!(Task::load(dir.path()).is_ok());
    }

    #[test]
    fn memory_mb_past_i64_bytes_is_refused_not_wrapped() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("instruction.md"), "x\n").expect("write");
        std::fs::create_dir(dir.path().join("tests")).expect("mkdir");
        std::fs::write(dir.path().join("tests/test.sh"), "true\n").expect("write");
        // 2^44 MiB is 2^64 bytes: `as i64` then `<< 20` made it 0 (no limit).
        let toml = format!("[environment]\nmemory_mb = {}\n", 1u64 << 44);
        std::fs::write(dir.path().join("task.toml"), toml).expect("write");
        let err = Task::load(dir.path()).expect_err("2^44 MiB is refused");
        assert!(err.to_string().contains("memory_mb"), "{err}");
        std::fs::write(
            dir.path().join("task.toml"),
            "[environment]\nmemory_mb = 512\n",
        )
        .expect("write");
        let task = Task::load(dir.path()).expect("512 MiB loads");
        assert_eq!(task.memory_bytes, 512 << 20);
        std::fs::write(dir.path().join("task.toml"), "").expect("write");
        let task = Task::load(dir.path()).expect("the default loads");
        assert_eq!(
            task.memory_bytes,
            i64::try_from(DEFAULT_TASK_MEMORY_MB << 20).expect("fits")
        );
    }
}
