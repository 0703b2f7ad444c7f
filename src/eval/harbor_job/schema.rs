//! Harbor's result documents as runner writes them: the fields of Harbor
//! 0.26's pydantic models (`harbor/models/trial/result.py`,
//! `harbor/models/trial/config.py`, `harbor/models/job/result.py`,
//! `harbor/models/job/config.py`), serialized as Harbor serializes them
//! (UTC times with microseconds and `Z`, computed fields included). A
//! config field runner has nothing to say about is left out, so Harbor
//! fills in its own default when it loads the file.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Serialize, Serializer};

/// Every document's `schema_version`.
pub const SCHEMA_VERSION: u8 = 1;

/// A time as pydantic writes a UTC datetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(pub DateTime<Utc>);

impl Serialize for Stamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
    }
}

/// `TimingInfo`.
#[derive(Debug, Clone, Serialize)]
pub struct TimingInfo {
    pub started_at: Option<Stamp>,
    pub finished_at: Option<Stamp>,
}

/// `ErrorPolicy` (the computed `policy` of an exception).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ErrorPolicy {
    pub should_retry: bool,
    pub should_grade: bool,
    pub has_valid_reward: bool,
}

/// `ExceptionInfo`.
#[derive(Debug, Clone, Serialize)]
pub struct ExceptionInfo {
    pub exception_type: String,
    pub exception_message: String,
    pub exception_traceback: String,
    pub occurred_at: Stamp,
    pub policy: ErrorPolicy,
}

/// `ModelInfo`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub name: String,
    pub provider: Option<String>,
}

/// `AgentInfo`.
#[derive(Debug, Clone, Serialize)]
pub struct AgentInfo {
    pub name: String,
    pub version: String,
    pub model_info: Option<ModelInfo>,
}

/// `AgentContext` (the trial's `agent_result`).
#[derive(Debug, Clone, Serialize)]
pub struct AgentContext {
    /// Input tokens, cached ones included (Harbor's convention).
    pub n_input_tokens: Option<u64>,
    pub n_cache_tokens: Option<u64>,
    pub n_output_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub model_usage: Option<()>,
    pub rollout_details: Option<()>,
    pub metadata: Option<serde_json::Value>,
}

/// `VerifierResult`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifierResult {
    pub rewards: Option<BTreeMap<String, f64>>,
}

/// `LocalTaskId`.
#[derive(Debug, Clone, Serialize)]
pub struct LocalTaskId {
    pub path: String,
}

/// `TaskConfig` of a local task.
#[derive(Debug, Clone, Serialize)]
pub struct TaskConfig {
    pub path: String,
    pub source: Option<String>,
}

/// `AgentConfig`: what runner was told about the agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentConfig {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_timeout_sec: Option<f64>,
}

/// `EnvironmentConfig`: the engine, and runner's overrides of the tasks'
/// limits.
#[derive(Debug, Clone, Serialize)]
pub struct EnvironmentConfig {
    /// `docker`; left out (Harbor's default, docker, applies) for
    /// `--executor local`, which Harbor has no name for.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_cpus: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_memory_mb: Option<u64>,
}

/// `VerifierConfig`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifierConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_timeout_sec: Option<f64>,
}

/// `TrialConfig` (the trial's `config.json` and its result's `config`).
#[derive(Debug, Clone, Serialize)]
pub struct TrialConfig {
    pub schema_version: u8,
    pub task: TaskConfig,
    pub trial_name: String,
    pub trials_dir: String,
    pub agent: AgentConfig,
    pub environment: EnvironmentConfig,
    pub verifier: VerifierConfig,
    pub job_id: String,
}

/// `TrialResult` (a trial's `result.json`).
#[derive(Debug, Clone, Serialize)]
pub struct TrialResult {
    pub schema_version: u8,
    pub id: String,
    pub task_name: String,
    pub trial_name: String,
    pub trial_uri: String,
    pub task_id: LocalTaskId,
    pub source: Option<String>,
    pub task_checksum: String,
    pub config: TrialConfig,
    pub agent_info: AgentInfo,
    pub agent_result: Option<AgentContext>,
    pub verifier_result: Option<VerifierResult>,
    pub verifier_environment_mode: Option<&'static str>,
    pub exception_info: Option<ExceptionInfo>,
    pub started_at: Option<Stamp>,
    pub finished_at: Option<Stamp>,
    pub environment_setup: Option<TimingInfo>,
    pub agent_setup: Option<TimingInfo>,
    pub agent_execution: Option<TimingInfo>,
    pub verifier: Option<TimingInfo>,
    pub step_results: Option<()>,
    /// Harbor's computed field: rewards present and no exception saying
    /// they are invalid.
    pub reward_valid: bool,
}

impl TrialResult {
    /// The key of the trial's group in the job's stats
    /// (`JobStats.format_agent_evals_key`).
    pub fn evals_key(&self) -> String {
        let dataset = self.source.as_deref().unwrap_or("adhoc");
        match &self.agent_info.model_info {
            Some(m) => format!("{}__{}__{dataset}", self.agent_info.name, m.name),
            None => format!("{}__{dataset}", self.agent_info.name),
        }
    }
}

/// `AgentDatasetStats`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentDatasetStats {
    pub n_trials: u64,
    pub n_errors: u64,
    pub metrics: Vec<BTreeMap<String, f64>>,
    pub pass_at_k: BTreeMap<u32, f64>,
    /// Metric name -> reward value (as Python writes the float) -> trials.
    pub reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    pub exception_stats: BTreeMap<String, Vec<String>>,
}

/// `JobStats`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JobStats {
    pub n_completed_trials: u64,
    pub n_errored_trials: u64,
    pub n_running_trials: u64,
    pub n_pending_trials: u64,
    pub n_cancelled_trials: u64,
    pub n_retries: u64,
    pub evals: BTreeMap<String, AgentDatasetStats>,
    pub n_input_tokens: Option<u64>,
    pub n_cache_tokens: Option<u64>,
    pub n_output_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// `JobResult` (the job's `result.json`; Harbor leaves `trial_results`
/// out of the file it writes at the end of a job, and so does runner).
#[derive(Debug, Clone, Serialize)]
pub struct JobResult {
    pub schema_version: u8,
    pub id: String,
    pub started_at: Stamp,
    pub updated_at: Option<Stamp>,
    pub finished_at: Option<Stamp>,
    pub n_total_trials: u64,
    pub stats: JobStats,
}

/// `JobConfig` (the job's `config.json`).
#[derive(Debug, Clone, Serialize)]
pub struct JobConfig {
    pub schema_version: u8,
    pub job_name: String,
    pub jobs_dir: String,
    pub n_attempts: u32,
    pub n_concurrent_trials: usize,
    pub environment: EnvironmentConfig,
    pub verifier: VerifierConfig,
    pub agents: Vec<AgentConfig>,
    pub tasks: Vec<TaskConfig>,
}

/// Harbor's `policy_for`, for the exception types runner writes; any
/// other name gets Harbor's policy for an unknown type.
pub fn policy_for(exception_type: &str) -> ErrorPolicy {
    let p = |should_retry, should_grade, has_valid_reward| ErrorPolicy {
        should_retry,
        should_grade,
        has_valid_reward,
    };
    match exception_type {
        "AgentTimeoutError" => p(false, true, true),
        "VerifierTimeoutError" | "RewardFileNotFoundError" | "VerifierOutputParseError" => {
            p(false, true, false)
        }
        "CancelledError" => p(false, false, false),
        _ => p(true, true, true),
    }
}

/// The job's stats over its trials, as `JobStats.from_trial_results` and
/// the end of `Job.run` compute them: counts, reward and exception
/// tables, the mean metric and pass@k of each group.
pub fn job_stats(trials: &[TrialResult], n_total_trials: u64) -> JobStats {
    let mut stats = JobStats::default();
    let mut valid: BTreeMap<String, Vec<&TrialResult>> = BTreeMap::new();
    for t in trials {
        stats.n_completed_trials += 1;
        let key = t.evals_key();
        let group = stats.evals.entry(key.clone()).or_default();
        let rewards = t.verifier_result.as_ref().and_then(|v| v.rewards.as_ref());
        if let (true, Some(rewards)) = (t.reward_valid, rewards) {
            group.n_trials += 1;
            for (name, value) in rewards {
                group
                    .reward_stats
                    .entry(name.clone())
                    .or_default()
                    .entry(py_float(*value))
                    .or_default()
                    .push(t.trial_name.clone());
            }
            valid.entry(key).or_default().push(t);
        }
        if let Some(e) = &t.exception_info {
            group
                .exception_stats
                .entry(e.exception_type.clone())
                .or_default()
                .push(t.trial_name.clone());
            group.n_errors += 1;
            stats.n_errored_trials += 1;
            if e.exception_type == "CancelledError" {
                stats.n_cancelled_trials += 1;
            }
        }
        if let Some(a) = &t.agent_result {
            add(&mut stats.n_input_tokens, a.n_input_tokens);
            add(&mut stats.n_cache_tokens, a.n_cache_tokens);
            add(&mut stats.n_output_tokens, a.n_output_tokens);
            if let Some(c) = a.cost_usd {
                stats.cost_usd = Some(stats.cost_usd.unwrap_or(0.0) + c);
            }
        }
    }
    for (key, group) in &valid {
        let rewards: Vec<&BTreeMap<String, f64>> = group
            .iter()
            .filter_map(|t| t.verifier_result.as_ref()?.rewards.as_ref())
            .collect();
        if let Some(stats) = stats.evals.get_mut(key) {
            stats.metrics.push(mean(&rewards));
            stats.pass_at_k = pass_at_k(group);
        }
    }
    stats.n_pending_trials = n_total_trials.saturating_sub(stats.n_completed_trials);
    stats
}

fn add(total: &mut Option<u64>, n: Option<u64>) {
    if let Some(n) = n {
        *total = Some(total.unwrap_or(0).saturating_add(n));
    }
}

/// Harbor's `Mean` metric: `{"mean": ...}` over the first value of each
/// reward when there is one metric name, else the mean of each name
/// (missing counted as 0).
fn mean(rewards: &[&BTreeMap<String, f64>]) -> BTreeMap<String, f64> {
    let names: std::collections::BTreeSet<&String> =
        rewards.iter().flat_map(|r| r.keys()).collect();
    let n = rewards.len().max(1) as f64;
    if names.len() <= 1 {
        let sum: f64 = rewards
            .iter()
            .map(|r| r.values().next().copied().unwrap_or(0.0))
            .sum();
        return BTreeMap::from([("mean".to_string(), sum / n)]);
    }
    names
        .into_iter()
        .map(|k| {
            let sum: f64 = rewards
                .iter()
                .map(|r| r.get(k).copied().unwrap_or(0.0))
                .sum();
            (k.clone(), sum / n)
        })
        .collect()
}

/// Harbor's pass@k (`harbor/utils/pass_at_k.py`): only when every valid
/// reward is one value of 0 or 1; k = 2, 4, 8... and 5, 10, 15... up to the
/// fewest trials of a task; the unbiased estimator, averaged over tasks.
fn pass_at_k(trials: &[&TrialResult]) -> BTreeMap<u32, f64> {
    let mut per_task: BTreeMap<&str, Vec<bool>> = BTreeMap::new();
    for t in trials {
        let Some(rewards) = t.verifier_result.as_ref().and_then(|v| v.rewards.as_ref()) else {
            continue;
        };
        if rewards.len() != 1 {
            return BTreeMap::new();
        }
        let v = rewards.values().next().copied().unwrap_or(f64::NAN);
        if v != 0.0 && v != 1.0 {
            return BTreeMap::new();
        }
        per_task.entry(&t.task_name).or_default().push(v == 1.0);
    }
    let Some(fewest) = per_task.values().map(Vec::len).min() else {
        return BTreeMap::new();
    };
    let fewest = u32::try_from(fewest).unwrap_or(u32::MAX);
    let mut ks: Vec<u32> = (1..)
        .map(|i| 1u32 << i)
        .take_while(|k| *k <= fewest)
        .chain((1..).map(|i| 5 * i).take_while(|k| *k <= fewest))
        .collect();
    ks.sort_unstable();
    ks.dedup();
    ks.into_iter()
        .map(|k| {
            let sum: f64 = per_task
                .values()
                .map(|s| {
                    let n = s.len() as f64;
                    let c = s.iter().filter(|p| **p).count() as f64;
                    let k = f64::from(k);
                    if n - c < k {
                        return 1.0;
                    }
                    let mut product = 1.0;
                    let mut i = 0.0;
                    while i < k {
                        product *= (n - c - i) / (n - i);
                        i += 1.0;
                    }
                    1.0 - product
                })
                .sum();
            (k, sum / per_task.len() as f64)
        })
        .collect()
}

/// A float as Python's `repr` writes it (the key Harbor gives a reward
/// value in `reward_stats`).
pub fn py_float(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let s = format!("{v:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let s = format!("{v}");
    if s.contains('.') { s } else { format!("{s}.0") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_python_writes_them() {
        for (v, want) in [
            (1.0, "1.0"),
            (0.0, "0.0"),
            (0.5, "0.5"),
            (-2.0, "-2.0"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (1.5e17, "1.5e+17"),
            (0.0001, "0.0001"),
            (1.0 / 3.0, "0.3333333333333333"),
        ] {
            assert_eq!(py_float(v), want, "{v}");
        }
    }

    #[test]
    fn stamps_are_utc_with_microseconds() {
        let t = DateTime::parse_from_rfc3339("2026-12-01T21:57:58.354271999Z")
            .expect("parses")
            .with_timezone(&Utc);
        assert_eq!(
            serde_json::to_string(&Stamp(t)).expect("serializes"),
            "\"2026-12-01T21:57:58.354271Z\""
        );
    }
}
