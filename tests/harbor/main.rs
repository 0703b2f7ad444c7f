//! Harbor itself and `runner eval` on the same task directories, side by side:
//! the verdict of every task under each agent (oracle, nop) must be the same,
//! except the differences listed in `tests/harbor-differences.toml` (where
//! runner is stricter by design). Harbor is the one `make harbor` installs
//! (sandbox/harbor); without it this test FAILS with a hint, it never skips.
//! Every Docker object Harbor made for this test's jobs is removed at the end.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod differences;
mod harbor;
mod job_layout;
mod verdict;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use differences::Differences;
use harbor::{Harbor, HarborJob};
use support::binary::Dir;
use support::docker::{BOOKWORM, TINY, require_images};
use support::eval::{eval_cmd, report};
use verdict::{Verdict, runner_verdicts};

const AGENTS: [&str; 2] = ["oracle", "nop"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directories of tasks both graders run: examples/tasks and, when it
/// exists, tests/fixtures/eval/gaming. Each holds one task per subdirectory.
fn suites() -> Vec<PathBuf> {
    ["examples/tasks", "tests/fixtures/eval/gaming"]
        .iter()
        .map(|s| repo().join(s))
        .filter(|p| p.is_dir())
        .collect()
}

/// The task directories of the suites, by task name (the directory's name,
/// which is what both graders call a task).
fn tasks(suites: &[PathBuf]) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for suite in suites {
        for entry in std::fs::read_dir(suite).expect("read a suite") {
            let p = entry.expect("a suite entry").path();
            if p.join("task.toml").is_file() {
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                let old = out.insert(name.clone(), p);
                assert!(old.is_none(), "two tasks named {name} in {suites:?}");
            }
        }
    }
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(repo())
        .unwrap_or(p)
        .to_string_lossy()
        .to_string()
}

#[test]
fn harbor_and_runner_give_the_same_verdicts_on_the_same_tasks() {
    // Fails with the hint `make harbor` when Harbor is not installed.
    let harbor = Harbor::find();
    require_images(&[TINY, BOOKWORM]);
    let suites = suites();
    let tasks = tasks(&suites);
    assert!(!tasks.is_empty(), "no task directories in {suites:?}");
    let differences = Differences::load(&repo().join("tests/harbor-differences.toml"));
    differences.check_tasks(&tasks, &repo());

    let jobs_dir = repo().join("target/harbor-test");
    let images_before = harbor::harbor_images();
    // The job directories a failed run kept for inspection: whatever their
    // trials left is removed with them.
    if jobs_dir.is_dir() {
        let left = harbor::clean_up(&jobs_dir, &images_before);
        assert!(
            left.is_empty(),
            "an earlier run's objects cannot be removed: {left:?}"
        );
        std::fs::remove_dir_all(&jobs_dir).expect("remove an earlier run's target/harbor-test");
    }
    std::fs::create_dir_all(&jobs_dir).expect("create target/harbor-test");

    // Harbor's jobs run in the background (one per suite and agent, two
    // trials at a time each) while runner grades the same tasks.
    let started = Instant::now();
    let mut jobs: Vec<HarborJob> = Vec::new();
    for agent in AGENTS {
        for suite in &suites {
            jobs.push(harbor.start(&jobs_dir, suite, agent));
        }
    }

    let mut runner_verdict: BTreeMap<(String, String), Verdict> = BTreeMap::new();
    let mut runner_secs = BTreeMap::new();
    let suite_args: Vec<&str> = suites.iter().map(|s| s.to_str().unwrap()).collect();
    for agent in AGENTS {
        let d = Dir::new();
        let mut args = suite_args.clone();
        // A task's error (no reward file) is a verdict here, not a stop.
        args.extend(["--agent", agent, "--jobs", "2", "--fail-on-error=false"]);
        let t = Instant::now();
        let ran = support::binary::run(&mut eval_cmd(&d, &args));
        runner_secs.insert(agent, t.elapsed().as_secs_f64());
        assert!(
            matches!(ran.code(), 0 | 1),
            "runner eval --agent {agent} did not grade{}",
            ran.explain()
        );
        for (task, v) in runner_verdicts(&report(&d, &ran)) {
            let old = runner_verdict.insert((task.clone(), agent.to_string()), v);
            assert!(old.is_none(), "runner graded {task} twice under {agent}");
        }
    }

    let mut harbor_verdict: BTreeMap<(String, String), Verdict> = BTreeMap::new();
    let mut harbor_secs: BTreeMap<&str, f64> = BTreeMap::new();
    let mut job_failures = Vec::new();
    for job in jobs {
        let agent = job.agent;
        match job.wait() {
            Ok(done) => {
                let secs = harbor_secs.entry(agent).or_default();
                *secs = secs.max(done.elapsed.as_secs_f64());
                for (task, v) in &done.verdicts {
                    let old = harbor_verdict.insert((task.clone(), agent.to_string()), v.clone());
                    assert!(old.is_none(), "Harbor graded {task} twice under {agent}");
                }
            }
            Err(failed) => job_failures.push(failed),
        }
    }
    // Cleanup before any verdict is judged, so a failing comparison leaves
    // nothing behind either.
    let left = harbor::clean_up(&jobs_dir, &images_before);
    assert!(job_failures.is_empty(), "{}", job_failures.join("\n\n"));
    assert!(left.is_empty(), "Harbor's objects not removed: {left:?}");

    // The table: every task under every agent.
    let mut table =
        String::from("| task | agent | Harbor | runner | listed |\n|---|---|---|---|---|\n");
    let mut wrong = Vec::new();
    let mut seen = Vec::new();
    for (task, dir) in &tasks {
        for agent in AGENTS {
            let key = (task.clone(), agent.to_string());
            let h = harbor_verdict.get(&key);
            let r = runner_verdict.get(&key);
            let listed = differences.find(&rel(dir), agent);
            let h_text = h.map_or("missing".to_string(), Verdict::harbor_text);
            let r_text = r.map_or("missing".to_string(), Verdict::runner_text);
            table.push_str(&format!(
                "| {} | {agent} | {h_text} | {r_text} | {} |\n",
                rel(dir),
                if listed.is_some() { "yes" } else { "" }
            ));
            let (Some(h), Some(r)) = (h, r) else {
                wrong.push(format!(
                    "{} under {agent}: Harbor {h_text}, runner {r_text}",
                    rel(dir)
                ));
                continue;
            };
            match listed {
                Some(d) => {
                    seen.push(d.index);
                    if d.harbor != h.harbor_text() || d.runner != r.runner_text() {
                        wrong.push(format!(
                            "{} under {agent}: listed as Harbor {} / runner {} ({}), observed Harbor {} / runner {}",
                            rel(dir),
                            d.harbor,
                            d.runner,
                            d.reason,
                            h.harbor_text(),
                            r.runner_text()
                        ));
                    }
                }
                None if h.class() != r.class() => wrong.push(format!(
                    "{} under {agent}: Harbor {}, runner {} (not a listed difference)",
                    rel(dir),
                    h.harbor_text(),
                    r.runner_text()
                )),
                None => {}
            }
        }
    }
    let stale = differences.unseen(&seen);
    let timings = format!(
        "Harbor (jobs in parallel, --n-concurrent 2): oracle {:.0} s, nop {:.0} s; runner --jobs 2: oracle {:.0} s, nop {:.0} s; all {:.0} s",
        harbor_secs.get("oracle").copied().unwrap_or_default(),
        harbor_secs.get("nop").copied().unwrap_or_default(),
        runner_secs.get("oracle").copied().unwrap_or_default(),
        runner_secs.get("nop").copied().unwrap_or_default(),
        started.elapsed().as_secs_f64()
    );
    eprintln!("{table}\n{timings}");
    assert!(
        wrong.is_empty() && stale.is_empty(),
        "Harbor and runner disagree:\n{}\n{}\n\n{table}\n{timings}\n\
         hint: a difference by design goes into tests/harbor-differences.toml (and the README) with its reason",
        wrong.join("\n"),
        stale
            .iter()
            .map(|s| format!("listed but not for a task and agent graded here: {s}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Harbor's job directories are kept when a check fails above; removed here.
    let _ = std::fs::remove_dir_all(&jobs_dir);
}
