//! Finding 10: a `--max-command-timeout` below `--timeout` is a usage
//! error naming both values, in a run and in `runner eval`, instead of
//! being raised in silence.

use crate::support::binary::{Dir, Ran, run};
use crate::support::docker::TINY;
use crate::support::eval::{eval, task, toml};

fn check_refused(ran: &Ran) {
    let explain = ran.explain();
    ran.expect_code(2);
    let err = ran.stderr();
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("error: ")
            && l.contains("--max-command-timeout 10")
            && l.contains("--timeout 60")),
        "one line naming both values{explain}"
    );
    assert!(
        lines.contains(&"hint: raise --max-command-timeout or lower --timeout"),
        "{explain}"
    );
}

#[test]
fn a_max_command_timeout_below_the_timeout_is_a_usage_error() {
    let d = Dir::new();
    let script = d.write("script.json", r#"[{"text": "done"}]"#);
    let ran = run(d
        .scripted(script.to_str().expect("utf-8"))
        .args(["--executor", "local", "--timeout", "60"])
        .args(["--max-command-timeout", "10", "do nothing"]));
    check_refused(&ran);
    assert!(!d.path().join("runs").exists(), "no run was started");

    // Equal is fine.
    let ran = run(d
        .scripted(script.to_str().expect("utf-8"))
        .args(["--executor", "local", "--timeout", "10"])
        .args(["--max-command-timeout", "10", "do nothing"]));
    ran.expect_code(0);
}

#[test]
fn eval_refuses_a_max_command_timeout_below_the_timeout() {
    let d = Dir::new();
    let script = d.write("script.json", r#"[{"text": "done"}]"#);
    task(
        d.path(),
        "t",
        &[
            ("instruction.md", "nothing\n"),
            ("task.toml", &toml(TINY, 30, 30)),
            ("tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n"),
        ],
    );
    let ran = eval(
        &d,
        &[
            "t",
            "--provider",
            "scripted",
            "--script",
            script.to_str().expect("utf-8"),
            "--timeout",
            "60",
            "--max-command-timeout",
            "10",
        ],
    );
    check_refused(&ran);
    assert!(
        !d.path().join("report.json").exists(),
        "the suite did not start"
    );
}

/// A user's huge `--max-time` used to overflow the container's expiry
/// arithmetic (a panic in a debug build): it is a usage error now.
#[test]
fn a_huge_max_time_is_a_usage_error_not_a_panic() {
    let d = Dir::new();
    let script = d.write("script.json", r#"[{"text": "done"}]"#);
    let ran = run(d.scripted(script.to_str().expect("utf-8")).args([
        "--executor",
        "local",
        "--max-time",
        "18446744073709551615",
        "x",
    ]));
    ran.expect_code(2);
    let err = ran.stderr();
    assert!(
        err.contains("error: --max-time must be at most a week") && err.contains("hint:"),
        "{}",
        ran.explain()
    );
}
