//! The edit tool (`--tools bash,edit`) through the binary: a scripted
//! model creating, editing and viewing a file on both executors; the
//! recorded Anthropic `text_editor_20250728` exchange replayed against a
//! fake server; `--tools` usage errors.

use serde_json::{Value, json};

use crate::recorded;
use crate::support::binary::{Dir, Exec, bash, of_type, outcome, run, script};
use crate::support::fake_model::{FakeResponse, FakeServer};
use crate::support::serial::shared;

const EDIT: &str = "str_replace_based_edit_tool";

mod local {
    #[test]
    fn the_edit_tool_creates_edits_and_views_a_file() {
        let _s = super::shared();
        super::the_edit_tool_creates_edits_and_views_a_file(super::Exec::Local)
    }
}

mod docker {
    #[test]
    fn the_edit_tool_creates_edits_and_views_a_file() {
        let _s = super::shared();
        super::the_edit_tool_creates_edits_and_views_a_file(super::Exec::Docker)
    }
}

fn edit(input: Value) -> Value {
    json!({"name": EDIT, "input": input})
}

fn the_edit_tool_creates_edits_and_views_a_file(ex: Exec) {
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    std::fs::write(ws.join("keep.txt"), "seeded\n").expect("write");
    let s = script(
        &d,
        json!([
            {"tool_calls": [edit(json!({"command": "create", "path": "pkg/todo.py",
                                         "file_text": "def f():\n    return 1\n"}))]},
            {"expect": "File created successfully at:",
             "tool_calls": [edit(json!({"command": "str_replace", "path": "pkg/todo.py",
                                         "old_str": "return 1", "new_str": "return 2"}))]},
            {"expect": "has been edited",
             "tool_calls": [
                 edit(json!({"command": "insert", "path": "pkg/todo.py", "insert_line": 0,
                              "insert_text": "# header\n"})),
                 edit(json!({"command": "str_replace", "path": "pkg/todo.py", "old_str": "absent"})),
                 edit(json!({"command": "view", "path": "pkg/todo.py", "view_range": [2, -1]})),
                 edit(json!({"command": "view", "path": "."})),
                 // Owned by the sandbox's user, with a real modification time
                 // (`make` must see the change).
                 bash("cat pkg/todo.py; test -O pkg/todo.py && echo owned-by-the-sandbox-user; \
                       [ \"$(stat -c %Y pkg/todo.py)\" -gt 1000000000 ] && echo fresh-mtime"),
             ]},
            {"text": "done", "expect": "owned-by-the-sandbox-user\nfresh-mtime"}
        ]),
    );
    let r = run(d
        .scripted(&s)
        .args(ex.args())
        .args(["--tools", "bash,edit", "--workspace"])
        .arg(&ws)
        .arg("edit a file"));
    r.expect_code(0);
    let events = r.events();
    assert_eq!(outcome(&events), "completed", "{}", r.explain());
    // Both tools were offered (the native type is checked against a
    // fake Anthropic server below).
    assert_eq!(of_type(&events, "model_request")[0]["tools"], 2);
    assert_eq!(
        of_type(&events, "run_started")[0]["config"]["tools"],
        json!(["bash", "edit"])
    );
    let results = of_type(&events, "tool_result");
    let out = |i: usize| results[i]["output"].as_str().unwrap_or("").to_string();
    let errors: Vec<bool> = results.iter().map(|e| e["is_error"] == true).collect();
    assert_eq!(errors, [false, false, false, true, false, false, false]);
    assert!(out(3).contains("did not appear verbatim"), "{}", out(3));
    // Paths were taken from the sandbox's working directory.
    let wd = if ex == Exec::Local {
        ws.canonicalize().expect("canonical").display().to_string()
    } else {
        "/workspace".to_string()
    };
    let file = format!("{wd}/pkg/todo.py");
    assert_eq!(out(0), format!("File created successfully at: {file}"));
    assert!(
        out(4).ends_with("     2\tdef f():\n     3\t    return 2\n"),
        "{}",
        out(4)
    );
    assert!(
        !out(4).contains("# header"),
        "view_range [2, -1]: {}",
        out(4)
    );
    let listing = out(5);
    assert!(
        listing.contains("/pkg\n")
            && listing.contains("/pkg/todo.py\n")
            && listing.contains("/keep.txt\n"),
        "{listing}"
    );
    assert!(
        out(6).contains("# header\ndef f():\n    return 2\n"),
        "{}",
        out(6)
    );
    // The change reached the workspace on the host.
    assert_eq!(
        std::fs::read_to_string(ws.join("pkg/todo.py"))
            .ok()
            .as_deref(),
        Some("# header\ndef f():\n    return 2\n")
    );
    assert!(
        r.stderr().contains("edit: create pkg/todo.py"),
        "{}",
        r.explain()
    );
}

#[test]
fn an_unknown_tool_is_a_usage_error_with_a_hint() {
    let _s = shared();
    let d = Dir::new();
    let s = script(&d, json!([{"text": "done"}]));
    let r = run(d
        .scripted(&s)
        .args(["--executor", "local", "--tools", "bash,python", "go"]));
    r.expect_code(2);
    assert!(
        r.stderr().contains("error: --tools: unknown tool 'python'"),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr()
            .contains("hint: --tools takes a comma list of: bash, edit"),
        "{}",
        r.explain()
    );
    // The same for a suite, before any attempt starts.
    let r = run(d.runner().args([
        "eval",
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tasks"),
        "--executor",
        "local",
        "--agent",
        "oracle",
        "--tools",
        "",
    ]));
    r.expect_code(2);
    assert!(
        r.stderr().contains("--tools names no tool"),
        "{}",
        r.explain()
    );
}

#[test]
fn the_edit_tool_alone_is_offered_without_bash() {
    let _s = shared();
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("echo hi")]},
            {"text": "done", "expect": "unknown tool 'bash'"}
        ]),
    );
    let r = run(d
        .scripted(&s)
        .args(["--executor", "local", "--tools", "edit", "--workspace"])
        .arg(&ws)
        .arg("go"));
    r.expect_code(0);
    let events = r.events();
    assert_eq!(of_type(&events, "model_request")[0]["tools"], 1);
    let started = &of_type(&events, "run_started")[0];
    assert_eq!(started["config"]["tools"], json!(["edit"]));
}

/// Vector 23: Claude asked for `view` of a file through the native
/// `text_editor_20250728` tool. Replayed through the binary against a fake
/// Anthropic server, with the file at the recorded path's name in the
/// workspace: the request must offer the native tool, and the tool result
/// must be what viewing the real file gives.
#[test]
fn recorded_text_editor_view_replays_through_the_binary() {
    let _s = shared();
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let ws = ws.canonicalize().expect("canonical");
    std::fs::write(ws.join("example.py"), "print(\"hello world\")\n").expect("write");
    let file = ws.join("example.py").display().to_string();
    let name = "23_anthropic_text_editor_20250728_view.json";
    let ex = recorded::exchanges(name);
    let raw = recorded::load(name);
    // The recording viewed /tmp/example.py; the local executor reaches only
    // its workspace, so the same call names the file there.
    let recorded_call = &raw["interactions"][0]["response"]["body"]["content"][0];
    assert_eq!(
        recorded_call["input"],
        json!({"command": "view", "path": "/tmp/example.py"})
    );
    let mut first = raw["interactions"][0]["response"]["body"].clone();
    first["content"][0]["input"]["path"] = json!(file);
    let server =
        FakeServer::start_blocking(vec![FakeResponse::json(first), ex[1].response.clone()]);
    let r = run(d
        .runner()
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-key-123456")
        .args([
            "--executor",
            "local",
            "--json",
            "--tools",
            "bash,edit",
            "--model",
            "claude-sonnet-4-6",
        ])
        .arg("--workspace")
        .arg(&ws)
        .arg("View the file example.py"));
    r.expect_code(0);
    server.assert_protocol_ok();
    server.assert_all_served();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    // The request carries the native tool as recorded, plus our options.
    let recorded_tool = &ex[0].request["tools"][0];
    let ours = reqs[0].body["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == EDIT))
        .cloned()
        .expect("the edit tool is offered");
    assert_eq!(ours["type"], recorded_tool["type"]);
    assert_eq!(ours["name"], recorded_tool["name"]);
    assert_eq!(ours["max_characters"], 16_000);
    assert!(
        ours.get("input_schema").is_none(),
        "native tools carry no schema: {ours}"
    );
    // The tool result is a real view of the file, answering the recorded id.
    let msgs = reqs[1].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let result = msgs
        .last()
        .and_then(|m| m["content"].as_array())
        .and_then(|c| c.iter().find(|b| b["type"] == "tool_result"))
        .cloned()
        .expect("a tool result");
    assert_eq!(result["tool_use_id"], recorded_call["id"]);
    assert_eq!(result["is_error"], json!(false));
    let expected = format!(
        "Here's the result of running `cat -n` on {file}:\n     1\tprint(\"hello world\")\n"
    );
    assert_eq!(recorded::content_text(&result["content"]), expected);
    // What the recorded client answered holds the same line of the file.
    let theirs = recorded::content_text(&ex[1].request["messages"][2]["content"][0]["content"]);
    assert!(theirs.contains("print(\\\"hello world\\\")"), "{theirs}");
    let events = r.events();
    assert_eq!(outcome(&events), "completed");
    let text = of_type(&events, "run_finished")[0]["final_text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(text.contains("hello world"), "{text}");
}

/// For an OpenAI-compatible model the same tool is a function tool with
/// its full schema, and its calls work the same.
#[test]
fn openai_models_get_the_editor_as_a_function_tool() {
    let _s = shared();
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let server = FakeServer::start_blocking(vec![
        FakeResponse::openai_tool_call(
            "call_1",
            EDIT,
            r#"{"command":"create","path":"hello.txt","file_text":"hi\n"}"#,
        ),
        FakeResponse::openai_text("done"),
    ]);
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
        ])
        .args(["--json", "--tools", "bash,edit", "--workspace"])
        .arg(&ws)
        .arg("create hello.txt"));
    r.expect_code(0);
    server.assert_protocol_ok();
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt"))
            .ok()
            .as_deref(),
        Some("hi\n")
    );
    let tools = server.requests()[0].body["tools"].clone();
    let f = tools
        .as_array()
        .and_then(|t| t.iter().find(|t| t["function"]["name"] == EDIT))
        .cloned()
        .unwrap_or_else(|| panic!("no function tool {EDIT}: {tools}"));
    assert_eq!(f["type"], "function");
    let params = &f["function"]["parameters"];
    assert_eq!(params["required"], json!(["command", "path"]));
    assert_eq!(
        params["properties"]["command"]["enum"],
        json!(["view", "create", "str_replace", "insert"])
    );
    assert!(
        f["function"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("exactly once")),
        "{f}"
    );
    assert!(
        !tools.to_string().contains("text_editor_20250728"),
        "{tools}"
    );
}
