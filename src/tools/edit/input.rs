//! The edit tool's input, validated: any JSON is accepted without
//! panicking; what is missing or mistyped is an error the model can fix,
//! worded as Anthropic's reference implementation words it.

use serde_json::{Map, Value, json};

/// A validated call.
#[derive(Debug, PartialEq)]
pub enum Command {
    View {
        path: String,
        /// [first, last], 1-based; last -1: to the end.
        range: Option<(i64, i64)>,
    },
    Create {
        path: String,
        file_text: String,
    },
    StrReplace {
        path: String,
        old_str: String,
        /// Empty when not given: the match is deleted.
        new_str: String,
    },
    Insert {
        path: String,
        insert_line: u64,
        text: String,
    },
}

impl Command {
    pub fn path(&self) -> &str {
        match self {
            Command::View { path, .. }
            | Command::Create { path, .. }
            | Command::StrReplace { path, .. }
            | Command::Insert { path, .. } => path,
        }
    }
}

const COMMANDS: &str = "view, create, str_replace, insert";

/// Reads `{"command": ..., "path": ..., ...}`.
pub fn parse(input: &Value) -> Result<Command, String> {
    let obj = input.as_object().ok_or(
        "error: the str_replace_based_edit_tool takes a JSON object like \
         {\"command\": \"view\", \"path\": \"/workspace/file.py\"}.",
    )?;
    let command = command_of(obj)?;
    let path = path_of(obj, command)?;
    Ok(match command {
        "view" => Command::View {
            path,
            range: view_range(obj.get("view_range"))?,
        },
        "create" => {
            let file_text =
                string(obj, "file_text", command)?.ok_or_else(|| required("file_text", command))?;
            if file_text.contains('\0') {
                return Err(
                    "error: `file_text` holds a NUL character; this tool writes text files only."
                        .into(),
                );
            }
            Command::Create { path, file_text }
        }
        "str_replace" => {
            let old_str =
                string(obj, "old_str", command)?.ok_or_else(|| required("old_str", command))?;
            if old_str.is_empty() {
                return Err(
                    "error: `old_str` is empty; give the exact text to replace (it must occur exactly once)."
                        .into(),
                );
            }
            let new_str = string(obj, "new_str", command)?.unwrap_or_default();
            if new_str.contains('\0') {
                return Err("error: `new_str` holds a NUL character.".into());
            }
            Command::StrReplace {
                path,
                old_str,
                new_str,
            }
        }
        _ => {
            let insert_line = match obj.get("insert_line") {
                None | Some(Value::Null) => return Err(required("insert_line", command)),
                Some(v) => v.as_u64().ok_or_else(|| {
                    format!(
                        "Invalid `insert_line` parameter: {v}. It should be a line number, \
                         0 or more (0 inserts at the start)."
                    )
                })?,
            };
            // The 20250728 model sends `insert_text`; earlier versions
            // (and their documentation) `new_str`.
            let text = match string(obj, "insert_text", command)? {
                Some(t) => t,
                None => string(obj, "new_str", command)?
                    .ok_or_else(|| required("insert_text", command))?,
            };
            if text.is_empty() {
                return Err("error: `insert_text` is empty; nothing to insert.".into());
            }
            if text.contains('\0') {
                return Err("error: `insert_text` holds a NUL character.".into());
            }
            Command::Insert {
                path,
                insert_line,
                text,
            }
        }
    })
}

/// The `command`: a string naming one of [`COMMANDS`].
fn command_of(obj: &Map<String, Value>) -> Result<&str, String> {
    let command = match obj.get("command") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(format!(
                "error: `command` must be a string, got {}. Allowed: {COMMANDS}.",
                crate::tools::bash::type_name(other)
            ));
        }
        None => {
            return Err(format!(
                "error: missing required parameter `command` (one of: {COMMANDS})."
            ));
        }
    };
    if command == "undo_edit" {
        return Err(
            "error: `undo_edit` is not available in this version of the tool \
             (text_editor_20250728). Undo a change with `str_replace`."
                .into(),
        );
    }
    if !["view", "create", "str_replace", "insert"].contains(&command) {
        return Err(format!(
            "Unrecognized command {command}. The allowed commands for the \
             str_replace_based_edit_tool tool are: {COMMANDS}"
        ));
    }
    Ok(command)
}

/// The `path`: given, not empty, without NUL.
fn path_of(obj: &Map<String, Value>, command: &str) -> Result<String, String> {
    Ok(match string(obj, "path", command)? {
        Some(p) if p.contains('\0') => {
            return Err("error: `path` holds a NUL character.".into());
        }
        Some(p) if !p.trim().is_empty() => p,
        Some(_) => return Err("error: `path` is empty.".into()),
        None => return Err(required("path", command)),
    })
}

fn required(name: &str, command: &str) -> String {
    format!("Parameter `{name}` is required for command: {command}")
}

/// The string field `name`; `None` when absent or null.
fn string(obj: &Map<String, Value>, name: &str, command: &str) -> Result<Option<String>, String> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!(
            "error: `{name}` of command {command} must be a string, got {}.",
            crate::tools::bash::type_name(other)
        )),
    }
}

fn view_range(v: Option<&Value>) -> Result<Option<(i64, i64)>, String> {
    let bad =
        || "Invalid `view_range`. It should be a list of two integers, e.g. [1, 20] or [40, -1].";
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => match a.as_slice() {
            [first, last] => match (first.as_i64(), last.as_i64()) {
                (Some(f), Some(l)) => Ok(Some((f, l))),
                _ => Err(bad().into()),
            },
            _ => Err(bad().into()),
        },
        Some(_) => Err(bad().into()),
    }
}

/// The tool's description (the function tool's; Anthropic's native tool
/// carries its own).
pub fn description(workdir: &str) -> String {
    format!(
        "View, create and edit text files. Commands: `view` shows a file with line numbers \
         (`cat -n`; `view_range` [start, end] shows lines start..end, end -1 meaning the last), \
         or lists a directory's files up to 2 levels deep, hidden ones left out; `create` makes \
         a new file with `file_text` (it never overwrites an existing one); `str_replace` \
         replaces `old_str`, which must occur exactly once in the file (match whitespace \
         exactly), with `new_str` (empty or left out: delete it); `insert` adds `insert_text` \
         as whole lines after line `insert_line` (0: at the start). Relative paths start in \
         {workdir}. UTF-8 text files of at most 1 MiB only."
    )
}

pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "enum": ["view", "create", "str_replace", "insert"],
                "description": "The command to run: `view`, `create`, `str_replace` or `insert`."
            },
            "path": {
                "type": "string",
                "description": "Absolute path to a file or directory, e.g. `/workspace/file.py` or `/workspace`."
            },
            "file_text": {
                "type": "string",
                "description": "Required for `create`: the content of the new file."
            },
            "old_str": {
                "type": "string",
                "description": "Required for `str_replace`: the exact text to replace; it must occur exactly once."
            },
            "new_str": {
                "type": "string",
                "description": "Optional for `str_replace`: the text that replaces `old_str` (left out: `old_str` is deleted)."
            },
            "insert_line": {
                "type": "integer",
                "minimum": 0,
                "description": "Required for `insert`: the line after which `insert_text` goes (0: at the start)."
            },
            "insert_text": {
                "type": "string",
                "description": "Required for `insert`: the text to insert."
            },
            "view_range": {
                "type": "array",
                "items": {"type": "integer"},
                "minItems": 2,
                "maxItems": 2,
                "description": "Optional for `view` of a file: [start, end] lines, 1-based, end -1 for the end of the file."
            }
        },
        "required": ["command", "path"]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_command_parses() {
        assert_eq!(
            parse(&json!({"command": "view", "path": "/a", "view_range": [2, -1]})),
            Ok(Command::View {
                path: "/a".into(),
                range: Some((2, -1))
            })
        );
        assert_eq!(
            parse(&json!({"command": "str_replace", "path": "a", "old_str": "x"})),
            Ok(Command::StrReplace {
                path: "a".into(),
                old_str: "x".into(),
                new_str: String::new()
            })
        );
        // Both names of the inserted text.
        for key in ["insert_text", "new_str"] {
            assert_eq!(
                parse(&json!({"command": "insert", "path": "a", "insert_line": 0, key: "t"})),
                Ok(Command::Insert {
                    path: "a".into(),
                    insert_line: 0,
                    text: "t".into()
                })
            );
        }
    }

    #[test]
    fn missing_and_mistyped_parameters_are_named() {
        let err = |v: Value| parse(&v).err().unwrap_or_default();
        assert!(err(json!("view")).contains("JSON object"));
        assert!(err(json!({"path": "/a"})).contains("`command`"));
        assert!(err(json!({"command": "view"})).contains("`path` is required"));
        assert!(
            err(json!({"command": "create", "path": "/a"})).contains("`file_text` is required")
        );
        assert!(
            err(json!({"command": "str_replace", "path": "/a"})).contains("`old_str` is required")
        );
        assert!(
            err(json!({"command": "str_replace", "path": "/a", "old_str": ""})).contains("empty")
        );
        assert!(
            err(json!({"command": "insert", "path": "/a", "insert_text": "x"}))
                .contains("`insert_line` is required")
        );
        assert!(
            err(json!({"command": "insert", "path": "/a", "insert_line": 1}))
                .contains("`insert_text` is required")
        );
        assert!(
            err(json!({"command": "insert", "path": "/a", "insert_line": -1, "insert_text": "x"}))
                .contains("Invalid `insert_line`")
        );
        assert!(
            err(json!({"command": "insert", "path": "/a", "insert_line": "2", "insert_text": "x"}))
                .contains("Invalid `insert_line`")
        );
        assert!(
            err(json!({"command": "view", "path": "/a", "view_range": [1]}))
                .contains("two integers")
        );
        assert!(
            err(json!({"command": "view", "path": "/a", "view_range": [1.5, 2]}))
                .contains("two integers")
        );
        assert!(err(json!({"command": "view", "path": 7})).contains("must be a string"));
        assert!(err(json!({"command": "undo_edit", "path": "/a"})).contains("not available"));
        assert!(
            err(json!({"command": "delete", "path": "/a"})).contains("Unrecognized command delete")
        );
        assert!(err(json!({"command": "view", "path": "a\u{0}b"})).contains("NUL"));
    }

    /// Editor inputs: a real command or any string, the editor's keys
    /// holding any JSON (or strings, often).
    fn editor_input() -> impl proptest::strategy::Strategy<Value = Value> {
        use crate::arbitrary_json::{json as any_json, string};
        use proptest::prelude::*;
        let command = prop_oneof![
            3 => prop::sample::select(vec!["view", "create", "str_replace", "insert", "undo_edit"])
                .prop_map(|c| json!(c)),
            1 => any_json(),
        ];
        let field = prop_oneof![2 => string().prop_map(Value::String), 1 => any_json()];
        let keys = [
            "path",
            "file_text",
            "old_str",
            "new_str",
            "insert_line",
            "insert_text",
            "view_range",
        ];
        (
            command,
            prop::collection::vec(prop::option::of(field), keys.len()),
        )
            .prop_map(move |(c, fields)| {
                let mut m = Map::new();
                m.insert("command".into(), c);
                for (k, v) in keys.iter().zip(fields) {
                    if let Some(v) = v {
                        m.insert((*k).into(), v);
                    }
                }
                Value::Object(m)
            })
    }

    proptest::proptest! {
        #[test]
        fn any_input_parses_or_is_refused_without_panicking(input in editor_input()) {
            if let Ok(cmd) = parse(&input) {
                proptest::prop_assert!(!cmd.path().trim().is_empty());
            }
        }
    }
}
