//! Resource behaviour of the local executor through the binary: timeouts
//! kill every process a command started; a flood keeps memory bounded.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::binary::{Dir, of_type, outcome, peak_rss_kib, process_alive, run};

fn one_command(d: &Dir, cmd: &str) -> String {
    let s =
        json!([{"tool_calls": [{"name": "bash", "input": {"command": cmd}}]}, {"text": "done"}]);
    d.write("script.json", &s.to_string()).display().to_string()
}

#[test]
fn background_children_die_at_the_timeout() {
    let d = Dir::new();
    let marker = "sleep 1000.4242";
    let s = one_command(
        &d,
        &format!("{marker} & nohup {marker} > /dev/null 2>&1 & {marker}"),
    );
    let start = Instant::now();
    let r = run(d
        .scripted(&s)
        .args(["--executor", "local", "--timeout", "2", "go"]));
    let elapsed = start.elapsed();
    r.expect_code(0);
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
    let events = r.events();
    let result = of_type(&events, "tool_result")[0];
    assert_eq!(result["timed_out"], true, "{result}");
    assert!(!process_alive(marker), "no process of the command survives");
}

#[test]
fn a_1gb_flood_keeps_memory_bounded_and_counts_every_byte() {
    let d = Dir::new();
    let s = one_command(&d, "head -c 1073741824 /dev/zero");
    let mut child = d
        .scripted(&s)
        .args(["--executor", "local", "flood"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn runner");
    let pid = child.id();
    let mut peak = 0;
    let start = Instant::now();
    while child.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(120) {
        if let Some(rss) = peak_rss_kib(pid).map(|kib| kib << 10) {
            peak = peak.max(rss);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(outcome(&events), "completed");
    let result = of_type(&events, "tool_result")[0];
    assert_eq!(result["bytes_seen"], 1_073_741_824u64);
    assert!(peak > 0, "sampled the runner's memory");
    assert!(peak < 100 << 20, "peak RSS {} MiB", peak >> 20);
    eprintln!(
        "1 GiB flood: peak RSS {} KiB, {:?}",
        peak >> 10,
        start.elapsed()
    );
    // The full-output file is capped, not 1 GiB.
    let full = result["full_output"].as_str().map(std::path::PathBuf::from);
    let size = full
        .map(|p| d.path().join(p))
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    assert!(
        size > 0 && size <= (64 << 20) + 4096,
        "full output file size {size}"
    );
}
