//! One command: an exec of the launcher (`launch::LAUNCH`), which runs the
//! command with `bash -c` (or `sh -c`), kills what it left running and
//! reports how it ended. The exec's stream is read while its state is
//! polled, so neither a held-open stream nor a hung daemon can stall the
//! command past its timeout.

use super::client::ENGINE;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures::StreamExt;

use super::client::{QUICK_TIMEOUT, call, short};
use super::config::user_is_root;
use super::container::death_reason;
use super::kill::{kill_command_processes, spare_list, wait_exit};
use super::launch::{LAUNCH, LAUNCH_CMD, Report};
use super::lifeline::Lifeline;
use super::oom::OomCounter;
use crate::exec::capture::Capture;
use crate::exec::{ExecError, ExecOutput, ExecRequest, background_killed_note};
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
    /// Pids the kill spares when commands run as root (the idle processes).
    pub spare: &'a [u32],
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
    /// Leave what a command started in the background running after it.
    pub keep_background: bool,
    pub oom: &'a OomCounter,
    pub lifeline: Option<&'a Lifeline>,
}

/// Why the wait for a command ended.
#[derive(PartialEq)]
enum End {
    Exited(i64),
    TimedOut,
    Cancelled,
}

/// Turns a Docker failure during a command into `SandboxDied` when the
/// container is gone, so the loop can tell the two apart.
/// The engine may refuse an exec ("is not running") a moment before
/// inspect shows the container as stopped, so this looks a few times.
async fn died_or(t: &Target<'_>, err: ExecError) -> ExecError {
    for _ in 0..5 {
        match death_reason(t.docker, t.id, t.lifeline).await {
            Ok(Some(why)) => return ExecError::SandboxDied { detail: why },
            Ok(None) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(_) => break,
        }
    }
    err
}

/// Where the exec's stream goes: stdout (the command's stdout and stderr)
/// to the capture, stderr through the launcher's report.
struct Sink<'c> {
    cap: &'c mut Capture,
    report: Report,
    /// The first failure to write the full-output file; reading goes on so
    /// the exec's stream never backs up, and the error is reported at the
    /// end.
    tee_err: Option<std::io::Error>,
}

impl Sink<'_> {
    fn take(&mut self, item: LogOutput) {
        match item {
            LogOutput::StdErr { message } => {
                let rest = self.report.feed(&message);
                self.out(&rest);
            }
            other => self.out(&other.into_bytes()),
        }
    }

    fn out(&mut self, bytes: &[u8]) {
        if self.tee_err.is_none()
            && !bytes.is_empty()
            && let Err(e) = self.cap.feed(bytes)
        {
            self.tee_err = Some(e);
        }
    }

    fn end(&mut self) {
        let rest = self.report.flush();
        self.out(&rest);
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
    let spare = spare_list(t.spare);
    let root = if user_is_root(t.user) { "1" } else { "" };
    let mode = if t.keep_background { "keep" } else { "kill" };
    let launch_env = format!("RUNNER_LAUNCH={LAUNCH}");
    let launch = match t.nproc {
        // bash and busybox spell it -u, dash -p.
        Some(n) => format!(
            "{{ ulimit -u {n} || ulimit -p {n}; }} 2>/dev/null || \
             {{ echo 'runner: cannot limit the number of processes' >&2; exit 126; }}; {LAUNCH_CMD}"
        ),
        None => LAUNCH_CMD.to_string(),
    };
    let mut env: Vec<&str> = t.env.iter().map(String::as_str).collect();
    env.push(launch_env.as_str());
    let created = call(
        "create exec",
        short(t.id),
        QUICK_TIMEOUT,
        t.docker.create_exec(
            t.id,
            CreateExecOptions {
                cmd: Some(vec![
                    "sh",
                    "-c",
                    &launch,
                    "runner",
                    req.command.as_str(),
                    mode,
                    spare.as_str(),
                    root,
                ]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                user: Some(t.user),
                working_dir: Some(t.workdir),
                env: Some(env),
                ..Default::default()
            },
        ),
    )
    .await;
    let exec = match created {
        Ok(e) => e,
        Err(e) => return Err(died_or(t, e).await),
    };
    let mut output = match call(
        "start exec",
        short(t.id),
        QUICK_TIMEOUT,
        t.docker.start_exec(&exec.id, None),
    )
    .await
    {
        Ok(StartExecResults::Attached { output, .. }) => output,
        Ok(StartExecResults::Detached) => {
            return Err(ExecError::Engine {
                engine: ENGINE,
                op: "start exec",
                detail: format!("{}: exec started detached", short(t.id)),
            });
        }
        Err(e) => return Err(died_or(t, e).await),
    };

    let mut sink = Sink {
        cap: &mut cap,
        report: Report::default(),
        tee_err: None,
    };
    let deadline = tokio::time::sleep(req.timeout);
    tokio::pin!(deadline);
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.reset();
    let mut eof = false;
    let mut exited: Option<i64> = None;

    // The command is over once the exec has exited and either the
    // launcher's report came or the output closed. An exec that exited
    // with neither means the command killed its launcher (`kill -9 -1`)
    // and may still be running: wait on, for its output to close or the
    // deadline.
    let end = loop {
        if let Some(code) = exited
            && (eof || sink.report.status().is_some())
        {
            break End::Exited(code);
        }
        tokio::select! {
            biased;
            _ = req.cancel.cancelled() => break End::Cancelled,
            _ = &mut deadline => break End::TimedOut,
            item = output.next(), if !eof => match item {
                Some(Ok(chunk)) => sink.take(chunk),
                Some(Err(_)) | None => {
                    eof = true;
                    if exited.is_none() {
                        match quick_exit(t, &exec.id).await {
                            Ok(code) => exited = code,
                            Err(e) => return Err(died_or(t, e).await),
                        }
                    }
                }
            },
            _ = poll.tick(), if exited.is_none() => {
                match quick_exit(t, &exec.id).await {
                    Ok(code) => exited = code,
                    Err(e) => return Err(died_or(t, e).await),
                }
            }
        }
    };

    let mut notes = Vec::new();
    let mut exit = match end {
        End::Exited(code) => Some(code),
        End::TimedOut | End::Cancelled => {
            // Keep reading while killing: the engine handles a container's
            // exec exits in order and waits for each exec's output to be
            // consumed, so an unread stream would stall the control exec.
            let stop = async {
                kill_command_processes(t.docker, t.id, t.user, t.spare, t.pids_limit).await?;
                wait_exit(t.docker, &exec.id, t.id, EXIT_WAIT_LIMIT).await
            };
            tokio::pin!(stop);
            let stopped = loop {
                tokio::select! {
                    r = &mut stop => break r,
                    item = output.next(), if !eof => match item {
                        Some(Ok(chunk)) => sink.take(chunk),
                        Some(Err(_)) | None => eof = true,
                    },
                }
            };
            if let Err(e) = stopped {
                return Err(died_or(t, e).await);
            }
            None
        }
    };
    let drain_until = tokio::time::Instant::now() + DRAIN_LIMIT;
    while !eof {
        match tokio::time::timeout_at(drain_until, output.next()).await {
            Ok(Some(Ok(chunk))) => sink.take(chunk),
            Ok(Some(Err(_)) | None) => eof = true,
            Err(_) => break,
        }
    }
    if !eof && matches!(end, End::Exited(_)) {
        notes.push(
            "[the command exited but a background process still holds its output open; \
             later output is not shown]"
                .to_string(),
        );
    }
    sink.end();
    drop(output);
    let status = sink.report.status();
    if let Some(e) = sink.tee_err.take() {
        return Err(ExecError::Io(e));
    }

    if let Some(why) = death_reason(t.docker, t.id, t.lifeline).await? {
        return Err(ExecError::SandboxDied { detail: why });
    }
    if matches!(end, End::Exited(_)) {
        match status {
            Some(st) => {
                if st.found > 0 && !t.keep_background {
                    notes.push(background_killed_note(st.found));
                }
                if st.stuck > 0 {
                    // The launcher's own kill did not finish the job: the
                    // full protocol, or the sandbox is given up.
                    if let Err(e) =
                        kill_command_processes(t.docker, t.id, t.user, t.spare, t.pids_limit).await
                    {
                        return Err(died_or(t, e).await);
                    }
                }
            }
            None => {
                // The command killed its launcher, so its own exit code is
                // unknown; what it left running goes like any leftover.
                exit = None;
                notes.push(
                    "[the command killed runner's launcher (its parent shell, e.g. with \
                     `kill -9 -1`), so its exit code is unknown]"
                        .to_string(),
                );
                if !t.keep_background
                    && let Err(e) =
                        kill_command_processes(t.docker, t.id, t.user, t.spare, t.pids_limit).await
                {
                    return Err(died_or(t, e).await);
                }
            }
        }
    }

    let oom_killed = match t.oom.after(t.docker, t.id, t.user).await {
        Ok((true, now)) => {
            let killed = match (now, oom_before) {
                (Some(n), Some(b)) if n > b => n - b,
                _ => 0,
            };
            if now.is_some() {
                *oom_seen = now;
            }
            killed
        }
        Ok((false, _)) => {
            let gone = ExecError::SandboxDied {
                detail: format!("container {} stopped while the command ran", short(t.id)),
            };
            return Err(died_or(t, gone).await);
        }
        Err(e) => return Err(died_or(t, e).await),
    };
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
        exit_code: exit.map(crate::convert::i32_from_i64),
        timed_out: end == End::TimedOut,
        cancelled: end == End::Cancelled,
        oom_killed: oom_killed > 0,
        bytes_seen,
        duration_ms: crate::convert::millis_u64(started.elapsed()),
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
