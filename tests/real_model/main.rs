//! runner end to end against real local model servers (issue 22): llama.cpp
//! (llama-cpp-python's server) with two tiny models, and LiteLLM's proxy in
//! front of it, both its Chat Completions and its Anthropic `/v1/messages`.
//! Every run goes through a recording proxy, so what runner sent is checked
//! too. Tiny models loop and invent commands: this asserts runner's side
//! (tool calls run and their results go back, limits end the run with their
//! outcome and exit code, no runner error), not that the task gets solved.
//!
//! `make test-real-model` installs what it needs and runs it; without the
//! install it FAILS with that hint, it never skips. The table of runs goes
//! to stdout and to target/real-model/report.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod servers;

use std::fmt::Write as _;
use std::time::Instant;

use serde_json::Value;
use servers::{Recording, Servers, dest};
use support::binary::{Dir, run};
use support::docker::{TINY, require_images};

/// Where a run's requests go.
#[derive(Clone, Copy)]
enum Via {
    /// llama-cpp-python's server itself.
    Llama,
    /// LiteLLM's proxy (Chat Completions or `/v1/messages`).
    LiteLlm,
}

/// How a run must end.
#[derive(Clone, Copy)]
enum Expect {
    /// On its step limit (exit 1) after at least this many tool round trips.
    StepLimit { round_trips: usize },
    /// Either way a model may end it: its answer (exit 0) or the step limit
    /// (exit 1); never an error.
    AnyEnd,
}

struct Case {
    provider: &'static str,
    via: Via,
    model: &'static str,
    executor: &'static str,
    stream: bool,
    tool_choice: Option<&'static str>,
    max_steps: u32,
    expect: Expect,
}

/// The matrix, pruned to about a minute of model time: every provider
/// (OpenAI to llama.cpp, OpenAI through LiteLLM, Anthropic through LiteLLM),
/// both executors, streaming on and off, tool choice unset and set, both
/// models.
///
/// Anthropic through LiteLLM is asked for the tool by name, not `required`:
/// LiteLLM turns `{"type":"any"}` into `"required"`, which llama-cpp-python's
/// chatml-function-calling handler fails on (vector 29). Its tool runs stop at
/// one step: LiteLLM sends llama.cpp an assistant message with no `content`
/// for a tool_use-only turn, which llama.cpp answers with HTTP 500 (vector
/// 31), so no second step can succeed there, whatever runner does.
fn cases() -> Vec<Case> {
    use Expect::*;
    use Via::*;
    let c = |provider, via, model, executor, stream, tool_choice, max_steps, expect| Case {
        provider,
        via,
        model,
        executor,
        stream,
        tool_choice,
        max_steps,
        expect,
    };
    vec![
        // The key case of issue 22.
        c(
            "openai",
            Llama,
            "smollm2",
            "docker",
            true,
            Some("required"),
            4,
            StepLimit { round_trips: 3 },
        ),
        c(
            "openai",
            Llama,
            "smollm2",
            "local",
            false,
            Some("required"),
            3,
            StepLimit { round_trips: 2 },
        ),
        c(
            "openai",
            Llama,
            "gemma3",
            "local",
            false,
            Some("auto"),
            3,
            AnyEnd,
        ),
        c("openai", Llama, "gemma3", "docker", true, None, 3, AnyEnd),
        c(
            "openai",
            LiteLlm,
            "smollm2",
            "docker",
            false,
            Some("required"),
            3,
            StepLimit { round_trips: 2 },
        ),
        c(
            "openai",
            LiteLlm,
            "gemma3",
            "local",
            true,
            Some("required"),
            3,
            StepLimit { round_trips: 2 },
        ),
        c("openai", LiteLlm, "smollm2", "local", true, None, 3, AnyEnd),
        c(
            "anthropic",
            LiteLlm,
            "smollm2",
            "local",
            true,
            None,
            3,
            AnyEnd,
        ),
        c(
            "anthropic",
            LiteLlm,
            "gemma3",
            "docker",
            false,
            Some("bash"),
            1,
            StepLimit { round_trips: 0 },
        ),
        c(
            "anthropic",
            LiteLlm,
            "smollm2",
            "local",
            true,
            Some("bash"),
            1,
            StepLimit { round_trips: 0 },
        ),
    ]
}

const TASK: &str = "List the files in the current directory, then print the first line of README.";

/// One row of the report.
struct Row {
    case: String,
    steps: u64,
    tool_calls: usize,
    round_trips: usize,
    outcome: String,
    code: i32,
    secs: f64,
    problems: Vec<String>,
}

#[test]
fn runner_against_real_model_servers() {
    require_images(&[TINY]);
    let servers = Servers::start();
    let recordings = dest().join("recordings");
    std::fs::create_dir_all(&recordings).expect("create target/real-model/recordings");
    let mut rows = Vec::new();
    for (i, case) in cases().iter().enumerate() {
        rows.push(run_case(
            &servers,
            case,
            &recordings.join(format!("{i:02}.json")),
        ));
    }
    let report = table(&servers, &rows);
    println!("{report}");
    std::fs::write(dest().join("report.md"), &report).expect("write target/real-model/report.md");
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| !r.problems.is_empty())
        .map(|r| format!("{}:\n  {}", r.case, r.problems.join("\n  ")))
        .collect();
    assert!(
        failed.is_empty(),
        "{} run(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

fn describe(c: &Case) -> String {
    let via = match c.via {
        Via::Llama => "llama.cpp",
        Via::LiteLlm => "LiteLLM",
    };
    format!(
        "{} -> {via} ({}), {}, {}, tool choice {}, --max-steps {}",
        c.provider,
        c.model,
        c.executor,
        if c.stream { "stream" } else { "--no-stream" },
        c.tool_choice.unwrap_or("unset"),
        c.max_steps
    )
}

fn run_case(servers: &Servers, case: &Case, recording: &std::path::Path) -> Row {
    let upstream = match (case.via, case.model) {
        (Via::Llama, "smollm2") => servers.get("SMOLLM2_URL"),
        (Via::Llama, _) => servers.get("GEMMA3_URL"),
        (Via::LiteLlm, _) => servers.get("LITELLM_URL"),
    };
    let upstream = upstream.trim_end_matches("/v1");
    let proxy = Recording::start(upstream, recording);
    let dir = Dir::new();
    let mut cmd = dir.runner();
    let base = match case.provider {
        "openai" => format!("{}/v1", proxy.url),
        _ => proxy.url.clone(),
    };
    let key = servers.get("LITELLM_KEY");
    cmd.args([
        "--provider",
        case.provider,
        "--base-url",
        &base,
        "--model",
        case.model,
    ])
    .args(["--executor", case.executor, "--image", TINY])
    .args(["--max-steps", &case.max_steps.to_string()])
    .args([
        "--context-window",
        "4096",
        "--max-tokens",
        "256",
        "--timeout",
        "30",
    ])
    .args(["--max-time", "600", "--json", "--run-dir"])
    .arg(dir.path().join("run"))
    .env("OPENAI_API_KEY", key)
    .env("ANTHROPIC_API_KEY", key);
    if !case.stream {
        cmd.arg("--no-stream");
    }
    if let Some(choice) = case.tool_choice {
        cmd.args(["--tool-choice", choice]);
    }
    cmd.arg(TASK);
    let start = Instant::now();
    let ran = run(&mut cmd);
    let secs = start.elapsed().as_secs_f64();
    let trajectory = support::binary::read_jsonl(&dir.path().join("run/trajectory.jsonl"));
    let steps = trajectory
        .iter()
        .filter(|e| e["type"] == "model_request")
        .count();
    let requests = proxy.wait_requests(steps, 30);
    drop(proxy);
    let mut row = check(case, &ran.code(), &trajectory, &requests);
    row.secs = secs;
    if !row.problems.is_empty() {
        row.problems.push(format!(
            "recording: {}{}",
            recording.display(),
            ran.explain()
        ));
    }
    row
}

/// The checks of one run, on its trajectory and on the requests runner sent.
fn check(case: &Case, code: &i32, trajectory: &[Value], requests: &[Value]) -> Row {
    let mut problems = Vec::new();
    fn events<'a>(t: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        t.iter().filter(move |e| e["type"] == kind)
    }
    let of = |kind: &'static str| events(trajectory, kind);
    let finished = of("run_finished").last().cloned().unwrap_or(Value::Null);
    let outcome = finished["outcome"].as_str().unwrap_or("none").to_string();
    let steps = finished["steps"].as_u64().unwrap_or(0);
    if let Some(e) = finished.get("error") {
        problems.push(format!("the run ended with an error: {e}"));
    }
    let want_code = match outcome.as_str() {
        "completed" => 0,
        "step_limit" | "time_limit" | "cost_limit" | "refused" => 1,
        "interrupted" => 130,
        _ => 2,
    };
    if *code != want_code {
        problems.push(format!(
            "exit code {code} for outcome {outcome} (want {want_code})"
        ));
    }
    // A forced tool choice makes llama.cpp's grammar write exactly one call
    // per reply: more means the client split one call into several.
    if case.tool_choice.is_some_and(|c| c != "auto") {
        for reply in of("model_reply") {
            let n = reply["message"]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_use")
                .count();
            if n > 1 {
                problems.push(format!(
                    "step {}: {n} tool calls in one reply to a forced tool choice (one call split?)",
                    reply["step"]
                ));
            }
        }
    }
    // Every tool call ran and got its result.
    let calls: Vec<String> = of("tool_call")
        .map(|e| e["id"].as_str().unwrap_or("").to_string())
        .collect();
    for id in &calls {
        if !of("tool_result").any(|r| r["id"] == id.as_str()) {
            problems.push(format!("tool call {id} has no tool_result"));
        }
    }
    // A round trip: the call's result is in a later request runner sent.
    let round_trips = calls
        .iter()
        .filter(|id| requests.iter().any(|r| carries_result(r, id)))
        .count();
    // Every call but those of the last step went back.
    let last_step = of("tool_call")
        .filter_map(|e| e["step"].as_u64())
        .max()
        .unwrap_or(0);
    let must_return = of("tool_call")
        .filter(|e| e["step"].as_u64() < Some(last_step))
        .count();
    if round_trips < must_return {
        problems.push(format!(
            "{round_trips} tool result(s) went back, {must_return} should have"
        ));
    }
    match case.expect {
        Expect::StepLimit { round_trips: want } => {
            if outcome != "step_limit" || steps != u64::from(case.max_steps) {
                problems.push(format!(
                    "outcome {outcome} after {steps} step(s), want step_limit after {}",
                    case.max_steps
                ));
            }
            if round_trips < want {
                problems.push(format!(
                    "{round_trips} tool round trip(s), want at least {want}"
                ));
            }
            if calls.is_empty() {
                problems.push("no tool call although the tool was required".into());
            }
        }
        Expect::AnyEnd => {
            if outcome != "completed" && outcome != "step_limit" {
                problems.push(format!("outcome {outcome}, want completed or step_limit"));
            }
        }
    }
    // Each step is one model call; a retried call (an upstream 500) is more
    // than one request.
    if (requests.len() as u64) < steps {
        problems.push(format!(
            "{} request(s) reached the server for {steps} step(s)",
            requests.len()
        ));
    }
    Row {
        case: describe(case),
        steps,
        tool_calls: calls.len(),
        round_trips,
        outcome,
        code: *code,
        secs: 0.0,
        problems,
    }
}

/// Whether a request body carries the result of tool call `id`: a Chat
/// `role: tool` message or an Anthropic `tool_result` block.
fn carries_result(body: &Value, id: &str) -> bool {
    body["messages"].as_array().into_iter().flatten().any(|m| {
        m["tool_call_id"] == id
            || m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)
    })
}

fn table(servers: &Servers, rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# make test-real-model\n\nllama-cpp-python {} (chatml-function-calling), LiteLLM {}; \
         models SmolLM2-135M-Instruct Q4_1 (smollm2), Gemma 3 270M Q4_K_M (gemma3).\n",
        servers.get("LLAMA_CPP_PYTHON_VERSION"),
        servers.get("LITELLM_VERSION")
    );
    let _ = writeln!(
        s,
        "| provider | server (model) | executor | stream | tool choice | steps | tool calls | round trips | outcome | exit code | secs | result |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (r, c) in rows.iter().zip(cases()) {
        let via = match c.via {
            Via::Llama => "llama.cpp",
            Via::LiteLlm => "LiteLLM",
        };
        let _ = writeln!(
            s,
            "| {} | {via} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
            c.provider,
            c.model,
            c.executor,
            if c.stream { "on" } else { "off" },
            c.tool_choice.unwrap_or("unset"),
            r.steps,
            r.tool_calls,
            r.round_trips,
            r.outcome,
            r.code,
            r.secs,
            if r.problems.is_empty() {
                "ok"
            } else {
                "FAILED"
            }
        );
    }
    s
}
