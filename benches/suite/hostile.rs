//! B8: hostile commands through each tool, the way a user would meet them.
//!
//! - timeout with children: `sleep 1000 & sleep 1000` with a 2 s timeout:
//!   does the call return, and how many processes of the command (those
//!   whose command line holds `sleep 1000`: the sleeps and a shell running
//!   them) are still in the tool's container 2 s later (`docker top`, from
//!   the host);
//! - flood: a command printing 200 MB with a 60 s timeout: does the call
//!   come back (within 120 s), how long it took, the peak RSS of the
//!   tool's process, and what is left once the tool has cleaned up;
//! - state: `cd /tmp && export RB=1`, then `pwd; echo RB=$RB`: does the
//!   second command see the first one's directory and variable.
//!
//! runner's rows: its docker executor in-process for the timeout and the
//! state (the same layer as the peers' Python APIs), and the `runner`
//! binary with the scripted model for the flood (its whole process, so its
//! peak RSS includes the agent loop). Each peer runs in a driver process of
//! its own per scenario group, so one scenario's peak RSS is not another's.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use runner::exec::docker::{DockerConfig, DockerExecutor};
use runner::exec::shell::ShellMode;
use runner::exec::{ExecRequest, Executor};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::Plan;
use crate::peers::{Install, Peer, Tool, container_state};
use crate::stats::Row;
use crate::sys::{BENCH_LABEL, count_processes, docker_out, run_child};
use runner::exec::ExecutorExt;

const CHILDREN: &str = "sleep 1000 & sleep 1000";
const CHILDREN_TIMEOUT: f64 = 2.0;
const FLOOD_BYTES: u64 = 200_000_000;
const FLOOD_TIMEOUT: f64 = 60.0;
/// Past this the flood counts as not finished (and the tool is killed).
const FLOOD_DEADLINE: Duration = Duration::from_secs(120);
const STATE_SET: &str = "cd /tmp && export RB=1";
const STATE_GET: &str = "pwd; echo RB=$RB";

fn flood_command() -> String {
    format!("head -c {FLOOD_BYTES} /dev/zero | tr '\\0' a")
}

/// Whether the state command's output shows both the directory and the
/// variable of the command before.
fn carried(output: &str) -> bool {
    output.lines().any(|l| l.trim() == "/tmp") && output.contains("RB=1")
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// How long a tool's cleanup may take to reach the engine (mini-swe-agent
/// stops its container in the background: `docker stop`'s 10 s grace,
/// its `sleep` being PID 1).
const SETTLE: Duration = Duration::from_secs(20);

/// What is left of a tool's container after it cleaned up, polled for up
/// to [`SETTLE`].
fn leftover(id: &str) -> String {
    let t0 = Instant::now();
    loop {
        match container_state(id) {
            None if t0.elapsed() < Duration::from_secs(1) => return "container removed".into(),
            None => {
                return format!(
                    "container removed {:.0} s later",
                    t0.elapsed().as_secs_f64()
                );
            }
            Some(_) if t0.elapsed() < SETTLE => std::thread::sleep(Duration::from_millis(250)),
            Some(true) => return format!("container LEFT RUNNING {SETTLE:?} later"),
            Some(false) => return format!("container left (stopped) {SETTLE:?} later"),
        }
    }
}

/// runner's rows; an error is a failure of the bench.
pub async fn b8_runner(plan: &Plan, tmp: &Path) -> Result<Vec<Row>, String> {
    let mut rows = runner_timeout_and_state(plan).await?;
    rows.push(runner_flood(plan, tmp)?);
    Ok(rows)
}

/// The peers' rows; a peer that cannot run gets a row saying why.
pub fn b8_peers(plan: &Plan, install: Result<&Install, &String>) -> Vec<Row> {
    let mut rows = Vec::new();
    for tool in Tool::ALL {
        match install {
            Ok(install) => {
                rows.push(
                    peer_timeout_and_state(plan, install, tool).unwrap_or_else(|e| {
                        Row::unavailable("B8", format!("{}: timeout, state", tool.label("")), e)
                    }),
                );
                rows.push(peer_flood(plan, install, tool).unwrap_or_else(|e| {
                    Row::unavailable("B8", format!("{}: 200 MB flood", tool.label("")), e)
                }));
            }
            Err(why) => rows.push(Row::unavailable("B8", tool.label(""), why.clone())),
        }
    }
    rows
}

fn config(plan: &Plan, run_id: &str, shell: ShellMode) -> DockerConfig {
    let (k, v) = BENCH_LABEL.split_once('=').unwrap_or((BENCH_LABEL, ""));
    DockerConfig {
        image: plan.image.clone(),
        run_id: run_id.to_string(),
        labels: vec![(k.to_string(), v.to_string())],
        shell,
        ..DockerConfig::default()
    }
}

async fn exec(
    ex: &DockerExecutor,
    command: &str,
    timeout: f64,
) -> Result<(f64, String, bool), String> {
    let t0 = Instant::now();
    let out = ex
        .execute(ExecRequest {
            command: command.to_string(),
            timeout: Duration::from_secs_f64(timeout),
            max_output_bytes: 10_000,
            full_output: None,
            cancel: CancellationToken::new(),
        })
        .await
        .map_err(|e| format!("docker executor: {e}"))?;
    Ok((t0.elapsed().as_secs_f64() * 1e3, out.output, out.timed_out))
}

/// runner's executor: the timeout with children (fresh shell, the
/// default) and the state in both shell modes.
async fn runner_timeout_and_state(plan: &Plan) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for shell in [ShellMode::Fresh, ShellMode::Persistent] {
        let name = match shell {
            ShellMode::Fresh => "fresh",
            ShellMode::Persistent => "persistent",
        };
        let ex = DockerExecutor::start(config(plan, &format!("bench-b8-{name}"), shell))
            .await
            .map_err(|e| format!("starting the docker executor: {e}"))?;
        let id = ex.container_id().to_string();
        let result = async {
            exec(&ex, STATE_SET, 30.0).await?;
            let (_, out, _) = exec(&ex, STATE_GET, 30.0).await?;
            let (ms, _, timed_out) = exec(&ex, CHILDREN, CHILDREN_TIMEOUT).await?;
            std::thread::sleep(Duration::from_secs(2));
            let left = count_processes(&id, "sleep 1000")?;
            Ok::<_, String>((carried(&out), ms, timed_out, left))
        }
        .await;
        let shut = ex.shutdown().await;
        let (state, ms, timed_out, left) = result?;
        shut.map_err(|e| format!("removing the B8 sandbox: {e}"))?;
        let after = leftover(&id);
        let mut row = Row::info(
            "B8",
            format!("runner docker executor, --shell {name}"),
            format!(
                "timeout: returned after {:.1} s (timed out: {}), {left} processes of it left 2 s later; state carried over: {}; after shutdown: {after}",
                ms / 1e3,
                yes_no(timed_out),
                yes_no(state)
            ),
        );
        if shell == ShellMode::Fresh {
            row = row.target(
                "zero leftovers",
                left == 0 && timed_out && after == "container removed",
            );
        }
        rows.push(row);
    }
    Ok(rows)
}

/// runner's binary on the flood; its peak RSS from wait4, the byte count
/// from its tool_result event, and its containers left after it exits.
fn runner_flood(plan: &Plan, tmp: &Path) -> Result<Row, String> {
    let script = crate::process::script(tmp, "b8-flood.json", 1, &flood_command())?;
    let run_dir = tmp.join("b8-flood-run");
    let mut cmd = Command::new(&plan.runner_bin);
    cmd.args(["--provider", "scripted", "--script", &script, "--run-dir"])
        .arg(&run_dir)
        .args(["--executor", "docker", "--image", &plan.image, "--json"])
        .args(["--timeout", &format!("{FLOOD_TIMEOUT:.0}")])
        .arg("benchmark task")
        .env("NO_COLOR", "1");
    let r = run_child(&mut cmd, true)?;
    let text = String::from_utf8_lossy(&r.stdout);
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let run_id = events
        .iter()
        .find_map(|e| e["run_id"].as_str())
        .unwrap_or_default()
        .to_string();
    let result = events.iter().find(|e| e["type"] == "tool_result");
    let seen = result.and_then(|e| e["bytes_seen"].as_u64());
    let left = if run_id.is_empty() {
        "unknown (no run_id printed)".to_string()
    } else {
        let filter = format!("label=runner.run-id={run_id}");
        let ids = docker_out(&["ps", "-aq", "--filter", &filter])?;
        match ids.split_whitespace().count() {
            0 => "no container left".to_string(),
            n => format!("{n} containers LEFT"),
        }
    };
    let _ = std::fs::remove_dir_all(&run_dir);
    let rss_mib = r.max_rss_kib as f64 / 1024.0;
    let done = r.status.success() && seen == Some(FLOOD_BYTES);
    Ok(Row::info(
        "B8",
        "runner: 200 MB flood (the binary)",
        format!(
            "finished: {} in {:.1} s; peak RSS {rss_mib:.1} MiB; bytes counted {}; {left}; runner CPU {:.0} ms ({:.0} % of its time)",
            yes_no(done),
            r.wall_ms / 1e3,
            seen.map_or("none".into(), |b| b.to_string()),
            r.cpu_ms,
            100.0 * r.cpu_ms / r.wall_ms
        ),
    )
    .target(
        "finishes; RSS < 64 MiB; zero leftovers",
        done && rss_mib < 64.0 && left == "no container left",
    ))
}

/// A peer on the state commands, then the timeout with children.
fn peer_timeout_and_state(plan: &Plan, install: &Install, tool: Tool) -> Result<Row, String> {
    let mut p = Peer::start(install, tool, &plan.image)?;
    let label = p.label();
    let id = p.container.clone();
    p.call(STATE_SET, 30.0, Duration::from_secs(60))?;
    let got = p.call(STATE_GET, 30.0, Duration::from_secs(60))?;
    let state = got.error.is_none() && carried(&got.output);
    let t = p.call(CHILDREN, CHILDREN_TIMEOUT, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let left = count_processes(&id, "sleep 1000")
        .map_or_else(|e| format!("unknown ({e})"), |n| n.to_string());
    let timeout = match &t {
        Ok(c) => format!(
            "returned after {:.1} s ({})",
            c.ms / 1e3,
            c.error.as_deref().map_or("no error".into(), first_words)
        ),
        Err(e) => format!("did not return: {e}"),
    };
    let closed = if t.is_ok() {
        p.close()
            .map_or_else(|e| format!("close failed: {e}"), |_| "closed".into())
    } else {
        "driver killed".into()
    };
    let after = leftover(&id);
    // What the tool left is counted above, then removed: the bench's own
    // check at the end is for the bench's leaks.
    let _ = docker_out(&["rm", "-f", &id]);
    Ok(Row::info(
        "B8",
        label,
        format!(
            "timeout: {timeout}, {left} processes of it left 2 s later; state carried over: {}; {closed}, then {after}",
            yes_no(state)
        ),
    ))
}

/// A peer on the flood, in a fresh driver.
fn peer_flood(plan: &Plan, install: &Install, tool: Tool) -> Result<Row, String> {
    let mut p = Peer::start(install, tool, &plan.image)?;
    let label = format!("{}: 200 MB flood", p.label());
    let id = p.container.clone();
    let r = p.call(&flood_command(), FLOOD_TIMEOUT, FLOOD_DEADLINE);
    let note = match r {
        Ok(c) => {
            let rss = p.max_rss_kib().map_or(f64::NAN, |k| k as f64 / 1024.0);
            let done = c.error.is_none() && c.output_bytes >= FLOOD_BYTES;
            let closed = p
                .close()
                .map_or_else(|e| format!("close failed: {e}"), |_| "closed".into());
            format!(
                "finished: {} in {:.1} s ({} bytes returned{}); peak RSS {rss:.0} MiB; {closed}, then {}",
                yes_no(done),
                c.ms / 1e3,
                c.output_bytes,
                c.error
                    .as_deref()
                    .map_or(String::new(), |e| format!(", {}", first_words(e))),
                leftover(&id)
            )
        }
        Err(e) => {
            // The driver was killed: what a user gets from a hung tool.
            format!(
                "did not finish within {FLOOD_DEADLINE:?} ({e}); driver killed, then {}",
                leftover(&id)
            )
        }
    };
    let _ = docker_out(&["rm", "-f", &id]);
    Ok(Row::info("B8", label, note))
}

/// The start of an error message, for a table cell.
fn first_words(e: &str) -> String {
    let line = e.lines().next().unwrap_or_default();
    let mut s: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        s.push('…');
    }
    s
}
