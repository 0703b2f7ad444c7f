//! Tamper signals of an attempt (placeholder until the full filter lands).

use serde::Serialize;

use crate::exec::{FsChange, ProcessInfo};

/// One thing the agent left that grading may trust: evidence, not a verdict.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Signal {
    pub kind: &'static str,
    pub detail: String,
}

/// Changes on the verifier's path.
pub fn from_changes(changes: &[FsChange], home: Option<&str>) -> Vec<Signal> {
    let _ = home;
    changes
        .iter()
        .filter(|c| c.path.starts_with("/usr/local/bin") || c.path.starts_with("/tests"))
        .map(|c| Signal {
            kind: "path",
            detail: format!("{:?} {}", c.kind, c.path),
        })
        .collect()
}

/// Processes still running when grading starts.
pub fn from_processes(procs: &[ProcessInfo]) -> Vec<Signal> {
    procs
        .iter()
        .map(|p| Signal {
            kind: "process",
            detail: format!("pid {} uid {}: {}", p.pid, p.uid, p.cmdline),
        })
        .collect()
}
