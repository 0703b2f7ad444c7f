//! The run directory's disk fills up: the trajectory stays valid JSON
//! lines up to the fault, the run ends with an error naming the path and
//! a non-zero exit (never "completed" with events lost), and the run goes
//! on once the space is back. The eval's output directory likewise: no
//! attempt is reported with a verdict its directory does not hold, and
//! `--resume` completes the suite.

use std::path::Path;

use serde_json::{Value, json};

use crate::small_fs::SmallFs;
use crate::support::binary::{Dir, bash, read_jsonl, run, script};
use crate::support::docker::TINY;
use crate::support::eval::{prelude, statuses, task, toml};
use crate::tasks::eval_oracle;

/// A command printing 4 MB (kept whole in the run's outputs/).
const FOUR_MB: &str = "yes 0123456789abcdef0123456789abcdef | head -c 4000000";

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

#[test]
fn a_full_disk_under_the_run_directory_is_an_error_and_the_run_continues_once_space_is_back() {
    let d = Dir::new();
    let fs = SmallFs::new(8);
    let run_dir = fs.path().join("run");
    let turns: Vec<Value> = (0..6)
        .map(|_| json!({"tool_calls": [bash(FOUR_MB)]}))
        .chain([json!({"text": "done"})])
        .collect();
    let s = script(&d, json!({ "turns": turns }));
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ran = run(d
        .scripted(&s)
        .args(["--executor", "local", "--workspace"])
        .arg(&ws)
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("fill the disk"));
    let err = ran.stderr();
    assert_eq!(
        ran.code(),
        2,
        "a run that lost events must fail{}",
        ran.explain()
    );
    let trajectory = run_dir.join("trajectory.jsonl");
    // Which write meets the full disk first (an output file or the
    // trajectory) depends on the filesystem's last free blocks: either is
    // named with the fault.
    let appending = format!("cannot append to {}", trajectory.display());
    let saving = format!(
        "writing the full-output file {}",
        run_dir.join("outputs").display()
    );
    let said = err
        .lines()
        .find(|l| l.starts_with("error: the run's record is incomplete: "))
        .unwrap_or_else(|| panic!("no error line for the lost record{}", ran.explain()));
    assert!(
        (said.contains(&appending) || said.contains(&saving))
            && said.contains("No space left on device"),
        "the error names the file and the fault: {said}"
    );
    assert!(
        err.contains("hint: free space") && err.contains("runner continue"),
        "{}",
        ran.explain()
    );
    assert!(!err.contains("completed after"), "{}", ran.explain());
    // Every line parses (read_jsonl panics on a partial one); the record
    // ends at the fault, or with a run_finished that says it failed:
    // never one that calls the run whole.
    let before = read_jsonl(&trajectory);
    let kinds = types(&before);
    assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
    for end in before.iter().filter(|e| e["type"] == "run_finished") {
        assert_eq!(end["outcome"], "error", "{end}");
    }
    // --json on stdout still carried the whole run, the error included.
    let streamed = ran.events();
    let last = streamed.last().expect("events on stdout");
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["outcome"], "error");

    // The space comes back: the run goes on from its last recorded event.
    fs.grow(64);
    assert!(fs.free_bytes() > 40 << 20);
    let s2 = d.write(
        "script2.json",
        &json!({"turns": [{"text": "done now"}]}).to_string(),
    );
    let again = run(d
        .runner()
        .args([
            "continue",
            "--provider",
            "scripted",
            "--executor",
            "local",
            "--script",
        ])
        .arg(&s2)
        .arg("--workspace")
        .arg(&ws)
        .arg(&run_dir)
        .arg("go on"));
    assert_eq!(again.code(), 0, "{}", again.explain());
    let after = read_jsonl(&trajectory);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the record up to the fault is kept"
    );
    let kinds = types(&after);
    assert!(kinds.contains(&"continuation"), "{kinds:?}");
    assert_eq!(after.last().unwrap()["type"], "run_finished");
    assert_eq!(after.last().unwrap()["outcome"], "completed");
}

/// Task `name` whose solution prints `bytes` bytes and passes.
fn big_task(root: &Path, name: &str, bytes: u64) {
    task(
        root,
        name,
        &[
            ("task.toml", &toml(TINY, 60, 60)),
            ("instruction.md", "Print a lot."),
            (
                "solution/solve.sh",
                &format!(
                    "#!/bin/sh\nhead -c {bytes} /dev/zero | tr '\\0' x\necho ok > /tmp/done\n"
                ),
            ),
            (
                "tests/test.sh",
                "#!/bin/sh\nif [ -f /tmp/done ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
            ),
        ],
    );
}

#[test]
fn a_full_eval_output_directory_fails_the_suite_and_resume_completes_it() {
    let _serial = prelude();
    let d = Dir::new();
    let fs = SmallFs::new(8);
    let out = fs.path().join("out");
    let suite = d.path().join("suite");
    for i in 0..4 {
        big_task(&suite, &format!("t{i}"), 3_000_000);
    }
    let cmd = |resume: bool| {
        let flag = if resume { "--resume" } else { "--output-dir" };
        eval_oracle(&d, "1", (flag, &out), "report.json", &[])
    };
    let ran = run(&mut cmd(false));
    assert_ne!(
        ran.code(),
        0,
        "a suite that could not record must fail{}",
        ran.explain()
    );
    // Whatever attempt records exist parse and hold a verdict; none is
    // partial (attempt.json is written whole or not at all).
    let mut recorded = 0;
    for i in 0..4 {
        let p = out.join(format!("t{i}/1/attempt.json"));
        if let Ok(text) = std::fs::read_to_string(&p) {
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is partial: {e}{}", p.display(), ran.explain()));
            assert!(v["status"].is_string(), "{v}");
            recorded += 1;
        }
        let t = out.join(format!("t{i}/1/trajectory.jsonl"));
        if t.exists() {
            read_jsonl(&t);
        }
    }
    assert!(
        recorded < 4,
        "the disk was meant to fill up{}",
        ran.explain()
    );
    // The report is written beside the suite, on a disk with room: every
    // attempt without its record is an error there, never a verdict, and
    // the full disk is named.
    let text = std::fs::read_to_string(d.path().join("report.json"))
        .unwrap_or_else(|e| panic!("report.json: {e}{}", ran.explain()));
    let r: Value = serde_json::from_str(&text).unwrap();
    for a in r["attempts"].as_array().unwrap() {
        let t = a["task"].as_str().unwrap();
        if !out.join(format!("{t}/1/attempt.json")).exists() {
            assert_eq!(a["status"], "error", "{a}");
        }
    }
    assert!(
        text.contains("No space left on device"),
        "the report names the fault: {text}"
    );

    fs.grow(96);
    let resumed = run(&mut cmd(true));
    assert_eq!(resumed.code(), 0, "{}", resumed.explain());
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("report.json")).unwrap())
            .unwrap();
    let statuses: Vec<String> = statuses(&r).into_iter().map(|(_, s, _)| s).collect();
    assert_eq!(statuses, ["pass"; 4], "{}", resumed.explain());
}
