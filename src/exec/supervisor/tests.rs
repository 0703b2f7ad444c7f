//! The host side of the stream against hostile input: any bytes, in any
//! pieces, never panic the decoder nor grow it past one frame; a
//! malformed or oversized frame ends the stream and every waiter sees it.

use super::*;
use proptest::prelude::*;
use runner_supervisor::protocol::{Decoder, MAX_FRAME, Reply, encode};

fn split(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    for c in cuts {
        let end = (at + c).min(data.len());
        out.push(data[at..end].to_vec());
        at = end;
    }
    out.push(data[at..].to_vec());
    out
}

proptest! {
    #[test]
    fn any_bytes_never_panic_or_grow_past_a_frame(
        data in proptest::collection::vec(any::<u8>(), 0..4096),
        cuts in proptest::collection::vec(0usize..512, 0..16),
    ) {
        let mut d = Decoder::new();
        'feed: for piece in split(&data, &cuts) {
            d.feed(&piece);
            loop {
                match d.next_frame::<Reply>() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
            prop_assert!(d.pending() <= MAX_FRAME + 8 + piece.len());
        }
    }

    #[test]
    fn frames_survive_any_cutting(
        ids in proptest::collection::vec(any::<u64>(), 1..20),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        cuts in proptest::collection::vec(0usize..97, 0..40),
    ) {
        let mut all = Vec::new();
        for id in &ids {
            all.extend(encode(&Reply::Output { id: *id }, &payload));
        }
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for piece in split(&all, &cuts) {
            d.feed(&piece);
            while let Some((r, p)) = d.next_frame::<Reply>().unwrap() {
                prop_assert_eq!(&p, &payload);
                got.push(r);
            }
        }
        let want: Vec<Reply> = ids.iter().map(|id| Reply::Output { id: *id }).collect();
        prop_assert_eq!(got, want);
    }
}

type Feed = futures::channel::mpsc::UnboundedSender<Result<Chunk, String>>;

/// A supervisor that has greeted; the test sends the rest when it wants.
async fn fake() -> (Supervisor, Feed) {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let hello = encode(
        &Reply::Ready {
            version: runner_supervisor::protocol::VERSION,
            pid: 1,
            bash: None,
        },
        b"",
    );
    tx.unbounded_send(Ok(Chunk::Frames(Bytes::from(hello))))
        .unwrap();
    let sup = Supervisor::connect(Box::pin(tokio::io::sink()), Box::pin(rx));
    sup.ready(Duration::from_secs(5)).await.unwrap();
    (sup, tx)
}

#[tokio::test]
async fn an_oversized_frame_ends_the_stream_and_wakes_every_waiter() {
    let (sup, feed) = fake().await;
    let id = sup.id();
    let mut replies = sup.request(id, &Request::Ping { id }, b"").await.unwrap();
    feed.unbounded_send(Ok(Chunk::Frames(Bytes::from(
        u32::MAX.to_be_bytes().to_vec(),
    ))))
    .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), replies.next())
        .await
        .expect("a waiter is woken, not left hanging");
    assert!(matches!(r, Err(StreamError::Malformed(_))), "{r:?}");
    assert!(matches!(sup.died(), Some(StreamError::Malformed(_))));
    // Later requests fail at once.
    let id = sup.id();
    assert!(sup.request(id, &Request::Ping { id }, b"").await.is_err());
}

#[tokio::test]
async fn replies_to_unknown_requests_are_dropped_and_the_right_one_arrives() {
    let (sup, feed) = fake().await;
    let id = sup.id();
    let mut replies = sup.request(id, &Request::Ping { id }, b"").await.unwrap();
    let mut then = encode(&Reply::Pong { id: id + 999 }, b"");
    then.extend(encode(&Reply::Output { id }, b"stray"));
    then.extend(encode(&Reply::Pong { id }, b""));
    feed.unbounded_send(Ok(Chunk::Frames(Bytes::from(then))))
        .unwrap();
    let (r, p) = tokio::time::timeout(Duration::from_secs(5), replies.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r, p), (Reply::Output { id }, b"stray".to_vec()));
    let (r, _) = replies.next().await.unwrap();
    assert_eq!(r, Reply::Pong { id });
}

#[tokio::test]
async fn a_wrong_protocol_version_is_refused() {
    let bytes = encode(
        &Reply::Ready {
            version: 999,
            pid: 1,
            bash: None,
        },
        b"",
    );
    let output: Output = Box::pin(futures::stream::iter(vec![Ok(Chunk::Frames(Bytes::from(
        bytes,
    )))]));
    let sup = Supervisor::connect(Box::pin(tokio::io::sink()), output);
    let r = sup.ready(Duration::from_secs(5)).await;
    assert!(matches!(r, Err(StreamError::Version(999))), "{r:?}");
}
