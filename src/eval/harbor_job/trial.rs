//! One attempt as one Harbor trial: its `TrialResult` and its files.
//!
//! How runner's verdicts read in Harbor's terms (`exception_info`):
//! - pass or fail with a reward: no exception (`AgentTimeoutError`, whose
//!   reward Harbor still counts, when the agent ran out of time);
//! - fail without a reward (the verifier timed out, was killed, or the
//!   agent's files kept it from running): `VerifierTimeoutError` for a
//!   timeout, else `RunnerVerifierFailure`; no rewards, as Harbor records a
//!   verifier that ended without one;
//! - error of the task (no usable reward file): `RewardFileNotFoundError`,
//!   or `VerifierOutputParseError` for a reward file runner could not read;
//! - infrastructure error: `RunnerInfrastructureError`;
//! - interrupted: `CancelledError` (Harbor's name for a cancelled trial).
//!
//! An attempt that never started (after Ctrl-C) gets no trial: Harbor
//! counts it as pending.

use chrono::Duration;

use super::files::Source;
use super::schema::{
    AgentConfig, AgentContext, AgentInfo, EnvironmentConfig, ExceptionInfo, LocalTaskId, ModelInfo,
    SCHEMA_VERSION, Stamp, TaskConfig, TimingInfo, TrialConfig, TrialResult, VerifierConfig,
    VerifierResult, policy_for,
};
use super::{HarborJobMeta, TaskInfo, derived_uuid, trial_name};
use crate::eval::outcome::{Attempt, ErrorKind, Status};
use crate::eval::settings::AgentKind;
use crate::hostfs::HostDir;
use crate::redact::Redactor;

/// The start of the message runner records for a verifier over its time.
const VERIFIER_TIMEOUT_TEXT: &str = "the verifier did not finish within";
/// The start of the message runner records when test.sh wrote no reward.
const NO_REWARD_TEXT: &str = "test.sh wrote no reward file";

/// What every trial of the job shares.
pub struct Ctx<'a> {
    pub job_id: &'a str,
    /// The job's directory, where the trials will be.
    pub final_dir: &'a std::path::Path,
    pub meta: &'a HarborJobMeta,
}

/// The agent's name as Harbor's results carry it.
fn agent_name(kind: AgentKind) -> &'static str {
    match kind {
        AgentKind::Model => "runner",
        AgentKind::Oracle => "oracle",
        AgentKind::Nop => "nop",
    }
}

/// The job's (and every trial's) `agent`.
pub fn agent_config(meta: &HarborJobMeta) -> AgentConfig {
    AgentConfig {
        name: agent_name(meta.agent).to_string(),
        model_name: meta.model.as_ref().map(|(p, m)| format!("{p}/{m}")),
        override_timeout_sec: meta.agent_timeout_secs,
    }
}

/// The job's (and every trial's) `environment`.
pub fn environment(meta: &HarborJobMeta) -> EnvironmentConfig {
    EnvironmentConfig {
        kind: meta.docker.then_some("docker"),
        override_cpus: meta.cpus,
        override_memory_mb: meta.memory_mb,
    }
}

/// The job's (and every trial's) `verifier`.
pub fn verifier(meta: &HarborJobMeta) -> VerifierConfig {
    VerifierConfig {
        override_timeout_sec: meta.verifier_timeout_secs,
    }
}

/// A task as the job's config lists it.
pub fn task_config(t: &TaskInfo) -> TaskConfig {
    TaskConfig {
        path: t.path.to_string_lossy().into_owned(),
        source: t.source.clone(),
    }
}

/// `Path.as_uri()`: `file://` and the path, percent-encoded but for `/`
/// and the unreserved characters.
fn file_uri(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(b) {
            uri.push(char::from(*b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

/// The exception Harbor would have recorded, as (type, message).
fn exception(a: &Attempt) -> Option<(&'static str, String)> {
    let text = |t: &Option<String>, default: &str| t.clone().unwrap_or_else(|| default.into());
    if matches!(a.status, Status::Pass | Status::Fail) {
        if a.metrics.is_empty() {
            let why = text(&a.failure, "the verifier ended without a reward");
            let kind = if why.starts_with(VERIFIER_TIMEOUT_TEXT) {
                "VerifierTimeoutError"
            } else {
                "RunnerVerifierFailure"
            };
            return Some((kind, why));
        }
        return (a.agent_outcome == "agent_timeout").then(|| {
            (
                "AgentTimeoutError",
                "the agent did not finish within its timeout".to_string(),
            )
        });
    }
    if a.status == Status::Error {
        let why = text(&a.error, "error");
        let kind = match a.error_kind {
            Some(ErrorKind::Task) if why.starts_with(NO_REWARD_TEXT) => "RewardFileNotFoundError",
            Some(ErrorKind::Task) => "VerifierOutputParseError",
            _ => "RunnerInfrastructureError",
        };
        return Some((kind, why));
    }
    Some(("CancelledError", "interrupted (Ctrl-C)".to_string()))
}

/// Whether the agent phase began.
fn agent_ran(a: &Attempt) -> bool {
    !matches!(a.agent_outcome.as_str(), "not_run" | "skipped")
}

/// The trial of attempt `a`; `None` for one that never started.
pub fn result(ctx: &Ctx<'_>, a: &Attempt, task: &TaskInfo) -> Option<TrialResult> {
    if a.agent_outcome == "skipped" {
        return None;
    }
    let meta = ctx.meta;
    let name = trial_name(&task.name, a.attempt);
    let span = |from: Option<Stamp>, to: Option<Stamp>| {
        from.map(|_| TimingInfo {
            started_at: from,
            finished_at: to,
        })
    };
    let p = &a.phases;
    let ran = agent_ran(a);
    let Marks {
        started,
        finished,
        env_end,
        agent_start,
        agent_end,
        verifier_end,
    } = marks(a, ran);
    let occurred_at = finished.unwrap_or(Stamp(meta.finished_at));
    let exception_info = exception(a).map(|(kind, message)| ExceptionInfo {
        exception_type: kind.to_string(),
        exception_traceback: message.clone(),
        exception_message: message,
        occurred_at,
        policy: policy_for(kind),
    });
    let rewards = (!a.metrics.is_empty()).then(|| a.metrics.clone());
    let reward_valid = rewards.is_some()
        && exception_info
            .as_ref()
            .is_none_or(|e| e.policy.has_valid_reward);
    let agent_result = ran.then(|| agent_context(meta.agent, a));
    Some(TrialResult {
        schema_version: SCHEMA_VERSION,
        id: derived_uuid(&["trial", &meta.suite_id, &name]),
        task_name: task.harbor_name.clone(),
        trial_uri: file_uri(&ctx.final_dir.join(&name)),
        task_id: LocalTaskId {
            path: task.path.to_string_lossy().into_owned(),
        },
        source: task.source.clone(),
        task_checksum: task.checksum.clone(),
        config: TrialConfig {
            schema_version: SCHEMA_VERSION,
            task: task_config(task),
            trial_name: name.clone(),
            trials_dir: ctx.final_dir.to_string_lossy().into_owned(),
            agent: agent_config(meta),
            environment: environment(meta),
            verifier: verifier(meta),
            job_id: ctx.job_id.to_string(),
        },
        trial_name: name,
        agent_info: AgentInfo {
            name: agent_name(meta.agent).to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            model_info: meta.model.as_ref().map(|(provider, model)| ModelInfo {
                name: model.clone(),
                provider: Some(provider.clone()),
            }),
        },
        agent_result,
        verifier_result: rewards.map(|r| VerifierResult { rewards: Some(r) }),
        verifier_environment_mode: a
            .grading
            .map(|g| g.as_str())
            .filter(|g| matches!(*g, "shared" | "separate")),
        exception_info,
        started_at: started,
        finished_at: finished,
        environment_setup: span(started, env_end),
        agent_setup: if ran {
            span(env_end, agent_start)
        } else {
            None
        },
        agent_execution: if ran {
            span(agent_start, agent_end)
        } else {
            None
        },
        verifier: if p.verifier_ms > 0 {
            span(agent_end, verifier_end)
        } else {
            None
        },
        step_results: None,
        reward_valid,
    })
}

/// When each phase of attempt `a` began and ended, from its start and
/// phase durations.
struct Marks {
    started: Option<Stamp>,
    finished: Option<Stamp>,
    env_end: Option<Stamp>,
    agent_start: Option<Stamp>,
    agent_end: Option<Stamp>,
    verifier_end: Option<Stamp>,
}

fn marks(a: &Attempt, ran: bool) -> Marks {
    let at = |ms: u64| {
        a.started_at
            .map(|s| Stamp(s + Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))))
    };
    let p = &a.phases;
    // Set up ahead, the attempt waited `queued_ms` in the pool before its
    // agent started (not part of its own `total_ms`).
    let finished = at(p.total_ms.saturating_add(p.queued_ms));
    let agent_start_ms = p.setup_ms.saturating_add(p.queued_ms);
    let agent_end_ms = agent_start_ms.saturating_add(p.agent_ms);
    Marks {
        started: at(0),
        finished,
        env_end: if ran { at(p.setup_ms) } else { finished },
        agent_start: at(agent_start_ms),
        agent_end: at(agent_end_ms),
        verifier_end: at(agent_end_ms.saturating_add(p.verifier_ms)),
    }
}

/// What the agent of attempt `a` used and did, as Harbor's AgentContext
/// (tokens and cost only for the model agent).
fn agent_context(agent: AgentKind, a: &Attempt) -> AgentContext {
    let u = &a.usage;
    let model = agent == AgentKind::Model;
    AgentContext {
        n_input_tokens: model.then(|| {
            u.input_tokens
                .saturating_add(u.cache_creation_input_tokens)
                .saturating_add(u.cache_read_input_tokens)
        }),
        n_cache_tokens: model.then_some(u.cache_read_input_tokens),
        n_output_tokens: model.then_some(u.output_tokens),
        cost_usd: model.then_some(a.cost_usd),
        model_usage: None,
        rollout_details: None,
        metadata: Some(serde_json::json!({
            "runner": {
                "status": a.status.as_str(),
                "agent_outcome": a.agent_outcome,
                "steps": a.steps,
                "failure": a.failure,
                "run_dir": a.run_dir,
            }
        })),
    }
}

/// The trial's files from the attempt's run directory: `verifier/`
/// (test-stdout.txt, the reward file, runner's list of removed links),
/// `agent/` (trajectory.jsonl, outputs/) and `exception.txt`.
pub fn copy_files(
    tdir: &HostDir,
    a: &Attempt,
    result: &TrialResult,
    redactor: &Redactor,
) -> std::io::Result<()> {
    let verifier = tdir.create_dir("verifier")?;
    let agent = tdir.create_dir("agent")?;
    if let Some(e) = &result.exception_info {
        let text = format!("{}: {}\n", e.exception_type, e.exception_message);
        let mut f = tdir.create_file("exception.txt")?;
        std::io::Write::write_all(&mut f, redactor.redact(&text).as_bytes())?;
    }
    let Some(run) = Source::open(&a.run_dir)? else {
        return Ok(());
    };
    run.copy_file("verifier.log", &verifier, "test-stdout.txt")?;
    for reward in [super::REWARD_JSON, super::REWARD_TXT] {
        run.copy_file(reward, &verifier, reward)?;
    }
    run.copy_file("verifier-links.log", &verifier, "verifier-links.log")?;
    run.copy_file("trajectory.jsonl", &agent, "trajectory.jsonl")?;
    if let Some(outputs) = run.dir("outputs")? {
        outputs.copy_tree(&agent.create_dir("outputs")?)?;
    }
    Ok(())
}
