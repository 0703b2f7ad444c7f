//! proptest strategies for JSON a hostile or broken model could send:
//! every type, numbers at and past the edges, deep nesting, and keys that
//! the parsers look for, so generated values reach the code under test.

use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// Keys the tool and stream parsers read, mixed with arbitrary ones.
const KEYS: &[&str] = &[
    "command",
    "timeout",
    "type",
    "index",
    "delta",
    "text",
    "partial_json",
    "content_block",
    "message",
    "content",
    "usage",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "stop_reason",
    "model",
    "error",
    "id",
    "name",
    "input",
    "choices",
    "tool_calls",
    "function",
    "arguments",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "cached_tokens",
];

/// Type names the parsers match on.
const TYPES: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "message_delta",
    "message_stop",
    "error",
    "text",
    "tool_use",
    "text_delta",
    "input_json_delta",
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop",
    "tool_calls",
];

/// A number: any integer, any finite float, and the edges.
pub fn number() -> impl Strategy<Value = Value> {
    let edge = prop::sample::select(vec![
        0.0,
        -0.0,
        -1.0,
        1e-300,
        5e-324,
        f64::MIN_POSITIVE,
        1e20,
        1e308,
        f64::MAX,
        -f64::MAX,
        18_446_744_073_709_551_615.0,
        9_223_372_036_854_775_807.0,
    ]);
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        edge.prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
    ]
}

/// A string: arbitrary, or one the parsers recognise.
pub fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::sample::select(TYPES).prop_map(str::to_string),
        prop::sample::select(KEYS).prop_map(str::to_string),
        Just("bash".to_string()),
        Just("{\"command\": \"ls\"}".to_string()),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string().prop_map(Value::String),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(KEYS).prop_map(str::to_string),
        1 => any::<String>(),
    ]
}

/// Any JSON value, a few levels deep.
pub fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A value nested up to 120 levels (serde_json parses at most 128, so a
/// model's reply cannot be deeper).
pub fn deep() -> impl Strategy<Value = Value> {
    (0usize..120, leaf(), any::<bool>()).prop_map(|(depth, mut v, arrays)| {
        for _ in 0..depth {
            v = if arrays {
                Value::Array(vec![v])
            } else {
                let mut m = Map::new();
                m.insert("command".into(), v);
                Value::Object(m)
            };
        }
        v
    })
}

/// An object shaped like a tool input: `command` and `timeout` of any
/// type (mostly plausible ones), plus stray keys.
pub fn tool_input() -> impl Strategy<Value = Value> {
    let command = prop_oneof![
        3 => any::<String>().prop_map(Value::String),
        1 => json(),
    ];
    let timeout = prop_oneof![
        3 => number(),
        1 => json(),
    ];
    (
        prop::option::of(command),
        prop::option::of(timeout),
        prop::collection::vec((key(), json()), 0..3),
    )
        .prop_map(|(command, timeout, extra)| {
            let mut m: Map<String, Value> = extra.into_iter().collect();
            if let Some(c) = command {
                m.insert("command".into(), c);
            }
            if let Some(t) = timeout {
                m.insert("timeout".into(), t);
            }
            Value::Object(m)
        })
}
