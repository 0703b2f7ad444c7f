//! Finding 8, redaction: a credential handed to commands with `--env`
//! reaches the command but no file runner writes (trajectory, outputs,
//! verifier.log, reports), not the terminal, not the model, and not
//! `docker inspect`; redaction happens while streaming, so binary output
//! is kept byte for byte and a secret written in two pieces is still caught.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use runner::exec::docker::LABEL_RUN_ID;

use crate::support::binary::{Dir, Ran, bash, read_jsonl, run, script, walk};
use crate::support::docker::{TINY, running_containers_of_owner};
use crate::support::eval::{assert_clean, eval_cmd, prelude, report, run_with_pid, task, toml};
use crate::support::fake_model::{FakeResponse, FakeServer, anthropic_events};

/// The deploy token of these tests: long enough for any rule, and made of
/// characters no run id, path or marker contains by chance.
const TOKEN: &str = "dt-7Qx2LmZ9pV4kW3";

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// `secret` is in neither stream of `ran` nor in any file under `d` (the
/// run directories, the reports) but the test's own script. Returns the
/// files checked.
fn assert_nowhere(secret: &str, d: &Dir, ran: &Ran) -> Vec<PathBuf> {
    assert!(
        !contains(&ran.out.stdout, secret),
        "{secret} leaked to stdout{}",
        ran.explain()
    );
    assert!(
        !contains(&ran.out.stderr, secret),
        "{secret} leaked to stderr{}",
        ran.explain()
    );
    let files: Vec<PathBuf> = walk(d.path())
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "script.json"))
        .collect();
    for f in &files {
        let bytes = std::fs::read(f).unwrap_or_else(|e| panic!("read {f:?}: {e}"));
        assert!(
            !contains(&bytes, secret),
            "{secret} found in {f:?}:\n{}{}",
            String::from_utf8_lossy(&bytes),
            ran.explain()
        );
    }
    files
}

/// The outputs the model was shown, from the trajectory's tool results.
fn tool_outputs(trajectory: &Path) -> Vec<String> {
    read_jsonl(trajectory)
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["output"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The single run directory of a plain run in `d`.
fn run_dir(d: &Dir) -> PathBuf {
    d.run_dir()
}

#[test]
fn eval_keeps_env_credentials_out_of_every_file_and_the_terminal() {
    let _g = prelude();
    let d = Dir::new();
    // The verifier prints the file the agent wrote and makes it the reward,
    // so the secret reaches verifier.log and (as a bad reward) the reports.
    task(
        d.path(),
        "leak",
        &[
            ("instruction.md", "Deploy the service.\n"),
            ("task.toml", &toml(TINY, 60, 60)),
            (
                "tests/test.sh",
                "cat leak.txt; echo; cp leak.txt /logs/verifier/reward.txt\n",
            ),
        ],
    );
    let s = script(
        &d,
        json!({"turns": [
            {"tool_calls": [bash("echo \"token=$DEPLOY_TOKEN\"; printf '%s' \"$DEPLOY_TOKEN\" > leak.txt")]},
            // A model that repeats a secret it saw.
            {"text": format!("Deployed with {TOKEN}.")}
        ]}),
    );
    let (ran, pid) = run_with_pid(eval_cmd(
        &d,
        &[
            "leak",
            "--agent",
            "model",
            "--provider",
            "scripted",
            "--script",
            &s,
            "--env",
            &format!("DEPLOY_TOKEN={TOKEN}"),
            "--env",
            "DB_PASS=x7q",
        ],
    ));
    assert_clean(pid, &ran.desc);
    let files = assert_nowhere(TOKEN, &d, &ran);

    // The checks above looked where the secret would be.
    let attempt = d.path().join("runs/eval/leak/1");
    for want in [
        attempt.join("trajectory.jsonl"),
        attempt.join("verifier.log"),
        attempt.join("outputs/step-0001-call-0.txt"),
        d.path().join("report.json"),
        d.path().join("junit.xml"),
        d.path().join("summary.md"),
    ] {
        assert!(files.contains(&want), "{want:?} not among {files:?}");
    }
    // The command saw the variable; the model saw it redacted.
    let outputs = tool_outputs(&attempt.join("trajectory.jsonl"));
    assert!(
        outputs.iter().any(|o| o.contains("token=[REDACTED]")),
        "{outputs:?}{}",
        ran.explain()
    );
    let log = std::fs::read_to_string(attempt.join("verifier.log")).expect("verifier.log");
    assert!(log.contains("[REDACTED]"), "verifier.log: {log}");
    let r = report(&d, &ran);
    let err = r["attempts"][0]["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("[REDACTED]"),
        "the bad reward is reported, redacted: {}",
        r["attempts"][0]
    );
    // The short credential is named once for the whole suite.
    let warnings = ran
        .stderr()
        .lines()
        .filter(|l| l.contains("DB_PASS") && l.contains("too short"))
        .count();
    assert_eq!(warnings, 1, "{}", ran.explain());
}

/// A task's own credential (`[verifier].env`) is the suite's secret too:
/// the verifier prints it and makes it the reward, and it shows nowhere.
#[test]
fn eval_keeps_a_task_s_verifier_credentials_out_of_every_file() {
    const VTOKEN: &str = "vt-9Rk3LpQ8wN2xZ5";
    let _g = prelude();
    let d = Dir::new();
    let toml = toml(TINY, 60, 60).replace(
        "[environment]",
        &format!("[verifier.env]\nSERVICE_TOKEN = \"{VTOKEN}\"\n[environment]"),
    );
    // The task itself (which holds the secret) lives outside `d`.
    let tasks = tempfile::tempdir().expect("tempdir");
    let dir = task(
        tasks.path(),
        "vleak",
        &[
            ("instruction.md", "Nothing.\n"),
            ("task.toml", &toml),
            (
                "tests/test.sh",
                "echo \"svc=$SERVICE_TOKEN\"; printf '%s' \"$SERVICE_TOKEN\" > /logs/verifier/reward.txt\n",
            ),
        ],
    );
    let dir = dir.display().to_string();
    let (ran, pid) = run_with_pid(eval_cmd(&d, &[&dir, "--agent", "nop"]));
    assert_clean(pid, &ran.desc);
    let files = assert_nowhere(VTOKEN, &d, &ran);
    let attempt = d.path().join("runs/eval/vleak/1");
    for want in [attempt.join("verifier.log"), d.path().join("report.json")] {
        assert!(files.contains(&want), "{want:?} not among {files:?}");
    }
    let log = std::fs::read_to_string(attempt.join("verifier.log")).expect("verifier.log");
    assert!(log.contains("svc=[REDACTED]"), "the verifier saw it: {log}");
}

/// Polls for the container labelled with runner pid `pid`.
fn container_of(pid: u32, within: Duration) -> Option<String> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(id) = running_containers_of_owner(pid).into_iter().next() {
            return Some(id);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

#[test]
fn docker_run_keeps_env_credentials_out_of_files_terminal_and_docker_inspect() {
    let _g = prelude();
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("echo \"token=$DEPLOY_TOKEN home=$HOME\"; sleep 4; echo slept")]},
            {"text": "done"}
        ]),
    );
    let mut cmd = d.scripted(&s);
    // A HOME given with --env still wins over the container's own.
    cmd.args(["--image", TINY, "--env", &format!("DEPLOY_TOKEN={TOKEN}")])
        .args(["--env", "HOME=/tmp/given-home", "go"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let desc = format!("{cmd:?}");
    let started = Instant::now();
    let child = cmd.spawn().expect("spawn runner");
    let pid = child.id();
    let id = container_of(pid, Duration::from_secs(60));
    let inspect = id.as_deref().map(|id| {
        let o = Command::new("docker")
            .args(["inspect", id])
            .output()
            .expect("docker inspect");
        String::from_utf8_lossy(&o.stdout).into_owned()
    });
    let out = child.wait_with_output().expect("wait for runner");
    let ran = Ran {
        out,
        desc,
        elapsed: started.elapsed(),
    };
    let inspect = inspect.unwrap_or_else(|| panic!("no container seen{}", ran.explain()));
    ran.expect_code(0);
    assert_clean(pid, &ran.desc);

    let run_id = read_jsonl(&run_dir(&d).join("trajectory.jsonl"))[0]["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !run_id.is_empty() && inspect.contains(&format!("\"{LABEL_RUN_ID}\": \"{run_id}\"")),
        "inspected the run's own container ({run_id}): {inspect}"
    );
    assert!(
        !inspect.contains(TOKEN),
        "docker inspect shows the secret:\n{inspect}"
    );
    let outputs = tool_outputs(&run_dir(&d).join("trajectory.jsonl"));
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("token=[REDACTED] home=/tmp/given-home")),
        "the command saw the variables: {outputs:?}{}",
        ran.explain()
    );
    assert_nowhere(TOKEN, &d, &ran);
}

#[test]
fn binary_output_is_kept_exactly_and_a_secret_split_across_writes_is_redacted() {
    let _g = prelude();
    for ex in ["docker", "local"] {
        let d = Dir::new();
        let s = script(
            &d,
            json!([
                {"tool_calls": [bash("printf 'A\\xff\\xfe\\x00\\x80B'; printf '%s\\n' \"$DEPLOY_TOKEN\"")]},
                // The model's view is redacted too: `expect` fails the run
                // when the previous tool result lacks the text.
                {"expect": "B[REDACTED]",
                 "tool_calls": [bash("printf 'half=%s' \"${DEPLOY_TOKEN:0:7}\"; sleep 0.3; printf '%s\\n' \"${DEPLOY_TOKEN:7}\"")]},
                {"expect": "half=[REDACTED]", "text": "done"}
            ]),
        );
        let ran = run(d.scripted(&s).args([
            "--executor",
            ex,
            "--image",
            TINY,
            "--env",
            &format!("DEPLOY_TOKEN={TOKEN}"),
            "go",
        ]));
        let outputs = run_dir(&d).join("outputs");
        let first = std::fs::read(outputs.join("step-0001-call-0.txt"))
            .unwrap_or_else(|e| panic!("{ex}: first output: {e}{}", ran.explain()));
        assert_eq!(
            first,
            b"A\xff\xfe\x00\x80B[REDACTED]\n",
            "{ex}: the output file keeps the bytes the command wrote, secret redacted:\n{:?}",
            String::from_utf8_lossy(&first)
        );
        let second = std::fs::read(outputs.join("step-0002-call-0.txt"))
            .unwrap_or_else(|e| panic!("{ex}: second output: {e}{}", ran.explain()));
        assert_eq!(
            second,
            b"half=[REDACTED]\n",
            "{ex}: {:?}",
            String::from_utf8_lossy(&second)
        );
        ran.expect_code(0);
        assert_nowhere(TOKEN, &d, &ran);
    }
}

#[test]
fn short_credentials_are_redacted_from_four_characters_and_named_below() {
    let _g = prelude();
    let d = Dir::new();
    let s = script(
        &d,
        json!([
            {"tool_calls": [bash("echo \"tok=$API_TOKEN pass=$DB_PASS\"")]},
            {"expect": "tok=[REDACTED] pass=x7q", "text": "done"}
        ]),
    );
    let ran = run(d.scripted(&s).args([
        "--image",
        TINY,
        "--env",
        "API_TOKEN=k9Qz5",
        "--env",
        "DB_PASS=x7q",
        "go",
    ]));
    ran.expect_code(0);
    assert_nowhere("k9Qz5", &d, &ran);
    let stderr = ran.stderr();
    let warned: Vec<&str> = stderr.lines().filter(|l| l.contains("too short")).collect();
    assert_eq!(warned.len(), 1, "{}", ran.explain());
    assert!(
        warned[0].starts_with("warning:") && warned[0].contains("DB_PASS"),
        "{}",
        ran.explain()
    );
    assert!(
        stderr.lines().any(|l| l.starts_with("hint:")),
        "{}",
        ran.explain()
    );
}

#[test]
fn streamed_model_text_is_redacted_on_the_terminal_even_split_across_deltas() {
    let _g = prelude();
    let d = Dir::new();
    // A model repeating a secret; the fake server streams the text in two
    // deltas cut through the middle of the token.
    let text = format!("Deployed with {TOKEN} today.");
    let server = FakeServer::start_blocking(vec![FakeResponse::anthropic_text(&text)]);
    let ran = run(d
        .runner()
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-key-123456")
        .args(["--image", TINY, "--json"])
        .args(["--env", &format!("DEPLOY_TOKEN={TOKEN}"), "deploy"]));
    ran.expect_code(0);
    server.assert_all_served();
    let deltas: Vec<String> = anthropic_events(Some(&text), &[], "end_turn")
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str().map(str::to_string))
        .collect();
    assert!(
        deltas.len() == 2 && !deltas.iter().any(|p| p.contains(TOKEN)),
        "the token is split between deltas: {deltas:?}"
    );
    assert!(
        ran.stderr().contains("Deployed with [REDACTED] today."),
        "{}",
        ran.explain()
    );
    assert_nowhere(TOKEN, &d, &ran);
    assert_nowhere("sk-ant-fake-key-123456", &d, &ran);
}

/// An error before any run exists (a bad flag value) still keeps the
/// credentials of runner's environment off the terminal: a token pasted
/// into the wrong flag is not echoed back.
#[test]
fn an_error_before_the_run_does_not_echo_a_credential() {
    let d = Dir::new();
    let ran = run(d.runner().env("DEPLOY_TOKEN", TOKEN).args([
        "--provider",
        "scripted",
        "--script",
        "s.json",
        "--memory",
        TOKEN,
        "x",
    ]));
    ran.expect_code(2);
    assert!(
        ran.stderr().contains("--memory '[REDACTED]'"),
        "{}",
        ran.explain()
    );
    assert!(!contains(&ran.out.stderr, TOKEN), "{}", ran.explain());
}
