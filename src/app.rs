//! One run from the command line: the task source (argument, stdin or a
//! conversation on the terminal), the run directory, what the user sees,
//! and a complete trajectory on every exit path. The model, the sandbox
//! and the loop come from `runtime`, shared with `runner eval`.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::agent::{Conversation, RunEnd};
use crate::config::{Config, ConfigBuilder, ConfigError};
use crate::event::{Event, Outcome};
use crate::exec::backend::BackendKind;
use crate::exec::{ExecError, Executor};
use crate::hints::Failure;
use crate::model::{Message, Model, ModelError};
use crate::redact::RedactError;
use crate::render::{Human, json_line};
use crate::run_end;
use crate::runtime::{self, Session};
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
    WorkspaceRefused(crate::workspace::Refusal),
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
    #[error("{0}")]
    ApproveNeedsTerminal(#[from] crate::approve::NoTerminal),
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
            AppError::WorkspaceRefused(r) => match &r.owner {
                Some(_) => r.hint(),
                None => "pass a project directory of your own with --workspace, or none for a scratch directory".into(),
            },
            AppError::RunDirInWorkspace { .. } => {
                "pass a --run-dir outside the workspace".into()
            }
            AppError::ApproveNeedsTerminal(e) => e.hint().into(),
            _ => return None,
        })
    }
}

impl From<AppError> for Failure {
    fn from(e: AppError) -> Failure {
        Failure::new(e.to_string(), e.hint())
    }
}

/// Runs a task (`None`: read it, or converse on a terminal) as `builder`
/// says, until it ends or `cancel` (Ctrl-C) stops it; the exit code, or
/// the failure to print.
pub async fn run(
    builder: ConfigBuilder,
    task: Option<String>,
    cancel: CancellationToken,
) -> Result<u8, Failure> {
    let human = Human::new();
    Ok(run_inner(&builder, task.as_deref(), &human, cancel).await?)
}

/// Where the task comes from.
enum TaskSource {
    Once(String),
    Repl,
}

/// The task; `None` when Ctrl-C came while it was being read from stdin
/// (nothing has started yet, so there is nothing to record).
async fn task_source(
    task: Option<&str>,
    cancel: &CancellationToken,
) -> Result<Option<TaskSource>, AppError> {
    match task {
        Some("-") => {
            // A blocking read on a thread of its own: it cannot be
            // cancelled, and the runtime must not wait for it at exit.
            let (tx, rx) = tokio::sync::oneshot::channel();
            std::thread::spawn(move || {
                let mut s = String::new();
                let r = std::io::stdin().read_to_string(&mut s).map(|_| s);
                let _ = tx.send(r);
            });
            tokio::select! {
                _ = cancel.cancelled() => Ok(None),
                r = rx => match r {
                    Ok(Ok(s)) => Ok(Some(TaskSource::Once(s))),
                    Ok(Err(e)) => Err(AppError::Stdin(e)),
                    Err(_) => Err(AppError::Stdin(std::io::Error::other("the reader thread ended"))),
                },
            }
        }
        Some(t) => Ok(Some(TaskSource::Once(t.to_string()))),
        None if std::io::stdin().is_terminal() => Ok(Some(TaskSource::Repl)),
        None => Err(AppError::NoTask),
    }
}

async fn run_inner(
    builder: &ConfigBuilder,
    task: Option<&str>,
    human: &Human,
    cancel: CancellationToken,
) -> Result<u8, AppError> {
    let config = builder.build()?;
    // Before anything starts: nobody could answer.
    crate::approve::check_terminal(config.approve)?;
    let Some(source) = task_source(task, &cancel).await? else {
        return Ok(Outcome::Interrupted.exit_code());
    };
    let model = runtime::build_model(&config)?;

    let (run_id, run_path) = run_dir_path(&config, human)?;
    if let Some(ws) = &config.workspace {
        let mut own = vec![run_path.clone()];
        own.extend(std::env::current_exe().ok());
        if let Some(why) = crate::workspace::refusal(ws, &own) {
            return Err(AppError::WorkspaceRefused(why));
        }
    }
    let redactor = runtime::run_redactor(&config, human)?;
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

    let started = Instant::now();
    let mut public = config.public_json();
    // The sandbox starts first, so run_started can record what the engine
    // actually enforces on it and every loosening it had to make; a start
    // failure still gets run_started.
    let backend = runtime::backend(&config);
    let spec = runtime::sandbox_spec(&config, &workspace, &run_id, &redactor);
    let built = backend.start(spec.clone()).await;
    if backend.capabilities().isolated {
        let loosenings = match &built {
            Ok(x) => x.loosenings(),
            Err(_) => backend.loosenings(&spec),
        };
        for l in &loosenings {
            human.say(&format!("warning: sandbox loosened: {l}"));
        }
        public["loosenings"] = serde_json::json!(loosenings);
    }
    if let Some(security) = built.as_ref().ok().and_then(|x| x.sandbox_security()) {
        public["sandbox_security"] = security;
    }
    // What `runner continue` needs to find the run's files again.
    public["workspace"] = serde_json::json!(workspace.path());
    public["scratch_workspace"] = serde_json::json!(workspace.is_scratch());
    sink(&Event::RunStarted {
        run_id: run_id.clone(),
        format_version: crate::event::TRAJECTORY_FORMAT_VERSION,
        config: public,
    });
    if config.executor == BackendKind::Local {
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
            run_end::shut_down(executor.as_ref(), end, human).await
        }
        Err(e) => {
            let end = run_end::not_started(&e);
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
    // A scratch workspace no command ever saw is not worth keeping.
    let keep =
        config.keep_workspace || (end.outcome != Outcome::Completed && start_failed.is_none());
    let failure = start_failed.map(|err| Failure::new(err.to_string(), err.hint()));
    run_end::finish(&finished, &end, failure, &record, &sink, human);
    run_end::say_where(workspace.finish(keep), &run_dir, human);
    Ok(end.outcome.exit_code())
}

/// Runs the task, or the conversation, in the started sandbox.
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
    let warn = |w: &str| human.say(w);
    let approver =
        crate::approve::Approver::new(config.approve, &executor.workdir(), human.redactor());
    let session = Session::new(config, executor, Some(run_dir.outputs().clone()), &warn);
    let mut agent = session.agent(model);
    agent.approver = approver.as_ref();
    Session::guarded(async {
        match source {
            TaskSource::Once(task) => {
                sink(&Event::UserMessage { text: task.clone() });
                convo.messages.push(Message::user_text(task));
                agent.run(convo, sink, cancel).await
            }
            TaskSource::Repl => repl(&agent, convo, sink, cancel, human).await,
        }
    })
    .await
}

/// A multi-turn conversation on a terminal; `exit`, `q`, an empty line or
/// EOF ends it.
async fn repl(
    agent: &crate::agent::Agent<'_>,
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
