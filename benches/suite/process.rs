//! B4 and B5: the `runner` binary as a user runs it, driven by the
//! scripted model, against the same work done without runner.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::Plan;
use crate::stats::{Row, Samples};
use crate::sys::{ChildRun, run_child};

/// A script of `steps` turns, each one `bash` call of `command`.
pub fn script(dir: &Path, name: &str, steps: usize, command: &str) -> Result<String, String> {
    let turn = json!({"tool_calls": [{"name": "bash", "input": {"command": command}}]});
    let body = json!({ "turns": vec![turn; steps] });
    let path = dir.join(name);
    std::fs::write(&path, body.to_string())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path.to_string_lossy().into_owned())
}

/// Runs the runner binary with the scripted model and `extra` flags.
pub fn run_runner(
    plan: &Plan,
    script: &str,
    run_dir: &Path,
    extra: &[&str],
) -> Result<ChildRun, String> {
    let mut cmd = Command::new(&plan.runner_bin);
    cmd.args(["--provider", "scripted", "--script", script, "--run-dir"])
        .arg(run_dir)
        .args(extra)
        .arg("benchmark task")
        .env("NO_COLOR", "1");
    let r = run_child(&mut cmd, true)?;
    if !r.status.success() {
        return Err(format!(
            "{} exited {} (run dir {}); try it by hand with the same flags",
            plan.runner_bin.display(),
            r.status,
            run_dir.display()
        ));
    }
    let _ = std::fs::remove_dir_all(run_dir);
    Ok(r)
}

/// B4: harness cost per step, scripted model and local executor.
pub fn b4(plan: &Plan, tmp: &Path) -> Result<Vec<Row>, String> {
    let steps = plan.b4_steps;
    let full = script(tmp, "b4-steps.json", steps, "true")?;
    let empty = script(tmp, "b4-empty.json", 0, "true")?;
    let flags = ["--executor", "local", "--max-steps", "1000"];
    let (mut with_steps, mut startup, mut spawns, mut per_step) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    );
    let mut cpu = 0.0;
    for round in 0..plan.warmup + plan.b4_rounds {
        let a = run_runner(plan, &full, &tmp.join(format!("b4-run-{round}")), &flags)?;
        let z = run_runner(plan, &empty, &tmp.join(format!("b4-zero-{round}")), &flags)?;
        let t0 = std::time::Instant::now();
        let mut spawn_cpu = 0.0;
        for _ in 0..steps {
            let r = run_child(Command::new("bash").args(["-c", "true"]), false)?;
            if !r.status.success() {
                return Err(format!("bash -c true exited {}", r.status));
            }
            spawn_cpu += r.cpu_ms;
        }
        let peer = t0.elapsed().as_secs_f64() * 1e3;
        if round >= plan.warmup {
            with_steps.push(a.wall_ms);
            startup.push(z.wall_ms);
            spawns.push(peer);
            per_step.push((a.wall_ms - z.wall_ms - peer) / steps as f64);
            // wait4 counts the bash children runner reaped; take the
            // same spawns' CPU off to get runner's own.
            cpu += (a.cpu_ms - z.cpu_ms - spawn_cpu) / steps as f64;
        }
    }
    let n = per_step.0.len() as f64;
    let over = Row::new(
        "B4",
        "runner overhead per step above the spawn",
        "ms",
        &per_step,
    );
    let met = over.median <= 1.0;
    let over = over.target("<= 1 ms/step", met).note(format!(
        "(runner {steps} steps - runner 0 steps - {steps} spawns) / {steps}; runner's own CPU {:.2} ms/step",
        cpu / n
    ));
    Ok(vec![
        over,
        Row::new(
            "B4",
            format!("runner, {steps} steps of `true`, local"),
            "ms",
            &with_steps,
        ),
        Row::new("B4", "runner, 0 steps (start-up and exit)", "ms", &startup),
        Row::new(
            "B4",
            format!("{steps} x bash -c true, no runner"),
            "ms",
            &spawns,
        ),
    ])
}

/// What the runner's `--json` events said about the flood command.
struct FloodResult {
    bytes_seen: u64,
    duration_ms: f64,
}

fn flood_result(stdout: &[u8]) -> Result<FloodResult, String> {
    let text = String::from_utf8_lossy(stdout);
    let ev: Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "tool_result")
        .ok_or("runner printed no tool_result event")?;
    Ok(FloodResult {
        bytes_seen: ev["bytes_seen"]
            .as_u64()
            .ok_or("tool_result has no bytes_seen")?,
        duration_ms: ev["duration_ms"].as_f64().unwrap_or(f64::NAN),
    })
}

/// B5: a command that prints `plan.b5_bytes` bytes.
pub fn b5(plan: &Plan, tmp: &Path, peer: &str) -> Result<Vec<Row>, String> {
    let bytes = plan.b5_bytes;
    let command = format!("head -c {bytes} /dev/zero");
    let s = script(tmp, "b5.json", 1, &command)?;
    let flags = [
        "--executor",
        "docker",
        "--image",
        &plan.image,
        "--json",
        "--timeout",
        "600",
    ];
    let (mut whole, mut cmd_only, mut cli) =
        (Samples::default(), Samples::default(), Samples::default());
    let (mut rss_kib, mut cli_rss_kib) = (0u64, 0u64);
    let (mut cpu, mut cli_cpu) = (Samples::default(), Samples::default());
    let (mut seen, mut cli_seen) = (Vec::new(), Vec::new());
    for round in 0..plan.b5_rounds {
        let r = run_runner(plan, &s, &tmp.join(format!("b5-run-{round}")), &flags)?;
        let f = flood_result(&r.stdout)?;
        let c = run_child(
            Command::new("docker").args(["exec", peer, "sh", "-c", &command]),
            false,
        )?;
        if !c.status.success() {
            return Err(format!("docker exec flood exited {}", c.status));
        }
        whole.push(r.wall_ms);
        cmd_only.push(f.duration_ms);
        rss_kib = rss_kib.max(r.max_rss_kib);
        cpu.push(r.cpu_ms);
        cli_cpu.push(c.cpu_ms);
        seen.push(f.bytes_seen);
        cli.push(c.wall_ms);
        cli_rss_kib = cli_rss_kib.max(c.max_rss_kib);
        cli_seen.push(c.stdout_bytes);
    }
    let rss_mib = rss_kib as f64 / 1024.0;
    let exact = seen.iter().all(|b| *b == bytes);
    let cli_row = Row::new(
        "B5",
        format!("docker exec C sh -c 'head -c {bytes}' > pipe"),
        "ms",
        &cli,
    )
    .note(format!(
        "bytes read {cli_seen:?}; docker CLI peak RSS {:.1} MiB, CPU {:.0} ms",
        cli_rss_kib as f64 / 1024.0,
        cli_cpu.median()
    ));
    let row = Row::new(
        "B5",
        "runner: the command (tool_result duration)",
        "ms",
        &cmd_only,
    )
    .versus(&cli_row);
    // Throughput >= 1.5x the CLI's: at most 1/1.5 of its time.
    let fast = row.ratio.is_some_and(|r| r <= 1.0 / 1.5);
    let row = row
        .target(
            "RSS < 64 MiB; exact byte count; >= 1.5x CLI throughput",
            rss_mib < 64.0 && exact && fast,
        )
        .note(format!(
            "runner peak RSS {rss_mib:.1} MiB, CPU {:.0} ms (whole run); bytes_seen {seen:?} (expected {bytes}); {:.0} MiB/s",
            cpu.median(),
            bytes as f64 / (1 << 20) as f64 / (cmd_only.median() / 1e3)
        ));
    let whole_row = Row::new(
        "B5",
        "runner: whole run (sandbox start to removal)",
        "ms",
        &whole,
    );
    Ok(vec![row, whole_row, cli_row])
}
