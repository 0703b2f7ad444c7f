//! One run's life, owned in one place for every front end (`runner
//! TASK`, the REPL, `runner continue`, an eval attempt): [`Run::open`]
//! makes or reopens the run directory and readies the workspace (an
//! attempt brings its own, [`Run::attempt`]); [`Run::start`] starts the
//! sandbox and records the run's header once (`run_started`, or a
//! `continuation`), even when the sandbox did not start; [`Started::drive`]
//! runs the loop on a [`TaskSource`] and shuts the sandbox down;
//! [`Ended::finish`] records `run_finished` and says where things are. An
//! attempt's sandbox outlives its agent instead, to be graded:
//! [`Started::live`] hands it back with the run around it ([`Live`]).
//! Front ends choose the task source and render; they never start a
//! backend or build a header themselves.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::{Enforced, EvalPart, RunError, RunHeader, Session, StartedConfig};
use crate::agent::{Conversation, RunEnd};
use crate::backend_kind::BackendKind;
use crate::config::Config;
use crate::event::{Event, Outcome};
use crate::exec::ExecutorExt;
use crate::exec::backend::{Backend, SandboxSpec};
use crate::exec::{ExecError, Executor};
use crate::model::Model;
use crate::redact::Redactor;
use crate::render::{Human, json_line};
use crate::run_end;
use crate::trajectory::RunDir;
use crate::workspace::Workspace;

/// How the run directory is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// A new run: the directory must not hold one.
    Create,
    /// `runner continue`: the run's own directory, appended to.
    Reopen,
}

/// How the run begins, which decides the event its header goes in.
pub enum Beginning {
    /// A new run: `run_started`.
    Fresh,
    /// A continuation of a recorded run: `continuation`.
    Continued {
        message: String,
        replayed_messages: usize,
        replayed_steps: u32,
        previous_outcome: Option<Outcome>,
        /// The run's own (a later continuation's hint depends on it).
        scratch_workspace: Option<bool>,
    },
    /// An eval attempt: `run_started` with the attempt's part beside the
    /// header, which holds the settings and what the engine enforced (the
    /// attempt's report says the rest).
    Attempt(EvalPart),
}

/// Where the loop's user turns come from.
pub enum TaskSource {
    /// One task.
    Once(String),
    /// A conversation on the terminal.
    Repl,
    /// The next turn of a rebuilt conversation.
    Continue(String),
}

/// Hears a run's events after its trajectory.
pub type Watch<'a> = Box<dyn Fn(&Event) + Send + Sync + 'a>;

/// What an eval attempt brings to its run ([`Run::attempt`]).
pub struct AttemptSandbox<'a> {
    /// The suite's backend.
    pub backend: Arc<dyn Backend>,
    /// The agent's sandbox as the task has it.
    pub spec: SandboxSpec,
    /// Hears each event after the trajectory (the suite's progress): an
    /// attempt's run prints nothing.
    pub watch: Watch<'a>,
}

/// A run whose directory and workspace are ready.
pub struct Run<'a> {
    config: &'a Config,
    human: &'a Human,
    run_id: String,
    run_dir: RunDir,
    redactor: Redactor,
    workspace: Workspace,
    open: Open,
    started: Instant,
    /// An attempt's own backend and spec, until the sandbox starts;
    /// `None`: the configuration's.
    given: Option<(Arc<dyn Backend>, SandboxSpec)>,
    /// An attempt's watcher; `None`: the person hears the events.
    watch: Option<Watch<'a>>,
}

/// A run whose sandbox was started (or failed to start) and recorded.
pub struct Started<'a> {
    run: Run<'a>,
    built: Result<Arc<dyn Executor>, ExecError>,
}

/// A run whose sandbox is running and stays so until its holder shuts it
/// down: an eval attempt's, from its agent phase through its grading.
pub struct Live<'a> {
    run: Run<'a>,
    executor: Arc<dyn Executor>,
}

/// A run whose loop ended and whose sandbox is shut down.
pub struct Ended<'a> {
    run: Run<'a>,
    end: RunEnd,
    convo: Conversation,
    start_failed: Option<RunError>,
}

impl<'a> Run<'a> {
    /// Opens the run directory `path` of the run `run_id` as `open` says,
    /// and readies `config`'s workspace (a scratch one when it has none).
    pub fn open(
        config: &'a Config,
        human: &'a Human,
        open: Open,
        run_id: String,
        path: &Path,
    ) -> Result<Run<'a>, RunError> {
        let redactor = super::run_redactor(config, human)?;
        let budget = config.sandbox.disk_bytes.unwrap_or(u64::MAX);
        let run_dir = match open {
            Open::Create => RunDir::create(path, redactor.clone(), budget)?,
            Open::Reopen => RunDir::reopen(path, redactor.clone(), budget)?,
        };
        let given = config.workspace.as_deref();
        let workspace = Workspace::prepare(given).map_err(|source| RunError::Workspace {
            path: given.map(Path::to_path_buf),
            source,
        })?;
        Ok(Run {
            config,
            human,
            run_id,
            run_dir,
            redactor,
            workspace,
            open,
            started: Instant::now(),
            given: None,
            watch: None,
        })
    }

    /// An eval attempt's run `run_id`, in the run directory and workspace
    /// the attempt made, on the sandbox `sandbox` specifies for `config`.
    pub fn attempt(
        config: &'a Config,
        human: &'a Human,
        run_id: String,
        run_dir: RunDir,
        workspace: Workspace,
        sandbox: AttemptSandbox<'a>,
    ) -> Run<'a> {
        Run {
            config,
            human,
            run_id,
            run_dir,
            redactor: sandbox.spec.redactor.clone(),
            workspace,
            open: Open::Create,
            started: Instant::now(),
            given: Some((sandbox.backend, sandbox.spec)),
            watch: Some(sandbox.watch),
        }
    }

    /// To the trajectory and `--json`, not the human rendering.
    fn record(&self, ev: &Event) {
        self.run_dir.record(ev);
        if self.config.json {
            json_line(ev, &self.redactor);
        }
    }

    /// Everywhere: an attempt's watcher, else the person.
    fn sink(&self, ev: &Event) {
        self.record(ev);
        match &self.watch {
            Some(watch) => watch(ev),
            None => self.human.render(ev),
        }
    }

    /// Starts the sandbox first, so the header records what the engine
    /// actually enforces on it and every loosening it had to make; a start
    /// failure still gets its header.
    pub async fn start(mut self, beginning: Beginning) -> Started<'a> {
        let config = self.config;
        let (backend, spec) = self.given.take().unwrap_or_else(|| {
            let spec = super::sandbox_spec(config, &self.workspace, &self.run_id, &self.redactor);
            (super::backend(config), spec)
        });
        let built = backend.start(spec.clone()).await;
        let mut header = RunHeader::of(config);
        header.sandbox_security =
            Enforced::of(built.as_ref().ok().and_then(|x| x.sandbox_security()));
        let event = match beginning {
            // Its report says the attempt's loosenings; its workspace is
            // its own and gone after grading.
            Beginning::Attempt(eval) => {
                let run = Some(header);
                let event = started(&self.run_id, StartedConfig::Eval { eval, run });
                self.run_dir.record(&event);
                return Started { run: self, built };
            }
            Beginning::Fresh => {
                self.observe(&mut header, backend.as_ref(), &spec, &built);
                header.scratch_workspace = Some(self.workspace.is_scratch());
                started(&self.run_id, StartedConfig::Run(header))
            }
            Beginning::Continued {
                message,
                replayed_messages,
                replayed_steps,
                previous_outcome,
                scratch_workspace,
            } => {
                self.observe(&mut header, backend.as_ref(), &spec, &built);
                header.scratch_workspace = scratch_workspace;
                Event::Continuation {
                    message,
                    replayed_messages,
                    replayed_steps,
                    previous_outcome,
                    config: header.to_value(),
                }
            }
        };
        self.sink(&event);
        if config.executor == BackendKind::Local {
            self.human
                .say("warning: --executor local runs commands on this host, not in a sandbox");
        }
        Started { run: self, built }
    }

    /// Adds to the header of the person's run what it observed: every
    /// loosening an isolated sandbox had to make (each said), and where
    /// its workspace is (what `runner continue` needs to find its files).
    fn observe(
        &self,
        header: &mut RunHeader,
        backend: &dyn Backend,
        spec: &SandboxSpec,
        built: &Result<Arc<dyn Executor>, ExecError>,
    ) {
        if backend.capabilities().isolated {
            let loosenings = match built {
                Ok(x) => x.loosenings(),
                Err(_) => backend.loosenings(spec),
            };
            for l in &loosenings {
                self.human.say(&format!("warning: sandbox loosened: {l}"));
            }
            header.loosenings = Some(loosenings);
        }
        header.workspace = Some(self.workspace.path().to_path_buf());
    }
}

/// How a run ends whose record is incomplete (`why`: the trajectory
/// stopped recording, or an output file could not be written whole): an
/// error whatever the loop did.
fn lost_record(why: String, run_dir: &RunDir) -> RunEnd {
    RunEnd {
        outcome: Outcome::Error,
        error: Some(format!("the run's record is incomplete: {why}")),
        final_text: None,
        hint: Some(format!(
            "free space where {} is, then `runner continue {}` goes on from the last recorded event",
            run_dir.path().display(),
            run_dir.path().display()
        )),
    }
}

/// The `run_started` of the run `run_id` with its header `config`.
fn started(run_id: &str, config: StartedConfig) -> Event {
    Event::RunStarted {
        run_id: run_id.to_string(),
        format_version: crate::event::TRAJECTORY_FORMAT_VERSION,
        config,
    }
}

/// Records in `run_dir` the `run_started` of the eval attempt `run_id`
/// that ended before its sandbox could start: its part, and the header of
/// its configuration when it got that far.
pub fn record_unstarted(run_dir: &RunDir, run_id: &str, eval: EvalPart, config: Option<&Config>) {
    let run = config.map(RunHeader::of);
    run_dir.record(&started(run_id, StartedConfig::Eval { eval, run }));
}

impl<'a> Started<'a> {
    /// The running sandbox of an eval attempt, with the run around it, or
    /// why it did not start (its header is recorded either way).
    pub fn live(self) -> Result<Live<'a>, ExecError> {
        let Started { run, built } = self;
        built.map(|executor| Live { run, executor })
    }

    /// Runs the loop over `model` on `convo` with the turns of `source`
    /// until it ends or `cancel` (Ctrl-C) stops it, then shuts the
    /// sandbox down.
    pub async fn drive(
        self,
        model: &dyn Model,
        mut convo: Conversation,
        source: TaskSource,
        cancel: &CancellationToken,
    ) -> Ended<'a> {
        let Started { run, built } = self;
        let (end, start_failed) = match built {
            Ok(executor) => {
                let end = run
                    .converse(model, executor.clone(), &mut convo, source, cancel)
                    .await;
                let end = run_end::shut_down(executor.as_ref(), end, run.human).await;
                (end, None)
            }
            // The sandbox could not even start (Docker down, no image...).
            Err(e) => (run_end::not_started(&e), Some(RunError::Exec(e))),
        };
        Ended {
            run,
            end,
            convo,
            start_failed,
        }
    }
}

impl Live<'_> {
    /// The running sandbox.
    pub fn executor(&self) -> &Arc<dyn Executor> {
        &self.executor
    }

    /// The run directory, for what the attempt writes beside the
    /// trajectory (the solution's output, verifier.log).
    pub fn run_dir(&self) -> &RunDir {
        &self.run.run_dir
    }

    /// The workspace, as the sandbox left it on the host.
    pub fn workspace(&self) -> &Workspace {
        &self.run.workspace
    }

    /// Runs the loop over `model` once on `task` and leaves the sandbox
    /// running: how the loop ended, and the conversation's totals.
    pub async fn run_task(
        &self,
        model: &dyn Model,
        task: String,
        cancel: &CancellationToken,
    ) -> (RunEnd, Conversation) {
        let mut convo = Conversation::default();
        let source = TaskSource::Once(task);
        let executor = self.executor.clone();
        let end = (self.run)
            .converse(model, executor, &mut convo, source, cancel)
            .await;
        (end, convo)
    }

    /// Records `run_finished` of what played the agent, which ended with
    /// `end` after `duration_ms`; the sandbox stays for grading.
    pub fn record_finished(&self, end: &RunEnd, convo: &Conversation, duration_ms: u64) {
        self.run.record(&run_end::finished(end, convo, duration_ms));
    }
}

impl Run<'_> {
    /// Runs the turns of `source` in the started sandbox.
    async fn converse(
        &self,
        model: &dyn Model,
        executor: Arc<dyn Executor>,
        convo: &mut Conversation,
        source: TaskSource,
        cancel: &CancellationToken,
    ) -> RunEnd {
        let human = self.human;
        let warn = |w: &str| human.say(w);
        let approver = crate::approve::Approver::new(
            self.config.approve,
            &executor.workdir(),
            human.redactor(),
        );
        let outputs = Some(self.run_dir.outputs().clone());
        let session = Session::new(self.config, executor, outputs, &warn);
        let mut agent = session.agent(model);
        agent.approver = approver.as_ref();
        let sink = |ev: &Event| self.sink(ev);
        match source {
            TaskSource::Once(text) | TaskSource::Continue(text) => {
                super::session::run_turn(&agent, convo, text, &sink, cancel).await
            }
            TaskSource::Repl => {
                let turns = super::repl::converse(&agent, convo, &sink, cancel, human);
                Session::guarded(turns).await
            }
        }
    }
}

impl Ended<'_> {
    /// Records `run_finished` with this part's own totals (a
    /// continuation's limits counted only its own steps), says where the
    /// workspace and the trajectory are, and gives the exit code.
    pub fn finish(self) -> u8 {
        let Ended {
            run,
            mut end,
            convo,
            start_failed,
        } = self;
        if let Some(why) = run.run_dir.lost() {
            end = lost_record(why, &run.run_dir);
        }
        let duration_ms = crate::convert::millis_u64(run.started.elapsed());
        let finished = run_end::finished(&end, &convo, duration_ms);
        // A continuation's workspace always stays; a scratch workspace no
        // command ever saw is not worth keeping.
        let keep = run.open == Open::Reopen
            || run.config.keep_workspace
            || (end.outcome != Outcome::Completed && start_failed.is_none());
        let failure = start_failed.map(crate::hints::Failure::from);
        let record = |ev: &Event| run.record(ev);
        let sink = |ev: &Event| run.sink(ev);
        run_end::finish(&finished, &end, failure, &record, &sink, run.human);
        let Run {
            workspace,
            run_dir,
            human,
            ..
        } = run;
        run_end::say_where(workspace.finish(keep), &run_dir, human);
        end.outcome.exit_code()
    }
}
