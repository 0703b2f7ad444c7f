//! Grading in a fresh sandbox the agent never touched.
//!
//! Design (why a tampering agent cannot turn a fail into a pass):
//! - The verifier container is made from the task's *pristine image*, not
//!   from the agent's container: whatever the agent planted outside the
//!   workspace (a fake `python3` or `pytest` in /usr/local/bin with a
//!   writable root, `sitecustomize.py` in site-packages or ~/.local, files
//!   under /tests, /logs or /tmp) simply does not exist there.
//! - Only the workspace travels, after the agent's container is removed (so
//!   none of its processes is left to race the copy): it is tarred from the
//!   host without following links and uploaded through the archive API
//!   into an empty volume (no image files reappear, nothing is bind-mounted
//!   from a directory the agent could write).
//! - /tests and /logs are removed and recreated by runner, then tests/ is
//!   uploaded from the task directory; nothing of the agent's is there.
//! - The verifier's environment is fixed: a standard PATH (no workspace
//!   directory in it), PYTHONNOUSERSITE, PYTHONSAFEPATH (so `python3 -m
//!   pytest` run in /workspace cannot import a planted `pytest.py`), no
//!   bytecode writing; the task's `[verifier].env` is added on top.
//! - Links in the workspace that resolve into /tests or /logs (an answer
//!   file that is a link to the verifier's expected output) are removed
//!   once /tests is in place, before test.sh runs.
//! - The reward is read by runner from /logs/verifier after test.sh ends.
//!
//! - The verifier may switch users (SETUID/SETGID are its only
//!   capabilities), so a test.sh runs the agent's code unprivileged:
//!   `setpriv --reuid=1000 --regid=1000 --clear-groups CMD`; that code can
//!   then write neither /tests nor /logs, nor outlive test.sh to change the
//!   reward, and a test.sh killed by a signal is an error, never a reward.
//!
//! What remains is the task's own responsibility: agent code that test.sh
//! runs as root controls the verifier; a test.sh that collects
//! tests from the workspace (`pytest /workspace`) loads the agent's
//! `conftest.py`; tests should live in /tests (pytest's rootdir is then
//! /tests and a /workspace conftest is never loaded) and import the code
//! under test explicitly.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::{GradeError, TestRun, Verdict, run_tests};
use crate::eval::sandboxes::{self, VerifierSandbox};
use crate::exec::ExecutorExt;
use crate::exec::backend::Backend;
use crate::trajectory::RunDir;

/// Settings of one grading in a fresh sandbox.
pub struct GradeSpec<'a> {
    /// The verifier's sandbox (the task, the image, what is copied in).
    pub sandbox: VerifierSandbox<'a>,
    /// Host directories uploaded to sandbox paths before test.sh runs
    /// (separate mode's artifacts).
    pub uploads: Vec<(PathBuf, String)>,
    /// Where the verifier's sandbox comes from (the agent's backend).
    pub backend: &'a dyn Backend,
    /// The attempt's run directory: `verifier.log` and `verifier-links.log`
    /// are written there.
    pub run_dir: &'a RunDir,
    /// Whether the image carries the agent's changes (a snapshot): then a
    /// /tests or /logs runner cannot prepare is the agent's doing.
    pub agent_files_here: bool,
    /// Upload tests/ (not when the verifier's image bundles them).
    pub upload_tests: bool,
    /// Who runs test.sh (`[verifier] user`); `None`: root.
    pub verifier_user: Option<(u32, u32)>,
}

/// Runs tests/test.sh in a fresh sandbox of `spec.sandbox.image` and
/// reads the reward.
pub async fn grade(spec: GradeSpec<'_>, cancel: &CancellationToken) -> Result<Verdict, GradeError> {
    let task = spec.sandbox.task;
    let timeout = sandboxes::verifier_timeout(task);
    let sandbox = spec
        .backend
        .start(sandboxes::verifier(&spec.sandbox))
        .await?;
    let result = async {
        run_tests(
            TestRun {
                sandbox: sandbox.as_ref(),
                task,
                verifier_user: spec.verifier_user,
                control_as_root: false,
                env: Vec::new(),
                timeout,
                run_dir: spec.run_dir,
                agent_files_here: spec.agent_files_here,
                upload_tests: spec.upload_tests,
                uploads: &spec.uploads,
            },
            cancel,
        )
        .await
    }
    .await;
    let removed = sandbox.discard().await;
    let verdict = result?;
    removed?;
    Ok(verdict)
}
