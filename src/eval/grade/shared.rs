//! `shared` grading, Harbor's default: test.sh runs in the agent's own
//! sandbox once the agent phase is over, with everything the agent left
//! there (files anywhere on the root filesystem, services it started).
//!
//! The agent's processes are still running while test.sh runs, as in
//! Harbor, and what the agent changed is what test.sh sees: the attempt's
//! tamper signals ([`crate::eval::evidence`]) list what it changed on the
//! verifier's path and what it left running. Runner's own steps run as
//! root (the sandbox's user may be another); test.sh runs as the
//! verifier's user; every process is killed before the reward is read.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{GradeError, TestRun, Verdict, run_tests};
use crate::eval::task::Task;
use crate::exec::Executor;
use crate::trajectory::RunDir;

/// Grades in `sandbox`, the agent's, whose commands run as `agent_user`.
pub async fn grade(
    sandbox: &dyn Executor,
    task: &Task,
    agent_user: (u32, u32),
    verifier_user: (u32, u32),
    verifier_home: &str,
    run_dir: &RunDir,
    cancel: &CancellationToken,
) -> Result<Verdict, GradeError> {
    let mut env = vec![("HOME".to_string(), verifier_home.to_string())];
    for (k, v) in &task.verifier_env {
        env.retain(|(e, _)| e != k);
        env.push((k.clone(), v.clone()));
    }
    run_tests(
        TestRun {
            sandbox,
            task,
            // A fresh command whoever it runs as: no persistent-shell state.
            verifier_user: Some(verifier_user),
            control_as_root: agent_user != super::ROOT,
            env,
            timeout: Duration::from_secs_f64(task.verifier_timeout_secs),
            run_dir,
            agent_files_here: true,
            upload_tests: true,
            uploads: &[],
        },
        cancel,
    )
    .await
}
