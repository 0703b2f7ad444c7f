//! The host side of the in-sandbox supervisor (sandbox/supervisor): one
//! long-lived stream each way to the sandbox's main process, cut into
//! frames (`runner_supervisor::protocol`), with requests and their replies
//! matched by id. Backend-neutral: the docker backend feeds it the
//! container's attached stdin and stdout, the local one the pipes of the
//! supervisor it runs on the host (`exec::local`'s `host`); any stream
//! would do.
//!
//! Everything that comes from the sandbox is hostile: frames are bounded
//! by the decoder, replies to unknown requests are dropped, and a
//! malformed frame ends the stream (the sandbox counts as dead) instead of
//! being guessed at.

pub mod binary;
pub mod run;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use runner_supervisor::protocol::{Decoder, VERSION, encode};
pub use runner_supervisor::protocol::{Reply, Request};

/// How long the supervisor may take to say it is ready after the sandbox
/// starts.
pub const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long a write to the stream may block before the sandbox counts as
/// hung.
const WRITE_LIMIT: Duration = Duration::from_secs(10);
/// Frames queued per request before the reader waits for its consumer
/// (which bounds memory on a flood).
const QUEUE: usize = 32;

/// What arrives from the sandbox side of the stream.
pub enum Chunk {
    /// Bytes of the framed stream.
    Frames(Bytes),
    /// The supervisor's own diagnostics (its stderr).
    Log(Bytes),
}

pub type Input = Pin<Box<dyn AsyncWrite + Send>>;
pub type Output = Pin<Box<dyn Stream<Item = Result<Chunk, String>> + Send>>;

/// Why the stream cannot carry requests any more.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("the supervisor's stream closed{}", detail_suffix(.0))]
    Closed(String),
    #[error("the supervisor sent {0}")]
    Malformed(String),
    #[error("the supervisor speaks protocol version {0}, runner {VERSION}")]
    Version(u32),
    #[error("the supervisor did not answer within {0}s")]
    Timeout(u64),
}

fn detail_suffix(s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(": {s}")
    }
}

/// What the supervisor said when it started.
#[derive(Debug, Clone)]
pub struct Hello {
    pub pid: u32,
    /// Where bash is in the sandbox, when it has one.
    pub bash: Option<String>,
}

type Pending = Arc<Mutex<HashMap<u64, mpsc::Sender<(Reply, Vec<u8>)>>>>;

/// A connection to one sandbox's supervisor.
pub struct Supervisor {
    /// Whole frames for the writer task (`None`: close the stream). A
    /// frame is queued whole or not at all, so a send given up half way
    /// can never cut one.
    frames: mpsc::Sender<Option<Vec<u8>>>,
    writer: tokio::task::JoinHandle<()>,
    pending: Pending,
    next_id: AtomicU64,
    dead: Arc<Mutex<Option<StreamError>>>,
    hello: Mutex<Option<tokio::sync::oneshot::Receiver<Result<Hello, StreamError>>>>,
    /// The end of what the supervisor wrote on its stderr, for errors.
    log: Arc<Mutex<String>>,
    reader: tokio::task::JoinHandle<()>,
}

/// The replies to one request, in order.
pub struct Replies {
    rx: mpsc::Receiver<(Reply, Vec<u8>)>,
    id: u64,
    pending: Pending,
    dead: Arc<Mutex<Option<StreamError>>>,
}

impl Replies {
    /// The next reply; `Err` when the stream ended before it.
    pub async fn next(&mut self) -> Result<(Reply, Vec<u8>), StreamError> {
        match self.rx.recv().await {
            Some(r) => Ok(r),
            None => Err(self
                .dead
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_else(|| StreamError::Closed(String::new()))),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// Whether `r` is the last reply to its request.
fn is_last(r: &Reply) -> bool {
    matches!(
        r,
        Reply::Exit { .. } | Reply::Done { .. } | Reply::Error { .. } | Reply::Pong { .. }
    )
}

fn id_of(r: &Reply) -> Option<u64> {
    match r {
        Reply::Output { id }
        | Reply::Written { id }
        | Reply::Exit { id, .. }
        | Reply::Done { id, .. }
        | Reply::Error { id, .. }
        | Reply::Pong { id } => Some(*id),
        Reply::Ready { .. } | Reply::Malformed { .. } => None,
    }
}

impl Supervisor {
    /// Starts reading `output` at once (so nothing the sandbox sends is
    /// lost); [`Supervisor::ready`] waits for its greeting.
    pub fn connect(input: Input, output: Output) -> Supervisor {
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let dead = Arc::new(Mutex::new(None));
        let (hello_tx, hello_rx) = tokio::sync::oneshot::channel();
        let log = Arc::new(Mutex::new(String::new()));
        let reader = tokio::spawn(read(
            output,
            pending.clone(),
            dead.clone(),
            hello_tx,
            log.clone(),
        ));
        let (frames, rx) = mpsc::channel(QUEUE);
        let writer = tokio::spawn(write(input, rx, dead.clone()));
        Supervisor {
            log,
            frames,
            writer,
            pending,
            next_id: AtomicU64::new(1),
            dead,
            hello: Mutex::new(Some(hello_rx)),
            reader,
        }
    }

    /// Waits (once) for the supervisor's greeting.
    pub async fn ready(&self, limit: Duration) -> Result<Hello, StreamError> {
        let rx = self.hello.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(rx) = rx else {
            return Err(StreamError::Malformed("a second greeting request".into()));
        };
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(self.why_dead()),
            Err(_) => Err(StreamError::Timeout(limit.as_secs())),
        }
    }

    /// The last lines the supervisor wrote about itself (its stderr).
    pub fn last_words(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .trim()
            .to_string()
    }

    /// Why the stream ended, once it has.
    pub fn died(&self) -> Option<StreamError> {
        self.dead.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn why_dead(&self) -> StreamError {
        self.died()
            .unwrap_or_else(|| StreamError::Closed(String::new()))
    }

    /// A fresh request id.
    pub fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `req` (whose id is `id`, from [`Supervisor::id`]) and returns
    /// its replies.
    pub async fn request(
        &self,
        id: u64,
        req: &Request,
        payload: &[u8],
    ) -> Result<Replies, StreamError> {
        let (tx, rx) = mpsc::channel(QUEUE);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let replies = Replies {
            rx,
            id,
            pending: self.pending.clone(),
            dead: self.dead.clone(),
        };
        self.send(req, payload).await?;
        Ok(replies)
    }

    /// Sends a request that gets no reply (kill, keep, stdin). Cancel
    /// safe: the frame is queued whole or not at all.
    pub async fn send(&self, req: &Request, payload: &[u8]) -> Result<(), StreamError> {
        if let Some(e) = self.died() {
            return Err(e);
        }
        let frame = encode(req, payload);
        match tokio::time::timeout(WRITE_LIMIT, self.frames.send(Some(frame))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.why_dead()),
            Err(_) => Err(StreamError::Timeout(WRITE_LIMIT.as_secs())),
        }
    }

    /// Queues `req` without waiting (for a drop guard); false when the
    /// queue is full or the stream gone.
    pub fn send_now(&self, req: &Request) -> bool {
        self.frames.try_send(Some(encode(req, b""))).is_ok()
    }

    /// Closes runner's side: the supervisor kills everything and exits
    /// (unless told to keep the sandbox).
    pub async fn close(&self) {
        let _ = tokio::time::timeout(WRITE_LIMIT, self.frames.send(None)).await;
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

/// Writes queued frames in order; a write that fails or hangs past
/// [`WRITE_LIMIT`] ends the stream.
async fn write(
    mut input: Input,
    mut frames: mpsc::Receiver<Option<Vec<u8>>>,
    dead: Arc<Mutex<Option<StreamError>>>,
) {
    while let Some(frame) = frames.recv().await {
        let Some(frame) = frame else {
            let _ = tokio::time::timeout(WRITE_LIMIT, input.shutdown()).await;
            return;
        };
        let sent = async {
            input.write_all(&frame).await?;
            input.flush().await
        };
        let err = match tokio::time::timeout(WRITE_LIMIT, sent).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => StreamError::Closed(e.to_string()),
            Err(_) => StreamError::Timeout(WRITE_LIMIT.as_secs()),
        };
        let mut d = dead.lock().unwrap_or_else(|e| e.into_inner());
        if d.is_none() {
            *d = Some(err);
        }
        return;
    }
}

/// How much of the supervisor's stderr is kept.
const LOG_MAX: usize = 2048;

async fn read(
    mut output: Output,
    pending: Pending,
    dead: Arc<Mutex<Option<StreamError>>>,
    hello: tokio::sync::oneshot::Sender<Result<Hello, StreamError>>,
    log: Arc<Mutex<String>>,
) {
    let mut decoder = Decoder::new();
    let mut hello = Some(hello);
    let end = 'stream: loop {
        let chunk = match output.next().await {
            Some(Ok(Chunk::Frames(b))) => b,
            Some(Ok(Chunk::Log(b))) => {
                let text = String::from_utf8_lossy(&b[..b.len().min(LOG_MAX)]).into_owned();
                tracing::debug!(supervisor = %text.trim_end(), "supervisor says");
                let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
                l.push_str(&text);
                if l.len() > LOG_MAX {
                    let cut = l.len() - LOG_MAX;
                    let cut = (cut..l.len()).find(|i| l.is_char_boundary(*i)).unwrap_or(0);
                    l.drain(..cut);
                }
                continue;
            }
            Some(Err(e)) => break StreamError::Closed(e),
            None => break StreamError::Closed(String::new()),
        };
        decoder.feed(&chunk);
        loop {
            let (reply, payload) = match decoder.next_frame::<Reply>() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => break 'stream StreamError::Malformed(e.to_string()),
            };
            match reply {
                Reply::Ready { version, pid, bash } => {
                    let r = if version == VERSION {
                        Ok(Hello { pid, bash })
                    } else {
                        Err(StreamError::Version(version))
                    };
                    let bad = r.is_err();
                    match hello.take() {
                        Some(tx) => {
                            let _ = tx.send(r);
                        }
                        None => break 'stream StreamError::Malformed("a second greeting".into()),
                    }
                    if bad {
                        break 'stream StreamError::Version(version);
                    }
                }
                Reply::Malformed { message } => {
                    break 'stream StreamError::Malformed(format!(
                        "word that it could not read runner's request: {message}"
                    ));
                }
                other => {
                    let Some(id) = id_of(&other) else { continue };
                    let last = is_last(&other);
                    let tx = {
                        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                        if last {
                            p.remove(&id)
                        } else {
                            p.get(&id).cloned()
                        }
                    };
                    // A reply nobody waits for (a request given up) is dropped.
                    if let Some(tx) = tx {
                        let _ = tx.send((other, payload)).await;
                    }
                }
            }
        }
    };
    *dead.lock().unwrap_or_else(|e| e.into_inner()) = Some(end.clone());
    if let Some(tx) = hello.take() {
        let _ = tx.send(Err(end));
    }
    // Every waiter sees the end.
    pending.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

#[cfg(test)]
mod tests;
