//! The output directory of a suite: opened afresh, or continued with
//! `--resume` (the same suite and settings, checked by fingerprint), and
//! what an attempt's directory already holds from an earlier try.

use std::path::{Path, PathBuf};

use super::EvalError;
use super::manifest::{self, Shard, SuiteManifest};
use super::outcome::{Attempt, EarlierTry, ErrorKind, Status};

/// Writes the suite's manifest into a fresh `dir`, or checks the one
/// there when resuming; the manifest the run goes on with.
pub fn open(dir: &Path, resume: bool, fresh: SuiteManifest) -> Result<SuiteManifest, EvalError> {
    let existing = dir.join(manifest::SUITE_FILE);
    let there = std::fs::symlink_metadata(&existing).is_ok();
    if !resume {
        if there {
            return Err(EvalError::OutputInUse(dir.to_path_buf()));
        }
        manifest::write_suite(dir, &fresh)?;
        return Ok(fresh);
    }
    let old = manifest::read_suite(dir)?;
    if old.fingerprint != fresh.fingerprint || old.shard != fresh.shard {
        return Err(EvalError::ResumeMismatch {
            dir: dir.to_path_buf(),
            detail: differences(&old, &fresh),
        });
    }
    Ok(old)
}

/// What differs between two manifests, in one line.
pub fn differences(old: &SuiteManifest, new: &SuiteManifest) -> String {
    let mut out = Vec::new();
    if old.tasks != new.tasks {
        let gone: Vec<&str> = old
            .tasks
            .iter()
            .filter(|t| !new.tasks.contains(t))
            .map(String::as_str)
            .collect();
        let added: Vec<&str> = new
            .tasks
            .iter()
            .filter(|t| !old.tasks.contains(t))
            .map(String::as_str)
            .collect();
        out.push(format!(
            "tasks (not in this run: {}; new: {})",
            list(&gone),
            list(&added)
        ));
    }
    if old.attempts_per_task != new.attempts_per_task {
        out.push(format!(
            "--attempts ({} then, {} now)",
            old.attempts_per_task, new.attempts_per_task
        ));
    }
    if old.shard != new.shard {
        let show = |s: Option<Shard>| s.map_or("none".to_string(), |s| s.to_string());
        out.push(format!(
            "--shard ({} then, {} now)",
            show(old.shard),
            show(new.shard)
        ));
    }
    if let (Some(a), Some(b)) = (old.settings.as_object(), new.settings.as_object()) {
        let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            if a.get(k) != b.get(k) {
                let show = |v: Option<&serde_json::Value>| {
                    v.map_or("unset".to_string(), serde_json::Value::to_string)
                };
                out.push(format!(
                    "{k} ({} then, {} now)",
                    show(a.get(k)),
                    show(b.get(k))
                ));
            }
        }
    }
    if out.is_empty() {
        // Only the hashed part differs: --env values, --system or --price.
        out.push("the values of --env, --system or --price".into());
    }
    out.join(", ")
}

fn list(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(" ")
    }
}

/// What an attempt's directory holds before it runs.
#[derive(Debug)]
pub enum Prior {
    /// A verdict (pass, fail, or the task's own error): kept as it is.
    Done(Box<Attempt>),
    /// Run it; these tries came before (their directories moved aside).
    Run(Vec<EarlierTry>),
}

/// Whether an earlier record is a verdict a rerun would only repeat.
pub fn is_final(a: &Attempt) -> bool {
    matches!(a.status, Status::Pass | Status::Fail)
        || (a.status == Status::Error && a.error_kind == Some(ErrorKind::Task))
}

/// Looks at `run_path` (resume only): a finished record is kept; anything
/// else there is moved aside as an earlier try.
pub fn prior(run_path: &Path) -> std::io::Result<Prior> {
    let record = manifest::read_attempt(run_path);
    if let Some(a) = record.as_ref().filter(|a| is_final(a)) {
        // Its flag derived again, as for an attempt that just ran.
        return Ok(Prior::Done(Box::new(super::flagged::marked(a.clone()))));
    }
    let mut earlier = record
        .as_ref()
        .map(|a| a.earlier_tries.clone())
        .unwrap_or_default();
    // Skipped by the budget: it never ran, so there is no try to keep, only
    // its record (a directory holding anything else is kept as a try).
    if record.as_ref().is_some_and(|a| a.status == Status::Skipped) {
        std::fs::remove_file(run_path.join(manifest::ATTEMPT_FILE))?;
        if std::fs::remove_dir(run_path).is_ok() {
            return Ok(Prior::Run(earlier));
        }
    }
    if std::fs::symlink_metadata(run_path).is_ok() {
        let kept = move_aside(run_path)?;
        earlier.push(EarlierTry {
            run_dir: kept,
            status: match record.as_ref().map(|a| a.status) {
                Some(Status::Error) => Status::Error,
                _ => Status::Interrupted,
            },
            error: record.and_then(|a| a.error),
        });
    }
    Ok(Prior::Run(earlier))
}

/// Renames an attempt's directory to the first free `<n>.try<k>` beside
/// it (a rename: nothing inside is read or followed); the new path.
pub fn move_aside(run_path: &Path) -> std::io::Result<PathBuf> {
    let name = run_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for k in 1..10_000u32 {
        let to = run_path.with_file_name(format!("{name}.try{k}"));
        if std::fs::symlink_metadata(&to).is_err() {
            std::fs::rename(run_path, &to)?;
            return Ok(to);
        }
    }
    Err(std::io::Error::other(format!(
        "{}: too many earlier tries kept beside it",
        run_path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_with(tasks: &[&str], settings: serde_json::Value) -> SuiteManifest {
        let tasks: Vec<String> = tasks.iter().map(|t| t.to_string()).collect();
        SuiteManifest {
            format: manifest::MANIFEST_VERSION,
            id: "eval-x".into(),
            fingerprint: manifest::fingerprint(&tasks, 1, &settings, b""),
            shard_tasks: tasks.clone(),
            tasks,
            attempts_per_task: 1,
            settings,
            shard: None,
            started_at: chrono::Local::now(),
            invocation: None,
        }
    }

    #[test]
    fn a_fresh_directory_gets_a_manifest_and_a_used_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let m = manifest_with(&["a"], serde_json::json!({"agent": "oracle"}));
        open(dir.path(), false, m.clone()).unwrap();
        assert!(matches!(
            open(dir.path(), false, m.clone()),
            Err(EvalError::OutputInUse(_))
        ));
        // Resuming with the same suite keeps the first id.
        let mut again = m.clone();
        again.id = "eval-y".into();
        assert_eq!(open(dir.path(), true, again).unwrap().id, "eval-x");
        // Other settings are named.
        let other = manifest_with(&["a", "b"], serde_json::json!({"agent": "nop"}));
        match open(dir.path(), true, other) {
            Err(EvalError::ResumeMismatch { detail, .. }) => {
                assert!(detail.contains("new: b"), "{detail}");
                assert!(
                    detail.contains(r#"agent ("oracle" then, "nop" now)"#),
                    "{detail}"
                );
            }
            other => panic!("{other:?}"),
        }
        // No manifest: nothing to resume.
        let empty = tempfile::tempdir().unwrap();
        assert!(open(empty.path(), true, m).is_err());
    }

    #[test]
    fn verdicts_are_kept_and_the_rest_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("t").join("1");
        // Nothing there: run, no earlier tries.
        assert!(matches!(prior(&run).unwrap(), Prior::Run(e) if e.is_empty()));
        // A try that never recorded its end.
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("trajectory.jsonl"), "{}\n").unwrap();
        let Prior::Run(e) = prior(&run).unwrap() else {
            panic!("kept an unfinished try")
        };
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].status, Status::Interrupted);
        assert_eq!(e[0].run_dir, dir.path().join("t").join("1.try1"));
        assert!(e[0].run_dir.join("trajectory.jsonl").exists());
        assert!(!run.exists());
        // An infrastructure error is run again, its history carried on.
        let mut a = Attempt::not_run("t", 1, run.clone(), Status::Error, "engine".into());
        a.earlier_tries = e;
        manifest::write_attempt(&a).unwrap();
        let Prior::Run(e) = prior(&run).unwrap() else {
            panic!("kept an error")
        };
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].status, Status::Error);
        assert_eq!(e[1].error.as_deref(), Some("engine"));
        assert!(e[1].run_dir.ends_with("1.try2"));
        // Skipped by the budget: run, with no try counted.
        let s = Attempt::not_run("t", 1, run.clone(), Status::Skipped, "budget".into());
        manifest::write_attempt(&s).unwrap();
        assert!(matches!(prior(&run).unwrap(), Prior::Run(e) if e.is_empty()));
        assert!(!run.exists());
        // A flagged pass is kept flagged, its flag derived again.
        let mut p = Attempt::not_run("t", 1, run.clone(), Status::Pass, String::new());
        p.signals.push(crate::eval::evidence::Signal {
            kind: "tests".into(),
            detail: "modified /tests".into(),
        });
        manifest::write_attempt(&p).unwrap();
        assert!(matches!(prior(&run).unwrap(), Prior::Done(a) if a.flagged));
        // A fail is a verdict.
        let f = Attempt::not_run("t", 1, run.clone(), Status::Fail, String::new());
        manifest::write_attempt(&f).unwrap();
        assert!(matches!(prior(&run).unwrap(), Prior::Done(a) if a.status == Status::Fail));
    }
}
