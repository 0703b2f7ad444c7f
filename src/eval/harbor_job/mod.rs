//! `runner eval --harbor-job DIR`: the suite's results in Harbor's job
//! layout, so Harbor's own readers (`harbor view`, its result models) can
//! load them:
//!
//! ```text
//! DIR/config.json              JobConfig
//! DIR/result.json              JobResult (stats, no trial_results, as Harbor ends a job)
//! DIR/<trial>/config.json      TrialConfig
//! DIR/<trial>/result.json      TrialResult
//! DIR/<trial>/exception.txt    the error, when the trial has one
//! DIR/<trial>/verifier/        reward.json or reward.txt as test.sh wrote it, test-stdout.txt
//! DIR/<trial>/agent/           trajectory.jsonl (runner's events), outputs/ (command outputs)
//! ```
//!
//! A trial is named `<task>__a<n>` (attempt n of the task; Harbor's form is
//! `<task>__<7 random characters>`), the task's name cut to 32 characters
//! and stripped of trailing `_` and `-` as Harbor cuts it; when cutting
//! changed the name, `-<8 hex digits of the name's SHA-256>` follows, so
//! two tasks never share a trial. Ids (UUIDs) are derived from the suite's
//! id and the trial's name. The whole layout is built in a hidden sibling
//! directory and renamed to DIR at the end: a reader never sees half a job.
//! Files of an attempt's run directory are copied without following links.

pub mod checksum;
mod files;
pub mod schema;
mod trial;

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::outcome::Attempt;
use super::settings::AgentKind;
use super::task::Task;
use crate::hostfs::HostDir;
use crate::redact::Redactor;
pub use checksum::ChecksumError;
use schema::{JobConfig, JobResult, SCHEMA_VERSION, Stamp};

/// Harbor cuts a task's name to this many characters in a trial's name.
const TRIAL_PREFIX_CHARS: usize = 32;
/// The reward files an attempt's run directory keeps, under the names
/// test.sh gave them (see `grade::read_reward`).
const REWARD_JSON: &str = "reward.json";
const REWARD_TXT: &str = "reward.txt";

/// Why the Harbor layout could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HarborJobError {
    #[error("--harbor-job {0}: the directory exists and is not empty")]
    Exists(PathBuf),
    #[error("--harbor-job {0}: not a directory runner can create (it needs a name and a parent)")]
    BadPath(PathBuf),
    #[error("--harbor-job: cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--harbor-job: task checksum: {0}")]
    Checksum(#[from] ChecksumError),
    #[error("--harbor-job: {0}")]
    Json(#[from] serde_json::Error),
}

impl HarborJobError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            HarborJobError::Exists(_) => {
                "name a new directory (Harbor's jobs are DIR/<job>), or remove the old one"
            }
            HarborJobError::BadPath(_) => "pass a path such as jobs/my-suite",
            HarborJobError::Write { .. } => {
                "check that the directory's parent exists and is writable, and that the disk has room"
            }
            HarborJobError::Checksum(_) => "every file of the task directory must be readable",
            HarborJobError::Json(_) => "a bug in runner; please report it",
        }
    }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> HarborJobError + '_ {
    move |source| HarborJobError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// What the layout records of a task, taken before the suite runs.
#[derive(Debug, Clone)]
pub struct TaskInfo {
    /// runner's name of the task (its directory's name).
    pub name: String,
    /// Harbor's `task_name`: `[task] name` when task.toml has one.
    pub harbor_name: String,
    /// The task's directory, absolute.
    pub path: PathBuf,
    /// Harbor's `source`: the name of the directory of tasks the task was
    /// found in; `None` for a task given by its own path.
    pub source: Option<String>,
    pub checksum: String,
}

impl TaskInfo {
    /// The infos of the suite's tasks; `paths` are the suite's paths as
    /// given (a task's source is the one it was found in).
    pub fn of_all(tasks: &[Task], paths: &[PathBuf]) -> Result<Vec<TaskInfo>, HarborJobError> {
        let given: Vec<PathBuf> = paths
            .iter()
            .filter_map(|p| std::path::absolute(p).ok())
            .collect();
        tasks
            .iter()
            .map(|t| {
                let path = std::path::absolute(&t.source_dir).unwrap_or(t.source_dir.clone());
                let source = path
                    .parent()
                    .filter(|parent| given.iter().any(|g| g == parent) && !given.contains(&path))
                    .and_then(|parent| parent.file_name())
                    .map(|n| n.to_string_lossy().into_owned());
                let harbor_name = t
                    .config
                    .task
                    .get("name")
                    .and_then(|n| n.as_str())
                    .unwrap_or(&t.name)
                    .to_string();
                Ok(TaskInfo {
                    name: t.name.clone(),
                    harbor_name,
                    checksum: checksum::task_checksum(&t.dir)?,
                    path,
                    source,
                })
            })
            .collect()
    }
}

/// The suite, as the layout records it.
#[derive(Debug, Clone)]
pub struct HarborJobMeta {
    pub agent: AgentKind,
    /// The provider and model of `--agent model`.
    pub model: Option<(String, String)>,
    /// runner's suite id: the job's and trials' ids derive from it.
    pub suite_id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub n_attempts: u32,
    pub jobs: usize,
    /// Whether the sandboxes were Docker containers (`--executor docker`).
    pub docker: bool,
    /// Overrides of the tasks' limits (`--cpus`, `--memory`, timeouts).
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub agent_timeout_secs: Option<f64>,
    pub verifier_timeout_secs: Option<f64>,
}

/// Refuses, before the suite runs, a DIR the layout could not replace: one
/// that exists and is not an empty directory.
pub fn check_target(dir: &Path, replace_ours: bool) -> Result<(), HarborJobError> {
    let (Some(_), Some(_)) = (dir.file_name(), dir.parent()) else {
        return Err(HarborJobError::BadPath(dir.to_path_buf()));
    };
    if replace_ours && is_ours(dir) {
        return Ok(());
    }
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(HarborJobError::Exists(dir.to_path_buf())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => Err(HarborJobError::Exists(dir.to_path_buf())),
    }
}

/// Marks a layout runner wrote, which `--resume` may replace.
const MARKER: &str = ".runner-harbor-job";

/// Whether `dir` is a layout runner wrote (its marker is a regular file).
fn is_ours(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|m| m.is_file())
        && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}

/// The trial's name of attempt `n` of `task` (see the module's doc).
pub fn trial_name(task: &str, n: u32) -> String {
    let cut: String = task.chars().take(TRIAL_PREFIX_CHARS).collect();
    let prefix = cut.trim_end_matches(['_', '-']);
    if prefix == task {
        format!("{prefix}__a{n}")
    } else {
        let h = checksum::hex(&Sha256::digest(task.as_bytes()));
        format!("{prefix}__a{n}-{}", &h[..8])
    }
}

/// A UUID (version 8, RFC 9562's custom form) derived from `parts`: the
/// same suite writes the same ids.
fn derived_uuid(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    let mut b: [u8; 16] = [0; 16];
    b.copy_from_slice(&h.finalize()[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x = checksum::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

/// Writes the layout of `attempts` (of `tasks`) to `dir`, which must not
/// exist or be empty, or (`replace_ours`, for `--resume`) be a layout
/// runner wrote; every JSON text is redacted with `redactor`.
pub fn write(
    dir: &Path,
    attempts: &[Attempt],
    tasks: &[TaskInfo],
    meta: &HarborJobMeta,
    redactor: &Redactor,
    replace_ours: bool,
) -> Result<(), HarborJobError> {
    check_target(dir, replace_ours)?;
    let dir = std::path::absolute(dir).map_err(write_err(dir))?;
    let (Some(name), Some(parent)) = (dir.file_name(), dir.parent()) else {
        return Err(HarborJobError::BadPath(dir.clone()));
    };
    let job_name = name.to_string_lossy().into_owned();
    let tmp = parent.join(format!(".{job_name}.runner-{:08x}", fastrand::u32(..)));
    let built = HostDir::create(&tmp)
        .map_err(write_err(&tmp))
        .and_then(|root| {
            build(&root, &dir, &job_name, attempts, tasks, meta, redactor)?;
            root.create_file(MARKER).map_err(write_err(&tmp))?;
            Ok(())
        });
    let placed = built.and_then(|()| place(&tmp, &dir, replace_ours));
    if placed.is_err() {
        // Only runner's own files are in it.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    placed
}

/// Moves the finished layout to `dir` (replacing an empty directory, or
/// with `replace_ours` a layout runner wrote, moved aside then removed).
fn place(tmp: &Path, dir: &Path, replace_ours: bool) -> Result<(), HarborJobError> {
    if replace_ours && is_ours(dir) {
        let old = tmp.with_extension("old");
        std::fs::rename(dir, &old).map_err(write_err(dir))?;
        let placed = std::fs::rename(tmp, dir).map_err(write_err(dir));
        if placed.is_err() {
            let _ = std::fs::rename(&old, dir);
        } else if let Err(e) = std::fs::remove_dir_all(&old) {
            tracing::warn!("cannot remove the replaced layout {}: {e}", old.display());
        }
        return placed;
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return Err(HarborJobError::Exists(dir.to_path_buf())),
    }
    std::fs::rename(tmp, dir).map_err(write_err(dir))
}

/// Writes `value` as the new file `name` in `dir`, redacted.
fn write_json<T: serde::Serialize>(
    dir: &HostDir,
    name: &str,
    value: &T,
    redactor: &Redactor,
) -> Result<(), HarborJobError> {
    let text = serde_json::to_string_pretty(value)?;
    let text = redactor.redact_json(&text);
    let path = dir.path().join(name);
    let mut f = dir.create_file(name).map_err(write_err(&path))?;
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(write_err(&path))
}

fn build(
    root: &HostDir,
    final_dir: &Path,
    job_name: &str,
    attempts: &[Attempt],
    tasks: &[TaskInfo],
    meta: &HarborJobMeta,
    redactor: &Redactor,
) -> Result<(), HarborJobError> {
    let job_id = derived_uuid(&["job", &meta.suite_id]);
    let jobs_dir = final_dir
        .parent()
        .map_or(String::new(), |p| p.to_string_lossy().into_owned());
    let ctx = trial::Ctx {
        job_id: &job_id,
        final_dir,
        meta,
    };
    let mut results = Vec::new();
    for a in attempts {
        let Some(task) = tasks.iter().find(|t| t.name == a.task) else {
            continue;
        };
        let Some(result) = trial::result(&ctx, a, task) else {
            continue;
        };
        let path = root.path().join(&result.trial_name);
        let tdir = root
            .create_dir(&result.trial_name)
            .map_err(write_err(&path))?;
        write_json(&tdir, "config.json", &result.config, redactor)?;
        write_json(&tdir, "result.json", &result, redactor)?;
        trial::copy_files(&tdir, a, &result, redactor).map_err(write_err(&path))?;
        results.push(result);
    }
    let config = JobConfig {
        schema_version: SCHEMA_VERSION,
        job_name: job_name.to_string(),
        jobs_dir,
        n_attempts: meta.n_attempts,
        n_concurrent_trials: meta.jobs,
        environment: trial::environment(meta),
        verifier: trial::verifier(meta),
        agents: vec![trial::agent_config(meta)],
        tasks: tasks.iter().map(trial::task_config).collect(),
    };
    write_json(root, "config.json", &config, redactor)?;
    let n_total = u64::try_from(attempts.len()).unwrap_or(u64::MAX);
    let finished = Stamp(meta.finished_at);
    let job = JobResult {
        schema_version: SCHEMA_VERSION,
        id: job_id.clone(),
        started_at: Stamp(meta.started_at),
        updated_at: Some(finished),
        finished_at: Some(finished),
        n_total_trials: n_total,
        stats: schema::JobStats {
            // Harbor counts the trials it ran again; runner's retried tries.
            n_retries: attempts
                .iter()
                .flat_map(|a| &a.earlier_tries)
                .filter(|t| t.status == super::outcome::Status::Error)
                .count() as u64,
            ..schema::job_stats(&results, n_total)
        },
    };
    write_json(root, "result.json", &job, redactor)
}

#[cfg(test)]
mod tests;
