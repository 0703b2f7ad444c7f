//! Finding tasks: each given path is a task (Harbor's layout or Terminal-
//! Bench 1's) or a directory of them; `--filter` globs select by name.

use std::path::{Path, PathBuf};

use super::{Task, TaskError, tb1};

/// What a directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Harbor,
    TerminalBench1,
    Other,
}

fn layout(p: &Path) -> Layout {
    if p.join("instruction.md").is_file() {
        Layout::Harbor
    } else if p.join("task.yaml").is_file() {
        Layout::TerminalBench1
    } else {
        Layout::Other
    }
}

fn load_any(p: &Path) -> Result<Task, TaskError> {
    match layout(p) {
        Layout::TerminalBench1 => tb1::load(p),
        _ => Task::load(p),
    }
}

/// The entries of a directory that holds no task, for the message: at most
/// eight names, directories with a trailing `/`.
fn found(entries: &[(String, bool)]) -> String {
    if entries.is_empty() {
        return "an empty directory".into();
    }
    let mut names: Vec<String> = entries
        .iter()
        .map(|(n, dir)| if *dir { format!("{n}/") } else { n.clone() })
        .collect();
    names.sort();
    let more = names.len().saturating_sub(8);
    names.truncate(8);
    let mut s = names.join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

/// Finds the tasks under `paths`: each is a task directory (Harbor's, with
/// instruction.md, or Terminal-Bench 1's, with task.yaml) or a directory
/// whose subdirectories are tasks. Sorted by name; names must be unique.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<Task>, TaskError> {
    let mut tasks: Vec<Task> = Vec::new();
    for p in paths {
        if layout(p) != Layout::Other {
            tasks.push(load_any(p)?);
            continue;
        }
        let entries = std::fs::read_dir(p).map_err(|source| TaskError::Read {
            path: p.clone(),
            source,
        })?;
        let mut seen = Vec::new();
        let mut dirs = Vec::new();
        for e in entries.flatten() {
            let d = e.path();
            seen.push((e.file_name().to_string_lossy().into_owned(), d.is_dir()));
            if d.is_dir() && layout(&d) != Layout::Other {
                dirs.push(d);
            }
        }
        if dirs.is_empty() {
            return Err(TaskError::UnknownLayout {
                path: p.clone(),
                found: found(&seen),
            });
        }
        dirs.sort();
        for d in dirs {
            tasks.push(load_any(&d)?);
        }
    }
    tasks.sort_by(|a, b| a.name.cmp(&b.name));
    for w in tasks.windows(2) {
        if w[0].name == w[1].name {
            return Err(TaskError::Duplicate {
                name: w[0].name.clone(),
                a: w[0].source_dir.clone(),
                b: w[1].source_dir.clone(),
            });
        }
    }
    Ok(tasks)
}

/// Keeps the tasks whose name matches any of the globs (all when none).
pub fn filter(tasks: Vec<Task>, globs: &[String]) -> Result<Vec<Task>, glob::PatternError> {
    if globs.is_empty() {
        return Ok(tasks);
    }
    let pats = globs
        .iter()
        .map(|g| glob::Pattern::new(g))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(tasks
        .into_iter()
        .filter(|t| pats.iter().any(|p| p.matches(&t.name)))
        .collect())
}
