//! The suite's reports: the table on stderr, JSON, JUnit XML and the
//! Markdown summary, all made from the same attempt records.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde::Serialize;
use serde_json::json;

use super::outcome::{Attempt, Status};
use crate::convert::u32_from_usize;
use crate::model::Usage;
use crate::terminal::{one_cell, visible};

/// Version of the JSON report's format (documented in docs/02-eval.md).
pub const JSON_REPORT_VERSION: u32 = 1;

/// One task's attempts, aggregated.
#[derive(Debug, Clone, Serialize)]
pub struct TaskSummary {
    pub task: String,
    pub attempts: u32,
    pub passes: u32,
    pub errors: u32,
    /// Mean reward of the graded attempts (`null` when none was graded).
    pub mean_reward: Option<f64>,
    /// Whether any of the k attempts passed.
    pub pass_at_k: bool,
}

/// Suite totals.
#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    pub tasks: usize,
    pub attempts: usize,
    pub passed: usize,
    pub failed: usize,
    pub errors: usize,
    pub interrupted: usize,
    /// Never started: the suite's budget was spent (`--suite-max-cost`).
    pub skipped: usize,
    /// Tries run again after an infrastructure error (`--retry-errors`).
    pub retries: usize,
    /// Errors of the tasks' verifiers (no usable reward file), counted as
    /// not passed; the rest of `errors` are infrastructure errors.
    pub task_errors: usize,
    /// passed / (passed + failed + task_errors): infrastructure errors and
    /// interrupted attempts are neither passes nor fails.
    pub pass_rate: f64,
    /// Passes with a signal against the verifier itself (counted in
    /// `passed`; see [`super::flagged`]).
    pub flagged: usize,
    /// Flagged passes graded again in isolation (`--regrade-flagged`).
    pub regraded: usize,
    /// Of those, the ones whose regrade passed, and the ones it did not
    /// pass (a fail, or an error of the task); the rest ended in an
    /// infrastructure error.
    pub regrade_passed: usize,
    pub regrade_failed: usize,
    /// The pass rate with each regraded flagged pass counted as its
    /// regrade's verdict; `null` when none was regraded.
    pub regrade_pass_rate: Option<f64>,
    /// Mean over tasks of (passes / attempts).
    pub pass_at_1: f64,
    /// Fraction of tasks with at least one passing attempt out of k.
    pub pass_at_k: f64,
    pub k: u32,
    pub mean_reward: Option<f64>,
    pub usage: Usage,
    pub cost_usd: f64,
    pub duration_ms: u64,
    /// How long running slots waited for the attempts' sandboxes.
    pub sandbox_wait: SandboxWait,
}

/// How long attempts waited for a sandbox: a running slot standing idle
/// until the attempt's sandbox was ready (the warm pool makes it ready
/// ahead), over the attempts that set one up.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SandboxWait {
    /// Attempts that set up a sandbox.
    pub attempts: usize,
    /// Of those, the ones whose sandbox was ready before a slot freed.
    pub warm: usize,
    pub median_ms: u64,
    pub max_ms: u64,
    pub total_ms: u64,
}

impl SandboxWait {
    fn of(attempts: &[Attempt]) -> SandboxWait {
        let mut waits: Vec<u64> = attempts
            .iter()
            .filter(|a| a.phases.setup_ms > 0)
            .map(|a| a.phases.sandbox_wait_ms)
            .collect();
        waits.sort_unstable();
        SandboxWait {
            attempts: waits.len(),
            warm: waits.iter().filter(|w| **w == 0).count(),
            median_ms: waits.get(waits.len() / 2).copied().unwrap_or(0),
            max_ms: waits.last().copied().unwrap_or(0),
            total_ms: waits.iter().sum(),
        }
    }

    /// One line for the end of the table; `None` when nothing set up.
    pub fn line(&self) -> Option<String> {
        (self.attempts > 0).then(|| {
            format!(
                "sandboxes: {} of {} ready before their turn (warm pool); slots waited {} for sandboxes (median {} ms, max {} ms)",
                self.warm,
                crate::plural::count_of(self.attempts, "attempt", "attempts"),
                fmt_secs(self.total_ms),
                self.median_ms,
                self.max_ms
            )
        })
    }
}

/// Aggregates per task (sorted by name) and for the suite.
pub fn summarize(attempts: &[Attempt], k: u32, duration: Duration) -> (Vec<TaskSummary>, Totals) {
    let mut by_task: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
    for a in attempts {
        by_task.entry(a.task.as_str()).or_default().push(a);
    }
    let tasks: Vec<TaskSummary> = by_task
        .iter()
        .map(|(name, list)| {
            let rewards: Vec<f64> = list.iter().filter_map(|a| a.reward).collect();
            TaskSummary {
                task: name.to_string(),
                attempts: u32_from_usize(list.len()),
                passes: u32_from_usize(list.iter().filter(|a| a.pass).count()),
                errors: u32_from_usize(list.iter().filter(|a| a.status == Status::Error).count()),
                mean_reward: mean(&rewards),
                pass_at_k: list.iter().any(|a| a.pass),
            }
        })
        .collect();
    let count = |s: Status| attempts.iter().filter(|a| a.status == s).count();
    let (passed, failed) = (count(Status::Pass), count(Status::Fail));
    let counted = attempts.iter().filter(|a| a.counted()).count();
    let flagged: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| super::flagged::is_flagged(a))
        .collect();
    let regrade_is = |ok: bool| {
        flagged
            .iter()
            .filter_map(|a| a.regrade.as_ref())
            .filter(|r| match r.status {
                Status::Pass => ok,
                Status::Fail => !ok,
                Status::Error => !ok && r.error_kind == Some(super::outcome::ErrorKind::Task),
                _ => false,
            })
            .count()
    };
    let regraded = flagged.iter().filter(|a| a.regrade.is_some()).count();
    let (regrade_passed, regrade_failed) = (regrade_is(true), regrade_is(false));
    let rate = |passes: usize| {
        if counted == 0 {
            0.0
        } else {
            passes as f64 / counted as f64
        }
    };
    let rewards: Vec<f64> = attempts.iter().filter_map(|a| a.reward).collect();
    let mut usage = Usage::default();
    for a in attempts {
        usage.add(&a.usage);
    }
    let n = tasks.len().max(1) as f64;
    let totals = Totals {
        tasks: tasks.len(),
        attempts: attempts.len(),
        passed,
        failed,
        errors: count(Status::Error),
        interrupted: count(Status::Interrupted),
        skipped: count(Status::Skipped),
        retries: attempts
            .iter()
            .flat_map(|a| &a.earlier_tries)
            .filter(|t| t.status == Status::Error)
            .count(),
        task_errors: counted - passed - failed,
        pass_rate: rate(passed),
        flagged: flagged.len(),
        regraded,
        regrade_passed,
        regrade_failed,
        regrade_pass_rate: (regraded > 0).then(|| rate(passed - regrade_failed)),
        pass_at_1: tasks
            .iter()
            .map(|t| t.passes as f64 / t.attempts.max(1) as f64)
            .sum::<f64>()
            / n,
        pass_at_k: tasks.iter().filter(|t| t.pass_at_k).count() as f64 / n,
        k,
        mean_reward: mean(&rewards),
        usage,
        cost_usd: attempts.iter().map(|a| a.cost_usd).sum(),
        duration_ms: crate::convert::millis_u64(duration),
        sandbox_wait: SandboxWait::of(attempts),
    };
    (tasks, totals)
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The JSON report.
pub fn json_report(
    attempts: &[Attempt],
    tasks: &[TaskSummary],
    totals: &Totals,
    meta: serde_json::Value,
) -> serde_json::Value {
    json!({
        "version": JSON_REPORT_VERSION,
        "suite": meta,
        "totals": totals,
        "tasks": tasks,
        "attempts": attempts,
    })
}

/// The JUnit report: one testsuite per task, one testcase per attempt;
/// a fail is `<failure>`, an infrastructure error `<error>`, an
/// interrupted attempt `<skipped>`.
pub fn junit(attempts: &[Attempt], duration: Duration) -> Result<String, String> {
    let mut report = Report::new("runner eval");
    report.set_time(duration);
    let mut suites: BTreeMap<&str, TestSuite> = BTreeMap::new();
    for a in attempts {
        let suite = suites
            .entry(a.task.as_str())
            .or_insert_with(|| TestSuite::new(a.task.clone()));
        let status = match a.status {
            Status::Pass => TestCaseStatus::success(),
            Status::Fail => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(a.failure.clone().unwrap_or_else(|| "failed".into()));
                s.set_type("fail");
                s
            }
            Status::Error => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
                s.set_message(a.error.clone().unwrap_or_else(|| "error".into()));
                s.set_type(match a.error_kind {
                    Some(super::outcome::ErrorKind::Task) => "task",
                    _ => "infrastructure",
                });
                s
            }
            Status::Interrupted => {
                let mut s = TestCaseStatus::skipped();
                s.set_message("interrupted");
                s
            }
            Status::Skipped => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(a.error.clone().unwrap_or_else(|| "skipped".into()));
                s
            }
        };
        let mut case = TestCase::new(format!("{} #{}", a.task, a.attempt), status);
        case.set_classname(a.task.clone());
        case.set_time(Duration::from_millis(a.phases.total_ms));
        // Properties inside a testcase are outside the common JUnit schema
        // (Jenkins junit-10), so the reward and outcome go to system-out.
        let mut out = format!(
            "reward: {}\nmetrics: {}\ngrading: {}\nagent_outcome: {}\nruntime: {}\nrun_dir: {}\n",
            fmt_reward(a),
            fmt_metrics(a),
            fmt_grading(a),
            a.agent_outcome,
            a.runtime.as_deref().unwrap_or("-"),
            a.run_dir.display()
        );
        for t in &a.earlier_tries {
            let _ = writeln!(
                out,
                "earlier try: {} {}: {}",
                t.status.as_str(),
                t.run_dir.display(),
                t.error.as_deref().unwrap_or("-")
            );
        }
        if super::flagged::is_flagged(a) {
            let _ = writeln!(
                out,
                "flagged: evidence against the verifier ({}); the suite fails unless --accept-flagged",
                super::flagged::kinds(a).join(", ")
            );
        }
        if let Some(r) = &a.regrade {
            let _ = writeln!(out, "regrade: {}", regrade_line(r));
        }
        for sig in &a.signals {
            let _ = writeln!(out, "signal: {}: {}", sig.kind, sig.detail);
        }
        for l in &a.loosenings {
            let _ = writeln!(out, "loosening: {l}");
        }
        case.set_system_out(out);
        suite.add_test_case(case);
    }
    report.add_test_suites(suites.into_values());
    report.to_string().map_err(|e| e.to_string())
}

fn fmt_reward(a: &Attempt) -> String {
    a.reward.map_or("-".into(), |r| format!("{r:.2}"))
}

fn fmt_metrics(a: &Attempt) -> String {
    if a.metrics.is_empty() {
        return "-".into();
    }
    a.metrics
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn fmt_grading(a: &Attempt) -> &'static str {
    a.grading.map_or("-", |g| g.as_str())
}

/// A regrade in one line: `isolated fail (reward 0.00): why`.
fn regrade_line(r: &super::outcome::Regrade) -> String {
    let reward = r.reward.map_or("-".into(), |v| format!("{v:.2}"));
    let mut s = format!("{} {} (reward {reward})", r.grading, r.status.as_str());
    if let Some(why) = &r.reason {
        let _ = write!(s, ": {}", one_line(why, 120));
    }
    s
}

fn fmt_secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// The table printed on stderr at the end. Task names and error texts
/// come from the suite and the sandbox: every cell is made visible.
pub fn table(attempts: &[Attempt], totals: &Totals) -> String {
    let names: Vec<String> = attempts
        .iter()
        .map(|a| one_cell(&format!("{}#{}", a.task, a.attempt)))
        .collect();
    let name_w = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<name_w$}  {:>6}  {:<12}  {:<8}  {:>5}  {:>8}  {:>8}  outcome",
        "task", "reward", "status", "grading", "steps", "duration", "cost"
    );
    for (a, name) in attempts.iter().zip(&names) {
        let mut outcome = a
            .error
            .as_deref()
            .or(a.failure.as_deref())
            .map(|e| format!("{}: {}", a.agent_outcome, one_line(e, 80)))
            .unwrap_or_else(|| a.agent_outcome.clone());
        if !a.signals.is_empty() {
            let _ = write!(outcome, " [{} tamper signals]", a.signals.len());
        }
        if let Some(r) = &a.regrade {
            let _ = write!(outcome, " [regrade {}]", regrade_line(r));
        }
        let _ = writeln!(
            s,
            "{name:<name_w$}  {:>6}  {:<12}  {:<8}  {:>5}  {:>8}  {:>8}  {}",
            fmt_reward(a),
            super::flagged::status_label(a),
            fmt_grading(a),
            a.steps,
            fmt_secs(a.phases.total_ms),
            format!("${:.4}", a.cost_usd),
            visible(&outcome),
        );
    }
    let _ = writeln!(s, "{}", totals_line(totals));
    if let Some(line) = totals.sandbox_wait.line() {
        let _ = writeln!(s, "{line}");
    }
    s
}

fn totals_line(t: &Totals) -> String {
    let at_k = if t.k > 1 {
        format!(", pass@{} {:.2}", t.k, t.pass_at_k)
    } else {
        String::new()
    };
    let errors = if t.task_errors > 0 {
        format!(
            "{} ({} without a reward, counted as not passed)",
            crate::plural::count_of(t.errors, "error", "errors"),
            t.task_errors
        )
    } else {
        crate::plural::count_of(t.errors, "error", "errors")
    };
    let mut more = String::new();
    let flagged = if t.flagged > 0 {
        format!(" ({} flagged)", t.flagged)
    } else {
        String::new()
    };
    if t.skipped > 0 {
        let _ = write!(more, ", {} skipped (budget)", t.skipped);
    }
    if t.retries > 0 {
        let _ = write!(more, ", {} retried", t.retries);
    }
    let mut regrade = String::new();
    if t.regraded > 0 {
        let _ = write!(
            regrade,
            " (isolated regrade: {} passed, {} failed",
            t.regrade_passed, t.regrade_failed
        );
        let errors = t.regraded - t.regrade_passed - t.regrade_failed;
        if errors > 0 {
            let _ = write!(regrade, ", {errors} errors");
        }
        let _ = write!(
            regrade,
            "; pass rate then {:.1}%)",
            t.regrade_pass_rate.unwrap_or(t.pass_rate) * 100.0
        );
    }
    format!(
        "{} passed{flagged}, {} failed, {errors}, {} interrupted{more} of {} ({}); pass rate {:.1}%{regrade}, pass@1 {:.2}{at_k}, mean reward {}, cost ${:.4}, {}",
        t.passed,
        t.failed,
        t.interrupted,
        crate::plural::count_of(t.attempts, "attempt", "attempts"),
        crate::plural::count_of(t.tasks, "task", "tasks"),
        t.pass_rate * 100.0,
        t.pass_at_1,
        t.mean_reward.map_or("-".into(), |r| format!("{r:.3}")),
        t.cost_usd,
        fmt_secs(t.duration_ms)
    )
}

fn one_line(s: &str, max: usize) -> String {
    let l: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if l.chars().count() > max {
        format!("{}...", l.chars().take(max).collect::<String>())
    } else {
        l
    }
}

/// The Markdown summary for a CI step summary. Cells are made visible
/// too: the file is often read with `cat` in a terminal.
pub fn markdown(attempts: &[Attempt], totals: &Totals, title: &str) -> String {
    let mut s = String::new();
    let icon = |a: &Attempt| match a.status {
        Status::Pass if super::flagged::is_flagged(a) => "🚩 pass (flagged)",
        Status::Pass => "✅ pass",
        Status::Fail => "❌ fail",
        Status::Error => "⚠️ error",
        Status::Interrupted => "⏹ interrupted",
        Status::Skipped => "⏭ skipped",
    };
    let _ = writeln!(s, "## {}\n\n{}\n", visible(title), totals_line(totals));
    let _ = writeln!(
        s,
        "| task | attempt | status | reward | metrics | grading | signals | steps | duration | cost | outcome |"
    );
    let _ = writeln!(s, "|---|---:|---|---:|---|---|---:|---:|---:|---:|---|");
    for a in attempts {
        let detail = a
            .error
            .as_deref()
            .or(a.failure.as_deref())
            .map(|d| format!("{}: {}", a.agent_outcome, one_line(d, 120)))
            .unwrap_or_else(|| a.agent_outcome.clone());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | ${:.4} | {} |",
            one_cell(&a.task.replace('|', "\\|")),
            a.attempt,
            icon(a),
            fmt_reward(a),
            visible(&fmt_metrics(a).replace('|', "\\|")),
            fmt_grading(a),
            a.signals.len(),
            a.steps,
            fmt_secs(a.phases.total_ms),
            a.cost_usd,
            visible(&detail.replace('|', "\\|"))
        );
    }
    flagged_section(&mut s, attempts);
    let flagged: Vec<&Attempt> = attempts.iter().filter(|a| !a.signals.is_empty()).collect();
    if !flagged.is_empty() {
        let _ = writeln!(
            s,
            "\n### Tamper signals\n\nWhat the agent changed on the verifier's path or left running when grading started: evidence, not verdicts; the kinds against the verifier itself flag a pass, the rest are informational.\n"
        );
        for a in flagged {
            let _ = writeln!(s, "- **{} #{}**", one_cell(&a.task), a.attempt);
            for sig in &a.signals {
                let _ = writeln!(s, "  - {}: {}", visible(&sig.kind), visible(&sig.detail));
            }
        }
    }
    s
}

/// The Markdown list of flagged passes, with their regrades.
fn flagged_section(s: &mut String, attempts: &[Attempt]) {
    let flagged: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| super::flagged::is_flagged(a))
        .collect();
    if flagged.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n### Flagged passes\n\nPasses whose tamper signals are evidence against the verifier itself: Harbor's verdict is kept, and the suite fails unless `--accept-flagged` (or `--regrade-flagged`, whose isolated verdict then decides).\n"
    );
    for a in flagged {
        let regrade = a.regrade.as_ref().map_or("not regraded".to_string(), |r| {
            format!("regrade: {}", regrade_line(r))
        });
        let _ = writeln!(
            s,
            "- **{} #{}**: {}; {}",
            one_cell(&a.task),
            a.attempt,
            visible(&super::flagged::kinds(a).join(", ")),
            visible(&regrade)
        );
    }
}

/// After the table: each attempt that did not pass, with its whole reason
/// (every line, made visible) and where to look next. Empty when all passed.
pub fn failures(attempts: &[Attempt]) -> String {
    let mut s = String::new();
    let bad: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| matches!(a.status, Status::Fail | Status::Error | Status::Skipped))
        .collect();
    if bad.is_empty() {
        return s;
    }
    let _ = writeln!(s, "\nfailures:");
    for a in bad {
        let why = a
            .error
            .as_deref()
            .or(a.failure.as_deref())
            .unwrap_or("(no reason recorded)");
        let _ = writeln!(
            s,
            "  {}#{} {} ({}):",
            one_cell(&a.task),
            a.attempt,
            a.status.as_str(),
            a.agent_outcome
        );
        for line in why.lines().filter(|l| !l.trim().is_empty()) {
            let _ = writeln!(s, "      {}", visible(line.trim_end()));
        }
        let log = a
            .verifier_log
            .as_ref()
            .filter(|p| p.exists())
            .or(a.trajectory.as_ref().filter(|p| p.exists()));
        match log {
            Some(p) => {
                let _ = writeln!(s, "      log: {}", one_cell(&p.display().to_string()));
            }
            None if a.run_dir.exists() => {
                let _ = writeln!(
                    s,
                    "      run dir: {}",
                    one_cell(&a.run_dir.display().to_string())
                );
            }
            None => {}
        }
    }
    s
}

/// Writes `text` to `path`, creating parent directories; `-` is stdout.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if path == Path::new("-") {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        if !text.ends_with('\n') {
            out.write_all(b"\n")?;
        }
        return out.flush();
    }
    crate::output_path::write_replacing(path, text.as_bytes())
}

/// Appends `text` to `path` (GITHUB_STEP_SUMMARY accumulates steps).
pub fn append(path: &Path, text: &str) -> std::io::Result<()> {
    crate::output_path::append_no_follow(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::outcome::Status;

    #[test]
    fn the_failures_section_keeps_every_line_and_lets_no_escape_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = dir.path().join("t").join("1");
        std::fs::create_dir_all(&run).expect("mkdir");
        let mut fail = Attempt::not_run(
            "evil\x1b]0;x\x07",
            1,
            run.clone(),
            Status::Fail,
            String::new(),
        );
        // A verifier's output quoted in the reason: two lines, a screen clear.
        fail.failure = Some("reward 0\n\x1b[2Jexpected 42, got 41\u{202e}".into());
        let pass = Attempt::not_run("ok", 1, run.clone(), Status::Pass, String::new());
        let s = failures(&[pass, fail]);
        assert!(s.starts_with("\nfailures:\n"), "{s}");
        assert!(!s.contains("ok#1"), "passes are not listed: {s}");
        assert!(s.contains("expected 42, got 41"), "{s}");
        assert!(s.contains("reward 0\n"), "every line is kept: {s}");
        assert!(
            !s.contains('\x1b') && !s.contains('\x07') && !s.contains('\u{202e}'),
            "{s:?}"
        );
        assert!(s.contains(&format!("run dir: {}", run.display())), "{s}");
        assert!(failures(&[]).is_empty());
    }
}
