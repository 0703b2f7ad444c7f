//! What one attempt produced: the record every report is made from.

use std::path::PathBuf;

use serde::Serialize;

use crate::model::Usage;
use crate::redact::Redactor;

/// The verdict of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Graded, reward >= 1.
    Pass,
    /// Graded, reward < 1 (whatever the agent did).
    Fail,
    /// Infrastructure failed (image, Docker, sandbox, verifier): neither a
    /// pass nor an ordinary fail.
    Error,
    /// Stopped or never started because of Ctrl-C.
    Interrupted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Error => "error",
            Status::Interrupted => "interrupted",
        }
    }
}

/// How long each phase took, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Phases {
    /// Resolving or building the image (shared by a task's attempts).
    pub image_ms: u64,
    /// Seeding the workspace and starting the agent's sandbox.
    pub setup_ms: u64,
    pub agent_ms: u64,
    /// Starting the verifier's sandbox, running tests/test.sh, reading the reward.
    pub verifier_ms: u64,
    pub total_ms: u64,
}

/// One attempt of one task.
#[derive(Debug, Clone, Serialize)]
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
    /// The infrastructure error (`error`).
    pub error: Option<String>,
    /// `none` or `bridge`, and why when the task wanted the internet.
    pub network: String,
    /// The container runtime of the attempt's sandboxes (`runc`, `runsc`...),
    /// as the engine reported it; the one asked for when none started.
    pub runtime: Option<String>,
    pub image: Option<String>,
    pub run_dir: PathBuf,
    pub trajectory: Option<PathBuf>,
    pub verifier_log: Option<PathBuf>,
}

impl Attempt {
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
            agent_outcome: if status == Status::Interrupted {
                "skipped".into()
            } else {
                "not_run".into()
            },
            steps: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            phases: Phases::default(),
            failure: None,
            error: (status == Status::Error && !why.is_empty()).then_some(why),
            network: "none".into(),
            runtime: None,
            image: None,
            run_dir,
            trajectory: None,
            verifier_log: None,
        }
    }

    /// The record with secrets replaced in its free-text fields (the
    /// failure and error messages, which may quote a command's output or a
    /// reward file).
    pub fn redacted(mut self, redactor: &Redactor) -> Attempt {
        for text in [&mut self.failure, &mut self.error].into_iter().flatten() {
            *text = redactor.redact(text).into_owned();
        }
        self
    }
}
