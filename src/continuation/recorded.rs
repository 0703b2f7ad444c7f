//! What a run directory records for `runner continue`: its events (a last
//! line cut by a kill is left out), its format version, the settings of
//! its latest part (`run_started`, or the last `continuation`) and how
//! that part ended.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::event::{Outcome, TRAJECTORY_FORMAT_VERSION};
use crate::hostfs::ReadDir;
use crate::runtime::RunHeader;
use crate::view::load::TRAJECTORY_FILE;

/// Most bytes of a trajectory `runner continue` reads: a conversation it
/// cannot read whole cannot be rebuilt.
pub const MAX_TRAJECTORY_BYTES: u64 = 256 * 1024 * 1024;

/// Every outcome, to read one back by its name.
const OUTCOMES: [Outcome; 8] = [
    Outcome::Completed,
    Outcome::StepLimit,
    Outcome::TimeLimit,
    Outcome::CostLimit,
    Outcome::Refused,
    Outcome::Interrupted,
    Outcome::Error,
    Outcome::EmptyReply,
];

/// A run directory as read.
#[derive(Debug)]
pub struct Recorded {
    pub path: PathBuf,
    pub run_id: String,
    pub events: Vec<Value>,
    /// Lines that are not JSON objects (a line cut by a kill), left out.
    pub bad_lines: usize,
    /// The header of the latest part of the run: its effective
    /// configuration and what it observed, typed.
    pub header: RunHeader,
    /// How the latest part ended; `None`: it has no `run_finished`.
    pub previous_outcome: Option<Outcome>,
}

/// A directory `runner continue` cannot continue.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{path} is not a run directory: {why}")]
    NotRunDir { path: PathBuf, why: String },
    #[error("cannot read {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the trajectory {path} is {bytes} bytes, more than runner continue reads ({max} bytes)"
    )]
    TooLarge { path: PathBuf, bytes: u64, max: u64 },
    #[error("{path} does not start with a run_started event: it is not a runner trajectory")]
    NotATrajectory { path: PathBuf },
    #[error("{path} is an attempt of `runner eval`, whose sandbox and workspace ended with it")]
    EvalAttempt { path: PathBuf },
    #[error(
        "{path} is of trajectory format {found}, newer than this runner reads (up to {supported})"
    )]
    NewerFormat {
        path: PathBuf,
        found: u64,
        supported: u32,
    },
    #[error("{path}: {source}")]
    BadHeader {
        path: PathBuf,
        source: crate::runtime::header::HeaderError,
    },
}

impl RecordError {
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            RecordError::NotRunDir { .. } | RecordError::NotATrajectory { .. } => {
                "give the directory a run printed as `trajectory: DIR/trajectory.jsonl` \
                 (./runs/<id> by default)"
                    .into()
            }
            RecordError::EvalAttempt { .. } => {
                "runner continue continues runs of `runner TASK`; run the task again with `runner eval`"
                    .into()
            }
            RecordError::NewerFormat { .. } => {
                "continue it with the runner that wrote it, or a newer one".into()
            }
            RecordError::BadHeader { .. } => {
                "the trajectory was changed or written by another program; start a new run".into()
            }
            RecordError::TooLarge { .. } => {
                "start a new run, giving it what the model should know".into()
            }
            RecordError::Unreadable { .. } => return None,
        })
    }
}

/// Reads the run directory `dir`.
pub fn read(dir: &Path) -> Result<Recorded, RecordError> {
    let path = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let not_run = |why: &str| RecordError::NotRunDir {
        path: path.clone(),
        why: why.to_string(),
    };
    let root = ReadDir::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => not_run("it does not exist"),
        std::io::ErrorKind::NotADirectory => not_run("it is not a directory"),
        _ => RecordError::Unreadable {
            path: path.clone(),
            source: e,
        },
    })?;
    let file = path.join(TRAJECTORY_FILE);
    let capped = root
        .read_capped(TRAJECTORY_FILE, MAX_TRAJECTORY_BYTES)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => not_run("it holds no trajectory.jsonl"),
            _ => RecordError::Unreadable {
                path: file.clone(),
                source: e,
            },
        })?;
    if capped.truncated {
        return Err(RecordError::TooLarge {
            path: file,
            bytes: capped.total_bytes,
            max: MAX_TRAJECTORY_BYTES,
        });
    }
    let (events, bad_lines) = parse_lines(&capped.text);
    let Some(first) = events.first().filter(|e| e["type"] == "run_started") else {
        return Err(RecordError::NotATrajectory { path: file });
    };
    // A trajectory from before the version was recorded is version 1.
    let found = first
        .get("format_version")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    if found > u64::from(TRAJECTORY_FORMAT_VERSION) {
        return Err(RecordError::NewerFormat {
            path: file,
            found,
            supported: TRAJECTORY_FORMAT_VERSION,
        });
    }
    if crate::runtime::header::is_eval(&first["config"]) {
        return Err(RecordError::EvalAttempt { path });
    }
    let run_id = first["run_id"].as_str().unwrap_or_default().to_string();
    let mut config = &first["config"];
    let mut previous_outcome = None;
    for ev in &events {
        match ev["type"].as_str() {
            Some("continuation") => {
                config = &ev["config"];
                previous_outcome = None;
            }
            Some("run_finished") => {
                previous_outcome = ev["outcome"]
                    .as_str()
                    .and_then(|name| OUTCOMES.into_iter().find(|o| o.as_str() == name));
            }
            _ => {}
        }
    }
    let header = RunHeader::read(config).map_err(|source| RecordError::BadHeader {
        path: file.clone(),
        source,
    })?;
    Ok(Recorded {
        path,
        run_id,
        events,
        bad_lines,
        header,
        previous_outcome,
    })
}

/// The JSON objects of a trajectory's lines, and how many lines were not
/// one (blank lines are not counted).
fn parse_lines(text: &str) -> (Vec<Value>, usize) {
    let mut events = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => events.push(v),
            _ => bad += 1,
        }
    }
    (events, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) {
        std::fs::write(dir.join(TRAJECTORY_FILE), text).expect("write");
    }

    #[test]
    fn versions_latest_settings_and_a_cut_last_line() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        write(
            d,
            concat!(
                r#"{"type":"run_started","run_id":"r1","config":{"provider":"anthropic"}}"#,
                "\n",
                r#"{"type":"run_finished","outcome":"step_limit"}"#,
                "\n",
                r#"{"type":"continuation","config":{"provider":"openai"}}"#,
                "\n",
                r#"{"type":"user_mess"#
            ),
        );
        let r = read(d).expect("reads");
        assert_eq!(
            (r.run_id.as_str(), r.events.len(), r.bad_lines),
            ("r1", 3, 1)
        );
        let openai = Some(crate::model::provider::Provider::Openai);
        assert_eq!(r.header.settings.provider, openai, "the latest part's");
        assert_eq!(r.previous_outcome, None);

        write(
            d,
            concat!(
                r#"{"type":"run_started","run_id":"r1","format_version":1,"config":{}}"#,
                "\n",
                r#"{"type":"run_finished","outcome":"completed"}"#
            ),
        );
        assert_eq!(
            read(d).expect("reads").previous_outcome,
            Some(Outcome::Completed)
        );

        write(
            d,
            r#"{"type":"run_started","run_id":"r","format_version":99,"config":{}}"#,
        );
        assert!(matches!(
            read(d),
            Err(RecordError::NewerFormat { found: 99, .. })
        ));
        write(d, r#"{"type":"user_message","text":"x"}"#);
        assert!(matches!(read(d), Err(RecordError::NotATrajectory { .. })));
        write(
            d,
            r#"{"type":"run_started","run_id":"r","config":{"eval":{},"run":{}}}"#,
        );
        assert!(matches!(read(d), Err(RecordError::EvalAttempt { .. })));
        assert!(matches!(
            read(&d.join("nothing")),
            Err(RecordError::NotRunDir { .. })
        ));
    }

    #[test]
    fn the_header_of_the_previous_runner_reads_back_typed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        // run_started as the runner before the typed header wrote it.
        write(
            d,
            concat!(
                r#"{"type":"run_started","run_id":"r1","format_version":1,"config":{"#,
                r#""api_key_set":false,"approve":"never","executor":"docker","#,
                r#""image":"runner-sandbox:tiny","loosenings":[],"max_steps":50,"#,
                r#""network":"none","provider":"scripted","runtime":null,"#,
                r#""sandbox_security":{"runtime":"runc","seccomp":"runner","seccomp_profile_sha256":null},"#,
                r#""scratch_workspace":true,"workspace":"/tmp/ws","workspace_mode":"auto"}}"#,
                "\n",
                r#"{"type":"run_finished","outcome":"completed"}"#
            ),
        );
        let r = read(d).expect("reads");
        assert_eq!(r.header.workspace, Some(PathBuf::from("/tmp/ws")));
        assert_eq!(r.header.scratch_workspace, Some(true));
        assert_eq!(r.header.loosenings, Some(Vec::new()));
        assert_eq!(r.header.settings.max_steps, Some(50));
        assert_eq!(
            r.header.to_value(),
            r.events[0]["config"],
            "nothing lost or added"
        );

        // A header whose observed part is not what a runner writes.
        write(
            d,
            r#"{"type":"run_started","run_id":"r","config":{"workspace":["/"]}}"#,
        );
        assert!(matches!(read(d), Err(RecordError::BadHeader { .. })));

        // A setting edited to a value no runner writes: refused, naming it.
        write(
            d,
            r#"{"type":"run_started","run_id":"r","config":{"provider":"scripted","network":5}}"#,
        );
        let e = read(d).expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains("the recorded configuration's network is not one this runner reads"),
            "{text}"
        );
        assert!(e.hint().is_some_and(|h| h.contains("start a new run")));
    }
}
