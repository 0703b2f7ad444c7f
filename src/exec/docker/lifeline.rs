//! The sandbox's tie to its runner, and the engine's word on how it ended.
//!
//! The container is created with an open stdin (`OpenStdin`, `StdinOnce`)
//! and `AutoRemove`; its main process is the supervisor, which speaks the
//! framed protocol on that stdin and its stdout. Before the container
//! starts, runner attaches to both and holds the connection for the
//! executor's lifetime: it is the supervisor's stream (see
//! `exec::supervisor`). However runner ends, SIGKILL included, the kernel
//! closes the connection, the engine closes the container's stdin, the
//! supervisor sees EOF, kills everything and exits, and the engine
//! removes the container with its anonymous volumes. Nothing runner would
//! have to do after its death is needed.
//!
//! With `AutoRemove` a dead container vanishes before anyone can inspect
//! it, so the engine's `die` and `oom` events for it are followed from
//! creation on: they say how it ended for the error message.

use super::client::ENGINE;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{AttachContainerOptionsBuilder, EventsOptionsBuilder};
use futures::StreamExt;

use super::client::{CALL_TIMEOUT, call, short};
use crate::exec::ExecError;
use crate::exec::supervisor::{Chunk, Request, Supervisor};

/// How the container ended, as far as the engine said.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Ending {
    /// Exit code of the main process (`die` event).
    pub exit_code: Option<i64>,
    /// The kernel's OOM killer fired in the container (`oom` event).
    pub oom: bool,
}

/// The supervisor on the container's attached stdin and stdout, and the
/// container's event watcher.
pub struct Lifeline {
    pub supervisor: Supervisor,
    ending: Arc<Mutex<Ending>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Lifeline {
    /// Follows the container's events since `since` (unix seconds, before
    /// its creation) and attaches to its stdin. Call before starting it.
    pub async fn attach(
        docker: &Docker,
        id: &str,
        since: u64,
        fifo: Option<tokio::net::unix::pipe::Receiver>,
    ) -> Result<Lifeline, ExecError> {
        let ending = Arc::new(Mutex::new(Ending::default()));
        let watcher = tokio::spawn(watch(docker.clone(), id.to_string(), since, ending.clone()));
        let opts = AttachContainerOptionsBuilder::new()
            .stdin(true)
            .stream(true)
            .stdout(true)
            .stderr(true)
            .build();
        let attached = call(
            "attach to the container",
            short(id),
            CALL_TIMEOUT,
            docker.attach_container(id, Some(opts)),
        )
        .await;
        let attached = match attached {
            Ok(a) => a,
            Err(e) => {
                watcher.abort();
                return Err(e);
            }
        };
        let attach = attached.output.map(|item| match item {
            Ok(LogOutput::StdErr { message }) => Ok(Chunk::Log(message)),
            Ok(other) => Ok(Chunk::Frames(other.into_bytes())),
            Err(e) => Err(e.to_string()),
        });
        let output: crate::exec::supervisor::Output = match fifo {
            None => Box::pin(attach),
            // Frames come on the FIFO (see `channel`); the attach stream
            // ending (the container gone) ends the whole stream.
            Some(rx) => Box::pin(merged(rx, Box::pin(attach))),
        };
        Ok(Lifeline {
            supervisor: Supervisor::connect(attached.input, output),
            ending,
            watcher,
        })
    }

    /// Tells the main process to stay after the stream closes, so the
    /// container (and the work in it) outlives this runner until its
    /// expiry or `runner gc`.
    pub async fn keep(&self) -> Result<(), ExecError> {
        self.supervisor
            .send(&Request::Keep, b"")
            .await
            .map_err(|e| ExecError::Engine {
                engine: ENGINE,
                op: "keep the container",
                detail: e.to_string(),
            })
    }

    /// How the container ended, waiting up to `limit` for the engine's
    /// `die` event when it has not come yet.
    pub async fn ending(&self, limit: Duration) -> Ending {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let now = self.snapshot();
            if now.exit_code.is_some() || tokio::time::Instant::now() >= until {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the engine has reported an OOM kill of the container.
    pub fn oom_seen(&self) -> bool {
        self.snapshot().oom
    }

    fn snapshot(&self) -> Ending {
        self.ending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Lifeline {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// The supervisor's frames from the FIFO and its stderr from the attach
/// stream, as they come. The attach stream ending means the container is
/// gone: what the FIFO still holds (the supervisor's last frames) is read
/// out first, then the stream ends.
fn merged(
    rx: tokio::net::unix::pipe::Receiver,
    attach: crate::exec::supervisor::Output,
) -> impl futures::Stream<Item = Result<Chunk, String>> + Send {
    struct Merge {
        rx: tokio::net::unix::pipe::Receiver,
        attach: crate::exec::supervisor::Output,
        /// The attach stream ended: drain the FIFO, then end.
        draining: bool,
        done: bool,
        /// Reused across reads: each chunk is split off it, and the space
        /// is never zeroed (a fresh 256 KiB buffer per read was most of
        /// runner's own CPU per call).
        buf: bytes::BytesMut,
    }
    let start = Merge {
        rx,
        attach,
        draining: false,
        done: false,
        buf: bytes::BytesMut::new(),
    };
    futures::stream::unfold(start, |mut m| async move {
        use tokio::io::AsyncReadExt;
        if m.done {
            return None;
        }
        if m.buf.capacity() < FIFO_READ / 4 {
            m.buf.reserve(FIFO_READ);
        }
        if m.draining {
            // Nothing writes any more: whatever is left is final.
            return match m.rx.try_read_buf(&mut m.buf) {
                Ok(n) if n > 0 => {
                    let chunk = m.buf.split().freeze();
                    Some((Ok(Chunk::Frames(chunk)), m))
                }
                _ => {
                    m.done = true;
                    Some((Err("the container's stream closed".to_string()), m))
                }
            };
        }
        tokio::select! {
            biased;
            r = m.rx.read_buf(&mut m.buf) => match r {
                Ok(n) if n > 0 => {
                    let chunk = m.buf.split().freeze();
                    Some((Ok(Chunk::Frames(chunk)), m))
                }
                Ok(_) => {
                    m.done = true;
                    Some((Err("the supervisor's channel closed".to_string()), m))
                }
                Err(e) => {
                    m.done = true;
                    Some((Err(e.to_string()), m))
                }
            },
            item = m.attach.next() => match item {
                Some(Ok(c)) => Some((Ok(c), m)),
                Some(Err(e)) => {
                    m.draining = true;
                    Some((Ok(Chunk::Log(bytes::Bytes::from(format!("attach stream: {e}\n")))), m))
                }
                None => {
                    m.draining = true;
                    Some((Ok(Chunk::Log(bytes::Bytes::new())), m))
                }
            },
        }
    })
}

/// How much of the FIFO one read takes.
const FIFO_READ: usize = 256 << 10;

/// Records the container's `oom` and `die` events until it dies or the
/// stream ends.
async fn watch(docker: Docker, id: String, since: u64, ending: Arc<Mutex<Ending>>) {
    let filters = HashMap::from([
        ("container".to_string(), vec![id]),
        ("type".to_string(), vec!["container".to_string()]),
        (
            "event".to_string(),
            vec!["die".to_string(), "oom".to_string()],
        ),
    ]);
    let opts = EventsOptionsBuilder::new()
        .since(&since.to_string())
        .filters(&filters)
        .build();
    let mut events = docker.events(Some(opts));
    while let Some(Ok(ev)) = events.next().await {
        let mut e = ending.lock().unwrap_or_else(|e| e.into_inner());
        match ev.action.as_deref() {
            Some("oom") => e.oom = true,
            Some("die") => {
                e.exit_code = ev
                    .actor
                    .and_then(|a| a.attributes)
                    .and_then(|a| a.get("exitCode").and_then(|c| c.parse().ok()))
                    .or(Some(-1));
                return;
            }
            _ => {}
        }
    }
}
