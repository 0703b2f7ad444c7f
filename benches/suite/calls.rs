//! B9: a tool call as a user meets it. runner's binary, the scripted model
//! and the docker executor, N calls of `true` minus the same with one call,
//! per call: the loop, trajectory and rendering around each call included,
//! the sandbox's start and removal subtracted. Against the Python peers
//! doing the same N calls through their own APIs in a warm environment
//! (their start-up is outside their calls too).

use std::path::Path;
use std::time::Duration;

use crate::Plan;
use crate::peers::{Install, Peer, Tool};
use crate::process::{run_runner, script};
use crate::stats::{Row, Samples};

/// Longest a peer's single `true` may take before the bench gives up on it.
const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// One peer's B9 side: its driver, the per-call means of its rounds, and
/// why it stopped if it failed.
struct PeerSide {
    peer: Peer,
    per_call: Samples,
    failed: Option<String>,
}

impl PeerSide {
    /// `calls` calls of `true`; the mean of the tool's own wall times.
    fn round(&mut self, calls: usize) {
        if self.failed.is_some() {
            return;
        }
        let mut total = 0.0;
        for _ in 0..calls {
            match self.peer.call("true", 10.0, CALL_DEADLINE) {
                Ok(c) if c.error.is_none() && c.exit_code == Some(0) => total += c.ms,
                Ok(c) => {
                    self.failed = Some(format!(
                        "a call of `true` failed: exit {:?}, {}",
                        c.exit_code,
                        c.error.unwrap_or_default()
                    ));
                    return;
                }
                Err(e) => {
                    self.failed = Some(e);
                    return;
                }
            }
        }
        self.per_call.push(total / calls as f64);
    }
}

/// B9, with the peers when `install` found them.
pub fn b9(plan: &Plan, tmp: &Path, install: Result<&Install, &String>) -> Result<Vec<Row>, String> {
    let calls = plan.b9_calls;
    let many = script(tmp, "b9-many.json", calls, "true")?;
    let one = script(tmp, "b9-one.json", 1, "true")?;
    let max_steps = (calls + 10).to_string();
    let flags = [
        "--executor",
        "docker",
        "--image",
        &plan.image,
        "--max-steps",
        &max_steps,
    ];
    let mut rows = Vec::new();
    let mut sides: Vec<PeerSide> = Vec::new();
    for tool in [Tool::Mini, Tool::SwerexExec, Tool::SwerexSession] {
        let started = match install {
            Ok(i) => Peer::start(i, tool, &plan.image),
            Err(e) => Err(e.clone()),
        };
        match started {
            Ok(peer) => sides.push(PeerSide {
                peer,
                per_call: Samples::default(),
                failed: None,
            }),
            Err(e) => rows.push(Row::unavailable("B9", tool.label(""), e)),
        }
    }
    let (mut per_call, mut whole, mut single, mut cpu) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        0.0,
    );
    for round in 0..plan.warmup + plan.b9_rounds {
        let a = run_runner(plan, &many, &tmp.join(format!("b9-many-{round}")), &flags)?;
        let z = run_runner(plan, &one, &tmp.join(format!("b9-one-{round}")), &flags)?;
        let keep = round >= plan.warmup;
        for side in &mut sides {
            let before = side.per_call.0.len();
            side.round(calls);
            if !keep && side.per_call.0.len() > before {
                side.per_call.0.pop();
            }
        }
        if keep {
            whole.push(a.wall_ms);
            single.push(z.wall_ms);
            per_call.push((a.wall_ms - z.wall_ms) / (calls - 1) as f64);
            cpu += (a.cpu_ms - z.cpu_ms) / (calls - 1) as f64;
        }
    }
    let mut peer_rows = Vec::new();
    for side in sides {
        let label = side.peer.label();
        let start_ms = side.peer.start_ms;
        let container = side.peer.container.clone();
        let _ = side.peer.close();
        // mini-swe-agent removes its container in the background after
        // close: a tool that leaves one is B8's finding, not a leak here.
        let _ = crate::sys::docker_out(&["rm", "-f", &container]);
        match side.failed {
            Some(e) => rows.push(Row::unavailable("B9", label, e)),
            None => peer_rows.push((
                label.clone(),
                Row::new("B9", label, "ms", &side.per_call).note(format!(
                    "{calls} calls of `true` through the tool's API in a warm environment (up in {start_ms:.0} ms), mean per call in its Python process"
                )),
            )),
        }
    }
    let n = per_call.0.len().max(1) as f64;
    let mut row = Row::new(
        "B9",
        format!("runner binary, docker executor, per call of {calls}"),
        "ms",
        &per_call,
    );
    let swerex: Vec<&Row> = peer_rows
        .iter()
        .filter(|(l, _)| l.starts_with("SWE-ReX"))
        .map(|(_, r)| r)
        .collect();
    let fastest_swerex = swerex
        .iter()
        .min_by(|a, b| a.median.total_cmp(&b.median))
        .copied();
    if let Some(p) = fastest_swerex {
        row = row.versus(p);
    }
    let below_swerex = fastest_swerex.map(|p| row.median < p.median);
    let met = row.median <= 5.0 && below_swerex.unwrap_or(false);
    let versus = match fastest_swerex {
        Some(p) => format!("ratio against {}", p.side),
        None => "SWE-ReX not measured (run `make bench-peers` to install it)".into(),
    };
    row = row
        .target("<= 5 ms per call; below SWE-ReX", met)
        .note(format!(
            "(runner {calls} calls - runner 1 call) / {}; runner's own CPU {:.2} ms/call (wait4, the supervisor in the sandbox not included); {versus}",
            calls - 1,
            cpu / n
        ));
    rows.push(row);
    rows.push(Row::new(
        "B9",
        format!("runner binary, {calls} calls of `true`, docker"),
        "ms",
        &whole,
    ));
    rows.push(Row::new(
        "B9",
        "runner binary, 1 call (sandbox start, call, removal)",
        "ms",
        &single,
    ));
    let runner_median = rows.iter().find(|r| r.target.is_some()).map(|r| r.median);
    rows.extend(peer_rows.into_iter().map(|(_, mut r)| {
        r.ratio = runner_median.map(|m| m / r.median);
        r.note = format!("runner/this peer in the ratio column; {}", r.note);
        r
    }));
    Ok(rows)
}
