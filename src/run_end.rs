//! How a run ends, for a run, the REPL, a continuation and an eval
//! attempt: the sandbox shut down after the loop, the end of a sandbox
//! that never started, the `run_finished` event and what the person is
//! told last.

use std::path::PathBuf;

use crate::agent::{Conversation, RunEnd};
use crate::event::{Event, Outcome};
use crate::exec::ExecutorExt;
use crate::exec::{ExecError, Executor};
use crate::hints::Failure;
use crate::render::Human;
use crate::trajectory::RunDir;

/// Shuts the sandbox down after the loop ended with `end`. A completed
/// run whose sandbox could not be ended is an error (in copy mode its work
/// may not have come back): never reported as a success.
pub async fn shut_down(executor: &dyn Executor, end: RunEnd, human: &Human) -> RunEnd {
    match executor.shutdown().await {
        Ok(()) => end,
        Err(e) if end.outcome == Outcome::Completed => RunEnd {
            outcome: Outcome::Error,
            error: Some(format!("ending the sandbox failed: {e}")),
            final_text: end.final_text,
            hint: None,
        },
        Err(e) => {
            human.say(&format!("warning: ending the sandbox failed: {e}"));
            end
        }
    }
}

/// The end of a run whose sandbox never started.
pub fn not_started(e: &ExecError) -> RunEnd {
    RunEnd {
        outcome: Outcome::Error,
        error: Some(e.to_string()),
        final_text: None,
        hint: None,
    }
}

/// The `run_finished` of a loop that ended with `end` on `convo` after
/// `duration_ms`: this part's own totals (a continuation's limits counted
/// only its own steps).
pub fn finished(end: &RunEnd, convo: &Conversation, duration_ms: u64) -> Event {
    Event::RunFinished {
        outcome: end.outcome,
        steps: convo.steps.saturating_sub(convo.replayed_steps),
        usage: convo.usage,
        cost_usd: convo.cost_usd,
        duration_ms,
        error: end.error.clone(),
        final_text: end.final_text.clone(),
    }
}

/// Writes `finished`. After a sandbox that never started (`start_failed`)
/// it goes to the trajectory only (`record`) and the person gets one
/// `error:` line and its `hint:`, like any other infrastructure error;
/// otherwise it goes everywhere (`sink`), followed by the end's hint.
pub fn finish(
    finished: &Event,
    end: &RunEnd,
    start_failed: Option<Failure>,
    record: &dyn Fn(&Event),
    sink: &dyn Fn(&Event),
    human: &Human,
) {
    match start_failed {
        Some(failure) => {
            record(finished);
            failure.print();
        }
        None => {
            sink(finished);
            if let Some(h) = &end.hint {
                human.say(&format!("hint: {h}"));
            }
        }
    }
}

/// The last lines: where the workspace (when kept) and the trajectory are.
pub fn say_where(workspace: Option<PathBuf>, run_dir: &RunDir, human: &Human) {
    if let Some(p) = workspace {
        human.say(&format!("workspace: {}", p.display()));
    }
    human.say(&format!(
        "trajectory: {}",
        run_dir.trajectory_path().display()
    ));
}
