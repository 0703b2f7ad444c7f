//! Finding 2: a run cannot fill the host's disk. The workspace lives in a
//! filesystem of `--disk` bytes, so writing past it fails inside the
//! sandbox with "No space left on device" while the run goes on; the
//! command outputs share a budget of the same size.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::support::binary::{Dir, Exec, Live, Ran, of_type, run};
use crate::support::serial::serial;

const LIMIT_MIB: u64 = 64;

/// Bytes the host really holds for `dir`'s files (allocated blocks).
fn allocated(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// The state directories of workspace disks owned by `pid`.
fn disks_of(pid: u32) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("runner-disk-"))
        })
        .filter(|p| {
            std::fs::read_to_string(p.join("state.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|v| v["pid"] == pid)
        })
        .collect()
}

#[test]
fn writing_three_times_the_disk_limit_stops_at_the_limit() {
    let ws = Dir::new();
    let home = Dir::new();
    ws.write("start.txt", "seed\n");
    // 3 x the limit in 4 MiB files, then the workspace is checked, then the
    // run goes on; then outputs of 3 x the limit in three commands.
    let fill = format!(
        "i=0; while [ $i -lt {} ]; do dd if=/dev/zero of=f$i bs=1M count=4 2>err || {{ cat err; break; }}; \
         i=$((i+1)); done; rm -f err; echo wrote $i files; du -sk .",
        3 * LIMIT_MIB / 4
    );
    let flood = format!("head -c {} /dev/zero | tr '\\0' x", LIMIT_MIB << 20);
    let turns = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": fill}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": "rm -f f1 f2 f3; echo still running; cat start.txt"}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": flood.clone()}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": flood.clone()}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": flood}}]},
        {"text": "done"}
    ]});
    let script = home.write("script.json", &turns.to_string());
    let run_dir = home.path().join("run");
    let mut cmd = ws.scripted(&script.display().to_string());
    cmd.env("HOME", home.path())
        .args(Exec::Docker.args())
        .args(["--workspace", ".", "--disk", &format!("{LIMIT_MIB}m")])
        .arg("--run-dir")
        .arg(&run_dir)
        .args(["--timeout", "120", "fill the disk"]);
    // Sample what the run's disk images really take on the host while it runs.
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn runner");
    let pid = child.id();
    let peak = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, seen, done) = (peak.clone(), seen.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                // The image file is all the disk takes on the host (its
                // mount point shows the same bytes again, from inside).
                let now: u64 = disks_of(pid)
                    .iter()
                    .filter_map(|d| std::fs::metadata(d.join("disk.img")).ok())
                    .map(|m| m.blocks() * 512)
                    .sum();
                if now > 0 {
                    seen.store(true, Ordering::Relaxed);
                }
                peak.fetch_max(now, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let out = child.wait_with_output().expect("runner finishes");
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let ran = Ran {
        out,
        desc: format!("{cmd:?}"),
        elapsed: Duration::ZERO,
    };
    ran.expect_code(0);
    let events = ran.events();
    let results = of_type(&events, "tool_result");
    assert_eq!(results.len(), 5, "{}", ran.explain());
    let first = results[0]["output"].as_str().unwrap_or_default();
    assert!(
        first.contains("No space left on device"),
        "the command never hit the limit: {first}"
    );
    let second = results[1]["output"].as_str().unwrap_or_default();
    assert!(
        second.contains("still running") && second.contains("seed"),
        "{second}"
    );
    let limit = LIMIT_MIB << 20;
    assert!(seen.load(Ordering::Relaxed), "no workspace disk was seen");
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= limit + (1 << 20),
        "the workspace took {peak} bytes of host disk, over the {limit}-byte limit"
    );
    // What came back to the workspace is within the limit too.
    let back = allocated(ws.path());
    assert!(back <= limit, "{back} bytes came back");
    // The outputs of 3 x the limit share one budget of the limit.
    let outputs = allocated(&run_dir.join("outputs"));
    assert!(
        outputs <= limit + (1 << 20),
        "outputs took {outputs} bytes, over the {limit}-byte budget"
    );
    let last = results[4]["full_output"].as_str().unwrap_or_default();
    let tail = std::fs::read(last).unwrap_or_default();
    let tail = String::from_utf8_lossy(&tail[tail.len().saturating_sub(200)..]).into_owned();
    assert!(tail.contains("output budget"), "no budget marker: {tail}");
    assert!(disks_of(pid).is_empty(), "the disk was left behind");
}

#[test]
fn a_bad_disk_size_is_a_usage_error() {
    let ws = Dir::new();
    let script = ws.write("s.json", r#"{"turns": [{"text": "hi"}]}"#);
    for bad in ["lots", "1m", "-5g"] {
        let mut cmd = ws.scripted(&script.display().to_string());
        cmd.args(Exec::Docker.args())
            .arg(format!("--disk={bad}"))
            .arg("x");
        let ran = run(&mut cmd);
        ran.expect_code(2);
        assert!(ran.stderr().contains("--disk"), "{}", ran.explain());
    }
}

/// A runner killed with SIGKILL cannot copy the work back itself: the disk
/// stays mounted with the work in it, and `runner gc` (like the next run's
/// start) gives it back to the workspace and removes the disk.
#[test]
fn the_work_of_a_sigkilled_run_comes_back_with_gc() {
    // Alone among the tests that take the lock: fewer sandbox starts (and
    // their sweeps) beside it.
    let _s = serial();
    let ws = Dir::new();
    let home = Dir::new();
    ws.write("start.txt", "seed\n");
    let turns = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "echo progress > progress.txt; rm start.txt; sleep 60"}}]},
        {"text": "done"}
    ]});
    let script = home.write("s.json", &turns.to_string());
    let mut cmd = ws.scripted(&script.display().to_string());
    cmd.env("HOME", home.path())
        .args(Exec::Docker.args())
        .args(["--workspace", ".", "--disk", "64m", "x"]);
    let mut live = Live::spawn(&mut cmd);
    live.wait_for("tool_call", Duration::from_secs(60));
    let pid = live.child.id();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    // Both changes made (the command may be slow to get from one to the
    // other, under gVisor).
    while !disks_of(pid)
        .iter()
        .any(|d| d.join("mnt/progress.txt").exists() && !d.join("mnt/start.txt").exists())
    {
        assert!(std::time::Instant::now() < until, "the command never wrote");
        std::thread::sleep(Duration::from_millis(50));
    }
    live.child.kill().expect("SIGKILL the runner");
    let _ = live.child.wait();
    assert!(
        !ws.path().join("progress.txt").exists(),
        "came back without gc?"
    );
    assert_eq!(disks_of(pid).len(), 1, "the disk holding the work is gone");
    // Its exit code also speaks of other runs' objects on this engine, so
    // only what it says of ours is checked. Every sandbox start sweeps dead
    // runs' disks too, so a runner started meanwhile by another test or
    // process on this host may give the work back first: then this gc has
    // nothing of ours to say, and the work must be back all the same.
    let gc = run(ws.runner().env("HOME", home.path()).arg("gc"));
    let canon = std::fs::canonicalize(ws.path()).expect("canon");
    let said = gc.stdout().contains(&format!(
        "gave a dead run's work back to {}",
        canon.display()
    ));
    if !said {
        eprintln!(
            "another runner's start-up sweep gave the work back before this gc{}",
            gc.explain()
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("progress.txt")).expect("the work came back"),
        "progress\n"
    );
    assert!(
        !ws.path().join("start.txt").exists(),
        "the deletion came back too"
    );
    assert!(disks_of(pid).is_empty(), "gc left the disk");
}

/// Files far larger than the space they take (`truncate -s 1G`, twenty
/// times: 20 GiB of apparent size in a 64 MiB disk) must not become 20 GiB
/// of zeros on the host when the work is copied back.
#[test]
fn sparse_files_past_the_limit_do_not_grow_on_the_host() {
    let ws = Dir::new();
    let home = Dir::new();
    let turns = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command":
            "for i in $(seq 1 20); do truncate -s 1000M s$i || exit 1; done; echo x >> s1; ls -l s1 | tr -s ' ' | cut -d' ' -f5"}}]},
        {"text": "done"}
    ]});
    let script = home.write("s.json", &turns.to_string());
    let mut cmd = ws.scripted(&script.display().to_string());
    cmd.env("HOME", home.path())
        .args(Exec::Docker.args())
        .args(["--workspace", ".", "--disk", &format!("{LIMIT_MIB}m"), "x"]);
    let ran = run(&mut cmd);
    ran.expect_code(0);
    let events = ran.events();
    let out = of_type(&events, "tool_result")[0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        out.contains("1048576002"),
        "the sandbox made no sparse files: {out}"
    );
    let s1 = std::fs::metadata(ws.path().join("s1")).expect("s1 came back");
    assert_eq!(s1.len(), (1000 << 20) + 2, "apparent size kept");
    let back = allocated(ws.path());
    assert!(
        back <= LIMIT_MIB << 20,
        "{back} bytes of host disk for 20 x 1000 MiB of holes{}",
        ran.explain()
    );
}
