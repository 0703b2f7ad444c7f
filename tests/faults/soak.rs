//! A soak: 300 attempts of a mixed suite at `-j 4` in all: 240 by the
//! oracle (`-j 3`; trivial passes and fails, and hostile solutions: a fork
//! bomb, an output flood, a memory hog the kernel OOM-kills, orphans left
//! running) beside 60 by the nop agent (`-j 1`, the same tasks untouched),
//! with each runner's RSS, open descriptors and engine objects sampled
//! every 10 s. They stay flat, and nothing is left at the end.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::binary::{Dir, Ran};
use crate::support::docker::{containers_of_owner, runtime_args};
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

/// One sample of runner process `pid`: RSS (KiB) and open descriptors.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rss_kib: u64,
    fds: usize,
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
    Some(Sample { rss_kib, fds })
}

/// runner's temporary directories now, but kept workspaces.
fn temp_entries() -> Vec<PathBuf> {
    entries(&std::env::temp_dir(), |n| {
        n.starts_with("runner-") && !n.ends_with(".kept")
    })
}

/// A runner eval running, its output drained on a thread (a full pipe
/// would stall it).
struct Running {
    pid: u32,
    done: std::sync::mpsc::Receiver<std::io::Result<std::process::Output>>,
    out: Option<std::process::Output>,
    samples: Vec<Sample>,
}

impl Running {
    fn spawn(mut cmd: std::process::Command) -> Running {
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn runner");
        let pid = child.id();
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        Running {
            pid,
            done,
            out: None,
            samples: Vec::new(),
        }
    }

    /// Samples it while it runs; whether it has ended.
    fn poll(&mut self) -> bool {
        if self.out.is_none() {
            match self.done.try_recv() {
                Ok(out) => self.out = Some(out.expect("wait for runner")),
                Err(_) => self.samples.extend(sample(self.pid)),
            }
        }
        self.out.is_some()
    }

    fn kill(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The (task, status) pairs of `report`, and the run for messages.
fn finished(d: &Dir, r: &mut Running, report: &str, t0: Instant) -> (Vec<(String, String)>, Ran) {
    let ran = Ran {
        out: r.out.take().expect("ended"),
        desc: format!("runner eval (soak, {report})"),
        elapsed: t0.elapsed(),
    };
    let text = std::fs::read_to_string(d.path().join(report))
        .unwrap_or_else(|e| panic!("{report}: {e}{}", ran.explain()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let all = statuses(&v).into_iter().map(|(t, s, _)| (t, s)).collect();
    (all, ran)
}

/// RSS and descriptors did not grow from the first third of `samples` to
/// the last; a line for the log.
fn flat(what: &str, samples: &[Sample]) -> String {
    if samples.len() < 3 {
        return format!("{what}: {} samples, too few to compare", samples.len());
    }
    let third = (samples.len() / 3).max(1);
    let (early, late) = (&samples[..third], &samples[samples.len() - third..]);
    let max_of = |s: &[Sample], f: fn(&Sample) -> u64| s.iter().map(f).max().unwrap_or(0);
    let (rss_early, rss_late) = (max_of(early, |s| s.rss_kib), max_of(late, |s| s.rss_kib));
    let fds = |s: &Sample| s.fds as u64;
    let (fds_early, fds_late) = (max_of(early, fds), max_of(late, fds));
    assert!(
        rss_late <= rss_early + rss_early / 2 + 16 * 1024,
        "{what}: RSS grew: {samples:?}"
    );
    assert!(
        fds_late <= fds_early + 16,
        "{what}: descriptors grew: {samples:?}"
    );
    format!(
        "{what}: {} samples; RSS {} -> {} KiB (first third max {rss_early}, last third max {rss_late}); fds {} -> {} (max {fds_early} then {fds_late})",
        samples.len(),
        samples[0].rss_kib,
        samples[samples.len() - 1].rss_kib,
        samples[0].fds,
        samples[samples.len() - 1].fds,
    )
}

#[test]
fn three_hundred_mixed_attempts_at_j4_keep_rss_fds_and_objects_flat() {
    let _serial = prelude();
    let d = Dir::new();
    let tasks = suite(&d.path().join("suite"));
    let temp_before = temp_entries();
    let oracle = eval_oracle(
        &d,
        "3",
        ("--output-dir", &d.path().join("soak")),
        "soak.json",
        &["--attempts", "4"],
    );
    // The same tasks, untouched.
    let mut nop = d.runner();
    nop.args(["eval", "suite", "--agent", "nop", "-j", "1"])
        .args(["--output-dir", "nop", "--json", "nop.json"])
        .args(runtime_args());
    let t0 = Instant::now();
    let mut runs = [Running::spawn(oracle), Running::spawn(nop)];
    let mut containers = Vec::new();
    loop {
        let ended: Vec<bool> = runs.iter_mut().map(Running::poll).collect();
        if ended.iter().all(|e| *e) {
            break;
        }
        containers.push(
            runs.iter()
                .map(|r| containers_of_owner(r.pid).len())
                .sum::<usize>(),
        );
        if t0.elapsed() > DEADLINE {
            runs.iter().for_each(Running::kill);
            panic!("the soak ran past {DEADLINE:?}");
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    let [oracle, nop] = &mut runs;
    assert!(
        oracle.samples.len() >= 3,
        "the oracle's runner sampled at least 3 times: {:?}",
        oracle.samples
    );
    let (all, ran) = finished(&d, oracle, "soak.json", t0);
    assert_eq!(all.len(), tasks * 4, "{}", ran.explain());
    let count =
        |all: &[(String, String)], status: &str| all.iter().filter(|a| a.1 == status).count();
    assert_eq!(
        count(&all, "error"),
        0,
        "no attempt is an infrastructure error: {all:?}"
    );
    // By design: 30 plain passes and the orphans' 5, every attempt.
    assert_eq!(count(&all, "pass"), (30 + 5) * 4, "{all:?}");
    for a in all
        .iter()
        .filter(|a| !a.0.starts_with("plain") && !a.0.starts_with("orphans"))
    {
        assert_eq!(a.1, "fail", "a hostile solution fails: {a:?}");
    }
    let (untouched, nop_ran) = finished(&d, nop, "nop.json", t0);
    assert_eq!(untouched.len(), tasks, "{}", nop_ran.explain());
    assert_eq!(
        count(&untouched, "fail"),
        tasks,
        "every untouched task fails: {untouched:?}"
    );
    eprintln!(
        "soak: {} attempts in {:.0} s; {}; {}; containers at most {}",
        all.len() + untouched.len(),
        t0.elapsed().as_secs_f64(),
        flat("oracle", &oracle.samples),
        flat("nop", &nop.samples),
        containers.iter().max().unwrap_or(&0),
    );
    // -j 3 and -j 1 running, as many set up ahead, each a sandbox (no
    // sidecars here).
    assert!(
        containers.iter().all(|c| *c <= 8),
        "containers beyond the pools' bound: {containers:?}"
    );
    for r in &runs {
        let left = leftovers(r.pid);
        assert!(left.is_empty(), "left on the engine: {left:?}");
    }
    let temp_after = added(&temp_before, temp_entries());
    assert!(
        temp_after.is_empty(),
        "temporary directories left: {temp_after:?}"
    );
}
