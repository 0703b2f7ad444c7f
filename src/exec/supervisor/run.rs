//! One command through the supervisor: the request, its output as it
//! streams, Ctrl-C, and a backstop for a supervisor that stops answering.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Reply, Request, StreamError, Supervisor};

/// Past the command's own timeout (which the supervisor enforces), how
/// long runner waits before it asks for the kill itself.
const BACKSTOP_GRACE: Duration = Duration::from_secs(3);
/// After a kill was asked for, how long the supervisor has to report the
/// command's end.
const KILL_GRACE: Duration = Duration::from_secs(6);

/// What to run.
pub struct Job {
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub keep_background: bool,
    pub nproc: Option<u64>,
    /// Collect up to this many bytes the command writes on fd 3.
    pub state_bytes: Option<u64>,
}

/// How it ended, as the supervisor reported it.
#[derive(Debug, Default)]
pub struct Ended {
    /// Exit code; a command killed by signal N reports 128+N, as a shell
    /// would.
    pub code: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub leftovers: u32,
    pub stuck: u32,
    pub output_open: bool,
    pub state: Option<Vec<u8>>,
    pub state_overflow: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The command could not start (no such shell, a bad directory).
    #[error("{0}")]
    Spawn(String),
    /// The supervisor did not report the end of a killed command.
    #[error("the supervisor did not report the end of the command {0}s after it was killed")]
    NoAnswer(u64),
}

/// Runs `job`, handing each piece of output to `sink` as it comes.
pub async fn run(
    sup: &Supervisor,
    job: Job,
    mut sink: impl FnMut(&[u8]),
    cancel: &CancellationToken,
) -> Result<Ended, RunError> {
    let id = sup.id();
    let req = Request::Exec {
        id,
        argv: job.argv,
        cwd: job.cwd,
        env: job.env,
        timeout_ms: crate::convert::millis_u64(job.timeout),
        keep_background: job.keep_background,
        nproc: job.nproc,
        state_bytes: job.state_bytes,
    };
    let mut replies = sup.request(id, &req, b"").await?;
    let backstop = tokio::time::sleep(job.timeout.saturating_add(BACKSTOP_GRACE));
    tokio::pin!(backstop);
    let mut kill_sent = false;
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled(), if !kill_sent => {
                sup.send(&Request::Kill { id }, b"").await?;
                kill_sent = true;
                backstop.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
            }
            _ = &mut backstop => {
                if kill_sent {
                    return Err(RunError::NoAnswer(KILL_GRACE.as_secs()));
                }
                sup.send(&Request::Kill { id }, b"").await?;
                kill_sent = true;
                backstop.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
            }
            r = replies.next() => match r? {
                (Reply::Output { .. }, bytes) => sink(&bytes),
                (Reply::Exit { code, signal, timed_out, cancelled, leftovers, stuck, output_open, state, state_overflow, .. }, payload) => {
                    return Ok(Ended {
                        code: code.or(signal.map(|s| s.saturating_add(128))),
                        timed_out: timed_out || (kill_sent && !cancel.is_cancelled()),
                        cancelled,
                        leftovers,
                        stuck,
                        output_open,
                        state: state.then_some(payload),
                        state_overflow,
                    });
                }
                (Reply::Error { message, .. }, _) => return Err(RunError::Spawn(message)),
                // Nothing else answers an exec; a confused sandbox is ignored.
                _ => {}
            },
        }
    }
}

/// Reads the sandbox's regular file `path`, at most `max_bytes`.
pub async fn read_file(
    sup: &Supervisor,
    path: &str,
    max_bytes: u64,
) -> Result<Result<Vec<u8>, (String, String)>, StreamError> {
    let id = sup.id();
    let req = Request::ReadFile {
        id,
        path: path.to_string(),
        max_bytes,
    };
    let mut replies = sup.request(id, &req, b"").await?;
    let mut data = Vec::new();
    loop {
        match replies.next().await? {
            (Reply::Data { .. }, bytes) => {
                if u64::try_from(data.len().saturating_add(bytes.len())).unwrap_or(u64::MAX)
                    > max_bytes
                {
                    return Ok(Err((
                        "too_big".into(),
                        format!("{path} is bigger than {max_bytes} bytes"),
                    )));
                }
                data.extend_from_slice(&bytes);
            }
            (Reply::Done { .. }, _) => return Ok(Ok(data)),
            (Reply::Error { kind, message, .. }, _) => return Ok(Err((kind, message))),
            _ => {}
        }
    }
}

/// Writes `data` as the sandbox's file `path`.
pub async fn write_file(
    sup: &Supervisor,
    path: &str,
    data: &[u8],
) -> Result<Result<(), (String, String)>, StreamError> {
    let id = sup.id();
    let req = Request::WriteFile {
        id,
        path: path.to_string(),
    };
    let mut replies = sup.request(id, &req, data).await?;
    loop {
        match replies.next().await? {
            (Reply::Done { .. }, _) => return Ok(Ok(())),
            (Reply::Error { kind, message, .. }, _) => return Ok(Err((kind, message))),
            _ => {}
        }
    }
}

/// Kills every process of the sandbox user: how many there were.
pub async fn kill_all(sup: &Supervisor) -> Result<Result<u64, String>, StreamError> {
    let id = sup.id();
    let mut replies = sup.request(id, &Request::KillAll { id }, b"").await?;
    loop {
        match replies.next().await? {
            (Reply::Done { bytes, .. }, _) => return Ok(Ok(bytes)),
            (Reply::Error { message, .. }, _) => return Ok(Err(message)),
            _ => {}
        }
    }
}
