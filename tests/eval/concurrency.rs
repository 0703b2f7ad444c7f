//! Bounded concurrency: 20 tasks with --jobs 4 against --jobs 1, the
//! warm pool (sandboxes started ahead, none left after SIGKILL), and
//! Ctrl-C in the middle of a suite.

use std::time::{Duration, Instant};

use crate::support::binary::{Dir, Ran};
use crate::support::docker::{TINY, containers_of_owner};
use crate::support::eval::{
    assert_clean, eval_cmd, leftovers, prelude, report, run_with_pid, statuses, task, toml,
};

/// test.sh of the fixtures: reward 1 when the agent wrote `ok`.
const REWARD_OK: &str =
    "if grep -qx ok /workspace/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

/// 20 tasks whose solution takes `work` seconds.
fn twenty(d: &Dir, work: &str) {
    for i in 0..20 {
        task(
            &d.path().join("suite"),
            &format!("t{i:02}"),
            &[
                ("instruction.md", "write ok to out.txt\n"),
                ("task.toml", &toml(TINY, 60, 30)),
                ("tests/test.sh", REWARD_OK),
                (
                    "solution/solve.sh",
                    &format!("sleep {work}\necho ok > out.txt\n"),
                ),
            ],
        );
    }
}

#[test]
fn four_jobs_finish_twenty_tasks_clearly_faster_than_one() {
    let _g = prelude();
    let d = Dir::new();
    twenty(&d, "1");
    let mut secs = Vec::new();
    for jobs in ["1", "4"] {
        let _ = std::fs::remove_dir_all(d.path().join("runs"));
        let (ran, pid) = run_with_pid(eval_cmd(
            &d,
            &["suite", "--agent", "oracle", "--jobs", jobs],
        ));
        ran.expect_code(0);
        assert_clean(pid, &ran.desc);
        let r = report(&d, &ran);
        assert_eq!(statuses(&r).len(), 20);
        assert_eq!(r["totals"]["passed"], 20, "{}", ran.explain());
        eprintln!(
            "--jobs {jobs}: 20 tasks in {:.1}s",
            ran.elapsed.as_secs_f64()
        );
        // The warm pool: each next sandbox starts while an attempt's 1 s
        // solution runs, so (beyond the first --jobs, started cold) slots
        // do not wait for sandboxes.
        let wait = &r["totals"]["sandbox_wait"];
        assert_eq!(wait["attempts"], 20, "{wait}");
        if jobs == "1" {
            let warm = wait["warm"].as_u64().expect("warm");
            assert!(
                warm >= 16,
                "only {warm} of 20 sandboxes were ready ahead: {wait}"
            );
            assert!(
                ran.stderr().contains("ready before their turn (warm pool)"),
                "{}",
                ran.explain()
            );
        }
        secs.push(ran.elapsed.as_secs_f64());
    }
    assert!(
        secs[1] < secs[0] * 0.6,
        "--jobs 4 took {:.1}s, --jobs 1 {:.1}s",
        secs[1],
        secs[0]
    );
}

#[test]
fn sigint_mid_suite_stops_cleans_up_writes_reports_and_exits_130() {
    let _g = prelude();
    let d = Dir::new();
    twenty(&d, "30");
    let mut cmd = eval_cmd(&d, &["suite", "--agent", "oracle", "--jobs", "4"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("spawn runner");
    let pid = child.id();
    // Wait until the first four attempts are in their agent phase.
    let start = Instant::now();
    let mut started;
    loop {
        started = (0..20)
            .filter(|i| {
                d.path()
                    .join(format!("runs/eval/t{i:02}/1/trajectory.jsonl"))
                    .exists()
            })
            .count();
        if started >= 4 || start.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        started >= 4,
        "only {started} attempts started within 60 s: the interrupt would test nothing running"
    );
    std::thread::sleep(Duration::from_secs(2));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits i32")),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("send SIGINT");
    let t = Instant::now();
    let out = child.wait_with_output().expect("wait");
    let ran = Ran {
        out,
        desc: "runner eval suite --jobs 4 (SIGINT)".into(),
        elapsed: t.elapsed(),
    };
    ran.expect_code(130);
    assert!(
        ran.elapsed < Duration::from_secs(30),
        "stopped promptly: {:?}",
        ran.elapsed
    );
    assert_clean(pid, &ran.desc);
    let r = report(&d, &ran);
    let st = statuses(&r);
    assert_eq!(st.len(), 20, "every attempt is in the report: {st:?}");
    assert!(st.iter().all(|(_, s, _)| s == "interrupted"), "{st:?}");
    assert_eq!(r["suite"]["interrupted"], true);
    let xml = std::fs::read_to_string(d.path().join("junit.xml")).expect("junit.xml");
    let (cases, _, errors, skipped) = crate::junit::validate(&xml);
    assert_eq!((cases, errors, skipped), (20, 0, 20));
}

/// With --jobs 2, the next two attempts' sandboxes start while two run:
/// the runner has 4 sandboxes at once, never more; SIGKILLed then, it
/// leaves none of them (each is tied to it by its lifeline).
#[test]
fn the_pool_starts_the_next_sandboxes_ahead_and_a_sigkill_leaves_none() {
    let _g = prelude();
    let d = Dir::new();
    twenty(&d, "20");
    let mut cmd = eval_cmd(&d, &["suite", "--agent", "oracle", "--jobs", "2"]);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("spawn runner");
    let pid = child.id();
    let start = Instant::now();
    let (mut most, mut seen) = (0, Vec::new());
    while start.elapsed() < Duration::from_secs(90) {
        let n = containers_of_owner(pid).len();
        most = most.max(n);
        seen.push(n);
        if n >= 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A little longer: the pool must not grow past --jobs places.
    for _ in 0..10 {
        let n = containers_of_owner(pid).len();
        most = most.max(n);
        seen.push(n);
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().expect("SIGKILL runner");
    let _ = child.wait();
    assert_eq!(
        most, 4,
        "2 running and 2 started ahead, never more (sandboxes seen: {seen:?})"
    );
    let start = Instant::now();
    while !leftovers(pid).is_empty() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_clean(
        pid,
        "runner eval --jobs 2 killed with SIGKILL while 2 sandboxes waited in its pool",
    );
}
