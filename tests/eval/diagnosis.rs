//! What a user needs to find the cause: the failures section after the
//! table, a failed image build's whole log, and the JSON report on stdout
//! when asked for (`--json -`), with nothing else there.

use crate::support::binary::{Dir, run};
use crate::support::docker::TINY;
use crate::support::eval::{prelude, task, toml};

#[test]
fn failures_are_listed_whole_with_their_logs_and_json_goes_to_stdout_only_when_asked() {
    let _g = prelude();
    let d = Dir::new();
    let suite = d.path().join("suite");
    // A build that fails, with output the short error does not show.
    task(
        &suite,
        "badbuild",
        &[
            ("instruction.md", "nothing\n"),
            ("task.toml", "[agent]\ntimeout_sec = 30\n"),
            (
                "environment/Dockerfile",
                &format!("FROM {TINY}\nRUN echo step-output-only-in-the-log && exit 3\n"),
            ),
            ("tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n"),
        ],
    );
    // A plain fail whose reason is in the verifier's log.
    task(
        &suite,
        "plainfail",
        &[
            ("instruction.md", "write ok to out.txt\n"),
            ("task.toml", &toml(TINY, 30, 30)),
            (
                "tests/test.sh",
                "echo 'expected ok in out.txt, found nothing'\necho 0 > /logs/verifier/reward.txt\n",
            ),
        ],
    );
    let mut cmd = d.runner();
    cmd.args([
        "eval",
        "suite",
        "--agent",
        "nop",
        "--output-dir",
        "out",
        "--json",
        "-",
    ])
    .args(crate::support::docker::runtime_args());
    let ran = run(&mut cmd);
    ran.expect_code(2);
    let report: serde_json::Value = serde_json::from_str(&ran.stdout())
        .unwrap_or_else(|e| panic!("stdout is the JSON report alone: {e}{}", ran.explain()));
    assert_eq!(report["totals"]["attempts"], 2);
    let err = ran.stderr();
    let section = err
        .split("\nfailures:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("a failures section: {}", ran.explain()));
    let log = d.path().join("out/badbuild/image-build.log");
    assert!(
        section.contains(&format!("whole build log: {}", log.display())),
        "{section}"
    );
    assert!(section.contains("returned a non-zero code: 3"), "{section}");
    let text = std::fs::read_to_string(&log).expect("the build log is kept");
    assert!(text.contains("step-output-only-in-the-log"), "{text}");
    let verifier_log = d.path().join("out/plainfail/1/verifier.log");
    assert!(section.contains("plainfail#1 fail"), "{section}");
    assert!(
        section.contains(&format!("log: {}", verifier_log.display())),
        "{section}"
    );
}

#[test]
fn a_long_attempt_shows_a_status_line_in_a_log_every_ten_seconds() {
    let _g = prelude();
    let d = Dir::new();
    task(
        &d.path().join("suite"),
        "slow",
        &[
            ("instruction.md", "write ok to out.txt\n"),
            ("task.toml", &toml(TINY, 60, 30)),
            (
                "tests/test.sh",
                "if grep -qx ok /workspace/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
            ),
            ("solution/solve.sh", "sleep 13\necho ok > out.txt\n"),
        ],
    );
    let mut cmd = d.runner();
    cmd.args(["eval", "suite", "--agent", "oracle", "--output-dir", "out"])
        .args(crate::support::docker::runtime_args());
    let ran = run(&mut cmd);
    ran.expect_code(0);
    // stderr is a pipe here, as in CI: no bar, a status line instead.
    let err = ran.stderr();
    let beats: Vec<&str> = err.lines().filter(|l| l.starts_with("eval: ")).collect();
    assert!(!beats.is_empty(), "{}", ran.explain());
    assert!(
        beats[0].starts_with("eval: 0/1 done; running: slow#1 solution; "),
        "{beats:?}"
    );
    assert!(ran.stdout().is_empty(), "{}", ran.explain());
}
