//! B7: the Anthropic client against a zero-latency fake server on
//! loopback: time, CPU and heap allocations per streamed turn.
//!
//! Allocations are counted by the bench's global allocator, only on the
//! client's thread (a current-thread runtime, so reqwest's and hyper's
//! tasks run there too); the fake server runs on other threads and is not
//! counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nix::sys::resource::{UsageWho, getrusage};
use runner::model::anthropic::AnthropicModel;
use runner::model::http::ApiConfig;
use runner::model::{Block, Message, Model, ModelRequest, Role, ToolSpec};
use serde_json::{Value, json};

use crate::Plan;
use crate::stats::{Row, Samples};
use crate::sys::tv_ms;

/// Counts allocations made on threads that switched counting on.
pub struct CountingAlloc;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

fn note_alloc(size: usize) {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        ALLOC_BYTES.fetch_add(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counting touches only atomics and a const-initialised thread local.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn thread_cpu_ms() -> f64 {
    getrusage(UsageWho::RUSAGE_THREAD)
        .map_or(f64::NAN, |u| tv_ms(u.user_time()) + tv_ms(u.system_time()))
}

/// One streamed turn as the API sends it: text, then a `bash` tool call.
fn sse_turn() -> Vec<u8> {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_bench", "type": "message",
            "role": "assistant", "model": "claude-bench", "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 2000, "output_tokens": 1,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1800}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for word in "Let me look at the files in the workspace first.".split_inclusive(' ') {
        events.push(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": word}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.push(
        json!({"type": "content_block_start", "index": 1, "content_block":
        {"type": "tool_use", "id": "toolu_bench", "name": "bash", "input": {}}}),
    );
    for part in [r#"{"comm"#, r#"and": "ls -la"#, r#" /workspace"}"#] {
        events.push(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": part}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 1}));
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use",
        "stop_sequence": null}, "usage": {"output_tokens": 40}}),
    );
    events.push(json!({"type": "message_stop"}));
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

/// Serves `reply` to every request on `conn` (keep-alive) until it closes.
fn serve(conn: TcpStream, reply: &[u8]) -> std::io::Result<()> {
    let mut writer = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    loop {
        let mut length = 0usize;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        std::io::copy(&mut (&mut reader).take(length as u64), &mut std::io::sink())?;
        writer.write_all(reply)?;
    }
}

/// Starts the fake server on a random loopback port; returns its base URL.
fn start_server() -> Result<String, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("binding loopback: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let reply = sse_turn();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let reply = reply.clone();
            std::thread::spawn(move || serve(conn, &reply));
        }
    });
    Ok(format!("http://{addr}"))
}

/// A mid-run conversation: the task, then 10 tool calls with 1 KiB results.
fn conversation() -> Vec<Message> {
    let mut msgs = vec![Message::user_text(
        "Make the tests in this repository pass.",
    )];
    let output = "drwxr-xr-x 2 sandbox sandbox 4096 file.txt\n".repeat(24);
    for i in 0..10 {
        let id = format!("toolu_{i:02}");
        msgs.push(Message {
            role: Role::Assistant,
            content: vec![
                Block::Text {
                    text: "Looking around.".into(),
                },
                Block::ToolUse {
                    id: id.clone(),
                    name: "bash".into(),
                    input: json!({"command": "ls -la /workspace"}),
                    raw_input: None,
                },
            ],
        });
        msgs.push(Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: id,
                content: output.clone(),
                is_error: false,
            }],
        });
    }
    msgs
}

fn bash_spec() -> ToolSpec {
    ToolSpec {
        native: None,
        name: "bash".into(),
        description: "Run a shell command with bash -c in /workspace.".into(),
        input_schema: json!({"type": "object", "properties": {
            "command": {"type": "string"}, "timeout": {"type": "number"}},
            "required": ["command"]}),
    }
}

/// B7: `plan.b7_turns` streamed turns through the Anthropic client.
pub fn b7(plan: &Plan) -> Result<Vec<Row>, String> {
    let base = start_server()?;
    let cfg = ApiConfig::new("claude-bench", Some("bench-key".into()), &base);
    let model = AnthropicModel::new(cfg).map_err(|e| format!("building the client: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("building a runtime: {e}"))?;
    let system = "You are a careful software engineer. ".repeat(40);
    let msgs = conversation();
    let tools = [bash_spec()];
    let req = ModelRequest {
        system: &system,
        messages: &msgs,
        tools: &tools,
        max_tokens: 8192,
    };
    let sink = |_: runner::model::ModelProgress| {};
    let (mut times, mut allocs, mut bytes, mut cpu) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    );
    rt.block_on(async {
        for turn in 0..plan.b7_warmup + plan.b7_turns {
            let (a0, b0) = (
                ALLOCS.load(Ordering::Relaxed),
                ALLOC_BYTES.load(Ordering::Relaxed),
            );
            let (c0, t0) = (thread_cpu_ms(), Instant::now());
            COUNTING.with(|c| c.set(true));
            let reply = model.complete(req, &sink).await;
            COUNTING.with(|c| c.set(false));
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let reply = reply.map_err(|e| format!("turn {turn}: {e}"))?;
            if reply.message.tool_calls().count() != 1 {
                return Err(format!("turn {turn}: expected one tool call: {reply:?}"));
            }
            if turn >= plan.b7_warmup {
                times.push(ms);
                cpu.push(thread_cpu_ms() - c0);
                allocs.push((ALLOCS.load(Ordering::Relaxed) - a0) as f64);
                bytes.push((ALLOC_BYTES.load(Ordering::Relaxed) - b0) as f64);
            }
        }
        Ok::<(), String>(())
    })?;
    let body_kib = runner_body_size(&system, &msgs) as f64 / 1024.0;
    Ok(vec![
        Row::new("B7", "anthropic client, one streamed turn", "ms", &times).note(format!(
            "client-thread CPU {:.2} ms/turn; request body ~{body_kib:.0} KiB, 21 messages; reply 17 SSE events",
            cpu.median()
        )),
        Row::new("B7", "allocations per turn", "count", &allocs).note(format!(
            "{:.0} KiB allocated per turn (median)",
            bytes.median() / 1024.0
        )),
    ])
}

/// Rough size of the JSON the client sends (system + messages).
fn runner_body_size(system: &str, msgs: &[Message]) -> usize {
    let v: Value = json!({"system": system, "messages": msgs});
    v.to_string().len()
}
