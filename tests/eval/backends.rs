//! The same suite on both backends: `runner eval` knows only the sandbox
//! contract, so the oracle, nop, the agent timeout and Ctrl-C behave alike
//! on `docker` and on `local`. `--executor local` is NOT a sandbox (the
//! tasks here are this file's own); it maps a task's /tests, /logs and
//! /solution under a directory of the attempt's, so these tasks name them
//! through `${RUNNER_SANDBOX_ROOT:-}` (empty in a container).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::binary::{Dir, Ran, sigint};
use crate::support::docker::TINY;
use crate::support::eval::{eval_cmd, prelude, report, run_with_pid, task, toml};

const BACKENDS: [&str; 2] = ["docker", "local"];

/// A task whose answer is `42` in answer.txt; solve.sh sleeps `solve_sleep`
/// seconds first.
fn answer_task(d: &Dir, name: &str, agent_secs: u32, solve_sleep: u32) {
    task(
        d.path(),
        name,
        &[
            ("instruction.md", "Write 42 into answer.txt.\n"),
            ("task.toml", &toml(TINY, agent_secs, 60)),
            (
                "solution/solve.sh",
                &format!("#!/bin/sh\nsleep {solve_sleep}\necho 42 > answer.txt\n"),
            ),
            (
                "tests/test.sh",
                "#!/bin/sh\nR=\"${RUNNER_SANDBOX_ROOT:-}\"\nmkdir -p \"$R/logs/verifier\"\n\
                 [ -f \"$R/tests/test.sh\" ] || { echo 'tests not at $R/tests'; exit 3; }\n\
                 if [ \"$(cat answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi \
                 > \"$R/logs/verifier/reward.txt\"\n",
            ),
        ],
    );
}

/// The host's own /tests and /logs, which a local attempt must never
/// touch: whether each exists, and its modification time.
fn host_task_dirs() -> Vec<Option<std::time::SystemTime>> {
    ["/tests", "/logs", "/solution", "/tmp/runner-solution"]
        .iter()
        .map(|p| {
            std::fs::metadata(Path::new(p))
                .and_then(|m| m.modified())
                .ok()
        })
        .collect()
}

fn attempt(r: &serde_json::Value) -> &serde_json::Value {
    &r["attempts"][0]
}

#[test]
fn oracle_passes_and_nop_fails_on_both_backends() {
    let _g = prelude();
    let before = host_task_dirs();
    for backend in BACKENDS {
        let d = Dir::new();
        answer_task(&d, "answer", 60, 0);
        let (ran, _) = run_with_pid(eval_cmd(
            &d,
            &["answer", "--agent", "oracle", "--executor", backend],
        ));
        ran.expect_code(0);
        let a = attempt(&report(&d, &ran)).clone();
        assert_eq!(a["status"], "pass", "{backend}: {a}{}", ran.explain());
        assert_eq!(a["reward"], 1.0, "{backend}: {a}");
        if backend == "local" {
            assert!(
                ran.stderr().contains("NOT a sandbox"),
                "local says what it is{}",
                ran.explain()
            );
        }

        let d = Dir::new();
        answer_task(&d, "answer", 60, 0);
        let (ran, _) = run_with_pid(eval_cmd(
            &d,
            &["answer", "--agent", "nop", "--executor", backend],
        ));
        ran.expect_code(1);
        let a = attempt(&report(&d, &ran)).clone();
        assert_eq!(a["status"], "fail", "{backend}: {a}{}", ran.explain());
        assert_eq!(a["reward"], 0.0, "{backend}: {a}");
    }
    assert_eq!(
        host_task_dirs(),
        before,
        "the host's /tests, /logs and /solution are untouched"
    );
}

#[test]
fn an_agent_over_its_time_is_stopped_and_graded_on_both_backends() {
    let _g = prelude();
    for backend in BACKENDS {
        let d = Dir::new();
        answer_task(&d, "slow", 2, 120);
        let (ran, _) = run_with_pid(eval_cmd(
            &d,
            &["slow", "--agent", "oracle", "--executor", backend],
        ));
        ran.expect_code(1);
        assert!(
            ran.elapsed < Duration::from_secs(60),
            "{backend}: stopped at its timeout: {:?}",
            ran.elapsed
        );
        let a = attempt(&report(&d, &ran)).clone();
        assert_eq!(a["status"], "fail", "{backend}: {a}{}", ran.explain());
        assert_eq!(a["agent_outcome"], "agent_timeout", "{backend}: {a}");
        assert_eq!(a["reward"], 0.0, "{backend}: graded: {a}");
    }
}

#[test]
fn ctrl_c_interrupts_the_suite_and_writes_the_reports_on_both_backends() {
    let _g = prelude();
    for backend in BACKENDS {
        let d = Dir::new();
        answer_task(&d, "forever", 600, 600);
        let child = eval_cmd(&d, &["forever", "--agent", "oracle", "--executor", backend])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn runner eval");
        // Until solve.sh runs: its log exists in the attempt's outputs.
        let log = d.path().join("runs/eval/forever/1/outputs/oracle.log");
        let t = Instant::now();
        while !log.exists() && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(log.exists(), "{backend}: solve.sh started");
        sigint(child.id());
        let t = Instant::now();
        let out = child.wait_with_output().expect("wait");
        let ran = Ran {
            out,
            desc: format!("runner eval forever --executor {backend} (SIGINT)"),
            elapsed: t.elapsed(),
        };
        ran.expect_code(130);
        assert!(
            ran.elapsed < Duration::from_secs(30),
            "{backend}: stopped promptly: {:?}",
            ran.elapsed
        );
        let r = report(&d, &ran);
        assert_eq!(attempt(&r)["status"], "interrupted", "{backend}: {r}");
        assert_eq!(r["suite"]["interrupted"], true, "{backend}");
    }
}
