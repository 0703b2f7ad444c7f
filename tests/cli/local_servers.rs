//! The binary against the bytes of local model servers (llama-cpp-python's
//! server, LiteLLM; rebuilt from their source in
//! tests/fixtures/local-servers/): a tool round trip completes, what cannot
//! go away is not retried, and what runner changed or could not know is
//! said in the trajectory. `make test-real-model` runs the real servers.

use serde_json::{Value, json};

use crate::support::binary::{Dir, Ran, of_type, outcome, run};
use crate::support::fake_model::{FakeResponse, FakeServer};
use crate::support::serial::shared;

const WS: &str = "ws";

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/local-servers")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `runner --provider openai` at `base` on the local executor.
fn openai_run(d: &Dir, base: &str, extra: &[&str]) -> Ran {
    std::fs::create_dir_all(d.path().join(WS)).expect("workspace");
    run(d
        .runner()
        .args([
            "--provider",
            "openai",
            "--model",
            "smollm2",
            "--base-url",
            base,
        ])
        .args(["--executor", "local", "--workspace", WS])
        .args(extra)
        .arg("list the files"))
}

/// `runner --provider anthropic` at a LiteLLM-like proxy on the local
/// executor, with `--json`.
fn litellm_anthropic_run(d: &Dir, server: &FakeServer) -> Ran {
    std::fs::create_dir_all(d.path().join(WS)).expect("workspace");
    run(d
        .runner()
        .env("ANTHROPIC_API_KEY", "sk-litellm-fake-1234")
        .args([
            "--provider",
            "anthropic",
            "--model",
            "smollm2",
            "--base-url",
        ])
        .arg(server.url())
        .args(["--executor", "local", "--workspace", WS, "--json"])
        .arg("look around"))
}

fn notices(events: &[Value]) -> Vec<String> {
    of_type(events, "notice")
        .iter()
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

fn llama_cpp_call() -> FakeResponse {
    FakeResponse::raw_sse(fixture("llama_cpp_python_stream_named_tool.sse"))
}

fn llama_cpp_text() -> FakeResponse {
    FakeResponse::json(
        serde_json::from_str(&fixture("llama_cpp_python_whole_text.json")).expect("json"),
    )
}

#[test]
fn a_llama_cpp_tool_round_trip_runs_bash_and_sends_a_string_content_back() {
    let _s = shared();
    let d = Dir::new();
    std::fs::create_dir_all(d.path().join(WS)).expect("ws");
    std::fs::write(d.path().join(WS).join("notes.txt"), "n").expect("file");
    let server = FakeServer::start_blocking(vec![llama_cpp_call(), llama_cpp_text()]);
    let r = openai_run(&d, &server.openai_url(), &["--json"]);
    r.expect_code(0);
    let events = r.events();
    let results = of_type(&events, "tool_result");
    assert_eq!(results.len(), 1, "{events:?}");
    assert_eq!(results[0]["name"], "bash");
    assert_eq!(results[0]["is_error"], false, "{:?}", results[0]);
    assert!(
        results[0]["output"]
            .as_str()
            .unwrap_or("")
            .contains("notes.txt"),
        "{:?}",
        results[0]
    );
    let second = &server.requests()[1].body["messages"];
    let assistant = second
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "assistant"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(assistant["content"], json!(""), "{assistant}");
    server.assert_protocol_ok();
}

/// Human text goes to stderr (stdout is for `--json`), a stream's text as
/// it arrives: one body's text is shown the same way.
#[test]
fn a_whole_json_body_to_a_streamed_request_prints_the_answer() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![llama_cpp_text()]);
    let r = openai_run(&d, &server.openai_url(), &[]);
    r.expect_code(0);
    let err = r.stderr();
    let answer = err
        .find("The listing shows one file, notes.txt.")
        .unwrap_or_else(|| panic!("not shown: {}", r.explain()));
    let summary = err.find("completed after").unwrap_or(0);
    assert!(answer < summary, "{}", r.explain());
}

#[test]
fn a_validation_error_500_is_final_and_its_hint_names_no_time_limit() {
    let _s = shared();
    let d = Dir::new();
    let err = fixture("llama_cpp_python_500_content_null.json");
    let server = FakeServer::start_blocking(vec![
        FakeResponse::raw(500, "application/json", err.clone()),
        FakeResponse::raw(500, "application/json", err),
    ]);
    let r = openai_run(&d, &server.openai_url(), &[]);
    assert_eq!(r.code(), 2, "{}", r.explain());
    assert_eq!(server.requests().len(), 1, "retried: {}", r.explain());
    assert!(
        r.stderr().contains("Input should be a valid string"),
        "{}",
        r.explain()
    );
    assert!(!r.stderr().contains("--max-time"), "{}", r.explain());
}

#[test]
fn an_empty_200_stream_is_final_and_hints_no_stream() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::raw(200, "text/event-stream; charset=utf-8", ""),
        FakeResponse::raw(200, "text/event-stream; charset=utf-8", ""),
    ]);
    let r = openai_run(&d, &server.openai_url(), &["--tool-choice", "auto"]);
    assert_eq!(r.code(), 2, "{}", r.explain());
    assert_eq!(server.requests().len(), 1, "retried: {}", r.explain());
    assert!(
        r.stderr().contains("hint: ") && r.stderr().contains("--no-stream"),
        "{}",
        r.explain()
    );
    assert_eq!(server.requests()[0].body["tool_choice"], "auto");
}

#[test]
fn a_base_url_without_v1_is_told_from_a_missing_model() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![FakeResponse::raw(
        404,
        "application/json",
        r#"{"detail":"Not Found"}"#,
    )]);
    let r = openai_run(&d, &server.url(), &[]);
    assert_eq!(r.code(), 2, "{}", r.explain());
    let err = r.stderr();
    assert!(
        err.contains("the server has no /v1/chat/completions here; is --base-url missing /v1?"),
        "{err}"
    );
    assert!(!err.contains("--model"), "{err}");
}

#[test]
fn duplicate_tool_ids_from_litellm_are_renamed_and_said() {
    let _s = shared();
    let d = Dir::new();
    std::fs::create_dir_all(d.path().join(WS)).expect("ws");
    let server = FakeServer::start_blocking(vec![
        FakeResponse::raw_sse(fixture("litellm_messages_stream_duplicate_tool_ids.sse")),
        FakeResponse::anthropic_text("done"),
    ]);
    let r = litellm_anthropic_run(&d, &server);
    r.expect_code(0);
    let events = r.events();
    let ids: Vec<_> = of_type(&events, "tool_result")
        .iter()
        .map(|e| e["id"].as_str().unwrap_or("").to_string())
        .collect();
    let id = "call__0_bash_cmpl-5e0c9d2a-77b1-4f0e-a9f3-3c1d2e4f5a6b";
    assert_eq!(ids, [id.to_string(), format!("{id}_2"), format!("{id}_3")]);
    let said = notices(&events);
    assert!(
        said.iter()
            .any(|n| n.contains(&format!("gave 3 tool calls the id '{id}'"))),
        "{said:?}"
    );
    server.assert_protocol_ok();
    let traj = d.trajectory();
    assert!(
        notices(&traj)
            .iter()
            .any(|n| n.contains("renamed the repeats"))
    );
}

/// The real LiteLLM stream (vector 30): one call streamed as a `tool_use`
/// block per fragment, all with one id, is run as the one call it is.
#[test]
fn litellm_split_tool_use_blocks_are_joined_into_one_call() {
    let _s = shared();
    let d = Dir::new();
    std::fs::create_dir_all(d.path().join(WS)).expect("ws");
    let vector = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llm-vectors/30_litellm_messages_stream_tool_use.0.sse");
    let sse = std::fs::read_to_string(&vector).expect("vector 30");
    let server = FakeServer::start_blocking(vec![
        FakeResponse::raw_sse(sse),
        FakeResponse::anthropic_text("done"),
    ]);
    let r = litellm_anthropic_run(&d, &server);
    r.expect_code(0);
    let events = r.events();
    let calls = of_type(&events, "tool_call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0]["input"]["command"].is_string(), "{:?}", calls[0]);
    assert!(
        notices(&events)
            .iter()
            .any(|n| n.contains("joined them into one call")),
        "{events:?}"
    );
    // Through a proxy the system prompt is a plain string (LiteLLM hands a
    // block list to servers that refuse one).
    assert!(server.requests()[0].body["system"].is_string());
    server.assert_protocol_ok();
}

#[test]
fn a_server_without_usage_is_said_once() {
    let _s = shared();
    let d = Dir::new();
    let chunks = |text: &str| {
        FakeResponse::raw_sse(format!(
            "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        ))
    };
    let server = FakeServer::start_blocking(vec![chunks("hello")]);
    let r = openai_run(&d, &server.openai_url(), &["--json"]);
    r.expect_code(0);
    let said = notices(&r.events());
    let usage: Vec<_> = said
        .iter()
        .filter(|n| n.contains("no token usage"))
        .collect();
    assert_eq!(usage.len(), 1, "{said:?}");
}

#[test]
fn a_context_overflow_learns_the_window_and_is_no_step() {
    let _s = shared();
    let d = Dir::new();
    let overflow = FakeResponse::openai_error(
        400,
        "invalid_request_error",
        None,
        "This model's maximum context length is 4096 tokens. However, you requested 5101 tokens (5101 in the messages, None in the completion). Please reduce the length of the messages or completion.",
    );
    // A long output the model has seen, a second call, the overflow, then
    // an answer: 3 steps within --max-steps 3, as the overflow is none.
    let server = FakeServer::start_blocking(vec![
        FakeResponse::openai_tool_call("c1", "bash", r#"{"command":"seq 1 3000"}"#),
        FakeResponse::openai_tool_call("c2", "bash", r#"{"command":"echo again"}"#),
        overflow,
        FakeResponse::openai_text("done"),
    ]);
    let r = openai_run(&d, &server.openai_url(), &["--json", "--max-steps", "3"]);
    r.expect_code(0);
    let events = r.events();
    let said = notices(&events);
    assert!(
        said.iter()
            .any(|n| n.contains("context window is 4096 tokens")),
        "{said:?}"
    );
    assert!(
        said.iter().any(|n| n.contains("elided 1 old tool outputs")),
        "{said:?}"
    );
    let finished = of_type(&events, "run_finished");
    assert_eq!(finished[0]["steps"], 3, "{:?}", finished[0]);
    let reqs = server.requests();
    assert!(reqs[2].raw_body.contains("2999"), "the overflowing request");
    assert!(!reqs[3].raw_body.contains("2999"), "not elided");
}

#[test]
fn an_overflow_with_nothing_left_to_elide_ends_at_once_with_a_hint() {
    let _s = shared();
    let d = Dir::new();
    let overflow = || {
        FakeResponse::openai_error(
            400,
            "invalid_request_error",
            Some("context_length_exceeded"),
            "the prompt is too long",
        )
    };
    let server = FakeServer::start_blocking(vec![overflow(), overflow()]);
    let r = openai_run(&d, &server.openai_url(), &[]);
    assert_eq!(r.code(), 2, "{}", r.explain());
    assert_eq!(server.requests().len(), 1, "{}", r.explain());
    assert!(
        r.stderr().contains("no old tool output is left to elide"),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr().contains("hint: ") && r.stderr().contains("--n_ctx"),
        "{}",
        r.explain()
    );
}

#[test]
fn tool_choice_required_is_sent_and_the_run_ends_on_its_step_limit() {
    let _s = shared();
    let d = Dir::new();
    let server =
        FakeServer::start_blocking(vec![llama_cpp_call(), llama_cpp_call(), llama_cpp_call()]);
    let r = openai_run(
        &d,
        &server.openai_url(),
        &["--json", "--tool-choice", "required", "--max-steps", "3"],
    );
    r.expect_code(1);
    let events = r.events();
    assert_eq!(outcome(&events), "step_limit");
    assert_eq!(of_type(&events, "tool_result").len(), 3);
    for req in server.requests() {
        assert_eq!(
            req.body["tool_choice"],
            json!({"type": "function", "function": {"name": "bash"}})
        );
    }
    let r = openai_run(&d, &server.openai_url(), &["--tool-choice", "python"]);
    assert_eq!(r.code(), 2, "{}", r.explain());
    assert!(
        r.stderr().contains("hint: --tool-choice takes"),
        "{}",
        r.explain()
    );
}

#[test]
fn context_window_auto_asks_the_server_and_says_what_it_uses() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::json(json!({"default_generation_settings": {"n_ctx": 4096}})),
        FakeResponse::openai_text("done"),
    ]);
    let r = openai_run(
        &d,
        &server.openai_url(),
        &["--json", "--context-window", "auto"],
    );
    r.expect_code(0);
    let said = notices(&r.events());
    assert!(
        said.iter()
            .any(|n| n.contains("context window: 4096 tokens")),
        "{said:?}"
    );
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::raw(404, "application/json", r#"{"detail":"Not Found"}"#),
        FakeResponse::raw(404, "application/json", r#"{"detail":"Not Found"}"#),
        FakeResponse::openai_text("done"),
    ]);
    let r = openai_run(
        &d,
        &server.openai_url(),
        &["--json", "--context-window", "auto"],
    );
    r.expect_code(0);
    let said = notices(&r.events());
    assert!(
        said.iter()
            .any(|n| n.contains("does not say its size; using 200000")),
        "{said:?}"
    );
}
