//! The question a person answers before a command runs: the command shown
//! with every control character made visible, and one answer read per
//! line. Generic over the reader and writer so the dialogue is tested
//! without a terminal; [`super::Approver`] gives it stdin and stderr.

use std::io::{BufRead, Write};

use crate::terminal::visible;

/// What the person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `y`: run it.
    Yes,
    /// `n`: do not run it; the model is told.
    No,
    /// `e`: run this command line instead.
    Edit(String),
    /// `a`: run it and every later command of the run without asking.
    All,
    /// `q`, or the end of input: stop the run.
    Quit,
}

/// The question's last line.
pub const CHOICES: &str = "run it? [y]es, [n]o, [e]dit, [a]ll the rest, [q]uit: ";

/// Shows `command` (already redacted by the caller) and why it is asked
/// (`rule`), then reads answers until one is known. An unknown answer asks
/// again; an empty edit goes back to the question; the end of input is
/// [`Reply::Quit`], as is a read error (nobody can answer).
pub fn ask(input: &mut impl BufRead, out: &mut impl Write, command: &str, rule: &str) -> Reply {
    let why = if rule == super::ALWAYS_RULE {
        "--approve always".to_string()
    } else {
        format!("--approve risky, rule {rule}")
    };
    let shown: String = visible(command)
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let _ = write!(out, "approve this command ({why}):\n{shown}");
    loop {
        let _ = write!(out, "{CHOICES}");
        let _ = out.flush();
        let Some(line) = read_line(input) else {
            let _ = writeln!(out);
            return Reply::Quit;
        };
        match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => return Reply::Yes,
            "n" | "no" => return Reply::No,
            "a" | "all" => return Reply::All,
            "q" | "quit" => return Reply::Quit,
            "e" | "edit" => {
                let _ = write!(out, "command to run instead (empty: back): ");
                let _ = out.flush();
                let Some(edited) = read_line(input) else {
                    let _ = writeln!(out);
                    return Reply::Quit;
                };
                let edited = edited.trim();
                if !edited.is_empty() {
                    return Reply::Edit(edited.to_string());
                }
            }
            other => {
                let _ = writeln!(
                    out,
                    "unknown answer {:?}: type y, n, e, a or q",
                    visible(other)
                );
            }
        }
    }
}

/// One line without its end; `None` at the end of input or on an error.
fn read_line(input: &mut impl BufRead) -> Option<String> {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end_matches(['\n', '\r']).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dialogue(typed: &str, command: &str) -> (Reply, String) {
        let mut input = std::io::Cursor::new(typed.as_bytes().to_vec());
        let mut out = Vec::new();
        let reply = ask(&mut input, &mut out, command, "network");
        (reply, String::from_utf8(out).unwrap())
    }

    #[test]
    fn each_answer() {
        assert_eq!(dialogue("y\n", "ls").0, Reply::Yes);
        assert_eq!(dialogue("YES\n", "ls").0, Reply::Yes);
        assert_eq!(dialogue("n\n", "ls").0, Reply::No);
        assert_eq!(dialogue(" a \n", "ls").0, Reply::All);
        assert_eq!(dialogue("q\n", "ls").0, Reply::Quit);
        assert_eq!(
            dialogue("e\necho instead\n", "ls").0,
            Reply::Edit("echo instead".into())
        );
    }

    #[test]
    fn unknown_answers_ask_again_and_the_end_of_input_quits() {
        let (reply, out) = dialogue("maybe\n\ny\n", "ls");
        assert_eq!(reply, Reply::Yes);
        assert_eq!(out.matches(CHOICES).count(), 3, "{out}");
        assert!(out.contains("unknown answer \"maybe\""), "{out}");
        assert_eq!(dialogue("", "ls").0, Reply::Quit);
        assert_eq!(dialogue("what\n", "ls").0, Reply::Quit);
        assert_eq!(dialogue("e\n", "ls").0, Reply::Quit);
        // An empty edit goes back to the question.
        assert_eq!(dialogue("e\n\nn\n", "ls").0, Reply::No);
    }

    #[test]
    fn the_command_cannot_drive_the_terminal() {
        let (_, out) = dialogue("n\n", "echo \x1b[2J\x1b]0;title\x07 hidden\u{202e}txt\nls");
        assert!(
            out.contains("    echo \\x1b[2J\\x1b]0;title\\x07 hidden\\u{202e}txt\n    ls\n"),
            "{out}"
        );
        assert!(!out.contains('\x1b') && !out.contains('\u{202e}'));
        assert!(out.contains("rule network"));
        let (_, out) = dialogue("x\x1b[1m\nn\n", "ls");
        assert!(!out.contains('\x1b'), "{out:?}");
    }
}
