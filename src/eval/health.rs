//! `[environment.healthcheck]`: the task's readiness check, run in the
//! agent's sandbox after it starts and before the agent does, with
//! Docker's HEALTHCHECK semantics as Harbor applies them: one success
//! ends it; failures during the start period do not count; after it,
//! `retries` consecutive failures fail the attempt (an error of the
//! task's environment, before the agent ran).

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::task::Healthcheck;
use crate::exec::{ExecError, ExecRequest, Executor};

/// Why the sandbox never became healthy.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("the healthcheck `{command}` failed {} in a row (last: {last})", crate::plural::count(*.retries, "time", "times"))]
    Unhealthy {
        command: String,
        retries: u32,
        last: String,
    },
    #[error("running the healthcheck: {0}")]
    Sandbox(#[from] ExecError),
    #[error("interrupted")]
    Interrupted,
}

/// Runs `hc` until it passes or fails for good.
pub async fn wait_healthy(
    sandbox: &dyn Executor,
    hc: &Healthcheck,
    cancel: &CancellationToken,
) -> Result<(), HealthError> {
    let start_period_end = Instant::now() + hc.start_period;
    let mut failures = 0u32;
    loop {
        let in_start_period = Instant::now() < start_period_end;
        let out = sandbox
            .execute(ExecRequest {
                command: hc.command.clone(),
                timeout: hc.timeout,
                max_output_bytes: 2000,
                full_output: None,
                cancel: cancel.clone(),
            })
            .await?;
        if out.cancelled {
            return Err(HealthError::Interrupted);
        }
        if out.exit_code == Some(0) {
            return Ok(());
        }
        let last = if out.timed_out {
            format!("timed out after {}s", hc.timeout.as_secs_f64())
        } else {
            match out.exit_code {
                Some(c) => format!("exit {c}"),
                None => "killed".to_string(),
            }
        };
        let pause = if in_start_period {
            hc.start_interval
        } else {
            failures += 1;
            if failures >= hc.retries.max(1) {
                return Err(HealthError::Unhealthy {
                    command: hc.command.clone(),
                    retries: hc.retries.max(1),
                    last,
                });
            }
            hc.interval
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = cancel.cancelled() => return Err(HealthError::Interrupted),
        }
    }
}
