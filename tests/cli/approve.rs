//! `--approve`: a person answers on a pseudo-terminal (expectrl) before
//! commands run, with the scripted model and the local executor. Each
//! answer, the risky policy and the refusal without a terminal.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use expectrl::{ControlCode, Eof, Expect, session::OsSession};
use serde_json::Value;

use crate::support::binary::{Dir, Exec, of_type, outcome};
use crate::support::serial::shared;

/// The question's last line (runner's `approve::prompt::CHOICES`).
const CHOICES: &str = "run it? [y]es, [n]o, [e]dit, [a]ll the rest, [q]uit: ";

/// A run of `script` with `--approve approve` on a pseudo-terminal (stdin,
/// stdout and stderr on it), its workspace `d/ws`.
struct Run {
    pty: OsSession,
    /// Everything runner printed so far.
    seen: String,
    ws: PathBuf,
}

impl Run {
    fn start(d: &Dir, script: &str, approve: &str) -> Run {
        Run::start_with(d, script, approve, Some("the task"))
    }

    /// As [`Run::start`]; no `task`: a conversation.
    fn start_with(d: &Dir, script: &str, approve: &str, task: Option<&str>) -> Run {
        Run::start_on(d, script, approve, task, &Exec::Local.args())
    }

    /// As [`Run::start_with`], on the executor `exec` names.
    fn start_on(d: &Dir, script: &str, approve: &str, task: Option<&str>, exec: &[String]) -> Run {
        let s = d.write("script.json", script);
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut c = d.runner();
        c.arg("--provider")
            .arg("scripted")
            .arg("--script")
            .arg(&s)
            .args(exec)
            .args(["--approve", approve, "--workspace"])
            .arg(&ws)
            .args(task);
        Run::spawn(c, ws)
    }

    /// `runner continue` of `d`'s run with `message`, the scripted model
    /// on `script`, and `extra` flags.
    fn continue_with(d: &Dir, script: &str, message: &str, extra: &[&str]) -> Run {
        let s = d.write("script-2.json", script);
        let ws = d.path().join("ws");
        let mut c = d.runner();
        c.arg("continue")
            .arg(d.run_dir())
            .arg(message)
            .arg("--script")
            .arg(&s)
            .args(["--executor", "local", "--workspace"])
            .arg(&ws)
            .args(extra);
        Run::spawn(c, ws)
    }

    fn spawn(mut c: std::process::Command, ws: PathBuf) -> Run {
        // The pseudo-terminal is fd 0, 1 and 2: exec must keep them.
        c.stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        let mut pty = OsSession::spawn(c).expect("spawn runner on a pseudo-terminal");
        pty.set_expect_timeout(Some(Duration::from_secs(30)));
        Run {
            pty,
            seen: String::new(),
            ws,
        }
    }

    /// Waits for `text`; everything up to it is kept in `seen`.
    fn wait_for(&mut self, text: &str) {
        match self.pty.expect(text) {
            Ok(c) => {
                self.seen.push_str(&String::from_utf8_lossy(c.before()));
                self.seen.push_str(text);
            }
            Err(e) => panic!("waiting for {text:?}: {e}\n--- seen ---\n{}", self.seen),
        }
    }

    /// Waits for the question, then answers `line`.
    fn answer(&mut self, line: &str) {
        self.wait_for(CHOICES);
        self.pty.send_line(line).expect("type");
    }

    /// Reads to the end and returns the exit code; a runner still running
    /// after the expect timeout (waiting for an answer nobody gives) is
    /// killed and the test fails.
    fn finish(mut self) -> (i32, String) {
        match self.pty.expect(Eof) {
            Ok(c) => {
                for m in c.matches() {
                    self.seen.push_str(&String::from_utf8_lossy(m));
                }
            }
            Err(e) => {
                let _ = self.pty.get_process_mut().exit(true);
                panic!("runner did not end: {e}\n--- seen ---\n{}", self.seen);
            }
        }
        let status = self.pty.get_process().wait().expect("wait for runner");
        let code = match status {
            expectrl::process::unix::WaitStatus::Exited(_, code) => code,
            other => panic!("runner did not exit: {other:?}\n{}", self.seen),
        };
        (code, self.seen)
    }
}

fn approvals(traj: &[Value]) -> Vec<&Value> {
    of_type(traj, "approval")
}

fn tool_outputs(traj: &[Value]) -> Vec<String> {
    of_type(traj, "tool_result")
        .iter()
        .map(|e| e["output"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn y_runs_the_command() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"echo made > made.txt"}}]},
            {"expect":"[exit code: 0]","text":"done"}]"#,
        "always",
    );
    run.wait_for("approve this command (--approve always):");
    run.wait_for("    echo made > made.txt");
    run.answer("y");
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "made\n"
    );
    let traj = d.trajectory();
    let a = approvals(&traj);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["answer"], "yes");
    assert_eq!(a[0]["rule"], "always");
    assert_eq!(a[0]["asked"], true);
    assert_eq!(a[0]["command"], "echo made > made.txt");
    assert_eq!(outcome(&traj), "completed");
}

#[test]
fn n_tells_the_model_and_the_run_goes_on() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch never.txt"}}]},
            {"expect":"the user declined to run this command",
             "tool_calls":[{"name":"bash","input":{"command":"touch after.txt"}}]},
            {"expect":"[exit code: 0]","text":"went on"}]"#,
        "always",
    );
    run.answer("n");
    run.answer("y");
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    assert!(!ws.join("never.txt").exists());
    assert!(ws.join("after.txt").exists());
    let traj = d.trajectory();
    let results = of_type(&traj, "tool_result");
    assert_eq!(
        results[0]["output"], "the user declined to run this command",
        "{results:?}"
    );
    assert_eq!(results[0]["is_error"], true);
    let answers: Vec<_> = approvals(&traj).iter().map(|e| &e["answer"]).collect();
    assert_eq!(answers, ["no", "yes"]);
    assert_eq!(outcome(&traj), "completed");
}

#[test]
fn e_runs_the_edited_command_not_the_original() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch original.txt"}}]},
            {"expect":"it ran as: touch edited.txt","text":"ok"}]"#,
        "always",
    );
    run.answer("e");
    run.wait_for("command to run instead");
    run.pty.send_line("touch edited.txt").unwrap();
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    assert!(ws.join("edited.txt").exists());
    assert!(!ws.join("original.txt").exists());
    let traj = d.trajectory();
    let a = approvals(&traj);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["answer"], "edit");
    assert_eq!(a[0]["command"], "touch original.txt");
    assert_eq!(a[0]["edited"], "touch edited.txt");
    assert!(tool_outputs(&traj)[0].ends_with("[exit code: 0]"));
}

#[test]
fn a_runs_the_rest_without_asking() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch one.txt"}}]},
            {"tool_calls":[{"name":"bash","input":{"command":"touch two.txt"}},
                           {"name":"bash","input":{"command":"touch three.txt"}}]},
            {"expect":"[exit code: 0]","text":"all done"}]"#,
        "always",
    );
    run.answer("a");
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    assert_eq!(seen.matches(CHOICES).count(), 1, "{seen}");
    for f in ["one.txt", "two.txt", "three.txt"] {
        assert!(ws.join(f).exists(), "{f}");
    }
    let traj = d.trajectory();
    let a = approvals(&traj);
    let asked: Vec<_> = a
        .iter()
        .map(|e| (e["answer"].as_str().unwrap(), e["asked"].as_bool().unwrap()))
        .collect();
    assert_eq!(asked, [("all", true), ("all", false), ("all", false)]);
}

#[test]
fn q_stops_the_run_as_ctrl_c_does() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch q.txt"}},
                           {"name":"bash","input":{"command":"touch later.txt"}}]},
            {"text":"never asked"}]"#,
        "always",
    );
    run.answer("q");
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 130, "{seen}");
    assert!(ws.exists() && !ws.join("q.txt").exists() && !ws.join("later.txt").exists());
    assert_eq!(seen.matches(CHOICES).count(), 1, "{seen}");
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "interrupted");
    assert_eq!(approvals(&traj)[0]["answer"], "quit");
    let out = tool_outputs(&traj);
    assert_eq!(out.len(), 2);
    assert!(out[0].contains("the user stopped the run"), "{out:?}");
    assert!(out[1].contains("interrupted by the user"), "{out:?}");
    // The model was not called again.
    assert_eq!(of_type(&traj, "model_request").len(), 1);
}

#[test]
fn the_end_of_input_at_the_question_is_q() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch eof.txt"}}]}]"#,
        "always",
    );
    run.wait_for(CHOICES);
    run.pty.send(ControlCode::EndOfTransmission).unwrap();
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 130, "{seen}");
    assert!(!ws.join("eof.txt").exists());
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "interrupted");
    assert_eq!(approvals(&traj)[0]["answer"], "quit");
}

#[test]
fn risky_asks_about_rm_rf_but_not_echo() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"mkdir x && echo hi"}}]},
            {"expect":"hi","tool_calls":[{"name":"bash","input":{"command":"rm -rf x"}}]},
            {"text":"removed"}]"#,
        "risky",
    );
    run.wait_for("approve this command (--approve risky, rule recursive-delete):");
    run.wait_for("    rm -rf x");
    run.answer("y");
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    assert_eq!(seen.matches(CHOICES).count(), 1, "{seen}");
    assert!(!ws.join("x").exists());
    let traj = d.trajectory();
    let a = approvals(&traj);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["command"], "rm -rf x");
    assert_eq!(a[0]["rule"], "recursive-delete");
    let out = tool_outputs(&traj);
    assert!(out[0].starts_with("hi\n"), "{out:?}");
}

#[test]
fn an_unknown_answer_asks_again() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch asked.txt"}}]}]"#,
        "always",
    );
    run.answer("maybe");
    run.wait_for("unknown answer \"maybe\": type y, n, e, a or q");
    run.answer("y");
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    assert_eq!(seen.matches(CHOICES).count(), 2, "{seen}");
    assert!(ws.join("asked.txt").exists());
    let traj = d.trajectory();
    let a = approvals(&traj);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0]["answer"], "yes");
}

#[test]
fn without_a_terminal_runner_exits_2_before_starting() {
    let _s = shared();
    let d = Dir::new();
    let s = d.write(
        "script.json",
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch no.txt"}}]}]"#,
    );
    for mode in ["risky", "always"] {
        let out = d
            .runner()
            .args(["--provider", "scripted", "--script"])
            .arg(&s)
            .args(["--executor", "local", "--approve", mode, "the task"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(
            err.lines().collect::<Vec<_>>(),
            [
                format!(
                    "error: --approve {mode} asks on the terminal, but stdin is not a terminal"
                )
                .as_str(),
                "hint: run runner in a terminal (stdin and stderr both on it), or drop --approve",
            ],
            "{err}"
        );
        assert!(
            !d.path().join("runs").exists(),
            "nothing started: no run directory"
        );
    }
}

/// stdin on the terminal is not enough: the question goes to stderr.
#[test]
fn stderr_off_the_terminal_is_refused_too() {
    let _s = shared();
    let d = Dir::new();
    let s = d.write("script.json", r#"[{"text":"never"}]"#);
    let err_file = d.path().join("stderr.txt");
    // The pseudo-terminal's spawn closes every other descriptor, so the
    // shell sends stderr to the file, then becomes runner.
    let mut c = std::process::Command::new("/bin/sh");
    c.current_dir(d.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", d.home())
        .env("NO_COLOR", "1")
        .args(["-c", r#"exec "$@" 2>stderr.txt"#, "sh"])
        .arg(env!("CARGO_BIN_EXE_runner"))
        .args(["--provider", "scripted", "--script"])
        .arg(&s)
        .args(["--executor", "local", "--approve", "risky", "the task"]);
    let pty = OsSession::spawn(c).expect("spawn on a pseudo-terminal");
    let run = Run {
        pty,
        seen: String::new(),
        ws: d.path().join("ws"),
    };
    let (code, _) = run.finish();
    let err = std::fs::read_to_string(&err_file).unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(
            "error: --approve risky asks on the terminal, but stderr is not a terminal\nhint: "
        ),
        "{err}"
    );
    assert!(!d.path().join("runs").exists());
}

/// Ctrl-C while the question waits interrupts the run at once (the read
/// of the terminal nobody can cancel does not hold the exit), as anywhere.
#[test]
fn ctrl_c_at_the_question_interrupts() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch c.txt"}}]}]"#,
        "always",
    );
    run.wait_for(CHOICES);
    run.pty.send(ControlCode::EndOfText).unwrap();
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 130, "{seen}");
    assert!(!ws.join("c.txt").exists());
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "interrupted");
    // Nobody answered: no decision is recorded.
    assert!(approvals(&traj).is_empty());
}

/// In a conversation the question and the conversation's prompt share the
/// terminal: each line goes where it was asked for.
#[test]
fn a_conversation_asks_too() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start_with(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"touch turn.txt"}}]},
            {"expect":"[exit code: 0]","text":"first done"},
            {"tool_calls":[{"name":"bash","input":{"command":"touch declined.txt"}}]},
            {"expect":"declined","text":"second done"}]"#,
        "always",
        None,
    );
    run.wait_for("> ");
    run.pty.send_line("first").unwrap();
    run.answer("y");
    run.wait_for("first done");
    run.wait_for("> ");
    run.pty.send_line("second").unwrap();
    run.answer("n");
    run.wait_for("second done");
    run.wait_for("> ");
    run.pty.send_line("q").unwrap();
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    assert!(ws.join("turn.txt").exists() && !ws.join("declined.txt").exists());
    let traj = d.trajectory();
    let users: Vec<_> = of_type(&traj, "user_message")
        .iter()
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(users, ["first", "second"]);
    let answers: Vec<_> = approvals(&traj).iter().map(|e| &e["answer"]).collect();
    assert_eq!(answers, ["yes", "no"]);
    assert_eq!(outcome(&traj), "completed");
}

#[test]
fn a_continuation_asks_as_the_run_did_unless_told_otherwise() {
    let _s = shared();
    let d = Dir::new();
    let mut run = Run::start(
        &d,
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"echo one > one.txt"}}]},
            {"text":"done"}]"#,
        "always",
    );
    run.answer("y");
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    // No --approve given: the run's own `always` asks again.
    let next = r#"[{"tool_calls":[{"name":"bash","input":{"command":"echo two > two.txt"}}]},
                   {"text":"done again"}]"#;
    let mut more = Run::continue_with(&d, next, "one more file", &[]);
    more.wait_for("    echo two > two.txt");
    more.answer("n");
    let (code, seen) = more.finish();
    assert_eq!(code, 0, "{seen}");
    assert!(!d.path().join("ws/two.txt").exists());
    // --approve never given to the continuation: nothing is asked.
    let last = Run::continue_with(&d, next, "again", &["--approve", "never"]);
    let ws = last.ws.clone();
    let (code, seen) = last.finish();
    assert_eq!(code, 0, "{seen}");
    assert!(!seen.contains(CHOICES), "{seen}");
    assert!(ws.join("two.txt").exists());
    let answers: Vec<_> = approvals(&d.trajectory())
        .iter()
        .map(|e| e["answer"].clone())
        .collect();
    assert_eq!(answers, ["yes", "no"]);
}

#[test]
fn a_continuation_that_would_ask_needs_a_terminal() {
    let d = Dir::new();
    let s = d.write(
        "script.json",
        r#"[{"tool_calls":[{"name":"bash","input":{"command":"true"}}]},{"text":"done"}]"#,
    );
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let out = d
        .runner()
        .args(["--provider", "scripted", "--script"])
        .arg(&s)
        .args(["--executor", "local", "--workspace"])
        .arg(&ws)
        .arg("the task")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let events_before = d.trajectory().len();
    let out = d
        .runner()
        .arg("continue")
        .arg(d.run_dir())
        .args(["--approve", "risky", "--executor", "local", "--workspace"])
        .arg(&ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("error: --approve risky asks on the terminal, but stdin is not a terminal"),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    assert_eq!(d.trajectory().len(), events_before, "nothing appended");
}

/// Issue 21, finding 7: quoting, escapes, wrappers and a `cd` hid commands
/// from `--approve risky`. In the docker sandbox, each of these is asked
/// about with the rule the shell's reading of it matches; each is
/// declined, and none ran (the sandbox's files say so).
#[test]
fn risky_sees_through_quoting_escapes_and_cd_in_the_sandbox() {
    let _s = shared();
    let d = Dir::new();
    let asked = [
        (r#"\curl -s http://127.0.0.1:9 > curl.txt"#, "network"),
        (r#""curl" -s http://127.0.0.1:9 > curl2.txt"#, "network"),
        ("cu''rl -s http://127.0.0.1:9 > curl3.txt", "network"),
        (r"r\m -rf keep", "recursive-delete"),
        (r#""sudo" id > sudo.txt"#, "deny-list"),
        ("cd /etc && touch runner-approve-x", "outside-workspace"),
        ("env w''get http://127.0.0.1:9", "network"),
        ("sh -c 'r\"\"m -rf keep'", "recursive-delete"),
        ("X=cu; ${X}rl http://127.0.0.1:9", "dynamic"),
    ];
    let mut turns: Vec<Value> = vec![serde_json::json!(
        {"tool_calls":[{"name":"bash","input":{"command":"mkdir -p keep && echo made"}}]}
    )];
    for (cmd, _) in &asked {
        turns.push(serde_json::json!({"tool_calls":[{"name":"bash","input":{"command":cmd}}]}));
    }
    turns.push(
        serde_json::json!({"tool_calls":[{"name":"bash","input":{"command":
        "ls; test -e /etc/runner-approve-x && echo ETC-TOUCHED; true"}}]}),
    );
    turns.push(serde_json::json!({"text":"done"}));
    let mut run = Run::start_on(
        &d,
        &Value::Array(turns).to_string(),
        "risky",
        Some("the task"),
        &Exec::Docker.args(),
    );
    for (cmd, rule) in &asked {
        run.wait_for(&format!(
            "approve this command (--approve risky, rule {rule}):"
        ));
        run.wait_for(&format!("    {cmd}"));
        run.answer("n");
    }
    let ws = run.ws.clone();
    let (code, seen) = run.finish();
    assert_eq!(code, 0, "{seen}");
    assert_eq!(seen.matches(CHOICES).count(), asked.len(), "{seen}");
    assert!(ws.join("keep").is_dir(), "a declined rm ran");
    for f in ["curl.txt", "curl2.txt", "curl3.txt", "sudo.txt"] {
        assert!(!ws.join(f).exists(), "a declined command ran: {f}");
    }
    let traj = d.trajectory();
    let rules: Vec<&str> = approvals(&traj)
        .iter()
        .map(|a| a["rule"].as_str().unwrap_or(""))
        .collect();
    let want: Vec<&str> = asked.iter().map(|(_, r)| *r).collect();
    assert_eq!(rules, want);
    let out = tool_outputs(&traj);
    assert!(!out.iter().any(|o| o.contains("ETC-TOUCHED")), "{out:?}");
}
