//! What the user sees: human text on stderr, JSON lines on stdout.
//! Everything on stderr is redacted and then made visible
//! ([`crate::terminal::visible`]): command output and model text cannot
//! drive the terminal.

use std::io::Write;
use std::sync::Mutex;

use crate::event::{Event, Outcome};
use crate::redact::{Redactor, TextStream};
use crate::terminal::{stderr_color, visible};

/// Lines of a command's output shown in human mode (the model sees more).
const HUMAN_OUTPUT_LINES: usize = 12;

/// Human-readable progress on stderr.
pub struct Human {
    color: bool,
    /// Whether the last thing printed was streamed text without a newline.
    mid_line: Mutex<bool>,
    /// Secrets kept off the terminal (and so off CI logs) too.
    redactor: std::sync::OnceLock<Redactor>,
    /// Streamed model text, redacted across deltas: a secret split between
    /// two deltas is held back until it is whole.
    deltas: Mutex<Option<TextStream>>,
}

impl Human {
    /// Colour only on a terminal and when `NO_COLOR` is unset.
    pub fn new() -> Self {
        let color = stderr_color();
        Human {
            color,
            mid_line: Mutex::new(false),
            redactor: std::sync::OnceLock::new(),
            deltas: Mutex::new(None),
        }
    }

    /// Redacts these secrets from everything printed from now on.
    pub fn set_redactor(&self, redactor: Redactor) {
        let _ = self.redactor.set(redactor);
    }

    /// The secrets kept off the terminal, once set.
    pub fn redactor(&self) -> Option<Redactor> {
        self.redactor.get().cloned()
    }

    /// `text` redacted and made visible: safe to print.
    fn safe(&self, text: &str) -> String {
        let redacted = match self.redactor.get() {
            Some(r) => r.redact(text).into_owned(),
            None => text.to_string(),
        };
        visible(&redacted).into_owned()
    }

    /// Streamed text redacted and made visible, safe to show now; `end`
    /// releases what is held back.
    fn safe_delta(&self, text: &str, end: bool) -> String {
        let Some(r) = self.redactor.get() else {
            return visible(text).into_owned();
        };
        let mut deltas = self.deltas.lock().unwrap_or_else(|e| e.into_inner());
        if deltas.is_none() {
            if end {
                return visible(&r.redact(text)).into_owned();
            }
            *deltas = TextStream::new(r);
        }
        let Some(stream) = deltas.as_mut() else {
            // Nothing to redact.
            return visible(text).into_owned();
        };
        let mut out = stream.push(text);
        if end {
            out.push_str(&stream.finish());
            *deltas = None;
        }
        visible(&out).into_owned()
    }

    /// Prints `text` (made safe) on a line of its own, in colour `code`
    /// when colour is on. The colour codes are added after the text is
    /// made visible: they are runner's own.
    fn styled_line(&self, code: Option<&str>, text: &str) {
        let text = self.safe(text);
        let text = match code {
            Some(code) if self.color => format!("\x1b[{code}m{text}\x1b[0m"),
            _ => text,
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{}", self.safe_delta("", true));
        if let Ok(mut mid) = self.mid_line.lock()
            && *mid
        {
            let _ = writeln!(err);
            *mid = false;
        }
        let _ = writeln!(err, "{text}");
    }

    /// Renders one event.
    pub fn render(&self, event: &Event) {
        match event {
            Event::TextDelta { text } => {
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "{}", self.safe_delta(text, false));
                let _ = err.flush();
                if let Ok(mut mid) = self.mid_line.lock() {
                    *mid = !text.ends_with('\n');
                }
            }
            Event::ToolCall { name, input, .. } => {
                self.styled_line(Some("1;36"), &tool_call_line(name, input));
            }
            Event::ToolResult { output, .. } => {
                self.styled_line(Some("2"), tool_output_lines(output).trim_end());
            }
            Event::ModelRetry {
                attempt,
                status,
                wait_ms,
                reason,
                ..
            } => {
                let status = status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
                self.styled_line(
                    Some("33"),
                    &format!(
                        "retrying model call{status} in {wait_ms} ms, attempt {attempt}: {}",
                        crate::terminal::one_line(reason)
                    ),
                );
            }
            Event::Notice { message } => self.styled_line(Some("33"), &format!("note: {message}")),
            Event::Continuation {
                replayed_messages,
                previous_outcome,
                ..
            } => self.styled_line(
                Some("33"),
                &format!(
                    "continuing: {} replayed; it last ended {}",
                    crate::plural::count_of(*replayed_messages, "message", "messages"),
                    previous_outcome.map_or("without run_finished (killed?)", |o| o.as_str())
                ),
            ),
            Event::Approval {
                asked,
                edited,
                rule,
                ..
            } => {
                if let Some(cmd) = edited {
                    self.styled_line(Some("1;36"), &format!("$ {cmd}  (edited)"));
                } else if !asked {
                    self.styled_line(
                        Some("2"),
                        &format!("approved without asking ({rule}): `a` was answered earlier"),
                    );
                }
            }
            Event::RunFinished {
                outcome,
                steps,
                usage,
                cost_usd,
                duration_ms,
                error,
                ..
            } => {
                if let Some(e) = error {
                    self.styled_line(
                        Some("1;31"),
                        &format!("error: {}", crate::terminal::one_line(e)),
                    );
                }
                let summary = format!(
                    "{} after {} in {:.1}s, ${cost_usd:.4} (tokens in {} / out {})",
                    outcome.as_str(),
                    crate::plural::count(*steps, "step", "steps"),
                    *duration_ms as f64 / 1000.0,
                    usage.total_input(),
                    usage.output_tokens
                );
                let ok = *outcome == Outcome::Completed;
                self.styled_line(Some(if ok { "32" } else { "31" }), &summary);
            }
            Event::RunStarted { .. }
            | Event::UserMessage { .. }
            | Event::ModelRequest { .. }
            | Event::ModelReply { .. } => {}
        }
    }

    /// The conversation prompt, on a line of its own.
    pub fn prompt(&self) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{}", self.safe_delta("", true));
        if let Ok(mut mid) = self.mid_line.lock()
            && *mid
        {
            let _ = writeln!(err);
            *mid = false;
        }
        let _ = write!(err, "> ");
        let _ = err.flush();
    }

    /// A line of the runner's own (warnings, where files went), made safe:
    /// it may quote paths, names or errors from the sandbox.
    pub fn say(&self, text: &str) {
        self.styled_line(None, text);
    }
}

impl Default for Human {
    fn default() -> Self {
        Human::new()
    }
}

/// Events as JSON lines on stdout (live text deltas left out), secrets
/// redacted.
pub fn json_line(event: &Event, redactor: &Redactor) {
    if matches!(event, Event::TextDelta { .. }) {
        return;
    }
    if let Ok(line) = serde_json::to_string(event) {
        let line = redactor.redact_json(&line);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// A tool call as the user sees it: `$ cmd` for bash.
fn tool_call_line(name: &str, input: &serde_json::Value) -> String {
    match input.get("command").and_then(|c| c.as_str()) {
        Some(cmd) if name == "bash" => format!("$ {cmd}"),
        Some(cmd) if name == crate::tools::edit::EDIT_TOOL_NAME => {
            let path = input.get("path").and_then(|p| p.as_str()).unwrap_or("");
            format!("edit: {cmd} {path}")
        }
        _ => format!("{name} {input}"),
    }
}

/// A tool's output indented, its middle cut past HUMAN_OUTPUT_LINES.
fn tool_output_lines(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let mut shown = String::new();
    let mut push = |l: &str| shown.push_str(&format!("  {l}\n"));
    if lines.len() > HUMAN_OUTPUT_LINES {
        let keep = HUMAN_OUTPUT_LINES / 2;
        lines[..keep].iter().for_each(|l| push(l));
        push(&format!("... ({} more lines) ...", lines.len() - 2 * keep));
        lines[lines.len() - keep..].iter().for_each(|l| push(l));
    } else {
        lines.iter().for_each(|l| push(l));
    }
    shown
}
