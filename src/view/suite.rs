//! The suite page: totals and pass@k, the failures with their full
//! reasons, the table of attempts (built by the page's script from the
//! JSON data block: sortable, filterable) and every attempt's section.

use std::time::Duration;

use serde_json::json;

use super::conversation::MAX_TEXT_BYTES;
use super::html::{Html, cap_str, millis};

/// Most bytes of a reason in the table (the failures list has 64 KiB).
const MAX_CELL_BYTES: usize = 1024;
use super::load::SuiteData;
use super::section;
use crate::eval::outcome::Attempt;
use crate::eval::report;

/// One row of the table, as the script gets it.
struct Row<'a> {
    anchor: Option<String>,
    task: &'a str,
    attempt: u32,
    status: &'static str,
    record: Option<&'a Attempt>,
    reason: Option<String>,
}

/// Where a status sorts: failures first, flagged passes before passes.
fn rank(status: &str) -> u8 {
    match status {
        "fail" => 0,
        "error" => 1,
        "interrupted" => 2,
        "missing" => 3,
        "skipped" => 4,
        "flagged" => 5,
        _ => 6,
    }
}

/// A record's status in the table: `flagged` for a flagged pass.
fn row_status(r: &Attempt) -> &'static str {
    if crate::eval::flagged::is_flagged(r) {
        "flagged"
    } else {
        r.status.as_str()
    }
}

/// The suite page's body and data.
pub fn render(s: &SuiteData, budget: usize) -> (String, String, Html, serde_json::Value) {
    let m = &s.manifest;
    let records: Vec<Attempt> = s.attempts.iter().filter_map(|a| a.record.clone()).collect();
    let (_, totals) = report::summarize(&records, m.attempts_per_task, Duration::ZERO);

    let rows = table_rows(s);
    let sorted = failures_first(&rows);
    let title = format!("runner eval {}", m.id);
    let subtitle = subtitle(s);

    let mut h = Html::new();
    h.raw("<div id=\"overview\">");
    let busy_ms = records.iter().map(|a| a.phases.total_ms).sum();
    cards(
        &mut h,
        &totals,
        rows.iter().filter(|r| r.status == "missing").count(),
        busy_ms,
    );
    failures(&mut h, &rows, &sorted);
    attempts_table(&mut h);
    h.raw("</div>\n");
    sections(&mut h, s, &rows, &sorted, budget);

    let data = json!({
        "kind": "suite",
        "attempts": data_rows(&rows, &sorted),
        "max_total_ms": max_total_ms(&records),
    });
    (title, subtitle, h, data)
}

/// One row per attempt directory, then one per missing attempt that has
/// no directory.
fn table_rows(s: &SuiteData) -> Vec<Row<'_>> {
    let mut rows: Vec<Row> = Vec::new();
    for (i, a) in s.attempts.iter().enumerate() {
        let anchor = Some(format!("a{i}"));
        match &a.record {
            Some(r) => rows.push(Row {
                anchor,
                task: &r.task,
                attempt: r.attempt,
                status: row_status(r),
                record: Some(r),
                reason: section::reason(r),
            }),
            None => {
                // A run directory with no record: listed among `missing`.
                let (task, n, why) = missing_for(s, &a.run.path);
                rows.push(Row {
                    anchor,
                    task,
                    attempt: n,
                    status: "missing",
                    record: None,
                    reason: Some(why),
                });
            }
        }
    }
    for (task, n, why) in &s.missing {
        let has_dir = rows
            .iter()
            .any(|r| r.record.is_none() && r.task == task && r.attempt == *n);
        if !has_dir {
            rows.push(Row {
                anchor: None,
                task,
                attempt: *n,
                status: "missing",
                record: None,
                reason: Some(why.clone()),
            });
        }
    }
    rows
}

/// Indices of `rows` in page order: by status rank, task, attempt.
fn failures_first(rows: &[Row]) -> Vec<usize> {
    let mut sorted: Vec<usize> = (0..rows.len()).collect();
    sorted.sort_by(|&x, &y| {
        let (a, b) = (&rows[x], &rows[y]);
        (rank(a.status), a.task, a.attempt).cmp(&(rank(b.status), b.task, b.attempt))
    });
    sorted
}

/// The line under the title: tasks, attempts, agent, model, shard, start
/// time and the suite's directory.
fn subtitle(s: &SuiteData) -> String {
    let m = &s.manifest;
    let agent = m
        .settings
        .get("agent")
        .and_then(|v| v.as_str())
        .unwrap_or("?");
    let mut subtitle = format!(
        "{} task(s), {} attempt(s) each, agent {agent}",
        if m.shard.is_some() {
            m.shard_tasks.len()
        } else {
            m.tasks.len()
        },
        m.attempts_per_task
    );
    if let Some(model) = m
        .settings
        .get("model")
        .and_then(|v| v.as_str())
        .filter(|_| agent == "model")
    {
        subtitle.push_str(&format!(" ({model})"));
    }
    if let Some(sh) = m.shard {
        subtitle.push_str(&format!(", shard {sh} of a {}-task suite", m.tasks.len()));
    }
    subtitle.push_str(&format!(
        ", started {}; {}",
        m.started_at.format("%Y-%m-%d %H:%M:%S %z"),
        s.path.display()
    ));
    subtitle
}

/// The failures list: every attempt that did not pass, with its reason.
fn failures(h: &mut Html, rows: &[Row], sorted: &[usize]) {
    h.raw("<h2>Failures</h2>");
    let bad: Vec<&Row> = sorted
        .iter()
        .map(|&i| &rows[i])
        .filter(|r| r.status != "pass" && r.status != "flagged")
        .collect();
    if bad.is_empty() {
        h.el("p", "note", "None: every attempt passed.");
        return;
    }
    h.raw("<ol class=\"failures\">");
    for r in &bad {
        h.raw("<li>");
        match &r.anchor {
            Some(a) => {
                h.raw("<a href=\"#")
                    .text(a)
                    .raw("\">")
                    .text(&format!("{} #{}", r.task, r.attempt))
                    .raw("</a>");
            }
            None => {
                h.text(&format!("{} #{}", r.task, r.attempt));
            }
        }
        h.raw(" ")
            .el("span", &format!("st st-{}", r.status), r.status);
        if let Some(why) = &r.reason {
            h.reason(why, MAX_TEXT_BYTES);
        }
        h.raw("</li>");
    }
    h.raw("</ol>");
}

/// The attempts table's tools and empty table; the page's script fills it
/// from the JSON data block.
fn attempts_table(h: &mut Html) {
    h.raw("<h2>Attempts</h2><div class=\"tools\">");
    h.raw("<input id=\"filter\" type=\"search\" placeholder=\"filter: task, status, reason\">");
    h.raw("<select id=\"status\"><option value=\"\">every status</option>");
    for st in [
        "fail",
        "error",
        "interrupted",
        "missing",
        "skipped",
        "flagged",
        "pass",
    ] {
        h.raw("<option>").raw(st).raw("</option>");
    }
    h.raw("</select><span id=\"shown\" class=\"note\"></span>");
    h.raw("<span class=\"legend note\"><span class=\"ph-image\"></span>image<span class=\"ph-setup\"></span>setup<span class=\"ph-agent\"></span>agent<span class=\"ph-verifier\"></span>verifier</span>");
    h.raw("</div>");
    h.raw("<table id=\"attempts\"><thead><tr>");
    for (key, label) in [
        ("order", "attempt"),
        ("status", "status"),
        ("reward", "reward"),
        ("", "metrics"),
        ("steps", "steps"),
        ("cost_usd", "cost"),
        ("total_ms", "phases"),
        ("signals", "signals"),
        ("", "reason"),
    ] {
        if key.is_empty() {
            h.raw("<th>").raw(label).raw("</th>");
        } else {
            h.raw("<th data-key=\"")
                .raw(key)
                .raw("\">")
                .raw(label)
                .raw("</th>");
        }
    }
    h.raw("</tr></thead><tbody></tbody></table>");
    h.raw("<noscript><p class=\"note\">The table needs JavaScript; every attempt's section follows below.</p></noscript>");
}

/// Every attempt's section, in the failures-first order.
fn sections(h: &mut Html, s: &SuiteData, rows: &[Row], sorted: &[usize], budget: usize) {
    for &i in sorted {
        let r = &rows[i];
        let Some(anchor) = &r.anchor else { continue };
        let Some(idx) = anchor
            .strip_prefix('a')
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(a) = s.attempts.get(idx) else {
            continue;
        };
        section::render(h, anchor, &format!("{} #{}", r.task, r.attempt), a, budget);
    }
}

/// The longest sum of an attempt's four phases. The image phase is shared
/// by a task's attempts and not part of total_ms: bars are scaled to this.
fn max_total_ms(records: &[Attempt]) -> u64 {
    records
        .iter()
        .map(|a| {
            let p = &a.phases;
            p.image_ms
                .saturating_add(p.setup_ms)
                .saturating_add(p.agent_ms)
                .saturating_add(p.verifier_ms)
        })
        .max()
        .unwrap_or(0)
}

/// The table's rows as the script gets them, in page order.
fn data_rows(rows: &[Row], sorted: &[usize]) -> Vec<serde_json::Value> {
    sorted
        .iter()
        .map(|&i| {
            let r = &rows[i];
            let rec = r.record;
            json!({
                "anchor": r.anchor,
                "task": r.task,
                "attempt": r.attempt,
                "status": r.status,
                "reward": rec.and_then(|a| a.reward),
                "metrics": rec.map(|a| json!(a.metrics)).unwrap_or(json!({})),
                "steps": rec.map_or(0, |a| a.steps),
                "cost_usd": rec.map_or(0.0, |a| a.cost_usd),
                "phases": rec.map(|a| json!(a.phases)).unwrap_or(json!({})),
                // Tamper signals and loosenings of the sandbox: counted in
                // the table, listed in the attempt's section.
                "signals": rec.map_or(0, |a| a.signals.len()),
                "loosenings": rec.map_or(0, |a| a.loosenings.len()),
                // The table's cell; the failures list has it in full.
                "reason": r.reason.as_deref().map(|t| {
                    let (shown, cut) = cap_str(t, MAX_CELL_BYTES);
                    if cut { format!("{shown}...") } else { shown.to_string() }
                }),
            })
        })
        .collect()
}

fn missing_for<'a>(s: &'a SuiteData, path: &std::path::Path) -> (&'a str, u32, String) {
    for (task, n, why) in &s.missing {
        if path.ends_with(std::path::Path::new(task).join(n.to_string())) {
            return (task, *n, why.clone());
        }
    }
    ("?", 0, "no attempt record".into())
}

fn cards(h: &mut Html, t: &report::Totals, missing: usize, busy_ms: u64) {
    let pct = |v: f64| format!("{:.1}%", v * 100.0);
    h.raw("<div class=\"cards\">");
    let mut card = |k: &str, v: String, class: &str| {
        h.raw("<div class=\"card ")
            .raw(class)
            .raw("\"><div class=\"v\">")
            .text(&v);
        h.raw("</div><div class=\"k\">").text(k).raw("</div></div>");
    };
    card("attempts", t.attempts.to_string(), "");
    card(
        "passed",
        t.passed.to_string(),
        if t.passed > 0 { "ok" } else { "" },
    );
    card(
        "failed",
        t.failed.to_string(),
        if t.failed > 0 { "bad" } else { "" },
    );
    card(
        "errors",
        t.errors.to_string(),
        if t.errors > 0 { "bad" } else { "" },
    );
    if t.flagged > 0 {
        card("flagged passes", t.flagged.to_string(), "bad");
    }
    if t.regraded > 0 {
        card(
            "regrade failed",
            t.regrade_failed.to_string(),
            if t.regrade_failed > 0 { "bad" } else { "ok" },
        );
    }
    if t.interrupted > 0 {
        card("interrupted", t.interrupted.to_string(), "bad");
    }
    if t.skipped > 0 {
        card("skipped", t.skipped.to_string(), "bad");
    }
    if missing > 0 {
        card("not recorded", missing.to_string(), "bad");
    }
    card("pass rate", pct(t.pass_rate), "");
    card("pass@1", format!("{:.2}", t.pass_at_1), "");
    if t.k > 1 {
        card(&format!("pass@{}", t.k), format!("{:.2}", t.pass_at_k), "");
    }
    card(
        "mean reward",
        t.mean_reward.map_or("-".into(), |r| format!("{r:.3}")),
        "",
    );
    card("cost", format!("${:.4}", t.cost_usd), "");
    card("attempt time (sum)", millis(busy_ms), "");
    h.raw("</div>");
}
