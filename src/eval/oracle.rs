//! `--agent oracle`: the task's reference solution plays the agent.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::task::Task;
use crate::exec::ExecutorExt;
use crate::exec::{ExecError, ExecRequest, Executor};
use crate::trajectory::RunDir;

/// Why the solution could not be run: never the solution's own failure
/// (that is [`Solved::exit_code`]), so an infrastructure error.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error("{0}: solution/solve.sh is missing")]
    Missing(std::path::PathBuf),
    #[error("sending solution/ into the sandbox: {0}")]
    Upload(ExecError),
    #[error("running solution/solve.sh: {0}")]
    Run(ExecError),
    #[error("solution/solve.sh was stopped")]
    Stopped,
}

/// How solve.sh ended.
#[derive(Debug, Clone)]
pub struct Solved {
    pub exit_code: i32,
    pub output: String,
}

/// Where solution/ goes in the sandbox, as in Harbor; not the workspace,
/// which must not get the solution's files.
pub const SOLUTION_DIR: &str = "/solution";
/// Where it goes when the root filesystem is read-only (`--read-only-rootfs`).
pub const SOLUTION_DIR_READ_ONLY_ROOT: &str = "/tmp/runner-solution";

/// Sends solution/ into the sandbox (at `dest`) through its files API and
/// runs solve.sh in the working directory with `[solution] env`.
pub async fn run(
    task: &Task,
    executor: Arc<dyn Executor>,
    dest: &str,
    run_dir: &RunDir,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Solved, OracleError> {
    let dir = task.solution_dir();
    if !dir.join("solve.sh").is_file() {
        return Err(OracleError::Missing(task.dir.clone()));
    }
    let solution = executor.path(dest);
    executor
        .upload_dir_as_root(&dir, &solution)
        .await
        .map_err(OracleError::Upload)?;
    let quote = super::grade::quote;
    let exports = super::grade::exports(&task.solution_env);
    let out = executor
        .execute(ExecRequest {
            command: format!(
                "{exports}cd {} && exec bash {}/solve.sh",
                quote(&executor.workdir()),
                quote(&solution)
            ),
            timeout,
            max_output_bytes: 4000,
            full_output: Some(run_dir.outputs().file("oracle.log")),
            cancel: cancel.clone(),
        })
        .await
        .map_err(OracleError::Run)?;
    if out.cancelled || out.timed_out {
        return Err(OracleError::Stopped);
    }
    Ok(Solved {
        exit_code: out.exit_code.unwrap_or(-1),
        output: out.output,
    })
}
