//! One run from validated configuration to outcome: builds the model, the
//! executor and the tools, wires the event consumers, handles Ctrl-C, and
//! always leaves a complete trajectory.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentSettings, Conversation, Limits, RunEnd};
use crate::cli::{ExecutorKind, Network, Provider, RunArgs, WorkspaceMode};
use crate::config::{Config, ConfigError};
use crate::event::{Event, Outcome};
use crate::exec::docker::WorkspaceMode as DockerWorkspaceMode;
use crate::exec::docker::{DockerConfig, DockerExecutor};
use crate::exec::local::{LocalConfig, LocalExecutor};
use crate::exec::{ExecError, Executor};
use crate::model::anthropic::AnthropicModel;
use crate::model::http::ApiConfig;
use crate::model::openai::OpenAiModel;
use crate::model::scripted::ScriptedModel;
use crate::model::{Message, Model, ModelError, Usage};
use crate::render::{Human, json_line};
use crate::tools::Registry;
use crate::tools::bash::{BashSettings, BashTool};
use crate::trajectory::{Redactor, RunDir, RunDirError, new_run_path};
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
    #[error("cannot prepare the workspace: {0}")]
    Workspace(std::io::Error),
    #[error("no task given and stdin is not a terminal")]
    NoTask,
    #[error("cannot read the task from stdin: {0}")]
    Stdin(std::io::Error),
}

impl AppError {
    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            AppError::Model(e) => return e.hint(),
            AppError::Exec(ExecError::DockerUnavailable { .. }) => {
                "start the Docker daemon (or set DOCKER_HOST); --executor local runs without a sandbox".into()
            }
            AppError::NoTask => "pass the task as an argument, or `-` to read it from stdin".into(),
            AppError::RunDir(e) if e.source.kind() == std::io::ErrorKind::AlreadyExists => {
                "that run directory holds an earlier run; pass a new --run-dir".into()
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

/// Prints an error and its hint on stderr.
pub fn report_error(e: &AppError) {
    eprintln!("error: {e}");
    if let Some(h) = e.hint() {
        eprintln!("hint: {h}");
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

    let (run_id, default_path) = new_run_path(&PathBuf::from("runs"));
    let run_path = config.run_dir.clone().unwrap_or(default_path);
    // The runner's own secrets, and those handed to commands with --env.
    let redactor =
        Redactor::from_env().merged(Redactor::from_pairs(config.command_env.iter().cloned()));
    human.set_redactor(redactor.clone());
    let run_dir = RunDir::create(&run_path, redactor.clone())?;
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
    if config.executor == ExecutorKind::Docker {
        let loosenings = docker_config(&config, &workspace, &run_id).loosenings();
        for l in &loosenings {
            human.say(&format!("warning: sandbox loosened: {l}"));
        }
        public["loosenings"] = serde_json::json!(loosenings);
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
    let end = match build_executor(&config, &workspace, &run_id).await {
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
        duration_ms: started.elapsed().as_millis() as u64,
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
    run_dir.redact_outputs();
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
        outputs_dir: Some(run_dir.outputs_dir()),
    };
    match source {
        TaskSource::Once(task) => {
            sink(&Event::UserMessage { text: task.clone() });
            convo.messages.push(Message::user_text(task));
            agent.run(convo, sink, cancel).await
        }
        TaskSource::Repl => repl(&agent, convo, sink, cancel, human).await,
    }
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

/// Builds the configured executor.
pub async fn build_executor(
    config: &Config,
    workspace: &Workspace,
    run_id: &str,
) -> Result<Arc<dyn Executor>, ExecError> {
    match config.executor {
        ExecutorKind::Local => Ok(Arc::new(LocalExecutor::new(LocalConfig {
            workdir: workspace.path().to_path_buf(),
            env: config.command_env.clone(),
            keep_background: config.keep_background,
        }))),
        ExecutorKind::Docker => Ok(Arc::new(
            DockerExecutor::start(docker_config(config, workspace, run_id)).await?,
        )),
    }
}

/// Maps the validated configuration to the docker executor's.
pub fn docker_config(config: &Config, workspace: &Workspace, run_id: &str) -> DockerConfig {
    let s = &config.sandbox;
    DockerConfig {
        image: s.image.clone(),
        network: match s.network {
            Network::None => None,
            Network::Bridge => Some("bridge".into()),
        },
        cpus: s.cpus,
        memory_bytes: s.memory_bytes,
        pids_limit: s.pids_limit,
        user: s.user.clone(),
        writable_rootfs: s.writable_rootfs,
        workspace: Some(workspace.path().to_path_buf()),
        workspace_mode: match s.workspace_mode {
            WorkspaceMode::Auto => DockerWorkspaceMode::Auto,
            WorkspaceMode::Bind => DockerWorkspaceMode::Bind,
            WorkspaceMode::Copy => DockerWorkspaceMode::Copy,
        },
        env: config.container_env(),
        run_id: run_id.to_string(),
        max_run_time: config
            .max_time
            .unwrap_or(DockerConfig::default().max_run_time),
        keep_background: config.keep_background,
        ..DockerConfig::default()
    }
}
