//! One command: an exec of `bash -c` (or `sh -c`), read while polling the
//! exec's state, so neither a held-open stream nor a hung daemon can stall
//! it past its timeout.

use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures::StreamExt;

use super::client::{QUICK_TIMEOUT, call, short};
use super::container::death_reason;
use super::kill::{kill_command_processes, oom_kill_count, wait_exit};
use crate::exec::capture::Capture;
use crate::exec::{ExecError, ExecOutput, ExecRequest};
use crate::redact::Redactor;

/// How often the exec's state is polled while its output is open.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// After the command exits (or is killed), how long remaining output may
/// take to arrive; a background child holding stdout must not hang us.
const DRAIN_LIMIT: Duration = Duration::from_secs(1);
/// How long a killed command may take to be reported as exited.
const EXIT_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// What the executor knows about its container, for running a command.
pub struct Target<'a> {
    pub docker: &'a Docker,
    pub id: &'a str,
    pub user: &'a str,
    pub idle_pid: Option<u32>,
    pub memory_bytes: i64,
    pub pids_limit: i64,
    /// RLIMIT_NPROC the command lowers itself to first (gVisor), leaving
    /// the container's headroom to the kill protocol's exec.
    pub nproc: Option<i64>,
    /// Where commands start.
    pub workdir: &'a str,
    /// The command environment (`K=V`), given to each exec.
    pub env: &'a [String],
    /// Secrets redacted from the output while it streams.
    pub redactor: &'a Redactor,
}

/// Why the wait for a command ended.
#[derive(PartialEq)]
enum End {
    Exited(Option<i64>),
    TimedOut,
    Cancelled,
}

/// Turns a Docker failure during a command into `SandboxDied` when the
/// container is gone, so the loop can tell the two apart.
/// The engine may refuse an exec ("is not running") a moment before
/// inspect shows the container as stopped, so this looks a few times.
async fn died_or(t: &Target<'_>, err: ExecError) -> ExecError {
    for _ in 0..5 {
        match death_reason(t.docker, t.id).await {
            Ok(Some(why)) => return ExecError::SandboxDied { detail: why },
            Ok(None) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(_) => break,
        }
    }
    err
}

/// Runs the command (`$1`) with bash when the image has it, else with sh;
/// `exec` replaces the launcher, so no extra process stays around.
pub const LAUNCH: &str =
    "if command -v bash >/dev/null 2>&1; then exec bash -c \"$1\"; fi; exec sh -c \"$1\"";

/// Runs one command to completion, timeout or cancellation. `oom_seen` is
/// the OOM-kill count already accounted for, updated when it grows.
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
    // The first failure to write the full-output file; reading goes on so
    // the exec's stream never backs up, and the error is reported at the end.
    let mut tee_err: Option<std::io::Error> = None;
    let launch = match t.nproc {
        // bash and busybox spell it -u, dash -p.
        Some(n) => format!(
            "{{ ulimit -u {n} || ulimit -p {n}; }} 2>/dev/null || \
             {{ echo 'runner: cannot limit the number of processes' >&2; exit 126; }}; {LAUNCH}"
        ),
        None => LAUNCH.to_string(),
    };
    let created = call(
        "create exec",
        short(t.id),
        QUICK_TIMEOUT,
        t.docker.create_exec(
            t.id,
            CreateExecOptions {
                cmd: Some(vec!["sh", "-c", &launch, "runner", req.command.as_str()]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                user: Some(t.user),
                working_dir: Some(t.workdir),
                env: Some(t.env.iter().map(String::as_str).collect()),
                ..Default::default()
            },
        ),
    )
    .await;
    let exec = match created {
        Ok(e) => e,
        Err(e) => return Err(died_or(t, e).await),
    };
    let output = match call(
        "start exec",
        short(t.id),
        QUICK_TIMEOUT,
        t.docker.start_exec(&exec.id, None),
    )
    .await
    {
        Ok(StartExecResults::Attached { output, .. }) => output,
        Ok(StartExecResults::Detached) => {
            return Err(ExecError::Docker {
                op: "start exec",
                detail: format!("{}: exec started detached", short(t.id)),
            });
        }
        Err(e) => return Err(died_or(t, e).await),
    };

    // Boxed so it can be dropped (ending its borrow of `cap`) before the
    // kept text is read.
    let mut reader = Box::pin(async {
        let mut output = output;
        while let Some(item) = output.next().await {
            match item {
                Ok(chunk) if tee_err.is_none() => {
                    if let Err(e) = cap.feed(&chunk.into_bytes()) {
                        tee_err = Some(e);
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    let deadline = tokio::time::sleep(req.timeout);
    tokio::pin!(deadline);
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.reset();
    let mut eof = false;

    let end = loop {
        tokio::select! {
            biased;
            _ = &mut reader, if !eof => {
                eof = true;
                // Usual case: output closed because the command exited.
                match quick_exit(t, &exec.id).await {
                    Ok(Some(code)) => break End::Exited(Some(code)),
                    Ok(None) => {}
                    Err(e) => return Err(died_or(t, e).await),
                }
            }
            _ = &mut deadline => break End::TimedOut,
            _ = req.cancel.cancelled() => break End::Cancelled,
            _ = poll.tick() => {
                match quick_exit(t, &exec.id).await {
                    Ok(Some(code)) => break End::Exited(Some(code)),
                    Ok(None) => {}
                    Err(e) => return Err(died_or(t, e).await),
                }
            }
        }
    };

    let mut notes = Vec::new();
    let mut exit = match end {
        End::Exited(code) => code,
        End::TimedOut | End::Cancelled => {
            // Keep reading while killing: the engine handles a container's
            // exec exits in order and waits for each exec's output to be
            // consumed, so an unread stream would stall the control exec.
            let stop = async {
                kill_command_processes(t.docker, t.id, t.user, t.idle_pid, t.pids_limit).await?;
                wait_exit(t.docker, &exec.id, t.id, EXIT_WAIT_LIMIT).await
            };
            tokio::pin!(stop);
            let stopped = loop {
                tokio::select! {
                    r = &mut stop => break r,
                    _ = &mut reader, if !eof => eof = true,
                }
            };
            if let Err(e) = stopped {
                return Err(died_or(t, e).await);
            }
            None
        }
    };
    if !eof
        && tokio::time::timeout(DRAIN_LIMIT, &mut reader)
            .await
            .is_err()
        && end != End::TimedOut
    {
        notes.push(
            "[the command exited but a background process still holds its output open; \
             later output is not shown]"
                .to_string(),
        );
    }
    drop(reader);
    if let Some(e) = tee_err {
        return Err(ExecError::Io(e));
    }

    if let Some(why) = death_reason(t.docker, t.id).await? {
        return Err(ExecError::SandboxDied { detail: why });
    }
    let mut oom_killed = false;
    if exit == Some(137) {
        let now = match oom_kill_count(t.docker, t.id, t.user).await {
            Ok((true, n)) => n,
            Ok((false, _)) => {
                let gone = ExecError::SandboxDied {
                    detail: format!("container {} stopped while the command ran", short(t.id)),
                };
                return Err(died_or(t, gone).await);
            }
            Err(e) => return Err(died_or(t, e).await),
        };
        if let (Some(n), Some(before)) = (now, *oom_seen)
            && n > before
        {
            oom_killed = true;
        }
        if now.is_some() {
            *oom_seen = now;
        }
    }
    // Timeouts and cancellation are told to the model by the bash tool
    // (tools::bash::render_for_model), the same for every executor.
    if oom_killed {
        exit = None;
        notes.push(format!(
            "[killed: out of memory (limit {} MiB)]",
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
        exit_code: exit.map(|c| c as i32),
        timed_out: end == End::TimedOut,
        cancelled: end == End::Cancelled,
        oom_killed,
        bytes_seen,
        duration_ms: started.elapsed().as_millis() as u64,
    })
}

/// Exit code if the exec has finished, `None` while it runs.
async fn quick_exit(t: &Target<'_>, exec_id: &str) -> Result<Option<i64>, ExecError> {
    let info = call(
        "inspect exec",
        short(t.id),
        QUICK_TIMEOUT,
        t.docker.inspect_exec(exec_id),
    )
    .await?;
    if info.running == Some(true) {
        return Ok(None);
    }
    Ok(Some(info.exit_code.unwrap_or(-1)))
}
