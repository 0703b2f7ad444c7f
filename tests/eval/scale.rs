//! A suite at scale: killed with SIGKILL and resumed, an infrastructure
//! error retried, and the suite's budget running out.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::binary::{Dir, Ran, bash, run};
use crate::support::docker::TINY;
use crate::support::eval::{assert_clean, prelude, run_with_pid, statuses, task, toml};

/// test.sh of the fixtures: reward 1 when the agent wrote `ok`.
const REWARD_OK: &str =
    "if grep -qx ok /workspace/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

/// `runner eval ARGS` in `d` with the JSON report at `report.json`.
fn eval_in(d: &Dir, args: &[&str]) -> Command {
    let mut c = d.runner();
    c.arg("eval")
        .args(args)
        .args(["--json", "report.json", "--junit", "junit.xml"]);
    c.args(crate::support::docker::runtime_args());
    c
}

fn report_of(d: &Dir, ran: &Ran) -> Value {
    let text = std::fs::read_to_string(d.path().join("report.json"))
        .unwrap_or_else(|e| panic!("report.json: {e}{}", ran.explain()));
    serde_json::from_str(&text).expect("report.json parses")
}

/// What must be equal between two runs of one suite: each attempt's
/// verdict and the totals that follow from them.
fn verdicts(r: &Value) -> (Vec<(String, String, Option<f64>)>, Value) {
    let mut st = statuses(r);
    st.sort_by(|a, b| a.0.cmp(&b.0));
    let t = &r["totals"];
    let totals = json!({
        "tasks": t["tasks"], "attempts": t["attempts"], "passed": t["passed"],
        "failed": t["failed"], "errors": t["errors"], "pass_rate": t["pass_rate"],
        "pass_at_k": t["pass_at_k"],
    });
    (st, totals)
}

/// Six tasks whose solutions take `secs` seconds; the last two write the
/// wrong answer.
fn six(root: &Path, secs: u32) {
    for i in 0..6 {
        let answer = if i < 4 { "ok" } else { "wrong" };
        task(
            root,
            &format!("t{i}"),
            &[
                ("instruction.md", "write ok to out.txt\n"),
                ("task.toml", &toml(TINY, 60, 30)),
                ("tests/test.sh", REWARD_OK),
                (
                    "solution/solve.sh",
                    &format!("sleep {secs}\necho {answer} > out.txt\n"),
                ),
            ],
        );
    }
}

fn records(dir: &Path) -> usize {
    (0..6)
        .filter(|i| dir.join(format!("t{i}/1/attempt.json")).exists())
        .count()
}

#[test]
fn a_suite_killed_with_sigkill_resumes_alone_to_the_reports_of_an_uninterrupted_run() {
    let _g = prelude();
    let d = Dir::new();
    six(&d.path().join("suite"), 3);

    let (whole, pid) = run_with_pid(eval_in(
        &d,
        &[
            "suite",
            "--agent",
            "oracle",
            "-j",
            "2",
            "--output-dir",
            "runs/whole",
        ],
    ));
    whole.expect_code(1);
    assert_clean(pid, &whole.desc);
    let expected = verdicts(&report_of(&d, &whole));
    assert_eq!(expected.1["passed"], 4, "{}", whole.explain());

    // The same suite, killed once two attempts have ended and two run.
    let _ = std::fs::remove_file(d.path().join("report.json"));
    let mut cmd = eval_in(
        &d,
        &[
            "suite",
            "--agent",
            "oracle",
            "-j",
            "2",
            "--output-dir",
            "runs/cut",
        ],
    );
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn runner");
    let cut = d.path().join("runs/cut");
    let start = Instant::now();
    while records(&cut) < 2 && start.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(records(&cut) >= 2, "two attempts ended within 90 s");
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().expect("SIGKILL runner");
    let _ = child.wait();
    let done_before = records(&cut);
    assert!(
        done_before < 6,
        "killed before the end: {done_before} records"
    );
    assert!(
        !d.path().join("report.json").exists(),
        "a killed suite wrote no report"
    );

    // `--resume DIR` alone, from another directory: the task paths and
    // the flags come from DIR's suite.json; the reports are named again.
    let mut alone = d.runner();
    alone
        .current_dir(d.path().join("runs"))
        .args(["eval", "--resume", "cut"])
        .args(["--json", "../report.json", "--junit", "../junit.xml"])
        .args(crate::support::docker::runtime_args());
    let (resumed, rpid) = run_with_pid(alone);
    resumed.expect_code(1);
    assert_clean(rpid, &resumed.desc);
    let r = report_of(&d, &resumed);
    assert_eq!(verdicts(&r), expected, "{}", resumed.explain());
    assert_eq!(r["suite"]["resumed"], true);
    // What was taken from the record is said before anything runs.
    let said = resumed.stderr();
    assert!(
        said.contains("resuming: eval ") && said.contains("/suite --agent oracle"),
        "{}",
        resumed.explain()
    );
    let kept = resumed
        .stderr()
        .matches("(kept from an earlier run)")
        .count();
    assert_eq!(kept, done_before, "{}", resumed.explain());
    // The attempts the kill cut short were run again; their first tries kept.
    let again: Vec<&Value> = r["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .filter(|a| a["tries"] == 2)
        .collect();
    assert!(!again.is_empty(), "the cut attempts ran again: {r}");
    for a in &again {
        let first = &a["earlier_tries"][0];
        assert_eq!(first["status"], "interrupted", "{a}");
        let dir = Path::new(first["run_dir"].as_str().expect("run_dir"));
        assert!(dir.join("trajectory.jsonl").exists(), "{a}");
    }
    // The killed runner's sandboxes did not outlive it.
    let start = Instant::now();
    while !crate::support::eval::leftovers(child.id()).is_empty()
        && start.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_clean(child.id(), "the runner killed with SIGKILL");

    // Another suite in the same directory is refused, naming the
    // difference: with the paths, and alone.
    let refused_as_nop = |ran: Ran| {
        ran.expect_code(2);
        let err = ran.stderr();
        assert!(
            err.contains(r#"agent ("oracle" then, "nop" now)"#) && err.contains("hint:"),
            "{}",
            ran.explain()
        );
    };
    refused_as_nop(run(d
        .runner()
        .args(["eval", "--resume", "runs/cut", "--agent", "nop"])));
    refused_as_nop(run(&mut eval_in(
        &d,
        &["suite", "--agent", "nop", "--resume", "runs/cut"],
    )));
    let reused = run(&mut eval_in(
        &d,
        &["suite", "--agent", "oracle", "--output-dir", "runs/cut"],
    ));
    reused.expect_code(2);
    assert!(
        reused.stderr().contains("add --resume"),
        "{}",
        reused.explain()
    );
}

/// Removes the test's own image tag at the end, whatever happened.
struct Tag(String);

impl Drop for Tag {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["image", "rm", &self.0])
            .output();
    }
}

#[test]
fn an_infrastructure_error_is_retried_with_backoff_and_every_try_is_kept() {
    let _g = prelude();
    let d = Dir::new();
    let image = format!("runner-test-retry-{}:latest", std::process::id());
    let tag = Tag(image.clone());
    task(
        &d.path().join("suite"),
        "late-image",
        &[
            ("instruction.md", "write ok to out.txt\n"),
            ("task.toml", &toml(&image, 60, 30)),
            ("tests/test.sh", REWARD_OK),
            ("solution/solve.sh", "echo ok > out.txt\n"),
        ],
    );
    // Without retries the missing image is an error of the infrastructure.
    let plain = run(&mut eval_in(
        &d,
        &["suite", "--agent", "oracle", "--output-dir", "runs/plain"],
    ));
    plain.expect_code(2);
    let r = report_of(&d, &plain);
    assert_eq!(r["attempts"][0]["error_kind"], "infrastructure", "{r}");
    assert_eq!(r["attempts"][0]["tries"], 1);

    // With retries: the image appears after the first try failed.
    let mut cmd = eval_in(
        &d,
        &[
            "suite",
            "--agent",
            "oracle",
            "--retry-errors",
            "2",
            "--output-dir",
            "runs/retry",
        ],
    );
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn runner");
    let first = d.path().join("runs/retry/late-image/1.try1");
    let start = Instant::now();
    while !first.join("attempt.json").exists() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(first.join("attempt.json").exists(), "the first try is kept");
    let tagged = Command::new("docker")
        .args(["tag", TINY, &tag.0])
        .status()
        .expect("docker tag");
    assert!(tagged.success());
    let out = child.wait_with_output().expect("wait");
    let ran = Ran {
        out,
        desc: "runner eval --retry-errors 2".into(),
        elapsed: start.elapsed(),
    };
    ran.expect_code(0);
    assert!(
        ran.stderr()
            .contains("retrying late-image#1 in 2s (try 2 of 3)"),
        "{}",
        ran.explain()
    );
    let r = report_of(&d, &ran);
    let a = &r["attempts"][0];
    assert_eq!(
        (a["status"].as_str(), a["tries"].as_u64()),
        (Some("pass"), Some(2)),
        "{a}"
    );
    assert_eq!(a["earlier_tries"][0]["status"], "error", "{a}");
    assert!(
        a["earlier_tries"][0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains(&image),
        "{a}"
    );
    assert_eq!(r["totals"]["retries"], 1, "{r}");
    let kept: Value = serde_json::from_str(
        &std::fs::read_to_string(first.join("attempt.json")).expect("first try's record"),
    )
    .expect("parses");
    assert_eq!(kept["status"], "error");
    assert_eq!(kept["run_dir"], first.to_str().expect("utf-8"));
    let junit = std::fs::read_to_string(d.path().join("junit.xml")).expect("junit");
    assert!(junit.contains("earlier try: error"), "{junit}");
}

#[test]
fn the_suites_budget_skips_attempts_it_cannot_afford_and_a_resume_runs_them() {
    let _g = prelude();
    let d = Dir::new();
    for i in 0..4 {
        task(
            &d.path().join("suite"),
            &format!("b{i}"),
            &[
                ("instruction.md", "write ok to out.txt\n"),
                ("task.toml", &toml(TINY, 60, 30)),
                ("tests/test.sh", REWARD_OK),
            ],
        );
    }
    // Each attempt costs $1: a million input tokens at $1 per million.
    let usage = json!({"input_tokens": 1_000_000, "output_tokens": 0});
    let script = json!({"turns": [
        {"tool_calls": [bash("echo ok > out.txt")], "usage": usage},
        {"text": "done"}
    ]});
    let path = d.write("script.json", &script.to_string());
    let path = path.to_str().expect("utf-8");
    let common = [
        "suite",
        "--provider",
        "scripted",
        "--script",
        path,
        "--price",
        "1,1",
        "-j",
        "1",
    ];
    let mut first = eval_in(&d, &common);
    first.args(["--suite-max-cost", "2.5", "--output-dir", "runs/budget"]);
    let ran = run(&mut first);
    ran.expect_code(2);
    let r = report_of(&d, &ran);
    let st = statuses(&r);
    let skipped: Vec<_> = st.iter().filter(|s| s.1 == "skipped").collect();
    assert_eq!(skipped.len(), 1, "{st:?}");
    assert_eq!(r["totals"]["passed"], 3, "{r}");
    assert_eq!(r["totals"]["skipped"], 1, "{r}");
    assert!((r["totals"]["cost_usd"].as_f64().unwrap_or(0.0) - 3.0).abs() < 1e-9);
    let why = r["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .find(|a| a["status"] == "skipped")
        .and_then(|a| a["error"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains("budget (--suite-max-cost 2.5) was spent"),
        "{why}"
    );
    let junit = std::fs::read_to_string(d.path().join("junit.xml")).expect("junit");
    assert!(junit.contains("<skipped"), "{junit}");

    // A larger budget on resume runs only what was skipped.
    let mut again = eval_in(&d, &common);
    again.args(["--suite-max-cost", "10", "--resume", "runs/budget"]);
    let ran = run(&mut again);
    ran.expect_code(0);
    let r = report_of(&d, &ran);
    assert_eq!(r["totals"]["passed"], 4, "{}", ran.explain());
    assert_eq!(
        ran.stderr().matches("(kept from an earlier run)").count(),
        3,
        "{}",
        ran.explain()
    );
}
