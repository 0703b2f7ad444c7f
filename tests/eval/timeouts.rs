//! Timeouts: a hanging verifier is a fail (agent code that test.sh runs
//! can make it hang, so it may not leave the pass rate); an agent that
//! runs out of time is recorded as such and still graded.

use crate::support::binary::Dir;
use crate::support::docker::TINY;
use crate::support::eval::{assert_clean, eval_cmd, prelude, report, run_with_pid, task, toml};

#[test]
fn hanging_verifier_is_stopped_and_recorded_as_a_fail() {
    let _g = prelude();
    let d = Dir::new();
    task(
        d.path(),
        "hangs",
        &[
            ("instruction.md", "nothing\n"),
            ("task.toml", &toml(TINY, 30, 2)),
            (
                "tests/test.sh",
                "echo 1 > /logs/verifier/reward.txt; sleep 600\n",
            ),
        ],
    );
    let (ran, pid) = run_with_pid(eval_cmd(&d, &["hangs", "--agent", "nop"]));
    ran.expect_code(1);
    assert!(
        ran.elapsed.as_secs() < 60,
        "stopped at its timeout: {:?}",
        ran.elapsed
    );
    assert_clean(pid, &ran.desc);
    let r = report(&d, &ran);
    let a = &r["attempts"][0];
    assert_eq!(a["status"], "fail", "{a}");
    assert_eq!(a["pass"], false);
    assert!(
        a["reward"].is_null(),
        "no reward from a verifier that did not finish, not even the one it wrote first: {a}"
    );
    assert!(
        a["failure"]
            .as_str()
            .unwrap_or_default()
            .contains("within 2s"),
        "{a}"
    );
    assert_eq!(r["totals"]["errors"], 0);
    assert_eq!(r["totals"]["pass_rate"], 0.0);
    let xml = std::fs::read_to_string(d.path().join("junit.xml")).expect("junit.xml");
    let (_, failures, errors, _) = crate::junit::validate(&xml);
    assert_eq!(
        (failures, errors),
        (1, 0),
        "a hanging verifier is <failure>"
    );

    // --fail-on-error=false changes nothing: it is a fail, not an error.
    let d2 = Dir::new();
    std::fs::rename(d.path().join("hangs"), d2.path().join("hangs")).expect("move task");
    let (ran, pid) = run_with_pid(eval_cmd(
        &d2,
        &["hangs", "--agent", "nop", "--fail-on-error=false"],
    ));
    ran.expect_code(1);
    assert_clean(pid, &ran.desc);
}

#[test]
fn agent_over_its_timeout_is_recorded_and_still_graded() {
    let _g = prelude();
    let d = Dir::new();
    task(
        d.path(),
        "slow",
        &[
            ("instruction.md", "write done to out.txt\n"),
            ("task.toml", &toml(TINY, 3, 30)),
            (
                "tests/test.sh",
                "if grep -qx done /workspace/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
            ),
            ("solution/solve.sh", "echo done > out.txt\nsleep 600\n"),
        ],
    );
    let (ran, pid) = run_with_pid(eval_cmd(&d, &["slow", "--agent", "oracle"]));
    assert!(
        ran.elapsed.as_secs() < 60,
        "agent stopped at its timeout: {:?}",
        ran.elapsed
    );
    assert_clean(pid, &ran.desc);
    let r = report(&d, &ran);
    let a = &r["attempts"][0];
    assert_eq!(a["agent_outcome"], "agent_timeout", "{a}{}", ran.explain());
    // Graded all the same: the file was written before the timeout.
    assert_eq!(a["status"], "pass", "{a}");
    assert_eq!(a["reward"], 1.0);
    assert!(a["phases"]["agent_ms"].as_u64().unwrap_or(0) >= 3000, "{a}");
    ran.expect_code(0);
}
