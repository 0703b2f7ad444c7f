//! One run from the command line: the task source (argument, stdin or a
//! conversation on the terminal) and the run directory's path. The run's
//! life (sandbox, header, loop, trajectory on every exit path) is
//! [`runtime::Run`]'s, shared with `runner continue`.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::agent::Conversation;
use crate::config::{Config, ConfigBuilder};
use crate::event::Outcome;
use crate::hints::Failure;
use crate::render::Human;
use crate::runtime::{self, Beginning, Open, Run, RunError, TaskSource};
use crate::trajectory::new_run_path;

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

/// The task; `None` when Ctrl-C came while it was being read from stdin
/// (nothing has started yet, so there is nothing to record).
async fn task_source(
    task: Option<&str>,
    cancel: &CancellationToken,
) -> Result<Option<TaskSource>, RunError> {
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
                    Ok(Err(e)) => Err(RunError::Stdin(e)),
                    Err(_) => Err(RunError::Stdin(std::io::Error::other("the reader thread ended"))),
                },
            }
        }
        Some(t) => Ok(Some(TaskSource::Once(t.to_string()))),
        None if std::io::stdin().is_terminal() => Ok(Some(TaskSource::Repl)),
        None => Err(RunError::NoTask),
    }
}

async fn run_inner(
    builder: &ConfigBuilder,
    task: Option<&str>,
    human: &Human,
    cancel: CancellationToken,
) -> Result<u8, RunError> {
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
            return Err(RunError::WorkspaceRefused(why));
        }
    }
    let run = Run::open(&config, human, Open::Create, run_id, &run_path)?;
    let started = run.start(Beginning::Fresh).await;
    let ended = started
        .drive(model.as_ref(), Conversation::default(), source, &cancel)
        .await;
    Ok(ended.finish())
}

/// The run's id and directory: `--run-dir`, else `runs/<id>` here. The
/// run directory must never be inside the workspace (the sandbox could
/// plant links or change the record there): an explicit one there is
/// refused, the default moves to runner's state directory, and says so.
fn run_dir_path(config: &Config, human: &Human) -> Result<(String, PathBuf), RunError> {
    use crate::workspace::is_inside;
    let (run_id, default_path) = new_run_path(&PathBuf::from("runs"));
    let Some(ws) = config.workspace.as_deref() else {
        return Ok((run_id, config.run_dir.clone().unwrap_or(default_path)));
    };
    if let Some(explicit) = &config.run_dir {
        if is_inside(explicit, ws) {
            return Err(RunError::RunDirInWorkspace {
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
        return Err(RunError::RunDirInWorkspace {
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
