//! `runner continue RUN_DIR [MESSAGE]` against the fake model servers,
//! with the local executor: runs that completed, hit the step limit, were
//! interrupted or were killed go on, and the fake server checks that what
//! the model is sent again is the conversation it was sent before (the
//! tool_use/tool_result pairs in order, as the model saw them) with the new
//! message last; then the directories it refuses, each with error + hint.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::binary::{Dir, Live, Ran, of_type, read_jsonl, run, script, sigint};
use crate::support::fake_model::{FakeResponse, FakeServer};
use crate::support::serial::shared;

const KEY: &str = "sk-ant-fake-key-123456";
const WS: &str = "ws";

fn workspace(d: &Dir) -> PathBuf {
    let ws = d.path().join(WS);
    std::fs::create_dir_all(&ws).expect("create the workspace");
    ws
}

/// `runner` against `server` (Anthropic), with the key of a user.
fn anthropic(d: &Dir, server: &FakeServer) -> std::process::Command {
    let mut c = d.runner();
    c.env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", KEY);
    c
}

/// A first run of `task` on the workspace `ws`, with `extra` flags.
fn first_run(d: &Dir, server: &FakeServer, extra: &[&str]) -> Ran {
    workspace(d);
    run(anthropic(d, server)
        .args(["--executor", "local", "--json", "--workspace", WS])
        .args(extra)
        .arg("write one.txt"))
}

/// `runner continue RUN_DIR MESSAGE --json` on the run's workspace, with
/// the user's key and base URL (never taken from the run's record).
fn continue_run(
    d: &Dir,
    server: &FakeServer,
    run_dir: &Path,
    message: Option<&str>,
    extra: &[&str],
) -> Ran {
    let mut c = anthropic(d, server);
    c.arg("continue")
        .arg(run_dir)
        .args(message)
        .args(LOCAL_ON_WS)
        .arg("--json")
        .args(extra);
    run(&mut c)
}

/// A continuation's flags for a run of `first_run`: the sandbox settings
/// come from the command line only.
const LOCAL_ON_WS: [&str; 4] = ["--executor", "local", "--workspace", WS];

/// `v` without Anthropic's `cache_control` marks (which move to the newest
/// turn on every request).
fn uncached(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), uncached(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(uncached).collect()),
        other => other.clone(),
    }
}

/// The messages of request `i`, without cache marks.
fn messages(server: &FakeServer, i: usize) -> Vec<Value> {
    let reqs = server.requests();
    let req = reqs.get(i).unwrap_or_else(|| panic!("no request #{i}"));
    uncached(&req.body["messages"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The (kind, id) of every tool_use and tool_result block, in order.
fn tool_blocks(msgs: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in msgs {
        for b in m["content"].as_array().into_iter().flatten() {
            match b["type"].as_str() {
                Some("tool_use") => out.push(("use".into(), b["id"].as_str().unwrap_or("").into())),
                Some("tool_result") => out.push((
                    "result".into(),
                    b["tool_use_id"].as_str().unwrap_or("").into(),
                )),
                _ => {}
            }
        }
    }
    out
}

/// The last block of the last message.
fn last_block(msgs: &[Value]) -> Value {
    let last = msgs.last().expect("a message");
    assert_eq!(last["role"], "user", "{last}");
    last["content"]
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .expect("a block")
}

fn text_block(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

/// The events from the first `continuation` on; asserts there is one.
fn after_continuation(events: &[Value]) -> Vec<Value> {
    let at = events
        .iter()
        .position(|e| e["type"] == "continuation")
        .unwrap_or_else(|| panic!("no continuation event: {events:#?}"));
    events[at..].to_vec()
}

/// The tool_result outputs of the trajectory, by call id.
fn outputs_by_id(events: &[Value]) -> Vec<(String, String)> {
    of_type(events, "tool_result")
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap_or("").to_string(),
                e["output"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_completed_run_continues_with_its_whole_conversation_replayed() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::anthropic_tool_use("toolu_1", "bash", r#"{"command":"echo one > one.txt"}"#),
        FakeResponse::anthropic_tool_uses(&[
            ("toolu_2", "bash", r#"{"command":"cat one.txt"}"#),
            ("toolu_3", "bash", r#"{"command":"wc -c one.txt"}"#),
        ]),
        FakeResponse::anthropic_text("one.txt holds one."),
        // The continuation.
        FakeResponse::anthropic_tool_use("toolu_4", "bash", r#"{"command":"cat one.txt"}"#),
        FakeResponse::anthropic_text("still one."),
    ]);
    first_run(&d, &server, &[]).expect_code(0);
    let run_dir = d.run_dir();
    let before = read_jsonl(&run_dir.join("trajectory.jsonl"));

    let r = continue_run(&d, &server, &run_dir, Some("check it again"), &[]);
    r.expect_code(0);
    server.assert_protocol_ok();
    server.assert_all_served();

    // Sent again: everything of the last request, the final answer, the
    // new message; same system prompt and tools.
    let reqs = server.requests();
    let sent = messages(&server, 3);
    let mut expected = messages(&server, 2);
    expected.push(json!({"role": "assistant", "content": [text_block("one.txt holds one.")]}));
    expected.push(json!({"role": "user", "content": [text_block("check it again")]}));
    assert_eq!(sent, expected);
    assert_eq!(reqs[3].body["system"], reqs[0].body["system"]);
    assert_eq!(
        uncached(&reqs[3].body["tools"]),
        uncached(&reqs[0].body["tools"])
    );
    assert_eq!(
        tool_blocks(&sent),
        [
            ("use", "toolu_1"),
            ("result", "toolu_1"),
            ("use", "toolu_2"),
            ("use", "toolu_3"),
            ("result", "toolu_2"),
            ("result", "toolu_3")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // The results are the trajectory's outputs, as the model saw them.
    for (id, output) in outputs_by_id(&before) {
        let found = sent
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["tool_use_id"] == id.as_str())
            .unwrap_or_else(|| panic!("no result for {id}"));
        assert_eq!(found["content"], output.as_str());
    }

    // Appended to the same trajectory: the first run untouched, then the
    // continuation and its events, steps going on.
    let events = read_jsonl(&run_dir.join("trajectory.jsonl"));
    assert_eq!(&events[..before.len()], &before[..]);
    let cont = after_continuation(&events);
    assert_eq!(cont[0]["message"], "check it again");
    assert_eq!(cont[0]["replayed_messages"], 6);
    assert_eq!(cont[0]["replayed_steps"], 3);
    assert_eq!(cont[0]["previous_outcome"], "completed");
    assert_eq!(cont[0]["config"]["provider"], "anthropic");
    assert_eq!(cont[1]["type"], "user_message");
    assert_eq!(cont[1]["text"], "check it again");
    let steps: Vec<_> = of_type(&cont, "model_request")
        .iter()
        .map(|e| e["step"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(steps, [4, 5]);
    let last = cont.last().expect("events");
    assert_eq!(last["type"], "run_finished");
    assert_eq!(
        (last["outcome"].as_str(), last["steps"].as_u64()),
        (Some("completed"), Some(2))
    );
    assert!(run_dir.join("outputs/step-0004-call-0.txt").is_file());
    // --json printed the continuation's events only.
    assert_eq!(
        r.events().first().map(|e| e["type"].clone()),
        Some(json!("continuation"))
    );
    assert_eq!(of_type(&events, "run_started").len(), 1);
}

#[test]
fn a_step_limited_run_continues_with_fresh_limits_and_the_message_after_its_results() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::anthropic_tool_use("toolu_1", "bash", r#"{"command":"echo one > one.txt"}"#),
        FakeResponse::anthropic_tool_use("toolu_2", "bash", r#"{"command":"cat one.txt"}"#),
    ]);
    first_run(&d, &server, &["--max-steps", "2"]).expect_code(1);
    let run_dir = d.run_dir();
    assert_eq!(
        of_type(
            &read_jsonl(&run_dir.join("trajectory.jsonl")),
            "run_finished"
        )[0]["outcome"],
        "step_limit"
    );

    // Two more calls allowed (the run's --max-steps, counted afresh).
    server.push(FakeResponse::anthropic_tool_use(
        "toolu_3",
        "bash",
        r#"{"command":"ls"}"#,
    ));
    server.push(FakeResponse::anthropic_text("done now"));
    let r = continue_run(&d, &server, &run_dir, Some("go on"), &[]);
    r.expect_code(0);
    server.assert_protocol_ok();
    server.assert_all_served();

    let sent = messages(&server, 2);
    let mut expected = messages(&server, 1);
    expected.push(json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"command": "cat one.txt"}}]}));
    assert_eq!(&sent[..expected.len()], &expected[..]);
    assert_eq!(sent.len(), expected.len() + 1);
    // The results of the last call and the message, in one user turn.
    let last = sent.last().expect("a message");
    let content = last["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(content.len(), 2, "{last}");
    assert_eq!(content[0]["type"], "tool_result");
    assert_eq!(content[0]["tool_use_id"], "toolu_2");
    let shown = outputs_by_id(&read_jsonl(&run_dir.join("trajectory.jsonl")))
        .into_iter()
        .find(|(id, _)| id == "toolu_2")
        .map(|(_, out)| out)
        .expect("the result of toolu_2");
    assert!(shown.starts_with("one\n"), "{shown}");
    assert_eq!(content[0]["content"], shown.as_str());
    assert_eq!(last_block(&sent), text_block("go on"));
    assert_eq!(
        tool_blocks(&sent),
        [
            ("use", "toolu_1"),
            ("result", "toolu_1"),
            ("use", "toolu_2"),
            ("result", "toolu_2")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );

    let events = read_jsonl(&run_dir.join("trajectory.jsonl"));
    let cont = after_continuation(&events);
    assert_eq!(cont[0]["previous_outcome"], "step_limit");
    assert_eq!(
        (
            cont[0]["replayed_messages"].as_u64(),
            cont[0]["replayed_steps"].as_u64()
        ),
        (Some(5), Some(2))
    );
    assert_eq!(of_type(&cont, "tool_result").len(), 1);
    assert_eq!(
        cont.last().map(|e| e["outcome"].clone()),
        Some(json!("completed"))
    );

    // A second continuation starts from everything before it, and
    // --max-steps 1 stops it after one call.
    server.push(FakeResponse::anthropic_tool_use(
        "toolu_5",
        "bash",
        r#"{"command":"pwd"}"#,
    ));
    let r = continue_run(&d, &server, &run_dir, None, &["--max-steps", "1"]);
    r.expect_code(1);
    server.assert_protocol_ok();
    let sent = messages(&server, 4);
    assert_eq!(
        &sent[..sent.len() - 1],
        &{
            let mut m = messages(&server, 3);
            m.push(json!({"role": "assistant", "content": [text_block("done now")]}));
            m
        }[..]
    );
    assert_eq!(last_block(&sent), text_block("Continue."));
    let events = read_jsonl(&run_dir.join("trajectory.jsonl"));
    let conts = of_type(&events, "continuation");
    assert_eq!(conts.len(), 2);
    assert_eq!(conts[1]["previous_outcome"], "completed");
    assert_eq!(conts[1]["message"], "Continue.");
    assert_eq!(
        events.last().map(|e| e["outcome"].clone()),
        Some(json!("step_limit"))
    );
}

#[test]
fn an_interrupted_run_continues_from_where_ctrl_c_stopped_it() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::anthropic_tool_use("toolu_1", "bash", r#"{"command":"echo one > one.txt"}"#),
        // Held while the test presses Ctrl-C.
        FakeResponse::anthropic_text("never seen").with_head_delay(Duration::from_secs(60)),
    ]);
    workspace(&d);
    let mut live = Live::spawn(
        anthropic(&d, &server)
            .args(["--executor", "local", "--json", "--workspace", WS])
            .arg("write one.txt"),
    );
    live.wait_for("tool_result", Duration::from_secs(30));
    let until = Instant::now() + Duration::from_secs(30);
    while server.requests().len() < 2 {
        assert!(Instant::now() < until, "the second model call never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    // While it runs, its trajectory is not anyone else's to append to.
    let running = d.run_dir();
    let r = continue_run(&d, &server, &running, Some("too early"), &[]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("another runner is writing its trajectory"),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr().contains("hint: the run is still going"),
        "{}",
        r.explain()
    );
    sigint(live.child.id());
    let done = live.finish(Duration::from_secs(30));
    done.expect_code(130);
    let run_dir = d.run_dir();
    let before = read_jsonl(&run_dir.join("trajectory.jsonl"));
    assert_eq!(
        before.last().map(|e| e["outcome"].clone()),
        Some(json!("interrupted"))
    );

    server.push(FakeResponse::anthropic_text("picked up"));
    let r = continue_run(
        &d,
        &server,
        &run_dir,
        Some("you were interrupted; finish"),
        &[],
    );
    r.expect_code(0);
    server.assert_protocol_ok();
    // What the interrupted call was sent, then the message.
    let sent = messages(&server, 2);
    let held = messages(&server, 1);
    assert_eq!(&sent[..held.len() - 1], &held[..held.len() - 1]);
    let mut last = held.last().cloned().expect("a message");
    last["content"]
        .as_array_mut()
        .expect("blocks")
        .push(text_block("you were interrupted; finish"));
    assert_eq!(sent.last(), Some(&last));
    assert_eq!(
        tool_blocks(&sent),
        [("use", "toolu_1"), ("result", "toolu_1")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let events = read_jsonl(&run_dir.join("trajectory.jsonl"));
    let cont = after_continuation(&events);
    assert_eq!(cont[0]["previous_outcome"], "interrupted");
    assert_eq!(
        cont.last().map(|e| e["final_text"].clone()),
        Some(json!("picked up"))
    );
}

#[test]
fn a_killed_run_with_a_cut_last_line_continues_and_its_unfinished_call_is_answered() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::anthropic_tool_use("toolu_1", "bash", r#"{"command":"echo one > one.txt"}"#),
        FakeResponse::anthropic_tool_use(
            "toolu_2",
            "bash",
            r#"{"command":"sleep 1; cat one.txt"}"#,
        ),
        FakeResponse::anthropic_text("done"),
    ]);
    first_run(&d, &server, &[]).expect_code(0);
    let run_dir = d.run_dir();
    let traj = run_dir.join("trajectory.jsonl");
    // As if runner was killed (SIGKILL) while toolu_2 ran, in the middle
    // of writing a line: the events up to its tool_call, then half a line.
    let text = std::fs::read_to_string(&traj).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    let call = lines
        .iter()
        .position(|l| l.contains("\"tool_call\"") && l.contains("toolu_2"))
        .expect("the second tool call");
    let mut cut = lines[..=call].join("\n");
    cut.push_str("\n{\"type\":\"tool_result\",\"step\":2,\"id\":\"tool");
    std::fs::write(&traj, &cut).expect("write");

    server.push(FakeResponse::anthropic_text("recovered"));
    let r = continue_run(&d, &server, &run_dir, Some("try once more"), &[]);
    r.expect_code(0);
    assert!(
        r.stderr().contains("warning: left out 1 line"),
        "{}",
        r.explain()
    );
    server.assert_protocol_ok();
    let sent = messages(&server, 3);
    assert_eq!(&sent[..3], &messages(&server, 1)[..]);
    let last = sent.last().expect("a message");
    let content = last["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(content.len(), 2, "{last}");
    assert_eq!(content[0]["tool_use_id"], "toolu_2");
    assert_eq!(content[0]["is_error"], true);
    assert!(
        content[0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("no result was recorded")),
        "{last}"
    );
    assert_eq!(content[1], text_block("try once more"));

    // The cut line stays, alone on its line; every event after it parses.
    let after = std::fs::read_to_string(&traj).expect("read");
    assert!(after.starts_with(&cut), "the record before was changed");
    let rest = &after[cut.len()..];
    assert!(rest.starts_with('\n'), "no newline after the cut line");
    let appended: Vec<Value> = rest
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(appended[0]["type"], "continuation");
    assert_eq!(appended[0]["previous_outcome"], Value::Null);
    assert_eq!(appended[0]["replayed_steps"], 2);
}

#[test]
fn another_provider_asked_for_is_refused_unless_given_with_provider() {
    let _s = shared();
    let d = Dir::new();
    let server = FakeServer::start_blocking(vec![
        FakeResponse::anthropic_tool_use("toolu_1", "bash", r#"{"command":"echo one"}"#),
        FakeResponse::anthropic_text("done"),
    ]);
    first_run(&d, &server, &[]).expect_code(0);
    let run_dir = d.run_dir();
    let before = std::fs::read_to_string(run_dir.join("trajectory.jsonl")).expect("read");

    let r = run(d
        .runner()
        .env("RUNNER_PROVIDER", "openai")
        .env("OPENAI_API_KEY", "sk-openai-fake-123456")
        .arg("continue")
        .arg(&run_dir));
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains(
            "error: the run used the provider anthropic, and RUNNER_PROVIDER asks for openai"
        ),
        "{}",
        r.explain()
    );
    assert!(
        err.contains("hint: pass --provider openai"),
        "{}",
        r.explain()
    );
    assert_eq!(
        std::fs::read_to_string(run_dir.join("trajectory.jsonl")).expect("read"),
        before,
        "a refused continuation wrote to the trajectory"
    );

    // Given explicitly, the conversation goes to the other API in its form.
    let openai = FakeServer::start_blocking(vec![FakeResponse::openai_text("hello from openai")]);
    let r = run(d
        .runner()
        .env("RUNNER_PROVIDER", "openai")
        .env("OPENAI_API_KEY", "sk-openai-fake-123456")
        .args([
            "continue",
            "--provider",
            "openai",
            "--model",
            "gpt-4o",
            "--base-url",
        ])
        .arg(openai.openai_url())
        .args(LOCAL_ON_WS)
        .arg(&run_dir)
        .arg("and now?"));
    r.expect_code(0);
    openai.assert_protocol_ok();
    let body = &openai.requests()[0].body;
    let roles: Vec<_> = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["role"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"]
    );
    assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "toolu_1");
    assert_eq!(body["messages"][3]["tool_call_id"], "toolu_1");
    assert_eq!(body["messages"][5]["content"], "and now?");
}

/// A completed scripted run (one `echo hi`) with `extra` flags; its run
/// directory.
fn scripted_run(d: &Dir, extra: &[&str]) -> PathBuf {
    let s = script(
        d,
        json!([{"tool_calls": [{"name": "bash", "input": {"command": "echo hi"}}]}, {"text": "done"}]),
    );
    run(d
        .scripted(&s)
        .args(["--executor", "local"])
        .args(extra)
        .arg("say hi"))
    .expect_code(0);
    d.run_dir()
}

#[test]
fn a_run_whose_scratch_workspace_was_removed_is_refused_and_goes_on_with_workspace() {
    let _s = shared();
    let d = Dir::new();
    // A completed run on a scratch workspace, which runner then removed.
    let run_dir = scripted_run(&d, &[]);
    let traj = run_dir.join("trajectory.jsonl");
    let events = read_jsonl(&traj);
    let ws = events[0]["config"]["workspace"]
        .as_str()
        .expect("recorded")
        .to_string();
    assert_eq!(events[0]["config"]["scratch_workspace"], true);
    assert!(
        !Path::new(&ws).exists(),
        "the scratch workspace is still there"
    );
    let r = run(d
        .runner()
        .arg("continue")
        .arg(&run_dir)
        .args(["--executor", "local"]));
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains(&format!("error: the run's workspace {ws} is gone")),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr().contains("hint: ") && r.stderr().contains("--keep-workspace"),
        "{}",
        r.explain()
    );
    assert_eq!(
        read_jsonl(&traj).len(),
        events.len(),
        "a refused continuation wrote to the trajectory"
    );

    // Given another workspace, the scripted run goes on (its own script,
    // from its first turn), and runs there.
    let other = workspace(&d);
    let r = run(d
        .runner()
        .args(["continue", "--executor", "local"])
        .arg(&run_dir)
        .arg("--workspace")
        .arg(&other)
        .arg("--json"));
    r.expect_code(0);
    let out = of_type(&r.events(), "tool_result")[0]["output"].clone();
    assert!(out.as_str().is_some_and(|o| o.starts_with("hi\n")), "{out}");
    let cont = after_continuation(&read_jsonl(&traj));
    assert_eq!(
        cont[0]["config"]["workspace"],
        json!(std::fs::canonicalize(&other).expect("canon"))
    );
}

#[test]
fn a_trajectory_of_a_newer_format_is_refused() {
    let _s = shared();
    let d = Dir::new();
    workspace(&d);
    let run_dir = scripted_run(&d, &["--workspace", WS]);
    let traj = run_dir.join("trajectory.jsonl");
    let text = std::fs::read_to_string(&traj).expect("read");
    assert_eq!(read_jsonl(&traj)[0]["format_version"], 1);
    let newer = text.replacen("\"format_version\":1", "\"format_version\":2", 1);
    std::fs::write(&traj, &newer).expect("write");
    let r = run(d.runner().arg("continue").arg(&run_dir).args(LOCAL_ON_WS));
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("is of trajectory format 2, newer than this runner reads (up to 1)"),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr()
            .contains("hint: continue it with the runner that wrote it"),
        "{}",
        r.explain()
    );
    assert_eq!(std::fs::read_to_string(&traj).expect("read"), newer);

    // Without a version (an older runner's) it is version 1, and goes on.
    let older = text.replacen("\"format_version\":1,", "", 1);
    assert_ne!(older, text);
    std::fs::write(&traj, &older).expect("write");
    run(d.runner().arg("continue").arg(&run_dir).args(LOCAL_ON_WS)).expect_code(0);
}

#[test]
fn a_directory_that_is_no_run_is_refused() {
    let _s = shared();
    let d = Dir::new();
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let file = d.write("file", "x");
    let not_ours = d.path().join("other");
    std::fs::create_dir(&not_ours).expect("mkdir");
    std::fs::write(
        not_ours.join("trajectory.jsonl"),
        "{\"type\":\"user_message\",\"text\":\"x\"}\n",
    )
    .expect("write");
    for (dir, says) in [
        (
            empty.clone(),
            "is not a run directory: it holds no trajectory.jsonl",
        ),
        (
            d.path().join("nowhere"),
            "is not a run directory: it does not exist",
        ),
        (file, "is not a run directory: it is not a directory"),
        (not_ours, "does not start with a run_started event"),
    ] {
        let r = run(d.runner().arg("continue").arg(&dir));
        r.expect_code(2);
        assert!(r.stderr().contains(says), "{}", r.explain());
        assert!(
            r.stderr()
                .contains("hint: give the directory a run printed as"),
            "{}",
            r.explain()
        );
    }
    assert!(!empty.join("trajectory.jsonl").exists());
}

#[test]
fn a_workspace_holding_the_run_directory_or_a_shared_root_is_refused() {
    let _s = shared();
    let d = Dir::new();
    workspace(&d);
    let run_dir = scripted_run(&d, &["--workspace", WS]);
    let traj = run_dir.join("trajectory.jsonl");
    let before = read_jsonl(&traj).len();
    // `d` holds `runs/<id>`: a sandbox on it could rewrite the record it
    // is continued from, or plant links where runner writes.
    assert!(run_dir.starts_with(d.path()), "{}", run_dir.display());
    for ws in [d.path().to_path_buf(), PathBuf::from("/")] {
        let r = run(d
            .runner()
            .args(["continue", "--executor", "local"])
            .arg(&run_dir)
            .arg("--workspace")
            .arg(&ws));
        r.expect_code(2);
        assert!(
            r.stderr().contains("error: refusing the workspace: "),
            "{}",
            r.explain()
        );
        assert!(r.stderr().contains("hint: "), "{}", r.explain());
    }
    assert_eq!(
        read_jsonl(&traj).len(),
        before,
        "a refused continuation wrote to the trajectory"
    );
}
