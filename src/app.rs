//! One run from validated configuration to outcome: builds the model, the
//! executor and the tools, wires the event consumers, handles Ctrl-C, and
//! always leaves a complete trajectory.

use std::io::{IsTerminal, Read};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentSettings, Conversation, Limits, RunEnd};
use crate::cli::{ExecutorKind, Network, Provider, RunArgs, WorkspaceMode};
use crate::config::{Config, ConfigError};
use crate::event::{Event, Outcome};
use crate::exec::backend::{
    BackendKind, Network as SandboxNetwork, SandboxSpec, WorkspaceMode as SandboxWorkspaceMode,
    WorkspaceSpec, backend_for,
};
use crate::exec::{ExecError, Executor};
use crate::model::anthropic::AnthropicModel;
use crate::model::http::ApiConfig;
use crate::model::openai::OpenAiModel;
use crate::model::scripted::ScriptedModel;
use crate::model::{Message, Model, ModelError, Usage};
use crate::redact::{self, RedactError, Redactor};
use crate::render::{Human, json_line};
use crate::terminal::visible;
use crate::tools::Registry;
use crate::tools::bash::{BashSettings, BashTool};
use crate::trajectory::{RunDir, RunDirError, new_run_path};
use crate::workspace::Workspace;

/// A failure before or around the run, reported as one line plus a hint.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Model(#[from] ModelError),
    #[error("{0}")]
    Exec(#[from] ExecError),
    #[error("{0}")]
    RunDir(#[from] RunDirError),
    #[error("{0}")]
    Redact(#[from] RedactError),
    #[error("cannot prepare the workspace: {0}")]
    Workspace(std::io::Error),
    #[error("refusing the workspace: {0}")]
    WorkspaceRefused(String),
    #[error(
        "the run directory {run_dir} is inside the workspace {workspace}: the sandbox could change what runner writes there"
    )]
    RunDirInWorkspace {
        run_dir: PathBuf,
        workspace: PathBuf,
    },
    #[error("no task given and stdin is not a terminal")]
    NoTask,
    #[error("cannot read the task from stdin: {0}")]
    Stdin(std::io::Error),
}

impl AppError {
    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            AppError::Model(e) => return e.hint().map(|h| crate::hints::model(&h)),
            AppError::Config(e) => return e.hint().map(str::to_string),
            AppError::Exec(e) => return e.hint(),
            AppError::NoTask => "pass the task as an argument, or `-` to read it from stdin".into(),
            AppError::RunDir(e) if e.source.kind() == std::io::ErrorKind::AlreadyExists => {
                "that run directory holds an earlier run; pass a new --run-dir".into()
            }
            AppError::WorkspaceRefused(_) => {
                "pass a project directory of your own with --workspace, or none for a scratch directory".into()
            }
            AppError::RunDirInWorkspace { .. } => {
                "pass a --run-dir outside the workspace".into()
            }
            _ => return None,
        })
    }
}

/// Runs a task (or a conversation) and returns the process exit code.
pub async fn run(args: RunArgs) -> i32 {
    let human = Human::new();
    match run_inner(args, &human).await {
        Ok(code) => code,
        Err(e) => {
            report_error(&e);
            2
        }
    }
}

/// Prints an error and its hint on stderr, made visible (an error can
/// quote the sandbox, the engine or a file).
pub fn report_error(e: &AppError) {
    eprintln!("error: {}", visible(&e.to_string()));
    if let Some(h) = e.hint() {
        eprintln!("hint: {}", visible(&h));
    }
}

/// Where the task comes from.
enum TaskSource {
    Once(String),
    Repl,
}

fn task_source(task: Option<&str>) -> Result<TaskSource, AppError> {
    match task {
        Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(AppError::Stdin)?;
            Ok(TaskSource::Once(s))
        }
        Some(t) => Ok(TaskSource::Once(t.to_string())),
        None if std::io::stdin().is_terminal() => Ok(TaskSource::Repl),
        None => Err(AppError::NoTask),
    }
}

async fn run_inner(args: RunArgs, human: &Human) -> Result<i32, AppError> {
    let config = Config::from_args(&args)?;
    let source = task_source(args.task.as_deref())?;
    let model = build_model(&config)?;

    let (run_id, run_path) = run_dir_path(&config, human)?;
    if let Some(ws) = &config.workspace {
        let mut own = vec![run_path.clone()];
        own.extend(std::env::current_exe().ok());
        if let Some(why) = crate::workspace::refusal(ws, &own) {
            return Err(AppError::WorkspaceRefused(why));
        }
    }
    let redactor = run_redactor(&config, human)?;
    let budget = config.sandbox.disk_bytes.unwrap_or(u64::MAX);
    let run_dir = RunDir::create(&run_path, redactor.clone(), budget)?;
    let workspace = Workspace::prepare(config.workspace.as_deref()).map_err(AppError::Workspace)?;

    let json = config.json;
    // The trajectory and --json, without the human rendering.
    let record = |ev: &Event| {
        run_dir.record(ev);
        if json {
            json_line(ev, &redactor);
        }
    };
    let sink = |ev: &Event| {
        record(ev);
        human.render(ev);
    };

    let cancel = CancellationToken::new();
    spawn_signal_watch(cancel.clone());

    let started = Instant::now();
    let mut public = config.public_json();
    // The sandbox starts first, so run_started can record what the engine
    // actually enforces on it and every loosening it had to make; a start
    // failure still gets run_started.
    let built = build_executor(&config, &workspace, &run_id, &redactor).await;
    if config.executor == ExecutorKind::Docker {
        let loosenings = match &built {
            Ok(x) => x.loosenings(),
            Err(_) => docker_config(&config, &workspace, &run_id, &redactor).loosenings(),
        };
        for l in &loosenings {
            human.say(&format!("warning: sandbox loosened: {l}"));
        }
        public["loosenings"] = serde_json::json!(loosenings);
    }
    if let Some(security) = built.as_ref().ok().and_then(|x| x.sandbox_security()) {
        public["sandbox_security"] = security;
    }
    sink(&Event::RunStarted {
        run_id: run_id.clone(),
        config: public,
    });
    if config.executor == ExecutorKind::Local {
        human.say("warning: --executor local runs commands on this host, not in a sandbox");
    }

    let mut convo = Conversation::default();
    // Set when the sandbox could not even start (Docker down, no image...).
    let mut start_failed = None;
    let end = match built {
        Ok(executor) => {
            let end = converse(
                &config,
                model.as_ref(),
                executor.clone(),
                &run_dir,
                &mut convo,
                source,
                &sink,
                &cancel,
                human,
            )
            .await;
            match executor.shutdown().await {
                Ok(()) => end,
                // The run's work may not have come back (copy mode): never
                // report that as a success.
                Err(e) if end.outcome == Outcome::Completed => RunEnd {
                    outcome: Outcome::Error,
                    error: Some(format!("ending the sandbox failed: {e}")),
                    final_text: end.final_text,
                    hint: None,
                },
                Err(e) => {
                    human.say(&format!("warning: ending the sandbox failed: {e}"));
                    end
                }
            }
        }
        Err(e) => {
            let end = RunEnd {
                outcome: Outcome::Error,
                error: Some(e.to_string()),
                final_text: None,
                hint: None,
            };
            start_failed = Some(AppError::Exec(e));
            end
        }
    };

    let finished = Event::RunFinished {
        outcome: end.outcome,
        steps: convo.steps,
        usage: convo.usage,
        cost_usd: convo.cost_usd,
        duration_ms: crate::convert::millis_u64(started.elapsed()),
        error: end.error.clone(),
        final_text: end.final_text.clone(),
    };
    match &start_failed {
        // One `error:` line and its `hint:`, like any other infrastructure
        // error; the trajectory still ends with run_finished.
        Some(err) => {
            record(&finished);
            report_error(err);
        }
        None => {
            sink(&finished);
            if let Some(h) = &end.hint {
                human.say(&format!("hint: {h}"));
            }
        }
    }
    // A scratch workspace no command ever saw is not worth keeping.
    let keep =
        config.keep_workspace || (end.outcome != Outcome::Completed && start_failed.is_none());
    if let Some(p) = workspace.finish(keep) {
        human.say(&format!("workspace: {}", p.display()));
    }
    human.say(&format!(
        "trajectory: {}",
        run_dir.trajectory_path().display()
    ));
    Ok(end.outcome.exit_code())
}

/// Runs the agent loop once on `task` in an already started executor,
/// recording into `run_dir` through `sink`; `runner eval` uses it for each
/// attempt. Returns how the run ended and the conversation's totals.
#[allow(clippy::too_many_arguments)]
pub async fn run_once(
    config: &Config,
    model: &dyn Model,
    executor: Arc<dyn Executor>,
    run_dir: &RunDir,
    task: String,
    sink: &(dyn Fn(&Event) + Send + Sync),
    cancel: &CancellationToken,
    human: &Human,
) -> (RunEnd, Conversation) {
    let mut convo = Conversation::default();
    let end = converse(
        config,
        model,
        executor,
        run_dir,
        &mut convo,
        TaskSource::Once(task),
        sink,
        cancel,
        human,
    )
    .await;
    (end, convo)
}

#[allow(clippy::too_many_arguments)]
async fn converse(
    config: &Config,
    model: &dyn Model,
    executor: Arc<dyn Executor>,
    run_dir: &RunDir,
    convo: &mut Conversation,
    source: TaskSource,
    sink: &(dyn Fn(&Event) + Send + Sync),
    cancel: &CancellationToken,
    human: &Human,
) -> RunEnd {
    let system = config
        .system_prompt
        .clone()
        .unwrap_or_else(|| crate::prompt::default_system_prompt(&executor.workdir()));
    let mut tools = Registry::new();
    tools.register(Box::new(BashTool::new(
        executor,
        config.policy.clone(),
        BashSettings {
            default_timeout: config.timeout,
            max_timeout: config.max_command_timeout,
            max_output_bytes: config.output_limit_bytes,
        },
    )));
    let settings = AgentSettings {
        system,
        limits: Limits {
            max_steps: Some(config.max_steps),
            max_time: config.max_time,
            max_cost_usd: config.max_cost_usd,
        },
        max_tokens: config.max_tokens,
        context_window_tokens: config.context_window_tokens,
    };
    let price = config
        .price
        .or_else(|| crate::model::pricing::lookup(&config.model));
    if price.is_none() && config.provider != Provider::Scripted {
        human.say(&format!(
            "warning: no price known for model '{}': cost counts as $0; pass --price to set one",
            config.model
        ));
    }
    let cost = move |u: &Usage| price.map_or(0.0, |p| p.cost_usd(u));
    let agent = Agent {
        model,
        tools: &tools,
        settings: &settings,
        cost: &cost,
        outputs: Some(run_dir.outputs().clone()),
    };
    let looped = async {
        match source {
            TaskSource::Once(task) => {
                sink(&Event::UserMessage { text: task.clone() });
                convo.messages.push(Message::user_text(task));
                agent.run(convo, sink, cancel).await
            }
            TaskSource::Repl => repl(&agent, convo, sink, cancel, human).await,
        }
    };
    // A bug that panics in the loop, a tool or a model client ends this run
    // as an error; the caller still shuts the sandbox down and records
    // run_finished. Nothing the loop shares is left half-updated in a way
    // that matters: the conversation is only read for its totals.
    AssertUnwindSafe(looped)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| RunEnd::from_panic(panic.as_ref()))
}

/// A multi-turn conversation on a terminal; `exit`, `q`, an empty line or
/// EOF ends it.
async fn repl(
    agent: &Agent<'_>,
    convo: &mut Conversation,
    sink: &(dyn Fn(&Event) + Send + Sync),
    cancel: &CancellationToken,
    human: &Human,
) -> RunEnd {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut last = RunEnd {
        outcome: Outcome::Completed,
        error: None,
        final_text: None,
        hint: None,
    };
    loop {
        human.prompt();
        let line = tokio::select! {
            _ = cancel.cancelled() => return interrupted(),
            l = lines.next_line() => l,
        };
        let text = match line {
            Ok(Some(l)) => l.trim().to_string(),
            Ok(None) => return last,
            Err(e) => {
                human.say(&format!("error: cannot read stdin: {e}"));
                return last;
            }
        };
        if text.is_empty() || text == "exit" || text == "q" {
            return last;
        }
        sink(&Event::UserMessage { text: text.clone() });
        convo.messages.push(Message::user_text(text));
        last = agent.run(convo, sink, cancel).await;
        if last.outcome != Outcome::Completed {
            return last;
        }
    }
}

fn interrupted() -> RunEnd {
    RunEnd {
        outcome: Outcome::Interrupted,
        error: None,
        final_text: None,
        hint: None,
    }
}

/// Ctrl-C and SIGTERM cancel the run; the loop stops the running command
/// and the model call, and the trajectory is still written.
pub fn spawn_signal_watch(cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    cancel.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        cancel.cancel();
    });
}

/// The run's id and directory: `--run-dir`, else `runs/<id>` here. The
/// run directory must never be inside the workspace (the sandbox could
/// plant links or change the record there): an explicit one there is
/// refused, the default moves to runner's state directory, and says so.
fn run_dir_path(config: &Config, human: &Human) -> Result<(String, PathBuf), AppError> {
    use crate::workspace::is_inside;
    let (run_id, default_path) = new_run_path(&PathBuf::from("runs"));
    let Some(ws) = config.workspace.as_deref() else {
        return Ok((run_id, config.run_dir.clone().unwrap_or(default_path)));
    };
    if let Some(explicit) = &config.run_dir {
        if is_inside(explicit, ws) {
            return Err(AppError::RunDirInWorkspace {
                run_dir: crate::workspace::resolve(explicit),
                workspace: crate::workspace::resolve(ws),
            });
        }
        return Ok((run_id, explicit.clone()));
    }
    if !is_inside(&default_path, ws) {
        return Ok((run_id, default_path));
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .map(|d| d.join("runner").join("runs"))
        .filter(|d| !is_inside(d, ws))
        .unwrap_or_else(|| std::env::temp_dir().join("runner-runs"));
    let path = state.join(&run_id);
    if is_inside(&path, ws) {
        return Err(AppError::RunDirInWorkspace {
            run_dir: path,
            workspace: crate::workspace::resolve(ws),
        });
    }
    human.say(&format!(
        "run directory: {} (./runs is inside the workspace)",
        path.display()
    ));
    Ok((run_id, path))
}

/// Builds the configured model client.
pub fn build_model(config: &Config) -> Result<Box<dyn Model>, ModelError> {
    match config.provider {
        Provider::Scripted => {
            let path = config
                .script
                .as_deref()
                .ok_or_else(|| ModelError::Script("no --script given".into()))?;
            Ok(Box::new(ScriptedModel::from_file(path)?))
        }
        Provider::Anthropic => Ok(Box::new(AnthropicModel::new(api_config(config))?)),
        Provider::Openai => Ok(Box::new(OpenAiModel::new(api_config(config))?)),
    }
}

fn api_config(config: &Config) -> ApiConfig {
    ApiConfig::new(
        config.model.clone(),
        config.api_key.clone(),
        &config.base_url,
    )
}

/// The one redactor of a run (`runner eval` builds its suite's with this
/// too): the runner's API key and credential-looking environment, and the
/// credential-looking `--env` pairs (see `redact::collect`). Names each
/// `--env` credential too short to redact, and hands the redactor to the
/// human output.
pub fn run_redactor(config: &Config, human: &Human) -> Result<Redactor, RedactError> {
    // vars_os: std::env::vars panics on a variable that is not UTF-8.
    let host_env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let secrets = redact::collect(host_env, config.api_key.as_deref(), &config.command_env)?;
    for short in &secrets.too_short {
        human.say(&format!(
            "warning: --env {}: its value is {} character{}, too short to redact reliably; \
             it will appear unredacted in trajectories, outputs and on the terminal",
            short.name,
            short.chars,
            if short.chars == 1 { "" } else { "s" }
        ));
    }
    if !secrets.too_short.is_empty() {
        human.say(&format!(
            "hint: credentials of {} or more characters are redacted; use a longer value, \
             or a name that does not look like a credential if it is not one",
            redact::MIN_SECRET_CHARS
        ));
    }
    human.set_redactor(secrets.redactor.clone());
    Ok(secrets.redactor)
}

/// Starts the configured backend's sandbox for this run.
pub async fn build_executor(
    config: &Config,
    workspace: &Workspace,
    run_id: &str,
    redactor: &Redactor,
) -> Result<Arc<dyn Executor>, ExecError> {
    let kind = match config.executor {
        ExecutorKind::Local => BackendKind::Local,
        ExecutorKind::Docker => BackendKind::Docker,
    };
    backend_for(kind)
        .start(sandbox_spec(config, workspace, run_id, redactor))
        .await
}

/// The backend-neutral sandbox of this run, from the validated config.
pub fn sandbox_spec(
    config: &Config,
    workspace: &Workspace,
    run_id: &str,
    redactor: &Redactor,
) -> SandboxSpec {
    let s = &config.sandbox;
    let defaults = SandboxSpec::new(&s.image, run_id);
    SandboxSpec {
        network: match s.network {
            Network::None => SandboxNetwork::None,
            Network::Bridge => SandboxNetwork::Bridge,
        },
        cpus: s.cpus,
        memory_bytes: s.memory_bytes,
        pids_limit: s.pids_limit,
        user: s.user.clone(),
        writable_rootfs: s.writable_rootfs,
        workspace: Some(WorkspaceSpec {
            host: workspace.path().to_path_buf(),
            mode: match s.workspace_mode {
                WorkspaceMode::Auto => SandboxWorkspaceMode::Auto,
                WorkspaceMode::Bind => SandboxWorkspaceMode::Bind,
                WorkspaceMode::Copy => SandboxWorkspaceMode::Copy,
            },
            exact: false,
        }),
        disk_bytes: s.disk_bytes,
        env: config.container_env(),
        redactor: redactor.clone(),
        max_run_time: config.max_time.unwrap_or(defaults.max_run_time),
        runtime: s.runtime.clone(),
        keep_background: config.keep_background,
        ..defaults
    }
}

/// What the docker backend would make of this run's sandbox (for the
/// loosenings of a sandbox that did not start).
pub fn docker_config(
    config: &Config,
    workspace: &Workspace,
    run_id: &str,
    redactor: &Redactor,
) -> crate::exec::docker::DockerConfig {
    crate::exec::docker::docker_config(&sandbox_spec(config, workspace, run_id, redactor))
}
