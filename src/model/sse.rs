//! A Server-Sent Events decoder for a byte stream that arrives in chunks
//! split anywhere (mid-line, mid-CRLF, even mid-UTF-8 character).
//!
//! It follows the WHATWG event-stream rules that matter for model APIs:
//! `event:` and `data:` fields, multi-line data joined with `\n`, comment
//! lines (`:`), and LF, CRLF or CR line ends. Trailing spaces on a data line
//! are dropped: the Anthropic API pads JSON data lines with them, and no
//! JSON payload ends in meaningful whitespace.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if any (the spec's default type is "message").
    pub event: Option<String>,
    /// All `data:` lines of the event joined with `\n`.
    pub data: String,
    /// The `id:` field, if any.
    pub id: Option<String>,
}

/// Incremental decoder: feed chunks with [`SseDecoder::push`], then call
/// [`SseDecoder::finish`] at end of stream.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a leading `\n` belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: Vec<String>,
    id: Option<String>,
    has_field: bool,
    /// Bytes of the current event's field lines so far (see
    /// [`SseDecoder::pending_bytes`]).
    field_bytes: usize,
}

impl SseDecoder {
    /// A decoder with no buffered input.
    pub fn new() -> Self {
        SseDecoder::default()
    }

    /// Feeds one chunk and returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' => self.end_line(&mut out),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut out);
                }
                _ => self.line.push(b),
            }
        }
        out
    }

    /// Bytes held for the event not yet dispatched: its field lines and
    /// the unterminated line. The caller bounds it (a server that never
    /// ends a line or an event must not grow this without limit).
    pub fn pending_bytes(&self) -> usize {
        self.field_bytes.saturating_add(self.line.len())
    }

    /// Ends the stream: a last event without its blank line is still
    /// dispatched (servers that close right after the data line exist).
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut out);
        }
        self.dispatch(&mut out);
        out.pop()
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let bytes = std::mem::take(&mut self.line);
        if bytes.is_empty() {
            self.dispatch(out);
            return;
        }
        // A whole line is complete here, so a split UTF-8 character has been
        // reassembled; invalid bytes become U+FFFD instead of failing.
        let line = String::from_utf8_lossy(&bytes);
        if line.starts_with(':') {
            return;
        }
        self.field_bytes = self.field_bytes.saturating_add(bytes.len());
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => {
                self.event = Some(value.trim().to_string());
                self.has_field = true;
            }
            "data" => {
                self.data
                    .push(value.trim_end_matches([' ', '\t']).to_string());
                self.has_field = true;
            }
            "id" => {
                self.id = Some(value.trim().to_string());
                self.has_field = true;
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        self.field_bytes = 0;
        if !self.has_field {
            return;
        }
        self.has_field = false;
        let data = std::mem::take(&mut self.data).join("\n");
        let event = self.event.take();
        let id = self.id.take();
        if data.is_empty() && event.is_none() {
            return;
        }
        out.push(SseEvent { event, data, id });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(d.push(c));
        }
        out.extend(d.finish());
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
            id: None,
        }
    }

    #[test]
    fn event_and_data_lines() {
        let got = all(&[b"event: ping\ndata: {\"type\": \"ping\"}\n\ndata: x\n\n"]);
        assert_eq!(
            got,
            vec![ev(Some("ping"), "{\"type\": \"ping\"}"), ev(None, "x")]
        );
    }

    #[test]
    fn multi_line_data_comments_and_crlf() {
        let got = all(&[b": keep-alive\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\n"]);
        assert_eq!(got, vec![ev(Some("a"), "one\ntwo")]);
        let got = all(&[b"data: cr\r\rdata: next\r"]);
        assert_eq!(got, vec![ev(None, "cr"), ev(None, "next")]);
    }

    #[test]
    fn trailing_padding_is_dropped() {
        let got = all(&[b"event: x\ndata: {\"a\":1}        \n\n"]);
        assert_eq!(got, vec![ev(Some("x"), "{\"a\":1}")]);
    }

    #[test]
    fn chunks_split_anywhere_even_mid_utf8_and_mid_crlf() {
        let text =
            "event: t\r\ndata: {\"text\":\"héllo → 世界\"}\r\n\r\nevent: u\r\ndata: 2\r\n\r\n";
        let bytes = text.as_bytes();
        let whole = all(&[bytes]);
        assert_eq!(whole.len(), 2);
        for size in 1..bytes.len() {
            let chunks: Vec<&[u8]> = bytes.chunks(size).collect();
            assert_eq!(all(&chunks), whole, "chunk size {size}");
        }
        assert_eq!(whole[0].data, "{\"text\":\"héllo → 世界\"}");
    }

    #[test]
    fn last_event_without_blank_line_is_kept() {
        assert_eq!(all(&[b"data: [DONE]"]), vec![ev(None, "[DONE]")]);
        assert_eq!(all(&[b"data: [DONE]\n"]), vec![ev(None, "[DONE]")]);
    }

    #[test]
    fn pending_bytes_count_the_unfinished_event_only() {
        let mut d = SseDecoder::new();
        assert!(d.push(b": comment\nevent: e\ndata: 12345").is_empty());
        assert_eq!(d.pending_bytes(), "event: e".len() + "data: 12345".len());
        assert_eq!(d.push(b"\n\n").len(), 1);
        assert_eq!(d.pending_bytes(), 0);
    }

    #[test]
    fn id_field_and_empty_events() {
        let got = all(&[b"id: 7\ndata: x\n\n\n\nretry: 10\n\n"]);
        assert_eq!(
            got,
            vec![SseEvent {
                event: None,
                data: "x".into(),
                id: Some("7".into())
            }]
        );
    }
}
