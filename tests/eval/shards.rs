//! Sharding end to end, against the real engine: three shards of a small
//! suite run at once (as three CI machines would), merged with `runner
//! eval merge`, give the verdicts, rows and totals of one unsharded run;
//! shards that do not belong together are refused.
//!
//! The shard and merge commands are not written here: they are the shell
//! of the `shard` and `merge` steps of docs/ci/github-actions.yml, read
//! from that file and run with bash, so the worked example is the tested
//! one.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::support::binary::{Dir, Ran, run};
use crate::support::docker::{TINY, test_runtime};
use crate::support::eval::{assert_clean, leftovers, prelude, task, toml};

/// test.sh of the fixtures: reward 1 when the agent wrote `ok`.
const REWARD_OK: &str =
    "if grep -qx ok /workspace/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

/// Six quick tasks: four the oracle passes, one whose reference solution
/// writes the wrong answer, one graded on two named metrics of which one
/// falls short.
fn suite(root: &Path) {
    let tml = toml(TINY, 60, 30);
    for name in ["alpha", "bravo", "delta", "foxtrot"] {
        task(
            root,
            name,
            &[
                ("instruction.md", "write ok to out.txt\n"),
                ("task.toml", &tml),
                ("tests/test.sh", REWARD_OK),
                ("solution/solve.sh", "echo ok > out.txt\n"),
            ],
        );
    }
    task(
        root,
        "charlie",
        &[
            ("instruction.md", "write ok to out.txt\n"),
            ("task.toml", &tml),
            ("tests/test.sh", REWARD_OK),
            ("solution/solve.sh", "echo wrong > out.txt\n"),
        ],
    );
    task(
        root,
        "echo",
        &[
            ("instruction.md", "write ok to out.txt\n"),
            ("task.toml", &tml),
            (
                "tests/test.sh",
                "grep -qx ok /workspace/out.txt && c=1 || c=0\n\
                 echo \"{\\\"correct\\\": $c, \\\"style\\\": 0.5}\" > /logs/verifier/reward.json\n",
            ),
            ("solution/solve.sh", "echo ok > out.txt\n"),
        ],
    );
}

/// The `run:` script of the step with `id` in the workflow's job `job`,
/// and the workflow.
fn workflow_step(job: &str, id: &str) -> (String, Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/ci/github-actions.yml");
    let text = std::fs::read_to_string(&path).expect("read docs/ci/github-actions.yml");
    let wf: Value = serde_saphyr::from_str(&text).expect("the workflow is YAML");
    let steps = wf["jobs"][job]["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("jobs.{job}.steps in {wf}"));
    let step = steps
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no step with id {id} in jobs.{job}"));
    let script = step["run"].as_str().expect("a run: script").to_string();
    (script, wf)
}

/// The `run:` scripts of the Action's `eval` and `verdict` steps and the
/// environment the first gets for the workflow's `shard` step of matrix
/// entry `shard`: each `${{ inputs.NAME }}` is the workflow's `with:`
/// value (its `${{ env.X }}` from `env`, `${{ matrix.shard }}`
/// substituted) or the input's default.
fn action_steps(
    wf: &Value,
    env: &[(&str, String)],
    shard: u64,
) -> (String, Vec<(String, String)>, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("action.yml");
    let text = std::fs::read_to_string(&path).expect("read action.yml");
    let action: Value = serde_saphyr::from_str(&text).expect("action.yml is YAML");
    let steps = action["runs"]["steps"].as_array().expect("runs.steps");
    let by_id = |id: &str| {
        steps
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("no step {id} in action.yml"))
    };
    let uses = wf["jobs"]["shard"]["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "shard"))
        .expect("the workflow's shard step");
    assert_eq!(uses["uses"], "./", "the shard step uses the Action");
    let expand = |v: &str| {
        let mut out = v.replace("${{ matrix.shard }}", &shard.to_string());
        for (k, val) in env {
            out = out.replace(&format!("${{{{ env.{k} }}}}"), val);
        }
        assert!(!out.contains("${{"), "unexpanded: {out}");
        out
    };
    let input = |name: &str| -> String {
        match uses["with"][name].as_str() {
            Some(v) => expand(v),
            None => action["inputs"][name]["default"]
                .as_str()
                .unwrap_or_else(|| panic!("input {name}: no value and no default"))
                .to_string(),
        }
    };
    let eval = by_id("eval");
    let vars = eval["env"]
        .as_object()
        .expect("the eval step's env")
        .iter()
        .map(|(k, v)| {
            let v = v.as_str().expect("a string");
            let name = v
                .strip_prefix("${{ inputs.")
                .and_then(|r| r.strip_suffix(" }}"))
                .unwrap_or_else(|| panic!("{k}: {v} is not an input"));
            (k.clone(), input(name))
        })
        .collect();
    let script = |step: &Value| step["run"].as_str().expect("run:").to_string();
    (script(eval), vars, script(by_id("verdict")))
}

/// `bash -euo pipefail -c SCRIPT` in `d`, as a runner machine's step runs
/// it, with the freshly built runner on PATH and only `vars` besides.
fn step(d: &Dir, script: &str, vars: &[(&str, String)]) -> Command {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_runner"));
    let path = format!(
        "{}:{}",
        bin.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("bash");
    c.args(["--noprofile", "--norc", "-euo", "pipefail", "-c", script])
        .current_dir(d.path())
        .env_clear()
        .env("PATH", path)
        .env("HOME", d.home())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // RUNNER_TEST_RUNTIME=runsc runs the suites' sandboxes on gVisor.
    if let Some(rt) = test_runtime() {
        c.env("RUNNER_RUNTIME", rt);
    }
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

fn finish(child: Child, desc: String) -> Ran {
    let start = std::time::Instant::now();
    let out = child.wait_with_output().expect("wait");
    Ran {
        out,
        desc,
        elapsed: start.elapsed(),
    }
}

fn read_json(p: &Path, ran: &Ran) -> Value {
    let text =
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {p:?}: {e}{}", ran.explain()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{p:?}: {e}{}", ran.explain()))
}

/// What must not depend on how the suite was split: the task set, each
/// task's row, each attempt's verdict, the totals (no durations, paths
/// or ids).
fn verdicts(r: &Value) -> Value {
    let pick = |v: &Value, keys: &[&str]| -> Value {
        keys.iter()
            .map(|k| (k.to_string(), v[*k].clone()))
            .collect()
    };
    let rows: Vec<Value> = r["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| {
            pick(
                t,
                &[
                    "task",
                    "attempts",
                    "passes",
                    "errors",
                    "pass_at_k",
                    "mean_reward",
                ],
            )
        })
        .collect();
    let attempts: Vec<Value> = r["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            pick(
                a,
                &[
                    "task",
                    "attempt",
                    "status",
                    "reward",
                    "pass",
                    "metrics",
                    "error_kind",
                ],
            )
        })
        .collect();
    json!({
        "tasks": rows,
        "attempts": attempts,
        "totals": pick(&r["totals"], &[
            "tasks", "attempts", "passed", "failed", "errors", "interrupted", "task_errors",
            "pass_rate", "pass_at_1", "pass_at_k", "k", "mean_reward",
        ]),
    })
}

/// The Action's `eval` and `verdict` steps for each shard of the
/// workflow's matrix, as 3 machines would run them, at once; each must
/// pass its job (min-pass-rate 0) and leave its page and reports in the
/// directory it uploads.
fn action_shards(d: &Dir, wf: &Value, env: &[(&str, String)], shards: u64) {
    // The three machines, at once: the Action's eval step each.
    let children: Vec<(Child, String, u32, PathBuf, String)> = (1..=shards)
        .map(|i| {
            let (eval_script, vars, verdict_script) = action_steps(wf, env, i);
            let output = d.path().join(format!("github-output-{i}"));
            let mut vars: Vec<(&str, String)> =
                vars.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            vars.push(("GITHUB_OUTPUT", output.display().to_string()));
            let mut c = step(d, &eval_script, &vars);
            let desc = format!("shard {i}: {c:?}");
            let child = c.spawn().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
            let pid = child.id();
            (child, desc, pid, output, verdict_script)
        })
        .collect();
    for (i, (child, desc, pid, output, verdict_script)) in children.into_iter().enumerate() {
        let ran = finish(child, desc);
        ran.expect_code(0);
        assert_clean(pid, &ran.desc);
        // The step's output, then the Action's last step: min-pass-rate 0,
        // so a shard with a failing task passes its job.
        let said = std::fs::read_to_string(&output).unwrap_or_default();
        let code = said
            .lines()
            .find_map(|l| l.strip_prefix("exit-code="))
            .unwrap_or_else(|| panic!("no exit-code in $GITHUB_OUTPUT: {said:?}{}", ran.explain()));
        assert_eq!(code, "0", "{}", ran.explain());
        let mut v = step(d, &verdict_script, &[("EVAL_CODE", code.to_string())]);
        let verdict = finish(
            v.spawn().expect("spawn the verdict step"),
            format!("verdict {i}"),
        );
        verdict.expect_code(0);
        // The artifact holds the page and the JUnit report.
        let out = d.path().join(format!("out/shard-{}", i + 1));
        for f in ["results.html", "junit.xml", "report.json", "suite.json"] {
            assert!(out.join(f).is_file(), "{f} in {out:?}{}", ran.explain());
        }
    }
}

/// What upload-artifact and download-artifact do: each shard's output
/// directory lands in shards/eval-shard-I/ on the merging machine.
fn download(d: &Dir, shards: u64) {
    std::fs::create_dir(d.path().join("shards")).unwrap();
    for i in 1..=shards {
        std::fs::rename(
            d.path().join(format!("out/shard-{i}")),
            d.path().join(format!("shards/eval-shard-{i}")),
        )
        .unwrap();
    }
}

/// The workflow's merge step, its step summary in step-summary.md.
fn merge_step(d: &Dir, script: &str, min_pass_rate: &str) -> Ran {
    let summary = d.path().join("step-summary.md");
    let mut m = step(
        d,
        script,
        &[
            ("MIN_PASS_RATE", min_pass_rate.to_string()),
            ("GITHUB_STEP_SUMMARY", summary.display().to_string()),
        ],
    );
    let desc = format!("merge: {m:?}");
    finish(m.spawn().expect("spawn the merge"), desc)
}

#[test]
fn the_actions_steps_run_the_example_tasks_in_three_shards_and_a_merge() {
    let _g = prelude();
    let d = Dir::new();
    let (merge_script, wf) = workflow_step("merge", "merge");
    let shards = wf["env"]["SHARDS"].as_u64().expect("env.SHARDS");
    let suite = wf["env"]["SUITE"].as_str().expect("env.SUITE");
    assert_eq!(
        suite, "examples/tasks",
        "the workflow runs the example tasks"
    );
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(suite);
    let count = std::fs::read_dir(&examples)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("task.toml").is_file())
        .count();
    let env = [
        ("SUITE", examples.display().to_string()),
        (
            "AGENT",
            wf["env"]["AGENT"].as_str().expect("env.AGENT").to_string(),
        ),
        ("ATTEMPTS", wf["env"]["ATTEMPTS"].to_string()),
        // One attempt at a time on each of the 3 "machines" (2 cores here).
        ("JOBS", "1".to_string()),
        ("SHARDS", shards.to_string()),
    ];
    action_shards(&d, &wf, &env, shards);
    download(&d, shards);
    let merged = merge_step(&d, &merge_script, "1.0");
    merged.expect_code(0);
    let r = read_json(&d.path().join("merged/report.json"), &merged);
    let t = &r["totals"];
    assert_eq!(
        t["tasks"].as_u64(),
        Some(count as u64),
        "{}",
        merged.explain()
    );
    assert_eq!(
        t["passed"].as_u64(),
        Some(count as u64),
        "{}",
        merged.explain()
    );
    let summary = std::fs::read_to_string(d.path().join("step-summary.md")).unwrap_or_default();
    assert!(summary.contains("pass rate"), "the step summary: {summary}");
}

#[test]
fn three_concurrent_shards_merge_to_the_report_of_one_unsharded_run() {
    let _g = prelude();
    let d = Dir::new();
    suite(&d.path().join("suite"));
    let (merge_script, wf) = workflow_step("merge", "merge");
    // The example's matrix is the SHARDS it says.
    let shards = wf["env"]["SHARDS"].as_u64().expect("env.SHARDS");
    let matrix: Vec<u64> = wf["jobs"]["shard"]["strategy"]["matrix"]["shard"]
        .as_array()
        .expect("matrix.shard")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(matrix, (1..=shards).collect::<Vec<_>>());
    assert_eq!(shards, 3, "this test runs the example's 3 shards");

    // The workflow's env, with this test's suite.
    let env = [
        ("SUITE", "suite".to_string()),
        ("AGENT", "oracle".to_string()),
        ("ATTEMPTS", "2".to_string()),
        ("JOBS", "1".to_string()),
        ("SHARDS", shards.to_string()),
    ];
    action_shards(&d, &wf, &env, shards);

    // One process, the whole suite.
    let whole = run(d
        .runner()
        .args([
            "eval",
            "suite",
            "--agent",
            "oracle",
            "--attempts",
            "2",
            "--jobs",
            "3",
            "--min-pass-rate",
            "0",
            "--output-dir",
            "whole",
            "--json",
            "whole.json",
        ])
        .args(crate::support::docker::runtime_args()));
    whole.expect_code(0);
    let whole_r = read_json(&d.path().join("whole.json"), &whole);

    download(&d, shards);
    let merged = merge_step(&d, &merge_script, "1.0");
    // Two tasks fail: below --min-pass-rate 1.0, as the unsharded run would be.
    merged.expect_code(1);
    let merged_r = read_json(&d.path().join("merged/report.json"), &merged);

    let (a, b) = (verdicts(&merged_r), verdicts(&whole_r));
    assert_eq!(
        a,
        b,
        "merged:\n{a:#}\nunsharded:\n{b:#}{}",
        merged.explain()
    );
    // Not equal by being empty: the suite's verdicts as written above.
    let t = &b["totals"];
    assert_eq!(
        (t["tasks"].as_u64(), t["attempts"].as_u64()),
        (Some(6), Some(12))
    );
    assert_eq!(
        (t["passed"].as_u64(), t["failed"].as_u64()),
        (Some(8), Some(4))
    );
    let echo = b["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["task"] == "echo")
        .unwrap();
    assert_eq!(echo["metrics"], json!({"correct": 1.0, "style": 0.5}));
    assert_eq!(echo["reward"], 0.5);

    // The merge says where it came from: each shard once, one suite.
    let from = merged_r["suite"]["merged_from"]
        .as_array()
        .expect("merged_from");
    let shown: Vec<&str> = from.iter().filter_map(|f| f["shard"].as_str()).collect();
    assert_eq!(shown, ["1/3", "2/3", "3/3"]);
    let whole_suite = read_json(&d.path().join("whole/suite.json"), &whole);
    assert_eq!(
        merged_r["suite"]["fingerprint"], whole_suite["fingerprint"],
        "the shards and the unsharded run are one suite"
    );
    // Each attempt's paths point at the merged copy of its run directory.
    for a in merged_r["attempts"].as_array().unwrap() {
        let dir = PathBuf::from(a["run_dir"].as_str().unwrap());
        assert!(dir.starts_with(d.path().join("shards")), "{dir:?}");
        assert!(dir.join("attempt.json").is_file(), "{dir:?}");
    }
    let xml = std::fs::read_to_string(d.path().join("merged/junit.xml")).expect("junit.xml");
    let (cases, failures, errors, _) = crate::junit::validate(&xml);
    assert_eq!((cases, failures, errors), (12, 4, 0));
    let md = std::fs::read_to_string(d.path().join("merged/summary.md")).expect("summary.md");
    assert!(md.contains("3 of 3 shards"), "{md}");
    let step_md =
        std::fs::read_to_string(d.path().join("step-summary.md")).expect("the step summary");
    assert_eq!(step_md, md, "GITHUB_STEP_SUMMARY gets the summary");
}

/// `runner eval ARGS` in `d` with the test's runtime, spawned.
fn spawn_eval(d: &Dir, args: &[&str]) -> (Child, String, u32) {
    let mut c = d.runner();
    c.arg("eval")
        .args(args)
        .args(crate::support::docker::runtime_args())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let desc = format!("{c:?}");
    let child = c.spawn().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let pid = child.id();
    (child, desc, pid)
}

#[test]
fn shards_of_different_suites_or_a_missing_shard_are_refused_with_a_hint() {
    let _g = prelude();
    let d = Dir::new();
    let root = d.path().join("suite");
    for name in ["alpha", "bravo"] {
        task(
            &root,
            name,
            &[
                ("instruction.md", "write ok to out.txt\n"),
                ("task.toml", &toml(TINY, 60, 30)),
                ("tests/test.sh", REWARD_OK),
                ("solution/solve.sh", "echo ok > out.txt\n"),
            ],
        );
    }
    // Two halves of two different suites (--attempts differs), at once.
    let base = ["suite", "--agent", "oracle"];
    let one = [&base[..], &["--shard", "1/2", "--output-dir", "s1"]].concat();
    let two = [
        &base[..],
        &["--shard", "2/2", "--attempts", "2", "--output-dir", "s2"],
    ]
    .concat();
    let started = [spawn_eval(&d, &one), spawn_eval(&d, &two)];
    for (child, desc, pid) in started {
        finish(child, desc.clone()).expect_code(0);
        assert!(leftovers(pid).is_empty(), "{desc}");
    }
    let merge = |args: &[&str]| {
        run(d
            .runner()
            .args(["eval", "merge"])
            .args(args)
            .args(["--json", "merged.json"]))
    };
    let ran = merge(&["s1", "s2"]);
    ran.expect_code(2);
    let err = ran.stderr();
    assert!(
        err.contains("is not the suite of") && err.contains("attempts_per_task 1 vs 2"),
        "{}",
        ran.explain()
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with("hint: merge only the shards of one suite")),
        "{}",
        ran.explain()
    );
    assert!(!d.path().join("merged.json").exists(), "nothing written");

    // One shard alone: refused, naming the missing one.
    let ran = merge(&["s1"]);
    ran.expect_code(2);
    assert!(
        ran.stderr().contains("shard 2 of 2 is missing")
            && ran.stderr().contains("--allow-missing"),
        "{}",
        ran.explain()
    );
    // The same shard twice.
    let ran = merge(&["s1", "./s1"]);
    ran.expect_code(2);
    assert!(ran.stderr().contains("given twice"), "{}", ran.explain());

    // Allowed: the missing shard's task is reported as not run, and the
    // pass rate is over what ran.
    let ran = merge(&["s1", "--allow-missing"]);
    ran.expect_code(0);
    let r = read_json(&d.path().join("merged.json"), &ran);
    let st: Vec<(String, String)> = r["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["task"].as_str().unwrap().to_string(),
                a["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        st,
        [
            ("alpha".to_string(), "pass".to_string()),
            ("bravo".to_string(), "interrupted".to_string())
        ]
    );
    assert_eq!(r["suite"]["missing_shards"], json!(["2/2"]));
}
