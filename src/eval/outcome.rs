//! What one attempt produced: the record every report is made from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::Usage;
use crate::redact::Redactor;

/// The verdict of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Graded, reward >= 1.
    Pass,
    /// Graded, reward < 1 (whatever the agent did).
    Fail,
    /// Not graded: the infrastructure failed (image, engine, sandbox, the
    /// model API), which leaves the pass rate; or test.sh left no usable
    /// reward (an error of the task, see [`ErrorKind`]), which counts as
    /// not passed.
    Error,
    /// Stopped or never started because of Ctrl-C.
    Interrupted,
    /// Never started: the suite's budget (`--suite-max-cost`) was spent.
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Error => "error",
            Status::Interrupted => "interrupted",
            Status::Skipped => "skipped",
        }
    }
}

/// Whose error an `error` attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// runner, the engine, the sandbox or the model API: not counted in
    /// the pass rate.
    Infrastructure,
    /// The task's verifier ended without a usable reward file (Harbor's
    /// RewardFileNotFoundError): counted as not passed.
    Task,
}

/// How long each phase took, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phases {
    /// Resolving or building the image (shared by a task's attempts).
    pub image_ms: u64,
    /// Seeding the workspace and starting the agent's sandbox.
    pub setup_ms: u64,
    pub agent_ms: u64,
    /// Starting the verifier's sandbox, running tests/test.sh, reading the reward.
    pub verifier_ms: u64,
    /// The attempt's own time: from its image to its record, without
    /// `queued_ms`.
    pub total_ms: u64,
    /// Set up ahead (the warm pool), waiting for a running slot.
    #[serde(default)]
    pub queued_ms: u64,
    /// How long a running slot stood idle waiting for this attempt's
    /// sandbox: 0 when the pool had it ready.
    #[serde(default)]
    pub sandbox_wait_ms: u64,
}

/// One attempt of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub task: String,
    /// 1-based.
    pub attempt: u32,
    pub status: Status,
    pub reward: Option<f64>,
    pub pass: bool,
    /// How the agent phase ended: `completed`, `time_limit`, `step_limit`,
    /// `agent_timeout`, `solution_failed`, `error`, `interrupted`, `skipped`...
    pub agent_outcome: String,
    pub steps: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    pub phases: Phases,
    /// Why an attempt failed (`fail`), in one line.
    pub failure: Option<String>,
    /// The error (`error`).
    pub error: Option<String>,
    /// Whose error it is (`error` only).
    pub error_kind: Option<ErrorKind>,
    /// Where test.sh ran (`shared`, `separate`, `snapshot`, `isolated`).
    pub grading: Option<super::mode::GradingMode>,
    /// The verifier's named metrics (`reward` alone for reward.txt); the
    /// pass rule: every one at least 1.
    pub metrics: std::collections::BTreeMap<String, f64>,
    /// What the agent changed on the verifier's path, and what it left
    /// running when grading started: evidence, not a verdict.
    pub signals: Vec<super::evidence::Signal>,
    /// A pass with a signal against the verifier itself (see
    /// [`super::flagged`]): the verdict stays, the suite fails unless
    /// `--accept-flagged`. Derived from `status` and `signals` again
    /// wherever a record is read back.
    #[serde(default)]
    pub flagged: bool,
    /// The flagged pass graded again in isolation (`--regrade-flagged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regrade: Option<Regrade>,
    /// Every way the attempt's sandbox was weaker than runner's default
    /// one (the agent's environment as Harbor gives it).
    pub loosenings: Vec<String>,
    /// `none` or `bridge`, and why when the task wanted the internet.
    pub network: String,
    /// The container runtime of the attempt's sandboxes (`runc`, `runsc`...),
    /// as the engine reported it; the one asked for when none started.
    pub runtime: Option<String>,
    /// The seccomp filter in force on the agent's sandbox and its digest,
    /// as `sandbox_security` recorded them (`runner`, `default`, `file
    /// PATH`, or why it is not applied).
    #[serde(default)]
    pub seccomp: Option<String>,
    #[serde(default)]
    pub seccomp_profile_sha256: Option<String>,
    pub image: Option<String>,
    pub run_dir: PathBuf,
    pub trajectory: Option<PathBuf>,
    pub verifier_log: Option<PathBuf>,
    /// Tries of this attempt: 1, or more after `--retry-errors` or
    /// `--resume` ran it again.
    #[serde(default = "one")]
    pub tries: u32,
    /// The tries before the last one, oldest first, each kept in its own
    /// directory.
    #[serde(default)]
    pub earlier_tries: Vec<EarlierTry>,
    /// When the attempt began (after its image was ready); `None` for one
    /// that never ran. Each phase follows from it and `phases`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
}

fn one() -> u32 {
    1
}

/// A second grading of a flagged pass, in a fresh sandbox of the pristine
/// image with only the workspace (`isolated`): the agent's changes
/// outside it are gone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Regrade {
    /// Always `isolated`.
    pub grading: super::mode::GradingMode,
    /// `pass`, `fail` or `error`.
    pub status: Status,
    /// Whose error (`error` only): the task's counts as not passed, the
    /// infrastructure's leaves the pass unjudged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    pub reward: Option<f64>,
    pub metrics: std::collections::BTreeMap<String, f64>,
    /// Why it did not pass, in one line.
    pub reason: Option<String>,
    /// Its own directory (verifier.log, the reward file), inside the
    /// attempt's.
    pub run_dir: PathBuf,
}

/// A try of an attempt that was run again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EarlierTry {
    /// Where its run directory was kept (`DIR/<task>/<n>.try<k>`).
    pub run_dir: PathBuf,
    /// `error` (retried by `--retry-errors`) or `interrupted` (run again by
    /// `--resume`, including a try that never recorded its end).
    pub status: Status,
    pub error: Option<String>,
}

impl Attempt {
    /// Whether it counts in the pass rate's denominator: graded, or an
    /// error of the task.
    pub fn counted(&self) -> bool {
        matches!(self.status, Status::Pass | Status::Fail)
            || (self.status == Status::Error && self.error_kind == Some(ErrorKind::Task))
    }

    /// An attempt that never ran.
    pub fn not_run(
        task: &str,
        attempt: u32,
        run_dir: PathBuf,
        status: Status,
        why: String,
    ) -> Self {
        Attempt {
            task: task.to_string(),
            attempt,
            status,
            reward: None,
            pass: false,
            agent_outcome: if matches!(status, Status::Interrupted | Status::Skipped) {
                "skipped".into()
            } else {
                "not_run".into()
            },
            steps: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            phases: Phases::default(),
            failure: None,
            error_kind: (status == Status::Error).then_some(ErrorKind::Infrastructure),
            error: (matches!(status, Status::Error | Status::Skipped) && !why.is_empty())
                .then_some(why),
            grading: None,
            metrics: Default::default(),
            signals: Vec::new(),
            flagged: false,
            regrade: None,
            loosenings: Vec::new(),
            network: "none".into(),
            runtime: None,
            seccomp: None,
            seccomp_profile_sha256: None,
            image: None,
            run_dir,
            trajectory: None,
            verifier_log: None,
            tries: 1,
            earlier_tries: Vec::new(),
            started_at: None,
        }
    }

    /// The record with secrets replaced in its free-text fields (the
    /// failure and error messages, which may quote a command's output or a
    /// reward file).
    pub fn redacted(mut self, redactor: &Redactor) -> Attempt {
        let regrade_reason = self.regrade.as_mut().and_then(|r| r.reason.as_mut());
        for text in [&mut self.failure, &mut self.error]
            .into_iter()
            .flatten()
            .chain(regrade_reason)
        {
            *text = redactor.redact(text).into_owned();
        }
        for s in &mut self.signals {
            s.detail = redactor.redact(&s.detail).into_owned();
        }
        self
    }
}
