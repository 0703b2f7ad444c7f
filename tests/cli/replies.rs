//! What the model API sends back, as the user sees it: an empty reply is
//! asked again once and then ends the run as `empty_reply` (never
//! `completed`); a multi-line upstream error is one line on stderr and
//! whole in the trajectory; a slow API is told apart from an unreachable
//! one. Fake servers on 127.0.0.1 speaking the real wire formats.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::binary::{Dir, Ran, of_type, outcome, run};
use crate::support::fake_model::{FakeResponse, FakeServer, anthropic_events};
use crate::support::serial::shared;

const WS: &str = "ws";

fn anthropic_run(d: &Dir, server: &FakeServer, extra: &[&str]) -> Ran {
    std::fs::create_dir_all(d.path().join(WS)).expect("create the workspace");
    run(d
        .runner()
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-key-123456")
        .args(["--executor", "local", "--workspace", WS])
        .args(extra)
        .arg("say something"))
}

/// An Anthropic stream with no content block and 0 output tokens, ending
/// `end_turn`: what a LiteLLM proxy sent for a broken upstream body. The
/// events are those of a real stream (message_start, message_delta,
/// message_stop), with the usage zeroed.
fn empty_reply() -> FakeResponse {
    let mut events = anthropic_events(None, &[], "end_turn");
    for e in &mut events {
        if let Some(u) = e.pointer_mut("/message/usage/output_tokens") {
            *u = json!(0);
        }
        if let Some(u) = e.pointer_mut("/usage/output_tokens") {
            *u = json!(0);
        }
    }
    FakeResponse::anthropic_sse(events)
}

#[test]
fn an_empty_reply_twice_ends_as_empty_reply_with_exit_2() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![empty_reply(), empty_reply()]);
    let r = anthropic_run(&d, &server, &[]);
    r.expect_code(2);
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "empty_reply", "{}", r.explain());
    let finished = of_type(&traj, "run_finished");
    assert!(
        finished[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("empty reply 2 times in a row")),
        "{finished:?}"
    );
    let err = r.stderr();
    assert!(
        err.contains("error: the model sent an empty reply 2 times in a row")
            && err.contains("\nhint: the model API (or a proxy in front of it) returned nothing"),
        "{}",
        r.explain()
    );
    assert!(err.contains("empty_reply after 2 steps"), "{}", r.explain());
    // Asked once more, with the same conversation.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["messages"], reqs[1].body["messages"]);
    server.assert_protocol_ok();
}

#[test]
fn an_empty_reply_then_a_good_one_completes() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        empty_reply(),
        FakeResponse::anthropic_text("here it is"),
    ]);
    let r = anthropic_run(&d, &server, &[]);
    r.expect_code(0);
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "completed");
    assert_eq!(
        of_type(&traj, "run_finished")[0]["final_text"],
        "here it is"
    );
    let notices: Vec<&Value> = of_type(&traj, "notice");
    assert!(
        notices
            .iter()
            .any(|n| n["message"].as_str().unwrap_or("").contains("empty reply")),
        "{notices:?}"
    );
    server.assert_protocol_ok();
    server.assert_all_served();
}

#[test]
fn a_multi_line_upstream_error_is_one_line_on_stderr_and_whole_in_the_trajectory() {
    let _s = shared();
    let d = Dir::new();
    // LiteLLM's proxy: an OpenAI-style body whose message carries the
    // upstream's text and traceback, newlines included.
    let message = "litellm.BadRequestError: OpenAIException - upstream said no\nTraceback (most recent call last):\n  File \"/app/litellm/main.py\", line 42, in completion\n    raise e\nReceived Model Group=gpt-4o";
    let server = FakeServer::start_blocking(vec![FakeResponse::status(
        400,
        &[],
        json!({"error": {"message": message, "type": null, "param": null, "code": "400"}}),
    )]);
    std::fs::create_dir_all(d.path().join(WS)).expect("create the workspace");
    let r = run(d
        .runner()
        .env("OPENAI_BASE_URL", server.openai_url())
        .env("OPENAI_API_KEY", "sk-openai-fake-123456")
        .args(["--provider", "openai", "--model", "gpt-4o"])
        .args(["--executor", "local", "--workspace", WS, "x"]));
    r.expect_code(2);
    let err = r.stderr();
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    assert!(
        line.contains(
            "upstream said no Traceback (most recent call last): File \"/app/litellm/main.py\", line 42, in completion raise e Received Model Group=gpt-4o"
        ),
        "{}",
        r.explain()
    );
    assert!(
        !err.lines()
            .any(|l| l.starts_with("Traceback") || l.starts_with("  File")),
        "{}",
        r.explain()
    );
    let traj = d.trajectory();
    let recorded = of_type(&traj, "run_finished")[0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        recorded.contains("upstream said no\nTraceback (most recent call last):\n  File"),
        "{recorded}"
    );
}

#[test]
fn a_slow_api_is_told_apart_from_an_unreachable_one() {
    let _s = shared();
    let d = Dir::new();
    // Every attempt (5, the retry policy's default) connects and gets no
    // answer within --model-timeout.
    let late =
        || FakeResponse::anthropic_text("too late").with_head_delay(Duration::from_millis(2500));
    let server = FakeServer::start_blocking((0..5).map(|_| late()).collect());
    let r = anthropic_run(&d, &server, &["--model-timeout", "1"]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("error: gave up after 5 attempts: the model API at http://127.0.0.1:")
            && err.contains("timed out: no response within 1s"),
        "{}",
        r.explain()
    );
    assert!(
        err.contains(
            "hint: the API accepted the connection but was slow; raise --model-timeout (now 1s)"
        ),
        "{}",
        r.explain()
    );
    assert!(
        !err.contains("cannot reach") && !err.contains("--base-url"),
        "{}",
        r.explain()
    );
    assert_eq!(server.requests().len(), 5);
}
