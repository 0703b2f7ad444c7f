//! A soak: 300 attempts of a mixed suite at `-j 4` (trivial passes and
//! fails, and hostile solutions: a fork bomb, an output flood, a memory
//! hog the kernel OOM-kills, orphans left running), with runner's RSS,
//! open descriptors and engine objects sampled every 10 s. They stay flat,
//! and nothing is left at the end.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::binary::{Dir, Ran};
use crate::support::docker::containers_of_owner;
use crate::support::eval::{leftovers, prelude, statuses};
use crate::tasks::{added, answer_task, entries, eval_oracle, hostile_task};

const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Past this the suite hung.
const DEADLINE: Duration = Duration::from_secs(900);

/// 60 tasks, each attempted 5 times: 40 trivial (every fourth fails by
/// design) and 5 each of four hostile solutions (all fail but orphans).
fn suite(root: &Path) -> usize {
    for i in 0..40 {
        let answer = if i % 4 == 3 { "wrong" } else { "right" };
        answer_task(root, &format!("plain{i:02}"), "0", answer);
    }
    let hostile = [
        ("bomb", "b() { b | b & }; b; sleep 30"),
        ("flood", "head -c 5000000 /dev/zero | tr '\\0' x"),
        ("hog", "tail /dev/zero"),
        (
            "orphans",
            "sleep 1000 & (sleep 1000 &) ; setsid sleep 1000 & echo right > out.txt",
        ),
    ];
    for (kind, body) in hostile {
        for i in 0..5 {
            hostile_task(root, &format!("{kind}{i}"), body);
        }
    }
    60
}

/// One sample of runner process `pid`: RSS (KiB), open descriptors, and
/// its containers on the engine.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rss_kib: u64,
    fds: usize,
    containers: usize,
}

fn sample(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some(Sample {
        rss_kib,
        fds,
        containers: containers_of_owner(pid).len(),
    })
}

/// runner's temporary directories now, but kept workspaces.
fn temp_entries() -> Vec<PathBuf> {
    entries(&std::env::temp_dir(), |n| {
        n.starts_with("runner-") && !n.ends_with(".kept")
    })
}

#[test]
fn three_hundred_mixed_attempts_at_j4_keep_rss_fds_and_objects_flat() {
    let _serial = prelude();
    let d = Dir::new();
    let tasks = suite(&d.path().join("suite"));
    let temp_before = temp_entries();
    let out = d.path().join("soak");
    let child = eval_oracle(
        &d,
        "4",
        ("--output-dir", &out),
        "soak.json",
        &["--attempts", "5"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn runner");
    let pid = child.id();
    // Its output is read while it runs (a full pipe would stall it).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let t0 = Instant::now();
    let mut samples = Vec::new();
    let output = loop {
        samples.extend(sample(pid));
        match rx.recv_timeout(SAMPLE_EVERY) {
            Ok(out) => break out.expect("wait for runner"),
            Err(_) if t0.elapsed() > DEADLINE => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
                    nix::sys::signal::Signal::SIGKILL,
                );
                panic!("the soak ran past {DEADLINE:?}: {samples:?}");
            }
            Err(_) => {}
        }
    };
    let ran = Ran {
        out: output,
        desc: "runner eval (soak)".into(),
        elapsed: t0.elapsed(),
    };
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("soak.json"))
            .unwrap_or_else(|e| panic!("soak.json: {e}{}", ran.explain())),
    )
    .unwrap();
    let all = statuses(&r);
    assert_eq!(all.len(), tasks * 5, "{}", ran.explain());
    let count = |status: &str| all.iter().filter(|a| a.1 == status).count();
    let errors = count("error");
    assert_eq!(errors, 0, "no attempt is an infrastructure error: {all:?}");
    // By design: 30 plain passes and the orphans' 5, every attempt.
    let passes = count("pass");
    assert_eq!(passes, (30 + 5) * 5, "{all:?}");
    for a in all
        .iter()
        .filter(|a| !a.0.starts_with("plain") && !a.0.starts_with("orphans"))
    {
        assert_eq!(a.1, "fail", "a hostile solution fails: {a:?}");
    }

    assert!(samples.len() >= 3, "sampled at least 3 times: {samples:?}");
    let third = samples.len() / 3;
    let early = &samples[..third.max(1)];
    let late = &samples[samples.len() - third.max(1)..];
    let max_of = |s: &[Sample], f: fn(&Sample) -> u64| s.iter().map(f).max().unwrap_or(0);
    let (rss_early, rss_late) = (max_of(early, |s| s.rss_kib), max_of(late, |s| s.rss_kib));
    let (fds_early, fds_late) = (
        max_of(early, |s| s.fds as u64),
        max_of(late, |s| s.fds as u64),
    );
    eprintln!(
        "soak: {} attempts in {:.0} s; {} samples; RSS {} -> {} KiB (first third max {rss_early}, last third max {rss_late}); fds {} -> {} (max {fds_early} then {fds_late}); containers at most {}",
        all.len(),
        ran.elapsed.as_secs_f64(),
        samples.len(),
        samples[0].rss_kib,
        samples[samples.len() - 1].rss_kib,
        samples[0].fds,
        samples[samples.len() - 1].fds,
        samples.iter().map(|s| s.containers).max().unwrap_or(0),
    );
    assert!(
        rss_late <= rss_early + rss_early / 2 + 16 * 1024,
        "RSS grew: {samples:?}"
    );
    assert!(fds_late <= fds_early + 16, "descriptors grew: {samples:?}");
    // -j 4 running plus 4 set up ahead, each a sandbox (no sidecars here).
    assert!(
        samples.iter().all(|s| s.containers <= 8),
        "containers beyond the pool's bound: {samples:?}"
    );
    let left = leftovers(pid);
    assert!(left.is_empty(), "left on the engine: {left:?}");
    let temp_after = added(&temp_before, temp_entries());
    assert!(
        temp_after.is_empty(),
        "temporary directories left: {temp_after:?}"
    );
}
