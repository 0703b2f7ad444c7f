//! `tests/harbor-differences.toml`: the verdicts on which runner differs from
//! Harbor by design, each with its reason (the README lists the same).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    difference: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    task: String,
    agent: String,
    harbor: String,
    runner: String,
    reason: String,
}

pub struct Difference<'a> {
    pub index: usize,
    pub harbor: &'a str,
    pub runner: &'a str,
    pub reason: &'a str,
}

pub struct Differences {
    path: PathBuf,
    entries: Vec<Entry>,
}

impl Differences {
    pub fn load(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
        let file: File = toml::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        for e in &file.difference {
            assert!(
                e.harbor == "pass" || e.harbor == "fail" || e.harbor.starts_with("error:"),
                "{path:?}: {}: harbor = {:?}, want pass, fail or error:ExceptionType",
                e.task,
                e.harbor
            );
            assert!(
                ["pass", "fail", "error"].contains(&e.runner.as_str()),
                "{path:?}: {}: runner = {:?}, want pass, fail or error",
                e.task,
                e.runner
            );
            assert!(
                !e.reason.trim().is_empty(),
                "{path:?}: {}: no reason",
                e.task
            );
        }
        Differences {
            path: path.to_path_buf(),
            entries: file.difference,
        }
    }

    /// Every entry names a task directory graded here (a path from the repo root).
    pub fn check_tasks(&self, tasks: &BTreeMap<String, PathBuf>, repo: &Path) {
        for e in &self.entries {
            let dir = repo.join(&e.task);
            assert!(
                tasks.values().any(|t| *t == dir),
                "{:?}: {} is not one of the task directories graded here",
                self.path,
                e.task
            );
        }
    }

    pub fn find(&self, task: &str, agent: &str) -> Option<Difference<'_>> {
        self.entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.task == task && e.agent == agent)
            .map(|(index, e)| Difference {
                index,
                harbor: &e.harbor,
                runner: &e.runner,
                reason: &e.reason,
            })
    }

    /// The entries no graded task and agent matched.
    pub fn unseen(&self, seen: &[usize]) -> Vec<String> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, _)| !seen.contains(i))
            .map(|(_, e)| format!("{} under {}", e.task, e.agent))
            .collect()
    }
}
