//! The Chat Completions chunk and body parsers, and the SSE decoder under
//! them, with arbitrary input: they may refuse a reply, never panic.

use std::sync::atomic::AtomicU64;

use proptest::prelude::*;

use super::response::ChatState;
use crate::arbitrary_json::json;
use crate::model::ModelProgress;
use crate::model::sse::SseDecoder;

/// A chunk payload: JSON (often shaped like a chunk), text, or `[DONE]`.
fn chunk() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => json().prop_map(|v| v.to_string()),
        2 => json().prop_map(|v| serde_json::json!({"choices": [v]}).to_string()),
        2 => json().prop_map(|v| serde_json::json!({"choices": [{"delta": {"tool_calls": [v]}}]}).to_string()),
        1 => any::<String>(),
        1 => Just("[DONE]".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn chunks_take_any_payload(chunks in prop::collection::vec(chunk(), 0..24)) {
        let sink = |_: ModelProgress| {};
        let mut st = ChatState::default();
        for c in &chunks {
            if st.handle_data(c, &sink).is_err() {
                break;
            }
        }
        let _ = st.finish(&AtomicU64::new(u64::MAX - 1));
    }

    #[test]
    fn whole_body_takes_any_json(v in json()) {
        let mut st = ChatState::default();
        let sink = |_: crate::model::ModelProgress| {};
        if st.handle_whole(&v, &sink).is_ok() {
            let _ = st.finish(&AtomicU64::new(0));
        }
    }

    #[test]
    fn sse_takes_any_bytes(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..16)) {
        let mut d = SseDecoder::new();
        for c in &chunks {
            let _ = d.push(c);
        }
        let _ = d.finish();
    }
}
