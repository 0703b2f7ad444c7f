//! `runner continue RUN_DIR [MESSAGE]`: a run that completed, hit a limit
//! or was interrupted goes on. Its conversation is rebuilt from its
//! trajectory ([`crate::agent::replay`]), MESSAGE becomes the next user
//! turn, and the loop runs again in a fresh sandbox on the run's
//! workspace, with the run's model and limits ([`settings`]) and fresh
//! limits, appending to the same trajectory after a `continuation` event.
//! What bounds the sandbox or decides where the API key goes comes from
//! the command line alone ([`trust`]).

pub mod recorded;
pub mod settings;
pub mod trust;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::agent::{Conversation, RunEnd, replay};
use crate::cli::ContinueArgs;
use crate::config::{Config, ConfigError};
use crate::event::Event;
use crate::exec::backend::BackendKind;
use crate::exec::{ExecError, Executor};
use crate::hints::Failure;
use crate::model::{Model, ModelError};
use crate::redact::RedactError;
use crate::render::{Human, json_line};
use crate::run_end;
use crate::runtime::{self, Session};
use crate::trajectory::{RunDir, RunDirError};
use crate::workspace::Workspace;

pub use recorded::RecordError;
pub use settings::SettingsError;

/// The user turn of a continuation given no MESSAGE.
pub const DEFAULT_MESSAGE: &str = "Continue.";

/// Why a run cannot be continued, as one line plus a hint.
#[derive(Debug, thiserror::Error)]
pub enum ContinueError {
    #[error("{0}")]
    Record(#[from] RecordError),
    #[error("{0}")]
    Settings(#[from] SettingsError),
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
    #[error(
        "the trajectory of {0} does not record its workspace (it was written by an older runner)"
    )]
    NoWorkspace(PathBuf),
    #[error("the run's workspace {path} is gone")]
    WorkspaceGone { path: PathBuf, scratch: bool },
    #[error("cannot use the workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("refusing the workspace: {0}")]
    WorkspaceRefused(crate::workspace::Refusal),
    #[error("{0}")]
    NoTerminal(#[from] crate::approve::NoTerminal),
}

impl ContinueError {
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            ContinueError::Record(e) => return e.hint(),
            ContinueError::Settings(e) => e.hint(),
            ContinueError::NoTerminal(e) => e.hint().into(),
            ContinueError::Config(e) => return e.hint().map(str::to_string),
            ContinueError::Model(e) => return e.hint().map(|h| crate::hints::model(&h)),
            ContinueError::Exec(e) => return e.hint(),
            ContinueError::RunDir(e) if e.source.kind() == std::io::ErrorKind::WouldBlock => {
                "the run is still going, or being continued: wait for it to end".into()
            }
            ContinueError::NoWorkspace(_) => {
                "pass the directory its commands ran in with --workspace DIR".into()
            }
            ContinueError::WorkspaceGone { scratch: true, .. } => {
                "runner removes a scratch workspace when its run completes; run with \
                 --keep-workspace (or --workspace DIR) to continue a run later, or pass \
                 --workspace DIR to continue on another directory"
                    .into()
            }
            ContinueError::WorkspaceGone { scratch: false, .. } => {
                "put the directory back, or pass --workspace DIR to continue on another".into()
            }
            ContinueError::WorkspaceRefused(r) => r.hint(),
            _ => return None,
        })
    }
}

impl From<ContinueError> for Failure {
    fn from(e: ContinueError) -> Failure {
        Failure::new(e.to_string(), e.hint())
    }
}

/// Continues the run `args` names until it ends or `cancel` (Ctrl-C)
/// stops it; the exit code, or the failure to print.
pub async fn run(args: &ContinueArgs, cancel: CancellationToken) -> Result<u8, Failure> {
    let human = Human::new();
    Ok(continue_run(args, &human, cancel).await?)
}

/// The workspace to continue on: `--workspace` only. Without it, the
/// recorded one is a difference to refuse (or an error when it is gone).
fn workspace_of(
    rec: &recorded::Recorded,
    args: &ContinueArgs,
) -> Result<Result<PathBuf, trust::Difference>, ContinueError> {
    if let Some(w) = &args.workspace {
        return Ok(Ok(w.clone()));
    }
    let path = rec.config["workspace"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| ContinueError::NoWorkspace(rec.path.clone()))?;
    if !path.is_dir() {
        return Err(ContinueError::WorkspaceGone {
            path,
            scratch: rec.config["scratch_workspace"].as_bool().unwrap_or(false),
        });
    }
    Ok(Err(trust::workspace(&path)))
}

async fn continue_run(
    args: &ContinueArgs,
    human: &Human,
    cancel: CancellationToken,
) -> Result<u8, ContinueError> {
    let rec = recorded::read(&args.run_dir)?;
    let mut builder = settings::builder(&rec.config, args)?;
    let ws = workspace_of(&rec, args)?;
    builder.workspace = ws.as_ref().ok().cloned();
    builder.run_dir = Some(rec.path.clone());
    let config = builder.build()?;
    let found = ws.as_ref().err().cloned().into_iter().collect();
    let notes = trust::check(
        &rec.config,
        &config.public_json(),
        &settings::given(args),
        found,
    )?;
    // A workspace not given is a difference `check` has refused already.
    let Ok(ws_path) = ws else {
        return Err(ContinueError::NoWorkspace(rec.path.clone()));
    };
    for n in &notes {
        human.say(n);
    }
    crate::approve::check_terminal(config.approve)?;
    let model = runtime::build_model(&config)?;
    let mut own = vec![rec.path.clone()];
    own.extend(std::env::current_exe().ok());
    if let Some(why) = crate::workspace::refusal(&ws_path, &own) {
        return Err(ContinueError::WorkspaceRefused(why));
    }
    if crate::workspace::is_inside(&rec.path, &ws_path) {
        return Err(ContinueError::WorkspaceRefused(
            crate::workspace::Refusal::new(format!(
                "{} holds the run directory {}",
                ws_path.display(),
                rec.path.display()
            )),
        ));
    }
    let workspace =
        Workspace::prepare(Some(&ws_path)).map_err(|source| ContinueError::Workspace {
            path: ws_path.clone(),
            source,
        })?;
    let redactor = runtime::run_redactor(&config, human)?;
    let budget = config.sandbox.disk_bytes.unwrap_or(u64::MAX);
    let run_dir = RunDir::reopen(&rec.path, redactor.clone(), budget)?;

    let replayed = replay::rebuild(&rec.events);
    if rec.bad_lines > 0 {
        human.say(&format!(
            "warning: left out {} of the trajectory that {} not JSON (a run killed while writing)",
            crate::plural::count_of(rec.bad_lines, "line", "lines"),
            if rec.bad_lines == 1 { "is" } else { "are" }
        ));
    }
    if replayed.unanswered_calls > 0 || replayed.unreadable_events > 0 {
        human.say(&format!(
            "warning: {} had no recorded result (each is told so), {} could not be read",
            crate::plural::count_of(replayed.unanswered_calls, "tool call", "tool calls"),
            crate::plural::count_of(replayed.unreadable_events, "event", "events"),
        ));
    }
    let message = args
        .message
        .clone()
        .unwrap_or_else(|| DEFAULT_MESSAGE.to_string());

    let json = config.json;
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
    public["workspace"] = serde_json::json!(workspace.path());
    // Still the run's: a later continuation's hint depends on it.
    public["scratch_workspace"] = rec.config["scratch_workspace"].clone();
    let backend = runtime::backend(&config);
    let spec = runtime::sandbox_spec(&config, &workspace, &rec.run_id, &redactor);
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
    sink(&Event::Continuation {
        message: message.clone(),
        replayed_messages: replayed.messages.len(),
        replayed_steps: replayed.steps,
        previous_outcome: rec.previous_outcome,
        config: public,
    });
    if config.executor == BackendKind::Local {
        human.say("warning: --executor local runs commands on this host, not in a sandbox");
    }

    let mut convo = Conversation {
        steps: replayed.steps,
        replayed_steps: replayed.steps,
        messages: replayed.messages,
        ..Conversation::default()
    };
    let mut start_failed = None;
    let end = match built {
        Ok(executor) => {
            let end = go_on(
                &config,
                model.as_ref(),
                executor.clone(),
                &run_dir,
                &mut convo,
                message,
                &sink,
                &cancel,
                human,
            )
            .await;
            run_end::shut_down(executor.as_ref(), end, human).await
        }
        Err(e) => {
            let end = run_end::not_started(&e);
            start_failed = Some(ContinueError::Exec(e));
            end
        }
    };

    // The continuation's own totals: its limits counted them.
    let finished = Event::RunFinished {
        outcome: end.outcome,
        steps: convo.steps.saturating_sub(convo.replayed_steps),
        usage: convo.usage,
        cost_usd: convo.cost_usd,
        duration_ms: crate::convert::millis_u64(started.elapsed()),
        error: end.error.clone(),
        final_text: end.final_text.clone(),
    };
    let failure = start_failed.map(|err| Failure::new(err.to_string(), err.hint()));
    run_end::finish(&finished, &end, failure, &record, &sink, human);
    // Never a scratch directory here: the workspace stays.
    run_end::say_where(workspace.finish(true), &run_dir, human);
    Ok(end.outcome.exit_code())
}

/// Adds `message` and runs the loop on the rebuilt conversation.
#[allow(clippy::too_many_arguments)]
async fn go_on(
    config: &Config,
    model: &dyn Model,
    executor: Arc<dyn Executor>,
    run_dir: &RunDir,
    convo: &mut Conversation,
    message: String,
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
        sink(&Event::UserMessage {
            text: message.clone(),
        });
        replay::push_user_text(&mut convo.messages, message);
        agent.run(convo, sink, cancel).await
    })
    .await
}
