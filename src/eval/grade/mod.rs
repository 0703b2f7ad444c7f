//! Grading: tests/test.sh runs in a sandbox chosen by the grading mode
//! (see [`super::mode::GradingMode`]), then the reward is read as Harbor
//! reads it.
//!
//! - [`shared`]: in the agent's own sandbox, after the agent phase.
//! - [`fresh`]: in a new sandbox: the pristine image plus the workspace
//!   (`isolated`), a commit of the agent's sandbox plus the workspace
//!   (`snapshot`), or the verifier's image plus the task's artifacts
//!   (`separate`).
//!
//! Common to all: /tests and /logs are made afresh by runner and tests/ is
//! uploaded; links in the workspace that resolve into /tests or /logs are
//! removed; test.sh runs under the verifier timeout; once it has exited,
//! every other process in the sandbox is killed *before* the reward is
//! read (a background process the agent's code left cannot rewrite it);
//! then /logs/verifier/reward.json is read, else reward.txt.
//!
//! Whose fault an ending is decides how it counts ([`Verdict`]): a
//! verifier that runs past its timeout or is killed, or a /tests or /logs
//! the agent's files keep runner from preparing, is a fail of the attempt
//! (the agent's code can cause each, so none may leave the pass rate); a
//! test.sh that ends without a usable reward file is an error of the task
//! (Harbor's RewardFileNotFoundError), which still counts as not passed;
//! only the sandbox or the engine failing is an infrastructure error
//! ([`GradeError`]).

pub mod fresh;
pub mod shared;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::task::Task;
use crate::exec::{ExecError, ExecOutput, ExecRequest, Executor, ExecutorExt};
use crate::trajectory::RunDir;

/// Bytes of the verifier's output kept in memory (all of it goes to the log).
const VERIFIER_OUTPUT_BYTES: usize = 4000;
/// Deadline of runner's own small commands in the verifier's sandbox.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest reward file read.
const MAX_REWARD_BYTES: u64 = 64 << 10;
/// Root, for runner's own commands in a sandbox whose user is another.
pub const ROOT: (u32, u32) = (0, 0);

/// Why grading produced no verdict: the sandbox or the engine failed (an
/// infrastructure error), or Ctrl-C.
#[derive(Debug, thiserror::Error)]
pub enum GradeError {
    #[error("verifier sandbox: {0}")]
    Sandbox(#[from] ExecError),
    #[error("{0}")]
    Setup(String),
    #[error("interrupted")]
    Interrupted,
}

/// How grading ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// test.sh ran and left a reward file: the named metrics (`reward`
    /// alone for reward.txt or a bare number).
    Rewarded {
        metrics: BTreeMap<String, f64>,
        /// `reward.json` or `reward.txt`.
        source: &'static str,
    },
    /// The verifier could not finish for reasons the agent's code can
    /// cause: a fail with this reason.
    Failed(String),
    /// test.sh ended without a usable reward file: an error of the task,
    /// counted as not passed.
    NoReward(String),
}

impl Verdict {
    /// The pass rule: every metric at least 1.
    pub fn passed(metrics: &BTreeMap<String, f64>) -> bool {
        !metrics.is_empty() && metrics.values().all(|v| *v >= 1.0)
    }

    /// The one number shown for an attempt: the lowest metric, so that
    /// it is at least 1 exactly when the attempt passes (named metrics are
    /// never averaged into a pass).
    pub fn headline(metrics: &BTreeMap<String, f64>) -> Option<f64> {
        metrics.values().copied().reduce(f64::min)
    }
}

/// How test.sh is run in a prepared sandbox.
pub struct TestRun<'a> {
    pub sandbox: &'a dyn Executor,
    pub task: &'a Task,
    /// Who runs test.sh; `None`: the sandbox's own user.
    pub verifier_user: Option<(u32, u32)>,
    /// Whether runner's own commands need `execute_as(ROOT)` (the
    /// sandbox's user is not root).
    pub control_as_root: bool,
    /// Variables of test.sh's environment, on top of the sandbox's.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub run_dir: &'a RunDir,
    /// Whether a /tests or /logs runner cannot prepare is the agent's
    /// doing (its files are in this sandbox) rather than the sandbox's.
    pub agent_files_here: bool,
    /// Upload tests/ (not when the verifier's image bundles them).
    pub upload_tests: bool,
    /// Host directories uploaded to sandbox paths once /logs is made
    /// (separate mode's artifacts).
    pub uploads: &'a [(std::path::PathBuf, String)],
}

/// Prepares /tests and /logs, runs test.sh, kills what is left, reads the
/// reward.
pub async fn run_tests(t: TestRun<'_>, cancel: &CancellationToken) -> Result<Verdict, GradeError> {
    let sandbox = t.sandbox;
    let tests = sandbox.path("/tests");
    let logs = sandbox.path("/logs");
    let (qt, ql) = (quote(&tests), quote(&logs));
    if let Some(failed) = prepare_dirs(&t, &qt, &ql, cancel).await? {
        return Ok(failed);
    }
    upload_and_sweep(&t, &tests, &logs, &qt, cancel).await?;
    let test_sh = format!("{tests}/test.sh");
    let mut env = t.env.clone();
    if !env.iter().any(|(k, _)| k == "TEST_DIR") {
        env.push(("TEST_DIR".into(), tests.clone()));
    }
    let exports = exports(&env);
    // Run as Harbor runs it: made executable, started through its own
    // interpreter line (a test.sh without one runs with bash).
    let q = quote(&test_sh);
    let command = format!(
        "{exports}if head -c 2 {q} | grep -q '^#!' && [ -x {q} ]; then exec {q}; else exec bash {q}; fi"
    );
    let req = ExecRequest {
        command,
        timeout: t.timeout,
        max_output_bytes: VERIFIER_OUTPUT_BYTES,
        full_output: Some(t.run_dir.file("verifier.log")),
        cancel: cancel.clone(),
    };
    // A root test.sh may switch users, as Harbor's does (`setpriv` to run
    // the agent's code unprivileged). Whatever test.sh or the agent left
    // running dies as test.sh exits, before the reward is read: nothing
    // can write it afterwards.
    let user = t.verifier_user.unwrap_or(ROOT);
    let out = last_command(sandbox, user, user == ROOT, req).await?;
    if let Some(ended) = unfinished(&out, t.timeout)? {
        return Ok(ended);
    }
    match read_reward(sandbox, &logs, t.run_dir).await? {
        // runner made /logs/verifier before test.sh: gone now, it was
        // removed by code test.sh ran (the agent's), not a task's omission.
        Verdict::NoReward(why)
            if !verifier_dir_left(sandbox, t.control_as_root, &ql, cancel).await? =>
        {
            Ok(Verdict::Failed(format!(
                "/logs/verifier, made before test.sh ran, is gone ({why})"
            )))
        }
        v => Ok(v),
    }
}

/// Empties and makes /tests and /logs (/logs/verifier of the verifier's
/// user); a verdict when the agent's files are in the way.
async fn prepare_dirs(
    t: &TestRun<'_>,
    qt: &str,
    ql: &str,
    cancel: &CancellationToken,
) -> Result<Option<Verdict>, GradeError> {
    let sandbox = t.sandbox;
    let control = |command: String| control(sandbox, t.control_as_root, command, cancel);
    // Whoever runs test.sh must be able to write the reward file, and
    // nobody else: a verifier user of its own makes /logs/verifier itself
    // (root, without CAP_CHOWN, cannot give it one), in a /logs open to it
    // only for that moment.
    let own_logs = t.verifier_user.filter(|(uid, _)| *uid != 0);
    let verifier_dir = if own_logs.is_some() {
        format!(" && chmod 1777 {ql}")
    } else {
        format!(" {ql}/verifier")
    };
    let rm = if t.upload_tests {
        format!("{qt} {ql}")
    } else {
        ql.to_string()
    };
    // `chmod -R u+rwx` first: a directory the agent made unreadable
    // (mode 000) would stop `rm` (commands hold no capabilities).
    let prep = control(format!(
        "chmod -R u+rwx {rm} 2>/dev/null; rm -rf {rm} && mkdir -p {qt} {ql}/agent {ql}/artifacts{verifier_dir}"
    ))
    .await?;
    let prep = match own_logs {
        Some(user) if prep.exit_code == Some(0) => {
            let made = as_user(
                sandbox,
                user,
                control_req(format!("mkdir -m 0755 {ql}/verifier"), cancel),
            )
            .await?;
            let closed = control(format!("chmod 0755 {ql}")).await?;
            if made.exit_code != Some(0) {
                made
            } else {
                closed
            }
        }
        _ => prep,
    };
    if prep.exit_code != Some(0) {
        let why = format!("cannot prepare /tests and /logs: {}", prep.output.trim());
        return if t.agent_files_here {
            Ok(Some(Verdict::Failed(format!(
                "{why} (the agent's files are in the way)"
            ))))
        } else {
            Err(GradeError::Setup(why))
        };
    }
    Ok(None)
}

/// Uploads the artifacts and tests/ (owned by root), makes test.sh
/// executable and removes links into /tests or /logs, logged in
/// verifier-links.log.
async fn upload_and_sweep(
    t: &TestRun<'_>,
    tests: &str,
    logs: &str,
    qt: &str,
    cancel: &CancellationToken,
) -> Result<(), GradeError> {
    let sandbox = t.sandbox;
    let control = |command: String| control(sandbox, t.control_as_root, command, cancel);
    // Owned by root: the agent's processes, still running in shared
    // mode as another user, cannot change them.
    for (host, dest) in t.uploads {
        sandbox
            .upload_dir_as_root(host, &sandbox.path(dest))
            .await?;
    }
    if t.upload_tests {
        sandbox
            .upload_dir_as_root(&t.task.tests_dir(), tests)
            .await?;
    }
    // Executable, by root, as Harbor makes it (the verifier's user may not
    // own /tests).
    control(format!("chmod +x {qt}/test.sh 2>/dev/null; true")).await?;
    // Links into /tests or /logs are removed wherever `find` can reach;
    // what it cannot read, test.sh cannot read either.
    let swept = control(sweep_links_command(&sandbox.workdir(), tests, logs)).await?;
    let swept_text = swept.output.trim();
    if !swept_text.is_empty() {
        tracing::info!("{swept_text}");
        let links_log = t.run_dir.file("verifier-links.log");
        let text = format!("{swept_text}\n");
        if let Err(e) = links_log
            .create()
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        {
            tracing::warn!("cannot write {}: {e}", links_log.path().display());
        }
    }
    Ok(())
}

/// The verdict of a test.sh that did not finish by itself (timed out or
/// killed by a signal); an interruption is an error.
fn unfinished(out: &ExecOutput, timeout: Duration) -> Result<Option<Verdict>, GradeError> {
    if out.cancelled {
        return Err(GradeError::Interrupted);
    }
    if out.timed_out {
        return Ok(Some(Verdict::Failed(format!(
            "the verifier did not finish within {}s (verifier.timeout_sec)",
            timeout.as_secs()
        ))));
    }
    if out.exit_code.is_none_or(|c| c >= 128) {
        return Ok(Some(Verdict::Failed(format!(
            "test.sh was killed (by a signal{})",
            if out.oom_killed {
                ", out of memory"
            } else {
                ""
            }
        ))));
    }
    Ok(None)
}

/// Whether /logs/verifier is still the directory runner made.
async fn verifier_dir_left(
    sandbox: &dyn Executor,
    as_root: bool,
    ql: &str,
    cancel: &CancellationToken,
) -> Result<bool, GradeError> {
    let out = control(
        sandbox,
        as_root,
        format!("[ -d {ql}/verifier ] && [ ! -L {ql}/verifier ] && echo present"),
        cancel,
    )
    .await?;
    Ok(out.output.trim() == "present")
}

/// reward.json, else reward.txt, as Harbor reads them; the file read is
/// kept in the run directory under its own name (redacted), as the
/// verifier wrote it.
async fn read_reward(
    sandbox: &dyn Executor,
    logs: &str,
    run_dir: &RunDir,
) -> Result<Verdict, GradeError> {
    for (file, json) in [("reward.json", true), ("reward.txt", false)] {
        let path = format!("{logs}/verifier/{file}");
        let data = match sandbox.read_file(&path, MAX_REWARD_BYTES).await {
            Ok(d) => d,
            Err(e) if is_absent(&e) => continue,
            Err(ExecError::Refused(why)) => return Ok(Verdict::NoReward(why)),
            Err(e) => return Err(e.into()),
        };
        let text = String::from_utf8_lossy(&data);
        if let Err(e) = run_dir.write_text(file, &text) {
            tracing::warn!("cannot keep {file} in {}: {e}", run_dir.path().display());
        }
        let parsed = if json {
            parse_reward_json(&text)
        } else {
            parse_reward_text(&text)
        };
        return Ok(match parsed {
            Ok(metrics) => Verdict::Rewarded {
                metrics,
                source: file,
            },
            Err(detail) => Verdict::NoReward(format!("bad reward file {file}: {detail}")),
        });
    }
    Ok(Verdict::NoReward(
        "test.sh wrote no reward file (/logs/verifier/reward.json or reward.txt)".into(),
    ))
}

/// A read that found no file there (a link is no file to the reader).
pub(crate) fn is_absent(e: &ExecError) -> bool {
    match e {
        ExecError::Refused(m) => m.ends_with("no such file"),
        ExecError::Io(io) => io.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

fn finite(key: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{key}: {v} is not a finite number"))
    }
}

/// reward.txt: one number.
pub fn parse_reward_text(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("the file is empty".into());
    }
    let v: f64 = t
        .parse()
        .map_err(|_| format!("'{}' is not a number", crate::terminal::visible(t)))?;
    Ok(BTreeMap::from([(
        "reward".to_string(),
        finite("reward", v)?,
    )]))
}

/// reward.json: an object of named numeric metrics, or one number.
pub fn parse_reward_json(text: &str) -> Result<BTreeMap<String, f64>, String> {
    if text.trim().is_empty() {
        return Err("the file is empty".into());
    }
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    match v {
        serde_json::Value::Number(n) => {
            let r = n.as_f64().ok_or("not a number")?;
            out.insert("reward".to_string(), finite("reward", r)?);
        }
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let shown = crate::terminal::visible(&k).into_owned();
                let r = v
                    .as_f64()
                    .ok_or_else(|| format!("{shown}: {v} is not a number"))?;
                out.insert(k, finite(&shown, r)?);
            }
            if out.is_empty() {
                return Err("no metrics in the object".into());
            }
        }
        other => return Err(format!("expected an object of numbers, got {other}")),
    }
    Ok(out)
}

/// Removes every link under `workdir` that resolves into `tests` or
/// `logs` (the sandbox's /tests and /logs), saying which; directories
/// `find` cannot read are passed over (and named).
fn sweep_links_command(workdir: &str, tests: &str, logs: &str) -> String {
    // Inside the single-quoted `sh -c` script below, each path is a
    // double-quoted word: quote for both.
    let inner = |p: &str| p.replace('\'', "'\\''");
    let (t, l) = (inner(tests), inner(logs));
    format!(
        "find {} -type l -exec sh -c 'for l; do t=$(readlink -f -- \"$l\") || continue; \
         case \"$t\" in \"{t}\"|\"{t}\"/*|\"{l}\"|\"{l}\"/*) echo \"runner: removed link $l -> $t\"; rm -f -- \"$l\";; esac; done' sh {{}} + 2>&1 \
         | sed 's/^find: /runner: not searched: /'; true",
        quote(workdir)
    )
}

/// `export K='V'; ...` for each pair whose name is a shell variable name
/// (a task file's other names are left out, never spliced into a command).
pub fn exports(env: &[(String, String)]) -> String {
    env.iter()
        .filter(|(k, _)| {
            let ok = !k.is_empty()
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                tracing::warn!("environment name {k:?} is not a shell variable name: left out");
            }
            ok
        })
        .map(|(k, v)| format!("export {k}={}; ", quote(v)))
        .collect()
}

/// `s` as one shell word.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `req` as `user`; a backend without users (local, whose commands run as
/// runner's own user) runs it as its only user.
async fn as_user(
    sandbox: &dyn Executor,
    user: (u32, u32),
    req: ExecRequest,
) -> Result<ExecOutput, ExecError> {
    match sandbox.extras().users {
        Some(users) => users.execute_as(user, req).await,
        None => sandbox.execute(req).await,
    }
}

/// The sandbox's last command, `req` as `user` (see
/// [`crate::exec::Users::execute_final`]); a backend without users runs it
/// as its only user, then kills what is left when it can.
async fn last_command(
    sandbox: &dyn Executor,
    user: (u32, u32),
    switch_user: bool,
    req: ExecRequest,
) -> Result<ExecOutput, ExecError> {
    let extras = sandbox.extras();
    if let Some(users) = extras.users {
        return users.execute_final(user, switch_user, req).await;
    }
    let out = sandbox.execute(req).await?;
    if let Some(procs) = extras.processes {
        procs.kill_all().await?;
    }
    Ok(out)
}

/// One of runner's own commands, as root when the sandbox's user is not.
async fn control(
    sandbox: &dyn Executor,
    as_root: bool,
    command: String,
    cancel: &CancellationToken,
) -> Result<ExecOutput, GradeError> {
    let req = control_req(command.clone(), cancel);
    let out = if as_root {
        as_user(sandbox, ROOT, req).await?
    } else {
        sandbox.execute(req).await?
    };
    if out.cancelled {
        return Err(GradeError::Interrupted);
    }
    if out.timed_out {
        return Err(GradeError::Setup(format!("`{command}` timed out")));
    }
    Ok(out)
}

/// One of runner's own small commands.
fn control_req(command: String, cancel: &CancellationToken) -> ExecRequest {
    ExecRequest {
        command,
        timeout: CONTROL_TIMEOUT,
        max_output_bytes: 1 << 17,
        full_output: None,
        cancel: cancel.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_as_harbor_reads_them() {
        let m = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        assert_eq!(parse_reward_text("1\n"), Ok(m(&[("reward", 1.0)])));
        assert_eq!(parse_reward_text(" 0.25"), Ok(m(&[("reward", 0.25)])));
        assert!(parse_reward_text("yes").is_err());
        assert!(parse_reward_text("").is_err(), "an empty file is no reward");
        assert!(parse_reward_text("inf").is_err());
        assert_eq!(parse_reward_json("0.5"), Ok(m(&[("reward", 0.5)])));
        let named = parse_reward_json("{\"correct\": 1, \"style\": 0}").expect("named");
        assert_eq!(named, m(&[("correct", 1.0), ("style", 0.0)]));
        // Named metrics are not averaged into a pass: every one must be 1.
        assert!(!Verdict::passed(&named));
        assert_eq!(Verdict::headline(&named), Some(0.0));
        assert!(Verdict::passed(&m(&[("correct", 1.0), ("style", 1.0)])));
        assert_eq!(
            Verdict::headline(&m(&[("reward", 1.0), ("x", 0.5)])),
            Some(0.5)
        );
        assert!(parse_reward_json("[]").is_err());
        assert!(parse_reward_json("{}").is_err());
        assert!(parse_reward_json("{\"a\": \"1\"}").is_err());
        assert!(parse_reward_json("").is_err());
        assert!(!Verdict::passed(&BTreeMap::new()));
    }
}
