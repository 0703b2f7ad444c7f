//! The binary against fake Anthropic and OpenAI servers on 127.0.0.1 that
//! speak the real wire formats and check the protocol on every request.

use crate::support::binary::{Dir, Ran, of_type, outcome, run};
use crate::support::fake_model::{FakeResponse, FakeServer, anthropic_error};
use crate::support::serial::shared;

/// The workspace of these runs: a directory of the test's own, not the
/// test's HOME (runner refuses a home directory as a workspace) and not
/// holding `runs/` (a run directory must lie outside the workspace).
const WS: &str = "ws";

fn workspace(d: &Dir) -> std::path::PathBuf {
    let ws = d.path().join(WS);
    std::fs::create_dir_all(&ws).expect("create the workspace");
    ws
}

fn anthropic_run(d: &Dir, server: &FakeServer, extra: &[&str]) -> Ran {
    workspace(d);
    run(d
        .runner()
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-key-123456")
        .args(["--executor", "local", "--json", "--workspace", WS])
        .args(extra)
        .arg("create hello.txt and check it"))
}

#[test]
fn anthropic_multi_step_tool_loop_completes() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::anthropic_tool_use(
            "toolu_01",
            "bash",
            r#"{"command":"echo hi > hello.txt"}"#,
        ),
        FakeResponse::anthropic_tool_uses(&[
            ("toolu_02", "bash", r#"{"command":"cat hello.txt"}"#),
            ("toolu_03", "bash", r#"{"command":"wc -c hello.txt"}"#),
        ]),
        FakeResponse::anthropic_text("hello.txt holds hi."),
    ]);
    let r = anthropic_run(&d, &server, &[]);
    r.expect_code(0);
    let events = r.events();
    assert_eq!(outcome(&events), "completed");
    assert_eq!(of_type(&events, "tool_result").len(), 3);
    assert_eq!(
        std::fs::read_to_string(d.path().join(WS).join("hello.txt"))
            .ok()
            .as_deref(),
        Some("hi\n")
    );
    server.assert_protocol_ok();
    server.assert_all_served();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].header("x-api-key"), Some("sk-ant-fake-key-123456"));
    assert!(reqs[0].header("anthropic-version").is_some());
    // The tool results of turn 2 came back in one message, in order.
    let last = &reqs[2].body["messages"];
    let results = last
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .cloned()
        .unwrap_or_default();
    let ids: Vec<_> = results
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["toolu_02", "toolu_03"]);
    // The key never lands in the run directory.
    let traj = std::fs::read_to_string(d.run_dir().join("trajectory.jsonl"))
        .expect("the run wrote its trajectory");
    assert!(!traj.contains("sk-ant-fake-key-123456"));
}

#[test]
fn openai_multi_step_tool_loop_completes() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::openai_tool_call("call_1", "bash", r#"{"command":"echo hi > hello.txt"}"#),
        FakeResponse::openai_tool_call("call_2", "bash", r#"{"command":"cat hello.txt"}"#),
        FakeResponse::openai_text("done"),
    ]);
    workspace(&d);
    let r = run(d
        .runner()
        .env("OPENAI_BASE_URL", server.openai_url())
        .env("OPENAI_API_KEY", "sk-openai-fake-123456")
        .args([
            "--provider",
            "openai",
            "--model",
            "gpt-4o",
            "--executor",
            "local",
            "--json",
            "--workspace",
            WS,
        ])
        .arg("create hello.txt"));
    r.expect_code(0);
    assert_eq!(outcome(&r.events()), "completed");
    assert!(d.path().join(WS).join("hello.txt").exists());
    server.assert_protocol_ok();
    server.assert_all_served();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-openai-fake-123456")
    );
}

#[test]
fn a_529_then_success_completes_with_the_retry_in_the_trajectory() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::overloaded().with_header("retry-after-ms", "50"),
        FakeResponse::anthropic_text("fine now"),
    ]);
    let r = anthropic_run(&d, &server, &[]);
    r.expect_code(0);
    let traj = d.trajectory();
    let retries = of_type(&traj, "model_retry");
    assert_eq!(retries.len(), 1, "{traj:?}");
    assert_eq!(retries[0]["status"], 529);
    assert_eq!(outcome(&traj), "completed");
}

#[test]
fn a_401_exits_2_naming_the_key_variable() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![FakeResponse::unauthorized()]);
    let r = anthropic_run(&d, &server, &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("ANTHROPIC_API_KEY"), "{}", r.explain());
    assert!(
        r.stderr().contains("hint: check that ANTHROPIC_API_KEY"),
        "{}",
        r.explain()
    );
    assert_eq!(server.requests().len(), 1, "a 401 is never retried");
    assert_eq!(outcome(&d.trajectory()), "error");
}

#[test]
fn a_404_names_the_model() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![FakeResponse::not_found("claude-nope-9")]);
    let r = anthropic_run(&d, &server, &["--model", "claude-nope-9"]);
    r.expect_code(2);
    assert!(r.stderr().contains("claude-nope-9"), "{}", r.explain());
}

#[test]
fn an_unreachable_base_url_is_one_clear_error() {
    let _s = shared();
    let d = Dir::new();
    // A loopback port nobody listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let r = run(d
        .runner()
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-key-123456")
        .env("RUNNER_MAX_TIME", "60")
        .args(["--executor", "local", "x"]));
    r.expect_code(2);
    assert!(
        r.stderr().contains(&format!("127.0.0.1:{port}")),
        "{}",
        r.explain()
    );
    // Nothing answered: "cannot reach" and the base-URL hint (a slow API
    // that did answer gets neither, see tests/cli/replies.rs).
    assert!(
        r.stderr().contains("cannot reach") && r.stderr().contains("hint: check --base-url"),
        "{}",
        r.explain()
    );
}

#[test]
fn prompt_too_long_trims_old_outputs_and_retries_once() {
    let _s = shared();
    let d = Dir::new();
    let big = r#"{"command":"head -c 3000 /dev/zero | tr '\\0' x"}"#;
    let server = FakeServer::start_blocking(vec![
        FakeResponse::anthropic_tool_use("toolu_1", "bash", big),
        FakeResponse::anthropic_tool_use("toolu_2", "bash", big),
        FakeResponse::status(
            400,
            &[("x-should-retry", "false")],
            anthropic_error(
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
        ),
        FakeResponse::anthropic_text("done after trimming"),
    ]);
    let r = anthropic_run(&d, &server, &[]);
    r.expect_code(0);
    let traj = d.trajectory();
    let notices: Vec<_> = of_type(&traj, "notice")
        .into_iter()
        .filter_map(|n| n["message"].as_str())
        .collect();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("context window was exceeded")),
        "{notices:?}"
    );
    server.assert_protocol_ok();
    // The retried request carries the elided first output, the newest one intact.
    let reqs = server.requests();
    let body = reqs[3].body.to_string();
    assert!(body.contains("elided:"), "old output elided");
    assert!(body.contains(&"x".repeat(3000)), "newest output kept");
}

/// A streamed `pause_turn` as the API sends one while a server tool runs:
/// a thinking block (thinking and signature deltas), text, a server tool
/// call (its input in JSON deltas), the tool's result and a redacted
/// thinking block. Returns the events and the blocks they assemble to.
fn paused_turn_with_server_tools() -> (Vec<serde_json::Value>, serde_json::Value) {
    use serde_json::json;
    let result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01Abc",
        "content": [{"type": "web_search_result", "url": "https://example.com/rust",
                     "title": "Rust", "encrypted_content": "EqgfCioIARgBIiQ3YTAw", "page_age": null}]});
    let redacted = json!({"type": "redacted_thinking",
        "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"});
    let delta = |i: u64, d: serde_json::Value| json!({"type": "content_block_delta", "index": i, "delta": d});
    let start = |i: u64, b: &serde_json::Value| json!({"type": "content_block_start", "index": i, "content_block": b});
    let stop = |i: u64| json!({"type": "content_block_stop", "index": i});
    let events = vec![
        json!({"type": "message_start", "message": {"id": "msg_p", "type": "message",
            "role": "assistant", "model": "claude-fake", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 50, "output_tokens": 1}}}),
        start(
            0,
            &json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "I should search "}),
        ),
        json!({"type": "ping"}),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "the web first."}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}),
        ),
        stop(0),
        start(1, &json!({"type": "text", "text": ""})),
        delta(1, json!({"type": "text_delta", "text": "Searching."})),
        stop(1),
        start(
            2,
            &json!({"type": "server_tool_use", "id": "srvtoolu_01Abc", "name": "web_search", "input": {}}),
        ),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"query\": \"ru"}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "st\"}"}),
        ),
        stop(2),
        start(3, &result),
        stop(3),
        start(4, &redacted),
        stop(4),
        json!({"type": "message_delta", "delta": {"stop_reason": "pause_turn", "stop_sequence": null},
            "usage": {"output_tokens": 30, "server_tool_use": {"web_search_requests": 1}}}),
        json!({"type": "message_stop"}),
    ];
    let blocks = json!([
        {"type": "thinking", "thinking": "I should search the web first.",
         "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
        {"type": "text", "text": "Searching."},
        {"type": "server_tool_use", "id": "srvtoolu_01Abc", "name": "web_search",
         "input": {"query": "rust"}},
        result,
        redacted,
    ]);
    (events, blocks)
}

#[test]
fn a_paused_turn_goes_back_verbatim_with_its_thinking_and_server_tool_blocks() {
    let _s = shared();
    let d = Dir::new();
    let (events, blocks) = paused_turn_with_server_tools();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::anthropic_sse(events).chunked(7),
        FakeResponse::anthropic_text("Rust is a language."),
    ]);
    let r = anthropic_run(&d, &server, &[]);
    r.expect_code(0);
    server.assert_protocol_ok();
    server.assert_all_served();
    // The continuation ends with the paused turn, every block as received.
    let reqs = server.requests();
    let msgs = reqs[1].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let last = msgs.last().cloned().unwrap_or_default();
    assert_eq!(last["role"], "assistant", "{}", r.explain());
    assert_eq!(
        last["content"],
        blocks,
        "the paused turn did not go back verbatim:\n{}",
        serde_json::to_string_pretty(&last["content"]).unwrap_or_default()
    );
    // The trajectory keeps them too, so a run can be replayed from it.
    let traj = d.trajectory();
    let replies = of_type(&traj, "model_reply");
    assert_eq!(replies[0]["stop_reason"], "pause_turn");
    let recorded = replies[0]["message"]["content"].to_string();
    for needle in [
        "EqQBCgIYAhIM1gbcDa9GJwZA2b3h",
        "srvtoolu_01Abc",
        "EmwKAhgBEgy3va3pzix",
    ] {
        assert!(
            recorded.contains(needle),
            "{needle} missing from {recorded}"
        );
    }
    assert_eq!(outcome(&traj), "completed");
}

/// Vector 22 (a real exchange with Anthropic's own bash tool) replayed
/// through the binary with `--shell persistent`: the tool goes out as
/// `{"type": "bash_20250124", "name": "bash"}`, the model's `{command}`
/// calls run in the persistent shell, and the follow-up requests have the
/// recorded structure.
#[test]
fn persistent_shell_offers_anthropics_bash_tool_and_replays_vector_22() {
    let _s = shared();
    let d = Dir::new();
    let ex = crate::recorded::exchanges("22_anthropic_bash_20250124_tool_loop.json");
    let mut responses: Vec<FakeResponse> = ex.iter().map(|e| e.response.clone()).collect();
    responses.push(FakeResponse::anthropic_text("2 + 2 = 4"));
    let server = FakeServer::start_blocking(responses);
    let r = anthropic_run(
        &d,
        &server,
        &["--shell", "persistent", "--model", "claude-sonnet-4-6"],
    );
    r.expect_code(0);
    server.assert_protocol_ok();
    server.assert_all_served();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    for req in &reqs {
        // As recorded, plus the client's cache breakpoint on the last tool.
        let tools = req.body["tools"].as_array().cloned().unwrap_or_default();
        assert_eq!(tools.len(), 1, "{}", r.explain());
        let mut tool = tools[0].clone();
        tool.as_object_mut().unwrap().remove("cache_control");
        assert_eq!(
            tool,
            serde_json::json!({"type": "bash_20250124", "name": "bash"}),
            "{}",
            r.explain()
        );
    }
    // The model's command ran; its output came back as the tool result,
    // in the recorded request's structure (the recorder's own rename of
    // the tool to "shell" aside).
    let ours = crate::recorded::anthropic_shape(&reqs[1].body["messages"]);
    let mut theirs = crate::recorded::anthropic_shape(&ex[1].request["messages"]);
    theirs[1]["content"][0]["name"] = serde_json::json!("bash");
    assert_eq!(ours[1], theirs[1]);
    assert_eq!(
        ours[2]["content"][0]["tool_result"],
        theirs[2]["content"][0]["tool_result"]
    );
    assert_eq!(ours[2]["content"][0]["content"], "4\n[exit code: 0]");
    // Without --shell persistent the custom definition goes out.
    let d2 = Dir::new();
    let server = FakeServer::start_blocking(vec![FakeResponse::anthropic_text("hi")]);
    anthropic_run(&d2, &server, &[]).expect_code(0);
    let tools = &server.requests()[0].body["tools"];
    assert_eq!(tools[0]["name"], "bash");
    assert!(tools[0].get("type").is_none(), "{tools}");
    assert!(
        tools[0]["description"]
            .as_str()
            .unwrap()
            .contains("fresh shell")
    );
}
