//! `runner eval`: load a suite of Harbor-format tasks, run their attempts
//! with bounded concurrency, grade each in a fresh sandbox, and report.
//!
//! Ctrl-C (or SIGTERM) stops starting new attempts, cancels the running
//! ones (each removes its sandboxes on the way out), still writes every
//! report with what finished, and exits 130.

pub mod attempt;
pub mod compose;
pub mod evidence;
pub mod flagged;
pub mod grade;
pub mod harbor_job;
pub mod health;
pub mod image;
pub mod manifest;
pub mod merge;
pub mod mode;
pub mod oracle;
pub mod outcome;
pub mod progress;
pub mod report;
pub mod resume;
pub mod sandboxes;
pub mod schedule;
pub mod seed;
pub mod settings;
pub mod slots;
pub mod task;
pub mod workdir_config;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::config::{ConfigBuilder, ConfigError, SandboxOptions};
use crate::exec::backend::DEFAULT_USER;
use crate::hints::Failure;
use crate::redact::Redactor;
use crate::render::Human;
use crate::runtime::backend_for;
use crate::terminal::visible;
use attempt::AttemptCtx;
use outcome::Attempt;
use settings::{AgentKind, EvalSettings};
use task::TaskError;

/// A problem that stops the suite before it starts (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}")]
    Task(#[from] TaskError),
    #[error("--filter: {0}")]
    Filter(#[from] glob::PatternError),
    #[error("no task matches --filter {0:?}")]
    NoMatch(Vec<String>),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Model(#[from] crate::model::ModelError),
    #[error("{0}")]
    Redact(#[from] crate::redact::RedactError),
    #[error("--{flag} {detail}")]
    Flag { flag: &'static str, detail: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Exec(#[from] crate::exec::ExecError),
    #[error("{0}")]
    Manifest(#[from] manifest::ManifestError),
    #[error("--html: {0}")]
    Html(String),
    #[error("{0}")]
    OutputLink(#[from] crate::output_path::LinkAtOutput),
    #[error("{} already holds a suite's results", .0.display())]
    OutputInUse(PathBuf),
    #[error("--resume {}: not the same suite: {detail}", dir.display())]
    ResumeMismatch { dir: PathBuf, detail: String },
    #[error("{0}")]
    HarborJob(#[from] harbor_job::HarborJobError),
}

impl EvalError {
    fn hint(&self) -> Option<String> {
        if let EvalError::Exec(e) = self {
            return e.hint();
        }
        if let EvalError::Manifest(e) = self {
            return Some(e.hint().to_string());
        }
        if let EvalError::HarborJob(e) = self {
            return Some(e.hint().to_string());
        }
        if let EvalError::OutputLink(e) = self {
            return Some(e.hint());
        }
        if let EvalError::Task(e) = self
            && let Some(h) = e.hint()
        {
            return Some(h);
        }
        let hint = match self {
            EvalError::Task(TaskError::NoTasks(_)) => {
                Some("a task directory holds instruction.md, task.toml and tests/test.sh")
            }
            EvalError::Task(TaskError::Toml { .. }) => {
                Some("see Harbor's task.toml: [agent], [verifier], [environment], [metadata]")
            }
            EvalError::Config(ConfigError::MissingScript) => {
                Some("or use --agent oracle / --agent nop, which need no model")
            }
            EvalError::Config(e) => e.hint(),
            EvalError::Html(_) => {
                Some("choose a writable --html FILE; `runner view DIR` writes the page again")
            }
            EvalError::OutputInUse(_) => {
                Some("add --resume DIR to continue that suite, or choose another --output-dir")
            }
            EvalError::ResumeMismatch { .. } => Some(
                "run with the tasks and flags of the first run (only --jobs, --retry-errors, --suite-max-cost and the report paths may change), or start afresh with another --output-dir",
            ),
            EvalError::Model(crate::model::ModelError::MissingKey { .. }) => Some(
                "export the provider's API key, or use --provider scripted --script FILE, --agent oracle or --agent nop",
            ),
            _ => None,
        };
        hint.map(str::to_string)
    }
}

impl From<EvalError> for Failure {
    fn from(e: EvalError) -> Failure {
        Failure::new(e.to_string(), e.hint())
    }
}

/// Runs the suite until it ends or `cancel` (Ctrl-C) stops it; the exit
/// code, or the failure to print.
pub async fn run(args: EvalSettings, cancel: CancellationToken) -> Result<u8, Failure> {
    Ok(run_inner(args, cancel).await?)
}

async fn run_inner(args: EvalSettings, cancel: CancellationToken) -> Result<u8, EvalError> {
    let (tasks, all_names) = suite_tasks(&args)?;
    let harbor_tasks = harbor_tasks(&args, &tasks)?;
    let base = base_config(&args);
    let Checked {
        probe,
        backend,
        runtime,
        memory_bytes,
    } = preflight(&args, &base).await?;

    let started = Instant::now();
    let human = Human::new();
    let redactor = suite_redactor(&probe, &human, &tasks)?;
    let (out_dir, suite) = open_suite(&args, all_names, &tasks, &redactor)?;
    let suite_id = suite.id.clone();
    for t in &tasks {
        for w in &t.warnings {
            eprintln!("warning: {}", visible(w));
        }
    }
    human.set_redactor(redactor.clone());
    // Each image is seeded once for the suite; the cache goes with `ctx`.
    let seeds =
        seed::SeedCache::new(backend.clone(), &suite_id).map_err(|source| EvalError::Write {
            path: std::env::temp_dir(),
            source,
        })?;
    let progress = progress::Progress::new(tasks.len() * args.attempts as usize);
    let ctx = Arc::new(AttemptCtx {
        agent: args.agent_kind,
        base,
        cpus: args.cpus,
        memory_bytes,
        agent_timeout_secs: args.agent_timeout_secs,
        verifier_timeout_secs: args.verifier_timeout_secs,
        allow_internet: args.allow_internet,
        egress_network: args.egress_network.clone(),
        grading: args.grading,
        regrade_flagged: args.regrade_flagged,
        user: args.user.clone(),
        read_only_rootfs: args.read_only_rootfs,
        disk_bytes: probe.sandbox.disk_bytes,
        suite_id: suite_id.clone(),
        human,
        redactor: redactor.clone(),
        backend,
        seeds,
        progress: progress.clone(),
    });
    let beat = CancellationToken::new();
    let heartbeat = progress.heartbeat(beat.clone());
    let attempts = schedule::run_all(&ctx, tasks, &args, &out_dir, &cancel).await;
    beat.cancel();
    let _ = heartbeat.await;
    progress.finish();

    let elapsed = started.elapsed();
    let (task_sums, totals) = report::summarize(&attempts, args.attempts, elapsed);
    let rules = print_summary(&args, &attempts, &totals, &redactor);
    let meta = SuiteMeta {
        args: &args,
        executor: ctx.backend.capabilities().name,
        out_dir: &out_dir,
        runtime: &runtime,
        probe: &probe,
        interrupted: cancel.is_cancelled(),
        elapsed,
        suite: &suite,
    }
    .json();
    // A resumed suite began with its first run.
    let suite_started = suite.started_at.with_timezone(&chrono::Utc);
    let reports = write_reports(
        &args, &attempts, &task_sums, &totals, meta, elapsed, &redactor,
    );
    // The page reads back the records just written in out_dir.
    if let Some(p) = &args.html {
        crate::view::write(&out_dir, p, Some(&redactor))
            .map_err(|e| EvalError::Html(e.to_string()))?;
    }
    reports?;
    if let (Some(dir), Some(infos)) = (&args.harbor_job, &harbor_tasks) {
        let meta = harbor_meta(&args, &probe, &suite_id, suite_started, memory_bytes);
        harbor_job::write(dir, &attempts, infos, &meta, &redactor, args.resume)?;
        eprintln!("harbor job: {}", visible(&dir.display().to_string()));
    }
    eprintln!(
        "runs: {}",
        crate::terminal::one_cell(&out_dir.display().to_string())
    );

    Ok(if cancel.is_cancelled() {
        130
    } else {
        flagged::exit_code(&totals, rules)
    })
}

/// The tasks this run attempts (the shard's part of the suite, in name
/// order) and the names of every task of the suite.
fn suite_tasks(args: &EvalSettings) -> Result<(Vec<task::Task>, Vec<String>), EvalError> {
    task::envsubst::allow_secrets(args.pass_env.clone());
    let tasks = task::filter(task::discover(&args.paths)?, &args.filter)?;
    if tasks.is_empty() {
        return Err(EvalError::NoMatch(args.filter.clone()));
    }
    args.check()?;
    // The suite is every task; a shard runs its part of the name order.
    let mut tasks = tasks;
    tasks.sort_by(|a, b| a.name.cmp(&b.name));
    let all_names: Vec<String> = tasks.iter().map(|t| t.name.clone()).collect();
    if let Some(shard) = args.shard {
        tasks = tasks
            .into_iter()
            .enumerate()
            .filter(|(i, _)| shard.holds(*i))
            .map(|(_, t)| t)
            .collect();
    }
    Ok((tasks, all_names))
}

/// Harbor's layout records each task's checksum as the suite starts; a
/// DIR it could not be written to stops the suite before it runs.
fn harbor_tasks(
    args: &EvalSettings,
    tasks: &[task::Task],
) -> Result<Option<Vec<harbor_job::TaskInfo>>, EvalError> {
    match &args.harbor_job {
        Some(dir) => {
            harbor_job::check_target(dir, args.resume)?;
            Ok(Some(harbor_job::TaskInfo::of_all(tasks, &args.paths)?))
        }
        None => Ok(None),
    }
}

/// Prints the results table, the failures and the flagged notice on
/// stderr; the rules the exit code follows.
fn print_summary(
    args: &EvalSettings,
    attempts: &[Attempt],
    totals: &report::Totals,
    redactor: &Redactor,
) -> flagged::ExitRules {
    eprint!("{}", redactor.redact(&report::table(attempts, totals)));
    eprint!("{}", redactor.redact(&report::failures(attempts)));
    let rules = flagged::ExitRules {
        min_pass_rate: args.min_pass_rate,
        fail_on_error: args.fail_on_error,
        accept_flagged: args.accept_flagged,
    };
    if let Some(n) = flagged::notice(totals, rules) {
        eprintln!("{n}");
    }
    rules
}

/// What the checks before the suite found: the settings as one attempt
/// would build them, the backend, its runtime and the memory limit.
struct Checked {
    probe: crate::config::Config,
    backend: Arc<dyn crate::exec::backend::Backend>,
    runtime: Option<String>,
    memory_bytes: Option<i64>,
}

/// Fails fast on settings every attempt would reject: the config, the
/// egress network's name, the model (key, script) and the runtime.
async fn preflight(args: &EvalSettings, base: &ConfigBuilder) -> Result<Checked, EvalError> {
    let probe = base.build()?;
    if let Some(n) = args
        .egress_network
        .as_ref()
        .filter(|n| !crate::exec::egress::is_egress_network_name(n))
    {
        return Err(ConfigError::BadEgressNetwork(n.clone()).into());
    }
    if args.agent_kind == AgentKind::Model {
        // A missing key or an unreadable script fails the suite, not each attempt.
        crate::runtime::build_model(&probe)?;
    }
    // The runtime every sandbox of the suite uses must be registered.
    let backend = backend_for(args.backend);
    if !backend.capabilities().isolated {
        eprintln!(
            "warning: --executor {} runs every task's code, its verifier included, on this host: NOT a sandbox",
            backend.capabilities().name
        );
    }
    let runtime = backend.check_runtime(args.runtime.as_deref()).await?;
    let memory_bytes = args
        .memory
        .as_deref()
        .map(crate::config::parse_memory)
        .transpose()?;
    Ok(Checked {
        probe,
        backend,
        runtime,
        memory_bytes,
    })
}

/// The suite's absolute output directory and its manifest: a fresh one,
/// or the first run's when resuming (checked to be the same suite).
fn open_suite(
    args: &EvalSettings,
    all_names: Vec<String>,
    tasks: &[task::Task],
    redactor: &Redactor,
) -> Result<(PathBuf, manifest::SuiteManifest), EvalError> {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let fresh_id = format!("eval-{stamp}-{:04x}", fastrand::u16(..));
    let out_dir = args
        .output_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs").join(&fresh_id));
    // Absolute, so the reports' paths work from anywhere.
    let out_dir = std::path::absolute(&out_dir).map_err(|source| EvalError::Write {
        path: out_dir.clone(),
        source,
    })?;
    let (settings, secret) = manifest::verdict_settings(args);
    let fresh = manifest::SuiteManifest {
        format: manifest::MANIFEST_VERSION,
        id: fresh_id,
        fingerprint: manifest::fingerprint(&all_names, args.attempts, &settings, &secret),
        tasks: all_names,
        attempts_per_task: args.attempts,
        settings,
        shard: args.shard,
        shard_tasks: tasks.iter().map(|t| t.name.clone()).collect(),
        started_at: chrono::Local::now(),
        invocation: invocation(args, redactor),
    };
    let suite = resume::open(&out_dir, args.resume, fresh)?;
    if tasks.is_empty() {
        eprintln!(
            "note: shard {} holds none of the suite's {}",
            args.shard.map_or("-".into(), |s| s.to_string()),
            crate::plural::count_of(suite.tasks.len(), "task", "tasks")
        );
    }
    Ok((out_dir, suite))
}

/// The command line to record, its secrets redacted (a resume that needs
/// one then names it as a difference); none when not from a command
/// line or the working directory is unknown.
fn invocation(args: &EvalSettings, redactor: &Redactor) -> Option<manifest::Invocation> {
    if args.invocation.is_empty() {
        return None;
    }
    Some(manifest::Invocation {
        cwd: std::env::current_dir().ok()?,
        args: args
            .invocation
            .iter()
            .map(|a| redactor.redact(a).into_owned())
            .collect(),
    })
}

/// One redactor for the whole suite, built as a run builds its own (the
/// --env pairs are the same for every attempt), plus the tasks' own
/// credentials.
fn suite_redactor(
    probe: &crate::config::Config,
    human: &Human,
    tasks: &[task::Task],
) -> Result<Redactor, EvalError> {
    let redactor = crate::runtime::run_redactor(probe, human)?;
    // The tasks' own credentials (`[verifier].env`) reach the verifier's
    // output, its log and the reports: they are the suite's secrets too.
    // Resolved values count (`${API_KEY}` from runner's environment).
    Ok(redactor.with(
        tasks
            .iter()
            .flat_map(|t| {
                let raw = crate::redact::credential_values(&t.config.verifier.env);
                let resolved = [&t.verifier_env, &t.env, &t.solution_env]
                    .into_iter()
                    .flat_map(|pairs| {
                        crate::redact::credential_values(pairs.iter().map(|(k, v)| (k, v)))
                    });
                raw.into_iter().chain(resolved).collect::<Vec<_>>()
            })
            .collect(),
    )?)
}

/// What the suite report's `suite` object says about the run.
struct SuiteMeta<'a> {
    args: &'a EvalSettings,
    executor: &'a str,
    out_dir: &'a std::path::Path,
    runtime: &'a Option<String>,
    probe: &'a crate::config::Config,
    interrupted: bool,
    elapsed: std::time::Duration,
    suite: &'a manifest::SuiteManifest,
}

impl SuiteMeta<'_> {
    fn json(&self) -> serde_json::Value {
        let (args, probe, suite) = (self.args, self.probe, self.suite);
        serde_json::json!({
            "id": suite.id,
            "agent": args.agent_kind.as_str(),
            "executor": self.executor,
            "paths": args.paths,
            "output_dir": self.out_dir,
            "jobs": args.jobs,
            "attempts_per_task": args.attempts,
            "min_pass_rate": args.min_pass_rate,
            "accept_flagged": args.accept_flagged,
            "regrade_flagged": args.regrade_flagged,
            "allow_internet": args.allow_internet,
            "egress_network": args.egress_network,
            "grading": args.grading.map(|g| g.as_str()),
            "runtime": self.runtime,
            "seccomp": probe.sandbox.seccomp.label(),
            "seccomp_profile_sha256": probe.sandbox.seccomp.profile().map(|p| p.sha256()),
            "interrupted": self.interrupted,
            "started_at": chrono::Local::now() - chrono::Duration::from_std(self.elapsed).unwrap_or_default(),
            "first_started_at": suite.started_at,
            "fingerprint": suite.fingerprint,
            "shard": args.shard.map(|s| s.to_string()),
            "suite_tasks": suite.tasks.len(),
            "resumed": args.resume,
            "retry_errors": args.retry_errors,
            "suite_max_cost_usd": args.suite_max_cost_usd,
        })
    }
}

/// The job-level facts of Harbor's layout (`--harbor-job`).
fn harbor_meta(
    args: &EvalSettings,
    probe: &crate::config::Config,
    suite_id: &str,
    started_at: chrono::DateTime<chrono::Utc>,
    memory_bytes: Option<i64>,
) -> harbor_job::HarborJobMeta {
    harbor_job::HarborJobMeta {
        agent: args.agent_kind,
        model: (args.agent_kind == AgentKind::Model)
            .then(|| (probe.provider.as_str().to_string(), probe.model.clone())),
        suite_id: suite_id.to_string(),
        started_at,
        finished_at: chrono::Utc::now(),
        n_attempts: args.attempts,
        jobs: args.jobs,
        docker: args.backend == crate::backend_kind::BackendKind::Docker,
        cpus: args.cpus,
        memory_mb: memory_bytes.map(|b| u64::try_from(b / (1 << 20)).unwrap_or(0)),
        agent_timeout_secs: args.agent_timeout_secs,
        verifier_timeout_secs: args.verifier_timeout_secs,
    }
}

/// The configuration every attempt starts from: the suite's settings;
/// per task the image, limits, network and time are filled in.
fn base_config(args: &EvalSettings) -> ConfigBuilder {
    ConfigBuilder {
        agent: args.agent.clone(),
        sandbox: SandboxOptions {
            backend: args.backend,
            pids_limit: args.pids_limit,
            // Per attempt: the task's user and a writable root (see attempt).
            user: DEFAULT_USER.to_string(),
            writable_rootfs: !args.read_only_rootfs,
            disk: args.disk.clone(),
            runtime: args.runtime.clone(),
            seccomp: args.seccomp.clone(),
            ..SandboxOptions::default()
        },
        ..ConfigBuilder::default()
    }
}

fn write_reports(
    args: &EvalSettings,
    attempts: &[Attempt],
    tasks: &[report::TaskSummary],
    totals: &report::Totals,
    meta: serde_json::Value,
    elapsed: std::time::Duration,
    redactor: &Redactor,
) -> Result<(), EvalError> {
    let title = match meta["runtime"].as_str() {
        Some(rt) => format!("runner eval ({}, runtime {rt})", args.agent_kind.as_str()),
        None => format!("runner eval ({})", args.agent_kind.as_str()),
    };
    let files = ReportFiles {
        json: args.json.as_deref(),
        junit: args.junit.as_deref(),
        summary: args.summary.as_deref(),
        title: &title,
    };
    write_report_files(&files, attempts, tasks, totals, meta, elapsed, redactor)
}

/// Where a suite's reports go (each optional) and the Markdown's title.
pub struct ReportFiles<'a> {
    pub json: Option<&'a std::path::Path>,
    pub junit: Option<&'a std::path::Path>,
    pub summary: Option<&'a std::path::Path>,
    pub title: &'a str,
}

/// Writes the JSON, JUnit and Markdown reports, and appends the Markdown
/// to `$GITHUB_STEP_SUMMARY` when set (`runner eval` and `runner eval
/// merge` both).
pub fn write_report_files(
    files: &ReportFiles,
    attempts: &[Attempt],
    tasks: &[report::TaskSummary],
    totals: &report::Totals,
    meta: serde_json::Value,
    elapsed: std::time::Duration,
    redactor: &Redactor,
) -> Result<(), EvalError> {
    // Every report is attempted even when an earlier one fails; the first
    // failure is returned at the end.
    let mut first_err: Option<EvalError> = None;
    let mut wrote = |path: &std::path::Path, r: std::io::Result<()>| {
        if let Err(source) = r {
            let e = EvalError::Write {
                path: path.to_path_buf(),
                source,
            };
            tracing::warn!("{e}");
            first_err.get_or_insert(e);
        }
    };
    if let Some(p) = files.json {
        let v = report::json_report(attempts, tasks, totals, meta);
        let text = serde_json::to_string_pretty(&v).map_err(std::io::Error::other);
        wrote(
            p,
            text.and_then(|t| report::write(p, &redactor.redact_json(&t))),
        );
    }
    if let Some(p) = files.junit {
        let xml = report::junit(attempts, elapsed).map_err(std::io::Error::other);
        wrote(p, xml.and_then(|x| report::write(p, &redactor.redact(&x))));
    }
    let md = report::markdown(attempts, totals, files.title);
    let md = redactor.redact(&md);
    if let Some(p) = files.summary {
        wrote(p, report::write(p, &md));
    }
    if let Some(p) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        wrote(&p, report::append(&p, &md));
    }
    first_err.map_or(Ok(()), Err)
}
