//! TEMPORARY minimal output capping for the docker executor.
//! TODO(merge): replace with `exec::capture::Capture` once it lands; this
//! only keeps head + tail, counts bytes, and tees to an optional file.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;

/// Most bytes written to the full-output file.
const MAX_FULL_OUTPUT_BYTES: u64 = 64 << 20;

/// Keeps the first and last `max / 2` bytes of a stream and counts the rest.
pub struct Capped {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_max: usize,
    tail_max: usize,
    seen: u64,
    file: Option<std::fs::File>,
    file_written: u64,
}

impl Capped {
    /// A capture keeping at most `max` bytes in memory; `full` also gets a
    /// copy of everything (up to a limit).
    pub fn new(max: usize, full: Option<&Path>) -> std::io::Result<Self> {
        let file = full.map(std::fs::File::create).transpose()?;
        let head_max = max / 2;
        Ok(Capped {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_max,
            tail_max: max - head_max,
            seen: 0,
            file,
            file_written: 0,
        })
    }

    /// Adds one chunk.
    pub fn push(&mut self, mut chunk: &[u8]) {
        self.seen += chunk.len() as u64;
        if let Some(f) = self.file.as_mut() {
            let room = MAX_FULL_OUTPUT_BYTES.saturating_sub(self.file_written);
            let n = (chunk.len() as u64).min(room) as usize;
            // A failing tee must not fail the command; stop teeing instead.
            if n > 0 && f.write_all(&chunk[..n]).is_err() {
                self.file = None;
            }
            self.file_written += n as u64;
        }
        let take = self
            .head_max
            .saturating_sub(self.head.len())
            .min(chunk.len());
        self.head.extend_from_slice(&chunk[..take]);
        chunk = &chunk[take..];
        if chunk.len() >= self.tail_max {
            self.tail.clear();
            self.tail.extend(&chunk[chunk.len() - self.tail_max..]);
        } else {
            let overflow = (self.tail.len() + chunk.len()).saturating_sub(self.tail_max);
            self.tail.drain(..overflow);
            self.tail.extend(chunk);
        }
    }

    /// Every byte pushed so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The kept text, with a marker where bytes were left out.
    pub fn text(&self) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.seen > kept {
            out.push_str(&format!("\n[... {} bytes omitted ...]\n", self.seen - kept));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail() {
        let mut c = Capped::new(10, None).unwrap();
        c.push(b"0123456789abcdefghij");
        c.push(b"XYZ");
        assert_eq!(c.seen(), 23);
        assert_eq!(c.text(), "01234\n[... 13 bytes omitted ...]\nijXYZ");
        let mut s = Capped::new(100, None).unwrap();
        s.push(b"hello");
        assert_eq!(s.text(), "hello");
    }
}
