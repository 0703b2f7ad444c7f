//! One id per tool call. A reply whose calls share an id (LiteLLM in front
//! of llama.cpp's server sent 13 `tool_use` blocks with one id) would get
//! results no API can match to their calls; the repeats are renamed
//! (`ID_2`, `ID_3`, ...) before anything runs, and the loop says so.

use std::collections::HashSet;

use crate::model::{Block, Message};

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
