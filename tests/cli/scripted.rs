//! The binary driven as a user drives it, with the scripted model: the
//! loop, limits, error results, files written, exit codes.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::binary::{
    Dir, Exec, Ran, bash, of_type, outcome, process_alive, run, run_id_of, script, sigint,
    some_trajectory_has, wait_within, walk,
};
use crate::support::docker::{containers_of_run, sandbox_process_alive};
use crate::support::serial::shared;

/// Generates one test per executor for each loop test: `local::NAME` and
/// `docker::NAME` (docker with the tiny image), so the loop's contract is
/// checked on both without duplicating the tests. They run beside each
/// other, never beside the binary's heavy docker tests (see main.rs).
macro_rules! on_both_executors {
    ($($name:ident),* $(,)?) => {
        mod local {
            $( #[test] fn $name() {
                let _s = super::shared();
                super::$name(super::Exec::Local)
            } )*
        }
        mod docker {
            $( #[test] fn $name() {
                let _s = super::shared();
                super::$name(super::Exec::Docker)
            } )*
        }
    };
}

on_both_executors!(
    multi_step_loop_completes_and_writes_a_trajectory,
    malformed_input_and_unknown_tool_become_error_results,
    step_limit_ends_with_its_outcome_and_exit_1,
    cost_limit_uses_usage_and_the_price_override,
    time_limit_ends_the_run,
    refusal_ends_with_refused,
    a_call_cut_off_by_max_tokens_is_never_run,
    policy_blocks_before_the_executor,
    secrets_and_canaries_never_reach_commands_or_files,
    task_dash_reads_stdin,
    ctrl_c_kills_the_command_writes_the_trajectory_and_exits_130,
    persistent_shell_keeps_cd_and_export_across_a_timeout_and_stdin_waits,
);

fn multi_step_loop_completes_and_writes_a_trajectory(ex: Exec) {
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let s = script(
        &d,
        json!([
            {"text": "step one", "tool_calls": [bash("echo hello > out.txt")]},
            {"tool_calls": [bash("cat out.txt; echo err >&2; exit 3")], "expect": "[exit code: 0]"},
            {"text": "all done", "expect": "hello"}
        ]),
    );
    let r = run(d
        .runner()
        .args(ex.args())
        .args(["--provider", "scripted", "--script", &s, "--json"])
        .arg("--workspace")
        .arg(&ws)
        .arg("write hello"));
    r.expect_code(0);
    let events = r.events();
    assert_eq!(outcome(&events), "completed");
    let results = of_type(&events, "tool_result");
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["exit_code"], 3);
    assert_eq!(results[1]["timed_out"], false);
    assert!(
        results[1]["output"]
            .as_str()
            .is_some_and(|o| o.contains("hello") && o.contains("err"))
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("out.txt")).ok().as_deref(),
        Some("hello\n")
    );
    // The trajectory on disk holds the same run, ending in run_finished.
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "completed");
    assert_eq!(of_type(&traj, "run_started").len(), 1);
    assert_eq!(of_type(&traj, "tool_result").len(), 2);
    // Human text goes to stderr, never stdout.
    assert!(
        r.stderr().contains("$ echo hello > out.txt"),
        "{}",
        r.explain()
    );
}

fn malformed_input_and_unknown_tool_become_error_results(ex: Exec) {
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [
                {"name": "bash", "raw_input": "{\"command\": \"ls"},
                {"name": "python", "input": {"code": "1"}},
                {"name": "bash", "input": {"cmd": "ls"}},
                {"name": "bash", "input": {"command": 42}},
                {"name": "bash", "input": {"command": "echo ok"}}
            ]},
            {"text": "done", "expect": "unknown tool 'python'"}
        ]),
    );
    let r = run(d.scripted(&s).args(ex.args()).args(["go"]));
    r.expect_code(0);
    let events = r.events();
    let results = of_type(&events, "tool_result");
    assert_eq!(results.len(), 5, "every call gets exactly one result");
    let errors: Vec<bool> = results.iter().map(|e| e["is_error"] == true).collect();
    assert_eq!(errors, [true, true, true, true, false]);
    assert!(
        results[0]["output"]
            .as_str()
            .is_some_and(|o| o.contains("not valid JSON"))
    );
    assert!(
        results[2]["output"]
            .as_str()
            .is_some_and(|o| o.contains("missing required field 'command'"))
    );
    assert!(
        results[3]["output"]
            .as_str()
            .is_some_and(|o| o.contains("must be a string"))
    );
}

fn step_limit_ends_with_its_outcome_and_exit_1(ex: Exec) {
    let d = Dir::new();
    let turns: Vec<_> = (0..5)
        .map(|_| json!({"tool_calls": [bash("true")]}))
        .collect();
    let s = script(&d, json!(turns));
    let r = run(d
        .scripted(&s)
        .args(ex.args())
        .args(["--max-steps", "2", "loop"]));
    r.expect_code(1);
    let events = r.events();
    assert_eq!(outcome(&events), "step_limit");
    assert_eq!(of_type(&events, "model_request").len(), 2);
}

fn cost_limit_uses_usage_and_the_price_override(ex: Exec) {
    let d = Dir::new();
    let usage = json!({"input_tokens": 1_000_000, "output_tokens": 0});
    let turns: Vec<_> = (0..5)
        .map(|_| json!({"tool_calls": [bash("true")], "usage": usage}))
        .collect();
    let s = script(&d, json!(turns));
    let r =
        run(d
            .scripted(&s)
            .args(ex.args())
            .args(["--price", "1,1", "--max-cost", "2.5", "spend"]));
    r.expect_code(1);
    let events = r.events();
    assert_eq!(outcome(&events), "cost_limit");
    let last = events.last().expect("events");
    assert!(
        (last["cost_usd"].as_f64().unwrap_or(0.0) - 3.0).abs() < 1e-9,
        "{last}"
    );
}

fn time_limit_ends_the_run(ex: Exec) {
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"tool_calls": [bash("sleep 2")]}, {"tool_calls": [bash("true")]}]),
    );
    let r = run(d
        .scripted(&s)
        .args(ex.args())
        .args(["--max-time", "1", "slow"]));
    r.expect_code(1);
    assert_eq!(outcome(&r.events()), "time_limit");
}

fn refusal_ends_with_refused(ex: Exec) {
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"text": "I can't help with that.", "stop_reason": "refusal"}]),
    );
    let r = run(d.scripted(&s).args(ex.args()).args(["bad idea"]));
    r.expect_code(1);
    assert_eq!(outcome(&r.events()), "refused");
}

fn a_call_cut_off_by_max_tokens_is_never_run(ex: Exec) {
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [{"name": "bash", "raw_input": "{\"command\": \"touch cut"}], "stop_reason": "max_tokens"},
            {"text": "ok", "expect": "cut off by the max_tokens limit"}
        ]),
    );
    let r = run(d
        .scripted(&s)
        .args(ex.args())
        .args(["--workspace", ".", "go"]));
    r.expect_code(0);
    assert!(!d.path().join("cut").exists());
}

#[test]
fn unknown_stop_reason_is_handled() {
    let _s = shared();
    let d = Dir::new();
    let s = script(&d, json!([{"text": "hm", "stop_reason": "something_new"}]));
    let r = run(d.scripted(&s).args(["--executor", "local", "go"]));
    r.expect_code(0);
}

fn policy_blocks_before_the_executor(ex: Exec) {
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"tool_calls": [bash("sudo touch /tmp/x")]}, {"text": "ok", "expect": "blocked by policy"}]),
    );
    let r = run(d.scripted(&s).args(ex.args()).args(["go"]));
    r.expect_code(0);
}

fn secrets_and_canaries_never_reach_commands_or_files(ex: Exec) {
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("env; cat /proc/self/environ | tr '\\0' '\\n'; echo \"$RUNNER_CANARY\"")]},
            {"text": "done"}
        ]),
    );
    let canary = "canary-7f3a9c2e51";
    let key = "sk-ant-test-key-0123456789";
    let env_token = "envtoken-5d1c9a77e0";
    let r = run(d
        .runner()
        .env("RUNNER_CANARY", canary)
        .env("ANTHROPIC_API_KEY", key)
        .env("OPENAI_API_KEY", key)
        .args(ex.args())
        .args([
            "--provider",
            "scripted",
            "--script",
            &s,
            "--json",
            "--env",
            "VISIBLE=yes",
            "--env",
            &format!("DEPLOY_TOKEN={env_token}"),
            "go",
        ]));
    r.expect_code(0);
    let out = r.stdout();
    assert!(
        out.contains("VISIBLE=yes"),
        "--env reaches commands{}",
        r.explain()
    );
    // The --env token reached the command (it printed it) but is redacted
    // in everything runner writes or shows.
    assert!(out.contains("DEPLOY_TOKEN=[REDACTED]"), "{}", r.explain());
    for secret in [canary, key, env_token] {
        assert!(!out.contains(secret), "{secret} leaked to stdout");
        assert!(!r.stderr().contains(secret), "{secret} leaked to stderr");
        let files = walk(&d.run_dir());
        assert!(
            files.iter().any(|f| f.ends_with("trajectory.jsonl")),
            "the scan covers the run directory: {files:?}"
        );
        for entry in files {
            let text = std::fs::read(&entry).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&text).contains(secret),
                "{secret} found in {entry:?}"
            );
        }
    }
}

#[test]
fn usage_errors_exit_2_with_one_line_and_a_hint() {
    let _s = shared();
    let d = Dir::new();
    let s = script(&d, json!([]));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--provider", "scripted", "--executor", "local", "x"],
            "--script",
        ),
        (
            vec![
                "--provider",
                "scripted",
                "--script",
                "missing.json",
                "--executor",
                "local",
                "x",
            ],
            "missing.json",
        ),
        (
            vec![
                "--provider",
                "scripted",
                "--script",
                &s,
                "--env",
                "NOEQUALS",
                "x",
            ],
            "K=V",
        ),
        (
            vec![
                "--provider",
                "scripted",
                "--script",
                &s,
                "--memory",
                "lots",
                "x",
            ],
            "--memory",
        ),
        (
            vec!["--provider", "scripted", "--script", &s, "--deny", "(", "x"],
            "--deny",
        ),
        (
            vec![
                "--provider",
                "scripted",
                "--script",
                &s,
                "--executor",
                "local",
            ],
            "no task",
        ),
        (
            vec!["--provider", "anthropic", "--executor", "local", "x"],
            "ANTHROPIC_API_KEY",
        ),
    ];
    for (args, needle) in cases {
        let r = run(d.runner().args(&args));
        r.expect_code(2);
        let err = r.stderr();
        assert!(err.starts_with("error: "), "{}", r.explain());
        assert!(err.contains(needle), "expected {needle:?}{}", r.explain());
    }
    std::fs::write(d.path().join("bad.json"), "{not json").expect("write");
    let r = run(d
        .runner()
        .args(["--provider", "scripted", "--script", "bad.json", "x"]));
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("bad.json: not valid JSON (line 1, column 2)"),
        "{}",
        r.explain()
    );
    // Valid JSON, wrong shape: the message says what a script is, the hint
    // where its format is documented.
    std::fs::write(
        d.path().join("shape.json"),
        r#"{"steps": [{"text": "hi"}]}"#,
    )
    .expect("write");
    let r = run(d
        .runner()
        .args(["--provider", "scripted", "--script", "shape.json", "x"]));
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.starts_with(
            "error: script: shape.json: not a script: a script is {\"turns\": [TURN, ...]} or [TURN, ...], and this is an object without \"turns\"\n"
        ),
        "{}",
        r.explain()
    );
    assert!(
        err.contains("\nhint: each TURN is an object") && err.contains("src/model/scripted.rs"),
        "{}",
        r.explain()
    );
    assert!(!err.contains("untagged"), "{}", r.explain());
}

fn task_dash_reads_stdin(ex: Exec) {
    let d = Dir::new();
    let s = script(&d, json!([{"text": "ok"}]));
    let mut cmd = d.runner();
    cmd.args(ex.args())
        .args(["--provider", "scripted", "--script", &s, "--json", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin
            .write_all(b"the task from stdin")
            .expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("the task from stdin"), "{stdout}");
}

#[test]
fn precedence_is_flag_then_env_then_dotenv() {
    let _s = shared();
    let d = Dir::new();
    let turns: Vec<_> = (0..6)
        .map(|_| json!({"tool_calls": [bash("true")]}))
        .collect();
    let s = script(&d, json!(turns));
    d.write(".env", &format!("RUNNER_PROVIDER=scripted\nRUNNER_SCRIPT={s}\nRUNNER_EXECUTOR=local\nRUNNER_MAX_STEPS=1\n"));
    let steps = |r: &Ran| of_type(&r.events(), "model_request").len();
    let r = run(d.runner().args(["--json", "x"]));
    r.expect_code(1);
    assert_eq!(steps(&r), 1, ".env applies");
    let r = run(d
        .runner()
        .env("RUNNER_MAX_STEPS", "2")
        .args(["--json", "x"]));
    assert_eq!(steps(&r), 2, "environment beats .env");
    let r = run(d
        .runner()
        .env("RUNNER_MAX_STEPS", "2")
        .args(["--json", "--max-steps", "3", "x"]));
    assert_eq!(steps(&r), 3, "flag beats environment");
}

fn ctrl_c_kills_the_command_writes_the_trajectory_and_exits_130(ex: Exec) {
    let d = Dir::new();
    // One marker per executor: both variants may run at the same time.
    let marker = match ex {
        Exec::Local => "sleep 987.654",
        Exec::Docker => "sleep 987.655",
    };
    let s = script(
        &d,
        json!([{"tool_calls": [bash(&format!("{marker} & {marker}"))]}, {"text": "never"}]),
    );
    let child = d
        .runner()
        .args(ex.args())
        .args(["--provider", "scripted", "--script", &s, "--json", "go"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Seen from the host, or from inside the sandbox (gVisor's processes
    // are not the host's).
    let owner = child.id();
    let alive =
        || process_alive(marker) || (ex == Exec::Docker && sandbox_process_alive(owner, marker));
    let start = Instant::now();
    while !alive() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(alive(), "the command started");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32")),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("send SIGINT");
    let signalled = Instant::now();
    let out = child.wait_with_output().expect("wait");
    eprintln!("{ex:?}: SIGINT to runner exit {:?}", signalled.elapsed());
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(8));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!alive(), "the command's processes are gone");
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "interrupted");
    assert_eq!(of_type(&traj, "tool_result").len(), 1);
    if ex == Exec::Docker {
        let run_id = run_id_of(&traj);
        let left = containers_of_run(&run_id);
        assert!(left.is_empty(), "containers left after Ctrl-C: {left:?}");
    }
}

/// Ctrl-C while the model is thinking (not while a command runs) stops the
/// model call at once: exit 130, trajectory ends `interrupted`.
#[test]
fn ctrl_c_during_a_model_call_exits_130_promptly() {
    let _s = shared();
    let d = Dir::new();
    let mut child = spawn_thinking(&d);
    let start = Instant::now();
    // Wait until the model request is in the trajectory, then interrupt.
    let requested = || some_trajectory_has(d.path(), "model_request");
    while !requested() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(requested(), "the model call started");
    sigint(child.id());
    let status = wait_within(&mut child, Duration::from_secs(5))
        .expect("runner still waiting on the model 5 s after Ctrl-C");
    assert_eq!(status.code(), Some(130));
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "interrupted");
    assert!(of_type(&traj, "model_reply").is_empty());
}

/// Ctrl-C at any moment after start, even before runner has read its
/// flags, ends the run as interrupted with a complete trajectory (the
/// handlers are installed before `main`, from `.init_array`): exit 130,
/// `run_started` first, `run_finished` last.
///
/// Before runner's first instruction the dynamic loader runs, and no
/// program can catch a signal there. So a try is redone when, just before
/// the kill, /proc/PID/status showed neither the handler (`SigCgt`) nor a
/// second thread (runner's runtime) and the signal then killed it: it
/// landed in the loader (about 1-2 ms for the debug binary, more under load) is redone,
/// up to 5 times per round. The round-1 code installed its handler after reading
/// its flags and building the model, well inside 10 ms, and failed here.
#[test]
fn ctrl_c_at_any_moment_after_start_exits_130_with_a_complete_trajectory() {
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for delay_ms in [1u64, 10, 100] {
        let (mut handled, mut in_loader) = (0, 0);
        for _ in 0..6 {
            for _try in 0..5 {
                match ctrl_c_after(delay_ms) {
                    Try::InLoader => in_loader += 1,
                    Try::Handled(r) => {
                        handled += 1;
                        if let Err(e) = r {
                            failures.push(format!("{delay_ms} ms: {e}"));
                        }
                        break;
                    }
                }
            }
        }
        report.push(format!(
            "{delay_ms} ms: {handled} handled, {in_loader} landed in the loader"
        ));
        // Past the loader, every signal must be caught; at 10 ms and more
        // runner is always past it.
        if delay_ms >= 10 && handled < 6 {
            failures.push(format!(
                "{delay_ms} ms: only {handled} of 6 rounds got past the loader"
            ));
        }
    }
    eprintln!("{report:#?}");
    assert!(failures.is_empty(), "{failures:#?}\n{report:#?}");
}

enum Try {
    /// The signal came before runner had any code running.
    InLoader,
    Handled(Result<(), String>),
}

/// Whether `pid` catches SIGINT now (bit 1 of `SigCgt`), and whether it
/// has more than one thread (runner's own code is then running: the
/// loader never starts threads).
fn sigint_state(pid: u32) -> (bool, bool) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
            .to_string()
    };
    let caught = u64::from_str_radix(&field("SigCgt:"), 16)
        .is_ok_and(|mask| mask & (1 << (nix::sys::signal::Signal::SIGINT as u32 - 1)) != 0);
    let threaded = field("Threads:").parse::<u32>().is_ok_and(|n| n > 1);
    (caught, threaded)
}

/// A local run in `d` whose model thinks for a minute before answering.
fn spawn_thinking(d: &Dir) -> std::process::Child {
    let s = script(
        d,
        json!([{"text": "slow thought", "delay_ms": 60_000}, {"text": "never"}]),
    );
    let mut cmd = d.scripted(&s);
    cmd.args(["--executor", "local", "think"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // A test harness started in the background of a script (`make test &`)
    // inherits SIGINT ignored, and so would runner until its handler is in:
    // a Ctrl-C landing in the loader would then be dropped, neither fatal
    // nor caught. What is tested is runner's own start, so it starts with
    // the default action, as a job in a terminal does.
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only sigaction runs, which is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGINT,
                nix::sys::signal::SigHandler::SigDfl,
            )
            .map(|_| ())
            .map_err(std::io::Error::from)
        });
    }
    cmd.spawn().expect("spawn")
}

fn ctrl_c_after(delay_ms: u64) -> Try {
    let d = Dir::new();
    let mut child = spawn_thinking(&d);
    std::thread::sleep(Duration::from_millis(delay_ms));
    let (caught, threaded) = sigint_state(child.id());
    sigint(child.id());
    let status = wait_within(&mut child, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("runner still running 10 s after Ctrl-C at {delay_ms} ms"));
    use std::os::unix::process::ExitStatusExt;
    if !caught && !threaded && status.signal() == Some(nix::sys::signal::Signal::SIGINT as i32) {
        return Try::InLoader;
    }
    // No run directory at all is a failure to report, not a panic.
    let traj = std::panic::catch_unwind(|| d.trajectory()).unwrap_or_default();
    let types: Vec<String> = traj
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect();
    let complete = types.first().map(String::as_str) == Some("run_started")
        && types.last().map(String::as_str) == Some("run_finished")
        && traj.last().is_some_and(|e| e["outcome"] == "interrupted");
    Try::Handled(if status.code() == Some(130) && complete {
        Ok(())
    } else {
        Err(format!(
            "exit {status:?} (handler in place: {caught}), events {types:?}"
        ))
    })
}

/// Ctrl-C while runner waits for the task on stdin (`-`) ends it at once
/// with 130: the blocking read must not hold the exit.
#[test]
fn ctrl_c_while_reading_the_task_from_stdin_exits_130() {
    let _s = shared();
    let d = Dir::new();
    let s = script(&d, json!([{"text": "never"}]));
    let mut child = d
        .scripted(&s)
        .args(["--executor", "local", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Keep stdin open and silent; give runner time to start reading.
    let _stdin = child.stdin.take();
    std::thread::sleep(Duration::from_millis(300));
    sigint(child.id());
    let status = wait_within(&mut child, Duration::from_secs(5))
        .expect("runner still waiting on stdin 5 s after Ctrl-C");
    assert_eq!(status.code(), Some(130));
}

/// `--shell persistent`: `cd` and `export` carry over; a hung command is
/// killed at its timeout and the session survives with the state from
/// before it; commands waiting on stdin get EOF; restart starts over.
fn persistent_shell_keeps_cd_and_export_across_a_timeout_and_stdin_waits(ex: Exec) {
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    let timed =
        |cmd: &str, secs: u64| json!({"name": "bash", "input": {"command": cmd, "timeout": secs}});
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("mkdir -p sub && cd sub")]},
            {"tool_calls": [bash("export X=1")]},
            {"tool_calls": [timed("cd /; export X=2; sleep 100", 1)]},
            {"tool_calls": [timed("cat; if command -v python3 >/dev/null; then python3 -c 'input()' 2>/dev/null; echo py=$?; fi; read -r l; echo read=$?", 20)],
             "expect": "[timed out after 1s"},
            {"tool_calls": [bash("pwd; echo \"X=$X\"")], "expect": "read=1"},
            {"tool_calls": [{"name": "bash", "input": {"restart": true}}], "expect": "/sub\nX=1"},
            {"tool_calls": [bash("pwd; echo \"X=${X-unset}\"")], "expect": "tool has been restarted."},
            {"text": "done", "expect": "X=unset"}
        ]),
    );
    let r = run(d
        .scripted(&s)
        .args(ex.args())
        .args(["--shell", "persistent", "--workspace"])
        .arg(&ws)
        .arg("go"));
    r.expect_code(0);
    let events = r.events();
    assert_eq!(outcome(&events), "completed", "{}", r.explain());
    let results = of_type(&events, "tool_result");
    assert_eq!(results.len(), 7, "{}", r.explain());
    assert_eq!(results[2]["timed_out"], true);
    let out = |i: usize| {
        results[i]["output"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(!out(3).contains("py=0"), "{}", out(3));
    assert!(out(4).ends_with("/sub\nX=1\n[exit code: 0]"), "{}", out(4));
    let start = out(6);
    assert!(start.ends_with("\nX=unset\n[exit code: 0]"), "{start}");
    assert!(!start.contains("/sub"), "{start}");
    let traj = d.trajectory();
    let started = of_type(&traj, "run_started");
    assert_eq!(started[0]["config"]["shell"], "persistent");
}

#[test]
fn bad_allow_hosts_are_usage_errors_with_a_hint() {
    let _s = shared();
    let d = Dir::new();
    let s = script(&d, json!([]));
    for (extra, needle, hint) in [
        (
            vec!["--allow-host", "https://pypi.org"],
            "is a URL",
            "hint: give a DNS name",
        ),
        (
            vec!["--allow-host", "pypi.org:443"],
            "has a port",
            "every port of an allowed name",
        ),
        (
            vec!["--allow-host", "10.1.2.3"],
            "is an IP address",
            "IP literals",
        ),
        (
            vec!["--allow-host", ""],
            "is empty",
            "hint: give a DNS name",
        ),
        (
            vec!["--allow-host", "a b.org"],
            "not a DNS name",
            "hint: give a DNS name",
        ),
        (
            vec!["--allow-host", "pypi.org", "--network", "bridge"],
            "exclude each other",
            "drop --network bridge",
        ),
        (
            vec!["--egress-network", "mynet"],
            "without --allow-host",
            "--allow-host NAME",
        ),
        (
            vec!["--allow-host", "pypi.org", "--egress-network", "host"],
            "not the name of an engine network",
            "docker network ls",
        ),
    ] {
        let r = run(d
            .runner()
            .args(["--provider", "scripted", "--script", &s])
            .args(&extra)
            .arg("x"));
        r.expect_code(2);
        let err = r.stderr();
        assert!(err.starts_with("error: "), "{}", r.explain());
        assert!(err.contains(needle), "expected {needle:?}{}", r.explain());
        assert!(err.contains(hint), "expected {hint:?}{}", r.explain());
    }
    // The local executor cannot hold a sandbox to a list of names.
    let r = run(d.runner().args([
        "--provider",
        "scripted",
        "--script",
        &s,
        "--executor",
        "local",
        "--allow-host",
        "pypi.org",
        "x",
    ]));
    assert_ne!(r.code(), 0, "{}", r.explain());
    assert!(
        r.stderr()
            .contains("cannot limit a sandbox's network to allowed hosts")
            && r.stderr().contains("hint: use --executor docker"),
        "{}",
        r.explain()
    );
}
