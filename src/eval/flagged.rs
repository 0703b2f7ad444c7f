//! Flagged passes: a pass whose tamper signals are evidence against the
//! verifier itself ([`evidence::against_verifier`]: an interpreter or the
//! test runner replaced, pytest's configuration planted, /tests or /logs
//! touched...). Harbor's verdict stands and is counted as a pass, but
//! every report marks it, and the suite exits 1 unless `--accept-flagged`
//! accepts them or `--regrade-flagged` graded them again in isolation
//! (then the regrade's verdict decides). Shared grading (the default) runs
//! the verifier on the agent's own changes, which is where such passes
//! come from.

use super::evidence;
use super::mode::GradingMode;
use super::outcome::{Attempt, Status};
use super::report::Totals;

/// Whether `a` is a flagged pass, from its verdict, grading and signals
/// (never from a recorded flag: a record is read back from a directory).
/// Only a verifier that ran on the agent's filesystem can be misled by it:
/// `shared` and `snapshot`; `isolated` and `separate` verifiers start
/// from a pristine image.
pub fn is_flagged(a: &Attempt) -> bool {
    let fresh = matches!(
        a.grading,
        Some(GradingMode::Isolated | GradingMode::Separate)
    );
    a.status == Status::Pass && !fresh && a.signals.iter().any(evidence::against_verifier)
}

/// `a` with its `flagged` mark derived again.
pub fn marked(mut a: Attempt) -> Attempt {
    a.flagged = is_flagged(&a);
    a
}

/// The status as the table and the progress lines show it:
/// `pass-flagged` for a flagged pass.
pub fn status_label(a: &Attempt) -> &'static str {
    if is_flagged(a) {
        "pass-flagged"
    } else {
        a.status.as_str()
    }
}

/// The kinds of `a`'s signals that are evidence against the verifier, each
/// once, in the order listed.
pub fn kinds(a: &Attempt) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in a.signals.iter().filter(|s| evidence::against_verifier(s)) {
        if !out.contains(&s.kind.as_ref()) {
            out.push(s.kind.as_ref());
        }
    }
    out
}

/// What decides the exit code of `runner eval` and `runner eval merge`.
#[derive(Debug, Clone, Copy)]
pub struct ExitRules {
    pub min_pass_rate: f64,
    pub fail_on_error: bool,
    /// `--accept-flagged`: a flagged pass no regrade judged counts as a pass.
    pub accept_flagged: bool,
}

/// Flagged passes no regrade judged (no regrade asked, or it ended in an
/// infrastructure error).
pub fn unjudged(t: &Totals) -> usize {
    t.flagged - t.regrade_passed - t.regrade_failed
}

/// The exit code of a suite that was not interrupted: 2 an infrastructure
/// error (with `--fail-on-error`), 1 below the pass rate (each regraded
/// flagged pass counted as its regrade's verdict) or a flagged pass not
/// accepted, else 0.
pub fn exit_code(t: &Totals, rules: ExitRules) -> u8 {
    let rate = t.regrade_pass_rate.unwrap_or(t.pass_rate);
    if (t.errors > 0 || t.skipped > 0) && rules.fail_on_error {
        2
    } else if rate + 1e-9 < rules.min_pass_rate || (unjudged(t) > 0 && !rules.accept_flagged) {
        1
    } else {
        0
    }
}

/// The warning and hint printed when flagged passes fail the suite.
pub fn notice(t: &Totals, rules: ExitRules) -> Option<String> {
    let n = unjudged(t);
    if n == 0 || rules.accept_flagged {
        return None;
    }
    Some(format!(
        "warning: {} flagged: their tamper signals are evidence against the verifier itself, so the suite fails\n\
         hint: grade them again in a fresh sandbox with --regrade-flagged (its verdict decides), or accept them with --accept-flagged",
        crate::plural::count_of(n, "pass is", "passes are")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::evidence::Signal;
    use crate::eval::outcome::Regrade;
    use crate::eval::report::summarize;
    use std::path::PathBuf;
    use std::time::Duration;

    fn attempt(task: &str, status: Status, kind: Option<&'static str>) -> Attempt {
        let mut a = Attempt::not_run(task, 1, PathBuf::from("/r"), status, String::new());
        a.pass = status == Status::Pass;
        a.reward = Some(if a.pass { 1.0 } else { 0.0 });
        if let Some(k) = kind {
            a.signals.push(Signal {
                kind: k.into(),
                detail: format!("added /x ({k})"),
            });
        }
        marked(a)
    }

    fn regraded(mut a: Attempt, status: Status) -> Attempt {
        a.regrade = Some(Regrade {
            grading: GradingMode::Isolated,
            status,
            error_kind: (status == Status::Error)
                .then_some(crate::eval::outcome::ErrorKind::Infrastructure),
            reward: None,
            metrics: Default::default(),
            reason: None,
            run_dir: PathBuf::from("/r/regrade"),
        });
        a
    }

    const STRICT: ExitRules = ExitRules {
        min_pass_rate: 1.0,
        fail_on_error: true,
        accept_flagged: false,
    };

    #[test]
    fn only_passes_with_evidence_against_the_verifier_are_flagged() {
        assert!(attempt("a", Status::Pass, Some("interpreter")).flagged);
        assert!(attempt("a", Status::Pass, Some("test-config")).flagged);
        assert!(!attempt("a", Status::Pass, Some("site-packages")).flagged);
        assert!(!attempt("a", Status::Pass, Some("path")).flagged);
        assert!(!attempt("a", Status::Fail, Some("interpreter")).flagged);
        // A verifier on a pristine image never saw the change.
        let mut isolated = attempt("a", Status::Pass, Some("interpreter"));
        isolated.grading = Some(GradingMode::Isolated);
        assert!(!marked(isolated).flagged);
        // A forged record's own mark is not believed.
        let mut forged = attempt("a", Status::Pass, Some("tests"));
        forged.flagged = false;
        assert!(marked(forged).flagged);
    }

    #[test]
    fn flagged_passes_count_as_passes_and_fail_the_suite_unless_accepted_or_regraded() {
        let list = vec![
            attempt("a", Status::Pass, Some("interpreter")),
            attempt("b", Status::Pass, Some("path")),
        ];
        let (_, t) = summarize(&list, 1, Duration::ZERO);
        assert_eq!((t.passed, t.flagged, t.pass_rate), (2, 1, 1.0));
        assert_eq!(exit_code(&t, STRICT), 1);
        assert!(notice(&t, STRICT).is_some_and(|n| n.contains("1 pass is flagged")));
        let accept = ExitRules {
            accept_flagged: true,
            ..STRICT
        };
        assert_eq!(exit_code(&t, accept), 0);
        assert!(notice(&t, accept).is_none());

        // Regraded: a failed regrade counts as a fail, accepted or not.
        let list = vec![
            regraded(
                attempt("a", Status::Pass, Some("interpreter")),
                Status::Fail,
            ),
            attempt("b", Status::Pass, None),
        ];
        let (_, t) = summarize(&list, 1, Duration::ZERO);
        assert_eq!((t.passed, t.flagged, t.regrade_failed), (2, 1, 1));
        assert_eq!(t.regrade_pass_rate, Some(0.5));
        assert_eq!(exit_code(&t, STRICT), 1);
        assert_eq!(exit_code(&t, accept), 1);
        let half = ExitRules {
            min_pass_rate: 0.5,
            ..STRICT
        };
        assert_eq!(
            exit_code(&t, half),
            0,
            "judged by its regrade, not unjudged"
        );
        // A regrade that passed clears it.
        let list = vec![regraded(
            attempt("a", Status::Pass, Some("interpreter")),
            Status::Pass,
        )];
        let (_, t) = summarize(&list, 1, Duration::ZERO);
        assert_eq!(exit_code(&t, STRICT), 0);
        // A regrade that could not run leaves it unjudged.
        let list = vec![regraded(
            attempt("a", Status::Pass, Some("interpreter")),
            Status::Error,
        )];
        let (_, t) = summarize(&list, 1, Duration::ZERO);
        assert_eq!(unjudged(&t), 1);
        assert_eq!(exit_code(&t, STRICT), 1);
        assert_eq!(exit_code(&t, accept), 0);
    }
}
