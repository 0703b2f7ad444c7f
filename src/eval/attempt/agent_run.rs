//! The agent phase: the model loop, the oracle or nop, under the task's
//! agent timeout.

use super::*;

/// Runs what plays the agent under the task's agent timeout; how it
/// ended, and whether the timeout stopped it.
pub(super) async fn agent(
    ctx: &AttemptCtx,
    p: &Prepared<'_>,
    cancel: &CancellationToken,
) -> (AgentEnd, bool) {
    let agent_cancel = cancel.child_token();
    let timeout = Duration::from_secs_f64(p.task.agent_timeout_secs);
    // A bug that panics in the agent phase (oracle included) is this
    // attempt's error: its sandbox is still removed and its trajectory
    // still ends with run_finished.
    let phase = AssertUnwindSafe(agent_phase(ctx, p, &agent_cancel))
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

/// Runs what plays the agent in the attempt's run; returns how it ended.
pub(super) async fn agent_phase(
    ctx: &AttemptCtx,
    p: &Prepared<'_>,
    cancel: &CancellationToken,
) -> AgentEnd {
    let (config, task) = (p.config, &p.task);
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
            let instruction = task.instruction.clone();
            let (end, convo) = p.run.run_task(model.as_ref(), instruction, cancel).await;
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
                crate::eval::oracle::SOLUTION_DIR
            } else {
                crate::eval::oracle::SOLUTION_DIR_READ_ONLY_ROOT
            };
            let executor = p.executor.clone();
            let solved =
                crate::eval::oracle::run(task, executor, dest, p.run_dir(), timeout, cancel);
            match solved.await {
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
                Err(e @ crate::eval::oracle::OracleError::Stopped) => ended(
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
