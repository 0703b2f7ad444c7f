//! One attempt's (or run's) section: what it was, why it failed, the
//! tamper signals and loosenings, what the agent changed as far as runner
//! knows, the conversation and the verifier's log.

use serde_json::Value;

use super::conversation::{self, MAX_TEXT_BYTES};
use super::html::{Html, bytes, millis};
use super::load::{AttemptData, MAX_VERIFIER_LOG_BYTES};
use crate::eval::outcome::Attempt;
use crate::tools::edit::EDIT_TOOL_NAME;

/// The line a failing, erroring or skipped attempt is explained by.
pub fn reason(a: &Attempt) -> Option<String> {
    a.failure.clone().or_else(|| a.error.clone())
}

/// Appends the section of `attempt` with the id `anchor`.
pub fn render(h: &mut Html, anchor: &str, title: &str, attempt: &AttemptData, budget: usize) {
    h.raw("<section class=\"attempt\" id=\"")
        .text(anchor)
        .raw("\">");
    h.raw("<a class=\"back\" href=\"#\">&larr; all attempts</a>");
    h.raw("<h2>").text(title);
    if let Some(a) = &attempt.record {
        h.raw(" ").el(
            "span",
            &format!("st st-{}", a.status.as_str()),
            a.status.as_str(),
        );
    }
    h.raw("</h2>");
    match &attempt.record {
        Some(a) => facts(h, a),
        None => {
            h.el(
                "p",
                "note",
                "No attempt record (attempt.json): showing the run directory as it is.",
            );
        }
    }
    h.el(
        "p",
        "note",
        &format!("run directory: {}", attempt.run.path.display()),
    );
    for p in &attempt.run.problems {
        h.el("p", "cut", p);
    }
    if let Some(a) = &attempt.record {
        evidence(h, a);
    }
    changes(h, attempt);
    h.raw("<h3>Conversation</h3>");
    if h.len() > budget {
        h.el("p", "cut", &format!(
            "Left out: the page reached its size budget. `runner view {}` shows this attempt alone.",
            attempt.run.path.display()
        ));
    } else {
        conversation::render(h, &attempt.run, budget);
    }
    verifier_log(h, attempt, budget);
    h.raw("</section>\n");
}

fn fact(h: &mut Html, k: &str, v: &str) {
    h.raw("<dt>").text(k).raw("</dt><dd>").text(v).raw("</dd>");
}

fn facts(h: &mut Html, a: &Attempt) {
    if let Some(r) = reason(a) {
        h.reason(&r, MAX_TEXT_BYTES);
    }
    h.raw("<dl class=\"facts\">");
    fact(
        h,
        "reward",
        &a.reward.map_or("-".into(), |r| format!("{r}")),
    );
    if !a.metrics.is_empty() {
        let m: Vec<String> = a.metrics.iter().map(|(k, v)| format!("{k} {v}")).collect();
        fact(h, "metrics", &m.join(", "));
    }
    fact(h, "agent outcome", &a.agent_outcome);
    fact(h, "steps", &a.steps.to_string());
    fact(
        h,
        "cost",
        &format!(
            "${:.4} ({} in / {} out tokens)",
            a.cost_usd, a.usage.input_tokens, a.usage.output_tokens
        ),
    );
    let p = &a.phases;
    fact(
        h,
        "phases",
        &format!(
            "image {}, setup {}, agent {}, verifier {}; total {}",
            millis(p.image_ms),
            millis(p.setup_ms),
            millis(p.agent_ms),
            millis(p.verifier_ms),
            millis(p.total_ms)
        ),
    );
    if let Some(k) = a.error_kind {
        fact(h, "error kind", &format!("{k:?}").to_lowercase());
    }
    if let Some(g) = a.grading {
        fact(h, "grading", g.as_str());
    }
    fact(h, "network", &a.network);
    fact(h, "runtime", a.runtime.as_deref().unwrap_or("-"));
    fact(h, "image", a.image.as_deref().unwrap_or("-"));
    fact(h, "tries", &a.tries.to_string());
    for t in &a.earlier_tries {
        let line = format!(
            "{} in {}{}",
            t.status.as_str(),
            t.run_dir.display(),
            t.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
        fact(h, "earlier try", &line);
    }
    h.raw("</dl>");
}

fn evidence(h: &mut Html, a: &Attempt) {
    if crate::eval::flagged::is_flagged(a) {
        h.raw("<h3>Flagged pass</h3>");
        h.el(
            "p",
            "note",
            &format!(
                "Its tamper signals are evidence against the verifier itself ({}): Harbor's verdict is kept, and the suite fails unless --accept-flagged.",
                crate::eval::flagged::kinds(a).join(", ")
            ),
        );
    }
    if let Some(r) = &a.regrade {
        let reward = r.reward.map_or("-".into(), |v| format!("{v:.2}"));
        let why = r
            .reason
            .as_deref()
            .map(|w| format!(": {w}"))
            .unwrap_or_default();
        h.el(
            "p",
            "note",
            &format!(
                "Graded again {}: {} (reward {reward}){why}; verifier log in {}",
                r.grading,
                r.status.as_str(),
                r.run_dir.display()
            ),
        );
    }
    if !a.signals.is_empty() {
        h.raw("<h3>Tamper signals</h3><ul class=\"signals\">");
        for s in &a.signals {
            h.raw("<li>")
                .el("span", "badge", &s.kind)
                .text(" ")
                .text(&s.detail)
                .raw("</li>");
        }
        h.raw("</ul>");
    }
    if !a.loosenings.is_empty() {
        h.raw("<h3>Loosenings of the sandbox</h3><ul class=\"loosenings\">");
        for l in &a.loosenings {
            h.raw("<li>").text(l).raw("</li>");
        }
        h.raw("</ul>");
    }
}

/// What runner knows of the files the agent changed: the edit tool's
/// writes from the trajectory and the tamper signals. Shell commands'
/// writes are not recorded, and the section says so.
fn changes(h: &mut Html, attempt: &AttemptData) {
    h.raw("<h3>Files the agent changed</h3>");
    let mut edits: Vec<(String, String)> = Vec::new();
    for ev in &attempt.run.events {
        if ev.get("type").and_then(Value::as_str) != Some("tool_call")
            || ev.get("name").and_then(Value::as_str) != Some(EDIT_TOOL_NAME)
        {
            continue;
        }
        let input = ev.get("input");
        let cmd = input
            .and_then(|i| i.get("command"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let path = input
            .and_then(|i| i.get("path"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if matches!(cmd, "create" | "str_replace" | "insert" | "undo_edit") && !path.is_empty() {
            edits.push((path.to_string(), cmd.to_string()));
        }
    }
    if edits.is_empty() {
        h.el("p", "note", "runner does not record a list of changed files; no edit-tool writes are in the trajectory, and what shell commands wrote is only visible in the conversation below.");
    } else {
        h.el("p", "note", "Writes by the edit tool, from the trajectory (what shell commands wrote is only visible in the conversation below):");
        h.raw("<ul class=\"edits\">");
        for (path, cmd) in edits {
            h.raw("<li><code>")
                .text(&path)
                .raw("</code> ")
                .el("span", "label", &cmd)
                .raw("</li>");
        }
        h.raw("</ul>");
    }
    if let Some(a) = &attempt.record {
        let n = a.signals.len();
        let line = if n == 0 {
            "No tamper signals: the agent changed nothing runner watches on the verifier's path."
                .to_string()
        } else {
            format!("{n} tamper signal(s) above name what it changed on the verifier's path.")
        };
        h.el("p", "note", &line);
    }
}

fn verifier_log(h: &mut Html, attempt: &AttemptData, budget: usize) {
    let Some(log) = &attempt.run.verifier_log else {
        if attempt
            .record
            .as_ref()
            .is_some_and(|a| a.verifier_log.is_some())
        {
            h.raw("<h3>Verifier log</h3>");
            h.el(
                "p",
                "note",
                "The record names a verifier log, but verifier.log is not in the run directory.",
            );
        }
        return;
    };
    h.raw("<h3>Verifier log</h3>");
    if h.len() > budget {
        h.el("p", "cut", "Left out: the page reached its size budget.");
        return;
    }
    let label = format!("verifier.log ({})", bytes(log.total_bytes));
    h.raw("<details class=\"out\" open><summary>")
        .text(&label)
        .raw("</summary>");
    h.pre(
        &log.text,
        MAX_TEXT_BYTES.max(usize::try_from(MAX_VERIFIER_LOG_BYTES).unwrap_or(usize::MAX)),
    );
    h.raw("</details>");
    if log.truncated {
        h.el(
            "p",
            "cut",
            &format!(
                "cut: the first {} of {} shown",
                bytes(MAX_VERIFIER_LOG_BYTES),
                bytes(log.total_bytes)
            ),
        );
    }
}
