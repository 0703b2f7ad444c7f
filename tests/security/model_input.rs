//! Finding 4, model input that crashes runner: tool input no model should
//! send (a timeout of 1e20 seconds, negative, zero, 1e308, a string) is
//! clamped or refused as a tool error; the run goes on and its trajectory
//! ends with `run_finished`, in a plain run and in `runner eval`. A bug
//! that panics still ends the run (or the attempt) cleanly.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::binary::{Dir, Exec, Ran, of_type, outcome, read_jsonl, run, run_id_of};
use crate::support::docker::{TINY, containers_of_run};
use crate::support::eval::{assert_clean, eval_cmd, prelude, report, run_with_pid, task, toml};

/// The limit passed with --max-command-timeout, easy to spot in results.
const MAX_SECS: &str = "37";

/// A script that sends every odd timeout, each turn checking the previous
/// command's result, then ends.
fn odd_timeouts_script() -> Value {
    json!([
        {"tool_calls": [{"name": "bash", "input": {"command": "echo ran-huge", "timeout": 1e20}}]},
        {"expect": "ran-huge",
         "tool_calls": [{"name": "bash", "input": {"command": "echo ran-negative", "timeout": -1}}]},
        {"expect": "positive number",
         "tool_calls": [{"name": "bash", "input": {"command": "echo ran-zero", "timeout": 0}}]},
        {"expect": "positive number",
         "tool_calls": [{"name": "bash", "input": {"command": "echo ran-max", "timeout": 1e308}}]},
        {"expect": "ran-max",
         "tool_calls": [{"name": "bash", "input": {"command": "echo ran-string", "timeout": "5"}}]},
        {"expect": "must be a number", "text": "all done"}
    ])
}

/// Checks the tool results of the odd-timeouts script in `events`.
fn check_odd_timeout_results(events: &[Value], explain: &str) {
    let results: Vec<String> = of_type(events, "tool_result")
        .iter()
        .map(|r| r["output"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(results.len(), 5, "{results:?}{explain}");
    for (i, word) in [(0, "ran-huge"), (3, "ran-max")] {
        assert!(results[i].contains(word), "the command ran: {results:?}");
        assert!(
            results[i].contains(&format!("{MAX_SECS}s")),
            "the result says the timeout was lowered to the limit: {:?}",
            results[i]
        );
    }
    for (i, word) in [(1, "ran-negative"), (2, "ran-zero"), (4, "ran-string")] {
        assert!(
            !results[i].contains(word) && results[i].starts_with("error:"),
            "refused, not run: {:?}",
            results[i]
        );
    }
}

#[test]
fn odd_timeouts_from_the_model_are_clamped_or_refused_and_the_run_ends_normally() {
    let d = Dir::new();
    let script = d.write("script.json", &odd_timeouts_script().to_string());
    let ran = run(d
        .scripted(script.to_str().expect("utf-8"))
        .args(Exec::Docker.args())
        .args(["--timeout", "20", "--max-command-timeout", MAX_SECS])
        .arg("try odd timeouts"));
    ran.expect_code(0);
    let explain = ran.explain();
    let events = d.trajectory();
    assert_eq!(outcome(&events), "completed", "{explain}");
    check_odd_timeout_results(&events, &explain);
    // The tool's description names the limit the model may ask for.
    let started = &of_type(&events, "run_started")[0];
    assert_eq!(
        started["config"]["max_command_timeout_secs"], 37,
        "{started}"
    );
    let id = run_id_of(&events);
    assert!(containers_of_run(&id).is_empty(), "sandbox removed");
}

#[test]
fn a_panic_inside_a_run_ends_it_as_an_error_with_a_complete_trajectory() {
    let d = Dir::new();
    let script = json!([
        {"tool_calls": [{"name": "bash", "input": {"command": "echo before"}}]},
        {"expect": "before", "panic": "injected bug"}
    ]);
    let script = d.write("script.json", &script.to_string());
    let ran = run(d
        .scripted(script.to_str().expect("utf-8"))
        .args(Exec::Docker.args())
        .arg("panic please"));
    let explain = ran.explain();
    assert_ne!(ran.code(), 101, "runner crashed{explain}");
    ran.expect_code(2);
    assert!(
        ran.stderr()
            .contains("error: internal error: injected bug (a bug in runner; please report it)"),
        "{explain}"
    );
    let events = d.trajectory();
    assert_eq!(outcome(&events), "error", "{explain}");
    let last = events.last().expect("events");
    assert!(
        last["error"]
            .as_str()
            .unwrap_or_default()
            .contains("injected bug"),
        "{last}"
    );
    // The sandbox was still shut down.
    let id = run_id_of(&events);
    assert!(
        containers_of_run(&id).is_empty(),
        "sandbox removed{explain}"
    );
}

/// Runs `runner eval` with the scripted agent on a suite of two tasks
/// that pass when the agent phase ends normally; returns the result and
/// the JSON report (which must have been written).
fn eval_with_script(d: &Dir, script: &Value) -> (Ran, Value) {
    let suite = d.path().join("suite");
    for name in ["first", "second"] {
        task(
            &suite,
            name,
            &[
                ("instruction.md", "say hi\n"),
                ("task.toml", &toml(TINY, 60, 30)),
                ("tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n"),
            ],
        );
    }
    let script = d.write("script.json", &script.to_string());
    let (ran, pid) = run_with_pid(eval_cmd(
        d,
        &[
            "suite",
            "--provider",
            "scripted",
            "--script",
            script.to_str().expect("utf-8"),
            "--timeout",
            "20",
            "--max-command-timeout",
            MAX_SECS,
        ],
    ));
    assert_ne!(ran.code(), 101, "runner crashed{}", ran.explain());
    assert_clean(pid, &ran.desc);
    let r = report(d, &ran);
    assert!(d.path().join("junit.xml").is_file(), "{}", ran.explain());
    assert!(d.path().join("summary.md").is_file(), "{}", ran.explain());
    let attempts = r["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "both attempts recorded{}", ran.explain());
    for a in attempts {
        let traj = a["trajectory"].as_str().expect("a trajectory");
        let last = read_jsonl(Path::new(traj)).pop().expect("events");
        assert_eq!(
            last["type"],
            "run_finished",
            "{traj}: {last}{}",
            ran.explain()
        );
    }
    (ran, r)
}

#[test]
fn odd_timeouts_in_eval_are_clamped_or_refused_and_every_attempt_completes() {
    let _g = prelude();
    let d = Dir::new();
    let (ran, r) = eval_with_script(&d, &odd_timeouts_script());
    let explain = ran.explain();
    ran.expect_code(0);
    for a in r["attempts"].as_array().expect("attempts") {
        assert_eq!(a["status"], "pass", "{a}{explain}");
        let traj = a["trajectory"].as_str().expect("trajectory");
        check_odd_timeout_results(&read_jsonl(Path::new(traj)), &explain);
    }
}

#[test]
fn a_panic_inside_an_eval_attempt_is_that_attempts_error_not_the_suites() {
    let _g = prelude();
    let d = Dir::new();
    let script = json!([
        {"tool_calls": [{"name": "bash", "input": {"command": "echo before"}}]},
        {"expect": "before", "panic": "injected bug in an attempt"}
    ]);
    let (ran, r) = eval_with_script(&d, &script);
    let explain = ran.explain();
    // Errors fail the suite (--fail-on-error), with every report written.
    ran.expect_code(2);
    for a in r["attempts"].as_array().expect("attempts") {
        assert_eq!(a["status"], "error", "{a}{explain}");
        let e = a["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("internal error: injected bug in an attempt"),
            "{a}{explain}"
        );
    }
    assert_eq!(r["totals"]["errors"], 2, "{explain}");
}
