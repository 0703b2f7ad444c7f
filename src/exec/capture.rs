//! Output capture: bounded memory whatever a command prints.
//!
//! A [`Capture`] is fed the interleaved output of one command chunk by chunk.
//! It keeps the first half of its budget (head) and a ring of the last half
//! (tail), counts every byte, and can stream everything to the run's
//! full-output file up to [`MAX_FULL_OUTPUT_BYTES`]. Secrets are redacted on
//! the stream before either path sees a byte, so the file keeps exactly
//! what the command wrote (binary included) minus the secrets.
//! [`truncate_middle`] applies the same head + tail elision to text already
//! in memory.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::hostfs::OutputFile;
use crate::redact::{Redactor, StreamRedactor};

/// Cap on the full-output file of one command (64 MiB); past it the file gets
/// a one-line marker instead of more bytes.
pub const MAX_FULL_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;

/// The line put where bytes were elided:
/// `\n[... {omitted} bytes omitted of {total} total ...]\n`.
pub fn omission_marker(omitted: u64, total: u64) -> String {
    format!("\n[... {omitted} bytes omitted of {total} total ...]\n")
}

/// Keeps at most `max_bytes` of `text` (its first half and its last half) and
/// puts [`omission_marker`] between them. The cut points move inward to char
/// boundaries, so the kept part may be up to 6 bytes shorter; the marker
/// itself comes on top of `max_bytes`. Text that fits is returned unchanged.
pub fn truncate_middle(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    let mut head_end = max_bytes / 2;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - (max_bytes - max_bytes / 2);
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let omitted = (tail_start - head_end) as u64;
    let mut out = String::with_capacity(head_end + (text.len() - tail_start) + 64);
    out.push_str(&text[..head_end]);
    out.push_str(&omission_marker(omitted, text.len() as u64));
    out.push_str(&text[tail_start..]);
    out
}

/// Bounded-memory collector of one command's output.
#[derive(Debug)]
pub struct Capture {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Bytes of the (redacted) stream that went to neither head nor tail.
    dropped: u64,
    bytes_seen: u64,
    redactor: Option<StreamRedactor>,
    file: Option<FullOutput>,
    /// Why the full-output file stopped being written: a host failure
    /// (disk full, I/O error) that must not end the run as if the sandbox
    /// had died; the model and the trajectory are told instead.
    file_error: Option<String>,
}

impl Capture {
    /// A capture keeping at most `max_bytes` of output in memory
    /// (`max_bytes / 2` of head, the rest as tail).
    pub fn new(max_bytes: usize) -> Capture {
        let head_cap = max_bytes / 2;
        Capture {
            head_cap,
            tail_cap: max_bytes - head_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            dropped: 0,
            bytes_seen: 0,
            redactor: None,
            file: None,
            file_error: None,
        }
    }

    /// Also streams every byte to `path` (created or truncated), up to
    /// [`MAX_FULL_OUTPUT_BYTES`].
    #[cfg(test)]
    pub fn with_full_output(self, path: &Path) -> io::Result<Capture> {
        self.with_full_output_capped(path, MAX_FULL_OUTPUT_BYTES)
    }

    /// Like [`Capture::with_full_output`] with an explicit cap in bytes.
    #[cfg(test)]
    pub fn with_full_output_capped(mut self, path: &Path, cap: u64) -> io::Result<Capture> {
        let file = File::create(path).map_err(|e| with_path(e, "creating", path))?;
        self.file = Some(FullOutput::new(path.to_path_buf(), file, cap, None));
        Ok(self)
    }

    /// Streams every byte to a new file of a run's output directory (never
    /// through a link: see [`crate::hostfs`]), up to
    /// [`MAX_FULL_OUTPUT_BYTES`] and within the run's output budget.
    pub fn with_output_file(mut self, target: &OutputFile) -> io::Result<Capture> {
        let path = target.path();
        let file = target.create()?;
        self.file = Some(FullOutput::new(
            path,
            file,
            MAX_FULL_OUTPUT_BYTES,
            Some(target.clone()),
        ));
        Ok(self)
    }

    /// Replaces `redactor`'s secrets with `[REDACTED]` in the returned text
    /// and the full-output file, even when a secret is split across chunks.
    pub fn with_redactor(mut self, redactor: &Redactor) -> Capture {
        self.redactor = redactor.stream();
        self
    }

    /// Every byte fed so far, before redaction.
    pub fn bytes_seen(&self) -> u64 {
        self.bytes_seen
    }

    /// Takes the next chunk of output. A full-output file that cannot be
    /// written is dropped (and said so in the result), never an error.
    pub fn feed(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.bytes_seen += chunk.len() as u64;
        match self.redactor.as_mut() {
            None => self.keep(chunk),
            Some(redactor) => {
                let clean = redactor.push(chunk);
                self.keep(&clean)
            }
        }
    }

    /// Flushes the file (appending the cap marker when bytes were left out)
    /// and renders head + [`omission_marker`] + tail, decoded lossily, with
    /// the number of bytes seen.
    pub fn finish(mut self) -> io::Result<(String, u64)> {
        if let Some(mut redactor) = self.redactor.take() {
            let rest = redactor.finish();
            self.keep(&rest)?;
        }
        if let Some(file) = self.file.take()
            && let Err(e) = file.close()
        {
            self.file_failed(e);
        }
        let seen = self.bytes_seen;
        let note = self.file_error.take();
        let mut text = self.render();
        if let Some(e) = note {
            text.push_str(&format!("\n[runner could not save the full output: {e}]"));
        }
        Ok((text, seen))
    }

    fn file_failed(&mut self, e: io::Error) {
        tracing::warn!("{e}");
        if let Some(target) = self.file.as_ref().and_then(|f| f.budget.as_ref()) {
            target.note_lost(e.to_string());
        }
        self.file_error.get_or_insert(e.to_string());
        self.file = None;
    }

    fn keep(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Some(file) = self.file.as_mut()
            && let Err(e) = file.write(bytes)
        {
            self.file_failed(e);
        }
        let to_head = bytes.len().min(self.head_cap - self.head.len());
        self.head.extend_from_slice(&bytes[..to_head]);
        let rest = &bytes[to_head..];
        if rest.len() >= self.tail_cap {
            self.dropped += (self.tail.len() + rest.len() - self.tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&rest[rest.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + rest.len()).saturating_sub(self.tail_cap);
            self.dropped += overflow as u64;
            self.tail.drain(..overflow);
            self.tail.extend(rest);
        }
        Ok(())
    }

    fn render(self) -> String {
        let mut tail: Vec<u8> = self.tail.into();
        if self.dropped == 0 {
            let mut all = self.head;
            all.append(&mut tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        // A cut through a multi-byte character would show up as U+FFFD next
        // to the marker; count those few bytes as omitted instead.
        let head_keep = self.head.len() - incomplete_suffix_len(&self.head);
        let tail_skip = tail
            .iter()
            .take(3)
            .take_while(|b| is_continuation(**b))
            .count();
        let omitted = self.dropped + (self.head.len() - head_keep + tail_skip) as u64;
        let mut out = String::from_utf8_lossy(&self.head[..head_keep]).into_owned();
        out.push_str(&omission_marker(omitted, self.bytes_seen));
        out.push_str(&String::from_utf8_lossy(&tail[tail_skip..]));
        out
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Length of a UTF-8 sequence cut short at the end of `bytes` (0 if none).
fn incomplete_suffix_len(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(4) {
        let b = bytes[bytes.len() - back];
        if is_continuation(b) {
            continue;
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if need > back { back } else { 0 };
    }
    0
}

fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("{what} the full-output file {}: {e}", path.display()),
    )
}

/// The run's full-output file for one command.
#[derive(Debug)]
struct FullOutput {
    path: PathBuf,
    out: BufWriter<File>,
    written: u64,
    not_written: u64,
    cap: u64,
    /// The run's output budget, shared by all its files.
    budget: Option<OutputFile>,
    /// The budget, not this file's cap, stopped the writing.
    budget_spent: bool,
}

impl FullOutput {
    fn new(path: PathBuf, file: File, cap: u64, budget: Option<OutputFile>) -> FullOutput {
        FullOutput {
            path,
            out: BufWriter::with_capacity(64 * 1024, file),
            written: 0,
            not_written: 0,
            cap,
            budget,
            budget_spent: false,
        }
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let room = self.cap.saturating_sub(self.written);
        // At most `bytes.len()`, so it fits a `usize` whatever `room` is.
        let mut now = usize::try_from(room).map_or(bytes.len(), |r| r.min(bytes.len()));
        if let Some(b) = &self.budget {
            // The budget grants at most what was asked.
            let granted = usize::try_from(b.take_budget(now as u64)).map_or(now, |g| g.min(now));
            self.budget_spent |= granted < now;
            now = granted;
        }
        if now > 0 {
            self.out
                .write_all(&bytes[..now])
                .map_err(|e| with_path(e, "writing", &self.path))?;
            self.written += now as u64;
        }
        self.not_written += (bytes.len() - now) as u64;
        Ok(())
    }

    fn close(mut self) -> io::Result<()> {
        if self.not_written > 0 {
            let line = if self.budget_spent {
                format!(
                    "\n[... {} bytes not written: the run's output budget (--disk) is used up ...]\n",
                    self.not_written
                )
            } else {
                format!(
                    "\n[... {} bytes not written: full-output file capped at {} bytes ...]\n",
                    self.not_written, self.cap
                )
            };
            self.out
                .write_all(line.as_bytes())
                .map_err(|e| with_path(e, "writing", &self.path))?;
        }
        self.out
            .flush()
            .map_err(|e| with_path(e, "flushing", &self.path))
    }
}

#[cfg(test)]
mod tests;
