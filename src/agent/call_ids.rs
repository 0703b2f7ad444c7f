//! One id per tool call. LiteLLM's `/v1/messages` in front of llama.cpp's
//! server streams one call as a `tool_use` block per upstream chunk, every
//! block with the same id and name and a fragment of the arguments: such a
//! run of blocks is joined back into the one call it is (when the joined
//! fragments are a JSON object). Calls that still share an id would get
//! results no API can match to them: the repeats are renamed (`ID_2`,
//! `ID_3`, ...). Both before anything runs, and the loop says so.

use std::collections::HashSet;

use serde_json::Value;

use crate::model::{Block, Message};

/// Joins each run of consecutive tool calls sharing id and name whose
/// argument fragments, end to end, are one JSON object; one line per join.
pub fn join_split_calls(message: &mut Message) -> Vec<String> {
    let mut notes = Vec::new();
    let mut out: Vec<Block> = Vec::with_capacity(message.content.len());
    let mut blocks = std::mem::take(&mut message.content).into_iter().peekable();
    while let Some(block) = blocks.next() {
        let Block::ToolUse { id, name, .. } = &block else {
            out.push(block);
            continue;
        };
        let (id, name) = (id.clone(), name.clone());
        let mut run = vec![block];
        while let Some(next) = blocks.next_if(
            |b| matches!(b, Block::ToolUse { id: i, name: n, .. } if *i == id && *n == name),
        ) {
            run.push(next);
        }
        match joined_input(&run) {
            Some(input) if run.len() > 1 => {
                notes.push(format!(
                    "the model's reply split one tool call into {} blocks sharing the id '{id}' (as LiteLLM streams it); joined them into one call",
                    run.len()
                ));
                out.push(Block::ToolUse {
                    id,
                    name,
                    input,
                    raw_input: None,
                });
            }
            _ => out.extend(run),
        }
    }
    message.content = out;
    notes
}

/// The arguments of `run`'s blocks end to end, when they are one object.
fn joined_input(run: &[Block]) -> Option<Value> {
    let mut text = String::new();
    for b in run {
        let Block::ToolUse {
            input, raw_input, ..
        } = b
        else {
            return None;
        };
        match raw_input {
            Some(raw) => text.push_str(raw),
            None if input.as_object().is_some_and(|o| o.is_empty()) => {}
            None => text.push_str(&input.to_string()),
        }
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(v @ Value::Object(_)) => Some(v),
        _ => None,
    }
}

/// Renames every repeated tool-call id of `message`; returns one line per
/// id that was shared, saying how it was renamed (none when all differ).
pub fn make_unique(message: &mut Message) -> Vec<String> {
    let mut taken: HashSet<String> = HashSet::new();
    let mut renamed: Vec<(String, Vec<String>)> = Vec::new();
    let all: HashSet<String> = message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    for block in &mut message.content {
        let Block::ToolUse { id, .. } = block else {
            continue;
        };
        if taken.insert(id.clone()) {
            continue;
        }
        let new = (2..)
            .map(|n| format!("{id}_{n}"))
            .find(|c| !taken.contains(c) && !all.contains(c))
            .unwrap_or_default();
        taken.insert(new.clone());
        match renamed.iter_mut().find(|(old, _)| old == id) {
            Some((_, news)) => news.push(new.clone()),
            None => renamed.push((id.clone(), vec![new.clone()])),
        }
        *id = new;
    }
    renamed
        .into_iter()
        .map(|(old, news)| {
            format!(
                "the model's reply gave {} tool calls the id '{old}'; renamed the repeats to {} so each result answers one call",
                news.len() + 1,
                news.iter()
                    .map(|n| format!("'{n}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;
    use serde_json::json;

    fn call(id: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: "bash".into(),
            input: json!({}),
            raw_input: None,
        }
    }

    fn fragment(id: &str, raw: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: "bash".into(),
            input: json!({}),
            raw_input: Some(raw.into()),
        }
    }

    #[test]
    fn a_call_split_into_same_id_blocks_is_joined_and_real_repeats_are_not() {
        let mut m = Message {
            role: Role::Assistant,
            content: ["{\"", "command", "\":", " \"", "ls", "\"}"]
                .iter()
                .map(|f| fragment("c", f))
                .chain([call("d"), call("d")])
                .collect(),
        };
        let notes = join_split_calls(&mut m);
        let calls: Vec<_> = m.tool_calls().collect();
        assert_eq!(calls.len(), 3, "{m:?}");
        assert_eq!(calls[0].input, &json!({"command": "ls"}));
        assert_eq!(calls[0].raw_input, None);
        assert_eq!((calls[1].id, calls[2].id), ("d", "d"));
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("into 6 blocks sharing the id 'c'"),
            "{notes:?}"
        );
    }

    #[test]
    fn repeats_are_renamed_and_reported_unique_ids_untouched() {
        let mut m = Message {
            role: Role::Assistant,
            content: vec![
                Block::Text { text: "x".into() },
                call("a"),
                call("a"),
                call("a_2"),
                call("b"),
                call("a"),
            ],
        };
        let notes = make_unique(&mut m);
        let ids: Vec<_> = m.tool_calls().map(|c| c.id.to_string()).collect();
        assert_eq!(ids, ["a", "a_3", "a_2", "b", "a_4"]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("3 tool calls the id 'a'") && notes[0].contains("'a_3', 'a_4'"),
            "{notes:?}"
        );
        let mut fine = Message {
            role: Role::Assistant,
            content: vec![call("x"), call("y")],
        };
        assert!(make_unique(&mut fine).is_empty());
    }
}
