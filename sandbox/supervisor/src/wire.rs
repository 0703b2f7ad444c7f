//! The supervisor's half of the stream: whole frames to stdout (or to the
//! FIFO runner gave it, `--out`), one at a time, whichever thread sends
//! them.

use std::io::Write;
use std::sync::Mutex;

use runner_supervisor::protocol::{Reply, encode};

pub struct Out {
    w: Mutex<Box<dyn Write + Send>>,
}

impl Out {
    pub fn stdout() -> Out {
        Out {
            w: Mutex::new(Box::new(std::io::stdout())),
        }
    }

    /// Frames to the FIFO `path` (opened for writing), which runner reads
    /// directly, past the engine.
    pub fn fifo(path: &str) -> std::io::Result<Out> {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking: with no reader (not runner's kernel), the open
        // fails at once instead of hanging the start.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)?;
        // Then blocking again: a full FIFO holds the writer back.
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(Out {
            w: Mutex::new(Box::new(f)),
        })
    }

    /// Writes one frame; blocks while runner is not reading (which bounds
    /// what a flood can make the supervisor hold). An error means runner
    /// is gone.
    pub fn send(&self, reply: &Reply, payload: &[u8]) -> std::io::Result<()> {
        let frame = encode(reply, payload);
        let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
        w.write_all(&frame)?;
        w.flush()
    }

    /// Like [`Out::send`], unless `done` is set (checked under the lock,
    /// so a frame sent after `done` was set cannot overtake one sent
    /// before).
    pub fn send_unless(
        &self,
        done: &std::sync::atomic::AtomicBool,
        reply: &Reply,
        payload: &[u8],
    ) -> std::io::Result<()> {
        let frame = encode(reply, payload);
        let mut w = self.w.lock().unwrap_or_else(|e| e.into_inner());
        if done.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        w.write_all(&frame)?;
        w.flush()
    }

    /// Sets `done` with the stream locked (see [`Out::send_unless`]).
    pub fn mark(&self, done: &std::sync::atomic::AtomicBool) {
        let _w = self.w.lock().unwrap_or_else(|e| e.into_inner());
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn error(&self, id: u64, kind: &str, message: &str) -> std::io::Result<()> {
        self.send(
            &Reply::Error {
                id,
                kind: kind.to_string(),
                message: message.to_string(),
            },
            b"",
        )
    }
}
