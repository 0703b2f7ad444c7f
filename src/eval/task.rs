//! Loading Harbor-format tasks: discovery under the given paths, the
//! instruction (canary lines dropped) and `task.toml`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

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
    #[error("{path}: {message}")]
    Toml { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{0} is neither a task directory (with instruction.md) nor holds any")]
    NoTasks(PathBuf),
    #[error("two tasks are named '{name}': {a} and {b}")]
    Duplicate {
        name: String,
        a: PathBuf,
        b: PathBuf,
    },
}

/// `[agent]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AgentSection {
    pub timeout_sec: Option<f64>,
}

/// `[verifier]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct VerifierSection {
    pub timeout_sec: Option<f64>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    pub user: Option<String>,
}

/// `[environment]`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EnvironmentSection {
    pub docker_image: Option<String>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    /// The older form: "2G", "512M".
    pub memory: Option<String>,
    pub storage_mb: Option<u64>,
    pub allow_internet: Option<bool>,
    pub build_timeout_sec: Option<f64>,
}

/// `task.toml`; unknown keys are kept out of the way and ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TaskToml {
    #[serde(default)]
    pub agent: AgentSection,
    #[serde(default)]
    pub verifier: VerifierSection,
    #[serde(default)]
    pub environment: EnvironmentSection,
    #[serde(default)]
    pub metadata: toml::Table,
}

/// One loaded task.
#[derive(Debug, Clone)]
pub struct Task {
    /// The directory's name.
    pub name: String,
    pub dir: PathBuf,
    pub instruction: String,
    pub config: TaskToml,
    /// Resolved limits (task values or Harbor's defaults).
    pub agent_timeout_secs: f64,
    pub verifier_timeout_secs: f64,
    pub build_timeout_secs: f64,
    pub cpus: f64,
    pub memory_bytes: i64,
    pub allow_internet: bool,
    pub agent_user: Option<String>,
    pub verifier_user: Option<String>,
    pub workdir: Option<String>,
    pub env: Vec<(String, String)>,
    pub solution_env: Vec<(String, String)>,
    pub verifier_env: Vec<(String, String)>,
    pub grading: Option<super::mode::GradingMode>,
    pub verifier_image: Option<String>,
    pub storage_bytes: Option<u64>,
    pub healthcheck: Option<Healthcheck>,
    pub artifacts: Vec<Artifact>,
    pub compose_file: Option<PathBuf>,
    pub warnings: Vec<String>,
    pub source_dir: PathBuf,
}

/// `[environment.healthcheck]`.
#[derive(Debug, Clone)]
pub struct Healthcheck {
    pub command: String,
    pub interval: std::time::Duration,
    pub timeout: std::time::Duration,
    pub start_period: std::time::Duration,
    pub start_interval: std::time::Duration,
    pub retries: u32,
}

/// One entry of `artifacts`.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub source: String,
    pub destination: Option<String>,
    pub exclude: Vec<String>,
    pub service: Option<String>,
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

    /// Loads the task in `dir`.
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        let read = |p: PathBuf| {
            std::fs::read_to_string(&p).map_err(|source| TaskError::Read { path: p, source })
        };
        let instruction = strip_canary(&read(dir.join("instruction.md"))?);
        let toml_path = dir.join("task.toml");
        let config = if toml_path.exists() {
            parse_toml(&read(toml_path.clone())?, &toml_path)?
        } else {
            TaskToml::default()
        };
        let invalid = |message: String| TaskError::Invalid {
            path: toml_path.clone(),
            message,
        };
        let test_sh = dir.join("tests").join("test.sh");
        if !test_sh.is_file() {
            return Err(TaskError::Invalid {
                path: dir.to_path_buf(),
                message: "tests/test.sh is missing".into(),
            });
        }
        let env = &config.environment;
        let memory_bytes = match (env.memory_mb, &env.memory) {
            (None, Some(m)) => crate::config::parse_memory(m)
                .map_err(|_| invalid(format!("environment.memory: '{m}' is not a size like 2G")))?,
            (mb, _) => {
                // `memory_mb` wins over `memory`; a value past i64 bytes is
                // refused rather than wrapped into a small limit.
                let mb = mb.unwrap_or(DEFAULT_TASK_MEMORY_MB);
                i64::try_from(mb)
                    .ok()
                    .and_then(|mb| mb.checked_mul(1 << 20))
                    .ok_or_else(|| invalid(format!("environment.memory_mb: {mb} is too large")))?
            }
        };
        let positive = |key: &str, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(v)
            } else {
                Err(invalid(format!("{key} must be > 0, got {v}")))
            }
        };
        let timeout = |key: &str, v: f64| {
            let v = positive(key, v)?;
            if v > MAX_TASK_TIMEOUT_SECS {
                return Err(invalid(format!(
                    "{key} must be at most {MAX_TASK_TIMEOUT_SECS} (a week), got {v}"
                )));
            }
            Ok(v)
        };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "task".into());
        Ok(Task {
            name,
            dir: dir.to_path_buf(),
            instruction,
            agent_timeout_secs: timeout(
                "agent.timeout_sec",
                config
                    .agent
                    .timeout_sec
                    .unwrap_or(DEFAULT_AGENT_TIMEOUT_SECS),
            )?,
            verifier_timeout_secs: timeout(
                "verifier.timeout_sec",
                config
                    .verifier
                    .timeout_sec
                    .unwrap_or(DEFAULT_VERIFIER_TIMEOUT_SECS),
            )?,
            build_timeout_secs: timeout(
                "environment.build_timeout_sec",
                env.build_timeout_sec.unwrap_or(DEFAULT_BUILD_TIMEOUT_SECS),
            )?,
            cpus: positive("environment.cpus", env.cpus.unwrap_or(DEFAULT_TASK_CPUS))?,
            memory_bytes,
            allow_internet: env.allow_internet.unwrap_or(true),
            agent_user: None,
            verifier_user: config.verifier.user.clone(),
            workdir: None,
            env: Vec::new(),
            solution_env: Vec::new(),
            verifier_env: config
                .verifier
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            grading: None,
            verifier_image: None,
            storage_bytes: None,
            healthcheck: None,
            artifacts: Vec::new(),
            compose_file: None,
            warnings: Vec::new(),
            source_dir: dir.to_path_buf(),
            config,
        })
    }
}

/// Parses `task.toml`; a wrong type names the file, line and key.
pub fn parse_toml(text: &str, path: &Path) -> Result<TaskToml, TaskError> {
    toml::from_str(text).map_err(|e| TaskError::Toml {
        path: path.to_path_buf(),
        message: e.to_string().trim().replace('\n', " "),
    })
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

/// Finds the tasks under `paths`: each is a task directory (it holds
/// instruction.md) or a directory whose subdirectories are tasks. Sorted by
/// name; names must be unique.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<Task>, TaskError> {
    let mut tasks: Vec<Task> = Vec::new();
    for p in paths {
        if p.join("instruction.md").is_file() {
            tasks.push(Task::load(p)?);
            continue;
        }
        let entries = std::fs::read_dir(p).map_err(|source| TaskError::Read {
            path: p.clone(),
            source,
        })?;
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|d| d.join("instruction.md").is_file())
            .collect();
        if dirs.is_empty() {
            return Err(TaskError::NoTasks(p.clone()));
        }
        dirs.sort();
        for d in dirs {
            tasks.push(Task::load(&d)?);
        }
    }
    tasks.sort_by(|a, b| a.name.cmp(&b.name));
    for w in tasks.windows(2) {
        if w[0].name == w[1].name {
            return Err(TaskError::Duplicate {
                name: w[0].name.clone(),
                a: w[0].dir.clone(),
                b: w[1].dir.clone(),
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
