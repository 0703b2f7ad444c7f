//! With no task and a terminal on stdin, runner holds a conversation.
//! `script` (util-linux) gives the binary a pseudo-terminal.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::binary::{Dir, of_type, outcome};
use crate::support::serial::shared;

#[test]
fn a_terminal_without_a_task_starts_a_conversation_that_q_ends() {
    let _s = shared();
    let d = Dir::new();
    let s = d.write(
        "script.json",
        r#"[{"text":"first answer"},
            {"tool_calls":[{"name":"bash","input":{"command":"echo second-turn"}}]},
            {"text":"second answer","expect":"second-turn"}]"#,
    );
    let runner = format!(
        "{} --provider scripted --script {} --executor local",
        env!("CARGO_BIN_EXE_runner"),
        s.display()
    );
    let mut child = Command::new("script")
        .args(["-qec", &runner, "/dev/null"])
        .current_dir(d.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn script(1) from util-linux");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(b"hello\nagain\nq\n").expect("type");
    }
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("second answer"), "{text}");
    let traj = d.trajectory();
    let users: Vec<_> = of_type(&traj, "user_message")
        .into_iter()
        .filter_map(|e| e["text"].as_str())
        .collect();
    assert_eq!(users, ["hello", "again"]);
    assert_eq!(outcome(&traj), "completed");
}
