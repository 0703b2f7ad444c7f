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

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{GradeError, TestRun, VERIFIER_PATH, Verdict, run_tests};
use crate::eval::task::Task;
use crate::exec::ExecutorExt;
use crate::exec::backend::{Backend, Network, SandboxSpec, Services, WorkspaceMode, WorkspaceSpec};
use crate::redact::Redactor;
use crate::trajectory::RunDir;

/// Settings of one grading in a fresh sandbox.
pub struct GradeSpec<'a> {
    pub task: &'a Task,
    /// The pristine image (isolated), the agent's snapshot (snapshot) or
    /// the verifier's image (separate).
    pub image: &'a str,
    /// The agent's final workspace on the host, copied in at `workdir`;
    /// `None`: none (separate mode hands over artifacts instead).
    pub workspace: Option<&'a Path>,
    /// Where it goes in the container (the agent's working directory).
    pub workdir: &'a str,
    /// Host directories uploaded to sandbox paths before test.sh runs
    /// (separate mode's artifacts).
    pub uploads: Vec<(PathBuf, String)>,
    /// The verifier's network (and its allowlist).
    pub network: crate::eval::attempt::PhaseNetwork,
    /// `--egress-network`, for an allowlisted verifier.
    pub egress_network: Option<String>,
    /// Where the verifier's sandbox comes from (the agent's backend).
    pub backend: &'a dyn Backend,
    /// The container runtime, as for the agent's sandbox.
    pub runtime: Option<String>,
    /// The system-call filter, as for the agent's sandbox.
    pub seccomp: crate::exec::seccomp::Seccomp,
    pub run_id: String,
    /// The attempt's run directory: `verifier.log` and `verifier-links.log`
    /// are written there.
    pub run_dir: &'a RunDir,
    /// Secrets kept out of verifier.log and the verifier's messages.
    pub redactor: &'a Redactor,
    /// Whether the image carries the agent's changes (a snapshot): then a
    /// /tests or /logs runner cannot prepare is the agent's doing.
    pub agent_files_here: bool,
    /// Upload tests/ (not when the verifier's image bundles them).
    pub upload_tests: bool,
    /// Who runs test.sh (`[verifier] user`); `None`: root.
    pub verifier_user: Option<(u32, u32)>,
    /// The task's sidecars, still running: the verifier joins their network.
    pub services: Option<&'a dyn Services>,
    /// The fixed, hardened environment below (isolated, snapshot); else
    /// Harbor's separate verifier's: the image's own with `[environment]
    /// env`, HOME from passwd, then `[verifier] env`.
    pub hardened: bool,
    /// The verifier user's HOME (from the image's passwd).
    pub verifier_home: &'a str,
}

/// Runs tests/test.sh in a fresh sandbox of `spec.image` and reads the
/// reward.
pub async fn grade(spec: GradeSpec<'_>, cancel: &CancellationToken) -> Result<Verdict, GradeError> {
    let task = spec.task;
    let mut env: Vec<(String, String)> = if !spec.hardened {
        let mut env = vec![("HOME".to_string(), spec.verifier_home.to_string())];
        env.extend(task.env.iter().cloned());
        env
    } else {
        [
            ("PATH", VERIFIER_PATH),
            ("HOME", "/root"),
            ("LANG", "C.UTF-8"),
            ("PYTHONNOUSERSITE", "1"),
            ("PYTHONSAFEPATH", "1"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    for (k, v) in &task.verifier_env {
        env.retain(|(e, _)| e != k);
        env.push((k.clone(), v.clone()));
    }
    let timeout = Duration::from_secs_f64(task.verifier_timeout_secs);
    let mut sandbox_spec = SandboxSpec {
        cpus: task.cpus,
        memory_bytes: task.memory_bytes,
        network: spec.network.network,
        allowed_hosts: spec.network.allowed_hosts.clone(),
        egress_network: spec
            .egress_network
            .clone()
            .filter(|_| spec.network.network == Network::Allowlist),
        user: "0:0".into(),
        // A fresh sandbox: writable so /tests and /logs can be made;
        // capabilities stay dropped.
        writable_rootfs: true,
        workspace: spec.workspace.map(|w| WorkspaceSpec {
            host: w.to_path_buf(),
            mode: WorkspaceMode::Copy,
            exact: true,
        }),
        workdir: Some(spec.workdir.to_string()),
        // No capabilities for runner's own commands: test.sh alone may
        // switch users (see `execute_final`), so it can run the agent's
        // code unprivileged (`setpriv --reuid=1000 ...`), which then
        // cannot touch /tests or /logs.
        switch_user: false,
        env: env.clone(),
        redactor: spec.redactor.clone(),
        max_run_time: timeout + Duration::from_secs(300),
        runtime: spec.runtime.clone(),
        seccomp: spec.seccomp.clone(),
        ..SandboxSpec::new(spec.image, &spec.run_id)
    };
    if let Some(s) = spec.services {
        sandbox_spec.join_services(s);
    }
    let sandbox = spec.backend.start(sandbox_spec).await?;
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
