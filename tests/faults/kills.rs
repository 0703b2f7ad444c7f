//! runner killed again and again, by SIGKILL and by the kernel's OOM
//! killer (every fifth kill): a 50-attempt suite killed 20 times at
//! scattered moments, each kill followed by `--resume`, ends with the
//! verdicts of an undisturbed run; after `runner gc` nothing of the dead
//! runners is left, on the engine or in the temporary directories.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::memcg::MemCgroup;
use crate::support::binary::{Dir, Ran, run};
use crate::support::eval::{leftovers, prelude, statuses};
use crate::tasks::{added, answer_task, entries, eval_oracle};

const TASKS: usize = 50;
const KILLS: usize = 20;
/// Every fifth kill (of those that find runner running) is the kernel's
/// OOM killer's.
const OOM_EVERY: usize = 5;

/// 50 quick tasks; every fifth fails by design.
fn suite(root: &Path) {
    for i in 0..TASKS {
        let answer = if i % 5 == 3 { "wrong" } else { "right" };
        answer_task(root, &format!("t{i:02}"), &format!("0.{}", i % 4), answer);
    }
}

fn eval(d: &Dir, flag: &str, out: &str, report: &str) -> Command {
    eval_oracle(d, "2", (flag, Path::new(out)), report, &[])
}

fn verdicts(d: &Dir, report: &str, ran: &Ran) -> Vec<(String, String, Option<f64>)> {
    let p = d.path().join(report);
    let text =
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}{}", ran.explain()));
    let r: Value = serde_json::from_str(&text).unwrap();
    statuses(&r)
}

/// A fixed, scattered sequence of waits (ms) before each kill: a linear
/// congruential generator, so a failure replays the same kills.
fn waits() -> Vec<u64> {
    let mut x: u64 = 0x2545_f491;
    (0..KILLS)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            150 + (x >> 33) % 2_500
        })
        .collect()
}

/// Entries of runner's temporary directories owned by `pid` (named
/// `<kind>-<pid>.<start>-<random>`: `runner-ws-`, `runner-seed-`, a
/// channel's `ch-` ...).
fn temp_dirs_of(pid: u32) -> Vec<PathBuf> {
    let owner = format!("-{pid}.");
    let mine = |name: &str| {
        (name.starts_with("runner-") || name.starts_with("ch-")) && name.contains(&owner)
    };
    let mut found = entries(&std::env::temp_dir(), mine);
    found.extend(entries(Path::new("/run/runner"), mine));
    found
}

/// runner's `--disk` state directories now (their owner is inside).
fn disks() -> Vec<PathBuf> {
    entries(&std::env::temp_dir(), |n| n.starts_with("runner-disk-"))
}

/// Has the kernel's OOM killer kill runner: it is moved into a memory
/// cgroup of 1 MiB; it must die of SIGKILL within 30 s, counted as an OOM
/// kill by the cgroup.
fn oom_kill(child: &mut Child) {
    let cg = MemCgroup::new("runner-test-oom");
    cg.confine(child.id());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "runner outlived a 1 MiB memory limit for 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.signal(),
        Some(9),
        "runner died of SIGKILL: {status:?}"
    );
    assert!(cg.oom_kills() >= 1, "the cgroup counts an OOM kill");
}

#[test]
fn twenty_kills_and_resumes_end_with_the_verdicts_of_an_undisturbed_run() {
    let _serial = prelude();
    let d = Dir::new();
    suite(&d.path().join("suite"));
    let disks_before = disks();
    let calm = run(&mut eval(&d, "--output-dir", "calm", "calm.json"));
    let expected = verdicts(&d, "calm.json", &calm);
    assert_eq!(expected.len(), TASKS, "{}", calm.explain());

    let mut killed = Vec::new();
    let mut oom_killed = 0;
    for (i, wait) in waits().into_iter().enumerate() {
        let flag = if i == 0 { "--output-dir" } else { "--resume" };
        let mut child = eval(&d, flag, "cut", "cut.json")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn runner");
        std::thread::sleep(Duration::from_millis(wait));
        // A run that already ended is not a kill: the rest resume anyway.
        if child.try_wait().unwrap().is_none() {
            if killed.len() % OOM_EVERY == OOM_EVERY - 1 {
                oom_kill(&mut child);
                oom_killed += 1;
            } else {
                child.kill().expect("SIGKILL runner");
            }
            killed.push(child.id());
        }
        let _ = child.wait();
    }
    assert!(
        killed.len() >= KILLS / 2,
        "most runs were killed mid-suite ({} of {KILLS})",
        killed.len()
    );
    assert!(
        oom_killed >= 2,
        "at least 2 runs were OOM-killed ({oom_killed})"
    );
    eprintln!(
        "{} of {KILLS} runs killed mid-suite, {oom_killed} of them by the OOM killer",
        killed.len()
    );
    let done = run(&mut eval(&d, "--resume", "cut", "cut.json"));
    assert_eq!(
        verdicts(&d, "cut.json", &done),
        expected,
        "{}",
        done.explain()
    );
    assert_eq!(done.code(), calm.code(), "{}", done.explain());

    let gc = run(d.runner().args(["gc"]));
    assert_eq!(gc.code(), 0, "{}", gc.explain());
    for pid in &killed {
        let objects = leftovers(*pid);
        assert!(
            objects.is_empty(),
            "left by killed runner {pid}: {objects:?}"
        );
        let dirs = temp_dirs_of(*pid);
        assert!(
            dirs.is_empty(),
            "temporary directories of killed runner {pid}: {dirs:?}"
        );
    }
    let new_disks = added(&disks_before, disks());
    assert!(
        new_disks.is_empty(),
        "disks of killed runners: {new_disks:?}"
    );
}
