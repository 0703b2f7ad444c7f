//! `runner eval merge DIR...`: the output directories of a suite's shards
//! (`runner eval --shard I/N`, each perhaps on its own machine) put back
//! together into one set of reports, as if one process had run the suite.
//!
//! Only what the directories say is used: each `suite.json` (which suite,
//! which shard) and each attempt's `attempt.json`. An attempt without a
//! record (its shard was stopped first) is reported as interrupted.

pub mod rules;

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::manifest::{self, ATTEMPT_FILE, SUITE_FILE, Shard, SuiteManifest};
use super::outcome::{Attempt, Status};
use super::report;
use crate::hints::Failure;
use crate::redact::Redactor;
use crate::terminal::visible;
pub use rules::MergeError;

/// Everything `runner eval merge` is told.
#[derive(Debug, Clone)]
pub struct MergeSettings {
    /// The shards' output directories (or one whole-suite directory).
    pub dirs: Vec<PathBuf>,
    pub json: Option<PathBuf>,
    pub junit: Option<PathBuf>,
    pub summary: Option<PathBuf>,
    pub min_pass_rate: f64,
    pub fail_on_error: bool,
    /// `--accept-flagged`: flagged passes count as passes for the exit code.
    pub accept_flagged: bool,
    /// Report the attempts of shards not given as not run, instead of refusing.
    pub allow_missing: bool,
}

/// Merges, writes the reports, prints the table; the exit code as
/// `runner eval` gives it, or the failure to print (exit 2).
pub fn run(args: &MergeSettings) -> Result<u8, Failure> {
    run_inner(args).map_err(|e| match e {
        Refused::Merge(e) => Failure::new(e.to_string(), e.hint()),
        Refused::Report(e) => e.into(),
    })
}

/// A merge stopped before or while writing its reports.
enum Refused {
    Merge(MergeError),
    Report(super::EvalError),
}

impl From<MergeError> for Refused {
    fn from(e: MergeError) -> Refused {
        Refused::Merge(e)
    }
}

fn run_inner(args: &MergeSettings) -> Result<u8, Refused> {
    if !(0.0..=1.0).contains(&args.min_pass_rate) {
        return Err(MergeError::MinPassRate.into());
    }
    for (flag, p) in [
        ("--json", &args.json),
        ("--junit", &args.junit),
        ("--summary", &args.summary),
    ] {
        crate::output_path::refuse_link(flag, p.as_deref())
            .map_err(|e| Refused::Report(e.into()))?;
    }
    let mut parts = Vec::new();
    let mut canonical = Vec::new();
    for dir in &args.dirs {
        let m = manifest::read_suite(dir).map_err(MergeError::from)?;
        // A directory that resolves to another one given is the same
        // shard twice; one that cannot be resolved was not readable above.
        canonical.push(dir.canonicalize().unwrap_or_else(|_| dir.clone()));
        parts.push((dir.clone(), m));
    }
    let accepted = rules::accept(parts, &canonical, args.allow_missing)?;
    let Some((_, first)) = accepted.parts.first() else {
        return Err(MergeError::NoDirs.into());
    };
    let first = first.clone();

    let mut attempts = Vec::new();
    let mut longest = Duration::ZERO;
    let mut stopped = 0;
    for (dir, m) in &accepted.parts {
        // Absolute, as eval writes them: the reports' paths work from anywhere.
        let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        let shard = collect(&abs, m);
        stopped += shard
            .attempts
            .iter()
            .filter(|a| a.status == Status::Interrupted)
            .count();
        attempts.extend(shard.attempts);
        longest = longest.max(shard.span);
    }
    for s in &accepted.missing {
        attempts.extend(not_given(&first, *s));
    }
    attempts.sort_by(|a, b| (a.task.as_str(), a.attempt).cmp(&(b.task.as_str(), b.attempt)));

    // The records were redacted when written; runner's own credentials
    // are kept out of the reports here too, as everywhere.
    let redactor = host_redactor();
    let (task_sums, totals) = report::summarize(&attempts, first.attempts_per_task, longest);
    eprint!("{}", redactor.redact(&report::table(&attempts, &totals)));
    let meta = meta(&first, &accepted, &args.dirs);
    let agent = first.settings["agent"].as_str().unwrap_or("?");
    let title = match accepted.parts.len() {
        1 if first.shard.is_none() => format!("runner eval merge ({agent})"),
        n => format!(
            "runner eval merge ({agent}, {n} of {} shards)",
            first.shard.map_or(1, |s| s.count)
        ),
    };
    let files = super::ReportFiles {
        json: args.json.as_deref(),
        junit: args.junit.as_deref(),
        summary: args.summary.as_deref(),
        title: &title,
    };
    super::write_report_files(
        &files, &attempts, &task_sums, &totals, meta, longest, &redactor,
    )
    .map_err(Refused::Report)?;
    for (dir, m) in &accepted.parts {
        let which = m
            .shard
            .map_or("whole suite".into(), |s| format!("shard {s}"));
        eprintln!("merged {which}: {}", visible(&dir.display().to_string()));
    }
    if stopped > 0 {
        eprintln!(
            "warning: {stopped} attempts of the shards given did not run to their end; continue their shard with `runner eval ... --shard I/N --resume DIR` and merge again"
        );
    }
    // As `runner eval`: an interrupted suite exits 130 (here: a shard that
    // was stopped); the shards --allow-missing leaves out do not count.
    let rules = super::flagged::ExitRules {
        min_pass_rate: args.min_pass_rate,
        fail_on_error: args.fail_on_error,
        accept_flagged: args.accept_flagged,
    };
    if let Some(n) = super::flagged::notice(&totals, rules) {
        eprintln!("{n}");
    }
    Ok(if stopped > 0 {
        130
    } else {
        super::flagged::exit_code(&totals, rules)
    })
}

/// What one directory holds.
struct Collected {
    /// Its shard's tasks, every attempt of each.
    attempts: Vec<Attempt>,
    /// How long the shard ran: from its `started_at` to its last record.
    span: Duration,
}

fn collect(dir: &Path, m: &SuiteManifest) -> Collected {
    let mut out = Vec::new();
    let mut last = None;
    for task in &m.shard_tasks {
        for n in 1..=m.attempts_per_task {
            let run_dir = dir.join(task).join(n.to_string());
            if let Some(link) = link_on_the_way(dir, task, n) {
                out.push(through_link(task, n, run_dir, &link));
                continue;
            }
            let a = match manifest::read_attempt(&run_dir) {
                Some(a) if a.task == *task && a.attempt == n => {
                    let written = std::fs::symlink_metadata(run_dir.join(ATTEMPT_FILE))
                        .and_then(|md| md.modified())
                        .ok();
                    last = last.max(written);
                    super::flagged::marked(rebase(a, &run_dir))
                }
                Some(a) => interrupted(
                    task,
                    n,
                    run_dir,
                    format!(
                        "the record in this directory is of {}#{}, not of this attempt",
                        a.task, a.attempt
                    ),
                ),
                None => interrupted(
                    task,
                    n,
                    run_dir,
                    format!(
                        "interrupted: no {ATTEMPT_FILE} (the shard was stopped before this attempt ended)"
                    ),
                ),
            };
            out.push(a);
        }
    }
    let started = std::time::SystemTime::from(m.started_at);
    let span = last
        .and_then(|l| l.duration_since(started).ok())
        .unwrap_or_default();
    Collected {
        attempts: out,
        span,
    }
}

/// `DIR/TASK` or `DIR/TASK/N` when it is a link: a shard directory may
/// come from another machine, and a record read through a link there
/// could be any file's (another suite's, a forged one).
fn link_on_the_way(dir: &Path, task: &str, n: u32) -> Option<PathBuf> {
    let task_dir = dir.join(task);
    [task_dir.clone(), task_dir.join(n.to_string())]
        .into_iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
}

/// An attempt whose directory is a link: not read, reported as an error.
fn through_link(task: &str, n: u32, run_dir: PathBuf, link: &Path) -> Attempt {
    let why = format!(
        "{} is a link; merge reads no record through a link (copy the directory itself into the shard)",
        link.display()
    );
    eprintln!("warning: {task}#{n}: {}", visible(&why));
    let mut a = Attempt::not_run(task, n, run_dir, Status::Error, String::new());
    a.agent_outcome = "not_run".into();
    a.error = Some(why);
    a
}

/// An attempt reported as interrupted, saying why.
fn interrupted(task: &str, n: u32, run_dir: PathBuf, why: String) -> Attempt {
    let mut a = Attempt::not_run(task, n, run_dir, Status::Interrupted, String::new());
    a.agent_outcome = "not_run".into();
    a.error = Some(why);
    a
}

/// The attempts of a shard nobody gave (`--allow-missing`): not run, with
/// no run directory.
fn not_given(m: &SuiteManifest, s: Shard) -> Vec<Attempt> {
    rules::tasks_of(&m.tasks, Some(s))
        .iter()
        .flat_map(|t| {
            (1..=m.attempts_per_task).map(move |n| {
                interrupted(
                    t,
                    n,
                    PathBuf::new(),
                    format!("not run: shard {s} was not merged (--allow-missing)"),
                )
            })
        })
        .collect()
}

/// The record with its paths moved to where the directory is now: a
/// shard's record names the run directory on the machine that ran it.
fn rebase(mut a: Attempt, run_dir: &Path) -> Attempt {
    let old = std::mem::replace(&mut a.run_dir, run_dir.to_path_buf());
    let regrade_dir = a.regrade.as_mut().map(|r| &mut r.run_dir);
    for p in [&mut a.trajectory, &mut a.verifier_log]
        .into_iter()
        .flatten()
        .chain(regrade_dir)
    {
        if let Ok(rel) = p.strip_prefix(&old) {
            *p = run_dir.join(rel);
        }
    }
    a
}

/// The JSON report's `suite`: the merged suite, which directories and
/// shards it came from, and its fingerprint.
fn meta(first: &SuiteManifest, accepted: &rules::Accepted, dirs: &[PathBuf]) -> serde_json::Value {
    let from: Vec<serde_json::Value> = accepted
        .parts
        .iter()
        .map(|(dir, m)| {
            serde_json::json!({
                "dir": std::path::absolute(dir).unwrap_or_else(|_| dir.clone()),
                "shard": m.shard.map(|s| s.to_string()),
                "id": m.id,
                "started_at": m.started_at,
            })
        })
        .collect();
    serde_json::json!({
        "merged_from": from,
        "missing_shards": accepted.missing.iter().map(Shard::to_string).collect::<Vec<_>>(),
        "fingerprint": first.fingerprint,
        "agent": first.settings["agent"],
        "settings": first.settings,
        "attempts_per_task": first.attempts_per_task,
        "tasks": first.tasks.len(),
        "shard_count": first.shard.map_or(1, |s| s.count),
        "dirs": dirs,
        "suite_file": SUITE_FILE,
        "merged_at": chrono::Local::now(),
    })
}

/// A redactor of the credentials in runner's own environment.
fn host_redactor() -> Redactor {
    // vars_os: std::env::vars panics on a variable that is not UTF-8.
    let host_env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    crate::redact::collect(host_env, None, &[])
        .map(|c| c.redactor)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::manifest::{MANIFEST_VERSION, fingerprint, write_suite};

    /// A shard directory of tasks a..d with the records of `done`.
    fn shard_dir(root: &Path, name: &str, shard: Shard, done: &[(&str, Status)]) -> PathBuf {
        let dir = root.join(name);
        let tasks: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let settings = serde_json::json!({"agent": "oracle"});
        let m = SuiteManifest {
            format: MANIFEST_VERSION,
            id: format!("eval-{name}"),
            fingerprint: fingerprint(&tasks, 1, &settings, b""),
            shard_tasks: rules::tasks_of(&tasks, Some(shard)),
            tasks,
            attempts_per_task: 1,
            settings,
            shard: Some(shard),
            started_at: chrono::Local::now(),
            invocation: None,
        };
        write_suite(&dir, &m).unwrap();
        for (t, st) in done {
            // Written on "another machine": the paths are not these.
            let elsewhere = PathBuf::from("/elsewhere/out").join(t).join("1");
            let mut a = Attempt::not_run(t, 1, elsewhere.clone(), *st, String::new());
            a.pass = *st == Status::Pass;
            a.reward = Some(if a.pass { 1.0 } else { 0.0 });
            a.trajectory = Some(elsewhere.join("trajectory.jsonl"));
            let text = serde_json::to_string(&a).unwrap();
            let here = dir.join(t).join("1");
            std::fs::create_dir_all(&here).unwrap();
            std::fs::write(here.join(ATTEMPT_FILE), text).unwrap();
        }
        dir
    }

    fn settings(dirs: Vec<PathBuf>, out: &Path) -> MergeSettings {
        MergeSettings {
            dirs,
            json: Some(out.join("merged.json")),
            junit: Some(out.join("merged.xml")),
            summary: Some(out.join("merged.md")),
            min_pass_rate: 1.0,
            fail_on_error: true,
            accept_flagged: false,
            allow_missing: false,
        }
    }

    #[test]
    fn shards_merge_into_one_report_with_paths_rebased() {
        let root = tempfile::tempdir().unwrap();
        let s = |index| Shard { index, count: 2 };
        // Shard 1 holds a and c; shard 2 b and d.
        let d1 = shard_dir(
            root.path(),
            "s1",
            s(1),
            &[("a", Status::Pass), ("c", Status::Pass)],
        );
        let d2 = shard_dir(
            root.path(),
            "s2",
            s(2),
            &[("b", Status::Pass), ("d", Status::Fail)],
        );
        let args = settings(vec![d2.clone(), d1.clone()], root.path());
        assert_eq!(run(&args).unwrap(), 1, "one fail: below --min-pass-rate 1");
        let r: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root.path().join("merged.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(r["totals"]["passed"], 3);
        assert_eq!(r["totals"]["failed"], 1);
        assert_eq!(r["totals"]["pass_rate"], 0.75);
        let names: Vec<&str> = r["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
        let from = r["suite"]["merged_from"].as_array().unwrap();
        assert_eq!(from[0]["shard"], "1/2");
        assert_eq!(from[1]["shard"], "2/2");
        let a = &r["attempts"][0];
        assert_eq!(a["run_dir"], d1.join("a/1").display().to_string());
        assert_eq!(
            a["trajectory"],
            d1.join("a/1/trajectory.jsonl").display().to_string()
        );
        let xml = std::fs::read_to_string(root.path().join("merged.xml")).unwrap();
        assert!(xml.contains("tests=\"4\""), "{xml}");
        let md = std::fs::read_to_string(root.path().join("merged.md")).unwrap();
        assert!(md.contains("2 of 2 shards"), "{md}");
        // At a lower bar the same merge passes.
        let args = MergeSettings {
            min_pass_rate: 0.75,
            ..args
        };
        assert_eq!(run(&args).unwrap(), 0);
    }

    #[test]
    fn flagged_passes_are_counted_through_and_fail_the_merge_unless_accepted() {
        let root = tempfile::tempdir().unwrap();
        let whole = Shard { index: 1, count: 1 };
        let d = shard_dir(
            root.path(),
            "s",
            whole,
            &[
                ("a", Status::Pass),
                ("b", Status::Pass),
                ("c", Status::Pass),
                ("d", Status::Pass),
            ],
        );
        // b's record carries evidence against the verifier but says it is
        // not flagged (forged, or written by an older runner): the merge
        // derives the flag from the signals.
        let rec = d.join("b/1").join(ATTEMPT_FILE);
        let mut b: Attempt = serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
        b.grading = Some(crate::eval::mode::GradingMode::Shared);
        b.signals.push(crate::eval::evidence::Signal {
            kind: "interpreter".into(),
            detail: "added /usr/local/bin/python3 (an interpreter tests run through)".into(),
        });
        b.flagged = false;
        std::fs::write(&rec, serde_json::to_string(&b).unwrap()).unwrap();
        let args = settings(vec![d.clone()], root.path());
        assert_eq!(run(&args).unwrap(), 1, "a flagged pass fails the merge");
        let r: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root.path().join("merged.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            (&r["totals"]["passed"], &r["totals"]["flagged"]),
            (&4.into(), &1.into())
        );
        assert_eq!(r["attempts"][1]["flagged"], true);
        let md = std::fs::read_to_string(root.path().join("merged.md")).unwrap();
        assert!(
            md.contains("4 passed (1 flagged)") && md.contains("Flagged passes"),
            "{md}"
        );
        let xml = std::fs::read_to_string(root.path().join("merged.xml")).unwrap();
        assert!(
            xml.contains("flagged: evidence against the verifier (interpreter)"),
            "{xml}"
        );
        let accepted = MergeSettings {
            accept_flagged: true,
            ..args
        };
        assert_eq!(run(&accepted).unwrap(), 0);
    }

    #[test]
    fn missing_records_are_interrupted_and_missing_shards_not_run() {
        let root = tempfile::tempdir().unwrap();
        let s = |index| Shard { index, count: 2 };
        // c never recorded its end.
        let d1 = shard_dir(root.path(), "s1", s(1), &[("a", Status::Pass)]);
        let args = MergeSettings {
            allow_missing: true,
            ..settings(vec![d1.clone()], root.path())
        };
        assert_eq!(run(&args).unwrap(), 130, "a stopped shard: as eval, 130");
        let r: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root.path().join("merged.json")).unwrap(),
        )
        .unwrap();
        let by_task = |t: &str| {
            r["attempts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["task"] == t)
                .unwrap()
                .clone()
        };
        assert_eq!(by_task("a")["status"], "pass");
        let c = by_task("c");
        assert_eq!(c["status"], "interrupted");
        assert!(
            c["error"]
                .as_str()
                .unwrap()
                .contains("interrupted: no attempt.json"),
            "{c}"
        );
        let b = by_task("b");
        assert_eq!(b["status"], "interrupted");
        assert!(
            b["error"]
                .as_str()
                .unwrap()
                .contains("shard 2/2 was not merged"),
            "{b}"
        );
        assert_eq!(r["suite"]["missing_shards"][0], "2/2");
        assert_eq!(r["totals"]["interrupted"], 3);

        // Without --allow-missing the same merge is refused, writing nothing.
        std::fs::remove_file(root.path().join("merged.json")).unwrap();
        let f = run(&settings(vec![d1], root.path())).unwrap_err();
        assert!(f.message.contains("shard 2 of 2 is missing"), "{f:?}");
        assert!(!root.path().join("merged.json").exists());
    }

    #[test]
    fn a_directory_without_a_manifest_or_a_bad_bar_is_a_usage_error() {
        let root = tempfile::tempdir().unwrap();
        let f = run(&settings(vec![root.path().join("nowhere")], root.path())).unwrap_err();
        assert!(f.message.contains("suite.json"), "{f:?}");
        assert!(f.hint.unwrap().contains("output directory"));
        let d1 = shard_dir(root.path(), "s1", Shard { index: 1, count: 1 }, &[]);
        let args = MergeSettings {
            min_pass_rate: 1.5,
            ..settings(vec![d1], root.path())
        };
        assert!(run(&args).unwrap_err().message.contains("--min-pass-rate"));
    }
}
