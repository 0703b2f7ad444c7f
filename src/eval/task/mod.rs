//! Loading tasks: discovery under the given paths, Harbor's task layout
//! (instruction.md with canary lines dropped, task.toml in Harbor's current
//! schema, tests/test.sh) and Terminal-Bench 1 task dirs (mapped to Harbor's
//! layout as Harbor's own migration maps them, see [`tb1`]).
//!
//! Every key of Harbor's schema is either honoured (it reaches a field of
//! [`Task`]) or refused, naming the file and the key (`resolve`); keys
//! Harbor does not know are listed in [`Task::warnings`] (`schema`). The
//! file as written is `task_toml`, the errors `error`, the search for
//! tasks under the given paths `discover`.

mod discover;
pub mod envsubst;
mod error;
#[cfg(test)]
mod keys_tests;
mod links;
mod resolve;
pub mod schema;
mod task_toml;
pub mod tb1;
mod toml_error;

pub use discover::{discover, filter};
pub use error::TaskError;
use resolve::Loader;
pub use task_toml::{
    AgentSection, EnvironmentSection, HealthcheckSection, SolutionSection, TaskToml,
    VerifierSection,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
