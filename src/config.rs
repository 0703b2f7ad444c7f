//! Turns flags, environment and files into one validated [`Config`].
//! Every default is a named constant with its unit in the name.

use std::path::PathBuf;
use std::time::Duration;

use crate::approve::ApproveMode;
pub use crate::backend_kind::BackendKind;
pub use crate::exec::ENV_ALLOWLIST;
use crate::exec::backend::{
    DEFAULT_CPUS, DEFAULT_IMAGE, DEFAULT_PIDS_LIMIT, DEFAULT_USER, Network, WorkspaceMode,
};
use crate::exec::shell::ShellMode;
use crate::model::http::DEFAULT_IDLE_READ_TIMEOUT_SECS;
use crate::model::pricing::{Price, PriceParseError};
use crate::model::provider::Provider;
use crate::model::tool_choice::ToolChoice;
use crate::tools::policy::{Policy, PolicyError};

pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Longest `--max-time` accepted: a week.
pub const MAX_RUN_TIME_SECS: u64 = 7 * 24 * 3600;
pub const DEFAULT_MAX_COMMAND_TIMEOUT_SECS: u64 = 600;
pub const DEFAULT_MAX_STEPS: u32 = 100;
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
pub const DEFAULT_CONTEXT_WINDOW_TOKENS: u64 = 200_000;
pub const DEFAULT_OUTPUT_LIMIT_BYTES: usize = 10_000;
/// Default `--tools`: bash alone, until the edit tool is measured.
pub const DEFAULT_TOOLS: &str = "bash";
/// Default `--memory`, as typed ([`crate::exec::backend::DEFAULT_MEMORY_BYTES`]).
pub const DEFAULT_MEMORY: &str = "1g";
/// Default `--disk`: what a run may put on the host's disk
/// ([`crate::exec::backend::DEFAULT_DISK_BYTES`]).
pub const DEFAULT_DISK: &str = "10g";
/// Default `--seccomp`: runner's own profile (see `exec::seccomp`).
pub const DEFAULT_SECCOMP: &str = "runner";
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
    #[error("--tools: unknown tool '{0}'")]
    UnknownTool(String),
    #[error("--tools names no tool")]
    NoTools,
    #[error("--tool-choice: {0}")]
    BadToolChoice(String),
    #[error("--tool-choice names '{0}', which is not among the offered --tools")]
    ToolChoiceNotOffered(String),
    #[error("{0}")]
    Policy(#[from] PolicyError),
    #[error("--price: {0}")]
    BadPrice(#[from] PriceParseError),
    /// Raising the maximum in silence would hide a typo and run commands
    /// longer than the user allowed.
    #[error("--max-command-timeout {max} is lower than --timeout {timeout} (seconds)")]
    MaxBelowTimeout { timeout: u64, max: u64 },
    #[error("--allow-host: {0}")]
    AllowHost(#[from] crate::exec::egress::HostPatternError),
    #[error("--allow-host and --network bridge exclude each other")]
    AllowHostWithBridge,
    #[error("--egress-network '{0}' without --allow-host does nothing")]
    EgressWithoutAllowlist(String),
    #[error("--network allowlist needs at least one --allow-host")]
    AllowlistWithoutHosts,
    #[error("--egress-network '{0}' is not the name of an engine network")]
    BadEgressNetwork(String),
    #[error("--seccomp: {0}")]
    Seccomp(#[from] crate::exec::seccomp::SeccompError),
}

/// The sandbox settings of `sb`, sizes parsed, under the network chosen.
fn sandbox_settings(
    sb: &SandboxOptions,
    network: Network,
    allowed_hosts: Vec<String>,
) -> Result<SandboxSettings, ConfigError> {
    Ok(SandboxSettings {
        image: sb.image.clone(),
        network,
        allowed_hosts,
        egress_network: sb.egress_network.clone(),
        cpus: sb.cpus,
        memory_bytes: parse_memory(&sb.memory)?,
        pids_limit: sb.pids_limit,
        user: sb.user.clone(),
        writable_rootfs: sb.writable_rootfs,
        workspace_mode: sb.workspace_mode,
        disk_bytes: parse_disk(&sb.disk)?,
        runtime: sb.runtime.clone().filter(|r| !r.is_empty()),
        seccomp: crate::exec::seccomp::Seccomp::parse(&sb.seccomp)?,
    })
}

/// The network of `sb` and its validated allowlist: any `--allow-host`
/// makes the sandbox's network an allowlist.
fn egress_choice(sb: &SandboxOptions) -> Result<(Network, Vec<String>), ConfigError> {
    if sb.allowed_hosts.is_empty() {
        if let Some(n) = &sb.egress_network {
            return Err(ConfigError::EgressWithoutAllowlist(n.clone()));
        }
        if sb.network == Network::Allowlist {
            return Err(ConfigError::AllowlistWithoutHosts);
        }
        return Ok((sb.network, Vec::new()));
    }
    if sb.network == Network::Bridge {
        return Err(ConfigError::AllowHostWithBridge);
    }
    if let Some(n) = sb
        .egress_network
        .as_ref()
        .filter(|n| !crate::exec::egress::is_egress_network_name(n))
    {
        return Err(ConfigError::BadEgressNetwork(n.clone()));
    }
    let hosts = crate::exec::egress::normalize_host_patterns(&sb.allowed_hosts)?;
    Ok((Network::Allowlist, hosts))
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
            ConfigError::AllowHost(e) => Some(e.hint()),
            ConfigError::Seccomp(e) => Some(e.hint()),
            ConfigError::AllowHostWithBridge => Some(
                "drop --network bridge: --allow-host gives the sandbox only the names it lists",
            ),
            ConfigError::BadEgressNetwork(_) => Some(
                "give the name of an existing, non-internal network (`docker network ls`); \
                 not host or none",
            ),
            ConfigError::EgressWithoutAllowlist(_) | ConfigError::AllowlistWithoutHosts => {
                Some("name the hosts the sandbox may reach with --allow-host NAME")
            }
            ConfigError::UnknownTool(_) | ConfigError::NoTools => {
                Some("--tools takes a comma list of: bash, edit (for example --tools bash,edit)")
            }
            ConfigError::BadToolChoice(_) | ConfigError::ToolChoiceNotOffered(_) => Some(
                "--tool-choice takes auto, required, none or the name of an offered tool (bash, edit)",
            ),
            _ => None,
        }
    }
}

/// The model and the loop, as the user gave them: shared by a run and
/// every attempt of `runner eval`. `Default` is runner's one set of
/// defaults (the command line shows the same constants).
#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub provider: Provider,
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub script: Option<PathBuf>,
    pub timeout_secs: u64,
    pub max_command_timeout_secs: u64,
    /// Seconds a model API response may stay silent (`--model-timeout`).
    pub model_timeout_secs: u64,
    pub max_steps: u32,
    pub max_cost_usd: Option<f64>,
    /// Price override text: "INPUT,OUTPUT[,CACHE_WRITE,CACHE_READ]".
    pub price: Option<String>,
    pub max_tokens: u32,
    pub context_window_tokens: u64,
    /// `--context-window auto`: ask the server, `context_window_tokens`
    /// when it does not say.
    pub context_window_auto: bool,
    /// `--tool-choice` as typed.
    pub tool_choice: Option<String>,
    /// `false` with `--no-stream`.
    pub stream: bool,
    pub output_limit_bytes: usize,
    pub system: Option<String>,
    pub system_file: Option<PathBuf>,
    /// `K=V` pairs for commands.
    pub env: Vec<String>,
    /// Extra deny patterns.
    pub deny: Vec<String>,
    pub default_deny: bool,
    /// The tools offered, as typed: a comma list ("bash,edit").
    pub tools: String,
    /// What the bash tool's commands inherit from the calls before.
    pub shell: ShellMode,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            provider: Provider::default(),
            model: None,
            base_url: None,
            script: None,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            max_command_timeout_secs: DEFAULT_MAX_COMMAND_TIMEOUT_SECS,
            model_timeout_secs: DEFAULT_IDLE_READ_TIMEOUT_SECS,
            max_steps: DEFAULT_MAX_STEPS,
            max_cost_usd: None,
            price: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            context_window_tokens: DEFAULT_CONTEXT_WINDOW_TOKENS,
            context_window_auto: false,
            tool_choice: None,
            stream: true,
            output_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            system: None,
            system_file: None,
            env: Vec::new(),
            deny: Vec::new(),
            default_deny: true,
            tools: DEFAULT_TOOLS.to_string(),
            shell: ShellMode::Fresh,
        }
    }
}

/// A tool runner can offer the model (`--tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Shell commands in the sandbox.
    Bash,
    /// Anthropic's text editor (`str_replace_based_edit_tool`).
    Edit,
}

impl ToolKind {
    pub const ALL: [ToolKind; 2] = [ToolKind::Bash, ToolKind::Edit];

    /// The name `--tools` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Bash => "bash",
            ToolKind::Edit => "edit",
        }
    }
}

/// Parses `--tools`: names separated by commas, in the order given,
/// repeats dropped; at least one.
pub fn parse_tools(s: &str) -> Result<Vec<ToolKind>, ConfigError> {
    let mut tools = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind = ToolKind::ALL
            .into_iter()
            .find(|k| k.as_str() == name.to_ascii_lowercase())
            .ok_or_else(|| ConfigError::UnknownTool(name.to_string()))?;
        if !tools.contains(&kind) {
            tools.push(kind);
        }
    }
    if tools.is_empty() {
        return Err(ConfigError::NoTools);
    }
    Ok(tools)
}

/// Parses `--tool-choice` against the offered tools; a tool is named as
/// `--tools` names it (`edit`) or as the API does
/// (`str_replace_based_edit_tool`), and sent as the API names it.
pub fn tool_choice(s: &str, tools: &[ToolKind]) -> Result<ToolChoice, ConfigError> {
    let choice = ToolChoice::parse(s).map_err(ConfigError::BadToolChoice)?;
    let ToolChoice::Named(name) = &choice else {
        return Ok(choice);
    };
    let api_name = |k: ToolKind| match k {
        ToolKind::Bash => "bash",
        ToolKind::Edit => crate::tools::edit::EDIT_TOOL_NAME,
    };
    tools
        .iter()
        .find(|k| k.as_str() == name || api_name(**k) == name)
        .map(|k| ToolChoice::Named(api_name(*k).to_string()))
        .ok_or_else(|| ConfigError::ToolChoiceNotOffered(name.clone()))
}

/// The sandbox, as the user gave it (sizes as typed).
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    pub backend: BackendKind,
    pub image: String,
    pub network: Network,
    /// `--allow-host`: host patterns as typed; any makes the network
    /// [`Network::Allowlist`].
    pub allowed_hosts: Vec<String>,
    /// `--egress-network`.
    pub egress_network: Option<String>,
    pub cpus: f64,
    /// A size such as `512m`, `2g` or a byte count.
    pub memory: String,
    pub pids_limit: i64,
    pub user: String,
    pub writable_rootfs: bool,
    pub workspace_mode: WorkspaceMode,
    /// A size, or `unlimited`.
    pub disk: String,
    pub runtime: Option<String>,
    /// `--seccomp`: `runner`, `default` or a profile file's path.
    pub seccomp: String,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            backend: BackendKind::Docker,
            image: DEFAULT_IMAGE.to_string(),
            network: Network::None,
            allowed_hosts: Vec::new(),
            egress_network: None,
            cpus: DEFAULT_CPUS,
            memory: DEFAULT_MEMORY.to_string(),
            pids_limit: DEFAULT_PIDS_LIMIT,
            user: DEFAULT_USER.to_string(),
            writable_rootfs: false,
            workspace_mode: WorkspaceMode::Auto,
            disk: DEFAULT_DISK.to_string(),
            runtime: None,
            seccomp: DEFAULT_SECCOMP.to_string(),
        }
    }
}

/// Everything a run is configured from, before validation. The command
/// line fills one in (`cli`), `runner eval` one per attempt from the task.
#[derive(Debug, Clone, Default)]
pub struct ConfigBuilder {
    pub agent: AgentOptions,
    pub sandbox: SandboxOptions,
    pub max_time_secs: Option<u64>,
    pub run_dir: Option<PathBuf>,
    pub json: bool,
    pub workspace: Option<PathBuf>,
    pub keep_workspace: bool,
    pub keep_background: bool,
    /// `--approve`: which commands a person is asked about.
    pub approve: ApproveMode,
}

/// Sandbox settings, validated.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    pub image: String,
    pub network: Network,
    /// With [`Network::Allowlist`]: the validated host patterns.
    pub allowed_hosts: Vec<String>,
    /// With [`Network::Allowlist`]: the network its proxy reaches out
    /// through; `None`: the backend's default.
    pub egress_network: Option<String>,
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
    /// The sandboxes' system-call filter.
    pub seccomp: crate::exec::seccomp::Seccomp,
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
    pub executor: BackendKind,
    pub sandbox: SandboxSettings,
    pub timeout: Duration,
    pub max_command_timeout: Duration,
    /// How long a model API response may stay silent before the attempt
    /// fails and is retried.
    pub model_timeout: Duration,
    pub max_steps: u32,
    pub max_time: Option<Duration>,
    pub max_cost_usd: Option<f64>,
    /// Price override; otherwise the table in `model::pricing`.
    pub price: Option<Price>,
    pub max_tokens: u32,
    pub context_window_tokens: u64,
    pub context_window_auto: bool,
    /// What the model is told about calling tools; `None`: nothing.
    pub tool_choice: Option<ToolChoice>,
    /// Ask the model API for a stream.
    pub stream: bool,
    pub output_limit_bytes: usize,
    pub system_prompt: Option<String>,
    /// The exact environment of every command (local executor).
    pub command_env: Vec<(String, String)>,
    /// Names set with `--env` (they override the sandbox's own values).
    pub env_flag_names: Vec<String>,
    pub policy: Policy,
    pub deny: Vec<String>,
    pub default_deny: bool,
    /// The tools offered to the model, in order.
    pub tools: Vec<ToolKind>,
    pub run_dir: Option<PathBuf>,
    pub json: bool,
    pub workspace: Option<PathBuf>,
    pub keep_workspace: bool,
    /// Leave a command's background processes running after it exits.
    pub keep_background: bool,
    /// Whether `cd` and exported variables carry over between commands.
    pub shell: ShellMode,
    /// Which commands a person is asked about before they run.
    pub approve: ApproveMode,
}

impl ConfigBuilder {
    /// Validates everything (values already merged with the environment
    /// by the caller) and reads what the configuration names: the system
    /// prompt file, the provider's key and base URL variables.
    pub fn build(&self) -> Result<Config, ConfigError> {
        let a = &self.agent;
        let info = a.provider.info();
        let env_nonempty = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let base_url = a
            .base_url
            .clone()
            .or_else(|| info.url_var.and_then(env_nonempty))
            .unwrap_or_else(|| info.default_base_url.to_string());
        if a.provider == Provider::Scripted && a.script.is_none() {
            return Err(ConfigError::MissingScript);
        }
        self.check_numbers()?;
        let system_prompt =
            match (&a.system, &a.system_file) {
                (Some(s), _) => Some(s.clone()),
                (None, Some(path)) => Some(std::fs::read_to_string(path).map_err(|source| {
                    ConfigError::SystemFile {
                        path: path.clone(),
                        source,
                    }
                })?),
                (None, None) => None,
            };
        let sb = &self.sandbox;
        let (network, allowed_hosts) = egress_choice(sb)?;
        let tools = parse_tools(&a.tools)?;
        let tool_choice = a
            .tool_choice
            .as_deref()
            .map(|t| tool_choice(t, &tools))
            .transpose()?;
        Ok(Config {
            provider: a.provider,
            model: a
                .model
                .clone()
                .unwrap_or_else(|| info.default_model.to_string()),
            base_url,
            api_key: info.key_var.and_then(env_nonempty),
            script: a.script.clone(),
            executor: sb.backend,
            sandbox: sandbox_settings(sb, network, allowed_hosts)?,
            timeout: Duration::from_secs(a.timeout_secs),
            max_command_timeout: Duration::from_secs(a.max_command_timeout_secs),
            model_timeout: Duration::from_secs(a.model_timeout_secs),
            max_steps: a.max_steps,
            max_time: self.max_time_secs.map(Duration::from_secs),
            max_cost_usd: a.max_cost_usd,
            price: a.price.as_deref().map(str::parse::<Price>).transpose()?,
            max_tokens: a.max_tokens,
            context_window_tokens: a.context_window_tokens,
            context_window_auto: a.context_window_auto,
            tool_choice,
            stream: a.stream,
            output_limit_bytes: a.output_limit_bytes,
            system_prompt,
            command_env: command_env(&a.env)?,
            env_flag_names: a
                .env
                .iter()
                .filter_map(|p| p.split_once('=').map(|(k, _)| k.to_string()))
                .collect(),
            policy: Policy::new(a.default_deny, &a.deny)?,
            deny: a.deny.clone(),
            default_deny: a.default_deny,
            tools,
            run_dir: self.run_dir.clone(),
            json: self.json,
            workspace: self.workspace.clone(),
            keep_workspace: self.keep_workspace,
            keep_background: self.keep_background,
            shell: a.shell,
            approve: self.approve,
        })
    }
    /// The numbers that must be positive or in range.
    fn check_numbers(&self) -> Result<(), ConfigError> {
        let a = &self.agent;
        let sb = &self.sandbox;
        positive("timeout", a.timeout_secs as f64)?;
        positive("max-command-timeout", a.max_command_timeout_secs as f64)?;
        if a.max_command_timeout_secs < a.timeout_secs {
            return Err(ConfigError::MaxBelowTimeout {
                timeout: a.timeout_secs,
                max: a.max_command_timeout_secs,
            });
        }
        positive("model-timeout", a.model_timeout_secs as f64)?;
        positive("max-steps", a.max_steps as f64)?;
        positive("max-tokens", a.max_tokens as f64)?;
        positive("context-window", a.context_window_tokens as f64)?;
        if let Some(t) = self.max_time_secs {
            positive("max-time", t as f64)?;
            if t > MAX_RUN_TIME_SECS {
                return Err(ConfigError::OutOfRange {
                    flag: "max-time",
                    what: "at most a week (604800 seconds)",
                    value: t.to_string(),
                });
            }
        }
        positive("cpus", sb.cpus)?;
        positive("pids-limit", sb.pids_limit as f64)?;
        if a.output_limit_bytes < 100 {
            return Err(ConfigError::OutOfRange {
                flag: "output-limit",
                what: "at least 100 bytes",
                value: a.output_limit_bytes.to_string(),
            });
        }
        if let Some(c) = a.max_cost_usd {
            positive("max-cost", c)?;
        }
        Ok(())
    }
}

impl Config {
    /// The environment commands get from the runner with this executor
    /// (its names are recorded in the run's header).
    pub fn effective_env(&self) -> Vec<(String, String)> {
        if self.executor.on_host() {
            self.command_env.clone()
        } else {
            self.container_env()
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

/// The smallest `--disk`.
const MIN_DISK_BYTES: u64 = 16 << 20;
/// The smallest `--memory`.
const MIN_MEMORY_BYTES: i64 = 6 << 20;

/// Parses `--disk`: a size of at least 16 MiB, or `unlimited`.
pub fn parse_disk(s: &str) -> Result<Option<u64>, ConfigError> {
    if matches!(s.trim().to_ascii_lowercase().as_str(), "unlimited" | "none") {
        return Ok(None);
    }
    match parse_size(s) {
        Some(b) if b >= MIN_DISK_BYTES as f64 && b <= u64::MAX as f64 => {
            Ok(Some(crate::convert::u64_from_f64(b)))
        }
        _ => Err(ConfigError::BadDisk(s.to_string())),
    }
}

/// Parses sizes like `512m`, `2g`, `1.5G`, `1048576`.
pub fn parse_memory(s: &str) -> Result<i64, ConfigError> {
    let bad = || ConfigError::BadMemory(s.to_string());
    let bytes = parse_size(s).ok_or_else(bad)?;
    if bytes < MIN_MEMORY_BYTES as f64 || bytes > i64::MAX as f64 {
        return Err(bad());
    }
    Ok(crate::convert::i64_from_f64(bytes))
}

/// A memory limit already in bytes (a task's), under the same bounds as
/// `--memory`.
pub fn memory_bytes(bytes: i64) -> Result<i64, ConfigError> {
    if bytes < MIN_MEMORY_BYTES {
        return Err(ConfigError::BadMemory(bytes.to_string()));
    }
    Ok(bytes)
}

/// A disk size already in bytes (a task's), under the same bounds as
/// `--disk`.
pub fn disk_bytes(bytes: u64) -> Result<Option<u64>, ConfigError> {
    if bytes < MIN_DISK_BYTES {
        return Err(ConfigError::BadDisk(bytes.to_string()));
    }
    Ok(Some(bytes))
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
        let args = |env: &[&str]| {
            let mut b = ConfigBuilder::default();
            b.agent.env = env.iter().map(|s| s.to_string()).collect();
            b.build().expect("valid")
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
    fn the_typed_defaults_are_the_sandbox_contract_s() {
        assert_eq!(
            parse_memory(DEFAULT_MEMORY).ok(),
            Some(crate::exec::backend::DEFAULT_MEMORY_BYTES)
        );
        assert_eq!(
            parse_disk(DEFAULT_DISK).ok(),
            Some(Some(crate::exec::backend::DEFAULT_DISK_BYTES))
        );
    }

    #[test]
    fn tool_lists() {
        use ToolKind::*;
        assert_eq!(parse_tools("bash").ok(), Some(vec![Bash]));
        assert_eq!(parse_tools("bash,edit").ok(), Some(vec![Bash, Edit]));
        assert_eq!(
            parse_tools(" edit , bash,edit").ok(),
            Some(vec![Edit, Bash])
        );
        assert_eq!(parse_tools("edit").ok(), Some(vec![Edit]));
        assert!(
            matches!(parse_tools("bash,python"), Err(ConfigError::UnknownTool(n)) if n == "python")
        );
        assert!(matches!(parse_tools(" , "), Err(ConfigError::NoTools)));
        assert!(
            ConfigError::NoTools
                .hint()
                .is_some_and(|h| h.contains("bash, edit"))
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
