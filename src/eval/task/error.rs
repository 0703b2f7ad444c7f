//! Why a task cannot be loaded: [`TaskError`], each naming the file, and
//! its hint.

use std::path::PathBuf;

/// A task that cannot be loaded; names the file.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// task.toml is not TOML, or not of the schema's types: `message`
    /// names the line, column and key; `line_text` quotes the line.
    #[error("{path}: {message}")]
    Toml {
        path: PathBuf,
        message: String,
        line_text: Option<String>,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// A link in a task directory that leaves it (see [`links`]).
    #[error(
        "{path} is a link to {target}, outside the task directory {dir}; refused (runner never reads a host file through a task)"
    )]
    LinkOut {
        path: PathBuf,
        target: PathBuf,
        dir: PathBuf,
    },
    #[error("{0} is neither a task directory (with instruction.md) nor holds any")]
    NoTasks(PathBuf),
    #[error("two tasks are named '{name}': {a} and {b}")]
    Duplicate {
        name: String,
        a: PathBuf,
        b: PathBuf,
    },
    /// A key of Harbor's schema that runner does not implement.
    #[error("{path}: {key}: {what}")]
    Refused {
        path: PathBuf,
        key: String,
        what: String,
        hint: String,
    },
    /// `${VAR}` without a default, and VAR is not set on the host.
    #[error("{path}: {key} needs ${{{var}}}, which is not set in the host environment")]
    UnsetVar {
        path: PathBuf,
        key: String,
        var: String,
    },
    /// `${VAR}` names a secret of runner's environment (by its name) that
    /// the user did not hand to tasks.
    #[error(
        "{path}: {key} takes ${{{var}}} from runner's environment, and the name says it holds a secret the task's code would see"
    )]
    SecretVar {
        path: PathBuf,
        key: String,
        var: String,
    },
    /// Neither a Harbor task, a Terminal-Bench 1 task nor a directory of them.
    #[error(
        "{path} is not a task: expected instruction.md and tests/test.sh (Harbor) or task.yaml (Terminal-Bench 1), or subdirectories holding them; found {found}"
    )]
    UnknownLayout { path: PathBuf, found: String },
    /// A Terminal-Bench 1 task's YAML that does not parse or has wrong types.
    #[error("{path}: {message}")]
    Yaml { path: PathBuf, message: String },
    /// A file the task needs cannot be written (Terminal-Bench 1 mapping).
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl TaskError {
    /// What to do about it, for the variants that know.
    pub fn hint(&self) -> Option<String> {
        match self {
            TaskError::Refused { hint, .. } => Some(hint.clone()),
            TaskError::LinkOut { path, .. } => Some(format!(
                "put a copy of the file in the task directory instead (cp --remove-destination \"$(readlink -f {p})\" {p}), or point the link at a file inside it",
                p = path.display()
            )),
            TaskError::UnsetVar { var, .. } => Some(format!(
                "export {var} before running runner eval, or give the task a default: ${{{var}:-value}}"
            )),
            TaskError::SecretVar { var, .. } => Some(format!(
                "pass --pass-env {var} to hand it to the task (an LLM judge's key, say), or unset it"
            )),
            TaskError::UnknownLayout { .. } => Some(
                "a Harbor task holds instruction.md, task.toml and tests/test.sh; a Terminal-Bench 1 task holds task.yaml, docker-compose.yaml and run-tests.sh".into(),
            ),
            TaskError::Toml {
                line_text: Some(line),
                ..
            } => Some(format!(
                "{line}; see Harbor's task.toml: [agent], [verifier], [environment], [metadata]"
            )),
            TaskError::Invalid { path, .. } if path.ends_with("task.toml") => {
                Some("see Harbor's task.toml reference; the message names the key".into())
            }
            TaskError::Yaml { .. } => Some(
                "a Terminal-Bench 1 task's task.yaml and docker-compose.yaml must be valid YAML"
                    .into(),
            ),
            _ => None,
        }
    }
}
