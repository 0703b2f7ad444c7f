//! Keeping the conversation inside the model's context window: the oldest
//! tool outputs are elided first; the first user message is never touched.

use crate::model::{Block, Message};

/// Rough bytes per token for English text and code; good enough to decide
/// when to start eliding, and deliberately on the cautious side.
const BYTES_PER_TOKEN: u64 = 3;
/// Start eliding when the estimate passes this share of the window...
const ELIDE_ABOVE_PERCENT: u64 = 80;
/// ...and elide until it is under this share.
const ELIDE_TO_PERCENT: u64 = 60;
/// Outputs shorter than this are not worth eliding.
const MIN_ELIDE_BYTES: usize = 200;

/// A rough token estimate of the whole request.
pub fn estimate_tokens(system: &str, messages: &[Message], tools_bytes: usize) -> u64 {
    let mut bytes = system.len() + tools_bytes;
    for m in messages {
        for b in &m.content {
            bytes += match b {
                Block::Text { text } => text.len(),
                Block::ToolUse { input, .. } => json_len(input) + 32,
                Block::ToolResult { content, .. } => content.len() + 32,
                // Thinking and server tool results count like any input.
                Block::Opaque { value, .. } => json_len(value),
            };
        }
    }
    bytes as u64 / BYTES_PER_TOKEN
}

/// The length of `value` as compact JSON, counted without building the
/// text (every step counts the whole conversation again).
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // Writing a Value to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut n, value);
    n.0
}

/// Elides the oldest tool outputs while the estimate is above the high
/// mark of `window_tokens`. Returns how many outputs were elided.
pub fn fit(
    system: &str,
    messages: &mut [Message],
    tools_bytes: usize,
    window_tokens: u64,
) -> usize {
    let high = window_tokens.saturating_mul(ELIDE_ABOVE_PERCENT) / 100;
    if estimate_tokens(system, messages, tools_bytes) <= high {
        return 0;
    }
    let low = window_tokens.saturating_mul(ELIDE_TO_PERCENT) / 100;
    elide_oldest(messages, |msgs| {
        estimate_tokens(system, msgs, tools_bytes) <= low
    })
}

/// After the API said the prompt is too long: elides every tool output but
/// those of the newest message. Returns how many were elided.
pub fn trim_hard(messages: &mut [Message]) -> usize {
    elide_oldest(messages, |_| false)
}

/// Elides tool results oldest first, skipping the first message and the
/// last one (the results the model has not seen yet), until `done` says so.
fn elide_oldest(messages: &mut [Message], done: impl Fn(&[Message]) -> bool) -> usize {
    let mut elided = 0;
    let last = messages.len().saturating_sub(1);
    for i in 1..last {
        for j in 0..messages[i].content.len() {
            if let Block::ToolResult { content, .. } = &mut messages[i].content[j] {
                if content.len() < MIN_ELIDE_BYTES || content.starts_with(ELIDED_PREFIX) {
                    continue;
                }
                *content = format!(
                    "{ELIDED_PREFIX} {} bytes of this old tool output were removed to fit the context window]",
                    content.len()
                );
                elided += 1;
            }
            if done(messages) {
                return elided;
            }
        }
    }
    elided
}

const ELIDED_PREFIX: &str = "[elided:";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;
    use serde_json::json;

    fn convo(n: usize, out_len: usize) -> Vec<Message> {
        let mut m = vec![Message::user_text("the task ".repeat(100))];
        for i in 0..n {
            m.push(Message {
                role: Role::Assistant,
                content: vec![Block::ToolUse {
                    id: format!("t{i}"),
                    name: "bash".into(),
                    input: json!({"command": "ls"}),
                    raw_input: None,
                }],
            });
            m.push(Message {
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_use_id: format!("t{i}"),
                    content: "x".repeat(out_len),
                    is_error: false,
                }],
            });
        }
        m
    }

    #[test]
    fn under_the_window_nothing_changes() {
        let mut m = convo(3, 1000);
        let before = m.clone();
        assert_eq!(fit("sys", &mut m, 0, 100_000), 0);
        assert_eq!(m, before);
    }

    #[test]
    fn oldest_outputs_go_first_and_the_task_stays() {
        let mut m = convo(10, 3000);
        // ~30 KB of output = ~10k tokens; a window of 10k forces elision.
        let n = fit("sys", &mut m, 0, 10_000);
        assert!(n > 0);
        assert_eq!(m[0], Message::user_text("the task ".repeat(100)));
        let first_result = &m[2].content[0];
        assert!(
            matches!(first_result, Block::ToolResult { content, .. } if content.starts_with(ELIDED_PREFIX))
        );
        let newest = &m[m.len() - 1].content[0];
        assert!(matches!(newest, Block::ToolResult { content, .. } if content.len() == 3000));
        assert!(estimate_tokens("sys", &m, 0) <= 8_000);
        let v = serde_json::json!({"command": "echo \"é\"", "n": [1, 2.5, null]});
        assert_eq!(json_len(&v), v.to_string().len());
    }

    #[test]
    fn trim_hard_keeps_only_the_newest_results() {
        let mut m = convo(4, 1000);
        assert_eq!(trim_hard(&mut m), 3);
    }
}
