//! The protocol between runner (the host side) and the supervisor in the
//! sandbox: one long-lived byte stream each way, cut into frames.
//!
//! A frame is `u32` big-endian length `L`, then `L` bytes: a `u32`
//! big-endian header length `H`, `H` bytes of JSON (a [`Request`] or a
//! [`Reply`]), and the rest raw bytes (output, file content, the shell
//! state). Both ends bound what they accept: a frame longer than
//! [`MAX_FRAME`] or a header longer than [`MAX_HEADER`] is an error, never
//! an allocation. The host treats every byte from the sandbox as hostile:
//! a command can print anything, but it can only reach the stream through
//! the supervisor, which frames what it reads.

use serde::{Deserialize, Serialize};

/// Bumped on any change either end would misread.
pub const VERSION: u32 = 2;
/// Largest payload the supervisor puts in one frame.
pub const CHUNK: usize = 256 << 10;
/// Largest frame accepted (header, payload and the header length). An
/// exec's command and environment travel in its header, so this is above
/// what Linux lets a program's arguments and environment hold (2 MiB).
pub const MAX_FRAME: usize = 4 << 20;
/// Largest header accepted.
pub const MAX_HEADER: usize = MAX_FRAME - 8;
/// Stdin chunks runner may have sent and not seen [`Reply::Written`] for.
pub const STDIN_WINDOW: usize = 4;
/// Exit codes of the supervisor's file helpers (`--read-file`,
/// `--write-file`), which runner runs as commands.
pub mod file_codes {
    pub const NOT_FOUND: i32 = 66;
    pub const TOO_BIG: i32 = 67;
    pub const REFUSED: i32 = 68;
    pub const IO: i32 = 69;
}
/// The supervisor's process-list helper (`--procs`), run by runner as a
/// command: one line per process, `PID UID CMDLINE`, the command line's
/// NULs as spaces, every byte outside printable ASCII (and `\`) as
/// `\xNN`, at most [`PROCS_CMDLINE_MAX`] characters (then `...`).
pub const PROCS_FLAG: &str = "--procs";
/// Longest command line `--procs` prints, in characters.
pub const PROCS_CMDLINE_MAX: usize = 200;
/// The uid (and gid) the supervisor runs as: never the sandbox user's, so
/// commands cannot signal, trace or open it.
pub const SUPERVISOR_UID: u32 = 65533;
/// The uid (and gid) the `--procs` helper runs as (runner asks for it in
/// [`Request::Exec`]'s `user`), lent to nothing else: no command shares
/// its uid, so none can trace it or reopen its output through `/proc` to
/// forge or hide lines of the listing.
pub const HELPER_UID: u32 = 65532;

/// What runner asks. `id` ties replies to their request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Runs `argv` as the sandbox user (or `user`) in `cwd`, the
    /// supervisor's environment plus `env`, stdin `/dev/null`, stdout and
    /// stderr interleaved into [`Reply::Output`] frames, until it exits or
    /// `timeout_ms` passes (then every process of the sandbox but the
    /// supervisor is killed, whatever its uid).
    Exec {
        id: u64,
        argv: Vec<String>,
        cwd: String,
        env: Vec<(String, String)>,
        timeout_ms: u64,
        /// Leave what the command started in the background running.
        keep_background: bool,
        /// RLIMIT_NPROC for the command (gVisor counts it per sandbox).
        nproc: Option<u64>,
        /// Give the command file descriptor 3, a pipe whose content (at
        /// most this many bytes) comes back in the [`Reply::Exit`] payload.
        state_bytes: Option<u64>,
        /// The state is complete once it ends with these bytes: read no
        /// further (a background job may hold the descriptor open).
        #[serde(default)]
        state_end: Option<String>,
        /// stdin is a pipe fed by [`Request::Stdin`] frames, not
        /// `/dev/null`.
        stdin: bool,
        /// Run as this `(uid, gid)` rather than the sandbox's `--user`,
        /// with no capability at all (root included) and no supplementary
        /// group but `gid`. Refused for the supervisor's own uid or gid,
        /// and by a supervisor that could not confine itself (it cannot
        /// switch users).
        #[serde(default)]
        user: Option<(u32, u32)>,
        /// With `user`: the command keeps CAP_SETUID and CAP_SETGID (and
        /// nothing else), so it may run code as yet another user, as a
        /// verifier's `setpriv` does. Never the supervisor's other
        /// capabilities.
        #[serde(default)]
        switch_user: bool,
    },
    /// Bytes for the stdin of the command `id` (payload); an empty payload
    /// closes it.
    Stdin {
        id: u64,
    },
    /// Kills the command `id` with every other process of the sandbox
    /// but the supervisor.
    Kill {
        id: u64,
    },
    /// Kills every process of the sandbox but the supervisor, whatever
    /// its uid (a shell restart; before a verifier reads its reward).
    /// An unconfined supervisor (on the host) kills its running commands
    /// and the sessions it kept instead.
    KillAll {
        id: u64,
    },
    Ping {
        id: u64,
    },
    /// Outlive the stream: after runner is gone, stay until the expiry.
    Keep,
}

/// What the supervisor answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Reply {
    /// Sent once at start; `bash` is where bash is, when the image has it.
    Ready {
        version: u32,
        pid: u32,
        bash: Option<String>,
    },
    /// Bytes the command wrote (payload).
    Output {
        id: u64,
    },
    /// One [`Request::Stdin`] chunk of the command `id` was taken (written
    /// to its stdin, or dropped once it stopped reading): runner keeps at
    /// most [`STDIN_WINDOW`] chunks unanswered.
    Written {
        id: u64,
    },
    /// The command ended; the payload is its state (see
    /// [`Request::Exec::state_bytes`]) when it wrote one within bounds.
    Exit {
        id: u64,
        code: Option<i32>,
        signal: Option<i32>,
        timed_out: bool,
        cancelled: bool,
        /// Processes it left running that were killed after it exited.
        leftovers: u32,
        /// Processes still alive after the kill: the sandbox cannot be
        /// trusted with another command.
        stuck: u32,
        /// A background process still held the output open.
        output_open: bool,
        /// Whether a state came (the payload, possibly empty).
        state: bool,
        /// The command wrote more state than allowed (none is sent).
        state_overflow: bool,
    },
    /// The request `id` succeeded; `bytes` says how many processes a
    /// [`Request::KillAll`] found.
    Done {
        id: u64,
        bytes: u64,
    },
    /// The request `id` failed; `kind` is "spawn" (the command could not
    /// start) or "stuck" (processes survived the kill).
    Error {
        id: u64,
        kind: String,
        message: String,
    },
    Pong {
        id: u64,
    },
    /// A request that could not be read (runner's bug).
    Malformed {
        message: String,
    },
}

/// A frame that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLong(usize),
    HeaderTooLong(usize),
    BadHeader(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLong(n) => write!(f, "a frame of {n} bytes (limit {MAX_FRAME})"),
            FrameError::HeaderTooLong(n) => {
                write!(f, "a frame header of {n} bytes (limit {MAX_HEADER})")
            }
            FrameError::BadHeader(e) => write!(f, "an unreadable frame header: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// One frame, `header` serialized as JSON, then `payload`.
pub fn encode<T: Serialize>(header: &T, payload: &[u8]) -> Vec<u8> {
    // Serializing these plain enums cannot fail; an empty header would be
    // refused by the reader, never misread.
    let head = serde_json::to_vec(header).unwrap_or_default();
    let body = 4 + head.len() + payload.len();
    let mut out = Vec::with_capacity(4 + body);
    out.extend_from_slice(&u32::try_from(body).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&u32::try_from(head.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    out
}

/// Cuts a byte stream into frames as it arrives. Holds at most one frame
/// (plus what is fed at once) in memory.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start: frames are taken without
    /// moving the rest, which is moved down only once it is the smaller
    /// part (so a flood costs one copy of each byte, not one per frame).
    start: usize,
}

fn be_u32(b: &[u8]) -> usize {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    usize::try_from(u32::from_be_bytes(a)).unwrap_or(usize::MAX)
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Appends bytes read from the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held that are not a whole frame yet.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole frame: its header and payload. `Ok(None)` until one
    /// has arrived. After an error the stream cannot be trusted; stop
    /// reading it.
    pub fn next_frame<T: for<'de> Deserialize<'de>>(
        &mut self,
    ) -> Result<Option<(T, Vec<u8>)>, FrameError> {
        let buf = &self.buf[self.start..];
        if buf.len() < 4 {
            return Ok(None);
        }
        let len = be_u32(buf);
        if len > MAX_FRAME {
            return Err(FrameError::TooLong(len));
        }
        if len < 4 {
            return Err(FrameError::BadHeader(format!("a frame of {len} bytes")));
        }
        if buf.len() < 4 + len {
            return Ok(None);
        }
        let head_len = be_u32(&buf[4..]);
        if head_len > MAX_HEADER {
            return Err(FrameError::HeaderTooLong(head_len));
        }
        if head_len > len - 4 {
            return Err(FrameError::BadHeader(format!(
                "a header of {head_len} bytes in a frame of {len}"
            )));
        }
        let header = serde_json::from_slice::<T>(&buf[8..8 + head_len])
            .map_err(|e| FrameError::BadHeader(e.to_string()))?;
        let payload = buf[8 + head_len..4 + len].to_vec();
        self.start += 4 + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some((header, payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces() {
        let a = encode(&Reply::Output { id: 7 }, b"hello");
        let b = encode(&Reply::Done { id: 8, bytes: 3 }, b"");
        let all: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for byte in all {
            d.feed(&[byte]);
            while let Some(f) = d.next_frame::<Reply>().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(
            got,
            vec![
                (Reply::Output { id: 7 }, b"hello".to_vec()),
                (Reply::Done { id: 8, bytes: 3 }, Vec::new())
            ]
        );
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn oversized_and_inconsistent_frames_are_errors() {
        let mut d = Decoder::new();
        d.feed(&u32::MAX.to_be_bytes());
        assert!(matches!(
            d.next_frame::<Reply>(),
            Err(FrameError::TooLong(_))
        ));
        let mut d = Decoder::new();
        d.feed(&[0, 0, 0, 8, 0, 0, 0, 9, b'{', b'}', 0, 0]);
        assert!(matches!(
            d.next_frame::<Reply>(),
            Err(FrameError::BadHeader(_))
        ));
        let mut d = Decoder::new();
        d.feed(&[0, 0, 0, 6, 0, 0, 0, 2, b'{', b'}']);
        assert!(matches!(
            d.next_frame::<Reply>(),
            Err(FrameError::BadHeader(_))
        ));
    }
}
