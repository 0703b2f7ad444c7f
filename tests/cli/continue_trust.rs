//! Issue 21, finding 2: `runner continue` takes what loosens the sandbox
//! or sends the API key somewhere only from its own command line. A run
//! directory edited to say `"executor":"local"`, another `base_url`, or a
//! looser network, user, disk, workspace or root is refused before
//! anything starts (exit 2, the flag named in the hint); the same values
//! given as flags are accepted.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::binary::{Dir, Exec, Ran, read_jsonl, run, script};
use crate::support::fake_model::{FakeResponse, FakeServer};
use crate::support::serial::shared;

const KEY: &str = "sk-ant-trust-key-7f3a9c";

/// Rewrites `run_started.config` of the run's trajectory with `edit`; the
/// text before, to put back.
fn edit_record(run_dir: &Path, edit: impl Fn(&mut Value)) -> String {
    let traj = run_dir.join("trajectory.jsonl");
    let before = std::fs::read_to_string(&traj).expect("read");
    let mut lines: Vec<String> = before.lines().map(str::to_string).collect();
    let mut first: Value = serde_json::from_str(&lines[0]).expect("run_started");
    edit(&mut first["config"]);
    lines[0] = first.to_string();
    std::fs::write(&traj, lines.join("\n") + "\n").expect("write");
    before
}

/// Asserts `r` was refused before anything started: exit 2, the error and
/// the hint naming `flag`.
fn assert_refused(r: &Ran, says: &str, flag: &str) {
    r.expect_code(2);
    let err = r.stderr();
    assert!(err.contains(&format!("error: {says}")), "{}", r.explain());
    assert!(
        err.contains(&format!("hint: pass {flag}")),
        "{}",
        r.explain()
    );
    assert!(
        !err.contains("run_finished") && r.events().is_empty(),
        "something ran: {}",
        r.explain()
    );
}

/// `runner continue RUN_DIR --executor local --workspace WS`.
fn continue_locally(d: &Dir, ws: &Path, run_dir: &Path) -> Ran {
    run(d
        .runner()
        .args(["continue", "--executor", "local", "--workspace"])
        .arg(ws)
        .arg(run_dir))
}

#[test]
fn an_edited_base_url_is_refused_and_the_key_never_leaves() {
    let _s = shared();
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let ours = FakeServer::start_blocking(vec![FakeResponse::anthropic_text("done")]);
    let theirs = FakeServer::start_blocking(vec![FakeResponse::anthropic_text("thanks")]);
    let with_key = |c: &mut std::process::Command| {
        c.env("ANTHROPIC_API_KEY", KEY);
    };
    let mut first = d.runner();
    with_key(&mut first);
    first.env("ANTHROPIC_BASE_URL", ours.url()).args([
        "--executor",
        "local",
        "--workspace",
        "ws",
        "hi",
    ]);
    run(&mut first).expect_code(0);
    let run_dir = d.run_dir();
    let ws_arg = ws.display().to_string();
    let base = ["--executor", "local", "--workspace", ws_arg.as_str()];
    edit_record(&run_dir, |c| c["base_url"] = json!(theirs.url()));

    // The user's own setting (ANTHROPIC_BASE_URL), and none at all (the
    // vendor's URL): either way the recorded one is refused, not used.
    for own_url in [Some(ours.url()), None] {
        let mut c = d.runner();
        with_key(&mut c);
        if let Some(u) = &own_url {
            c.env("ANTHROPIC_BASE_URL", u);
        }
        c.arg("continue").arg(&run_dir).args(base).arg("--json");
        let r = run(&mut c);
        let shown = own_url
            .clone()
            .unwrap_or("https://api.anthropic.com".into());
        assert_refused(
            &r,
            &format!(
                "the run was started with --base-url {}; this continuation would use {shown}",
                theirs.url()
            ),
            &format!("--base-url {}", theirs.url()),
        );
    }
    assert!(
        theirs.requests().is_empty(),
        "the key went to the recorded server"
    );
    assert_eq!(ours.requests().len(), 1, "only the first run's call");

    // Given on the command line, the URL is the user's choice.
    let mut c = d.runner();
    with_key(&mut c);
    c.arg("continue")
        .arg(&run_dir)
        .args(base)
        .args(["--base-url", &theirs.url()]);
    run(&mut c).expect_code(0);
    let reqs = theirs.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].header("x-api-key"), Some(KEY));
}

#[test]
fn an_edited_workspace_is_refused_unless_given() {
    let _s = shared();
    let d = Dir::new();
    let ws = d.path().join("ws");
    let elsewhere = d.path().join("elsewhere");
    for w in [&ws, &elsewhere] {
        std::fs::create_dir_all(w).expect("mkdir");
    }
    let s = script(
        &d,
        json!([{"tool_calls": [{"name": "bash", "input": {"command": "echo hi > mark"}}]}, {"text": "done"}]),
    );
    run(d
        .scripted(&s)
        .args(["--executor", "local", "--workspace", "ws", "mark it"]))
    .expect_code(0);
    let run_dir = d.run_dir();
    std::fs::remove_file(ws.join("mark")).expect("rm");
    let far = std::fs::canonicalize(&elsewhere).expect("canon");
    edit_record(&run_dir, |c| c["workspace"] = json!(far));
    let r = run(d
        .runner()
        .args(["continue", "--executor", "local"])
        .arg(&run_dir));
    assert_refused(
        &r,
        &format!(
            "the run was started with --workspace {}; this continuation would use none",
            far.display()
        ),
        &format!("--workspace {}", far.display()),
    );
    assert!(!far.join("mark").exists() && !ws.join("mark").exists());
    // Given, it is used.
    continue_locally(&d, &ws, &run_dir).expect_code(0);
    assert!(ws.join("mark").is_file() && !far.join("mark").exists());
}

/// A setting edited to a value no runner writes (an executor that is none,
/// a network that is a number) is refused as the record is read: exit 2,
/// one line naming the key, a hint, and nothing run or written.
#[test]
fn an_edited_value_no_runner_writes_is_refused_naming_its_key() {
    let _s = shared();
    let d = Dir::new();
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).expect("mkdir");
    let s = script(&d, json!([{"text": "done"}]));
    run(d
        .scripted(&s)
        .args(["--executor", "local", "--workspace", "ws", "hi"]))
    .expect_code(0);
    let run_dir = d.run_dir();
    let traj = run_dir.join("trajectory.jsonl");
    for (key, value, says) in [
        (
            "executor",
            json!("bogus"),
            "unknown value `bogus`, expected docker, local",
        ),
        ("network", json!(5), "invalid type: integer `5`"),
    ] {
        let before = edit_record(&run_dir, |c| c[key] = value.clone());
        let r = continue_locally(&d, &ws, &run_dir);
        r.expect_code(2);
        let err = r.stderr();
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        let [line] = errors.as_slice() else {
            panic!("not one error line: {}", r.explain());
        };
        let names = format!("the recorded configuration's {key} is not one this runner reads");
        assert!(
            line.contains(&names) && line.contains(says),
            "{}",
            r.explain()
        );
        assert!(
            err.contains(
                "hint: the trajectory was changed or written by another program; start a new run"
            ),
            "{}",
            r.explain()
        );
        assert!(r.events().is_empty(), "something ran: {}", r.explain());
        let after = std::fs::read_to_string(&traj).expect("read");
        assert_eq!(after.lines().count(), before.lines().count(), "{key}");
        std::fs::write(&traj, before).expect("restore");
    }
    // As it was, it continues.
    continue_locally(&d, &ws, &run_dir).expect_code(0);
}

/// The docker cases: each needs the engine and the tiny image, and fails
/// without them.
mod docker {
    use super::*;

    /// A completed docker run of `script` on `d/ws`; its run directory.
    fn docker_run(d: &Dir, turns: Value) -> (PathBuf, PathBuf) {
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).expect("mkdir");
        let s = script(d, turns);
        run(d
            .scripted(&s)
            .args(Exec::Docker.args())
            .args(["--workspace", "ws", "go"]))
        .expect_code(0);
        (d.run_dir(), std::fs::canonicalize(&ws).expect("canon"))
    }

    /// `runner continue RUN_DIR` on docker with `extra` flags.
    fn continue_on_docker(d: &Dir, run_dir: &Path, ws: &Path, extra: &[&str]) -> Ran {
        let mut c = d.runner();
        c.arg("continue")
            .arg(run_dir)
            .args(Exec::Docker.args())
            .arg("--workspace")
            .arg(ws)
            .args(extra);
        run(&mut c)
    }

    #[test]
    fn an_executor_edited_to_local_is_refused_and_nothing_runs_on_the_host() {
        let _s = shared();
        let d = Dir::new();
        let canary_dir = tempfile::tempdir().expect("tempdir");
        let canary = canary_dir.path().join("pwned");
        // In the sandbox the host's directory is not there; on the host
        // the canary would appear.
        let cmd = format!("echo root on the host > {} || true", canary.display());
        let (run_dir, ws) = docker_run(
            &d,
            json!([{"tool_calls": [{"name": "bash", "input": {"command": cmd}}]}, {"text": "done"}]),
        );
        assert!(!canary.exists(), "the sandbox wrote the host's canary");
        edit_record(&run_dir, |c| c["executor"] = json!("local"));
        // Without --executor (so docker): refused.
        let r = run(d
            .runner()
            .arg("continue")
            .arg(&run_dir)
            .arg("--workspace")
            .arg(&ws));
        assert_refused(
            &r,
            "the run was started with --executor local; this continuation would use docker",
            "--executor local",
        );
        assert!(!canary.exists(), "a refused continuation ran on the host");
        // Given on the command line, the host is the user's choice.
        continue_locally(&d, &ws, &run_dir).expect_code(0);
        assert!(canary.is_file(), "the canary command never ran");
    }

    #[test]
    fn edited_network_user_disk_and_root_are_refused_naming_the_flag() {
        let _s = shared();
        let d = Dir::new();
        let (run_dir, ws) = docker_run(
            &d,
            json!([{"tool_calls": [{"name": "bash", "input": {"command": "id -u"}}]}, {"text": "done"}]),
        );
        let cases: [(&str, Value, &str, &str); 5] = [
            (
                "network",
                json!("bridge"),
                "the run was started with --network bridge; this continuation would use none",
                "--network bridge",
            ),
            (
                "user",
                json!("0:0"),
                "the run was started with --user 0:0; this continuation would use 1000:1000",
                "--user 0:0",
            ),
            (
                "disk_bytes",
                Value::Null,
                "the run was started with --disk unlimited; this continuation would use 10737418240",
                "--disk unlimited",
            ),
            (
                "writable_rootfs",
                json!(true),
                "the run was started with --writable-rootfs; this continuation would use a read-only root filesystem",
                "--writable-rootfs",
            ),
            (
                "allowed_hosts",
                json!(["evil.example"]),
                "the run was started with --allow-host evil.example; this continuation would use none",
                "--allow-host evil.example",
            ),
        ];
        let traj = run_dir.join("trajectory.jsonl");
        for (key, value, says, flag) in &cases {
            let before = edit_record(&run_dir, |c| c[*key] = value.clone());
            let r = continue_on_docker(&d, &run_dir, &ws, &["--json"]);
            assert_refused(&r, says, flag);
            assert_eq!(
                std::fs::read_to_string(&traj)
                    .expect("read")
                    .lines()
                    .count(),
                before.lines().count(),
                "{key}: a refused continuation wrote to the trajectory"
            );
            std::fs::write(&traj, before).expect("restore");
        }
        // All of them given on the command line: accepted, and applied.
        edit_record(&run_dir, |c| {
            c["network"] = json!("bridge");
            c["user"] = json!("0:0");
            c["disk_bytes"] = Value::Null;
            c["writable_rootfs"] = json!(true);
        });
        let r = continue_on_docker(
            &d,
            &run_dir,
            &ws,
            &[
                "--network",
                "bridge",
                "--user",
                "0:0",
                "--disk",
                "unlimited",
                "--writable-rootfs",
                "--json",
            ],
        );
        // Past the check: the continuation is recorded with them (whether
        // the engine then has a working bridge is this machine's matter).
        assert!(
            !r.stderr().contains("the run was started with"),
            "{}",
            r.explain()
        );
        let events = read_jsonl(&traj);
        let cont = events
            .iter()
            .find(|e| e["type"] == "continuation")
            .expect("a continuation");
        let c = &cont["config"];
        assert_eq!(
            (
                &c["network"],
                &c["user"],
                &c["disk_bytes"],
                &c["writable_rootfs"]
            ),
            (&json!("bridge"), &json!("0:0"), &Value::Null, &json!(true)),
            "{}",
            r.explain()
        );
    }
}
