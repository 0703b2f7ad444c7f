//! No gaming through errors: a hostile agent (each fixture's solve.sh, run
//! with `--agent oracle`) that turns its own failure into something that is
//! not a plain fail (unreadable paths, a verifier that never ends, a
//! process rewriting the reward after test.sh exits, test.sh killed, the
//! reward's directory deleted) still scores a fail, with its reason, and
//! stays in the pass rate's denominator. Only a failure that is not the
//! agent's (a test.sh that writes no reward file) is an error, as in Harbor.
//! Each fixture was checked by hand in a plain container: solve.sh then
//! test.sh, the reward read at once and 4 s later.

use std::path::{Path, PathBuf};

use crate::fidelity::{Images, attempt, describe, fixtures, graded};
use crate::support::binary::{Dir, Ran};
use crate::support::docker::BOOKWORM;
use crate::support::eval::{prelude, task, toml};

fn gaming(name: &str) -> PathBuf {
    fixtures().join("gaming").join(name)
}

/// Grades the fixture `name` with its hostile solve.sh and `args`; asserts
/// the exit code and the status, and returns the attempt.
fn graded_fixture(
    name: &str,
    args: &[&str],
    (code, status): (i32, &str),
) -> (serde_json::Value, Ran) {
    let mut images = Images::new();
    let d = Dir::new();
    let mut all = vec!["--agent", "oracle"];
    all.extend_from_slice(args);
    let (ran, r) = graded(&d, &mut images, &[gaming(name).as_path()], &all, &[]);
    let a = attempt(&r, name, &ran).clone();
    assert_eq!(
        (ran.code(), a["status"].as_str().unwrap_or_default()),
        (code, status),
        "{name} {args:?}: exit code and status{}",
        describe(&a, &ran)
    );
    (a, ran)
}

/// The fixture is a fail (exit 1: below the pass rate, not an
/// infrastructure error) and its reward is not 1.
fn fails(name: &str, args: &[&str]) -> (serde_json::Value, Ran) {
    let (a, ran) = graded_fixture(name, args, (1, "fail"));
    assert_ne!(a["reward"].as_f64(), Some(1.0), "{}", describe(&a, &ran));
    (a, ran)
}

#[test]
fn unreadable_paths_left_by_the_agent_are_a_fail_in_every_copying_mode() {
    let _g = prelude();
    // Shared reads the agent's container as it is; isolated and snapshot
    // copy the agent's files, which is where an unreadable directory or a
    // root-owned mode 000 file used to become an infrastructure error.
    for args in [
        &[][..],
        &["--grading", "isolated"],
        &["--grading", "snapshot"],
    ] {
        fails("unreadable-dir", args);
    }
}

#[test]
fn a_solution_that_never_ends_times_the_verifier_out_and_fails() {
    let _g = prelude();
    let (a, ran) = fails("verifier-hang", &[]);
    // The verifier's timeout is 10 s: grading stops then, not at some
    // larger limit of runner's.
    let verifier_ms = a["phases"]["verifier_ms"].as_u64().unwrap_or(u64::MAX);
    assert!(
        verifier_ms < 40_000,
        "the verifier ran {verifier_ms} ms{}",
        describe(&a, &ran)
    );
}

#[test]
fn a_process_rewriting_the_reward_after_test_sh_exits_is_killed_before_the_read() {
    let _g = prelude();
    // test.sh wrote 0; the agent's detached process waits for test.sh to
    // exit, then writes 1 (reward.txt and reward.json) every 0.1 s. Every
    // process is killed when test.sh exits, so the reward read is test.sh's 0.
    let (a, ran) = fails("late-reward-writer", &[]);
    assert_eq!(a["reward"].as_f64(), Some(0.0), "{}", describe(&a, &ran));
}

#[test]
fn test_sh_killed_by_the_agents_code_is_a_fail() {
    let _g = prelude();
    fails("kill-test-sh", &[]);
}

#[test]
fn agent_code_deleting_the_reward_directory_is_a_fail() {
    let _g = prelude();
    // No reward file, as in no-reward-file, but because the agent's code
    // removed /logs/verifier while test.sh ran: the spec makes an error
    // caused by the agent's files or processes a fail with its reason (and
    // Harbor's RewardFileNotFoundError would let an agent leave the
    // denominator at will).
    fails("deleted-logs-dir", &[]);
}

#[test]
fn a_test_sh_that_writes_no_reward_file_is_an_error_as_in_harbor() {
    let _g = prelude();
    // Not the agent's doing (the task is solved, test.sh exits 0 without a
    // reward): an error, so exit 2 with --fail-on-error (the default), and
    // never a pass on test.sh's exit code.
    let (a, ran) = graded_fixture("no-reward-file", &[], (2, "error"));
    let err = a["error"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        err.contains("reward"),
        "the error names the missing reward file{}",
        describe(&a, &ran)
    );
}

/// Copies the directory `from` to `to` (`cp -a`: modes kept).
fn copy_dir(from: &Path, to: &Path) {
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .expect("run cp");
    assert!(
        out.status.success(),
        "cp -a {from:?} {to:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn gamed_tasks_stay_in_the_pass_rate_with_fail_on_error_false() {
    let _g = prelude();
    let d = Dir::new();
    let suite = d.path().join("suite");
    std::fs::create_dir_all(&suite).expect("mkdir suite");
    for name in ["unreadable-dir", "verifier-hang"] {
        copy_dir(&gaming(name), &suite.join(name));
    }
    task(
        &suite,
        "solved",
        &[
            ("instruction.md", "Write ok to /workspace/out.txt\n"),
            ("task.toml", &toml(BOOKWORM, 30, 30)),
            (
                "tests/test.sh",
                "#!/bin/bash\nmkdir -p /logs/verifier\n\
                 if grep -qx ok /workspace/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
            ),
            (
                "solution/solve.sh",
                "#!/bin/bash\necho ok > /workspace/out.txt\n",
            ),
        ],
    );
    let mut images = Images::new();
    let (ran, r) = graded(
        &d,
        &mut images,
        &[suite.as_path()],
        &["--agent", "oracle", "--fail-on-error=false"],
        &[],
    );
    for (name, want) in [
        ("solved", "pass"),
        ("unreadable-dir", "fail"),
        ("verifier-hang", "fail"),
    ] {
        let a = attempt(&r, name, &ran);
        assert_eq!(a["status"], want, "{name}{}", describe(a, &ran));
    }
    let t = &r["totals"];
    assert_eq!(
        (&t["passed"], &t["failed"], &t["errors"]),
        (&1.into(), &2.into(), &0.into()),
        "{t:#}{}",
        ran.explain()
    );
    let rate = t["pass_rate"].as_f64().expect("pass_rate");
    assert!(
        (rate - 1.0 / 3.0).abs() < 1e-9,
        "pass rate {rate}{}",
        ran.explain()
    );
    let printed = format!("{}{}", ran.stdout(), ran.stderr());
    assert!(
        printed.contains("pass rate 33.3%") && !printed.contains("pass rate 100.0%"),
        "the printed pass rate{}",
        ran.explain()
    );
    // Below --min-pass-rate (1.0) with no infrastructure error: exit 1.
    ran.expect_code(1);
}
