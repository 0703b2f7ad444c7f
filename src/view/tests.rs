//! The pages built from hostile directories: nothing in the data becomes
//! markup, nothing loads from anywhere, and what was cut is said.

use std::path::Path;

use serde_json::json;

use super::*;
use crate::eval::manifest::{MANIFEST_VERSION, SuiteManifest, write_attempt, write_suite};
use crate::eval::outcome::{Attempt, Status};

const HOSTILE: &str = "</script><script>alert(1)</script><img src=x onerror=alert(1)>";
/// The hostile string as escaped text.
const HOSTILE_ESCAPED: &str =
    "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;";
/// A task name that can be a directory name (no `/`).
const HOSTILE_NAME: &str = "t<img src=x onerror=alert(1)>";

fn trajectory(dir: &Path, full_output: &str) {
    let lines = [
        json!({"type": "run_started", "run_id": HOSTILE, "config": {"model": HOSTILE}}),
        json!({"type": "user_message", "text": HOSTILE}),
        json!({"type": "model_request", "step": 1, "messages": 1, "tools": 1, "max_tokens": 10}),
        json!({"type": "model_reply", "step": 1, "stop_reason": "tool_use", "cost_usd": 0.01, "total_cost_usd": 0.01,
               "usage": {"input_tokens": 5, "output_tokens": 7},
               "message": {"role": "assistant", "content": [
                   {"type": "text", "text": format!("model says {HOSTILE}")},
                   {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "echo"}}]}}),
        json!({"type": "tool_call", "step": 1, "id": "c1", "name": "bash", "input": {"command": format!("echo '{HOSTILE}'")}}),
        json!({"type": "tool_result", "step": 1, "id": "c1", "name": "bash", "is_error": false, "exit_code": 137,
               "timed_out": true, "oom_killed": true, "bytes_seen": 300000, "duration_ms": 5,
               "output": format!("out {HOSTILE}\n").repeat(200), "full_output": full_output}),
        json!({"type": "tool_call", "step": 2, "id": "c2", "name": "str_replace_based_edit_tool",
               "input": {"command": "create", "path": format!("/workspace/{HOSTILE}"), "file_text": "x"}}),
        json!({"type": "approval", "step": 2, "id": "c2", "command": HOSTILE, "rule": HOSTILE,
               "answer": HOSTILE, "asked": false, "edited": HOSTILE}),
        json!({"type": "notice", "message": HOSTILE}),
        json!({"type": "continuation", "message": HOSTILE, "replayed_messages": 4, "replayed_steps": 2,
               "previous_outcome": HOSTILE, "config": {"model": HOSTILE}}),
        json!({"type": HOSTILE}),
        json!({"type": "run_finished", "outcome": "completed", "steps": 2, "cost_usd": 0.01, "duration_ms": 9,
               "usage": {"input_tokens": 5, "output_tokens": 7}, "error": HOSTILE, "final_text": HOSTILE}),
    ];
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    text.push_str("{not json\n");
    std::fs::create_dir_all(dir.join("outputs")).unwrap();
    std::fs::write(dir.join("trajectory.jsonl"), text).unwrap();
}

/// Markup outside the page's own CSS and JS: every `<tag ...>`.
fn tags(page: &str) -> Vec<String> {
    let (css, js) = (include_str!("page.css"), include_str!("page.js"));
    let body = page.replace(css, "").replace(js, "");
    let re = regex::Regex::new(r"<[a-zA-Z!/][^>]*>").unwrap();
    re.find_iter(&body)
        .map(|m| m.as_str().to_string())
        .collect()
}

/// The page holds no markup but runner's and loads nothing.
fn assert_inert(page: &str) {
    assert!(
        !page.contains(HOSTILE),
        "the hostile string is raw in the page"
    );
    assert!(
        page.contains(HOSTILE_ESCAPED),
        "the hostile string is not shown as text"
    );
    assert_eq!(
        page.matches("<script").count(),
        2,
        "only the data block and the page's script"
    );
    assert_eq!(page.matches("</script>").count(), 2);
    for t in tags(page) {
        let lower = t.to_lowercase();
        for bad in [
            "<img", "<iframe", "<object", "<embed", "<link", "<base", " src=", "onerror", "url(",
        ] {
            assert!(!lower.contains(bad), "{bad} in a tag: {t}");
        }
        if let Some(i) = lower.find("href=\"") {
            assert!(
                lower[i + 6..].starts_with('#'),
                "a link leaves the page: {t}"
            );
        }
    }
    for bad in ["@import", "url(", "<link"] {
        assert!(!page.contains(bad), "{bad}");
    }
    // The CSP names the page's own script by hash.
    let js = include_str!("page.js");
    assert!(page.contains(&format!("<script>{js}</script>")));
    assert!(page.contains(&html::esc(&page::csp())), "no CSP meta");
    assert!(
        page::csp()
            .starts_with("default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-")
    );
    // The data block is JSON and gives back the strings as they were.
    let start = page.find("id=\"runner-data\">").unwrap() + "id=\"runner-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str::<serde_json::Value>(&page[start..end]).expect("the data block parses");
}

#[test]
fn a_hostile_run_directory_renders_inert_with_its_cuts_said() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let outside = tmp.path().join("secret.txt");
    std::fs::write(&outside, "HOST-FILE-CONTENT").unwrap();
    trajectory(&run, "/etc/elsewhere/out-1.txt");
    // Named by the trajectory under another directory: only outputs/ is read.
    std::fs::write(
        run.join("outputs/out-1.txt"),
        format!("full {HOSTILE}\n").repeat(10_000),
    )
    .unwrap();
    std::fs::write(run.join("verifier.log"), "v".repeat(300 * 1024)).unwrap();
    let page = render(&run).unwrap();
    assert_inert(&page);
    for want in [
        "TIMED OUT",
        "OOM-KILLED",
        "exit 137",
        "1 line(s) of the trajectory were not JSON",
        "event of unknown type",
        "full output, the first 64.0 KiB of (664.1 KiB)",
        "cut: the first 256.0 KiB of 300.0 KiB shown",
        "model says &lt;/script&gt;",
        "continued (runner continue): 4 message(s) replayed, after &lt;/script&gt;",
        "Writes by the edit tool",
        "<details class=\"out\"><summary>output shown to the model",
    ] {
        assert!(page.contains(want), "{want} missing");
    }
    assert!(!page.contains("HOST-FILE-CONTENT"));

    // A link planted in outputs/ is not read through.
    let run2 = tmp.path().join("run2");
    trajectory(&run2, "out-1.txt");
    std::os::unix::fs::symlink(&outside, run2.join("outputs/out-1.txt")).unwrap();
    let page = render(&run2).unwrap();
    assert!(!page.contains("HOST-FILE-CONTENT"));
    assert!(
        page.contains("full output (300000 bytes): opening"),
        "the refusal is said"
    );
    // A trajectory that is a link is refused too.
    let run3 = tmp.path().join("run3");
    std::fs::create_dir_all(&run3).unwrap();
    std::os::unix::fs::symlink(run.join("trajectory.jsonl"), run3.join("trajectory.jsonl"))
        .unwrap();
    assert!(matches!(
        render(&run3),
        Err(ViewError::Load(LoadError::NotResults { .. }))
    ));
}

fn attempt(dir: &Path, task: &str, n: u32, status: Status) -> Attempt {
    let mut a = Attempt::not_run(
        task,
        n,
        dir.join(task).join(n.to_string()),
        status,
        String::new(),
    );
    a.steps = 2;
    a.cost_usd = 0.5;
    a.phases.agent_ms = 1200;
    a.phases.total_ms = 2000;
    if status == Status::Fail {
        a.reward = Some(0.0);
        a.metrics.insert(HOSTILE.into(), 0.0);
        a.failure = Some(format!("reward 0 below 1: {HOSTILE}"));
        a.signals.push(crate::eval::evidence::Signal {
            kind: "tests".into(),
            detail: HOSTILE.into(),
        });
        a.loosenings.push(HOSTILE.into());
    } else if status == Status::Pass {
        a.reward = Some(1.0);
        a.pass = true;
    }
    a
}

#[test]
fn a_hostile_suite_renders_inert_failures_first_with_every_attempt() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tasks = vec![
        "good".to_string(),
        HOSTILE_NAME.to_string(),
        "gone".to_string(),
    ];
    let manifest = SuiteManifest {
        format: MANIFEST_VERSION,
        id: "eval-x".into(),
        fingerprint: "f".into(),
        tasks: tasks.clone(),
        attempts_per_task: 2,
        settings: json!({"agent": "model", "model": HOSTILE}),
        shard: None,
        shard_tasks: tasks,
        started_at: chrono::Local::now(),
        invocation: None,
    };
    write_suite(dir, &manifest).unwrap();
    for n in 1..=2 {
        write_attempt(&attempt(dir, "good", n, Status::Pass)).unwrap();
    }
    let bad = attempt(dir, HOSTILE_NAME, 1, Status::Fail);
    trajectory(&bad.run_dir, "x");
    write_attempt(&bad).unwrap();
    let mut err = attempt(dir, HOSTILE_NAME, 2, Status::Error);
    err.error = Some(format!("the engine said {HOSTILE}{}", "e".repeat(100_000)));
    write_attempt(&err).unwrap();
    let page = render(dir).unwrap();
    assert_inert(&page);
    assert!(!page.contains("<img src=x"), "the task name became markup");
    assert!(page.contains("t&lt;img src=x onerror=alert(1)&gt; #1"));
    // Failures first: the fail, the error, then the attempts never started.
    let pos = |s: &str| page.find(s).unwrap_or_else(|| panic!("{s} missing"));
    let failures = &page[pos("<h2>Failures</h2>")..pos("<h2>Attempts</h2>")];
    let (f, e, g) = (
        failures.find("reward 0 below 1: &lt;/script&gt;").unwrap(),
        failures.find("the engine said").unwrap(),
        failures.find("gone #1").unwrap(),
    );
    assert!(f < e && e < g, "{failures}");
    assert!(!failures.contains("good #"), "a pass among the failures");
    assert!(failures.contains("never started (no run directory)"));
    // Every attempt with a run directory has its section; the data has all six.
    assert_eq!(page.matches("<section class=\"attempt\"").count(), 4);
    let start = page.find("id=\"runner-data\">").unwrap() + "id=\"runner-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
    let rows = data["attempts"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    assert_eq!(rows[0]["task"], HOSTILE_NAME);
    assert_eq!(rows[0]["status"], "fail");
    assert_eq!(rows[1]["status"], "error");
    // A long reason is cut in the table's data and in the page, saying so.
    assert!(rows[1]["reason"].as_str().unwrap().len() < 1100);
    assert_eq!(
        page.matches("cut: 64.0 KiB of 97.7 KiB shown").count(),
        2,
        "the failures list and the section"
    );
    assert_eq!(rows[5]["status"], "pass");
    for want in [
        "Tamper signals",
        "Loosenings of the sandbox",
        ">2</div><div class=\"k\">passed",
        "pass@2",
    ] {
        assert!(page.contains(want), "{want} missing");
    }
}

#[test]
fn a_directory_of_neither_kind_is_refused_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let e = render(tmp.path()).unwrap_err();
    assert!(e.to_string().contains("holds neither a trajectory"), "{e}");
    assert!(e.hint().is_some());
    let e = render(&tmp.path().join("missing")).unwrap_err();
    assert!(matches!(e, ViewError::Load(LoadError::Open { .. })), "{e}");
}

#[test]
fn the_page_is_written_atomically_and_secrets_are_redacted() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    trajectory(&run, "x");
    std::fs::write(run.join("verifier.log"), "key sk-live-0123456789abcdef\n").unwrap();
    let out = tmp.path().join("page.html");
    // A link at the output's name is refused, not written through.
    let target = tmp.path().join("target.txt");
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, &out).unwrap();
    let r = Redactor::new(vec!["sk-live-0123456789abcdef".into()]).unwrap();
    assert!(write(&run, &out, Some(&r)).is_err());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    std::fs::remove_file(&out).unwrap();
    write(&run, &out, Some(&r)).unwrap();
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("[REDACTED]") && !page.contains("sk-live-0123456789abcdef"));
}

#[test]
fn a_flagged_pass_is_marked_in_the_cards_the_table_and_its_section() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let tasks = vec!["plain".to_string(), "tampered".to_string()];
    let manifest = SuiteManifest {
        format: MANIFEST_VERSION,
        id: "eval-f".into(),
        fingerprint: "f".into(),
        tasks: tasks.clone(),
        attempts_per_task: 1,
        settings: json!({"agent": "model"}),
        shard: None,
        shard_tasks: tasks,
        started_at: chrono::Local::now(),
        invocation: None,
    };
    write_suite(dir, &manifest).unwrap();
    write_attempt(&attempt(dir, "plain", 1, Status::Pass)).unwrap();
    let mut t = attempt(dir, "tampered", 1, Status::Pass);
    t.grading = Some(crate::eval::mode::GradingMode::Shared);
    t.signals.push(crate::eval::evidence::Signal {
        kind: "interpreter".into(),
        detail: "added /usr/local/bin/python3 (an interpreter tests run through)".into(),
    });
    write_attempt(&t).unwrap();
    let page = render(dir).unwrap();
    for want in [
        ">1</div><div class=\"k\">flagged passes",
        "<h3>Flagged pass</h3>",
        "evidence against the verifier itself (interpreter)",
    ] {
        assert!(page.contains(want), "{want} missing");
    }
    let start = page.find("id=\"runner-data\">").unwrap() + "id=\"runner-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
    let statuses: Vec<&str> = data["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["flagged", "pass"], "flagged before the passes");
}

/// Each part's configuration is read as the typed header it is and shown
/// as the trajectory holds it; an edited one is shown as it is, with why.
#[test]
fn a_configuration_is_shown_as_recorded_and_an_edited_one_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let config = crate::config::ConfigBuilder::default().build().unwrap();
    let header = crate::runtime::RunHeader::of(&config).to_value();
    let edited = json!({"provider": "scripted", "executor": "bogus"});
    let lines = [
        json!({"type": "run_started", "run_id": "r", "config": header}),
        json!({"type": "continuation", "message": "m", "replayed_messages": 1,
               "replayed_steps": 1, "previous_outcome": null, "config": edited}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(tmp.path().join("trajectory.jsonl"), text).unwrap();
    let page = render(tmp.path()).unwrap();
    for cfg in [&header, &edited] {
        let shown = html::esc(&serde_json::to_string_pretty(cfg).unwrap());
        assert!(page.contains(&shown), "{shown}");
    }
    let why = html::esc("the recorded configuration's executor is not one this runner reads");
    assert_eq!(page.matches(&why).count(), 1, "only the edited one: {why}");
}
