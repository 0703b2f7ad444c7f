//! One attempt of one task: seed the workspace from the image (a copy of
//! the suite's one seeding of it, see [`super::seed`]), start the agent's
//! sandbox as Harbor's environment is (the image's user unless `[agent]
//! user` says otherwise, HOME from its passwd entry, a writable root
//! filesystem, the task's env and workdir, services kept running), run the
//! agent (model, oracle or nop) under the task's agent timeout, collect
//! the tamper signals, then grade as the attempt's grading mode says (see
//! [`super::grade`]) and remove every sandbox. The agent's sandbox is
//! started, and its trajectory begun and ended, by the attempt's run
//! ([`crate::runtime::Run::attempt`]), which hands it back for grading.
//! The phases are here; the environment is built in `environment` (the
//! sandboxes are specified in [`super::sandboxes`]), the agent runs in
//! `agent_run`, signals, grading and artifacts are in `grading`.

mod agent_run;
mod environment;
mod grading;

use agent_run::*;
use environment::*;
use grading::*;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use super::evidence;
use super::grade::fresh::GradeSpec;
use super::grade::{GradeError, Verdict};
use super::mode::GradingMode;
use super::outcome::{Attempt, ErrorKind, Status};
use super::sandboxes::{self, PhaseNetwork, VerifierSandbox, network_for};
use super::seed::SeedCache;
use super::settings::AgentKind;
use super::slots::{NoTurn, Turn};
use super::task::Task;
use crate::agent::{Conversation, RunEnd};
use crate::config::{Config, ConfigBuilder, ConfigError};
use crate::event::{Event, Outcome};
use crate::exec::accounts::{self, Account};
use crate::exec::backend::{Backend, ImageSource, Network, Seeded, Services, ServicesSpec};
use crate::exec::{ExecError, Executor, ExecutorExt, Fault};
use crate::redact::Redactor;
use crate::render::Human;
use crate::runtime::{
    AttemptSandbox, Beginning, Enforced, EvalPart, Live, Run, Watch, build_model, record_unstarted,
};
use crate::trajectory::{RunDir, RunDirError};
use crate::workspace::Workspace;

/// Whose failure an agent phase that ended in error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blame {
    /// The agent's own (a failing solution): graded like any other end.
    Agent,
    /// runner's, the sandbox's or the model API's: an infrastructure error,
    /// not graded.
    Infrastructure,
}

/// How the agent phase ended.
struct AgentEnd {
    end: RunEnd,
    convo: Conversation,
    blame: Blame,
}

impl AgentEnd {
    fn infra(end: RunEnd) -> AgentEnd {
        AgentEnd {
            end,
            convo: Conversation::default(),
            blame: Blame::Infrastructure,
        }
    }
}

/// How long the agent phase may take to wind down after its timeout.
const WIND_DOWN: Duration = Duration::from_secs(30);
/// Largest tree of artifacts handed to a separate verifier.
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;
/// Where Harbor's agents publish artifacts by convention.
const ARTIFACTS_DIR: &str = "/logs/artifacts";

/// What every attempt of the suite shares.
pub struct AttemptCtx {
    pub agent: AgentKind,
    /// The configuration of a normal run, with the suite's settings; per
    /// task the image, limits and network are filled in.
    pub base: ConfigBuilder,
    /// Command-line overrides of the task's limits.
    pub cpus: Option<f64>,
    pub memory_bytes: Option<i64>,
    pub agent_timeout_secs: Option<f64>,
    pub verifier_timeout_secs: Option<f64>,
    pub allow_internet: bool,
    /// `--egress-network`: where allowlisted tasks' proxies reach out.
    pub egress_network: Option<String>,
    /// `--grading`: overrides every task's own mode.
    pub grading: Option<GradingMode>,
    /// `--regrade-flagged`: grade each flagged pass again, isolated.
    pub regrade_flagged: bool,
    /// `--user`: overrides the tasks' `[agent] user` and the images' USER.
    pub user: Option<String>,
    /// `--read-only-rootfs`: the agent's root filesystem stays read-only.
    pub read_only_rootfs: bool,
    /// Where the agent's and the verifier's sandboxes come from.
    pub backend: Arc<dyn Backend>,
    /// Each image's working directory, seeded once for the suite.
    pub seeds: SeedCache,
    /// Bytes each attempt may put on the host (`--disk`); `None`: unbounded.
    pub disk_bytes: Option<u64>,
    pub suite_id: String,
    pub human: Human,
    /// The suite's secrets, redacted from every sink of every attempt.
    pub redactor: Redactor,
    /// What each running attempt is doing, for the bar and the CI log.
    pub progress: Arc<super::progress::Progress>,
}

/// Why an attempt could not be graded: an infrastructure error, recorded
/// with this message (each phase says where it failed).
#[derive(Debug, thiserror::Error)]
enum PhaseError {
    /// The task's image could not be prepared (the message says so).
    #[error("{0}")]
    Image(String),
    #[error("{0}")]
    RunDir(#[from] RunDirError),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("cannot make a workspace: {0}")]
    Workspace(std::io::Error),
    #[error("seeding the workspace: {0}")]
    Seed(ExecError),
    #[error("the task's user: {0}")]
    User(String),
    #[error("agent sandbox: {0}")]
    Start(ExecError),
    #[error("{0}")]
    Compose(#[from] super::compose::ComposeError),
    #[error("the task's services: {0}")]
    Services(ExecError),
    #[error("environment: {0}")]
    Health(super::health::HealthError),
    /// The model API or the sandbox failed during the agent phase.
    #[error("{0}")]
    Agent(String),
    /// The attempt's run directory is incomplete (a full disk).
    #[error("the run's record is incomplete: {0}")]
    Record(String),
    #[error("removing the agent sandbox: {0}")]
    Teardown(ExecError),
    #[error("snapshot of the agent's sandbox: {0}")]
    Snapshot(ExecError),
    #[error("handing the artifacts over: {0}")]
    Artifacts(ExecError),
    #[error("verifier: {0}")]
    Verify(GradeError),
}

impl PhaseError {
    /// Whether the agent's files or processes can have caused it once the
    /// agent phase is over (a sandbox the agent's code killed, content the
    /// sandbox refused to move, processes that would not die); the engine
    /// itself failing is never the agent's doing.
    fn agent_caused(&self) -> bool {
        let exec = match self {
            PhaseError::Teardown(e) | PhaseError::Snapshot(e) | PhaseError::Artifacts(e) => e,
            PhaseError::Verify(GradeError::Sandbox(e)) => e,
            // runner's own steps in a sandbox holding the agent's files
            // (a tree too big to sweep in time, a tool it deleted).
            PhaseError::Verify(GradeError::Setup(_)) => return true,
            _ => return false,
        };
        // Once the agent's content is in play, only an engine that is gone
        // or lacks an image or runtime is surely not the agent's doing;
        // everything else counts against it (conservatively: an error
        // would leave the pass rate).
        exec.fault() == Fault::Agent
    }
}

/// What the prepare phase hands on: the agent's sandbox, running in the
/// attempt's run.
struct Prepared<'a> {
    /// The attempt's run: its directory, its workspace and the sandbox.
    run: Live<'a>,
    /// The task with the suite's overrides applied.
    task: Task,
    config: &'a Config,
    /// Where the agent works (the task's workdir or the image's).
    workdir: String,
    run_id: String,
    /// The run's sandbox.
    executor: Arc<dyn Executor>,
    /// Who the agent's commands run as.
    agent: Account,
    /// Who test.sh runs as (`[verifier] user`, else the image's user).
    verifier: Account,
    mode: GradingMode,
    /// The task's sidecars (docker-compose), when it has any: stopped
    /// after grading (and when dropped).
    services: Option<Arc<dyn Services>>,
    /// pytest's configuration files in the workdir as seeded, before the
    /// agent ran.
    seed_config: super::workdir_config::SeededConfig,
}

impl Prepared<'_> {
    /// The attempt's run directory.
    fn run_dir(&self) -> &RunDir {
        self.run.run_dir()
    }

    /// The agent's workspace on the host.
    fn workspace(&self) -> &Path {
        self.run.workspace().path()
    }

    /// Stops the task's sidecars; after the sandboxes that use them.
    async fn stop_services(&self) {
        if let Some(s) = &self.services
            && let Err(e) = s.stop().await
        {
            tracing::warn!("cannot remove the task's services: {e}");
        }
    }
}

/// Runs one attempt; never fails: every problem becomes a recorded outcome.
/// It sets up in its place in the pool and runs once `turn` gives it a
/// slot.
pub async fn run(
    ctx: &AttemptCtx,
    task: &Task,
    (image, image_ms): (Result<String, String>, u64),
    attempt: u32,
    run_path: PathBuf,
    turn: &mut Turn,
    cancel: &CancellationToken,
) -> Attempt {
    let started = Instant::now();
    let mut rec = Attempt::not_run(
        &task.name,
        attempt,
        run_path.clone(),
        Status::Error,
        String::new(),
    );
    rec.phases.image_ms = image_ms;
    rec.started_at = Some(chrono::Utc::now());
    let at = (attempt, run_path.as_path());
    if let Err(e) = phases(ctx, task, image, at, &mut rec, turn, cancel).await {
        rec.status = Status::Error;
        rec.error_kind = Some(ErrorKind::Infrastructure);
        rec.error = Some(e.to_string());
    }
    finish(rec, started)
}

/// Prepare, agent, evidence, grading, teardown; each fills in `rec`.
async fn phases(
    ctx: &AttemptCtx,
    task: &Task,
    image: Result<String, String>,
    (attempt, run_path): (u32, &Path),
    rec: &mut Attempt,
    turn: &mut Turn,
    cancel: &CancellationToken,
) -> Result<(), PhaseError> {
    let image = image.map_err(PhaseError::Image)?;
    rec.image = Some(image.clone());
    ctx.progress.phase(&task.name, attempt, "setup");
    let setup_start = Instant::now();
    let (config, setup) = prepare(ctx, task, &image, attempt, run_path, rec).await?;
    let p = start(ctx, &config, setup, turn.ahead(), rec).await?;
    if let Some(hc) = &p.task.healthcheck {
        let healthy = super::health::wait_healthy(p.executor.as_ref(), hc, cancel).await;
        if let Err(e) = healthy {
            let removed = p.executor.shutdown().await;
            p.stop_services().await;
            removed.map_err(PhaseError::Teardown)?;
            if matches!(e, super::health::HealthError::Interrupted) {
                rec.status = Status::Interrupted;
                return Ok(());
            }
            return Err(PhaseError::Health(e));
        }
    }
    rec.phases.setup_ms = ms(setup_start);
    if !turn.running() {
        ctx.progress.phase(&task.name, attempt, "ready");
    }
    let queued = Instant::now();
    let waited = turn.run(cancel).await;
    rec.phases.queued_ms = ms(queued);
    match waited {
        Ok(idle) => rec.phases.sandbox_wait_ms = crate::convert::millis_u64(idle),
        Err(no) => return no_turn(&p, no, rec).await,
    }

    let agent_start = Instant::now();
    let playing = match ctx.agent {
        AgentKind::Oracle => "solution",
        AgentKind::Nop => "nop",
        AgentKind::Model => "agent",
    };
    ctx.progress.phase(&task.name, attempt, playing);
    let (end, timed_out) = agent(ctx, &p, cancel).await;
    rec.phases.agent_ms = ms(agent_start);
    let AgentEnd { end, convo, blame } = end;
    rec.steps = convo.steps;
    rec.usage = convo.usage;
    rec.cost_usd = convo.cost_usd;
    rec.agent_outcome = if timed_out && !cancel.is_cancelled() {
        "agent_timeout".into()
    } else {
        match (ctx.agent, end.outcome) {
            (AgentKind::Oracle, Outcome::Error) => "solution_failed".into(),
            (_, o) => o.as_str().to_string(),
        }
    };
    p.run.record_finished(&end, &convo, rec.phases.agent_ms);

    // solve.sh stopped by the agent timeout is the solution running long,
    // graded like any agent over its time.
    let solution_ran_long = ctx.agent == AgentKind::Oracle && timed_out;
    if let Some(ended) = ungraded(&p, end, blame, solution_ran_long, rec, cancel).await {
        return ended;
    }

    let verify_start = Instant::now();
    ctx.progress.phase(&task.name, attempt, "verifier");
    rec.signals = collect_signals(&p, ctx.agent).await;
    let verdict = grade(ctx, &p, &image, run_path, cancel).await;
    let log_path = run_path.join("verifier.log");
    rec.verifier_log = log_path.exists().then_some(log_path);
    let recorded = record_verdict(rec, verdict);
    rec.flagged = super::flagged::is_flagged(rec);
    if recorded.is_ok() && rec.flagged && ctx.regrade_flagged && !cancel.is_cancelled() {
        ctx.progress.phase(&task.name, attempt, "regrade");
        let agent_outcome = rec.agent_outcome.clone();
        rec.regrade = Some(regrade(ctx, &p, &image, run_path, &agent_outcome, cancel).await);
    }
    // After the regrade: an isolated verifier joins the task's sidecars.
    p.stop_services().await;
    rec.phases.verifier_ms = ms(verify_start);
    recorded
}

/// Ends an attempt that is not graded after its agent phase: interrupted
/// (Ctrl-C), an infrastructure error (the model API or the sandbox failed),
/// or a run whose record is incomplete. `None`: it goes on to grading.
async fn ungraded(
    p: &Prepared<'_>,
    end: RunEnd,
    blame: Blame,
    solution_ran_long: bool,
    rec: &mut Attempt,
    cancel: &CancellationToken,
) -> Option<Result<(), PhaseError>> {
    let infra = matches!(end.outcome, Outcome::Error | Outcome::EmptyReply)
        && blame == Blame::Infrastructure
        && !solution_ran_long;
    // A run whose record is not whole is not graded: retried like any
    // infrastructure error, never a verdict on half a trajectory.
    let lost = p.run_dir().lost();
    if !cancel.is_cancelled() && !infra && lost.is_none() {
        return None;
    }
    let removed = p.executor.shutdown().await;
    p.stop_services().await;
    if let Err(e) = removed {
        return Some(Err(PhaseError::Teardown(e)));
    }
    if cancel.is_cancelled() {
        rec.status = Status::Interrupted;
        rec.error_kind = None;
        return Some(Ok(()));
    }
    if let Some(why) = lost {
        return Some(Err(PhaseError::Record(why)));
    }
    // The model API or the sandbox failed: not the agent's fault.
    Some(Err(PhaseError::Agent(
        end.error.unwrap_or_else(|| "the agent phase failed".into()),
    )))
}

/// An attempt set up ahead that gets no slot (Ctrl-C, the suite's budget
/// spent while it waited): what it started is removed, its trajectory
/// ends, and it is recorded as interrupted or skipped.
async fn no_turn(p: &Prepared<'_>, no: NoTurn, rec: &mut Attempt) -> Result<(), PhaseError> {
    let (status, outcome, why) = match no {
        NoTurn::Interrupted => (Status::Interrupted, Outcome::Interrupted, None),
        NoTurn::Held(why) => (Status::Skipped, Outcome::Interrupted, Some(why)),
    };
    let end = RunEnd {
        outcome,
        error: why.clone(),
        final_text: None,
        hint: None,
    };
    p.run.record_finished(&end, &Conversation::default(), 0);
    rec.agent_outcome = outcome.as_str().to_string();
    let removed = p.executor.shutdown().await;
    p.stop_services().await;
    removed.map_err(PhaseError::Teardown)?;
    rec.status = status;
    rec.error_kind = None;
    rec.error = why;
    Ok(())
}

/// Fills in `rec` from how grading ended.
fn record_verdict(
    rec: &mut Attempt,
    verdict: Result<Verdict, PhaseError>,
) -> Result<(), PhaseError> {
    let verdict = match verdict {
        Ok(v) => v,
        Err(PhaseError::Verify(GradeError::Interrupted)) => {
            rec.status = Status::Interrupted;
            rec.error_kind = None;
            return Ok(());
        }
        // What the agent left made grading impossible: its fail, never an
        // error that would leave the pass rate.
        Err(e) if e.agent_caused() => Verdict::Failed(e.to_string()),
        Err(e) => return Err(e),
    };
    rec.error_kind = None;
    match verdict {
        Verdict::Rewarded { metrics, source } => {
            rec.pass = Verdict::passed(&metrics);
            rec.reward = Verdict::headline(&metrics);
            rec.status = if rec.pass { Status::Pass } else { Status::Fail };
            if !rec.pass {
                let below: Vec<String> = metrics
                    .iter()
                    .filter(|(_, v)| **v < 1.0)
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                rec.failure = Some(format!(
                    "{} below 1 ({source}); agent: {}",
                    below.join(", "),
                    rec.agent_outcome
                ));
            }
            rec.metrics = metrics;
        }
        Verdict::Failed(why) => {
            rec.status = Status::Fail;
            rec.failure = Some(format!("{why}; agent: {}", rec.agent_outcome));
        }
        Verdict::NoReward(why) => {
            rec.status = Status::Error;
            rec.error_kind = Some(ErrorKind::Task);
            rec.error = Some(why);
        }
    }
    Ok(())
}

/// Where a flagged pass's regrade keeps its verifier.log and reward file.
const REGRADE_DIR: &str = "regrade";

/// Grades a flagged pass again as `isolated` grading does: a fresh sandbox
/// of the pristine image with only the workspace (as the shared verifier
/// left it), in a run directory of its own inside the attempt's. Never
/// fails: an error is the regrade's verdict.
async fn regrade(
    ctx: &AttemptCtx,
    p: &Prepared<'_>,
    image: &str,
    run_path: &Path,
    agent_outcome: &str,
    cancel: &CancellationToken,
) -> super::outcome::Regrade {
    let dir = run_path.join(REGRADE_DIR);
    let mut out = super::outcome::Regrade {
        grading: GradingMode::Isolated,
        status: Status::Error,
        error_kind: Some(ErrorKind::Infrastructure),
        reward: None,
        metrics: Default::default(),
        reason: None,
        run_dir: dir.clone(),
    };
    let budget = ctx.disk_bytes.unwrap_or(u64::MAX);
    let run_dir = match RunDir::create(&dir, ctx.redactor.clone(), budget) {
        Ok(d) => d,
        Err(e) => {
            out.reason = Some(e.to_string());
            return out;
        }
    };
    let mut spec = GradeSpec {
        run_dir: &run_dir,
        ..fresh_spec(ctx, p, image)
    };
    spec.sandbox.run_id = format!("{}-regrade", p.run_id);
    let verdict = super::grade::fresh::grade(spec, cancel)
        .await
        .map_err(PhaseError::Verify);
    // The same rules as the attempt's own grading, on a scratch record.
    let mut rec = Attempt::not_run("", 0, dir, Status::Error, String::new());
    rec.agent_outcome = agent_outcome.to_string();
    match record_verdict(&mut rec, verdict) {
        Ok(()) => {
            out.status = rec.status;
            out.error_kind = rec.error_kind;
            out.reward = rec.reward;
            out.metrics = rec.metrics;
            out.reason = rec.failure.or(rec.error);
        }
        Err(e) => out.reason = Some(e.to_string()),
    }
    out
}

fn finish(mut rec: Attempt, started: Instant) -> Attempt {
    rec.phases.total_ms = ms(started).saturating_sub(rec.phases.queued_ms);
    if rec.status != Status::Error {
        rec.error_kind = None;
    }
    rec
}

fn ms(t: Instant) -> u64 {
    crate::convert::millis_u64(t.elapsed())
}
