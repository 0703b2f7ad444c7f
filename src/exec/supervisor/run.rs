//! One command through the supervisor: the request, its output as it
//! streams, Ctrl-C, and a backstop for a supervisor that stops answering.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Reply, Request, StreamError, Supervisor};
use runner_supervisor::protocol::{MAX_FRAME, STDIN_WINDOW};

/// Past the command's own timeout (which the supervisor enforces), how
/// long runner waits before it asks for the kill itself.
const BACKSTOP_GRACE: Duration = Duration::from_secs(3);
/// After a kill was asked for, how long the supervisor has to report the
/// command's end.
const KILL_GRACE: Duration = Duration::from_secs(6);
/// Largest piece of stdin in one frame.
const STDIN_CHUNK: usize = 256 << 10;

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
    /// The state is whole once it ends with these bytes.
    pub state_end: Option<String>,
    /// What the command reads on stdin; `None`: `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Run as this `(uid, gid)`, not the sandbox user (no capabilities).
    pub user: Option<(u32, u32)>,
    /// With `user`: keep CAP_SETUID and CAP_SETGID (a verifier's test.sh).
    pub switch_user: bool,
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
        state_end: job.state_end,
        stdin: job.stdin.is_some(),
        user: job.user,
        switch_user: job.switch_user,
    };
    let frame = runner_supervisor::protocol::encode(&req, b"").len();
    if frame > MAX_FRAME {
        return Err(RunError::Spawn(format!(
            "the command with its environment takes {frame} bytes, more than the {MAX_FRAME} \
             a command may have; write long scripts to a file first"
        )));
    }
    let stdin = job.stdin;
    let mut replies = sup.request(id, &req, b"").await?;
    // Whatever ends this future early (a caller giving up), the command
    // must not run on behind the next one.
    let mut guard = KillOnDrop {
        sup,
        id,
        armed: true,
    };
    // stdin goes in chunks, at most STDIN_WINDOW unanswered, while the
    // output keeps flowing.
    let chunks: Vec<&[u8]> = stdin
        .as_deref()
        .map(|d| d.chunks(STDIN_CHUNK).collect())
        .unwrap_or_default();
    let mut fed = Feed {
        next: 0,
        in_flight: 0,
        open: stdin.is_some(),
    };
    fed.more(sup, id, &chunks).await?;
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
                (Reply::Written { .. }, _) => {
                    fed.in_flight = fed.in_flight.saturating_sub(1);
                    fed.more(sup, id, &chunks).await?;
                }
                (Reply::Exit { code, signal, timed_out, cancelled, leftovers, stuck, output_open, state, state_overflow, .. }, payload) => {
                    guard.armed = false;
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
                (Reply::Error { message, .. }, _) => {
                    guard.armed = false;
                    return Err(RunError::Spawn(message));
                }
                // Nothing else answers an exec; a confused sandbox is ignored.
                _ => {}
            },
        }
    }
}

/// Where a command's stdin stands.
struct Feed {
    next: usize,
    in_flight: usize,
    open: bool,
}

impl Feed {
    /// Sends the next chunks the window allows, then the end of stdin
    /// (an empty chunk, queued behind them) once all are out.
    async fn more(
        &mut self,
        sup: &Supervisor,
        id: u64,
        chunks: &[&[u8]],
    ) -> Result<(), StreamError> {
        while self.open && self.in_flight < STDIN_WINDOW && self.next < chunks.len() {
            sup.send(&Request::Stdin { id }, chunks[self.next]).await?;
            self.next += 1;
            self.in_flight += 1;
        }
        if self.open && self.next == chunks.len() {
            sup.send(&Request::Stdin { id }, b"").await?;
            self.open = false;
        }
        Ok(())
    }
}

/// Asks for the kill of a command whose caller stopped waiting for it.
struct KillOnDrop<'a> {
    sup: &'a Supervisor,
    id: u64,
    armed: bool,
}

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.sup.send_now(&Request::Kill { id: self.id });
        }
    }
}

/// Why a file request failed inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFailure {
    NotFound,
    TooBig,
    /// A link, or not a regular file.
    Refused,
    Io,
}

/// The supervisor's file helper (its own binary, run as a command, so as
/// the sandbox user): `Ok(Err(..))` when it refused, with its message.
async fn file_helper(
    sup: &Supervisor,
    args: Vec<String>,
    stdin: Option<Vec<u8>>,
    max_out: u64,
) -> Result<Result<Vec<u8>, (FileFailure, String)>, RunError> {
    let mut argv = vec![super::binary::IN_SANDBOX.to_string()];
    argv.extend(args);
    // Room for the helper's one-line message on failure.
    let mut out = Vec::new();
    let (ended, over) = run_helper(
        sup,
        argv,
        stdin,
        None,
        FILE_LIMIT,
        max_out.saturating_add(4096),
        |b| {
            out.extend_from_slice(b);
            true
        },
    )
    .await?;
    let too_long = u64::try_from(out.len()).unwrap_or(u64::MAX) > max_out;
    if over || (ended.code == Some(0) && too_long) {
        return Ok(Err((FileFailure::TooBig, String::new())));
    }
    use runner_supervisor::protocol::file_codes as c;
    let failure = match ended.code {
        Some(0) if !ended.timed_out && !ended.cancelled => return Ok(Ok(out)),
        Some(c::NOT_FOUND) => FileFailure::NotFound,
        Some(c::TOO_BIG) => FileFailure::TooBig,
        Some(c::REFUSED) => FileFailure::Refused,
        _ => FileFailure::Io,
    };
    let text = String::from_utf8_lossy(&out[..out.len().min(512)])
        .trim()
        .to_string();
    let text = if ended.timed_out {
        format!("no answer within {}s", FILE_LIMIT.as_secs())
    } else {
        text
    };
    Ok(Err((failure, text)))
}

/// Runs one of runner's own helper commands (`argv`, in `/`, with `stdin`
/// when given, within `timeout`, as the sandbox user or `user`), handing
/// its output to `sink` up to `max` bytes. It starts nothing, so what runs
/// beside it is left alone. Past `max`, or when `sink` says stop, the
/// helper is killed; the flag says it went past.
pub async fn run_helper(
    sup: &Supervisor,
    argv: Vec<String>,
    stdin: Option<Vec<u8>>,
    user: Option<(u32, u32)>,
    timeout: Duration,
    max: u64,
    mut sink: impl FnMut(&[u8]) -> bool,
) -> Result<(Ended, bool), RunError> {
    let job = Job {
        argv,
        cwd: "/".into(),
        env: Vec::new(),
        timeout,
        keep_background: true,
        nproc: None,
        state_bytes: None,
        state_end: None,
        stdin,
        user,
        switch_user: false,
    };
    let stop = CancellationToken::new();
    let (mut seen, mut over) = (0u64, false);
    let ended = run(
        sup,
        job,
        |b| {
            if stop.is_cancelled() {
                return;
            }
            let len = u64::try_from(b.len()).unwrap_or(u64::MAX);
            let keep = usize::try_from(max.saturating_sub(seen).min(len)).unwrap_or(usize::MAX);
            seen = seen.saturating_add(len);
            over = seen > max;
            if !sink(&b[..keep.min(b.len())]) || over {
                stop.cancel();
            }
        },
        &stop,
    )
    .await?;
    Ok((ended, over))
}

/// Longest a single file read or write may take.
const FILE_LIMIT: Duration = Duration::from_secs(120);

/// Reads the sandbox's regular file `path`, at most `max_bytes`.
pub async fn read_file(
    sup: &Supervisor,
    path: &str,
    max_bytes: u64,
) -> Result<Result<Vec<u8>, (FileFailure, String)>, RunError> {
    let args = vec![
        "--read-file".to_string(),
        path.to_string(),
        max_bytes.to_string(),
    ];
    file_helper(sup, args, None, max_bytes).await
}

/// Writes `data` as the sandbox's file `path`.
pub async fn write_file(
    sup: &Supervisor,
    path: &str,
    data: &[u8],
) -> Result<Result<(), (FileFailure, String)>, RunError> {
    let args = vec!["--write-file".to_string(), path.to_string()];
    Ok(file_helper(sup, args, Some(data.to_vec()), 4096)
        .await?
        .map(|_| ()))
}

/// Longest the process listing may take.
const PROCS_LIMIT: Duration = Duration::from_secs(30);
/// Most bytes of listing accepted (a line is at most ~230 bytes).
const PROCS_MAX_BYTES: u64 = 4 << 20;

/// What runs in the sandbox, as the supervisor's `--procs` helper read it
/// from `/proc` (the helper and the supervisor left out): `Ok(Err(..))`
/// when the helper failed, with why.
pub async fn processes(
    sup: &Supervisor,
) -> Result<Result<Vec<crate::exec::ProcessInfo>, String>, RunError> {
    use runner_supervisor::proclist::parse_line;
    let argv = vec![
        super::binary::IN_SANDBOX.to_string(),
        runner_supervisor::protocol::PROCS_FLAG.to_string(),
    ];
    let mut out = Vec::new();
    let helper = runner_supervisor::protocol::HELPER_UID;
    let (ended, over) = run_helper(
        sup,
        argv,
        None,
        Some((helper, helper)),
        PROCS_LIMIT,
        PROCS_MAX_BYTES,
        |b| {
            out.extend_from_slice(b);
            true
        },
    )
    .await?;
    if over {
        return Ok(Err(format!(
            "the process list is longer than {PROCS_MAX_BYTES} bytes"
        )));
    }
    let text = String::from_utf8_lossy(&out);
    if ended.code != Some(0) || ended.timed_out || ended.cancelled {
        return Ok(Err(format!(
            "the process-list helper failed (exit {:?}{}): {}",
            ended.code,
            if ended.timed_out { ", timed out" } else { "" },
            text.chars().take(300).collect::<String>().trim()
        )));
    }
    let mut procs = Vec::new();
    for line in text.lines() {
        match parse_line(line) {
            Some((pid, uid, cmdline)) => procs.push(crate::exec::ProcessInfo { pid, uid, cmdline }),
            None => {
                return Ok(Err(format!(
                    "an unreadable line in the process list: {:?}",
                    line.chars().take(100).collect::<String>()
                )));
            }
        }
    }
    Ok(Ok(procs))
}

/// Kills every process of the sandbox but the supervisor, whatever its
/// uid: how many there were.
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
