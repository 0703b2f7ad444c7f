//! One local command: what the supervisor is asked to run (the shell
//! found on PATH, exactly the executor's environment, the persistent
//! shell's wrapper), its cancellation (the caller's or `shutdown`'s), and
//! the reply turned into the exec contract's output.

use std::collections::HashMap;
use std::io;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::{LocalExecutor, host};
use crate::exec::capture::Capture;
use crate::exec::shell::{MAX_STATE_BYTES, STATE_END};
use crate::exec::supervisor::run::{self as sup_run, Job, RunError};
use crate::exec::{ExecError, ExecOutput, ExecRequest, background_killed_note};

/// Takes a running command's token out of the live set when it ends.
struct Live<'a> {
    live: &'a Mutex<HashMap<u64, CancellationToken>>,
    key: u64,
}

impl Drop for Live<'_> {
    fn drop(&mut self) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

impl LocalExecutor {
    /// One command through the supervisor (see
    /// [`crate::exec::Executor::execute`]).
    pub(super) async fn run(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ExecError::Refused(
                "the local executor was shut down".into(),
            ));
        }
        let started = std::time::Instant::now();
        let mut capture = Capture::new(req.max_output_bytes).with_redactor(&self.redactor);
        if let Some(file) = &req.full_output {
            capture = capture.with_output_file(file)?;
        }
        self.check_shell()?;
        let job = self.job(&req.command, &req)?;
        let host = self.host.get_or_try_init(host::start).await?;
        let (cancel, _live) = self.register(&req);
        let mut tee_err: Option<io::Error> = None;
        let sink = |b: &[u8]| {
            if tee_err.is_none()
                && let Err(e) = capture.feed(b)
            {
                tee_err = Some(e);
            }
        };
        let ended = match sup_run::run(&host.supervisor, job, sink, &cancel).await {
            Ok(ended) => ended,
            Err(RunError::Spawn(m)) => return Err(self.spawn_error(m)),
            Err(e) => {
                return Err(ExecError::Unrecoverable {
                    detail: format!(
                        "the local supervisor: {e} ({})",
                        host.supervisor.last_words()
                    ),
                });
            }
        };
        if let Some(e) = tee_err.take() {
            return Err(ExecError::Io(e));
        }
        let killed = ended.timed_out || ended.cancelled;
        let (mut output, bytes_seen) = capture.finish()?;
        if ended.leftovers > 0 && !self.keep_background {
            push_note(&mut output, &background_killed_note(ended.leftovers));
        }
        // Killed (timeout, Ctrl-C): no dump; the state stays as it was.
        if let Some(session) = self.session.as_ref().filter(|_| !killed)
            && let Some(note) = session.save(ended.state.as_deref(), ended.state_overflow)
        {
            push_note(&mut output, &note);
        }
        Ok(ExecOutput {
            output,
            exit_code: if killed { None } else { ended.code },
            timed_out: ended.timed_out,
            cancelled: ended.cancelled,
            oom_killed: false,
            bytes_seen,
            duration_ms: crate::convert::millis_u64(started.elapsed()),
        })
    }

    /// What the supervisor runs for `command`: argv, environment, and
    /// whether the state descriptor is read. The protocol carries text:
    /// a variable that is not UTF-8 arrives lossily converted.
    fn job(&self, command: &str, req: &ExecRequest) -> Result<Job, ExecError> {
        let Some(cwd) = self.workdir.to_str() else {
            return Err(ExecError::Spawn(format!(
                "the working directory {} is not UTF-8",
                self.workdir.display()
            )));
        };
        let shell = self.shell.display().to_string();
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
            .collect();
        let (argv, state_bytes) = match &self.session {
            None => (vec![shell, "-c".into(), command.to_string()], None),
            Some(session) => {
                // argv[0] is "bash": ours is the one found on PATH. The
                // start is the workdir itself (`prepared.cwd` is its text).
                let mut p = session.prepare(command);
                if let Some(first) = p.argv.first_mut() {
                    *first = shell;
                }
                env.extend(p.env);
                (p.argv, u64::try_from(MAX_STATE_BYTES).ok())
            }
        };
        Ok(Job {
            argv,
            cwd: cwd.to_string(),
            env,
            timeout: req.timeout,
            keep_background: self.keep_background,
            nproc: None,
            state_bytes,
            // What the wrapper writes last: a kept background job may
            // hold the descriptor open after it.
            state_end: state_bytes.map(|_| format!("\0{STATE_END}\0")),
            stdin: None,
            user: None,
            switch_user: false,
        })
    }

    /// Registers a command's cancellation (`req`'s, or `shutdown`'s).
    fn register(&self, req: &ExecRequest) -> (CancellationToken, Live<'_>) {
        let cancel = req.cancel.child_token();
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, cancel.clone());
        if self.closed.load(Ordering::SeqCst) {
            // `shutdown` ran between the caller's check and the insert.
            cancel.cancel();
        }
        let live = Live {
            live: &self.live,
            key,
        };
        (cancel, live)
    }

    fn spawn_error(&self, message: String) -> ExecError {
        ExecError::Spawn(format!(
            "{message} (`{} -c` in {})",
            self.shell.display(),
            self.workdir.display()
        ))
    }
}

/// Appends `note` on a line of its own.
fn push_note(output: &mut String, note: &str) {
    if !output.is_empty() && !output.ends_with('\n') {
        output.push('\n');
    }
    output.push_str(note);
    output.push('\n');
}
