//! With no task and a terminal on stdin, runner holds a conversation.
//! `script` (util-linux) gives the binary a pseudo-terminal.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::binary::{Dir, of_type, outcome, sigint, some_trajectory_has, wait_within};
use crate::support::serial::shared;

/// runner with scripted model `script`, in `d`, on a pseudo-terminal.
/// script(1) runs the command through `$SHELL -c`; dash (CI's `/bin/sh`)
/// forks rather than execs its last command, so the `exec` makes runner
/// itself script's child whatever the shell, and the shell is pinned so
/// the test does not depend on the caller's.
fn on_a_terminal(d: &Dir, script: &std::path::Path) -> std::process::Child {
    let runner = format!(
        "exec {} --provider scripted --script {} --executor local",
        env!("CARGO_BIN_EXE_runner"),
        script.display()
    );
    Command::new("script")
        .args(["-qec", &runner, "/dev/null"])
        .current_dir(d.path())
        .env("SHELL", "/bin/sh")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn script(1) from util-linux")
}

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
    let mut child = on_a_terminal(&d, &s);
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

/// Ctrl-C at the prompt ends the conversation with 130 at once: the read
/// of the terminal that nobody can cancel must not hold the exit.
#[test]
fn ctrl_c_at_the_prompt_exits_130_at_once() {
    use std::time::{Duration, Instant};
    let _s = shared();
    let d = Dir::new();
    let s = d.write("script.json", r#"[{"text":"never asked"}]"#);
    let mut child = on_a_terminal(&d, &s);
    // Kept open: the prompt waits for a line that never comes.
    let _stdin = child.stdin.take();
    let started = Instant::now();
    let at_prompt = || some_trajectory_has(d.path(), "run_started");
    while !at_prompt() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(at_prompt(), "the conversation started");
    std::thread::sleep(Duration::from_millis(200));
    // runner is script's child.
    let pids = Command::new("pgrep")
        .args(["-P", &child.id().to_string()])
        .output()
        .expect("pgrep");
    let pid: u32 = String::from_utf8_lossy(&pids.stdout)
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("runner's pid");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "runner", "script(1)'s child is runner itself");
    sigint(pid);
    let status = wait_within(&mut child, Duration::from_secs(5));
    if status.is_none() {
        // script(1) is gone; its child may not be.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits i32")),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let status = status.expect("runner still at the prompt 5 s after Ctrl-C");
    assert_eq!(status.code(), Some(130));
    assert_eq!(outcome(&d.trajectory()), "interrupted");
}
