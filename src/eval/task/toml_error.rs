//! A task.toml parse error as one line that names the file, line, column
//! and key, with the offending line kept for the hint. The toml crate's own
//! text is a multi-line drawing (a gutter, the line, carets) that, folded
//! onto one line, reads as noise.

use std::path::Path;

use super::TaskError;

/// The error for `e`, raised while parsing `text` (the file at `path`).
pub fn task_error(e: &toml::de::Error, text: &str, path: &Path) -> TaskError {
    let detail = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(at) = e.span().map(|s| s.start.min(text.len())) else {
        return TaskError::Toml {
            path: path.to_path_buf(),
            message: detail,
            line_text: None,
        };
    };
    let before = &text[..floor_char_boundary(text, at)];
    let line_no = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let line_text = text[line_start..].lines().next().unwrap_or("").trim_end();
    let key = key_at(before, line_start).map(|k| format!(", key {k}"));
    TaskError::Toml {
        path: path.to_path_buf(),
        message: format!(
            "line {line_no}, column {column}{}: {detail}",
            key.unwrap_or_default()
        ),
        line_text: Some(format!("line {line_no} reads: {}", line_text.trim())),
    }
}

/// The dotted key whose value holds the error: the key before `=` on the
/// error's line, under the last `[table]` header above it. None when the
/// error is not in a `key = value` line (a header, a syntax error before
/// any `=`).
fn key_at(before: &str, line_start: usize) -> Option<String> {
    let head = &before[line_start..];
    let (key, _) = head.split_once('=')?;
    let key = key.trim();
    if key.is_empty() || key.starts_with('#') {
        return None;
    }
    let table = before[..line_start].lines().rev().find_map(|l| {
        let l = l.trim();
        let inner = l.strip_prefix("[[").and_then(|l| l.split(']').next());
        let inner = inner.or_else(|| l.strip_prefix('[').and_then(|l| l.split(']').next()));
        inner.map(str::trim)
    });
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_string(),
    })
}

/// The largest char boundary at or before `i` (a span never splits a
/// character, but the text is the user's).
fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> (String, Option<String>) {
        let e = toml::from_str::<toml::Table>(text)
            .map(|_| ())
            .and_then(|()| toml::from_str::<super::super::TaskToml>(text).map(|_| ()))
            .expect_err("an error");
        match task_error(&e, text, Path::new("t/task.toml")) {
            TaskError::Toml {
                message, line_text, ..
            } => (message, line_text),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_wrong_type_names_line_column_and_key_on_one_line() {
        let (message, line) =
            error_of("[agent]\ntimeout_sec = 10\n[environment]\ncpus = \"many\"\n");
        assert_eq!(
            message,
            "line 4, column 8, key environment.cpus: invalid type: string \"many\", expected f64"
        );
        assert_eq!(line.as_deref(), Some("line 4 reads: cpus = \"many\""));
    }

    #[test]
    fn a_syntax_error_keeps_its_place_and_stays_one_line() {
        let (message, line) = error_of("[verifier]\ntimeout_sec = 10\n\n[agent\n");
        assert!(message.starts_with("line 4, column "), "{message}");
        assert!(!message.contains('\n'), "{message}");
        assert_eq!(line.as_deref(), Some("line 4 reads: [agent"));
        let (message, _) = error_of("[agent]\ntimeout_sec = \"x\nuser = 1\n");
        assert!(message.starts_with("line 2, column "), "{message}");
        assert!(message.contains("key agent.timeout_sec"), "{message}");
    }
}
