//! What a suite is run with: the command line's choices as plain values
//! (`cli` fills them in), validated by [`EvalSettings::check`].

use std::path::PathBuf;

use super::EvalError;
use super::task::MAX_TASK_TIMEOUT_SECS;
use crate::backend_kind::BackendKind;
use crate::config::AgentOptions;

/// Most further tries `--retry-errors` may ask for.
pub const MAX_RETRY_ERRORS: u32 = 10;

/// What plays the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AgentKind {
    /// The runner loop with the configured model.
    #[default]
    Model,
    /// The task's reference solution, solution/solve.sh.
    Oracle,
    /// Nothing: checks that the untouched start fails.
    Nop,
}

impl AgentKind {
    pub const ALL: [AgentKind; 3] = [AgentKind::Model, AgentKind::Oracle, AgentKind::Nop];

    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Model => "model",
            AgentKind::Oracle => "oracle",
            AgentKind::Nop => "nop",
        }
    }
}

/// Everything `runner eval` is told, before validation.
#[derive(Debug, Clone)]
pub struct EvalSettings {
    /// Task directories, or directories whose subdirectories are tasks.
    pub paths: Vec<PathBuf>,
    /// The arguments after `eval` as typed, recorded in `suite.json`
    /// (redacted) for `--resume DIR` alone; empty when not from a
    /// command line.
    pub invocation: Vec<String>,
    pub agent_kind: AgentKind,
    /// The model and the loop, as for a run.
    pub agent: AgentOptions,
    /// Where the agent's and the verifier's sandboxes come from.
    pub backend: BackendKind,
    pub jobs: usize,
    pub attempts: u32,
    /// Globs on task names.
    pub filter: Vec<String>,
    pub allow_internet: bool,
    /// `--egress-network`: the network allowlisted tasks' proxies reach
    /// out through; `None`: the engine's bridge.
    pub egress_network: Option<String>,
    /// Overrides of the tasks' own limits.
    pub cpus: Option<f64>,
    pub memory: Option<String>,
    pub agent_timeout_secs: Option<f64>,
    pub verifier_timeout_secs: Option<f64>,
    pub pids_limit: i64,
    /// `--user`: the agent's user for every task; `None`: each task's
    /// `[agent] user`, else its image's USER (root when unset), as Harbor.
    pub user: Option<String>,
    /// Keep the agent's root filesystem read-only (runner's own default
    /// for runs; Harbor's tasks expect it writable).
    pub read_only_rootfs: bool,
    /// `--pass-env`: secret-named host variables tasks may take.
    pub pass_env: Vec<String>,
    /// `--grading`: overrides each task's `[verifier] environment_mode`.
    pub grading: Option<super::mode::GradingMode>,
    /// A size, or `unlimited`.
    pub disk: String,
    pub runtime: Option<String>,
    /// `--seccomp`: `runner`, `default` or a profile file.
    pub seccomp: String,
    pub output_dir: Option<PathBuf>,
    /// `--resume`: `output_dir` holds the suite to continue.
    pub resume: bool,
    /// `--retry-errors`: further tries after an infrastructure error.
    pub retry_errors: u32,
    /// `--shard`: the part of the suite this process runs.
    pub shard: Option<super::manifest::Shard>,
    /// `--suite-max-cost`: the whole suite's budget in USD.
    pub suite_max_cost_usd: Option<f64>,
    pub json: Option<PathBuf>,
    pub junit: Option<PathBuf>,
    pub summary: Option<PathBuf>,
    /// `--harbor-job DIR`: also write the results in Harbor's job layout.
    pub harbor_job: Option<PathBuf>,
    /// `--html`: the suite's page (see [`crate::view`]).
    pub html: Option<PathBuf>,
    pub min_pass_rate: f64,
    pub fail_on_error: bool,
    /// `--accept-flagged`: flagged passes count as passes for the exit code.
    pub accept_flagged: bool,
    /// `--regrade-flagged`: grade each flagged pass again, isolated.
    pub regrade_flagged: bool,
}

impl EvalSettings {
    /// Refuses values no attempt could run with.
    pub fn check(&self) -> Result<(), EvalError> {
        let bad = |flag, detail: &str| {
            Err(EvalError::Flag {
                flag,
                detail: detail.to_string(),
            })
        };
        if self.jobs == 0 {
            return bad("jobs", "must be at least 1");
        }
        if self.attempts == 0 {
            return bad("attempts", "must be at least 1");
        }
        if self.pids_limit <= 0 {
            return bad("pids-limit", "must be greater than 0");
        }
        if !(0.0..=1.0).contains(&self.min_pass_rate) {
            return bad("min-pass-rate", "must be between 0 and 1");
        }
        if let Some(v) = self.suite_max_cost_usd
            && !(v >= 0.0 && v.is_finite())
        {
            return bad("suite-max-cost", "must be 0 or more");
        }
        if self.retry_errors > MAX_RETRY_ERRORS {
            return bad(
                "retry-errors",
                &format!("must be at most {MAX_RETRY_ERRORS}"),
            );
        }
        for (flag, v) in [
            ("cpus", self.cpus),
            ("agent-timeout", self.agent_timeout_secs),
            ("verifier-timeout", self.verifier_timeout_secs),
        ] {
            if let Some(v) = v
                && !(v > 0.0 && v.is_finite())
            {
                return bad(flag, "must be greater than 0");
            }
        }
        for (flag, v) in [
            ("agent-timeout", self.agent_timeout_secs),
            ("verifier-timeout", self.verifier_timeout_secs),
        ] {
            if v.is_some_and(|v| v > MAX_TASK_TIMEOUT_SECS) {
                let most = format!("must be at most {MAX_TASK_TIMEOUT_SECS} (a week)");
                return bad(flag, &most);
            }
        }
        for (flag, p) in [
            ("--json", &self.json),
            ("--junit", &self.junit),
            ("--summary", &self.summary),
            ("--html", &self.html),
            ("--harbor-job", &self.harbor_job),
        ] {
            crate::output_path::refuse_link(flag, p.as_deref())?;
        }
        Ok(())
    }
}
