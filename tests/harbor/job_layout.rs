//! `runner eval --harbor-job DIR` read by Harbor itself: two suites (the
//! oracle on a passing task and on a task whose test.sh writes no reward,
//! two attempts each; nop on two failing tasks) are written in Harbor's job
//! layout, then tests/harbor/check_job.py loads every file with Harbor's
//! pydantic models, recomputes the job's stats with Harbor's code, checks
//! the task checksums with Harbor's `Task.checksum` and reads the jobs
//! through the app of `harbor view`. What Harbor reads must be runner's
//! verdicts, from the `--json` report. FAILS without `make harbor`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harbor::Harbor;
use crate::support::binary::{Dir, run};
use crate::support::docker::{BOOKWORM, TINY, require_images};
use crate::support::eval::{eval_cmd, report};

/// Runs `runner eval` with `--harbor-job jobs/<name>`; the JSON report.
fn eval_into(jobs: &Path, name: &str, args: &[&str]) -> Value {
    let d = Dir::new();
    let job = jobs.join(name);
    let mut args: Vec<&str> = args.to_vec();
    args.extend(["--jobs", "2", "--fail-on-error=false", "--harbor-job"]);
    args.push(job.to_str().expect("a UTF-8 path"));
    let ran = run(&mut eval_cmd(&d, &args));
    assert!(
        matches!(ran.code(), 0 | 1),
        "runner eval did not grade{}",
        ran.explain()
    );
    assert!(
        job.join("result.json").is_file(),
        "no {job:?}/result.json{}",
        ran.explain()
    );
    report(&d, &ran)
}

/// check_job.py's reading of the job: what Harbor says of each trial.
fn harbor_reads(harbor: &Harbor, jobs: &Path, name: &str) -> Value {
    let script = crate::repo().join("tests/harbor/check_job.py");
    let out = harbor.python(&script, &[jobs, Path::new(name)]);
    assert!(
        out.status.success(),
        "Harbor does not read the job {name} as runner wrote it:\n{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check_job.py's output is not JSON: {e}\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Every attempt of runner's report is the trial `<task>__a<n>`, with the
/// same rewards and the exception Harbor gives that verdict.
fn same_verdicts(report: &Value, read: &Value) -> Vec<String> {
    let mut wrong = Vec::new();
    let attempts = report["attempts"].as_array().expect("attempts");
    let trials = read["trials"].as_object().expect("trials");
    assert_eq!(attempts.len(), trials.len(), "{read}");
    for a in attempts {
        let name = format!(
            "{}__a{}",
            a["task"].as_str().expect("task"),
            a["attempt"].as_u64().expect("attempt")
        );
        let Some(t) = trials.get(&name) else {
            wrong.push(format!("no trial {name} for the attempt {a}"));
            continue;
        };
        let status = a["status"].as_str().unwrap_or_default();
        let metrics = &a["metrics"];
        let rewards = &t["rewards"];
        let ok = match status {
            "pass" | "fail" => {
                rewards == metrics
                    && t["reward_valid"] == true
                    && t["exception_type"].is_null()
                    && t["viewer_reward"] == a["reward"]
            }
            "error" => {
                rewards.is_null()
                    && t["reward_valid"] == false
                    && t["exception_type"] == "RewardFileNotFoundError"
                    && t["viewer_error_type"] == "RewardFileNotFoundError"
            }
            _ => false,
        };
        if !ok {
            wrong.push(format!(
                "{name}: runner {status} {metrics}, Harbor reads {t}"
            ));
        }
    }
    wrong
}

#[test]
fn harbor_reads_runners_job_layout_with_its_own_models() {
    // Fails with the hint `make harbor` when Harbor is not installed.
    let harbor = Harbor::find();
    require_images(&[TINY, BOOKWORM]);
    // Under the repository: harbor.sh makes it visible inside Harbor's root.
    let jobs: PathBuf =
        crate::repo().join(format!("target/harbor-job-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&jobs);
    let task = |t: &str| crate::repo().join(t).to_string_lossy().into_owned();
    let (pass, no_reward) = (
        task("examples/tasks/fizzbuzz-script"),
        task("tests/fixtures/eval/gaming/no-reward-file"),
    );
    let oracle = eval_into(
        &jobs,
        "oracle",
        &[&pass, &no_reward, "--agent", "oracle", "--attempts", "2"],
    );
    let git = task("examples/tasks/git-commit");
    let nop = eval_into(&jobs, "nop", &[&pass, &git, "--agent", "nop"]);

    // runner's own agent, with a scripted model that reports its usage.
    let scripts = Dir::new();
    let script = scripts.write(
        "script.json",
        r#"{"turns": [{"text": "done", "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50}}]}"#,
    );
    let model = eval_into(
        &jobs,
        "model",
        &[
            &pass,
            "--agent",
            "model",
            "--provider",
            "scripted",
            "--script",
            script.to_str().expect("path"),
        ],
    );

    let read_oracle = harbor_reads(&harbor, &jobs, "oracle");
    let read_nop = harbor_reads(&harbor, &jobs, "nop");
    let read_model = harbor_reads(&harbor, &jobs, "model");
    let mut wrong = same_verdicts(&oracle, &read_oracle);
    wrong.extend(same_verdicts(&nop, &read_nop));
    wrong.extend(same_verdicts(&model, &read_model));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Harbor's stats (check_job.py checked them against Harbor's own
    // computation): oracle passes fizzbuzz-script twice, so pass@2 is 1;
    // the task without a reward counts among the errors.
    let stats = &read_oracle["stats"];
    assert_eq!(stats["n_completed_trials"], 4, "{stats}");
    assert_eq!(stats["n_errored_trials"], 2, "{stats}");
    let evals = &stats["evals"]["oracle__adhoc"];
    assert_eq!(evals["n_trials"], 2, "{stats}");
    assert_eq!(evals["pass_at_k"]["2"], 1.0, "{stats}");
    assert_eq!(evals["metrics"][0]["mean"], 1.0, "{stats}");
    let evals = &read_nop["stats"]["evals"]["nop__adhoc"];
    assert_eq!(evals["n_trials"], 2, "{evals}");
    assert_eq!(evals["metrics"][0]["mean"], 0.0, "{evals}");
    assert_eq!(read_nop["stats"]["n_errored_trials"], 0);
    // Harbor counts input tokens with the cached ones.
    let stats = &read_model["stats"];
    assert_eq!(stats["n_input_tokens"], 150, "{stats}");
    assert_eq!(stats["n_cache_tokens"], 50, "{stats}");
    assert_eq!(stats["n_output_tokens"], 20, "{stats}");
    let key = stats["evals"]
        .as_object()
        .and_then(|e| e.keys().next().cloned())
        .unwrap_or_default();
    assert!(
        key.starts_with("runner__") && key.ends_with("__adhoc"),
        "{stats}"
    );

    // The verifier's files, as test.sh wrote them.
    let trial = jobs.join("oracle/fizzbuzz-script__a1");
    let reward = std::fs::read_to_string(trial.join("verifier/reward.txt")).expect("reward.txt");
    assert_eq!(reward.trim(), "1");
    assert!(trial.join("verifier/test-stdout.txt").is_file());
    assert!(trial.join("agent/trajectory.jsonl").is_file());

    // A second write to the same DIR is refused before anything runs.
    let d = Dir::new();
    let job = jobs.join("oracle");
    let ran = run(&mut eval_cmd(
        &d,
        &[
            &pass,
            "--agent",
            "oracle",
            "--harbor-job",
            job.to_str().expect("path"),
        ],
    ));
    assert_eq!(ran.code(), 2, "{}", ran.explain());
    assert!(
        ran.stderr().contains("exists and is not empty") && ran.stderr().contains("hint:"),
        "{}",
        ran.explain()
    );
    assert!(
        !d.path().join("runs/eval").exists(),
        "nothing ran{}",
        ran.explain()
    );
    std::fs::remove_dir_all(&jobs).expect("remove the test's jobs");
}
