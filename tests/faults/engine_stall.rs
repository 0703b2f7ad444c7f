//! The engine stalls mid-suite (dockerd SIGSTOPped for 20 s, then
//! continued): runner never hangs past its timeouts, an attempt the stall
//! broke is an infrastructure error that `--retry-errors` runs again, the
//! suite ends with the verdicts of an undisturbed run, and nothing of it
//! is left on the engine after `runner gc`.
//!
//! The test owns the engine for those 20 s (on CI nothing else runs
//! then: the faults binary takes the eval lock, and binaries run one
//! after the other); the engine is continued on every exit path.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::binary::{Dir, Ran, run};
use crate::support::eval::{leftovers, prelude, statuses};
use crate::tasks::{answer_task, eval_oracle};

/// How long the engine is stopped.
const STALL: Duration = Duration::from_secs(20);
/// The suite's whole run may take this long, the stall included; past it
/// runner hung.
const DEADLINE: Duration = Duration::from_secs(240);

/// The pid of the engine answering on /var/run/docker.sock.
fn engine_pid() -> Pid {
    let text = std::fs::read_to_string("/var/run/docker.pid")
        .expect("/var/run/docker.pid: this test stops the machine's own dockerd");
    Pid::from_raw(text.trim().parse().expect("a pid in /var/run/docker.pid"))
}

/// Keeps the engine stopped; continues it when dropped (a failing
/// assertion included).
struct Stopped(Pid);

impl Stopped {
    fn new(pid: Pid) -> Stopped {
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP dockerd");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// Six tasks whose solution takes `secs` seconds; t1 and t4 fail by
/// design (their test wants another answer).
fn suite(root: &Path, secs: u32) {
    for i in 0..6 {
        let answer = if i % 3 == 1 { "wrong" } else { "right" };
        answer_task(root, &format!("t{i}"), &secs.to_string(), answer);
    }
}

fn eval(d: &Dir, out: &str) -> std::process::Command {
    let report = format!("{out}.json");
    let extra = ["--retry-errors", "2"];
    eval_oracle(d, "2", ("--output-dir", Path::new(out)), &report, &extra)
}

fn verdicts(d: &Dir, out: &str, ran: &Ran) -> Vec<(String, String)> {
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

#[test]
fn a_stalled_engine_costs_time_not_verdicts_and_leaves_nothing() {
    let _serial = prelude();
    let d = Dir::new();
    suite(&d.path().join("suite"), 3);
    let calm = run(&mut eval(&d, "calm"));
    let expected = verdicts(&d, "calm", &calm);
    assert_eq!(
        expected.iter().filter(|(_, s)| s == "pass").count(),
        4,
        "{}",
        calm.explain()
    );

    let engine = engine_pid();
    let mut child = eval(&d, "stalled")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn runner");
    let pid = child.id();
    // Stalled once the first attempts are in their agent phase.
    let first = d.path().join("stalled/t0/1/trajectory.jsonl");
    let t0 = Instant::now();
    while !first.exists() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(first.exists(), "the first attempt started within 60 s");
    std::thread::sleep(Duration::from_millis(500));
    let stopped = Instant::now();
    {
        let _stall = Stopped::new(engine);
        std::thread::sleep(STALL);
    }
    let stalled_for = stopped.elapsed();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the suite was still running when the engine came back (else nothing was stalled)"
    );
    let out = loop {
        if let Some(_status) = child.try_wait().unwrap() {
            break child.wait_with_output().unwrap();
        }
        if t0.elapsed() > DEADLINE {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "runner still ran {DEADLINE:?} after it started (hung on the stalled engine)\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let ran = Ran {
        out,
        desc: format!("runner eval (stalled {stalled_for:?})"),
        elapsed: t0.elapsed(),
    };
    assert_eq!(verdicts(&d, "stalled", &ran), expected, "{}", ran.explain());
    assert_eq!(ran.code(), calm.code(), "{}", ran.explain());

    let gc = run(d.runner().args(["gc"]));
    assert_eq!(gc.code(), 0, "{}", gc.explain());
    let left = leftovers(pid);
    assert!(left.is_empty(), "left on the engine: {left:?}");
}
