//! One command, through the container's supervisor: it runs `bash -c`
//! (or `sh -c`) as the sandbox user (or the user of `execute_as`), streams
//! the output, enforces the timeout and kills what the command left
//! running, all inside the sandbox without an exec. The engine is asked
//! only when the supervisor cannot finish the job: a control exec then
//! kills (see `kill`), and the sandbox is given up when that fails too.

use std::time::Instant;

use bollard::Docker;

use super::client::short;
use super::container::death_reason;
use super::kill::kill_command_processes;
use super::lifeline::Lifeline;
use super::oom::OomCounter;
use crate::exec::capture::Capture;
use crate::exec::shell::{MAX_STATE_BYTES, STATE_END, ShellSession};
use crate::exec::supervisor::StreamError;
use crate::exec::supervisor::run::{self as sup_run, Job, RunError};
use crate::exec::{ExecError, ExecOutput, ExecRequest, background_killed_note};
use crate::redact::Redactor;

/// What the executor knows about its container, for running a command.
pub struct Target<'a> {
    pub docker: &'a Docker,
    pub id: &'a str,
    pub user: &'a str,
    /// Where bash is in the sandbox; `None`: `sh`.
    pub bash: Option<&'a str>,
    /// The persistent shell, when commands keep their state.
    pub session: Option<&'a ShellSession>,
    pub memory_bytes: i64,
    pub pids_limit: i64,
    /// RLIMIT_NPROC each command gets (gVisor).
    pub nproc: Option<i64>,
    /// Where commands start.
    pub workdir: &'a str,
    /// The command environment (`K=V`).
    pub env: &'a [String],
    /// Secrets redacted from the output while it streams.
    pub redactor: &'a Redactor,
    /// Leave what a command started in the background running after it.
    pub keep_background: bool,
    pub oom: &'a OomCounter,
    pub lifeline: &'a Lifeline,
    /// Run as this `(uid, gid)` rather than `user`, without the shell
    /// session (see `Users::execute_as`).
    pub as_user: Option<(u32, u32)>,
    /// With `as_user`: keep CAP_SETUID and CAP_SETGID.
    pub switch_user: bool,
}

/// The error for a supervisor stream that ended: the engine's word on how
/// the container ended when it did, else the stream's.
pub async fn stream_lost(
    docker: &Docker,
    id: &str,
    lifeline: &Lifeline,
    e: StreamError,
) -> ExecError {
    let words = lifeline.supervisor.last_words();
    match death_reason(docker, id, Some(lifeline)).await {
        Ok(Some(why)) => ExecError::SandboxDied { detail: why },
        _ => ExecError::SandboxDied {
            detail: format!(
                "container {}: {e}{}",
                short(id),
                if words.is_empty() {
                    String::new()
                } else {
                    format!(" ({words})")
                }
            ),
        },
    }
}

/// The command environment as pairs.
fn pairs(env: &[String]) -> Vec<(String, String)> {
    env.iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The supervisor's job for `req`: the shell's argv (through the
/// persistent session when there is one), cwd, environment and limits.
fn job_of(t: &Target<'_>, req: &ExecRequest, session: Option<&ShellSession>) -> Job {
    let shell = t.bash.unwrap_or("sh");
    let mut env = pairs(t.env);
    let (argv, cwd, state_bytes) = match session {
        Some(session) => {
            let mut p = session.prepare(&req.command);
            if let Some(first) = p.argv.first_mut() {
                *first = shell.to_string();
            }
            env.extend(p.env);
            (p.argv, p.cwd, u64::try_from(MAX_STATE_BYTES).ok())
        }
        None => (
            vec![shell.to_string(), "-c".into(), req.command.clone()],
            t.workdir.to_string(),
            None,
        ),
    };
    Job {
        argv,
        cwd,
        env,
        timeout: req.timeout,
        keep_background: t.keep_background,
        nproc: t.nproc.and_then(|n| u64::try_from(n).ok()),
        state_bytes,
        // What the wrapper writes last: a kept background job may hold
        // the descriptor open after it.
        state_end: state_bytes.map(|_| format!("\0{STATE_END}\0")),
        stdin: None,
        user: t.as_user,
        switch_user: t.switch_user && t.as_user.is_some(),
    }
}

/// The executor's error when the supervisor could not run the command; a
/// silent supervisor's processes are killed through the engine first.
async fn supervisor_failed(t: &Target<'_>, killer: &str, e: RunError) -> ExecError {
    match e {
        RunError::Spawn(m) => ExecError::Spawn(m),
        RunError::Stream(e) => stream_lost(t.docker, t.id, t.lifeline, e).await,
        e @ RunError::NoAnswer(_) => {
            // The supervisor is alive but silent: the engine kills, and
            // the sandbox is not trusted with another command either way.
            let killed = kill_command_processes(t.docker, t.id, killer, &[], t.pids_limit).await;
            ExecError::Unrecoverable {
                detail: format!(
                    "{e} (container {}); {}",
                    short(t.id),
                    match killed {
                        Ok(()) => "its processes were killed through the engine".to_string(),
                        Err(k) => format!("killing them through the engine failed too: {k}"),
                    }
                ),
            }
        }
    }
}

/// OOM kills during the command (`oom_seen` updated); a container that
/// stopped meanwhile is a lost sandbox.
async fn oom_kills(
    t: &Target<'_>,
    oom_before: Option<u64>,
    oom_seen: &mut Option<u64>,
) -> Result<u64, ExecError> {
    match t.oom.after(t.docker, t.id, t.user).await {
        Ok((true, now)) => {
            let killed = match (now, oom_before) {
                (Some(n), Some(b)) if n > b => n - b,
                _ => 0,
            };
            if now.is_some() {
                *oom_seen = now;
            }
            Ok(killed)
        }
        Ok((false, _)) => Err(stream_lost(
            t.docker,
            t.id,
            t.lifeline,
            StreamError::Closed("the container stopped while the command ran".into()),
        )
        .await),
        Err(e) => Err(e),
    }
}

/// Runs one command to completion, timeout or cancellation. `oom_seen` is
/// the OOM-kill count already accounted for, updated after the command.
pub async fn run(
    t: &Target<'_>,
    req: &ExecRequest,
    oom_seen: &mut Option<u64>,
) -> Result<ExecOutput, ExecError> {
    let started = Instant::now();
    let mut cap = Capture::new(req.max_output_bytes).with_redactor(t.redactor);
    if let Some(file) = &req.full_output {
        cap = cap.with_output_file(file)?;
    }
    // Read now when that is free (the host's cgroup file): what happened
    // between commands is then not blamed on this one.
    let oom_before = t.oom.peek().or(*oom_seen);
    let session = t.session.filter(|_| t.as_user.is_none());
    let job = job_of(t, req, session);
    // The engine's fallback kill runs as root for a command of another
    // user: root's control exec kills every process but PID 1 (see `kill`).
    let killer = if t.as_user.is_some() { "0:0" } else { t.user };
    let mut tee_err: Option<std::io::Error> = None;
    let sink = |b: &[u8]| {
        if tee_err.is_none()
            && let Err(e) = cap.feed(b)
        {
            tee_err = Some(e);
        }
    };
    let ended = match sup_run::run(&t.lifeline.supervisor, job, sink, &req.cancel).await {
        Ok(e) => e,
        Err(e) => return Err(supervisor_failed(t, killer, e).await),
    };
    if let Some(e) = tee_err.take() {
        return Err(ExecError::Io(e));
    }
    let mut notes = Vec::new();
    if let Some(session) = session
        && !ended.timed_out
        && !ended.cancelled
        && let Some(note) = session.save(ended.state.as_deref(), ended.state_overflow)
    {
        notes.push(note);
    }
    if ended.stuck > 0 {
        // SIGKILL did not end them inside: the engine's turn, or the
        // sandbox is given up.
        kill_command_processes(t.docker, t.id, killer, &[], t.pids_limit).await?;
    }
    if ended.leftovers > 0 && !t.keep_background {
        notes.push(background_killed_note(ended.leftovers));
    }
    if ended.output_open {
        notes.push(
            "[the command exited but a background process still holds its output open; \
             later output is not shown]"
                .to_string(),
        );
    }
    let mut exit = if ended.timed_out || ended.cancelled {
        None
    } else {
        ended.code
    };
    let oom_killed = oom_kills(t, oom_before, oom_seen).await?;
    // Timeouts and cancellation are told to the model by the bash tool
    // (tools::bash::render_for_model), the same for every executor.
    if oom_killed > 0 {
        if exit == Some(137) {
            // The command itself was the one killed.
            exit = None;
        }
        notes.push(format!(
            "[killed: out of memory (limit {} MiB): the kernel's OOM killer ended {oom_killed} \
             process(es) of this command]",
            t.memory_bytes >> 20
        ));
    }
    let (mut text, bytes_seen) = cap.finish()?;
    for n in notes {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&n);
        text.push('\n');
    }
    Ok(ExecOutput {
        output: text,
        exit_code: exit,
        timed_out: ended.timed_out,
        cancelled: ended.cancelled,
        oom_killed: oom_killed > 0,
        bytes_seen,
        duration_ms: crate::convert::millis_u64(started.elapsed()),
    })
}
