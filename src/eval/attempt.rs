//! One attempt of one task: seed the workspace from the image (a copy of
//! the suite's one seeding of it, see [`super::seed`]), run the agent
//! (model, oracle or nop) in its own sandbox under the task's agent
//! timeout, remove that sandbox, then grade in a fresh one.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use super::grade::{GradeError, GradeSpec, grade};
use super::outcome::{Attempt, Status};
use super::seed::SeedCache;
use super::settings::AgentKind;
use super::task::Task;
use crate::agent::{Conversation, RunEnd};
use crate::config::{Config, ConfigBuilder, ConfigError};
use crate::event::{Event, Outcome};
use crate::exec::backend::{Backend, Network, SandboxSpec};
use crate::exec::{ExecError, Executor};
use crate::redact::Redactor;
use crate::render::Human;
use crate::runtime::{build_model, run_task, sandbox_spec};
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
    #[error("agent sandbox: {0}")]
    Start(ExecError),
    /// The model API or the sandbox failed during the agent phase.
    #[error("{0}")]
    Agent(String),
    #[error("removing the agent sandbox: {0}")]
    Teardown(ExecError),
    #[error("verifier: {0}")]
    Verify(GradeError),
}

/// What the prepare phase hands on: the agent's sandbox, running.
struct Prepared {
    run_dir: RunDir,
    /// The task with the suite's overrides applied.
    task: Task,
    config: Config,
    workspace: Workspace,
    /// The image's working directory, where the agent works.
    workdir: String,
    run_id: String,
    executor: Arc<dyn Executor>,
}

/// Runs one attempt; never fails: every problem becomes a recorded outcome.
pub async fn run(
    ctx: &AttemptCtx,
    task: &Task,
    image: Result<String, String>,
    image_ms: u64,
    attempt: u32,
    run_path: PathBuf,
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
    if let Err(e) = phases(ctx, task, image, attempt, &run_path, &mut rec, cancel).await {
        rec.status = Status::Error;
        rec.error = Some(e.to_string());
    }
    finish(rec, started)
}

/// Prepare, agent, teardown, verify; each fills in `rec`.
async fn phases(
    ctx: &AttemptCtx,
    task: &Task,
    image: Result<String, String>,
    attempt: u32,
    run_path: &Path,
    rec: &mut Attempt,
    cancel: &CancellationToken,
) -> Result<(), PhaseError> {
    let image = image.map_err(PhaseError::Image)?;
    rec.image = Some(image.clone());
    let setup_start = Instant::now();
    let p = prepare(ctx, task, &image, attempt, run_path, rec).await?;
    rec.phases.setup_ms = ms(setup_start);

    let agent_start = Instant::now();
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
    p.run_dir.record(&Event::RunFinished {
        outcome: end.outcome,
        steps: convo.steps,
        usage: convo.usage,
        cost_usd: convo.cost_usd,
        duration_ms: rec.phases.agent_ms,
        error: end.error.clone(),
        final_text: end.final_text.clone(),
    });

    // Teardown: the sandbox goes (and its processes with it) before
    // grading starts.
    p.executor.shutdown().await.map_err(PhaseError::Teardown)?;
    if cancel.is_cancelled() {
        rec.status = Status::Interrupted;
        return Ok(());
    }
    // solve.sh stopped by the agent timeout is the solution running long,
    // graded like any agent over its time.
    let solution_ran_long = ctx.agent == AgentKind::Oracle && timed_out;
    if end.outcome == Outcome::Error && blame == Blame::Infrastructure && !solution_ran_long {
        // The model API or the sandbox failed: not the agent's fault.
        return Err(PhaseError::Agent(
            end.error.unwrap_or_else(|| "the agent phase failed".into()),
        ));
    }

    let verify_start = Instant::now();
    let verdict = verify(ctx, &p, &image, cancel).await;
    rec.phases.verifier_ms = ms(verify_start);
    let log_path = run_path.join("verifier.log");
    rec.verifier_log = log_path.exists().then_some(log_path);
    match verdict {
        Ok(v) => {
            rec.reward = Some(v.reward);
            rec.pass = v.reward >= 1.0;
            rec.status = if rec.pass { Status::Pass } else { Status::Fail };
            if !rec.pass {
                rec.failure = Some(format!(
                    "reward {} ({}); agent: {}",
                    v.reward, v.source, rec.agent_outcome
                ));
            }
            Ok(())
        }
        Err(GradeError::Interrupted) => {
            rec.status = Status::Interrupted;
            Ok(())
        }
        Err(e) => Err(PhaseError::Verify(e)),
    }
}

/// Makes the run directory and the workspace, seeds it from the image and
/// starts the agent's sandbox; `run_started` is recorded either way once
/// the run directory exists.
async fn prepare(
    ctx: &AttemptCtx,
    task: &Task,
    image: &str,
    attempt: u32,
    run_path: &Path,
    rec: &mut Attempt,
) -> Result<Prepared, PhaseError> {
    let (network, network_note) = network_for(task.allow_internet, ctx.allow_internet);
    rec.network = network_note;
    let budget = ctx.disk_bytes.unwrap_or(u64::MAX);
    let run_dir = RunDir::create(run_path, ctx.redactor.clone(), budget)?;
    rec.trajectory = Some(run_dir.trajectory_path());
    let mut task = task.clone();
    if let Some(t) = ctx.agent_timeout_secs {
        task.agent_timeout_secs = t;
    }
    if let Some(t) = ctx.verifier_timeout_secs {
        task.verifier_timeout_secs = t;
    }
    if let Some(c) = ctx.cpus {
        task.cpus = c;
    }
    if let Some(m) = ctx.memory_bytes {
        task.memory_bytes = m;
    }
    let run_id = format!("{}-{}-{}", ctx.suite_id, task.name, attempt);
    let config = attempt_config(ctx, &task, image, network)?;
    let workspace = Workspace::prepare(None).map_err(PhaseError::Workspace)?;
    rec.runtime = config.sandbox.runtime.clone();
    // Recorded once the sandbox runs, with what the engine enforces on it.
    let started_event = |security: Option<serde_json::Value>| {
        let mut run = config.public_json();
        if let Some(s) = security {
            run["sandbox_security"] = s;
        }
        Event::RunStarted {
            run_id: run_id.clone(),
            config: serde_json::json!({"eval": {"task": task.name, "attempt": attempt,
                "agent": ctx.agent.as_str(), "network": rec.network}, "run": run}),
        }
    };
    let seeded = ctx.seeds.seed(image, workspace.path(), &run_id).await;
    let workdir = match seeded {
        Ok(s) => s.workdir,
        Err(e) => {
            run_dir.record(&started_event(None));
            return Err(PhaseError::Seed(e));
        }
    };
    // The agent works in the image's working directory, as Harbor's agents do.
    let spec = SandboxSpec {
        workdir: Some(workdir.clone()),
        ..sandbox_spec(&config, &workspace, &run_id, &ctx.redactor)
    };
    let executor = match ctx.backend.start(spec).await {
        Ok(x) => x,
        Err(e) => {
            run_dir.record(&started_event(None));
            return Err(PhaseError::Start(e));
        }
    };
    run_dir.record(&started_event(executor.sandbox_security()));
    rec.runtime = executor
        .sandbox_security()
        .and_then(|s| s["runtime"].as_str().map(str::to_string));
    Ok(Prepared {
        run_dir,
        task,
        config,
        workspace,
        workdir,
        run_id,
        executor,
    })
}

/// Runs what plays the agent under the task's agent timeout; how it
/// ended, and whether the timeout stopped it.
async fn agent(ctx: &AttemptCtx, p: &Prepared, cancel: &CancellationToken) -> (AgentEnd, bool) {
    let agent_cancel = cancel.child_token();
    let timeout = Duration::from_secs_f64(p.task.agent_timeout_secs);
    let sink = |ev: &Event| p.run_dir.record(ev);
    // A bug that panics in the agent phase (oracle included) is this
    // attempt's error: its sandbox is still removed and its trajectory
    // still ends with run_finished.
    let phase = AssertUnwindSafe(agent_phase(
        ctx,
        &p.config,
        &p.task,
        p.executor.clone(),
        &p.run_dir,
        &sink,
        &agent_cancel,
    ))
    .catch_unwind()
    .map(|r| r.unwrap_or_else(|panic| AgentEnd::infra(RunEnd::from_panic(panic.as_ref()))));
    tokio::pin!(phase);
    tokio::select! {
        r = &mut phase => (r, false),
        _ = tokio::time::sleep(timeout) => {
            agent_cancel.cancel();
            let end = match tokio::time::timeout(WIND_DOWN, &mut phase).await {
                Ok(r) => r,
                Err(_) => AgentEnd::infra(RunEnd {
                    outcome: Outcome::Error,
                    error: Some("the agent did not stop after its timeout".into()),
                    final_text: None,
                    hint: None,
                }),
            };
            (end, true)
        }
    }
}

/// Grades the agent's workspace in a fresh sandbox.
async fn verify(
    ctx: &AttemptCtx,
    p: &Prepared,
    image: &str,
    cancel: &CancellationToken,
) -> Result<super::grade::Verdict, GradeError> {
    grade(
        GradeSpec {
            task: &p.task,
            image,
            workspace: p.workspace.path(),
            workdir: &p.workdir,
            network: p.config.sandbox.network,
            backend: ctx.backend.as_ref(),
            runtime: p.config.sandbox.runtime.clone(),
            run_id: format!("{}-verify", p.run_id),
            run_dir: &p.run_dir,
            redactor: &ctx.redactor,
        },
        cancel,
    )
    .await
}

fn finish(mut rec: Attempt, started: Instant) -> Attempt {
    rec.phases.total_ms = ms(started);
    rec
}

fn ms(t: Instant) -> u64 {
    crate::convert::millis_u64(t.elapsed())
}

/// Network is opt-in twice: the task allows it AND runner was told
/// `--allow-internet`.
fn network_for(task_allows: bool, flag: bool) -> (Network, String) {
    match (task_allows, flag) {
        (true, true) => (Network::Bridge, "bridge".into()),
        (true, false) => (
            Network::None,
            "none (the task allows internet; pass --allow-internet to give it)".into(),
        ),
        (false, _) => (Network::None, "none (task.allow_internet = false)".into()),
    }
}

/// The run configuration of this attempt: the shared flags with the task's
/// image, limits and network.
fn attempt_config(
    ctx: &AttemptCtx,
    task: &Task,
    image: &str,
    network: Network,
) -> Result<Config, ConfigError> {
    let mut b = ctx.base.clone();
    b.sandbox.image = image.to_string();
    b.sandbox.cpus = task.cpus;
    b.sandbox.memory = task.memory_bytes.to_string();
    b.sandbox.network = network;
    b.max_time_secs = Some(crate::convert::u64_from_f64(task.agent_timeout_secs.ceil()));
    b.build()
}

/// Runs what plays the agent; returns how it ended.
async fn agent_phase(
    ctx: &AttemptCtx,
    config: &Config,
    task: &Task,
    executor: Arc<dyn Executor>,
    run_dir: &RunDir,
    sink: &(dyn Fn(&Event) + Send + Sync),
    cancel: &CancellationToken,
) -> AgentEnd {
    let ended = |outcome: Outcome, error: Option<String>, text: Option<String>, blame| AgentEnd {
        end: RunEnd {
            outcome,
            error,
            final_text: text,
            hint: None,
        },
        convo: Conversation::default(),
        blame,
    };
    match ctx.agent {
        AgentKind::Nop => ended(Outcome::Completed, None, None, Blame::Agent),
        AgentKind::Model => {
            let model = match build_model(config) {
                Ok(m) => m,
                Err(e) => {
                    return ended(
                        Outcome::Error,
                        Some(e.to_string()),
                        None,
                        Blame::Infrastructure,
                    );
                }
            };
            // A run that ends in error failed in the model API or the
            // sandbox: the model's mistakes are tool results, not errors.
            let warn = |w: &str| ctx.human.say(w);
            let (end, convo) = run_task(
                config,
                model.as_ref(),
                executor,
                Some(run_dir.outputs().clone()),
                task.instruction.clone(),
                sink,
                cancel,
                &warn,
            )
            .await;
            let blame = if end.outcome == Outcome::Error {
                Blame::Infrastructure
            } else {
                Blame::Agent
            };
            AgentEnd { end, convo, blame }
        }
        AgentKind::Oracle => {
            let timeout = Duration::from_secs_f64(task.agent_timeout_secs);
            match super::oracle::run(task, executor, run_dir, timeout, cancel).await {
                Ok(solved) if solved.exit_code == 0 => {
                    ended(Outcome::Completed, None, Some(solved.output), Blame::Agent)
                }
                Ok(solved) => ended(
                    Outcome::Error,
                    Some(format!(
                        "solution/solve.sh exited with {}",
                        solved.exit_code
                    )),
                    Some(solved.output),
                    Blame::Agent,
                ),
                // Stopped by the agent timeout (or Ctrl-C): graded, or
                // interrupted, like any agent.
                Err(e @ super::oracle::OracleError::Stopped) => ended(
                    Outcome::Error,
                    Some(e.to_string()),
                    Some(String::new()),
                    Blame::Agent,
                ),
                // Not the solution's fault (sandbox died, the engine
                // failed, solve.sh missing): an infrastructure error.
                Err(e) => ended(
                    Outcome::Error,
                    Some(e.to_string()),
                    Some(String::new()),
                    Blame::Infrastructure,
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_needs_the_task_and_the_flag() {
        assert_eq!(network_for(true, true).0, Network::Bridge);
        let (net, note) = network_for(true, false);
        assert_eq!(net, Network::None);
        assert!(note.contains("--allow-internet"), "{note}");
        assert_eq!(network_for(false, true).0, Network::None);
        assert_eq!(network_for(false, false).0, Network::None);
    }
}
