//! Why a run (`runner TASK`, the REPL) or its continuation (`runner
//! continue`) could not start or go on: one error for every front end of
//! [`super::Run`], each variant one line plus a hint.

use std::path::PathBuf;

use crate::config::ConfigError;
use crate::continuation::{RecordError, SettingsError};
use crate::exec::ExecError;
use crate::hints::Failure;
use crate::model::ModelError;
use crate::redact::RedactError;
use crate::trajectory::RunDirError;
use crate::workspace::Refusal;

/// A failure before or around a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
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
    #[error("{0}")]
    Record(#[from] RecordError),
    #[error("{0}")]
    Settings(#[from] SettingsError),
    #[error("{0}")]
    NoTerminal(#[from] crate::approve::NoTerminal),
    /// The workspace (`path`: the one given) could not be made ready.
    #[error("{}", workspace_text(path.as_deref(), source))]
    Workspace {
        path: Option<PathBuf>,
        source: std::io::Error,
    },
    #[error("refusing the workspace: {0}")]
    WorkspaceRefused(Refusal),
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
    #[error(
        "the trajectory of {0} does not record its workspace (it was written by an older runner)"
    )]
    NoWorkspace(PathBuf),
    #[error("the run's workspace {path} is gone")]
    WorkspaceGone { path: PathBuf, scratch: bool },
}

fn workspace_text(path: Option<&std::path::Path>, source: &std::io::Error) -> String {
    match path {
        Some(p) => format!("cannot use the workspace {}: {source}", p.display()),
        None => format!("cannot prepare the workspace: {source}"),
    }
}

impl RunError {
    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        use std::io::ErrorKind;
        Some(match self {
            RunError::Model(e) => return e.hint().map(|h| crate::hints::model(&h)),
            RunError::Config(e) => return e.hint().map(str::to_string),
            RunError::Exec(e) => return e.hint(),
            RunError::Record(e) => return e.hint(),
            RunError::Settings(e) => e.hint(),
            RunError::NoTerminal(e) => e.hint().into(),
            RunError::NoTask => "pass the task as an argument, or `-` to read it from stdin".into(),
            RunError::RunDir(e) if e.source.kind() == ErrorKind::AlreadyExists => {
                "that run directory holds an earlier run; pass a new --run-dir".into()
            }
            RunError::RunDir(e) if e.source.kind() == ErrorKind::WouldBlock => {
                "the run is still going, or being continued: wait for it to end".into()
            }
            RunError::WorkspaceRefused(r) => r.hint(),
            RunError::RunDirInWorkspace { .. } => "pass a --run-dir outside the workspace".into(),
            RunError::NoWorkspace(_) => {
                "pass the directory its commands ran in with --workspace DIR".into()
            }
            RunError::WorkspaceGone { scratch: true, .. } => {
                "runner removes a scratch workspace when its run completes; run with \
                 --keep-workspace (or --workspace DIR) to continue a run later, or pass \
                 --workspace DIR to continue on another directory"
                    .into()
            }
            RunError::WorkspaceGone { scratch: false, .. } => {
                "put the directory back, or pass --workspace DIR to continue on another".into()
            }
            _ => return None,
        })
    }
}

impl From<RunError> for Failure {
    fn from(e: RunError) -> Failure {
        Failure::new(e.to_string(), e.hint())
    }
}
