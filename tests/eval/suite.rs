//! The example suite with the reference solutions and with no agent, the
//! reports, and task loading errors.

use std::path::PathBuf;

use crate::support::binary::{Dir, run};
use crate::support::docker::{TINY, docker_cli};
use crate::support::eval::{
    assert_clean, eval_cmd, prelude, report, run_with_pid, statuses, task, toml,
};

/// test.sh of the fixtures: reward 1 when the agent wrote `ok`.
const REWARD_OK: &str =
    "if grep -qx ok /workspace/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/tasks")
}

#[test]
fn example_suite_oracle_passes_every_task_and_nop_fails_every_task() {
    let _g = prelude();
    let d = Dir::new();
    let ex = examples();
    let ex = ex.to_str().expect("utf-8 path");

    // The task images are a cache other processes on the engine may share:
    // the ones already there are not this test's to remove.
    let cached = task_images();
    let (ran, pid) = run_with_pid(eval_cmd(&d, &[ex, "--agent", "oracle", "--jobs", "3"]));
    ran.expect_code(0);
    assert_clean(pid, &ran.desc);
    let r = report(&d, &ran);
    let st = statuses(&r);
    assert!(st.len() >= 6, "at least six example tasks: {st:?}");
    for (task, status, reward) in &st {
        assert_eq!(
            (status.as_str(), *reward),
            ("pass", Some(1.0)),
            "{task}{}",
            ran.explain()
        );
    }
    assert_eq!(r["totals"]["pass_rate"], 1.0);
    assert_eq!(r["version"], 1);
    // Each attempt has its own run directory with a trajectory and the verifier's log.
    for a in r["attempts"].as_array().expect("attempts") {
        let traj = PathBuf::from(a["trajectory"].as_str().expect("trajectory path"));
        assert!(traj.is_file(), "{traj:?}");
        let log = PathBuf::from(a["verifier_log"].as_str().expect("verifier log"));
        assert!(log.is_file(), "{log:?}");
        for phase in ["setup_ms", "agent_ms", "verifier_ms", "total_ms"] {
            assert!(a["phases"][phase].as_u64().is_some(), "{phase} in {a}");
        }
        assert!(
            a["network"]
                .as_str()
                .unwrap_or_default()
                .starts_with("none"),
            "{a}"
        );
    }
    let xml = std::fs::read_to_string(d.path().join("junit.xml")).expect("junit.xml");
    let (cases, failures, errors, _) = crate::junit::validate(&xml);
    assert_eq!((cases, failures, errors), (st.len() as u64, 0, 0));
    let md = std::fs::read_to_string(d.path().join("summary.md")).expect("summary.md");
    assert!(md.contains("| fix-median | 1 | ✅ pass |"), "{md}");
    let images: Vec<String> = r["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .filter_map(|a| a["image"].as_str())
        .filter(|i| i.starts_with("runner-task:"))
        .map(str::to_string)
        .collect();
    assert!(
        !images.is_empty(),
        "some examples build environment/Dockerfile"
    );

    let d2 = Dir::new();
    let (ran, pid) = run_with_pid(eval_cmd(&d2, &[ex, "--agent", "nop", "--jobs", "3"]));
    ran.expect_code(1);
    assert_clean(pid, &ran.desc);
    let r = report(&d2, &ran);
    for (task, status, reward) in statuses(&r) {
        assert_eq!(
            (status.as_str(), reward),
            ("fail", Some(0.0)),
            "{task}{}",
            ran.explain()
        );
    }
    let xml = std::fs::read_to_string(d2.path().join("junit.xml")).expect("junit.xml");
    let (cases, failures, errors, _) = crate::junit::validate(&xml);
    assert_eq!(
        (failures, errors),
        (cases, 0),
        "every nop attempt is a <failure>"
    );

    // The task images this test built are a cache; it leaves none behind,
    // and removes none it did not build.
    let mut built: Vec<String> = images.into_iter().filter(|i| !cached.contains(i)).collect();
    built.sort();
    built.dedup();
    if !built.is_empty() {
        let _ = std::process::Command::new("docker")
            .args(["image", "rm"])
            .args(&built)
            .output();
    }
}

/// The task images on the engine, as `runner-task:TAG`.
fn task_images() -> Vec<String> {
    docker_cli(&[
        "images",
        "runner-task",
        "--format",
        "{{.Repository}}:{{.Tag}}",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
fn wrong_types_in_task_toml_name_the_file_and_key() {
    let d = Dir::new();
    task(
        d.path(),
        "bad",
        &[
            ("instruction.md", "x\n"),
            (
                "task.toml",
                "[agent]\ntimeout_sec = 10\n[environment]\ncpus = \"many\"\n",
            ),
            ("tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n"),
        ],
    );
    let ran = run(d.runner().args(["eval", "bad", "--agent", "nop"]));
    ran.expect_code(2);
    let err = ran.stderr();
    // One error line naming the file, line, column and key; the offending
    // line is quoted in the hint, not folded into the error.
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{}", ran.explain());
    assert!(
        lines[0].starts_with("error: ")
            && lines[0].ends_with(
                "bad/task.toml: line 4, column 8, key environment.cpus: invalid type: string \"many\", expected f64"
            ),
        "{}",
        ran.explain()
    );
    assert!(
        lines[1].starts_with("hint: line 4 reads: cpus = \"many\"; see Harbor's task.toml"),
        "{}",
        ran.explain()
    );
}

#[test]
fn filter_and_attempts_give_pass_at_k() {
    let _g = prelude();
    let d = Dir::new();
    let tasks = d.path().join("suite");
    for name in ["alpha", "beta"] {
        task(
            &tasks,
            name,
            &[
                (
                    "instruction.md",
                    "<!-- canary GUID x -->\nWrite ok to out.txt\n",
                ),
                ("task.toml", &toml(TINY, 30, 30)),
                ("tests/test.sh", REWARD_OK),
                ("solution/solve.sh", "echo ok > out.txt\n"),
            ],
        );
    }
    let (ran, pid) = run_with_pid(eval_cmd(
        &d,
        &[
            "suite",
            "--agent",
            "oracle",
            "--filter",
            "al*",
            "--attempts",
            "2",
            "--jobs",
            "2",
        ],
    ));
    ran.expect_code(0);
    assert_clean(pid, &ran.desc);
    let r = report(&d, &ran);
    let st = statuses(&r);
    assert_eq!(st.len(), 2, "{st:?}");
    assert!(
        st.iter().all(|(t, s, _)| t == "alpha" && s == "pass"),
        "{st:?}"
    );
    assert_eq!(r["totals"]["k"], 2);
    assert_eq!(r["totals"]["pass_at_k"], 1.0);
    assert_eq!(r["tasks"][0]["passes"], 2);
    assert!(
        d.path()
            .join("runs/eval/alpha/1/trajectory.jsonl")
            .is_file()
    );
    assert!(
        d.path()
            .join("runs/eval/alpha/2/trajectory.jsonl")
            .is_file()
    );
}

#[test]
fn failed_image_build_is_an_infrastructure_error_and_summary_goes_to_github() {
    let _g = prelude();
    let d = Dir::new();
    task(
        d.path(),
        "broken",
        &[
            ("instruction.md", "anything\n"),
            (
                "task.toml",
                "[environment]\nbuild_timeout_sec = 120\nmemory_mb = 256\n",
            ),
            (
                "environment/Dockerfile",
                "FROM runner-sandbox:tiny\nRUN echo building; exit 3\n",
            ),
            ("tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n"),
        ],
    );
    let gh = d.path().join("gh-summary.md");
    let mut cmd = eval_cmd(&d, &["broken", "--agent", "nop"]);
    cmd.env("GITHUB_STEP_SUMMARY", &gh);
    let (ran, pid) = run_with_pid(cmd);
    ran.expect_code(2);
    assert_clean(pid, &ran.desc);
    let r = report(&d, &ran);
    let a = &r["attempts"][0];
    assert_eq!(a["status"], "error", "{a}");
    assert!(
        a["error"].as_str().unwrap_or_default().contains("building"),
        "{a}"
    );
    let md = std::fs::read_to_string(&gh).expect("GITHUB_STEP_SUMMARY written");
    assert!(md.contains("| broken | 1 | ⚠️ error |"), "{md}");
}

#[test]
fn model_agent_without_a_key_fails_before_any_sandbox() {
    let d = Dir::new();
    task(
        d.path(),
        "t",
        &[
            ("instruction.md", "x\n"),
            ("task.toml", &toml(TINY, 10, 10)),
            ("tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n"),
        ],
    );
    let ran = run(d.runner().args(["eval", "t", "--provider", "anthropic"]));
    ran.expect_code(2);
    assert!(
        ran.stderr().contains("ANTHROPIC_API_KEY"),
        "{}",
        ran.explain()
    );
    assert!(ran.stderr().contains("hint:"), "{}", ran.explain());
}
