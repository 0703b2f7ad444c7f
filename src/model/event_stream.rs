//! The one read loop of a streamed model reply: body chunks (each wait
//! bounded by the idle timeout) through the SSE decoder into a vendor's
//! parser, until the parser has its end marker or the body ends. Both HTTP
//! clients use it, so bounds, timeouts and error mapping are the same.

use super::http::{BodyReader, MAX_BODY_BYTES};
use super::sse::{SseDecoder, SseEvent};
use super::{ModelError, ProgressSink};

/// The most bytes one event may hold. The largest real ones are server
/// tool results (a page of search results, some KiB to a few hundred);
/// a server that never ends its event is cut here.
pub(crate) const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// What one stream may take before it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamLimits {
    /// The whole body, as for a reply sent in one piece.
    pub body_bytes: usize,
    /// One event (its field lines together).
    pub event_bytes: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            body_bytes: MAX_BODY_BYTES,
            event_bytes: MAX_EVENT_BYTES,
        }
    }
}

/// A vendor's parser of the events of one reply.
pub(crate) trait EventParser {
    /// Takes one event; an error ends the attempt.
    fn event(&mut self, ev: &SseEvent, progress: ProgressSink<'_>) -> Result<(), ModelError>;

    /// Whether the stream's end marker arrived (nothing after it is read).
    fn is_done(&self) -> bool;
}

/// Feeds `body` to `parser` until the end marker or the end of the body,
/// under the default limits. A stall or a broken connection is a retryable
/// `StreamError`; a stream over a limit is a `Protocol` error; a body with
/// not one byte is `EmptyBody` (not retried: a server that cannot stream a
/// request answers so every time).
pub(crate) async fn read(
    url: &str,
    body: &mut BodyReader,
    parser: &mut impl EventParser,
    progress: ProgressSink<'_>,
) -> Result<(), ModelError> {
    let seen = read_with(body, parser, progress, StreamLimits::default()).await?;
    if seen == 0 {
        return Err(ModelError::EmptyBody {
            url: url.to_string(),
        });
    }
    Ok(())
}

/// [`read`] under `limits`; the number of body bytes read.
pub(crate) async fn read_with(
    body: &mut BodyReader,
    parser: &mut impl EventParser,
    progress: ProgressSink<'_>,
    limits: StreamLimits,
) -> Result<usize, ModelError> {
    let mut decoder = SseDecoder::new();
    let mut seen = 0usize;
    while let Some(chunk) = body.next_chunk().await? {
        seen = seen.saturating_add(chunk.len());
        if seen > limits.body_bytes {
            return Err(ModelError::Protocol(format!(
                "the streamed reply is larger than {} bytes",
                limits.body_bytes
            )));
        }
        for ev in decoder.push(&chunk) {
            check_event(ev.data.len(), limits)?;
            parser.event(&ev, progress)?;
            if parser.is_done() {
                return Ok(seen);
            }
        }
        check_event(decoder.pending_bytes(), limits)?;
    }
    // A last event the server closed without its blank line.
    if let Some(ev) = decoder.finish() {
        parser.event(&ev, progress)?;
    }
    Ok(seen)
}

fn check_event(bytes: usize, limits: StreamLimits) -> Result<(), ModelError> {
    if bytes > limits.event_bytes {
        return Err(ModelError::Protocol(format!(
            "a stream event is larger than {} bytes",
            limits.event_bytes
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelProgress;
    use bytes::Bytes;
    use futures::StreamExt;
    use std::time::{Duration, Instant};

    /// Keeps every event; done at a `data: END` event.
    #[derive(Default)]
    struct Collect {
        events: Vec<(Option<String>, String)>,
        done: bool,
    }

    impl EventParser for Collect {
        fn event(&mut self, ev: &SseEvent, _: ProgressSink<'_>) -> Result<(), ModelError> {
            if ev.data == "FAIL" {
                return Err(ModelError::Protocol("parser refused".into()));
            }
            self.done = ev.data == "END";
            self.events.push((ev.event.clone(), ev.data.clone()));
            Ok(())
        }

        fn is_done(&self) -> bool {
            self.done
        }
    }

    fn body(chunks: Vec<&'static [u8]>, then_stall: bool) -> BodyReader {
        let chunks = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
        );
        let stream = if then_stall {
            chunks.chain(futures::stream::pending()).boxed()
        } else {
            chunks.boxed()
        };
        BodyReader::from_stream(stream, Duration::from_millis(100))
    }

    async fn run(
        mut body: BodyReader,
        limits: StreamLimits,
    ) -> (Result<usize, ModelError>, Vec<(Option<String>, String)>) {
        let sink = |_: ModelProgress| {};
        let mut p = Collect::default();
        let r = read_with(&mut body, &mut p, &sink, limits).await;
        (r, p.events)
    }

    fn ev(name: &str, data: &str) -> (Option<String>, String) {
        (Some(name.to_string()), data.to_string())
    }

    #[tokio::test]
    async fn events_split_across_any_chunk_boundary_arrive_whole() {
        let text: &'static [u8] =
            "event: a\r\ndata: {\"t\":\"é→世\"}\r\n\r\nevent: b\ndata: 2\n\n".as_bytes();
        for size in 1..text.len() {
            let chunks: Vec<&'static [u8]> = text.chunks(size).collect();
            let (r, got) = run(body(chunks, false), StreamLimits::default()).await;
            assert!(r.is_ok(), "chunk size {size}: {r:?}");
            assert_eq!(
                got,
                vec![ev("a", "{\"t\":\"é→世\"}"), ev("b", "2")],
                "chunk size {size}"
            );
        }
    }

    #[tokio::test]
    async fn reading_stops_at_the_end_marker_and_a_last_unterminated_event_counts() {
        // After END the stream stalls: it is never read that far.
        let (r, got) = run(
            body(vec![b"data: 1\n\ndata: END\n\n"], true),
            StreamLimits::default(),
        )
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(got.len(), 2);
        let (r, got) = run(
            body(vec![b"data: 1\n\ndata: la"], false),
            StreamLimits::default(),
        )
        .await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(got[1].1, "la");
        let (r, _) = run(
            body(vec![b"data: FAIL\n\n"], false),
            StreamLimits::default(),
        )
        .await;
        assert!(matches!(r, Err(ModelError::Protocol(_))), "{r:?}");
    }

    #[tokio::test]
    async fn a_silent_stream_times_out_with_a_retryable_error() {
        let started = Instant::now();
        let (r, got) = run(body(vec![b"data: 1\n\n"], true), StreamLimits::default()).await;
        assert_eq!(got.len(), 1, "the event before the stall was taken");
        match r {
            Err(ref e @ ModelError::StreamError { ref kind, .. }) => {
                assert_eq!(kind, "idle_timeout");
                assert!(e.is_retryable());
            }
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_broken_connection_is_a_retryable_stream_error() {
        let chunks = futures::stream::iter(vec![
            Ok(Bytes::from_static(b"data: 1\n\n")),
            Err(std::io::Error::other("connection reset by peer")),
        ]);
        let (r, _) = run(
            BodyReader::from_stream(chunks, Duration::from_secs(5)),
            StreamLimits::default(),
        )
        .await;
        match r {
            Err(ModelError::StreamError {
                kind,
                message,
                retryable: true,
            }) => {
                assert_eq!(kind, "connection");
                assert!(message.contains("connection reset"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn oversized_events_and_bodies_are_refused() {
        let small = StreamLimits {
            body_bytes: 1024,
            event_bytes: 16,
        };
        // One event over the limit, whole in one chunk.
        let (r, got) = run(body(vec![b"data: 0123456789abcdefXYZ\n\n"], false), small).await;
        assert!(
            matches!(&r, Err(ModelError::Protocol(m)) if m.contains("larger than 16")),
            "{r:?}"
        );
        assert!(got.is_empty());
        // A line that never ends, fed a little at a time.
        let (r, _) = run(body(vec![b"data: 01234", b"56789", b"abcdef"], true), small).await;
        assert!(matches!(&r, Err(ModelError::Protocol(_))), "{r:?}");
        // Many small lines of one event that never ends.
        let (r, _) = run(body(vec![b"data: 1\ndata: 2\ndata: 3\n"], true), small).await;
        assert!(matches!(&r, Err(ModelError::Protocol(_))), "{r:?}");
        // Small events, but too many bytes in all.
        let many: &'static [u8] = "data: x\n\n".repeat(200).leak().as_bytes();
        let (r, got) = run(body(vec![many], false), small).await;
        assert!(
            matches!(&r, Err(ModelError::Protocol(m)) if m.contains("larger than 1024")),
            "{r:?}"
        );
        assert!(got.is_empty(), "refused before it is parsed");
        // At the limit is fine.
        let (r, got) = run(body(vec![b"data: 0123456789\n\n"], false), small).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(got.len(), 1);
    }
}
