//! The Anthropic stream and whole-body parsers under arbitrary JSON
//! events: they may refuse a reply, never panic. Usage numbers at
//! `u64::MAX` still add up (saturating).

use proptest::prelude::*;
use serde_json::Value;

use super::reply::reply_from_json;
use super::stream::StreamState;
use crate::arbitrary_json::{json, string};
use crate::model::{ModelProgress, Usage};

/// An SSE event: a name the parser knows (or none) and a JSON payload,
/// sometimes a payload that is not JSON at all.
fn event() -> impl Strategy<Value = (Option<String>, String)> {
    let data = prop_oneof![
        4 => json().prop_map(|v| v.to_string()),
        1 => any::<String>(),
    ];
    (prop::option::of(string()), data)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn stream_takes_any_events(events in prop::collection::vec(event(), 0..24)) {
        let sink = |_: ModelProgress| {};
        let mut st = StreamState::default();
        for (name, data) in &events {
            if st.handle(name.as_deref(), data, &sink).is_err() {
                break;
            }
        }
        let _ = st.finish();
    }

    #[test]
    fn whole_reply_takes_any_json(v in json()) {
        let _ = reply_from_json(&v);
    }

    #[test]
    fn usage_sums_saturate(a in any::<[u64; 4]>(), b in any::<[u64; 4]>()) {
        let usage = |n: [u64; 4]| Usage {
            input_tokens: n[0],
            output_tokens: n[1],
            cache_creation_input_tokens: n[2],
            cache_read_input_tokens: n[3],
        };
        let mut total = usage(a);
        total.add(&usage(b));
        prop_assert!(total.input_tokens >= a[0].max(b[0]));
        prop_assert!(total.total_input() >= total.input_tokens);
    }
}

#[test]
fn huge_usage_and_block_indices_are_kept_without_overflow() {
    let sink = |_: ModelProgress| {};
    let mut st = StreamState::default();
    let events: Vec<Value> = vec![
        serde_json::json!({"type":"message_start","message":{"usage":{"input_tokens":u64::MAX,"cache_read_input_tokens":u64::MAX}}}),
        serde_json::json!({"type":"content_block_start","index":u64::MAX,"content_block":{"type":"text","text":"a"}}),
        serde_json::json!({"type":"content_block_delta","index":u64::MAX,"delta":{"type":"text_delta","text":"b"}}),
        serde_json::json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":u64::MAX}}),
    ];
    for e in &events {
        st.handle(None, &e.to_string(), &sink).expect("valid event");
    }
    let reply = st.finish().expect("reply");
    assert_eq!(reply.message.text(), "ab");
    assert_eq!(reply.usage.total_input(), u64::MAX);
    let mut sum = Usage::default();
    sum.add(&reply.usage);
    sum.add(&reply.usage);
    assert_eq!(sum.output_tokens, u64::MAX);
}
