//! `runner continue RUN_DIR [MESSAGE]`: a run that completed, hit a limit
//! or was interrupted goes on. Its conversation is rebuilt from its
//! trajectory ([`crate::agent::replay`]), MESSAGE becomes the next user
//! turn, and the loop runs again in a fresh sandbox on the run's
//! workspace, with the run's model and limits ([`settings`]) and fresh
//! limits, appending to the same trajectory after a `continuation` event
//! (the run's life is [`crate::runtime::Run`]'s, reopened). What bounds the sandbox or decides where the API key goes comes from
//! the command line alone ([`trust`]).

pub mod recorded;
pub mod settings;
pub mod trust;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::agent::{Conversation, replay};
use crate::cli::ContinueArgs;
use crate::hints::Failure;
use crate::render::Human;
use crate::runtime::header::RecordedSettings;
use crate::runtime::{self, Beginning, Open, Run, RunError, TaskSource};

pub use recorded::RecordError;
pub use settings::SettingsError;

/// The user turn of a continuation given no MESSAGE.
pub const DEFAULT_MESSAGE: &str = "Continue.";

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
) -> Result<Result<PathBuf, trust::Difference>, RunError> {
    if let Some(w) = &args.workspace {
        return Ok(Ok(w.clone()));
    }
    let path = rec
        .header
        .workspace
        .clone()
        .ok_or_else(|| RunError::NoWorkspace(rec.path.clone()))?;
    if !path.is_dir() {
        return Err(RunError::WorkspaceGone {
            path,
            scratch: rec.header.scratch_workspace.unwrap_or(false),
        });
    }
    Ok(Err(trust::workspace(&path)))
}

async fn continue_run(
    args: &ContinueArgs,
    human: &Human,
    cancel: CancellationToken,
) -> Result<u8, RunError> {
    let rec = recorded::read(&args.run_dir)?;
    let mut builder = settings::builder(&rec.header, args)?;
    let ws = workspace_of(&rec, args)?;
    builder.workspace = ws.as_ref().ok().cloned();
    builder.run_dir = Some(rec.path.clone());
    let config = builder.build()?;
    let found = ws.as_ref().err().cloned().into_iter().collect();
    let notes = trust::check(
        &rec.header.settings,
        &RecordedSettings::of(&config),
        &settings::given(args),
        found,
    )?;
    // A workspace not given is a difference `check` has refused already.
    let Ok(ws_path) = ws else {
        return Err(RunError::NoWorkspace(rec.path.clone()));
    };
    for n in &notes {
        human.say(n);
    }
    crate::approve::check_terminal(config.approve)?;
    let model = runtime::build_model(&config)?;
    let mut own = vec![rec.path.clone()];
    own.extend(std::env::current_exe().ok());
    if let Some(why) = crate::workspace::refusal(&ws_path, &own) {
        return Err(RunError::WorkspaceRefused(why));
    }
    if crate::workspace::is_inside(&rec.path, &ws_path) {
        return Err(RunError::WorkspaceRefused(crate::workspace::Refusal::new(
            format!(
                "{} holds the run directory {}",
                ws_path.display(),
                rec.path.display()
            ),
        )));
    }
    let run = Run::open(&config, human, Open::Reopen, rec.run_id.clone(), &rec.path)?;

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
    let started = run
        .start(Beginning::Continued {
            message: message.clone(),
            replayed_messages: replayed.messages.len(),
            replayed_steps: replayed.steps,
            previous_outcome: rec.previous_outcome,
            scratch_workspace: rec.header.scratch_workspace,
        })
        .await;
    let convo = Conversation {
        steps: replayed.steps,
        replayed_steps: replayed.steps,
        messages: replayed.messages,
        ..Conversation::default()
    };
    let ended = started
        .drive(
            model.as_ref(),
            convo,
            TaskSource::Continue(message),
            &cancel,
        )
        .await;
    Ok(ended.finish())
}
