//! task.toml keys runner cannot honour, and task dirs it cannot read, stop
//! `runner eval` before anything runs: exit 2, the file and the key named,
//! and a `hint:` line. No engine is needed to get there.

use crate::support::binary::{Dir, run};
use crate::support::eval::{eval, prelude, report, statuses, task};

/// `runner eval NAME --agent nop` on a task with this task.toml: exit 2;
/// the message names task.toml and every one of `needles`; a hint follows.
fn refused(toml: &str, needles: &[&str]) {
    let d = Dir::new();
    task(
        d.path(),
        "t",
        &[
            ("instruction.md", "x\n"),
            ("task.toml", toml),
            ("tests/test.sh", "exit 0\n"),
        ],
    );
    let ran = run(d.runner().args(["eval", "t", "--agent", "nop"]));
    ran.expect_code(2);
    let err = ran.stderr();
    let error = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("an error line{}", ran.explain()));
    assert!(error.contains("task.toml"), "{}", ran.explain());
    for n in needles {
        assert!(error.contains(n), "{n}{}", ran.explain());
    }
    assert!(
        err.lines().any(|l| l.starts_with("hint: ") && l.len() > 10),
        "{}",
        ran.explain()
    );
}

#[test]
fn a_gpu_task_is_refused_naming_the_key() {
    refused(
        "[environment]\ngpus = 1\n",
        &["environment.gpus", "needs GPUs"],
    );
}

#[test]
fn an_allowlist_of_addresses_is_refused_naming_the_key() {
    // Harbor takes IP addresses and ranges; runner's proxy decides by name.
    refused(
        "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\", \"10.0.0.0/8\"]\n",
        &["environment.allowed_hosts", "10.0.0.0/8", "names only"],
    );
}

#[test]
fn multi_step_tasks_are_refused_naming_the_key() {
    refused("[[steps]]\nname = \"first\"\n", &["steps", "multi-step"]);
}

#[test]
fn an_unset_host_variable_names_the_key_and_the_variable() {
    // The binary runs with a cleared environment: the variable is unset.
    refused(
        "[environment.env]\nTOKEN = \"${RUNNER_SCHEMA_TEST_UNSET}\"\n",
        &["environment.env.TOKEN", "RUNNER_SCHEMA_TEST_UNSET"],
    );
}

#[test]
fn a_directory_of_no_known_layout_says_what_it_found_and_expected() {
    let d = Dir::new();
    task(
        d.path(),
        "odd",
        &[("README.md", "x\n"), ("run.sh", "true\n")],
    );
    let ran = run(d.runner().args(["eval", "odd", "--agent", "nop"]));
    ran.expect_code(2);
    let err = ran.stderr();
    for n in ["README.md", "run.sh", "instruction.md", "task.yaml"] {
        assert!(err.contains(n), "{n}{}", ran.explain());
    }
    assert!(err.contains("\nhint: "), "{}", ran.explain());
}

#[test]
fn a_terminal_bench_1_task_dir_grades_oracle_pass_and_nop_fail() {
    let _g = prelude();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tb1");
    let fixture = fixture.to_str().expect("utf-8 path");
    for (agent, want, reward) in [("oracle", "pass", 1.0), ("nop", "fail", 0.0)] {
        let d = Dir::new();
        let ran = eval(&d, &[fixture, "--agent", agent]);
        ran.expect_code(if agent == "oracle" { 0 } else { 1 });
        let st = statuses(&report(&d, &ran));
        assert_eq!(
            st,
            [("hello-tb1".to_string(), want.to_string(), Some(reward))],
            "{agent}{}",
            ran.explain()
        );
    }
}

#[test]
fn a_bad_task_yaml_names_the_file() {
    let d = Dir::new();
    task(
        d.path(),
        "tb",
        &[
            ("task.yaml", "instruction: [unclosed\n"),
            ("docker-compose.yaml", "services: {}\n"),
            ("run-tests.sh", "true\n"),
        ],
    );
    let ran = run(d.runner().args(["eval", "tb", "--agent", "nop"]));
    ran.expect_code(2);
    let err = ran.stderr();
    assert!(err.contains("task.yaml"), "{}", ran.explain());
    assert!(err.contains("\nhint: "), "{}", ran.explain());
}

#[test]
fn a_secret_of_runners_environment_reaches_a_task_only_when_passed() {
    let d = Dir::new();
    task(
        d.path(),
        "judge",
        &[
            ("instruction.md", "x\n"),
            (
                "task.toml",
                "[verifier.env]\nJUDGE_KEY = \"${RUNNER_SCHEMA_TEST_API_KEY}\"\n",
            ),
            ("tests/test.sh", "echo 0 > /logs/verifier/reward.txt\n"),
        ],
    );
    // A task from anywhere must not pull runner's own credentials into
    // code it runs, by naming them.
    let ran = run(d
        .runner()
        .env("RUNNER_SCHEMA_TEST_API_KEY", "sk-not-for-tasks-0123456789")
        .args([
            "eval",
            "judge",
            "--agent",
            "nop",
            "--executor",
            "local",
            "--filter",
            "nomatch",
        ]));
    ran.expect_code(2);
    let err = ran.stderr();
    assert!(
        err.contains("verifier.env.JUDGE_KEY") && err.contains("RUNNER_SCHEMA_TEST_API_KEY"),
        "{}",
        ran.explain()
    );
    assert!(
        err.contains("hint: pass --pass-env RUNNER_SCHEMA_TEST_API_KEY"),
        "{}",
        ran.explain()
    );
    assert!(!err.contains("sk-not-for-tasks"), "{}", ran.explain());
    // Handed over on purpose, the task loads (the filter then matches no
    // task: the load is what is checked, no sandbox starts).
    let ran = run(d
        .runner()
        .env("RUNNER_SCHEMA_TEST_API_KEY", "sk-not-for-tasks-0123456789")
        .args([
            "eval",
            "judge",
            "--agent",
            "nop",
            "--pass-env",
            "RUNNER_SCHEMA_TEST_API_KEY",
            "--filter",
            "nomatch",
        ]));
    ran.expect_code(2);
    assert!(
        ran.stderr().contains("no task matches"),
        "{}",
        ran.explain()
    );
}
