//! One attempt of one task: seed the workspace from the image (a copy of
//! the suite's one seeding of it, see [`super::seed`]), start the agent's
//! sandbox as Harbor's environment is (the image's user unless `[agent]
//! user` says otherwise, HOME from its passwd entry, a writable root
//! filesystem, the task's env and workdir, services kept running), run the
//! agent (model, oracle or nop) under the task's agent timeout, collect
//! the tamper signals, then grade as the attempt's grading mode says (see
//! [`super::grade`]) and remove every sandbox.

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
use super::seed::SeedCache;
use super::settings::AgentKind;
use super::task::{Task, TaskNetwork};
use crate::agent::{Conversation, RunEnd};
use crate::config::{Config, ConfigBuilder, ConfigError};
use crate::event::{Event, Outcome};
use crate::exec::accounts::{self, Account};
use crate::exec::backend::{
    Backend, ImageSource, Network, SandboxSpec, Seeded, Services, ServicesSpec,
};
use crate::exec::{ExecError, Executor};
use crate::redact::Redactor;
use crate::render::Human;
use crate::runtime::{
    Enforced, EvalPart, RunHeader, Session, StartedConfig, build_model, sandbox_spec,
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
        !matches!(
            exec,
            ExecError::EngineUnavailable { .. }
                | ExecError::ImageUnavailable { .. }
                | ExecError::RuntimeUnavailable { .. }
                | ExecError::RuntimeWithoutNetwork { .. }
                | ExecError::ProxyImageMissing { .. }
                | ExecError::EgressNetwork { .. }
                | ExecError::AllowlistUnsupported { .. }
        )
    }
}

/// What the prepare phase hands on: the agent's sandbox, running.
struct Prepared {
    run_dir: RunDir,
    /// The task with the suite's overrides applied.
    task: Task,
    config: Config,
    workspace: Workspace,
    /// Where the agent works (the task's workdir or the image's).
    workdir: String,
    run_id: String,
    /// 1-based.
    attempt: u32,
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

impl Prepared {
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
    rec.started_at = Some(chrono::Utc::now());
    if let Err(e) = phases(ctx, task, image, attempt, &run_path, &mut rec, cancel).await {
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
    attempt: u32,
    run_path: &Path,
    rec: &mut Attempt,
    cancel: &CancellationToken,
) -> Result<(), PhaseError> {
    let image = image.map_err(PhaseError::Image)?;
    rec.image = Some(image.clone());
    ctx.progress.phase(&task.name, attempt, "setup");
    let setup_start = Instant::now();
    let p = prepare(ctx, task, &image, attempt, run_path, rec).await?;
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
    p.run_dir.record(&Event::RunFinished {
        outcome: end.outcome,
        steps: convo.steps,
        usage: convo.usage,
        cost_usd: convo.cost_usd,
        duration_ms: rec.phases.agent_ms,
        error: end.error.clone(),
        final_text: end.final_text.clone(),
    });

    // solve.sh stopped by the agent timeout is the solution running long,
    // graded like any agent over its time.
    let solution_ran_long = ctx.agent == AgentKind::Oracle && timed_out;
    let infra = matches!(end.outcome, Outcome::Error | Outcome::EmptyReply)
        && blame == Blame::Infrastructure
        && !solution_ran_long;
    if cancel.is_cancelled() || infra {
        let removed = p.executor.shutdown().await;
        p.stop_services().await;
        removed.map_err(PhaseError::Teardown)?;
        if cancel.is_cancelled() {
            rec.status = Status::Interrupted;
            rec.error_kind = None;
            return Ok(());
        }
        // The model API or the sandbox failed: not the agent's fault.
        return Err(PhaseError::Agent(
            end.error.unwrap_or_else(|| "the agent phase failed".into()),
        ));
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
    p: &Prepared,
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
    let spec = GradeSpec {
        run_dir: &run_dir,
        run_id: format!("{}-regrade", p.run_id),
        ..fresh_spec(ctx, p, image)
    };
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

/// What the agent changed on the verifier's path, and what it left
/// running, read before grading starts (a backend that cannot tell gives
/// none). Runner's own mount points and the oracle's /solution are not
/// the agent's changes.
async fn collect_signals(p: &Prepared, agent: AgentKind) -> Vec<evidence::Signal> {
    let executor = p.executor.as_ref();
    let watched = evidence::Watched {
        home: Some(&p.agent.home),
        workdir: Some(&p.workdir),
    };
    let mut signals = Vec::new();
    match executor.changes().await {
        Ok(mut changes) => {
            let mut own = vec![
                crate::exec::supervisor::binary::DIR_IN_SANDBOX,
                crate::exec::docker::CHANNEL_DIR_IN_SANDBOX,
            ];
            if agent == AgentKind::Oracle {
                own.push(super::oracle::SOLUTION_DIR);
            }
            changes.changes.retain(|c| {
                !own.iter()
                    .any(|o| c.path == *o || c.path.starts_with(&format!("{o}/")))
            });
            signals.extend(evidence::from_fs_changes(&changes, watched));
        }
        Err(ExecError::Unsupported(_)) => {}
        Err(e) => tracing::warn!("cannot list the agent sandbox's changes: {e}"),
    }
    signals.extend(super::workdir_config::signals(executor, &p.workdir, &p.seed_config).await);
    match executor.processes().await {
        Ok(procs) => {
            let procs: Vec<(u32, u32, String)> = procs
                .into_iter()
                .map(|p| (p.pid, p.uid, p.cmdline))
                .collect();
            signals.extend(evidence::from_processes(&procs));
        }
        Err(ExecError::Unsupported(_)) => {}
        Err(e) => tracing::warn!("cannot list the agent sandbox's processes: {e}"),
    }
    signals
}

/// Grades as `p.mode` says; the agent's sandbox is removed on every path.
async fn grade(
    ctx: &AttemptCtx,
    p: &Prepared,
    image: &str,
    run_path: &Path,
    cancel: &CancellationToken,
) -> Result<Verdict, PhaseError> {
    let fresh = |image| fresh_spec(ctx, p, image);
    match p.mode {
        GradingMode::Shared => {
            let verdict = super::grade::shared::grade(
                p.executor.as_ref(),
                &p.task,
                (p.agent.uid, p.agent.gid),
                (p.verifier.uid, p.verifier.gid),
                &p.verifier.home,
                &p.run_dir,
                cancel,
            )
            .await;
            let removed = p.executor.shutdown().await;
            let verdict = verdict.map_err(PhaseError::Verify)?;
            removed.map_err(PhaseError::Teardown)?;
            Ok(verdict)
        }
        GradingMode::Isolated => {
            stop_agent_processes(p).await;
            p.executor.shutdown().await.map_err(PhaseError::Teardown)?;
            super::grade::fresh::grade(fresh(image), cancel)
                .await
                .map_err(PhaseError::Verify)
        }
        GradingMode::Snapshot => {
            stop_agent_processes(p).await;
            let snap = p.executor.snapshot().await;
            let removed = p.executor.shutdown().await;
            let snap = snap.map_err(PhaseError::Snapshot)?;
            if let Err(e) = removed {
                if let Err(e) = ctx.backend.remove_image(&snap).await {
                    tracing::warn!("cannot remove the snapshot {snap}: {e}");
                }
                return Err(PhaseError::Teardown(e));
            }
            let spec = GradeSpec {
                agent_files_here: true,
                ..fresh(&snap)
            };
            let verdict = super::grade::fresh::grade(spec, cancel).await;
            if let Err(e) = ctx.backend.remove_image(&snap).await {
                tracing::warn!("cannot remove the snapshot {snap}: {e}");
            }
            verdict.map_err(PhaseError::Verify)
        }
        GradingMode::Separate => {
            stop_agent_processes(p).await;
            let staged = collect_artifacts(p, run_path).await;
            p.executor.shutdown().await.map_err(PhaseError::Teardown)?;
            let uploads = staged.map_err(PhaseError::Artifacts)?;
            // Harbor's precedence: `[verifier.environment] docker_image`,
            // else an image built from tests/ (which then bundles the
            // tests), else a fresh copy of the task's own environment.
            let tests_dir = p.task.tests_dir();
            let bundled = p.task.verifier_image.is_none() && tests_dir.join("Dockerfile").is_file();
            let source = match &p.task.verifier_image {
                Some(img) => Some(ImageSource::Named(img)),
                None if bundled => Some(ImageSource::Build {
                    context: &tests_dir,
                    timeout: Duration::from_secs_f64(p.task.build_timeout_secs),
                    label: &p.task.name,
                    log: None,
                }),
                None => None,
            };
            let verifier_image = match source {
                Some(src) => ctx
                    .backend
                    .prepare_image(src)
                    .await
                    .map_err(|e| PhaseError::Image(format!("verifier image: {e}")))?,
                None => image.to_string(),
            };
            let spec = GradeSpec {
                workspace: None,
                uploads,
                upload_tests: !bundled,
                hardened: false,
                ..fresh(&verifier_image)
            };
            super::grade::fresh::grade(spec, cancel)
                .await
                .map_err(PhaseError::Verify)
        }
    }
}

/// Before the agent's sandbox is copied, committed or removed: nothing of
/// the agent's may keep writing, nor outlive a sandbox kept for its work.
async fn stop_agent_processes(p: &Prepared) {
    match p.executor.kill_all().await {
        Ok(()) | Err(ExecError::Unsupported(_)) => {}
        Err(e) => tracing::warn!("cannot stop the agent's processes: {e}"),
    }
}

/// Grading in a fresh sandbox of `image`, with the workspace copied in.
fn fresh_spec<'a>(ctx: &'a AttemptCtx, p: &'a Prepared, image: &'a str) -> GradeSpec<'a> {
    GradeSpec {
        task: &p.task,
        image,
        workspace: Some(p.workspace.path()),
        workdir: &p.workdir,
        uploads: Vec::new(),
        // The verifier's own network (`[verifier] network_mode`), given
        // only with --allow-internet, as the agent's.
        network: network_for(&p.task.effective_verifier_network(), ctx.allow_internet),
        egress_network: ctx.egress_network.clone(),
        backend: ctx.backend.as_ref(),
        runtime: p.config.sandbox.runtime.clone(),
        seccomp: p.config.sandbox.seccomp.clone(),
        run_id: format!("{}-verify", p.run_id),
        run_dir: &p.run_dir,
        redactor: &ctx.redactor,
        agent_files_here: false,
        upload_tests: true,
        verifier_user: Some((p.verifier.uid, p.verifier.gid)),
        services: p.services.as_deref(),
        hardened: true,
        verifier_home: &p.verifier.home,
    }
}

/// Copies the task's artifacts (and the conventional /logs/artifacts) out
/// of the agent's sandbox into the run directory, for a separate verifier:
/// each a directory uploaded back to its own path.
async fn collect_artifacts(
    p: &Prepared,
    run_path: &Path,
) -> Result<Vec<(PathBuf, String)>, ExecError> {
    let root = run_path.join("artifacts");
    let mut sources: Vec<String> = vec![ARTIFACTS_DIR.to_string()];
    for a in &p.task.artifacts {
        if a.service.as_deref().is_some_and(|s| s != "main") {
            continue;
        }
        let src = if a.source.starts_with('/') {
            a.source.clone()
        } else {
            format!("{}/{}", p.workdir, a.source)
        };
        if !sources.contains(&src) {
            sources.push(src);
        }
    }
    let mut uploads = Vec::new();
    for (i, src) in sources.into_iter().enumerate() {
        let host = root.join(i.to_string());
        std::fs::create_dir_all(&host)?;
        match p
            .executor
            .download_dir(&p.executor.path(&src), &host, MAX_ARTIFACT_BYTES)
            .await
        {
            Ok(()) => uploads.push((host, src)),
            // An artifact the agent did not make is not handed over.
            Err(e) if !e.is_fatal() || matches!(e, ExecError::Refused(_)) => {
                tracing::info!("artifact {src} not collected: {e}");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(uploads)
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
    let network = network_for(&task.effective_agent_network(), ctx.allow_internet);
    rec.network = network.note.clone();
    let mode = ctx.grading.or(task.grading).unwrap_or(GradingMode::Shared);
    rec.grading = Some(mode);
    let budget = ctx.disk_bytes.unwrap_or(u64::MAX);
    let run_dir = RunDir::create(run_path, ctx.redactor.clone(), budget)?;
    rec.trajectory = Some(run_dir.trajectory_path());
    let task = overridden(ctx, task);
    let run_id = format!("{}-{}-{}", ctx.suite_id, task.name, attempt);
    let workspace = Workspace::prepare(None).map_err(PhaseError::Workspace)?;
    // Recorded once the sandbox runs, with what the engine enforces on it.
    let eval = EvalPart {
        task: task.name.clone(),
        attempt,
        agent: ctx.agent.as_str().into(),
        network: rec.network.clone(),
        grading: mode.as_str().into(),
    };
    let started_event = |run| started(&run_id, &eval, run);
    let seeded = match ctx
        .seeds
        .seed_dir(image, task.workdir.as_deref(), workspace.path(), &run_id)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            run_dir.record(&started_event(None));
            return Err(PhaseError::Seed(e));
        }
    };
    let workdir = task
        .workdir
        .clone()
        .unwrap_or_else(|| seeded.workdir.clone());
    let seed_config = super::workdir_config::seeded(workspace.path());
    let (agent, verifier) = accounts_of(ctx, &task, &seeded)?;
    let config = attempt_config(ctx, &task, image, &network, &agent)?;
    rec.runtime = config.sandbox.runtime.clone();
    let mut env = vec![("HOME".to_string(), agent.home.clone())];
    env.extend(task.env.iter().cloned());
    let compose = super::compose::load(&task.dir, &compose_vars(&task))?;
    if let Some(c) = &compose {
        env.extend(c.main_env().iter().cloned());
    }
    let services = match start_services(ctx, &task, &config, &run_id, compose.as_ref()).await {
        Ok(s) => s,
        Err(e) => {
            run_dir.record(&started_event(Some(RunHeader::of(&config))));
            return Err(PhaseError::Services(e));
        }
    };
    let mut spec = agent_spec(&config, &workspace, &run_id, ctx, &workdir, env, &agent);
    if let Some(s) = &services {
        spec.join_services(s.as_ref());
    }
    rec.loosenings = ctx.backend.loosenings(&spec);
    rec.loosenings
        .push("background processes keep running between commands (the agent's services)".into());
    let mut header = RunHeader::of(&config);
    let executor = match ctx.backend.start(spec).await {
        Ok(x) => x,
        Err(e) => {
            run_dir.record(&started_event(Some(header)));
            if let Some(s) = &services
                && let Err(e) = s.stop().await
            {
                tracing::warn!("cannot remove the task's services: {e}");
            }
            return Err(PhaseError::Start(e));
        }
    };
    header.sandbox_security = Enforced::of(executor.sandbox_security());
    let enforced = header.sandbox_security.clone().unwrap_or_default();
    run_dir.record(&started_event(Some(header)));
    note_sandbox(rec, services.as_deref(), enforced);
    Ok(Prepared {
        run_dir,
        task,
        config,
        workspace,
        workdir,
        run_id,
        attempt,
        executor,
        agent,
        verifier,
        mode,
        services,
        seed_config,
    })
}

/// The `run_started` of an eval attempt: its part, and its run's header
/// once it has a configuration.
fn started(run_id: &str, eval: &EvalPart, run: Option<RunHeader>) -> Event {
    Event::RunStarted {
        run_id: run_id.to_string(),
        format_version: crate::event::TRAJECTORY_FORMAT_VERSION,
        config: StartedConfig::Eval {
            eval: eval.clone(),
            run,
        },
    }
}

/// Notes in the attempt's report the sidecars' network and what the
/// engine enforced on the started sandbox.
fn note_sandbox(rec: &mut Attempt, services: Option<&dyn Services>, enforced: Enforced) {
    if let Some(s) = services
        && s.network().is_some()
    {
        rec.network = format!(
            "{}; sidecars on an internal network: {}",
            rec.network,
            s.names().join(", ")
        );
    }
    rec.runtime = enforced.runtime;
    rec.seccomp = enforced.seccomp;
    rec.seccomp_profile_sha256 = enforced.seccomp_profile_sha256;
}

/// The task with the suite's overrides applied.
fn overridden(ctx: &AttemptCtx, task: &Task) -> Task {
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
    task
}

/// Who the agent and the verifier are, as Harbor decides: `--user`, else
/// `[agent] user`, else the image's USER (root when it has none); the
/// verifier `[verifier] user`, else the image's; HOME from passwd.
fn accounts_of(
    ctx: &AttemptCtx,
    task: &Task,
    seeded: &Seeded,
) -> Result<(Account, Account), PhaseError> {
    let resolve = |user: &str| {
        accounts::resolve(user, seeded.passwd.as_deref(), seeded.group.as_deref())
            .map_err(PhaseError::User)
    };
    let image_user = seeded.image_user.clone().unwrap_or_default();
    let agent_user = ctx
        .user
        .clone()
        .or_else(|| task.agent_user.clone())
        .unwrap_or_else(|| image_user.clone());
    let agent = resolve(&agent_user)?;
    let verifier = resolve(task.verifier_user.as_deref().unwrap_or(&image_user))?;
    Ok((agent, verifier))
}

/// docker-compose tasks: the sidecars, on a network of their own, before
/// the agent's sandbox.
async fn start_services(
    ctx: &AttemptCtx,
    task: &Task,
    config: &Config,
    run_id: &str,
    compose: Option<&super::compose::Compose>,
) -> Result<Option<Arc<dyn Services>>, ExecError> {
    let Some(c) = compose else {
        return Ok(None);
    };
    let base = ServicesSpec {
        cpus: task.cpus,
        memory_bytes: task.memory_bytes,
        pids_limit: config.sandbox.pids_limit,
        runtime: config.sandbox.runtime.clone(),
        seccomp: config.sandbox.seccomp.clone(),
        max_run_time: Duration::from_secs_f64(
            task.agent_timeout_secs + task.verifier_timeout_secs + 600.0,
        ),
        redactor: ctx.redactor.clone(),
        ..ServicesSpec::new(run_id, Vec::new())
    };
    let build_timeout = Duration::from_secs_f64(task.build_timeout_secs);
    super::compose::start(c, &task.dir, ctx.backend.as_ref(), base, build_timeout)
        .await
        .map(Some)
}

/// The agent's sandbox: it works where the task says, as Harbor's agents
/// do, with `env` over the configuration's, and what it starts in the
/// background keeps running (services the tests use).
fn agent_spec(
    config: &Config,
    workspace: &Workspace,
    run_id: &str,
    ctx: &AttemptCtx,
    workdir: &str,
    env: Vec<(String, String)>,
    agent: &Account,
) -> SandboxSpec {
    let base = sandbox_spec(config, workspace, run_id, &ctx.redactor);
    let mut spec_env = base.env.clone();
    for (k, v) in env {
        spec_env.retain(|(e, _)| *e != k);
        spec_env.push((k, v));
    }
    SandboxSpec {
        workdir: Some(workdir.to_string()),
        env: spec_env,
        keep_background: true,
        // A root agent may chown, bind port 80... as Harbor's root may
        // (never the capabilities that reach runner's supervisor).
        root_caps: agent.uid == 0,
        ..base
    }
}

/// The variables a task's docker-compose.yaml may name, as Harbor sets
/// them, and the task's own environment.
fn compose_vars(task: &Task) -> std::collections::BTreeMap<String, String> {
    let mut vars: std::collections::BTreeMap<String, String> = task.env.iter().cloned().collect();
    vars.insert(
        "CONTEXT_DIR".into(),
        task.environment_dir().display().to_string(),
    );
    vars.insert("MAIN_IMAGE_NAME".into(), "${MAIN_IMAGE_NAME}".into());
    vars.insert("CPUS".into(), task.cpus.to_string());
    vars.insert("MEMORY".into(), format!("{}M", task.memory_bytes >> 20));
    vars.insert("TEST_DIR".into(), "/tests".into());
    vars
}

/// Runs what plays the agent under the task's agent timeout; how it
/// ended, and whether the timeout stopped it.
async fn agent(ctx: &AttemptCtx, p: &Prepared, cancel: &CancellationToken) -> (AgentEnd, bool) {
    let agent_cancel = cancel.child_token();
    let timeout = Duration::from_secs_f64(p.task.agent_timeout_secs);
    let max_steps = p.config.max_steps;
    let sink = |ev: &Event| {
        if let Event::ModelRequest { step, .. } = ev {
            let phase = format!("agent step {step}/{max_steps}");
            ctx.progress.phase(&p.task.name, p.attempt, &phase);
        }
        p.run_dir.record(ev)
    };
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

fn finish(mut rec: Attempt, started: Instant) -> Attempt {
    rec.phases.total_ms = ms(started);
    if rec.status != Status::Error {
        rec.error_kind = None;
    }
    rec
}

fn ms(t: Instant) -> u64 {
    crate::convert::millis_u64(t.elapsed())
}

/// A phase's network as runner gives it, with the attempt's note on it.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseNetwork {
    pub network: Network,
    /// With [`Network::Allowlist`]: the task's host patterns.
    pub allowed_hosts: Vec<String>,
    /// What the attempt records as its `network`.
    pub note: String,
}

/// Network is opt-in twice: the task allows it AND runner was told
/// `--allow-internet`; a `public` task then gets the bridge, an
/// `allowlist` task only its hosts (through the filtering proxy).
pub fn network_for(task: &TaskNetwork, flag: bool) -> PhaseNetwork {
    let none = |note: String| PhaseNetwork {
        network: Network::None,
        allowed_hosts: Vec::new(),
        note,
    };
    match (task, flag) {
        (TaskNetwork::Public, true) => PhaseNetwork {
            network: Network::Bridge,
            allowed_hosts: Vec::new(),
            note: "bridge".into(),
        },
        (TaskNetwork::Public, false) => {
            none("none (the task allows internet; pass --allow-internet to give it)".into())
        }
        (TaskNetwork::Allowlist(h), _) if h.is_empty() => {
            none("none (the task's allowlist names no host)".into())
        }
        (TaskNetwork::Allowlist(h), true) => PhaseNetwork {
            network: Network::Allowlist,
            allowed_hosts: h.clone(),
            note: format!("allowlist: only {} through a filtering proxy", h.join(", ")),
        },
        (TaskNetwork::Allowlist(h), false) => none(format!(
            "none (the task allows {}; pass --allow-internet to give them)",
            h.join(", ")
        )),
        (TaskNetwork::NoNetwork, _) => none("none (task.allow_internet = false)".into()),
    }
}

/// The run configuration of this attempt: the shared flags with the task's
/// image, limits, network, disk and user.
fn attempt_config(
    ctx: &AttemptCtx,
    task: &Task,
    image: &str,
    network: &PhaseNetwork,
    agent: &Account,
) -> Result<Config, ConfigError> {
    let mut b = ctx.base.clone();
    b.sandbox.image = image.to_string();
    b.sandbox.cpus = task.cpus;
    b.sandbox.memory = task.memory_bytes.to_string();
    b.sandbox.network = network.network;
    b.sandbox.allowed_hosts = network.allowed_hosts.clone();
    b.sandbox.egress_network = ctx
        .egress_network
        .clone()
        .filter(|_| network.network == Network::Allowlist);
    if !ctx.backend.capabilities().name.eq("local") {
        b.sandbox.user = format!("{}:{}", agent.uid, agent.gid);
    }
    // Harbor's environment: the root filesystem is the task's to change.
    b.sandbox.writable_rootfs = !ctx.read_only_rootfs;
    if let Some(bytes) = task.storage_bytes {
        b.sandbox.disk = bytes.to_string();
    }
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
            let outputs = Some(run_dir.outputs().clone());
            let session = Session::new(config, executor, outputs, &warn);
            let instruction = task.instruction.clone();
            let (end, convo) = session
                .run_task(model.as_ref(), instruction, sink, cancel)
                .await;
            // An empty reply is the model API's failure too, never graded.
            let blame = if matches!(end.outcome, Outcome::Error | Outcome::EmptyReply) {
                Blame::Infrastructure
            } else {
                Blame::Agent
            };
            AgentEnd { end, convo, blame }
        }
        AgentKind::Oracle => {
            let timeout = Duration::from_secs_f64(task.agent_timeout_secs);
            let dest = if config.sandbox.writable_rootfs {
                super::oracle::SOLUTION_DIR
            } else {
                super::oracle::SOLUTION_DIR_READ_ONLY_ROOT
            };
            match super::oracle::run(task, executor, dest, run_dir, timeout, cancel).await {
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
        assert_eq!(
            network_for(&TaskNetwork::Public, true).network,
            Network::Bridge
        );
        let n = network_for(&TaskNetwork::Public, false);
        assert_eq!(n.network, Network::None);
        assert!(n.note.contains("--allow-internet"), "{}", n.note);
        assert_eq!(
            network_for(&TaskNetwork::NoNetwork, true).network,
            Network::None
        );
        assert_eq!(
            network_for(&TaskNetwork::NoNetwork, false).network,
            Network::None
        );
        let hosts = vec!["pypi.org".to_string(), "*.example.com".to_string()];
        let list = TaskNetwork::Allowlist(hosts.clone());
        let n = network_for(&list, true);
        assert_eq!(n.network, Network::Allowlist);
        assert_eq!(n.allowed_hosts, hosts);
        assert!(n.note.contains("pypi.org, *.example.com"), "{}", n.note);
        let n = network_for(&list, false);
        assert_eq!(n.network, Network::None);
        assert!(n.allowed_hosts.is_empty());
        assert!(
            n.note.contains("pypi.org") && n.note.contains("--allow-internet"),
            "{}",
            n.note
        );
        let n = network_for(&TaskNetwork::Allowlist(Vec::new()), true);
        assert_eq!(n.network, Network::None);
    }
}
