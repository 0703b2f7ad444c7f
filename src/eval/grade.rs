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

use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::task::Task;
use crate::exec::backend::{Backend, Network, SandboxSpec, WorkspaceMode, WorkspaceSpec};
use crate::exec::{ExecError, ExecOutput, ExecRequest, Executor};
use crate::redact::Redactor;
use crate::trajectory::RunDir;

/// The verifier's PATH, whatever the image or the agent set.
pub const VERIFIER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Bytes of the verifier's output kept in memory (all of it goes to the log).
const VERIFIER_OUTPUT_BYTES: usize = 4000;
/// Deadline of runner's own small commands in the verifier sandbox.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why grading could not produce a reward: always an infrastructure error.
#[derive(Debug, thiserror::Error)]
pub enum GradeError {
    #[error("verifier sandbox: {0}")]
    Sandbox(#[from] ExecError),
    #[error("the verifier did not finish within {secs}s (verifier.timeout_sec)")]
    Timeout { secs: u64 },
    #[error("the verifier was killed (signal or memory limit){oom}")]
    Killed { oom: &'static str },
    #[error("bad reward file {file}: {detail}")]
    BadReward { file: &'static str, detail: String },
    #[error("verifier.user '{0}' is not supported: the verifier runs as root")]
    User(String),
    #[error("{0}")]
    Setup(String),
    #[error("interrupted")]
    Interrupted,
}

/// The verifier's verdict.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub reward: f64,
    /// Where it came from: `reward.txt`, `reward.json` or `exit code N`.
    pub source: String,
}

/// Settings of one grading.
pub struct GradeSpec<'a> {
    pub task: &'a Task,
    pub image: &'a str,
    /// The agent's final workspace on the host.
    pub workspace: &'a Path,
    /// Where it goes in the container (the image's working directory).
    pub workdir: &'a str,
    pub network: Network,
    /// Where the verifier's sandbox comes from (the agent's backend).
    pub backend: &'a dyn Backend,
    /// The container runtime, as for the agent's sandbox.
    pub runtime: Option<String>,
    pub run_id: String,
    /// The attempt's run directory: `verifier.log` and `verifier-links.log`
    /// are written there.
    pub run_dir: &'a RunDir,
    /// Secrets kept out of verifier.log and the verifier's messages.
    pub redactor: &'a Redactor,
}

/// Runs tests/test.sh on a copy of `workspace` in a fresh container and
/// reads the reward.
pub async fn grade(spec: GradeSpec<'_>, cancel: &CancellationToken) -> Result<Verdict, GradeError> {
    let task = spec.task;
    if let Some(u) = task.config.verifier.user.as_deref()
        && !matches!(u, "root" | "0" | "0:0")
    {
        return Err(GradeError::User(u.to_string()));
    }
    let mut env: Vec<(String, String)> = [
        ("PATH", VERIFIER_PATH),
        ("HOME", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("PYTHONNOUSERSITE", "1"),
        ("PYTHONSAFEPATH", "1"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("TEST_DIR", "/tests"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in &task.config.verifier.env {
        env.retain(|(e, _)| e != k);
        env.push((k.clone(), v.clone()));
    }
    let timeout = Duration::from_secs_f64(task.verifier_timeout_secs);
    let sandbox = spec
        .backend
        .start(SandboxSpec {
            cpus: task.cpus,
            memory_bytes: task.memory_bytes,
            network: spec.network,
            user: "0:0".into(),
            // A fresh sandbox from the pristine image: writable so /tests
            // and /logs can be made; capabilities stay dropped.
            writable_rootfs: true,
            workspace: Some(WorkspaceSpec {
                host: spec.workspace.to_path_buf(),
                mode: WorkspaceMode::Copy,
                exact: true,
            }),
            workdir: Some(spec.workdir.to_string()),
            // Only so test.sh can run the agent's code as an unprivileged
            // user (`setpriv --reuid=1000 --regid=1000 --clear-groups CMD`),
            // which then cannot touch /tests or /logs.
            switch_user: true,
            env,
            redactor: spec.redactor.clone(),
            max_run_time: timeout + Duration::from_secs(300),
            runtime: spec.runtime.clone(),
            ..SandboxSpec::new(spec.image, &spec.run_id)
        })
        .await?;
    let result = run_verifier(sandbox.as_ref(), task, timeout, spec.run_dir, cancel).await;
    let removed = sandbox.discard().await;
    let verdict = result?;
    removed?;
    Ok(verdict)
}

async fn run_verifier(
    sandbox: &dyn Executor,
    task: &Task,
    timeout: Duration,
    run_dir: &RunDir,
    cancel: &CancellationToken,
) -> Result<Verdict, GradeError> {
    // The sandbox's names for the task's absolute paths (themselves in a
    // container), quoted for the shell.
    let tests = sandbox.path("/tests");
    let logs = sandbox.path("/logs");
    let (qt, ql) = (quote(&tests), quote(&logs));
    let prep = control(
        sandbox,
        &format!("rm -rf {qt} {ql} && mkdir -p {qt} {ql}/verifier {ql}/agent"),
        cancel,
    )
    .await?;
    if prep.exit_code != Some(0) {
        return Err(GradeError::Setup(format!(
            "cannot prepare /tests and /logs: {}",
            prep.output.trim()
        )));
    }
    sandbox.upload_dir(&task.tests_dir(), &tests).await?;
    let swept = control(
        sandbox,
        &sweep_links_command(&sandbox.workdir(), &tests, &logs),
        cancel,
    )
    .await?;
    if swept.exit_code != Some(0) {
        return Err(GradeError::Setup(format!(
            "cannot check the workspace's links: {}",
            swept.output.trim()
        )));
    }
    if !swept.output.trim().is_empty() {
        tracing::info!("{}", swept.output.trim());
        let links_log = run_dir.file("verifier-links.log");
        let text = format!("{}\n", swept.output.trim());
        if let Err(e) = links_log
            .create()
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        {
            tracing::warn!("cannot write {}: {e}", links_log.path().display());
        }
    }
    let out = sandbox
        .execute(ExecRequest {
            // TEST_DIR names the mapped /tests unless the task set its own.
            command: if tests == "/tests" {
                "exec bash /tests/test.sh".into()
            } else if task
                .config
                .verifier
                .env
                .iter()
                .any(|(k, _)| k == "TEST_DIR")
            {
                format!("exec bash {qt}/test.sh")
            } else {
                format!("TEST_DIR={qt} exec bash {qt}/test.sh")
            },
            timeout,
            max_output_bytes: VERIFIER_OUTPUT_BYTES,
            full_output: Some(run_dir.file("verifier.log")),
            cancel: cancel.clone(),
        })
        .await?;
    if out.cancelled {
        return Err(GradeError::Interrupted);
    }
    if out.timed_out {
        return Err(GradeError::Timeout {
            secs: timeout.as_secs(),
        });
    }
    // Killed by a signal (or the memory limit): the verifier crashed, and
    // whatever reward file is there may not be its own.
    let code = match out.exit_code {
        Some(c) if c < 128 => c,
        _ => {
            return Err(GradeError::Killed {
                oom: if out.oom_killed {
                    " (out of memory)"
                } else {
                    ""
                },
            });
        }
    };
    let read = control(
        sandbox,
        // `|| exit`: never fall back to reading a reward from the workspace.
        &format!(
            "cd {ql}/verifier || exit 97; if [ -f reward.txt ]; then echo txt; head -c 4096 reward.txt; \
             elif [ -f reward.json ]; then echo json; head -c 65536 reward.json; else echo none; fi"
        ),
        cancel,
    )
    .await?;
    if read.exit_code != Some(0) {
        return Err(GradeError::Setup(format!(
            "reading the reward failed (exit {:?}): {}",
            read.exit_code,
            read.output.trim()
        )));
    }
    parse_reward(&read.output, code)
}

/// Removes every link under `workdir` that resolves into `tests` or
/// `logs` (the sandbox's /tests and /logs), saying which.
fn sweep_links_command(workdir: &str, tests: &str, logs: &str) -> String {
    // Inside the single-quoted `sh -c` script below, each path is a
    // double-quoted word: quote for both.
    let inner = |p: &str| p.replace('\'', "'\\''");
    let (t, l) = (inner(tests), inner(logs));
    format!(
        "find {} -type l -exec sh -c 'for l; do t=$(readlink -f -- \"$l\") || continue; \
         case \"$t\" in \"{t}\"|\"{t}\"/*|\"{l}\"|\"{l}\"/*) echo \"runner: removed link $l -> $t\"; rm -f -- \"$l\";; esac; done' sh {{}} +",
        quote(workdir)
    )
}

/// `s` as one shell word.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

async fn control(
    sandbox: &dyn Executor,
    command: &str,
    cancel: &CancellationToken,
) -> Result<ExecOutput, GradeError> {
    let out = sandbox
        .execute(ExecRequest {
            command: command.into(),
            timeout: CONTROL_TIMEOUT,
            max_output_bytes: 1 << 17,
            full_output: None,
            cancel: cancel.clone(),
        })
        .await?;
    if out.cancelled {
        return Err(GradeError::Interrupted);
    }
    if out.timed_out {
        return Err(GradeError::Setup(format!("`{command}` timed out")));
    }
    Ok(out)
}

/// Turns the reward probe's output (`txt`/`json`/`none` then the file) and
/// test.sh's exit code into a verdict.
pub fn parse_reward(probe: &str, exit_code: i32) -> Result<Verdict, GradeError> {
    let (kind, body) = probe.split_once('\n').unwrap_or((probe.trim(), ""));
    let check = |file: &'static str, r: f64| {
        if r.is_finite() {
            Ok(Verdict {
                reward: r,
                source: file.to_string(),
            })
        } else {
            Err(GradeError::BadReward {
                file,
                detail: format!("{r} is not a finite number"),
            })
        }
    };
    match kind.trim() {
        "txt" => {
            let r: f64 = body.trim().parse().map_err(|_| GradeError::BadReward {
                file: "reward.txt",
                detail: format!("'{}' is not a number", body.trim()),
            })?;
            check("reward.txt", r)
        }
        "json" => {
            let bad = |detail: String| GradeError::BadReward {
                file: "reward.json",
                detail,
            };
            let v: serde_json::Value =
                serde_json::from_str(body).map_err(|e| bad(e.to_string()))?;
            let r = match &v {
                serde_json::Value::Number(n) => n.as_f64(),
                serde_json::Value::Object(m) => match m.get("reward") {
                    Some(r) => r.as_f64(),
                    // Several named rewards: their mean.
                    None => {
                        let nums: Vec<f64> = m.values().filter_map(|x| x.as_f64()).collect();
                        (!nums.is_empty()).then(|| nums.iter().sum::<f64>() / nums.len() as f64)
                    }
                },
                _ => None,
            }
            .ok_or_else(|| bad("expected a number or {\"reward\": NUMBER}".into()))?;
            check("reward.json", r)
        }
        "none" => Ok(Verdict {
            reward: if exit_code == 0 { 1.0 } else { 0.0 },
            source: format!("exit code {exit_code}"),
        }),
        // An empty or garbled probe is a failed read, never "exit 0 = pass".
        other => Err(GradeError::Setup(format!(
            "unexpected answer from the reward probe: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards() {
        assert_eq!(parse_reward("txt\n1\n", 3).unwrap().reward, 1.0);
        assert_eq!(parse_reward("txt\n0.25", 0).unwrap().reward, 0.25);
        assert!(parse_reward("txt\nyes", 0).is_err());
        assert_eq!(
            parse_reward("json\n{\"reward\": 0.5}", 1).unwrap().reward,
            0.5
        );
        assert_eq!(
            parse_reward("json\n{\"a\": 1, \"b\": 0}", 1)
                .unwrap()
                .reward,
            0.5
        );
        assert!(parse_reward("json\n[]", 0).is_err());
        assert_eq!(parse_reward("none\n", 0).unwrap().reward, 1.0);
        assert_eq!(parse_reward("none\n", 2).unwrap().reward, 0.0);
        assert!(
            parse_reward("", 0).is_err(),
            "an empty probe is never a pass"
        );
        assert!(parse_reward("garbage\n", 0).is_err());
    }
}
