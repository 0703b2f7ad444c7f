//! A small suite interrupted by an infrastructure fault mid-agent-phase
//! (the engine stalled, restarted, its connection cut): its tasks, the
//! `runner eval` command with retries, a run with the fault injected, and
//! the verdicts read back to compare with an undisturbed run.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::binary::{Dir, Ran};
use crate::support::eval::statuses;
use crate::tasks::{answer_task, eval_oracle};

/// The suite's whole run may take this long, the fault included; past it
/// runner hung.
const DEADLINE: Duration = Duration::from_secs(300);

/// Six tasks under `root` whose solution takes `secs` seconds; t1 and t4
/// fail by design (their test wants another answer).
pub fn suite(root: &Path, secs: u32) {
    for i in 0..6 {
        let answer = if i % 3 == 1 { "wrong" } else { "right" };
        answer_task(root, &format!("t{i}"), &secs.to_string(), answer);
    }
}

/// `runner eval suite -j 2 --retry-errors 2` and `extra` into `out/`,
/// its JSON report at `out.json`.
pub fn eval(d: &Dir, out: &str, extra: &[&str]) -> Command {
    let report = format!("{out}.json");
    let mut flags = vec!["--retry-errors", "2"];
    flags.extend(extra);
    eval_oracle(d, "2", ("--output-dir", Path::new(out)), &report, &flags)
}

/// Runs `cmd` (an [`eval`] into `calm/`) undisturbed; the verdicts a
/// disturbed run must end with (four passes, two fails by design).
pub fn undisturbed(d: &Dir, mut cmd: Command) -> (Ran, Vec<(String, String)>) {
    let calm = crate::support::binary::run(&mut cmd);
    let expected = verdicts(d, "calm", &calm);
    let passes = expected.iter().filter(|(_, s)| s == "pass").count();
    assert_eq!(passes, 4, "{}", calm.explain());
    (calm, expected)
}

/// The (task, status) pairs of the report `out.json`, sorted.
pub fn verdicts(d: &Dir, out: &str, ran: &Ran) -> Vec<(String, String)> {
    let p = d.path().join(format!("{out}.json"));
    let text =
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}{}", ran.explain()));
    let r: Value = serde_json::from_str(&text).unwrap();
    let mut v: Vec<(String, String)> = statuses(&r)
        .into_iter()
        .map(|(task, status, _)| (task, status))
        .collect();
    v.sort();
    v
}

/// Runs `cmd` (an [`eval`] into `out/`), calls `fault` once the first
/// attempt is in its agent phase, and waits for runner to end; runner
/// must still be running when `fault` returns (else nothing was
/// disturbed) and must end within [`DEADLINE`]. Returns the run and
/// runner's pid.
pub fn with_fault(d: &Dir, mut cmd: Command, out: &str, fault: impl FnOnce()) -> (Ran, u32) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn runner");
    let pid = child.id();
    // Output is drained while it runs: a full pipe would stall runner.
    let out_thread = drain(child.stdout.take());
    let err_thread = drain(child.stderr.take());
    let first = d.path().join(out).join("t0/1/trajectory.jsonl");
    let t0 = Instant::now();
    while !first.exists() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(first.exists(), "the first attempt started within 60 s");
    std::thread::sleep(Duration::from_millis(500));
    let faulted = Instant::now();
    fault();
    let fault_took = faulted.elapsed();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the suite was still running when the fault ended (else nothing was disturbed)"
    );
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let err = err_thread.join().unwrap_or_default();
            panic!(
                "runner still ran {DEADLINE:?} after it started (hung on the fault)\n{}",
                String::from_utf8_lossy(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let ran = Ran {
        out: std::process::Output {
            status,
            stdout: out_thread.join().unwrap_or_default(),
            stderr: err_thread.join().unwrap_or_default(),
        },
        desc: format!("runner eval (fault for {fault_took:?})"),
        elapsed: t0.elapsed(),
    };
    (ran, pid)
}

/// Reads `r` to its end on a thread of its own.
fn drain<R: std::io::Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        buf
    })
}

/// The errors of the tries that `--retry-errors` ran again, from the
/// report `out.json`.
pub fn retried(d: &Dir, out: &str) -> Vec<String> {
    let p = d.path().join(format!("{out}.json"));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    r["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["earlier_tries"].as_array().cloned().unwrap_or_default())
        .map(|t| t["error"].as_str().unwrap_or_default().to_string())
        .collect()
}
