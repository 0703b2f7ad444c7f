//! One attempt of one task: seed the workspace from the image, run the
//! agent (model, oracle or nop) in its own sandbox under the task's agent
//! timeout, remove that sandbox, then grade in a fresh one.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use super::grade::{GradeError, GradeSpec, grade};
use super::outcome::{Attempt, Status};
use super::settings::AgentKind;
use super::task::Task;
use crate::agent::{Conversation, RunEnd};
use crate::config::{Config, ConfigBuilder};
use crate::event::{Event, Outcome};
use crate::exec::Executor;
use crate::exec::backend::{Backend, Network, SandboxSpec};
use crate::redact::Redactor;
use crate::render::Human;
use crate::runtime::{build_model, run_task, sandbox_spec};
use crate::trajectory::RunDir;
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
    /// Bytes each attempt may put on the host (`--disk`); `None`: unbounded.
    pub disk_bytes: Option<u64>,
    pub suite_id: String,
    pub human: Human,
    /// The suite's secrets, redacted from every sink of every attempt.
    pub redactor: Redactor,
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
    let (network, network_note) = network_for(task.allow_internet, ctx.allow_internet);
    rec.network = network_note;
    let infra = |mut rec: Attempt, e: String| {
        rec.status = Status::Error;
        rec.error = Some(e);
        rec
    };
    let image = match image {
        Ok(i) => i,
        Err(e) => return finish(infra(rec, e), started),
    };
    rec.image = Some(image.clone());
    let budget = ctx.disk_bytes.unwrap_or(u64::MAX);
    let run_dir = match RunDir::create(&run_path, ctx.redactor.clone(), budget) {
        Ok(d) => d,
        Err(e) => return finish(infra(rec, e.to_string()), started),
    };
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
    let config = match attempt_config(ctx, &task, &image, network) {
        Ok(c) => c,
        Err(e) => return finish(infra(rec, e), started),
    };

    // Agent phase.
    let workspace = match Workspace::prepare(None) {
        Ok(w) => w,
        Err(e) => return finish(infra(rec, format!("cannot make a workspace: {e}")), started),
    };
    let sink = |ev: &Event| run_dir.record(ev);
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
    let setup_start = Instant::now();
    let workdir = match ctx.backend.seed(&image, workspace.path(), &run_id).await {
        Ok(s) => s.workdir,
        Err(e) => {
            sink(&started_event(None));
            return finish(infra(rec, format!("seeding the workspace: {e}")), started);
        }
    };
    // The agent works in the image's working directory, as Harbor's agents do.
    let spec = SandboxSpec {
        workdir: Some(workdir.clone()),
        ..sandbox_spec(&config, &workspace, &run_id, &ctx.redactor)
    };
    let executor: Arc<dyn Executor> = match ctx.backend.start(spec).await {
        Ok(x) => {
            rec.runtime = x
                .sandbox_security()
                .and_then(|s| s["runtime"].as_str().map(str::to_string));
            x
        }
        Err(e) => {
            sink(&started_event(None));
            return finish(infra(rec, format!("agent sandbox: {e}")), started);
        }
    };
    sink(&started_event(executor.sandbox_security()));
    rec.phases.setup_ms = ms(setup_start);
    let agent_start = Instant::now();
    let agent_cancel = cancel.child_token();
    let timeout = Duration::from_secs_f64(task.agent_timeout_secs);
    // A bug that panics in the agent phase (oracle included) is this
    // attempt's error: its sandbox is still removed and its trajectory
    // still ends with run_finished.
    let phase = AssertUnwindSafe(agent_phase(
        ctx,
        &config,
        &task,
        executor.clone(),
        &run_dir,
        &sink,
        &agent_cancel,
    ))
    .catch_unwind()
    .map(|r| r.unwrap_or_else(|panic| AgentEnd::infra(RunEnd::from_panic(panic.as_ref()))));
    tokio::pin!(phase);
    let mut timed_out = false;
    let AgentEnd { end, convo, blame } = tokio::select! {
        r = &mut phase => r,
        _ = tokio::time::sleep(timeout) => {
            timed_out = true;
            agent_cancel.cancel();
            match tokio::time::timeout(WIND_DOWN, &mut phase).await {
                Ok(r) => r,
                Err(_) => AgentEnd::infra(RunEnd { outcome: Outcome::Error, error: Some("the agent did not stop after its timeout".into()), final_text: None, hint: None }),
            }
        }
    };
    rec.phases.agent_ms = ms(agent_start);
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
    sink(&Event::RunFinished {
        outcome: end.outcome,
        steps: convo.steps,
        usage: convo.usage,
        cost_usd: convo.cost_usd,
        duration_ms: rec.phases.agent_ms,
        error: end.error.clone(),
        final_text: end.final_text.clone(),
    });
    // The sandbox goes (and its processes with it) before grading starts.
    if let Err(e) = executor.shutdown().await {
        return finish(
            infra(rec, format!("removing the agent sandbox: {e}")),
            started,
        );
    }
    if cancel.is_cancelled() {
        rec.status = Status::Interrupted;
        return finish(rec, started);
    }
    // solve.sh stopped by the agent timeout is the solution running long,
    // graded like any agent over its time.
    let solution_ran_long = ctx.agent == AgentKind::Oracle && timed_out;
    if end.outcome == Outcome::Error && blame == Blame::Infrastructure && !solution_ran_long {
        // The model API or the sandbox failed: not the agent's fault.
        let e = end
            .error
            .clone()
            .unwrap_or_else(|| "the agent phase failed".into());
        return finish(infra(rec, e), started);
    }

    // Verifier phase.
    let verify_start = Instant::now();
    let log_path = run_path.join("verifier.log");
    let verdict = grade(
        GradeSpec {
            task: &task,
            image: &image,
            workspace: workspace.path(),
            workdir: &workdir,
            network: config.sandbox.network,
            backend: ctx.backend.as_ref(),
            runtime: config.sandbox.runtime.clone(),
            run_id: format!("{run_id}-verify"),
            run_dir: &run_dir,
            redactor: &ctx.redactor,
        },
        cancel,
    )
    .await;
    rec.phases.verifier_ms = ms(verify_start);
    rec.verifier_log = log_path.exists().then_some(log_path);
    drop(workspace);
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
        }
        Err(GradeError::Interrupted) => rec.status = Status::Interrupted,
        Err(e) => rec = infra(rec, format!("verifier: {e}")),
    }
    finish(rec, started)
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
) -> Result<Config, String> {
    let mut b = ctx.base.clone();
    b.sandbox.image = image.to_string();
    b.sandbox.cpus = task.cpus;
    b.sandbox.memory = task.memory_bytes.to_string();
    b.sandbox.network = network;
    b.max_time_secs = Some(crate::convert::u64_from_f64(task.agent_timeout_secs.ceil()));
    b.build().map_err(|e| e.to_string())
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
