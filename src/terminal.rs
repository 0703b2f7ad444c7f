//! What may reach the terminal. Command output, model text, tool names,
//! task names and verifier output are hostile: printed raw, their escape
//! sequences clear the screen, set the window title, move the cursor over
//! runner's own status lines or hide text. Everything printed for a human
//! goes through [`visible`], and colour is used only on a terminal without
//! `NO_COLOR`, for runner's own lines and for tracing's alike.
//!
//! The notation: every character a terminal acts on is written as the
//! escape Rust would use for it in a string literal, so `ESC [ 2 J` prints
//! as `\x1b[2J`. C0 controls (U+0000..U+001F) and DEL become `\xNN`
//! (two lowercase hex digits), C1 controls (U+0080..U+009F, which some
//! terminals take as 8-bit CSI, OSC...) and the bidirectional overrides
//! and isolates (U+202A..U+202E, U+2066..U+2069, which reorder what is
//! shown) become `\u{NN}`. Newline and tab are kept; a CR right before a
//! newline (a CRLF line end) is dropped, a lone CR is shown as `\x0d`.
//! A literal backslash is printed as is, so `\x1b` typed by a command and
//! an ESC look alike; the point is that neither acts on the terminal.
//! JSON output is not affected: serde already escapes control characters.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::IsTerminal;

/// `text` on one line, runs of whitespace (newlines included) made one
/// space: every error runner prints is one line, and a message can quote
/// an upstream body that is not (LiteLLM's carries a traceback). Events
/// and the trajectory keep the text as it came.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` with every character a terminal would act on made visible.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue;
        }
        if acts_on_terminal(c) {
            let n = c as u32;
            if n < 0x80 {
                let _ = write!(out, "\\x{n:02x}");
            } else {
                let _ = write!(out, "\\u{{{n:x}}}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`visible`] for one cell or line of a table or a log line: a newline
/// or a tab in it (a task's name is a directory's) is shown as `\n`,
/// `\t`, so it never splits the row.
pub fn one_cell(text: &str) -> String {
    visible(text).replace('\n', "\\n").replace('\t', "\\t")
}

/// Whether a terminal interprets `c` rather than just showing it.
fn acts_on_terminal(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// Whether stderr gets colour: only on a terminal, and never with
/// `NO_COLOR` set to anything non-empty (<https://no-color.org>).
pub fn stderr_color() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Sets up tracing on stderr (`RUNNER_LOG`, default `warn`): colour only
/// when [`stderr_color`] says so (a log file or CI log gets none), and
/// every message and field made visible.
pub fn init_tracing() {
    use tracing_subscriber::field::MakeExt;
    let fields = tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = visible(&text);
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{field}={text}")
        }
    })
    .delimited(" ");
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUNNER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(stderr_color())
        .fmt_fields(fields)
        .with_writer(std::io::stderr)
        .init();
}

/// Prints panics (a bug in runner) with their message made visible: a
/// panic message can quote model or command text. A backtrace follows
/// when `RUST_BACKTRACE` asks for one.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let what = info.payload_as_str().unwrap_or("a panic");
        let place = info
            .location()
            .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        eprintln!("runner panicked{place}: {}", visible(what));
        let trace = std::backtrace::Backtrace::capture();
        if trace.status() == std::backtrace::BacktraceStatus::Captured {
            eprintln!("{trace}");
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_become_escapes_and_text_stays() {
        assert_eq!(visible("plain text\tand tabs\n"), "plain text\tand tabs\n");
        assert!(matches!(visible("ünïcødé ✓"), Cow::Borrowed(_)));
        assert_eq!(visible("\x1b[2J"), "\\x1b[2J");
        assert_eq!(visible("\x1b]0;title\x07 bell"), "\\x1b]0;title\\x07 bell");
        assert_eq!(visible("a\rb"), "a\\x0db");
        assert_eq!(visible("line\r\nnext\r"), "line\nnext\\x0d");
        assert_eq!(visible("x\x08\x7f\x00"), "x\\x08\\x7f\\x00");
        assert_eq!(visible("\u{9b}31m \u{85}"), "\\u{9b}31m \\u{85}");
        assert_eq!(visible("abc\u{202e}fed"), "abc\\u{202e}fed");
    }

    #[test]
    fn nothing_visible_acts_on_a_terminal() {
        // Every char from U+0000 to U+2100 once: the output must hold no
        // control character but newline and tab.
        let all: String = (0u32..0x2100).filter_map(char::from_u32).collect();
        let shown = visible(&all);
        let raw: Vec<char> = shown
            .chars()
            .filter(|&c| c.is_control() && c != '\n' && c != '\t')
            .collect();
        assert!(raw.is_empty(), "{raw:?}");
        assert!(!shown.contains('\u{202e}'));
    }
}
