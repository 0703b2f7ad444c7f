//! Runs a suite's attempts with bounded concurrency: at most `--jobs`
//! running and at most `--jobs` more setting up ahead of their turn (the
//! warm pool, [`super::slots`]), each retried
//! after an infrastructure error (`--retry-errors`), none started once the
//! suite's budget is spent (`--suite-max-cost`), and each record written
//! into its run directory as it ends (what `--resume` and `merge` read).
//! After Ctrl-C, attempts not yet started are recorded as interrupted;
//! running ones wind down and clean up.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::attempt::{self, AttemptCtx};
use super::outcome::{Attempt, EarlierTry, ErrorKind, Status};
use super::progress::Progress;
use super::resume::{self, Prior};
use super::settings::EvalSettings;
use super::slots::{Slots, Turn};
use super::task::Task;
use super::{image, manifest};
use crate::redact::Redactor;
use crate::terminal::one_cell;

/// The first retry's wait; each further one doubles it, up to
/// [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF_FIRST: Duration = Duration::from_secs(2);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// How long a retry waits for the sandbox backend to answer again, and
/// how often it asks.
const BACKEND_WAIT: Duration = Duration::from_secs(120);
const BACKEND_POLL: Duration = Duration::from_secs(1);
/// The engine's own steps of an attempt (start, snapshot, removal...),
/// bounded generously.
const ENGINE_STEPS: Duration = Duration::from_secs(600);

/// A task image build's whole output, beside the task's attempts.
pub const IMAGE_BUILD_LOG: &str = "image-build.log";

/// A task's image, resolved (built) once by its first attempt.
type ImageCell = Arc<OnceCell<(Result<String, String>, u64)>>;

/// What every attempt of the suite shares besides [`AttemptCtx`].
struct Shared {
    retry_errors: u32,
    budget_usd: Option<f64>,
    /// The suite's output directory (image build logs go to `<task>/`).
    out_dir: PathBuf,
    /// What the suite's attempts have cost so far, every try counted.
    spent_usd: std::sync::Mutex<f64>,
}

impl Shared {
    fn spend(&self, usd: f64) {
        if let Ok(mut s) = self.spent_usd.lock() {
            *s += usd;
        }
    }

    /// Why no more attempts start, once the budget is spent.
    fn over_budget(&self) -> Option<String> {
        let budget = self.budget_usd?;
        let spent = self.spent_usd.lock().map_or(0.0, |s| *s);
        (spent >= budget).then(|| {
            format!("the suite's budget (--suite-max-cost {budget}) was spent (${spent:.4}) before it started")
        })
    }
}

/// One line per finished attempt: above the bar on a terminal, plain
/// otherwise (CI logs). The task name is the suite's: made visible.
fn announce(progress: &Progress, total: usize, a: &Attempt, note: &str, redactor: &Redactor) {
    let d = progress.ended(&a.task, a.attempt);
    let line = format!(
        "[{d}/{total}] {}#{} {} reward {} in {:.1}s{note}",
        a.task,
        a.attempt,
        super::flagged::status_label(a),
        a.reward.map_or("-".into(), |r| format!("{r:.2}")),
        a.phases.total_ms as f64 / 1000.0
    );
    let line = one_cell(&redactor.redact(&line));
    progress.println(&line);
}

/// Runs every attempt of `tasks` into `out_dir/<task>/<n>`; with `resume`,
/// finished ones found there are kept instead. Sorted by task and number.
pub async fn run_all(
    ctx: &Arc<AttemptCtx>,
    tasks: Vec<Task>,
    args: &EvalSettings,
    out_dir: &Path,
    cancel: &CancellationToken,
) -> Vec<Attempt> {
    let total = tasks.len() * args.attempts as usize;
    let shared = Arc::new(Shared {
        retry_errors: args.retry_errors,
        budget_usd: args.suite_max_cost_usd,
        out_dir: out_dir.to_path_buf(),
        spent_usd: std::sync::Mutex::new(0.0),
    });
    let budget = shared.clone();
    let pool_wait = longest_attempt(ctx, &tasks, args.retry_errors);
    let slots = Slots::new(args.jobs, pool_wait, Box::new(move || budget.over_budget()));
    let mut handles = Vec::new();
    let mut results = Vec::new();
    for task in tasks {
        let task = Arc::new(task);
        let image: ImageCell = Arc::new(OnceCell::new());
        for n in 1..=args.attempts {
            let run_path = out_dir.join(&task.name).join(n.to_string());
            let earlier = if args.resume {
                match prior_tries(ctx, &shared, total, &task.name, n, &run_path) {
                    Ok(earlier) => earlier,
                    Err(kept) => {
                        results.push(*kept);
                        continue;
                    }
                }
            } else {
                Vec::new()
            };
            let Some(mut turn) = slots.place(cancel).await else {
                let a =
                    Attempt::not_run(&task.name, n, run_path, Status::Interrupted, String::new());
                results.push(with_history(a, earlier));
                continue;
            };
            let (ctx, task, image, cancel, shared) = (
                ctx.clone(),
                task.clone(),
                image.clone(),
                cancel.clone(),
                shared.clone(),
            );
            let name = task.name.clone();
            let path = run_path.clone();
            let handle = tokio::spawn(async move {
                let a = if let Some(why) = shared.over_budget() {
                    let a = Attempt::not_run(&task.name, n, run_path, Status::Skipped, why);
                    with_history(a, earlier)
                } else {
                    let tried = Try {
                        ctx: &ctx,
                        task: &task,
                        image: &image,
                        n,
                        shared: &shared,
                    };
                    tries(tried, run_path, earlier, &mut turn, &cancel).await
                };
                drop(turn);
                // A skipped attempt's record says why (merge reads it); a
                // resume runs it without counting a try.
                let a = record(a);
                announce(&ctx.progress, total, &a, "", &ctx.redactor);
                a
            });
            handles.push((name, n, path, handle));
        }
    }
    for (name, n, path, h) in handles {
        results.push(h.await.unwrap_or_else(|e| {
            Attempt::not_run(
                &name,
                n,
                path,
                Status::Error,
                format!(
                    "internal error: the attempt crashed: {e} (a bug in runner; please report it)"
                ),
            )
        }));
    }
    results.sort_by(|a, b| (a.task.as_str(), a.attempt).cmp(&(b.task.as_str(), b.attempt)));
    results
}

/// What `--resume` finds of attempt `n` of `task` at `run_path`: its
/// earlier tries to run it again, or `Err` with the attempt as it stays
/// (done in an earlier run, announced as kept; or an earlier try that
/// cannot be moved aside).
fn prior_tries(
    ctx: &AttemptCtx,
    shared: &Shared,
    total: usize,
    task: &str,
    n: u32,
    run_path: &Path,
) -> Result<Vec<EarlierTry>, Box<Attempt>> {
    match resume::prior(run_path) {
        Ok(Prior::Done(a)) => {
            shared.spend(a.cost_usd);
            let note = " (kept from an earlier run)";
            announce(&ctx.progress, total, &a, note, &ctx.redactor);
            Err(a)
        }
        Ok(Prior::Run(earlier)) => Ok(earlier),
        Err(e) => {
            let why = format!("cannot move the earlier try aside: {e}");
            let a = Attempt::not_run(task, n, run_path.to_path_buf(), Status::Error, why);
            Err(Box::new(a))
        }
    }
}

/// The longest an attempt of `tasks` can hold its running slot, every
/// try counted: how long a sandbox started ahead may wait in the pool
/// (its lifetime is extended by that much). Generous on purpose: the
/// sandbox's own expiry is only the net under a runner that hangs.
fn longest_attempt(ctx: &AttemptCtx, tasks: &[Task], retry_errors: u32) -> Duration {
    let one = tasks
        .iter()
        .map(|t| {
            let agent = ctx.agent_timeout_secs.unwrap_or(t.agent_timeout_secs);
            let verifier = ctx.verifier_timeout_secs.unwrap_or(t.verifier_timeout_secs);
            // The agent, test.sh (twice with a regrade), an image rebuilt
            // by a retry, the engine's own steps.
            agent + 2.0 * verifier + t.build_timeout_secs + ENGINE_STEPS.as_secs_f64()
        })
        .fold(0.0_f64, f64::max);
    let tries = f64::from(retry_errors.saturating_add(1));
    let backoff = (RETRY_BACKOFF_MAX + BACKEND_WAIT).as_secs_f64() * f64::from(retry_errors);
    Duration::try_from_secs_f64(one * tries + backoff).unwrap_or(Duration::MAX)
}

/// What one attempt's tries share.
struct Try<'a> {
    ctx: &'a AttemptCtx,
    task: &'a Task,
    image: &'a ImageCell,
    n: u32,
    shared: &'a Shared,
}

/// One attempt, tried again after an infrastructure error while tries
/// are left; the last try's record, with the earlier ones listed.
async fn tries(
    t: Try<'_>,
    run_path: PathBuf,
    mut earlier: Vec<EarlierTry>,
    turn: &mut Turn,
    cancel: &CancellationToken,
) -> Attempt {
    let Try {
        ctx,
        task,
        image,
        n,
        shared,
    } = t;
    let mut retries = 0u32;
    loop {
        let log = shared.out_dir.join(&task.name).join(IMAGE_BUILD_LOG);
        ctx.progress.phase(&task.name, n, "image");
        let (img, img_ms) = resolve_image(ctx, task, image, &log, retries > 0, cancel).await;
        let a = attempt::run(ctx, task, (img, img_ms), n, run_path.clone(), turn, cancel).await;
        let a = if cancel.is_cancelled() && a.status == Status::Error {
            Attempt {
                status: Status::Interrupted,
                error_kind: None,
                ..a
            }
        } else {
            a
        };
        // Its errors may quote a command's output or a reward file: every
        // record and report is made from the redacted one.
        let a = a.redacted(&ctx.redactor);
        shared.spend(a.cost_usd);
        let infra = a.status == Status::Error && a.error_kind == Some(ErrorKind::Infrastructure);
        if !infra || retries >= shared.retry_errors || cancel.is_cancelled() {
            return with_history(a, earlier);
        }
        // Kept as it is, in its own directory, before the next try (one
        // that failed before its run directory existed gets one for its
        // record).
        let kept = std::fs::create_dir_all(&run_path).and_then(|()| resume::move_aside(&run_path));
        let kept = match kept {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("cannot keep the try that failed; not retrying: {e}");
                return with_history(a, earlier);
            }
        };
        // Unwritten, the kept try's record is only missing from its
        // directory: the attempt's own record says it was tried.
        let _ = manifest::write_attempt(&moved(a.clone(), &run_path, &kept));
        let why = a.error.clone().unwrap_or_default();
        earlier.push(EarlierTry {
            run_dir: kept,
            status: Status::Error,
            error: a.error,
        });
        let wait = RETRY_BACKOFF_FIRST
            .saturating_mul(1 << retries.min(16))
            .min(RETRY_BACKOFF_MAX);
        retries += 1;
        let line = format!(
            "retrying {}#{n} in {}s (try {} of {}): {}",
            task.name,
            wait.as_secs(),
            retries + 1,
            shared.retry_errors + 1,
            why.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        let line = one_cell(&ctx.redactor.redact(&line));
        ctx.progress.println(&line);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => {}
        }
        until_backend_answers(ctx, &format!("{}#{n}", task.name), cancel).await;
    }
}

/// Waits, up to [`BACKEND_WAIT`], until the sandbox backend answers (an
/// engine restarting or reached over a cut connection), so that a retry
/// is not spent on an engine that is not there yet; the retry runs
/// either way.
async fn until_backend_answers(ctx: &AttemptCtx, attempt: &str, cancel: &CancellationToken) {
    let start = Instant::now();
    let mut told = false;
    while !cancel.is_cancelled() && !ctx.backend.answers().await {
        if start.elapsed() >= BACKEND_WAIT {
            return;
        }
        if !told {
            told = true;
            ctx.progress.println(&format!(
                "the sandbox backend does not answer; {attempt} waits up to {}s for it before its retry",
                BACKEND_WAIT.as_secs()
            ));
        }
        tokio::select! {
            _ = tokio::time::sleep(BACKEND_POLL) => {}
            _ = cancel.cancelled() => {}
        }
    }
}

/// The task's image: built once for all its attempts; a retry after a
/// failed build tries again rather than repeat the failure.
async fn resolve_image(
    ctx: &AttemptCtx,
    task: &Task,
    cell: &ImageCell,
    log: &Path,
    retry: bool,
    cancel: &CancellationToken,
) -> (Result<String, String>, u64) {
    let once = || async {
        let t = Instant::now();
        let r = tokio::select! {
            r = image::resolve(task, ctx.backend.as_ref(), Some(log)) => r.map_err(|e| format!("image: {e}")),
            _ = cancel.cancelled() => Err("interrupted while preparing the image".into()),
        };
        (r, crate::convert::millis_u64(t.elapsed()))
    };
    let first = cell.get_or_init(once).await.clone();
    if retry && first.0.is_err() {
        return once().await;
    }
    first
}

/// The record of a try whose directory went from `from` to `to`.
fn moved(mut a: Attempt, from: &Path, to: &Path) -> Attempt {
    let rebase = |p: &mut Option<PathBuf>| {
        if let Some(rest) = p.as_ref().and_then(|p| p.strip_prefix(from).ok()) {
            *p = Some(to.join(rest));
        }
    };
    rebase(&mut a.trajectory);
    rebase(&mut a.verifier_log);
    a.run_dir = to.to_path_buf();
    a
}

fn with_history(mut a: Attempt, earlier: Vec<EarlierTry>) -> Attempt {
    a.tries = crate::convert::u32_from_usize(earlier.len()).saturating_add(1);
    a.earlier_tries = earlier;
    a
}

/// Writes the attempt's record into its run directory. One that cannot
/// be written (a full disk) leaves the attempt without a record on disk:
/// it becomes an infrastructure error in this run's report (the suite
/// fails, never a verdict the directory does not hold), and a resume runs
/// it again.
fn record(a: Attempt) -> Attempt {
    match manifest::write_attempt(&a) {
        Ok(()) => a,
        Err(e) => {
            tracing::warn!("{e}");
            Attempt {
                status: Status::Error,
                pass: false,
                reward: None,
                error_kind: Some(ErrorKind::Infrastructure),
                error: Some(format!("{e} (its verdict was {})", a.status.as_str())),
                ..a
            }
        }
    }
}
