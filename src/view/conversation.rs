//! A run's trajectory as the conversation it was: each step's model text,
//! each tool call with its input, each result with its exit code (timed
//! out and OOM-killed marked) and its output, long outputs folded; each
//! part's configuration read as the typed header it is.

use serde_json::Value;

use super::html::{Html, bytes, millis};
use super::load::RunData;
use crate::runtime::header::HeaderError;
use crate::runtime::{RunHeader, StartedConfig};

/// Most bytes of one text (model text, a command, an output) shown.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Outputs longer than this (bytes or lines) are folded.
const FOLD_BYTES: usize = 2048;
const FOLD_LINES: usize = 25;

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn u(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The `config` of `ev` (a `run_started` or `continuation`), folded: the
/// header as `read` reads it, which is the JSON the trajectory holds; one
/// that is not a header a runner writes (an edited run directory) is
/// shown as it is, with why.
fn configuration(h: &mut Html, ev: &Value, read: impl Fn(&Value) -> Result<Value, HeaderError>) {
    let Some(cfg) = ev.get("config").filter(|c| !c.is_null()) else {
        return;
    };
    h.raw("<details><summary>configuration</summary>");
    match read(cfg) {
        Ok(header) => h.pre(&pretty(&header), MAX_TEXT_BYTES),
        Err(e) => h
            .el("p", "cut", &format!("{e}; shown as recorded."))
            .pre(&pretty(cfg), MAX_TEXT_BYTES),
    };
    h.raw("</details>");
}

/// Text shown in a `<pre>`, folded in `<details>` (with its size) when long.
fn output_block(h: &mut Html, label: &str, text: &str, total_bytes: u64) {
    let long = text.len() > FOLD_BYTES || text.lines().count() > FOLD_LINES;
    let summary = format!("{label} ({})", bytes(total_bytes));
    if long {
        h.raw("<details class=\"out\"><summary>")
            .text(&summary)
            .raw("</summary>");
        h.pre(text, MAX_TEXT_BYTES);
        h.raw("</details>");
    } else {
        h.el("div", "label", &summary);
        h.pre(text, MAX_TEXT_BYTES);
    }
}

/// Appends the conversation of `run`; stops (saying so) once the page
/// holds `budget` bytes.
pub fn render(h: &mut Html, run: &RunData, budget: usize) {
    match run.trajectory {
        None => {
            h.el(
                "p",
                "note",
                "No trajectory.jsonl in this run directory: there is no conversation to show.",
            );
            return;
        }
        Some((total, cut)) => {
            if cut {
                let note = format!(
                    "The trajectory has {}; only its first {} were read.",
                    bytes(total),
                    bytes(super::load::MAX_TRAJECTORY_BYTES)
                );
                h.el("p", "cut", &note);
            }
        }
    }
    if run.bad_lines > 0 {
        let note = format!(
            "{} line(s) of the trajectory were not JSON and are left out.",
            run.bad_lines
        );
        h.el("p", "cut", &note);
    }
    h.raw("<ol class=\"conv\">");
    for (i, ev) in run.events.iter().enumerate() {
        if h.len() > budget {
            let note = format!(
                "The page reached its size budget: {} more event(s) of this trajectory are not shown; `runner view {}` shows this run alone.",
                run.events.len() - i,
                run.path.display()
            );
            h.raw("<li>").el("p", "cut", &note).raw("</li>");
            break;
        }
        event(h, run, ev);
    }
    h.raw("</ol>");
}

fn event(h: &mut Html, run: &RunData, ev: &Value) {
    let kind = s(ev, "type");
    match kind {
        "run_started" => {
            h.raw("<li class=\"ev meta\">");
            h.el("span", "who", "run started");
            h.text(" ").text(s(ev, "run_id"));
            configuration(h, ev, |c| StartedConfig::read(c).map(|c| c.to_value()));
            h.raw("</li>");
        }
        "continuation" => {
            h.raw("<li class=\"ev meta\">");
            let line = format!(
                "continued (runner continue): {} message(s) replayed, after {}",
                u(ev, "replayed_messages").unwrap_or(0),
                ev.get("previous_outcome")
                    .and_then(Value::as_str)
                    .unwrap_or("no run_finished")
            );
            h.el("span", "who", &line);
            configuration(h, ev, |c| RunHeader::read(c).map(|c| c.to_value()));
            h.raw("</li>");
        }
        "user_message" => {
            h.raw("<li class=\"ev user\">").el("div", "who", "user");
            h.pre(s(ev, "text"), MAX_TEXT_BYTES).raw("</li>");
        }
        "model_request" => {}
        "model_retry" => {
            let line = format!(
                "model call retried (step {}, attempt {}, status {}, waited {}): {}",
                u(ev, "step").unwrap_or(0),
                u(ev, "attempt").unwrap_or(0),
                u(ev, "status").map_or("-".into(), |v| v.to_string()),
                millis(u(ev, "wait_ms").unwrap_or(0)),
                s(ev, "reason")
            );
            h.raw("<li class=\"ev notice\">").text(&line).raw("</li>");
        }
        "model_reply" => model_reply(h, ev),
        "tool_call" => tool_call(h, ev),
        "tool_result" => tool_result(h, run, ev),
        "approval" => approval(h, ev),
        "notice" => {
            h.raw("<li class=\"ev notice\">")
                .text(s(ev, "message"))
                .raw("</li>");
        }
        "run_finished" => run_finished(h, ev),
        other => {
            h.raw("<li class=\"ev notice\">")
                .text(&format!("event of unknown type {other:?}"))
                .raw("</li>");
        }
    }
}

/// A tool call: a bare command as it is, any other input as JSON.
fn tool_call(h: &mut Html, ev: &Value) {
    h.raw("<li class=\"ev call\">");
    h.el("div", "who", &format!("tool call: {}", s(ev, "name")));
    let input = ev.get("input").cloned().unwrap_or(Value::Null);
    match input.get("command").and_then(Value::as_str) {
        Some(cmd) if input.as_object().is_some_and(|o| o.len() <= 2) => {
            h.pre(cmd, MAX_TEXT_BYTES);
            if let Some(t) = u(&input, "timeout") {
                h.el("div", "label", &format!("timeout {t} s"));
            }
        }
        _ => {
            h.pre(&pretty(&input), MAX_TEXT_BYTES);
        }
    }
    h.raw("</li>");
}

/// An approval: the rule, the answer and a command edited before it ran.
fn approval(h: &mut Html, ev: &Value) {
    let asked = ev.get("asked").and_then(Value::as_bool).unwrap_or(true);
    let line = format!(
        "approval ({}): {}{}",
        s(ev, "rule"),
        s(ev, "answer"),
        if asked {
            ""
        } else {
            ", approved by an earlier `a`"
        }
    );
    h.raw("<li class=\"ev notice\">").text(&line);
    if let Some(cmd) = ev.get("edited").and_then(Value::as_str) {
        h.el("div", "label", "ran instead");
        h.pre(cmd, MAX_TEXT_BYTES);
    }
    h.raw("</li>");
}

/// The run's end: outcome, steps, time, cost, error and final text.
fn run_finished(h: &mut Html, ev: &Value) {
    h.raw("<li class=\"ev meta\">");
    let line = format!(
        "run finished: {} after {} step(s), {}, ${:.4}",
        s(ev, "outcome"),
        u(ev, "steps").unwrap_or(0),
        millis(u(ev, "duration_ms").unwrap_or(0)),
        ev.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0)
    );
    h.el("span", "who", &line);
    if let Some(e) = ev.get("error").and_then(Value::as_str) {
        h.el("div", "reason", e);
    }
    if let Some(t) = ev.get("final_text").and_then(Value::as_str) {
        h.el("div", "label", "final text");
        h.pre(t, MAX_TEXT_BYTES);
    }
    h.raw("</li>");
}

fn model_reply(h: &mut Html, ev: &Value) {
    h.raw("<li class=\"ev model\">");
    let usage = ev.get("usage");
    let tokens = |k| usage.and_then(|v| u(v, k)).unwrap_or(0);
    let head = format!(
        "model, step {} ({} in / {} out tokens, ${:.4}, stop: {})",
        u(ev, "step").unwrap_or(0),
        tokens("input_tokens"),
        tokens("output_tokens"),
        ev.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0),
        ev.get("stop_reason")
            .map(|r| r.as_str().map_or_else(|| r.to_string(), str::to_string))
            .unwrap_or_default()
    );
    h.el("div", "who", &head);
    let blocks = ev
        .pointer("/message/content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for b in blocks {
        // Tool calls follow as their own events.
        if s(b, "type") == "text" {
            h.raw("<div class=\"text\">")
                .text(s(b, "text"))
                .raw("</div>");
        }
    }
    h.raw("</li>");
}

fn tool_result(h: &mut Html, run: &RunData, ev: &Value) {
    let (timed_out, oom, is_error) = (
        flag(ev, "timed_out"),
        flag(ev, "oom_killed"),
        flag(ev, "is_error"),
    );
    let class = if timed_out || oom || is_error {
        "ev result bad"
    } else {
        "ev result"
    };
    h.raw("<li class=\"").raw(class).raw("\">");
    h.el("div", "who", &format!("result: {}", s(ev, "name")));
    h.raw("<div class=\"badges\">");
    match ev.get("exit_code").and_then(Value::as_i64) {
        Some(0) => h.el("span", "badge ok", "exit 0"),
        Some(c) => h.el("span", "badge bad", &format!("exit {c}")),
        None => h.el("span", "badge", "no exit code"),
    };
    if timed_out {
        h.el("span", "badge bad", "TIMED OUT");
    }
    if oom {
        h.el("span", "badge bad", "OOM-KILLED");
    }
    if is_error {
        h.el("span", "badge bad", "tool error");
    }
    h.el("span", "badge", &millis(u(ev, "duration_ms").unwrap_or(0)));
    h.raw("</div>");
    let output = s(ev, "output");
    let seen = u(ev, "bytes_seen").unwrap_or(output.len() as u64);
    output_block(h, "output shown to the model", output, output.len() as u64);
    if let Some(name) = ev.get("full_output").and_then(Value::as_str) {
        match run.full_output(name) {
            Some(Ok(c)) if !c.truncated && c.text == output => {
                h.el(
                    "p",
                    "note",
                    "The model saw all of the output (outputs/ holds the same).",
                );
            }
            Some(Ok(c)) => {
                let label = if c.truncated {
                    format!(
                        "full output, the first {} of",
                        bytes(super::load::MAX_FULL_OUTPUT_BYTES)
                    )
                } else {
                    "full output".to_string()
                };
                output_block(h, &label, &c.text, c.total_bytes);
            }
            Some(Err(e)) => {
                h.el("p", "note", &format!("full output ({seen} bytes): {e}"));
            }
            None => {
                h.el(
                    "p",
                    "note",
                    &format!("full output ({seen} bytes) not in this run's outputs/"),
                );
            }
        }
    } else if seen > output.len() as u64 {
        h.el("p", "note", &format!("the command printed {seen} bytes"));
    }
    h.raw("</li>");
}
