//! Command-line flags, their environment variables and help text.
//! Precedence: flag > environment > `.env` in the working directory.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::approve::ApproveMode;
pub use crate::backend_kind::BackendKind;
use crate::config::{
    AgentOptions, ConfigBuilder, DEFAULT_CONTEXT_WINDOW_TOKENS, DEFAULT_DISK,
    DEFAULT_MAX_COMMAND_TIMEOUT_SECS, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOKENS, DEFAULT_MEMORY,
    DEFAULT_OUTPUT_LIMIT_BYTES, DEFAULT_SECCOMP, DEFAULT_TIMEOUT_SECS, DEFAULT_TOOLS,
    SandboxOptions,
};
use crate::eval::manifest::Shard;
use crate::eval::merge::MergeSettings;
use crate::eval::mode::GradingMode;
use crate::eval::settings::{AgentKind, EvalSettings};
use crate::exec::backend::{
    DEFAULT_CPUS, DEFAULT_IMAGE, DEFAULT_PIDS_LIMIT, DEFAULT_USER, Network, WorkspaceMode,
};
use crate::exec::shell::ShellMode;
use crate::model::http::DEFAULT_IDLE_READ_TIMEOUT_SECS;
use crate::model::provider::Provider;

pub mod generate;
use generate::{CompletionsArgs, ManArgs};
pub mod recorded;
mod value_enums;

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
    /// Write one self-contained HTML page (no network needed) for a run directory or an eval output directory.
    View(ViewArgs),
    /// Continue a run that completed, hit a limit or was interrupted: its conversation is rebuilt from RUN_DIR's trajectory, MESSAGE added, and the loop goes on in a fresh sandbox on the same workspace, appending to the same trajectory.
    Continue(Box<ContinueArgs>),
    /// Print the completion script for SHELL on stdout (bash: `runner completions bash > /etc/bash_completion.d/runner`; `make install` installs bash's, zsh's and fish's).
    Completions(CompletionsArgs),
    /// Write runner's man pages (roff): runner.1 on stdout, or runner.1 and one page per subcommand into DIR (`make install` does).
    #[command(hide = true)]
    Man(ManArgs),
}

/// Flags of `runner continue`. The model, limits, tools and image not
/// given here are the run's own, as its trajectory records them; what
/// bounds the sandbox or decides where the API key goes is only ever
/// these flags (or their defaults), compared with the record.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "The limits (--max-steps, --max-time, --max-cost) count afresh from the continuation: by default the run's own values. --env pairs are not recorded (their values may be secrets): give them again.\n\nThe sandbox's settings (--executor, --workspace, --network, --allow-host, --user, --disk, --writable-rootfs, --runtime...) and --base-url are never taken from the run directory: they are this command line's (or the defaults), and a run started with looser ones is refused with the flags to pass.\n\nExit codes: as a run: 0 completed, 1 ended by a limit or a refusal, 2 usage, configuration or infrastructure error (a directory that is no run, a trajectory of a newer format or of another provider, a workspace that is gone), 130 interrupted."
)]
pub struct ContinueArgs {
    /// The run's directory (it holds trajectory.jsonl).
    #[arg(value_name = "RUN_DIR")]
    pub run_dir: PathBuf,

    /// The next user message (default: "Continue.").
    #[arg(value_name = "MESSAGE")]
    pub message: Option<String>,

    /// Model API, when not the run's own (needed to continue with another provider than the one RUNNER_PROVIDER names).
    #[arg(long, value_enum)]
    pub provider: Option<Provider>,

    /// Model name (default: the run's own; with another --provider, that provider's default).
    #[arg(long)]
    pub model: Option<String>,

    /// Base URL of the model API (default: as for a run; a run started with another is refused).
    #[arg(long, env = "RUNNER_BASE_URL")]
    pub base_url: Option<String>,

    /// Script of turns for --provider scripted (default: the run's own script, replayed from its first turn).
    #[arg(long)]
    pub script: Option<PathBuf>,

    /// Stop after this many more model calls (default: the run's --max-steps).
    #[arg(long, allow_negative_numbers = true, value_parser = positive::<u32>)]
    pub max_steps: Option<u32>,

    /// Stop after this many seconds of the continuation (default: the run's --max-time).
    #[arg(long, allow_negative_numbers = true, value_parser = positive::<u64>)]
    pub max_time: Option<u64>,

    /// Stop when the continuation's spend reaches this many US dollars (default: the run's --max-cost).
    #[arg(long, allow_negative_numbers = true)]
    pub max_cost: Option<f64>,

    /// Price override in USD per million tokens: "INPUT,OUTPUT[,CACHE_WRITE,CACHE_READ]".
    #[arg(long)]
    pub price: Option<String>,

    /// Environment variable for commands, K=V (repeatable): the run's --env pairs are not recorded.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,

    /// The directory to continue on (needed: the recorded one is never taken from the run directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    /// Where commands run (default: as for a run, docker).
    #[arg(long, env = "RUNNER_EXECUTOR", value_enum)]
    pub executor: Option<BackendKind>,

    /// Sandbox image (default: the run's own).
    #[arg(long, env = "RUNNER_IMAGE")]
    pub image: Option<String>,

    /// Container network (default: as for a run, none).
    #[arg(long, value_enum)]
    pub network: Option<Network>,

    /// Let the sandbox reach this host name through the filtering proxy (repeatable).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,

    /// The engine network the egress proxy reaches out through.
    #[arg(long, value_name = "NAME")]
    pub egress_network: Option<String>,

    /// CPUs for the container.
    #[arg(long, allow_negative_numbers = true)]
    pub cpus: Option<f64>,

    /// Memory limit of the container.
    #[arg(long)]
    pub memory: Option<String>,

    /// Most processes in the container.
    #[arg(long, allow_negative_numbers = true)]
    pub pids_limit: Option<i64>,

    /// User inside the container (default: as for a run).
    #[arg(long)]
    pub user: Option<String>,

    /// Make the container's root filesystem writable.
    #[arg(long)]
    pub writable_rootfs: bool,

    /// How the workspace reaches the container (default: as for a run).
    #[arg(long, value_enum)]
    pub workspace_mode: Option<WorkspaceMode>,

    /// Most the continuation may put on the host's disk (default: as for a run).
    #[arg(long, env = "RUNNER_DISK")]
    pub disk: Option<String>,

    /// Container runtime (default: the engine's).
    #[arg(long, env = "RUNNER_RUNTIME", value_name = "NAME")]
    pub runtime: Option<String>,

    /// Leave processes a command started in the background running.
    #[arg(long)]
    pub keep_background: bool,

    /// Drop the default deny list.
    #[arg(long)]
    pub no_default_deny: bool,

    /// Which commands a person is asked about before they run (default: the run's own --approve).
    #[arg(long, value_enum)]
    pub approve: Option<ApproveMode>,

    /// System-call filter of the continuation's sandbox: `runner` (the default), `default` (the engine's: a loosening) or a JSON profile FILE (a loosening); never taken from the run directory.
    #[arg(long, value_name = "PROFILE", default_value = DEFAULT_SECCOMP)]
    pub seccomp: String,

    /// Print events as JSON lines on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `runner view`.
#[derive(Debug, Clone, Args)]
pub struct ViewArgs {
    /// A run directory (holding trajectory.jsonl) or an eval output directory (holding suite.json).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// Where to write the page (default: DIR/view.html).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Open the page with xdg-open once written.
    #[arg(long)]
    pub open: bool,
}

/// Flags of `runner eval`.
#[derive(Debug, Clone, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Exit codes: 0 pass rate >= --min-pass-rate, 1 below it or a flagged pass (without --accept-flagged), 2 an infrastructure error (with --fail-on-error, the default) or a usage error, 130 interrupted."
)]
pub struct EvalArgs {
    /// `runner eval merge`; none: run the suite at PATH.
    #[command(subcommand)]
    pub action: Option<EvalAction>,

    /// Task directories, or directories whose subdirectories are tasks (none with --resume DIR: the ones DIR's suite.json recorded).
    #[arg(required_unless_present = "resume", value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// What plays the agent.
    #[arg(long = "agent", value_name = "AGENT", value_enum, default_value_t = AgentKind::Model)]
    pub agent_kind: AgentKind,

    #[command(flatten)]
    pub agent: AgentArgs,

    /// Attempts running at once.
    #[arg(long, short = 'j', default_value_t = 1, allow_negative_numbers = true, value_parser = positive::<usize>)]
    pub jobs: usize,

    /// Attempts per task (for pass@k and the mean reward).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = positive::<u32>)]
    pub attempts: u32,

    /// Only tasks whose name matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub filter: Vec<String>,

    /// Give a network to the tasks that allow internet (otherwise none has one): `public` tasks the bridge, `allowlist` tasks only their `allowed_hosts` through a filtering proxy.
    #[arg(long)]
    pub allow_internet: bool,

    /// The engine network the egress proxy of allowlisted tasks reaches out through (default: the engine's bridge).
    #[arg(long, value_name = "NAME")]
    pub egress_network: Option<String>,

    /// CPUs of each sandbox, overriding the tasks' `cpus`.
    #[arg(long, allow_negative_numbers = true)]
    pub cpus: Option<f64>,

    /// Memory of each sandbox (512m, 2g), overriding the tasks' `memory_mb`.
    #[arg(long)]
    pub memory: Option<String>,

    /// Agent timeout in seconds, overriding the tasks' `[agent] timeout_sec`.
    #[arg(long, allow_negative_numbers = true)]
    pub agent_timeout: Option<f64>,

    /// Verifier timeout in seconds, overriding the tasks' `[verifier] timeout_sec`.
    #[arg(long, allow_negative_numbers = true)]
    pub verifier_timeout: Option<f64>,

    /// Most processes in each sandbox.
    #[arg(long, default_value_t = DEFAULT_PIDS_LIMIT, allow_negative_numbers = true)]
    pub pids_limit: i64,

    /// User of the agent's commands (name, uid, name:group or uid:gid), overriding every task's `[agent] user` and its image's USER (the default, as in Harbor: root when the image sets none).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,

    /// Let tasks' `${NAME}` env templates take this secret-named variable of runner's environment (an LLM judge's API key); by default a task naming one is refused (repeatable).
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,

    /// Keep the agent's root filesystem read-only (Harbor's tasks expect to write anywhere: /etc, /usr/local, $HOME; runner's own runs are read-only by default).
    #[arg(long)]
    pub read_only_rootfs: bool,

    /// Where tests/test.sh runs, overriding each task's `[verifier] environment_mode`: shared (the agent's own container, its services running; Harbor's default), separate (a fresh verifier container with the task's artifacts), snapshot (a fresh container from a commit of the agent's), isolated (the pristine image plus only the working directory).
    #[arg(long, value_name = "MODE", value_parser = parse_grading)]
    pub grading: Option<GradingMode>,

    /// Most each attempt may put on the host's disk (512m, 10g, or `unlimited`).
    #[arg(long, default_value = DEFAULT_DISK)]
    pub disk: String,

    /// Container runtime of the agent's and the verifier's sandboxes (runsc for gVisor, crun...; default: the engine's).
    #[arg(long, env = "RUNNER_RUNTIME", value_name = "NAME")]
    pub runtime: Option<String>,

    /// System-call filter of every container: `runner` (runner's profile: the engine's default without open_by_handle_at, name_to_handle_at, io_uring, the key calls, bpf, perf_event_open, userfaultfd), `default` (the engine's own: a loosening), or FILE, a JSON seccomp profile of yours (a loosening).
    #[arg(long, value_name = "PROFILE", default_value = DEFAULT_SECCOMP)]
    pub seccomp: String,

    /// Where the agent and the verifier run. `local` runs every task's code, solve.sh and test.sh included, on this host as you: NOT a sandbox, only for testing runner (a task's /tests, /logs and /solution are mapped under a directory of the attempt's, so its scripts must name them through RUNNER_SANDBOX_ROOT).
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub executor: BackendKind,

    /// Where each attempt's run directory goes: DIR/<task>/<attempt>/ (default: runs/eval-<time>).
    #[arg(long, conflicts_with = "resume")]
    pub output_dir: Option<PathBuf>,

    /// Continue the suite whose output directory is DIR: finished attempts are kept, interrupted, errored and never-started ones run, and the reports cover all of them. Without task paths, the paths and the flags that change no sandbox, key or file are taken from DIR's suite.json; give the others (--executor, --base-url, --env, the sandbox's limits, the reports) again.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,

    /// Run an attempt again, up to N more times with backoff, when it ends in an infrastructure error (engine, image, sandbox, the model API after its own retries); every try is kept.
    #[arg(long, value_name = "N", default_value_t = 0, allow_negative_numbers = true, value_parser = zero_or_more::<u32>)]
    pub retry_errors: u32,

    /// Run only part I of N of the suite (1-based): the tasks at positions I-1, I-1+N, ... of the suite's name order, all attempts of a task together. Merge the parts with `runner eval merge`.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,

    /// Stop starting attempts once the suite's attempts have cost this many USD in all; those not started are recorded as skipped (running ones finish, each within --max-cost).
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub suite_max_cost: Option<f64>,

    /// Also write the results in Harbor's job layout here (DIR/result.json, DIR/<task>__a<n>/result.json, verifier/, agent/), for Harbor's own tools (`harbor view`); DIR must not exist or be empty (with --resume, the layout runner wrote there is replaced).
    #[arg(long, value_name = "DIR")]
    pub harbor_job: Option<PathBuf>,

    /// Write the suite's HTML page here (the page `runner view DIR` writes).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// Grade each flagged pass (a pass whose tamper signals are evidence against the verifier) again in a fresh sandbox of the pristine image with only the workspace, as `--grading isolated` does; both verdicts are reported and the regrade's decides the exit code.
    #[arg(long)]
    pub regrade_flagged: bool,

    #[command(flatten)]
    pub reports: ReportArgs,
}

/// The reports of `runner eval` and `runner eval merge`, and their exit rules.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Write the JSON report here (`-`: on stdout, which otherwise stays empty; all human text goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Write a Markdown summary here (also appended to $GITHUB_STEP_SUMMARY when set).
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,

    /// Lowest pass rate (0..1) that still exits 0.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub min_pass_rate: f64,

    /// Exit 2 when any infrastructure error happened (`--fail-on-error=false` to only count passes).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub fail_on_error: bool,

    /// Count flagged passes (passes whose tamper signals are evidence against the verifier itself) as passes for the exit code; without it any flagged pass no regrade judged exits 1. They are marked in every report either way.
    #[arg(long)]
    pub accept_flagged: bool,
}

/// What `runner eval` does besides running a suite.
#[derive(Debug, Clone, Subcommand)]
pub enum EvalAction {
    /// Merge the output directories of a suite's shards (`runner eval --shard I/N --output-dir DIR`) into one set of reports; refuses shards of different suites or settings.
    Merge(MergeArgs),
}

/// Flags of `runner eval merge`.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Exit codes: as runner eval: 0 pass rate >= --min-pass-rate, 1 below it or a flagged pass (without --accept-flagged), 2 an infrastructure error (with --fail-on-error) or directories that cannot be merged, 130 a shard was stopped before all its attempts ended."
)]
pub struct MergeArgs {
    /// The shards' output directories (each holds suite.json), or one whole-suite directory.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,

    /// Report the attempts of shards not given as not run, instead of refusing.
    #[arg(long)]
    pub allow_missing: bool,

    #[command(flatten)]
    pub reports: ReportArgs,
}

impl MergeArgs {
    /// The merge's settings these flags describe.
    pub fn settings(&self) -> MergeSettings {
        MergeSettings {
            dirs: self.dirs.clone(),
            json: self.reports.json.clone(),
            junit: self.reports.junit.clone(),
            summary: self.reports.summary.clone(),
            min_pass_rate: self.reports.min_pass_rate,
            fail_on_error: self.reports.fail_on_error,
            accept_flagged: self.reports.accept_flagged,
            allow_missing: self.allow_missing,
        }
    }
}

/// Flags of `runner gc`.
#[derive(Debug, Args)]
pub struct GcArgs {}

/// Flags of a run.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The task. `-` reads it from stdin; none on a terminal starts a conversation.
    pub task: Option<String>,

    #[command(flatten)]
    pub agent: AgentArgs,

    /// Where commands run.
    #[arg(long, env = "RUNNER_EXECUTOR", value_enum, default_value_t = BackendKind::Docker)]
    pub executor: BackendKind,

    /// Sandbox image (docker executor).
    #[arg(long, env = "RUNNER_IMAGE", default_value = DEFAULT_IMAGE)]
    pub image: String,

    /// Stop after this many seconds for the whole run.
    #[arg(long, env = "RUNNER_MAX_TIME", allow_negative_numbers = true, value_parser = positive::<u64>)]
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

    /// Let the sandbox reach this host name (repeatable; `*.example.com` for every name below example.com) through a filtering proxy, and nothing else. Refuses IP addresses, ports and URLs.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,

    /// The engine network the egress proxy of --allow-host reaches out through (default: the engine's bridge).
    #[arg(long, value_name = "NAME")]
    pub egress_network: Option<String>,

    /// CPUs for the container.
    #[arg(long, default_value_t = DEFAULT_CPUS, allow_negative_numbers = true)]
    pub cpus: f64,

    /// Memory limit of the container, e.g. 512m, 2g.
    #[arg(long, default_value = DEFAULT_MEMORY)]
    pub memory: String,

    /// Most processes in the container.
    #[arg(long, default_value_t = DEFAULT_PIDS_LIMIT, allow_negative_numbers = true)]
    pub pids_limit: i64,

    /// User inside the container (uid[:gid]).
    #[arg(long, default_value = DEFAULT_USER)]
    pub user: String,

    /// Make the container's root filesystem writable (for tasks that install packages).
    #[arg(long)]
    pub writable_rootfs: bool,

    /// Most the run may put on the host's disk (512m, 10g, or `unlimited`): the workspace lives in a filesystem of this size and the command outputs share a budget of it.
    #[arg(long, env = "RUNNER_DISK", default_value = DEFAULT_DISK)]
    pub disk: String,

    /// Container runtime the engine has registered (runsc for gVisor, crun...; default: the engine's).
    #[arg(long, env = "RUNNER_RUNTIME", value_name = "NAME")]
    pub runtime: Option<String>,

    /// System-call filter of every container: `runner` (runner's profile: the engine's default without open_by_handle_at, name_to_handle_at, io_uring, the key calls, bpf, perf_event_open, userfaultfd), `default` (the engine's own: a loosening), or FILE, a JSON seccomp profile of yours (a loosening).
    #[arg(long, value_name = "PROFILE", default_value = DEFAULT_SECCOMP)]
    pub seccomp: String,

    /// Ask a person on the terminal before commands run: `risky` ones (the deny list's patterns, package installs, network tools, rm -r, writes outside the workspace...; see the README) or `always`. A prompt, not a security boundary; needs stdin and stderr on a terminal.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = ApproveMode::Never)]
    pub approve: ApproveMode,
}

/// Flags of the model and the agent loop, shared by a run and `runner eval`.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// Model API.
    #[arg(long, env = "RUNNER_PROVIDER", value_enum, default_value_t = Provider::Anthropic)]
    pub provider: Provider,

    #[arg(long, env = "RUNNER_MODEL", help = model_help())]
    pub model: Option<String>,

    /// Base URL of the model API (default: ANTHROPIC_BASE_URL or OPENAI_BASE_URL, then the vendor's).
    #[arg(long, env = "RUNNER_BASE_URL")]
    pub base_url: Option<String>,

    /// Script of turns for --provider scripted.
    #[arg(long, env = "RUNNER_SCRIPT")]
    pub script: Option<PathBuf>,

    /// Per-command timeout in seconds (the model may ask for another, up to --max-command-timeout).
    #[arg(long, env = "RUNNER_TIMEOUT", default_value_t = DEFAULT_TIMEOUT_SECS, allow_negative_numbers = true, value_parser = positive::<u64>)]
    pub timeout: u64,

    /// The longest per-command timeout the model may ask for, in seconds.
    #[arg(long, env = "RUNNER_MAX_COMMAND_TIMEOUT", default_value_t = DEFAULT_MAX_COMMAND_TIMEOUT_SECS, allow_negative_numbers = true, value_parser = positive::<u64>)]
    pub max_command_timeout: u64,

    /// Seconds a model API response may stay silent (no header, no data) before the attempt fails and is retried.
    #[arg(long, env = "RUNNER_MODEL_TIMEOUT", default_value_t = DEFAULT_IDLE_READ_TIMEOUT_SECS, allow_negative_numbers = true, value_parser = positive::<u64>)]
    pub model_timeout: u64,

    /// Stop after this many model calls.
    #[arg(long, env = "RUNNER_MAX_STEPS", default_value_t = DEFAULT_MAX_STEPS, allow_negative_numbers = true, value_parser = positive::<u32>)]
    pub max_steps: u32,

    /// Stop when the spend reaches this many US dollars.
    #[arg(long, env = "RUNNER_MAX_COST", allow_negative_numbers = true)]
    pub max_cost: Option<f64>,

    /// Price override in USD per million tokens: "INPUT,OUTPUT[,CACHE_WRITE,CACHE_READ]".
    #[arg(long, env = "RUNNER_PRICE")]
    pub price: Option<String>,

    /// Most tokens per model reply.
    #[arg(long, env = "RUNNER_MAX_TOKENS", default_value_t = DEFAULT_MAX_TOKENS, allow_negative_numbers = true, value_parser = positive::<u32>)]
    pub max_tokens: u32,

    /// The model's context window in tokens, or `auto`: asked of the server (llama.cpp's /props, vLLM's /v1/models), the default when it does not say. Old tool outputs are elided near it.
    #[arg(long, env = "RUNNER_CONTEXT_WINDOW", value_name = "TOKENS|auto", default_value_t = ContextWindowFlag::Tokens(DEFAULT_CONTEXT_WINDOW_TOKENS), allow_negative_numbers = true, value_parser = context_window_flag)]
    pub context_window: ContextWindowFlag,

    /// Whether the model may (auto), must (required), must not (none) call a tool, or must call the one named (bash, edit); unset sends nothing (the API's default, auto).
    #[arg(
        long,
        env = "RUNNER_TOOL_CHOICE",
        value_name = "auto|required|none|NAME"
    )]
    pub tool_choice: Option<String>,

    /// Ask the model API for one JSON body per reply instead of a stream (some servers cannot stream tool calls).
    #[arg(long, env = "RUNNER_NO_STREAM")]
    pub no_stream: bool,

    /// Bytes of each command's output shown to the model (head + tail).
    #[arg(long, env = "RUNNER_OUTPUT_LIMIT", default_value_t = DEFAULT_OUTPUT_LIMIT_BYTES, allow_negative_numbers = true, value_parser = at_least_100::<usize>)]
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

    /// Tools offered to the model, a comma list of `bash` (shell commands) and `edit` (Anthropic's text editor, str_replace_based_edit_tool).
    #[arg(long, env = "RUNNER_TOOLS", value_name = "LIST", default_value = DEFAULT_TOOLS)]
    pub tools: String,
    /// Whether `cd` and exported variables carry over between commands. Every command still runs in a new process, killed with all it started at its timeout.
    #[arg(long, env = "RUNNER_SHELL", value_enum, default_value_t = ShellMode::Fresh)]
    pub shell: ShellMode,
}

impl AgentArgs {
    /// The model and loop options these flags give.
    pub fn options(&self) -> AgentOptions {
        AgentOptions {
            provider: self.provider,
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            script: self.script.clone(),
            timeout_secs: self.timeout,
            max_command_timeout_secs: self.max_command_timeout,
            model_timeout_secs: self.model_timeout,
            max_steps: self.max_steps,
            max_cost_usd: self.max_cost,
            price: self.price.clone(),
            max_tokens: self.max_tokens,
            context_window_tokens: match self.context_window {
                ContextWindowFlag::Tokens(n) => n,
                ContextWindowFlag::Auto => DEFAULT_CONTEXT_WINDOW_TOKENS,
            },
            context_window_auto: self.context_window == ContextWindowFlag::Auto,
            tool_choice: self.tool_choice.clone(),
            stream: !self.no_stream,
            output_limit_bytes: self.output_limit,
            system: self.system.clone(),
            system_file: self.system_file.clone(),
            env: self.env.clone(),
            deny: self.deny.clone(),
            default_deny: !self.no_default_deny,
            tools: self.tools.clone(),
            shell: self.shell,
        }
    }
}

impl RunArgs {
    /// The configuration these flags describe, not yet validated.
    pub fn builder(&self) -> ConfigBuilder {
        ConfigBuilder {
            agent: self.agent.options(),
            sandbox: SandboxOptions {
                backend: self.executor,
                image: self.image.clone(),
                network: self.network,
                allowed_hosts: self.allow_host.clone(),
                egress_network: self.egress_network.clone(),
                cpus: self.cpus,
                memory: self.memory.clone(),
                pids_limit: self.pids_limit,
                user: self.user.clone(),
                writable_rootfs: self.writable_rootfs,
                workspace_mode: self.workspace_mode,
                disk: self.disk.clone(),
                runtime: self.runtime.clone(),
                seccomp: self.seccomp.clone(),
            },
            max_time_secs: self.max_time,
            run_dir: self.run_dir.clone(),
            json: self.json,
            workspace: self.workspace.clone(),
            keep_workspace: self.keep_workspace,
            keep_background: self.keep_background,
            approve: self.approve,
        }
    }
}

/// `--model`'s help: the default depends on the provider.
fn model_help() -> String {
    let of = |p: Provider| format!("{} for {}", p.info().default_model, p.info().name);
    format!(
        "Model name [default: {}, {}]",
        of(Provider::Anthropic),
        of(Provider::Openai)
    )
}

/// A whole number of at least 1 (clap's own parser says "invalid digit
/// found in string" of `-3`; this says the rule).
/// `--context-window`: a number of tokens, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextWindowFlag {
    Auto,
    Tokens(u64),
}

impl std::fmt::Display for ContextWindowFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContextWindowFlag::Auto => f.write_str("auto"),
            ContextWindowFlag::Tokens(n) => write!(f, "{n}"),
        }
    }
}

fn context_window_flag(s: &str) -> Result<ContextWindowFlag, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(ContextWindowFlag::Auto);
    }
    positive::<u64>(s)
        .map(ContextWindowFlag::Tokens)
        .map_err(|e| format!("{e}, or `auto`"))
}

fn positive<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    whole_at_least(s, 1, "must be greater than 0")
}

/// A whole number of at least 0.
fn zero_or_more<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    whole_at_least(s, 0, "must be 0 or more")
}

/// A whole number of at least 100 (`--output-limit`, in bytes).
fn at_least_100<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    whole_at_least(s, 100, "must be at least 100")
}

fn whole_at_least<T: TryFrom<u64>>(s: &str, min: u64, rule: &str) -> Result<T, String> {
    let n: i128 = s
        .trim()
        .parse()
        .map_err(|_| format!("not a whole number: {rule}"))?;
    if n < i128::from(min) {
        return Err(rule.to_string());
    }
    u64::try_from(n)
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| "too large".to_string())
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    Shard::parse(s)
}

fn parse_grading(s: &str) -> Result<GradingMode, String> {
    s.parse()
        .map_err(|e: crate::eval::mode::UnknownGradingMode| e.to_string())
}

impl EvalArgs {
    /// The suite's settings these flags describe, not yet validated.
    pub fn settings(&self) -> EvalSettings {
        EvalSettings {
            paths: self.paths.clone(),
            invocation: Vec::new(),
            agent_kind: self.agent_kind,
            agent: self.agent.options(),
            backend: self.executor,
            jobs: self.jobs,
            attempts: self.attempts,
            filter: self.filter.clone(),
            allow_internet: self.allow_internet,
            egress_network: self.egress_network.clone(),
            cpus: self.cpus,
            memory: self.memory.clone(),
            agent_timeout_secs: self.agent_timeout,
            verifier_timeout_secs: self.verifier_timeout,
            pids_limit: self.pids_limit,
            user: self.user.clone(),
            read_only_rootfs: self.read_only_rootfs,
            grading: self.grading,
            pass_env: self.pass_env.clone(),
            disk: self.disk.clone(),
            runtime: self.runtime.clone(),
            seccomp: self.seccomp.clone(),
            output_dir: self.output_dir.clone().or_else(|| self.resume.clone()),
            resume: self.resume.is_some(),
            retry_errors: self.retry_errors,
            shard: self.shard,
            suite_max_cost_usd: self.suite_max_cost,
            json: self.reports.json.clone(),
            junit: self.reports.junit.clone(),
            summary: self.reports.summary.clone(),
            harbor_job: self.harbor_job.clone(),
            html: self.html.clone(),
            min_pass_rate: self.reports.min_pass_rate,
            fail_on_error: self.reports.fail_on_error,
            accept_flagged: self.reports.accept_flagged,
            regrade_flagged: self.regrade_flagged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval_of(argv: &[&str]) -> EvalArgs {
        match Cli::try_parse_from(argv).unwrap().command {
            Some(Command::Eval(e)) => *e,
            other => panic!("not eval: {other:?}"),
        }
    }

    #[test]
    fn eval_takes_task_paths_as_before_and_merge_as_a_subcommand() {
        let e = eval_of(&[
            "runner",
            "eval",
            "examples/tasks",
            "--agent",
            "oracle",
            "-j",
            "2",
        ]);
        assert!(e.action.is_none());
        assert_eq!(e.paths, [PathBuf::from("examples/tasks")]);
        assert_eq!((e.agent_kind, e.jobs), (AgentKind::Oracle, 2));
        let e = eval_of(&["runner", "eval", "--agent", "nop", "a", "b"]);
        assert_eq!(e.paths, [PathBuf::from("a"), PathBuf::from("b")]);
        // A task directory named like the subcommand is reached by its path.
        let e = eval_of(&["runner", "eval", "./merge"]);
        assert!(e.action.is_none());

        let e = eval_of(&[
            "runner",
            "eval",
            "merge",
            "s1",
            "s2",
            "--json",
            "m.json",
            "--min-pass-rate",
            "0.5",
            "--allow-missing",
        ]);
        let Some(EvalAction::Merge(m)) = e.action else {
            panic!("merge expected")
        };
        let m = m.settings();
        assert_eq!(m.dirs, [PathBuf::from("s1"), PathBuf::from("s2")]);
        assert_eq!(m.json, Some(PathBuf::from("m.json")));
        assert_eq!(
            (m.min_pass_rate, m.allow_missing, m.fail_on_error),
            (0.5, true, true)
        );

        // Each needs what it needs, and eval's flags are not merge's.
        assert!(Cli::try_parse_from(["runner", "eval"]).is_err());
        assert!(Cli::try_parse_from(["runner", "eval", "merge"]).is_err());
        assert!(
            Cli::try_parse_from(["runner", "eval", "merge", "s1", "--agent", "oracle"]).is_err()
        );
    }

    #[test]
    fn clap_defaults_are_the_config_defaults() {
        let cli = Cli::parse_from(["runner", "task"]);
        let from_flags = cli.run.builder();
        let default = ConfigBuilder::default();
        assert_eq!(
            format!("{:?}", from_flags.sandbox),
            format!("{:?}", default.sandbox)
        );
        assert_eq!(
            format!("{:?}", from_flags.agent),
            format!("{:?}", default.agent)
        );
    }
}
