//! Reading what the viewer shows: a run directory (its trajectory, its
//! verifier log, its full command outputs) or an eval output directory
//! (`suite.json` and each attempt's `attempt.json` and run directory).
//! Every file is opened through [`ReadDir`] (no link followed, no FIFO
//! waited on) and read with a cap, and what the cap cut is recorded.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::eval::manifest::{self, ATTEMPT_FILE, SUITE_FILE, SuiteManifest};
use crate::eval::outcome::Attempt;
use crate::hostfs::{Capped, ReadDir};

/// Most bytes of a trajectory read.
pub const MAX_TRAJECTORY_BYTES: u64 = 64 * 1024 * 1024;
/// Most bytes of a verifier log shown.
pub const MAX_VERIFIER_LOG_BYTES: u64 = 256 * 1024;
/// Most bytes of one full command output (from `outputs/`) shown.
pub const MAX_FULL_OUTPUT_BYTES: u64 = 64 * 1024;

/// The trajectory's file name in a run directory.
pub const TRAJECTORY_FILE: &str = "trajectory.jsonl";
/// The verifier's log in an eval attempt's run directory.
pub const VERIFIER_LOG_FILE: &str = "verifier.log";

/// What a directory given to `runner view` is.
#[derive(Debug)]
pub enum Results {
    /// An eval output directory (it holds `suite.json`).
    Suite(Box<SuiteData>),
    /// One run directory (it holds `trajectory.jsonl` or `attempt.json`).
    Run(Box<AttemptData>),
}

/// Why a directory cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds neither a trajectory (trajectory.jsonl) nor an eval suite (suite.json)")]
    NotResults { path: PathBuf },
    #[error("{0}")]
    Manifest(#[from] manifest::ManifestError),
}

/// One run directory as read.
#[derive(Debug)]
pub struct RunData {
    pub path: PathBuf,
    /// The trajectory's events, in order (each line that parsed as JSON).
    pub events: Vec<Value>,
    /// Lines that were not JSON objects (a run killed mid-line, or damage).
    pub bad_lines: usize,
    /// The trajectory's size and whether it was cut; `None`: no trajectory.
    pub trajectory: Option<(u64, bool)>,
    pub verifier_log: Option<Capped>,
    /// Why a file that should be there could not be read.
    pub problems: Vec<String>,
    outputs: Option<ReadDir>,
}

/// An attempt: its record (when it finished) and its run directory.
#[derive(Debug)]
pub struct AttemptData {
    pub record: Option<Attempt>,
    pub run: RunData,
}

/// An eval output directory as read.
#[derive(Debug)]
pub struct SuiteData {
    pub path: PathBuf,
    pub manifest: SuiteManifest,
    pub attempts: Vec<AttemptData>,
    /// Attempts of the suite with no record: (task, attempt, why).
    pub missing: Vec<(String, u32, String)>,
}

/// Reads `dir` as an eval output directory or a run directory.
pub fn load(dir: &Path) -> Result<Results, LoadError> {
    let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let root = ReadDir::open(dir).map_err(|source| LoadError::Open {
        path: dir.to_path_buf(),
        source,
    })?;
    if root.has(SUITE_FILE) {
        return Ok(Results::Suite(Box::new(load_suite(&root)?)));
    }
    if root.has(TRAJECTORY_FILE) || root.has(ATTEMPT_FILE) {
        return Ok(Results::Run(Box::new(load_attempt(root))));
    }
    Err(LoadError::NotResults {
        path: dir.to_path_buf(),
    })
}

fn load_suite(root: &ReadDir) -> Result<SuiteData, LoadError> {
    let manifest = manifest::read_suite(root.path())?;
    let tasks = if manifest.shard_tasks.is_empty() {
        &manifest.tasks
    } else {
        &manifest.shard_tasks
    };
    let mut attempts = Vec::new();
    let mut missing = Vec::new();
    for task in tasks {
        for n in 1..=manifest.attempts_per_task {
            let dir = root.dir(task).and_then(|t| t.dir(&n.to_string()));
            match dir {
                Ok(d) => {
                    let a = load_attempt(d);
                    if a.record.is_none() {
                        missing.push((
                            task.clone(),
                            n,
                            "no attempt.json: it never finished".into(),
                        ));
                    }
                    attempts.push(a);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    missing.push((task.clone(), n, "never started (no run directory)".into()));
                }
                Err(e) => missing.push((task.clone(), n, format!("unreadable: {e}"))),
            }
        }
    }
    Ok(SuiteData {
        path: root.path().to_path_buf(),
        manifest,
        attempts,
        missing,
    })
}

/// Reads the run directory `dir`: its attempt record when there is one,
/// its trajectory and its verifier log.
pub fn load_attempt(dir: ReadDir) -> AttemptData {
    let mut problems = Vec::new();
    // The directory was opened without following a link; its record is
    // read at its name the same way (`read_attempt` uses O_NOFOLLOW).
    let record = dir
        .has(ATTEMPT_FILE)
        .then(|| manifest::read_attempt(dir.path()))
        .flatten();
    if dir.has(ATTEMPT_FILE) && record.is_none() {
        problems.push("attempt.json is not a readable attempt record".into());
    }
    let mut events = Vec::new();
    let mut bad_lines = 0;
    let trajectory = match dir.read_capped(TRAJECTORY_FILE, MAX_TRAJECTORY_BYTES) {
        Ok(c) => {
            let mut lines: Vec<&str> = c.text.lines().collect();
            // A cut trajectory ends in a partial line.
            if c.truncated {
                lines.pop();
            }
            for line in lines.into_iter().filter(|l| !l.trim().is_empty()) {
                match serde_json::from_str::<Value>(line) {
                    Ok(v) if v.is_object() => events.push(v),
                    _ => bad_lines += 1,
                }
            }
            Some((c.total_bytes, c.truncated))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            problems.push(format!("{TRAJECTORY_FILE}: {e}"));
            None
        }
    };
    let verifier_log = match dir.read_capped(VERIFIER_LOG_FILE, MAX_VERIFIER_LOG_BYTES) {
        Ok(c) => Some(c),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            problems.push(format!("{VERIFIER_LOG_FILE}: {e}"));
            None
        }
    };
    let outputs = dir.dir("outputs").ok();
    AttemptData {
        record,
        run: RunData {
            path: dir.path().to_path_buf(),
            events,
            bad_lines,
            trajectory,
            verifier_log,
            problems,
            outputs,
        },
    }
}

impl RunData {
    /// The full output a `tool_result` names (`full_output`), read from
    /// this run's `outputs/` by its file name alone: a path elsewhere in
    /// a (hostile) trajectory is never opened.
    pub fn full_output(&self, named: &str) -> Option<Result<Capped, String>> {
        let name = Path::new(named).file_name()?.to_str()?;
        let dir = self.outputs.as_ref()?;
        Some(
            dir.read_capped(name, MAX_FULL_OUTPUT_BYTES)
                .map_err(|e| e.to_string()),
        )
    }
}
