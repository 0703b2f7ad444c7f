//! Command-line flags, their environment variables and help text.
//! Precedence: flag > environment > `.env` in the working directory.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Runs an LLM agent on a task, with every command in a sandbox.
#[derive(Debug, Parser)]
#[command(
    name = "runner",
    version,
    about = "Run an LLM agent on a task; every command it runs goes to a sandbox.",
    args_conflicts_with_subcommands = true,
    after_help = "Exit codes: 0 completed, 1 ended by a limit or a refusal, 2 usage, configuration or infrastructure error, 130 interrupted."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands besides running a task.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Remove containers and other objects left by runs whose runner is gone or expired.
    Gc(GcArgs),
    /// Run a suite of Harbor-format tasks, each in its own sandbox, grade each in a fresh one, and report.
    Eval(Box<EvalArgs>),
}

/// What plays the agent in `runner eval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentKind {
    /// The runner loop with the configured model.
    Model,
    /// The task's reference solution, solution/solve.sh.
    Oracle,
    /// Nothing: checks that the untouched start fails.
    Nop,
}

impl AgentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Model => "model",
            AgentKind::Oracle => "oracle",
            AgentKind::Nop => "nop",
        }
    }
}

/// Flags of `runner eval`.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Exit codes: 0 pass rate >= --min-pass-rate, 1 below it, 2 an infrastructure error (with --fail-on-error, the default) or a usage error, 130 interrupted."
)]
pub struct EvalArgs {
    /// Task directories, or directories whose subdirectories are tasks.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// What plays the agent.
    #[arg(long = "agent", value_name = "AGENT", value_enum, default_value_t = AgentKind::Model)]
    pub agent_kind: AgentKind,

    #[command(flatten)]
    pub agent: AgentArgs,

    /// Attempts running at once.
    #[arg(long, short = 'j', default_value_t = 1)]
    pub jobs: usize,

    /// Attempts per task (for pass@k and the mean reward).
    #[arg(long, default_value_t = 1)]
    pub attempts: u32,

    /// Only tasks whose name matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub filter: Vec<String>,

    /// Give a network to the tasks that allow internet (otherwise none has one).
    #[arg(long)]
    pub allow_internet: bool,

    /// CPUs of each sandbox, overriding the tasks' `cpus`.
    #[arg(long)]
    pub cpus: Option<f64>,

    /// Memory of each sandbox (512m, 2g), overriding the tasks' `memory_mb`.
    #[arg(long)]
    pub memory: Option<String>,

    /// Agent timeout in seconds, overriding the tasks' `[agent] timeout_sec`.
    #[arg(long)]
    pub agent_timeout: Option<f64>,

    /// Verifier timeout in seconds, overriding the tasks' `[verifier] timeout_sec`.
    #[arg(long)]
    pub verifier_timeout: Option<f64>,

    /// Most processes in each sandbox.
    #[arg(long, default_value_t = crate::config::DEFAULT_PIDS_LIMIT)]
    pub pids_limit: i64,

    /// User of the agent's commands (uid[:gid]); the verifier always runs as root.
    #[arg(long, default_value = crate::config::DEFAULT_USER)]
    pub user: String,

    /// Make the agent's root filesystem writable (grading never sees it).
    #[arg(long)]
    pub writable_rootfs: bool,

    /// Most each attempt may put on the host's disk (512m, 10g, or `unlimited`).
    #[arg(long, default_value = crate::config::DEFAULT_DISK)]
    pub disk: String,

    /// Container runtime of the agent's and the verifier's sandboxes (runsc for gVisor, crun...; default: the engine's).
    #[arg(long, env = "RUNNER_RUNTIME", value_name = "NAME")]
    pub runtime: Option<String>,

    /// Where each attempt's run directory goes: DIR/<task>/<attempt>/ (default: runs/eval-<time>).
    #[arg(long)]
    pub output_dir: Option<PathBuf>,

    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Write a Markdown summary here (also appended to $GITHUB_STEP_SUMMARY when set).
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,

    /// Lowest pass rate (0..1) that still exits 0.
    #[arg(long, default_value_t = 1.0)]
    pub min_pass_rate: f64,

    /// Exit 2 when any infrastructure error happened (`--fail-on-error=false` to only count passes).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub fail_on_error: bool,
}

/// Flags of `runner gc`.
#[derive(Debug, Args)]
pub struct GcArgs {}

/// Which model API to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Provider {
    /// The Anthropic Messages API.
    Anthropic,
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp, Ollama).
    Openai,
    /// Replay turns from --script, no network.
    Scripted,
}

/// Where commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    /// A hardened container per run (the default).
    Docker,
    /// A child process on this host: NOT a sandbox.
    Local,
}

/// The container's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Network {
    None,
    Bridge,
}

/// How the workspace reaches the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkspaceMode {
    /// Bind mount for a local engine, copy for a remote one.
    Auto,
    Bind,
    Copy,
}

/// Flags of a run.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The task. `-` reads it from stdin; none on a terminal starts a conversation.
    pub task: Option<String>,

    #[command(flatten)]
    pub agent: AgentArgs,

    /// Where commands run.
    #[arg(long, env = "RUNNER_EXECUTOR", value_enum, default_value_t = ExecutorKind::Docker)]
    pub executor: ExecutorKind,

    /// Sandbox image (docker executor).
    #[arg(long, env = "RUNNER_IMAGE", default_value = crate::config::DEFAULT_IMAGE)]
    pub image: String,

    /// Stop after this many seconds for the whole run.
    #[arg(long, env = "RUNNER_MAX_TIME")]
    pub max_time: Option<u64>,

    /// Run directory (default: ./runs/<timestamp-id>).
    #[arg(long, env = "RUNNER_RUN_DIR")]
    pub run_dir: Option<PathBuf>,

    /// Print events as JSON lines on stdout.
    #[arg(long)]
    pub json: bool,

    /// Working directory of the local executor, or the directory mounted at /workspace (default: a scratch directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,

    /// Keep the scratch workspace after the run and print its path.
    #[arg(long)]
    pub keep_workspace: bool,

    /// Leave processes a command started in the background running after it exits (default: killed, and the model is told).
    #[arg(long)]
    pub keep_background: bool,

    /// How the workspace reaches the container.
    #[arg(long, value_enum, default_value_t = WorkspaceMode::Auto)]
    pub workspace_mode: WorkspaceMode,

    /// Container network (none by default).
    #[arg(long, value_enum, default_value_t = Network::None)]
    pub network: Network,

    /// CPUs for the container.
    #[arg(long, default_value_t = crate::config::DEFAULT_CPUS)]
    pub cpus: f64,

    /// Memory limit of the container, e.g. 512m, 2g.
    #[arg(long, default_value = crate::config::DEFAULT_MEMORY)]
    pub memory: String,

    /// Most processes in the container.
    #[arg(long, default_value_t = crate::config::DEFAULT_PIDS_LIMIT)]
    pub pids_limit: i64,

    /// User inside the container (uid[:gid]).
    #[arg(long, default_value = crate::config::DEFAULT_USER)]
    pub user: String,

    /// Make the container's root filesystem writable (for tasks that install packages).
    #[arg(long)]
    pub writable_rootfs: bool,

    /// Most the run may put on the host's disk (512m, 10g, or `unlimited`): the workspace lives in a filesystem of this size and the command outputs share a budget of it.
    #[arg(long, env = "RUNNER_DISK", default_value = crate::config::DEFAULT_DISK)]
    pub disk: String,

    /// Container runtime the engine has registered (runsc for gVisor, crun...; default: the engine's).
    #[arg(long, env = "RUNNER_RUNTIME", value_name = "NAME")]
    pub runtime: Option<String>,
}

/// Flags of the model and the agent loop, shared by a run and `runner eval`.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// Model API.
    #[arg(long, env = "RUNNER_PROVIDER", value_enum, default_value_t = Provider::Anthropic)]
    pub provider: Provider,

    /// Model name.
    #[arg(long, env = "RUNNER_MODEL")]
    pub model: Option<String>,

    /// Base URL of the model API (default: ANTHROPIC_BASE_URL or OPENAI_BASE_URL, then the vendor's).
    #[arg(long, env = "RUNNER_BASE_URL")]
    pub base_url: Option<String>,

    /// Script of turns for --provider scripted.
    #[arg(long, env = "RUNNER_SCRIPT")]
    pub script: Option<PathBuf>,

    /// Per-command timeout in seconds (the model may ask for another, up to --max-command-timeout).
    #[arg(long, env = "RUNNER_TIMEOUT", default_value_t = crate::config::DEFAULT_TIMEOUT_SECS)]
    pub timeout: u64,

    /// The longest per-command timeout the model may ask for, in seconds.
    #[arg(long, env = "RUNNER_MAX_COMMAND_TIMEOUT", default_value_t = crate::config::DEFAULT_MAX_COMMAND_TIMEOUT_SECS)]
    pub max_command_timeout: u64,

    /// Stop after this many model calls.
    #[arg(long, env = "RUNNER_MAX_STEPS", default_value_t = crate::config::DEFAULT_MAX_STEPS)]
    pub max_steps: u32,

    /// Stop when the spend reaches this many US dollars.
    #[arg(long, env = "RUNNER_MAX_COST")]
    pub max_cost: Option<f64>,

    /// Price override in USD per million tokens: "INPUT,OUTPUT[,CACHE_WRITE,CACHE_READ]".
    #[arg(long, env = "RUNNER_PRICE")]
    pub price: Option<String>,

    /// Most tokens per model reply.
    #[arg(long, env = "RUNNER_MAX_TOKENS", default_value_t = crate::config::DEFAULT_MAX_TOKENS)]
    pub max_tokens: u32,

    /// The model's context window in tokens; old tool outputs are elided near it.
    #[arg(long, env = "RUNNER_CONTEXT_WINDOW", default_value_t = crate::config::DEFAULT_CONTEXT_WINDOW_TOKENS)]
    pub context_window: u64,

    /// Bytes of each command's output shown to the model (head + tail).
    #[arg(long, env = "RUNNER_OUTPUT_LIMIT", default_value_t = crate::config::DEFAULT_OUTPUT_LIMIT_BYTES)]
    pub output_limit: usize,

    /// System prompt text (replaces the default).
    #[arg(long, conflicts_with = "system_file")]
    pub system: Option<String>,

    /// File holding the system prompt.
    #[arg(long)]
    pub system_file: Option<PathBuf>,

    /// Environment variable for commands, K=V (repeatable). Nothing else of runner's environment reaches them.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,

    /// Refuse commands matching this regular expression (repeatable).
    #[arg(long = "deny", value_name = "REGEX")]
    pub deny: Vec<String>,

    /// Drop the default deny list (rm -rf /, sudo, shutdown, ...).
    #[arg(long)]
    pub no_default_deny: bool,
}
