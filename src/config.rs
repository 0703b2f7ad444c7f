//! Turns flags, environment and files into one validated [`Config`].
//! Every default is a named constant with its unit in the name.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::{ExecutorKind, Network, Provider, RunArgs, WorkspaceMode};
use crate::model::anthropic::DEFAULT_ANTHROPIC_BASE_URL;
use crate::model::openai::DEFAULT_OPENAI_BASE_URL;
use crate::model::pricing::{Price, PriceParseError};
use crate::tools::policy::{Policy, PolicyError};

pub const DEFAULT_IMAGE: &str = "runner-sandbox:bookworm";
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Longest `--max-time` accepted: a week.
pub const MAX_RUN_TIME_SECS: u64 = 7 * 24 * 3600;
pub const DEFAULT_MAX_COMMAND_TIMEOUT_SECS: u64 = 600;
pub const DEFAULT_MAX_STEPS: u32 = 100;
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
pub const DEFAULT_CONTEXT_WINDOW_TOKENS: u64 = 200_000;
pub const DEFAULT_OUTPUT_LIMIT_BYTES: usize = 10_000;
pub const DEFAULT_CPUS: f64 = 1.0;
pub const DEFAULT_MEMORY: &str = "1g";
/// Default `--disk`: what a run may put on the host's disk.
pub const DEFAULT_DISK: &str = "10g";
pub const DEFAULT_PIDS_LIMIT: i64 = 256;
pub const DEFAULT_USER: &str = "1000:1000";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o";
/// Environment variables of the runner that commands may see.
pub const ENV_ALLOWLIST: &[&str] = &["PATH", "HOME", "LANG", "TERM"];
/// Allowlisted variables that name paths on this host: the docker executor
/// leaves them out (the image's PATH and the sandbox's HOME apply) unless
/// they were given with `--env`.
pub const HOST_PATH_ENV: &[&str] = &["PATH", "HOME"];

/// A configuration the user can fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--env '{0}' is not of the form K=V")]
    BadEnv(String),
    #[error("--memory '{0}' is not a size like 512m or 2g")]
    BadMemory(String),
    #[error("--disk '{0}' is not a size of at least 16m (like 512m or 10g) or `unlimited`")]
    BadDisk(String),

    #[error("--{flag} must be {what}, got {value}")]
    OutOfRange {
        flag: &'static str,
        what: &'static str,
        value: String,
    },
    #[error("cannot read --system-file {path}: {source}")]
    SystemFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--provider scripted needs --script FILE")]
    MissingScript,
    #[error("{0}")]
    Policy(#[from] PolicyError),
    #[error("--price: {0}")]
    BadPrice(#[from] PriceParseError),
    /// Raising the maximum in silence would hide a typo and run commands
    /// longer than the user allowed.
    #[error("--max-command-timeout {max} is lower than --timeout {timeout} (seconds)")]
    MaxBelowTimeout { timeout: u64, max: u64 },
}

impl ConfigError {
    /// What the user can do about it, when there is something to say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ConfigError::MaxBelowTimeout { .. } => {
                Some("raise --max-command-timeout or lower --timeout")
            }
            ConfigError::OutOfRange { .. } => {
                Some("`runner --help` lists every flag and its range")
            }
            ConfigError::BadDisk(_) => Some(
                "give a size such as --disk 2g, or --disk unlimited to bind-mount the workspace as it is",
            ),
            ConfigError::BadMemory(_) => Some("give a size such as --memory 512m or --memory 2g"),
            _ => None,
        }
    }
}

/// Container settings the docker executor needs.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    pub image: String,
    pub network: Network,
    pub cpus: f64,
    pub memory_bytes: i64,
    pub pids_limit: i64,
    pub user: String,
    pub writable_rootfs: bool,
    pub workspace_mode: WorkspaceMode,
    /// Bytes the run may put on the host (workspace, outputs); `None`:
    /// unbounded.
    pub disk_bytes: Option<u64>,
    /// The engine's container runtime; `None` is the engine's default.
    pub runtime: Option<String>,
}

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct Config {
    pub provider: Provider,
    pub model: String,
    pub base_url: String,
    /// The API key, never written anywhere.
    pub api_key: Option<String>,
    pub script: Option<PathBuf>,
    pub executor: ExecutorKind,
    pub sandbox: SandboxSettings,
    pub timeout: Duration,
    pub max_command_timeout: Duration,
    pub max_steps: u32,
    pub max_time: Option<Duration>,
    pub max_cost_usd: Option<f64>,
    /// Price override; otherwise the table in `model::pricing`.
    pub price: Option<Price>,
    pub max_tokens: u32,
    pub context_window_tokens: u64,
    pub output_limit_bytes: usize,
    pub system_prompt: Option<String>,
    /// The exact environment of every command (local executor).
    pub command_env: Vec<(String, String)>,
    /// Names set with `--env` (they override the sandbox's own values).
    pub env_flag_names: Vec<String>,
    pub policy: Policy,
    pub deny: Vec<String>,
    pub default_deny: bool,
    pub run_dir: Option<PathBuf>,
    pub json: bool,
    pub workspace: Option<PathBuf>,
    pub keep_workspace: bool,
    /// Leave a command's background processes running after it exits.
    pub keep_background: bool,
}

impl Config {
    /// Validates the flags (already merged with the environment by clap).
    pub fn from_args(a: &RunArgs) -> Result<Self, ConfigError> {
        let (key_var, url_var, default_url, default_model) = match a.agent.provider {
            Provider::Anthropic => (
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_BASE_URL",
                DEFAULT_ANTHROPIC_BASE_URL,
                DEFAULT_ANTHROPIC_MODEL,
            ),
            Provider::Openai => (
                "OPENAI_API_KEY",
                "OPENAI_BASE_URL",
                DEFAULT_OPENAI_BASE_URL,
                DEFAULT_OPENAI_MODEL,
            ),
            Provider::Scripted => ("", "", "", "scripted"),
        };
        let env_nonempty = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let base_url = a
            .agent
            .base_url
            .clone()
            .or_else(|| env_nonempty(url_var))
            .unwrap_or_else(|| default_url.to_string());
        if a.agent.provider == Provider::Scripted && a.agent.script.is_none() {
            return Err(ConfigError::MissingScript);
        }
        positive("timeout", a.agent.timeout as f64)?;
        positive("max-command-timeout", a.agent.max_command_timeout as f64)?;
        if a.agent.max_command_timeout < a.agent.timeout {
            return Err(ConfigError::MaxBelowTimeout {
                timeout: a.agent.timeout,
                max: a.agent.max_command_timeout,
            });
        }
        positive("max-steps", a.agent.max_steps as f64)?;
        positive("max-tokens", a.agent.max_tokens as f64)?;
        positive("context-window", a.agent.context_window as f64)?;
        if let Some(t) = a.max_time {
            positive("max-time", t as f64)?;
            if t > MAX_RUN_TIME_SECS {
                return Err(ConfigError::OutOfRange {
                    flag: "max-time",
                    what: "at most a week (604800 seconds)",
                    value: t.to_string(),
                });
            }
        }
        positive("cpus", a.cpus)?;
        positive("pids-limit", a.pids_limit as f64)?;
        if a.agent.output_limit < 100 {
            return Err(ConfigError::OutOfRange {
                flag: "output-limit",
                what: "at least 100 bytes",
                value: a.agent.output_limit.to_string(),
            });
        }
        if let Some(c) = a.agent.max_cost {
            positive("max-cost", c)?;
        }
        let system_prompt =
            match (&a.agent.system, &a.agent.system_file) {
                (Some(s), _) => Some(s.clone()),
                (None, Some(path)) => Some(std::fs::read_to_string(path).map_err(|source| {
                    ConfigError::SystemFile {
                        path: path.clone(),
                        source,
                    }
                })?),
                (None, None) => None,
            };
        Ok(Config {
            provider: a.agent.provider,
            model: a
                .agent
                .model
                .clone()
                .unwrap_or_else(|| default_model.to_string()),
            base_url,
            api_key: if key_var.is_empty() {
                None
            } else {
                env_nonempty(key_var)
            },
            script: a.agent.script.clone(),
            executor: a.executor,
            sandbox: SandboxSettings {
                image: a.image.clone(),
                network: a.network,
                cpus: a.cpus,
                memory_bytes: parse_memory(&a.memory)?,
                pids_limit: a.pids_limit,
                user: a.user.clone(),
                writable_rootfs: a.writable_rootfs,
                workspace_mode: a.workspace_mode,
                disk_bytes: parse_disk(&a.disk)?,
                runtime: a.runtime.clone().filter(|r| !r.is_empty()),
            },
            timeout: Duration::from_secs(a.agent.timeout),
            max_command_timeout: Duration::from_secs(a.agent.max_command_timeout),
            max_steps: a.agent.max_steps,
            max_time: a.max_time.map(Duration::from_secs),
            max_cost_usd: a.agent.max_cost,
            price: a
                .agent
                .price
                .as_deref()
                .map(str::parse::<Price>)
                .transpose()?,
            max_tokens: a.agent.max_tokens,
            context_window_tokens: a.agent.context_window,
            output_limit_bytes: a.agent.output_limit,
            system_prompt,
            command_env: command_env(&a.agent.env)?,
            env_flag_names: a
                .agent
                .env
                .iter()
                .filter_map(|p| p.split_once('=').map(|(k, _)| k.to_string()))
                .collect(),
            policy: Policy::new(!a.agent.no_default_deny, &a.agent.deny)?,
            deny: a.agent.deny.clone(),
            default_deny: !a.agent.no_default_deny,
            run_dir: a.run_dir.clone(),
            json: a.json,
            workspace: a.workspace.clone(),
            keep_workspace: a.keep_workspace,
            keep_background: a.keep_background,
        })
    }

    /// The configuration as recorded in the trajectory: no secrets.
    pub fn public_json(&self) -> Value {
        json!({
            "provider": format!("{:?}", self.provider).to_lowercase(),
            "model": self.model,
            "base_url": self.base_url,
            "api_key_set": self.api_key.is_some(),
            "executor": format!("{:?}", self.executor).to_lowercase(),
            "image": self.sandbox.image,
            "network": format!("{:?}", self.sandbox.network).to_lowercase(),
            "cpus": self.sandbox.cpus,
            "memory_bytes": self.sandbox.memory_bytes,
            "pids_limit": self.sandbox.pids_limit,
            "user": self.sandbox.user,
            "writable_rootfs": self.sandbox.writable_rootfs,
            "disk_bytes": self.sandbox.disk_bytes,
            "runtime": self.sandbox.runtime,
            "keep_background": self.keep_background,
            "timeout_secs": self.timeout.as_secs(),
            "max_command_timeout_secs": self.max_command_timeout.as_secs(),
            "max_steps": self.max_steps,
            "max_time_secs": self.max_time.map(|d| d.as_secs()),
            "max_cost_usd": self.max_cost_usd,
            "max_tokens": self.max_tokens,
            "context_window_tokens": self.context_window_tokens,
            "output_limit_bytes": self.output_limit_bytes,
            "command_env": self.effective_env().iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            "default_deny": self.default_deny,
            "deny": self.deny,
        })
    }

    /// The environment commands get from the runner with this executor.
    fn effective_env(&self) -> Vec<(String, String)> {
        match self.executor {
            ExecutorKind::Docker => self.container_env(),
            ExecutorKind::Local => self.command_env.clone(),
        }
    }

    /// The environment of commands in a container: `command_env` without
    /// the host's PATH and HOME, unless `--env` set them.
    pub fn container_env(&self) -> Vec<(String, String)> {
        self.command_env
            .iter()
            .filter(|(k, _)| {
                !HOST_PATH_ENV.contains(&k.as_str()) || self.env_flag_names.contains(k)
            })
            .cloned()
            .collect()
    }
}

fn positive(flag: &'static str, v: f64) -> Result<(), ConfigError> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            flag,
            what: "greater than 0",
            value: v.to_string(),
        })
    }
}

/// The environment of commands: the allowlisted variables of the runner's
/// own environment, then the `--env` pairs.
fn command_env(pairs: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut env: Vec<(String, String)> = ENV_ALLOWLIST
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .filter(|(k, _)| !k.is_empty() && !k.contains(char::is_whitespace))
            .ok_or_else(|| ConfigError::BadEnv(pair.clone()))?;
        env.retain(|(existing, _)| existing != k);
        env.push((k.to_string(), v.to_string()));
    }
    Ok(env)
}

/// Parses `--disk`: a size of at least 16 MiB, or `unlimited`.
pub fn parse_disk(s: &str) -> Result<Option<u64>, ConfigError> {
    if matches!(s.trim().to_ascii_lowercase().as_str(), "unlimited" | "none") {
        return Ok(None);
    }
    const MIN_DISK_BYTES: f64 = (16 << 20) as f64;
    match parse_size(s) {
        Some(b) if b >= MIN_DISK_BYTES && b <= u64::MAX as f64 => {
            Ok(Some(crate::convert::u64_from_f64(b)))
        }
        _ => Err(ConfigError::BadDisk(s.to_string())),
    }
}

/// Parses sizes like `512m`, `2g`, `1.5G`, `1048576`.
pub fn parse_memory(s: &str) -> Result<i64, ConfigError> {
    let bad = || ConfigError::BadMemory(s.to_string());
    let bytes = parse_size(s).ok_or_else(bad)?;
    const MIN_MEMORY_BYTES: f64 = (6 << 20) as f64;
    if bytes < MIN_MEMORY_BYTES || bytes > i64::MAX as f64 {
        return Err(bad());
    }
    Ok(crate::convert::i64_from_f64(bytes))
}

/// Bytes of a size like `512m`, `2g`, `1.5G`, `1048576` (binary units).
fn parse_size(s: &str) -> Option<f64> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        Some('t') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: f64 = num.trim().parse().ok()?;
    let bytes = n * mult as f64;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("1g").ok(), Some(1 << 30));
        assert_eq!(parse_memory("512m").ok(), Some(512 << 20));
        assert_eq!(parse_memory("1.5G").ok(), Some(3 << 29));
        assert!(parse_memory("lots").is_err());
        assert!(parse_memory("1k").is_err());
        assert_eq!(parse_disk("10g").ok(), Some(Some(10 << 30)));
        assert_eq!(parse_disk("unlimited").ok(), Some(None));
        assert!(
            parse_disk("1m").is_err() && parse_disk("-5g").is_err() && parse_disk("x").is_err()
        );
    }

    #[test]
    fn container_env_drops_host_paths_unless_given() {
        use clap::Parser;
        let args = |env: &[&str]| {
            let mut a = crate::cli::Cli::parse_from([
                "runner",
                "--provider",
                "scripted",
                "--script",
                "s",
                "x",
            ])
            .run;
            a.agent.env = env.iter().map(|s| s.to_string()).collect();
            Config::from_args(&a).expect("valid")
        };
        let c = args(&["A=1"]);
        let env = c.container_env();
        assert!(
            env.iter().all(|(k, _)| k != "HOME" && k != "PATH"),
            "{env:?}"
        );
        assert!(env.contains(&("A".into(), "1".into())));
        let c = args(&["HOME=/work/h"]);
        assert!(
            c.container_env()
                .contains(&("HOME".into(), "/work/h".into()))
        );
    }

    #[test]
    fn env_pairs() {
        let env = command_env(&["A=1".into(), "B=x=y".into()]).expect("valid");
        assert!(env.contains(&("A".into(), "1".into())));
        assert!(env.contains(&("B".into(), "x=y".into())));
        assert!(
            env.iter()
                .all(|(k, _)| ENV_ALLOWLIST.contains(&k.as_str()) || k == "A" || k == "B")
        );
        assert!(command_env(&["novalue".into()]).is_err());
        assert!(command_env(&["=1".into()]).is_err());
    }
}
