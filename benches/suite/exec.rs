//! B1, B2, B6: the docker executor in-process against the docker CLI.

use std::process::Command;
use std::time::{Duration, Instant};

use runner::exec::docker::{DockerConfig, DockerExecutor};
use runner::exec::{ExecOutput, ExecRequest, Executor};
use tokio_util::sync::CancellationToken;

use crate::Plan;
use crate::peers::{Peer, SWEREX_IMAGE, Tool};
use crate::stats::{Row, Samples};
use crate::sys::{
    BENCH_LABEL, count_processes, docker_out, engine_cpu_ms, run_child, self_cpu_ms,
    start_peer_container,
};
use runner::exec::ExecutorExt;

/// The command B6 kills: sleeps in the foreground, in the background, in a
/// subshell and in a session of their own.
pub const KILL_COMMAND: &str =
    "sleep 600 & setsid sleep 600 & sh -c 'sleep 600 & wait' & sleep 600";
/// B6's per-command timeout.
const KILL_TIMEOUT: Duration = Duration::from_secs(1);

fn config(plan: &Plan, run_id: &str) -> DockerConfig {
    let (k, v) = BENCH_LABEL.split_once('=').unwrap_or((BENCH_LABEL, ""));
    DockerConfig {
        image: plan.image.clone(),
        run_id: run_id.to_string(),
        labels: vec![(k.to_string(), v.to_string())],
        ..DockerConfig::default()
    }
}

fn request(command: &str, timeout: Duration) -> ExecRequest {
    ExecRequest {
        command: command.to_string(),
        timeout,
        max_output_bytes: 10_000,
        full_output: None,
        cancel: CancellationToken::new(),
    }
}

async fn run(ex: &DockerExecutor, command: &str, timeout: Duration) -> Result<ExecOutput, String> {
    ex.execute(request(command, timeout))
        .await
        .map_err(|e| format!("docker executor: {e}"))
}

fn ok(r: &crate::sys::ChildRun, what: &str) -> Result<(), String> {
    if r.status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed: {}", r.status))
    }
}

/// The row label of runner's executor on `runtime` (`None`: the engine's
/// default, runc here).
pub fn runner_side(runtime: Option<&str>) -> String {
    match runtime {
        None => "runner docker executor".to_string(),
        Some(r) => format!("runner docker executor on {r}"),
    }
}

/// B1: one `true` in a warm sandbox: runner's executor (on each of
/// `runtimes`), the docker CLI, bash on the host and each started peer,
/// interleaved call by call.
pub async fn b1(
    plan: &Plan,
    peer: &str,
    runtimes: &[Option<String>],
    peers: &mut [Peer],
) -> Result<Vec<Row>, String> {
    let mut executors = Vec::new();
    for (i, rt) in runtimes.iter().enumerate() {
        let mut cfg = config(plan, &format!("bench-b1-{i}"));
        cfg.runtime = rt.clone();
        match DockerExecutor::start(cfg).await {
            Ok(ex) => executors.push((rt.as_deref(), ex)),
            Err(e) => {
                for (_, ex) in executors {
                    let _ = ex.shutdown().await;
                }
                return Err(format!("starting the docker executor on {rt:?}: {e}"));
            }
        }
    }
    let result = b1_rounds(plan, peer, &executors, peers).await;
    let mut shut = Ok(());
    for (_, ex) in executors {
        if let Err(e) = ex.shutdown().await {
            shut = Err(format!("removing a B1 sandbox: {e}"));
        }
    }
    let rows = result?;
    shut?;
    Ok(rows)
}

/// Per-side samples and CPU of B1.
#[derive(Default)]
struct Side {
    ms: Samples,
    own_cpu: f64,
    engine_cpu: f64,
}

async fn b1_rounds(
    plan: &Plan,
    peer: &str,
    executors: &[(Option<&str>, DockerExecutor)],
    peers: &mut [Peer],
) -> Result<Vec<Row>, String> {
    let mut ids: Vec<String> = executors
        .iter()
        .map(|(_, ex)| ex.container_id().to_string())
        .collect();
    ids.push(peer.to_string());
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let engine = || engine_cpu_ms(&ids);
    let mut runner: Vec<Side> = executors.iter().map(|_| Side::default()).collect();
    let (mut cli, mut local) = (Side::default(), Samples::default());
    let mut others: Vec<Samples> = peers.iter().map(|_| Samples::default()).collect();
    for round in 0..plan.warmup + plan.b1_rounds {
        let keep = round >= plan.warmup;
        for ((_, ex), side) in executors.iter().zip(runner.iter_mut()) {
            // Engine first: scanning /proc must not count as runner CPU.
            let d0 = engine();
            let (cpu0, t0) = (self_cpu_ms(), Instant::now());
            let out = run(ex, "true", Duration::from_secs(30)).await?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let cpu = self_cpu_ms() - cpu0;
            if out.exit_code != Some(0) {
                return Err(format!("`true` in the sandbox exited {:?}", out.exit_code));
            }
            let d1 = engine();
            if keep {
                side.ms.push(ms);
                side.own_cpu += cpu;
                side.engine_cpu += d1 - d0;
            }
        }
        let d1 = engine();
        let c = run_child(
            Command::new("docker").args(["exec", peer, "bash", "-lc", "true"]),
            false,
        )?;
        ok(&c, "docker exec")?;
        let d2 = engine();
        let l = run_child(Command::new("bash").args(["-c", "true"]), false)?;
        ok(&l, "bash -c true")?;
        for (p, samples) in peers.iter_mut().zip(others.iter_mut()) {
            let r = p.call("true", 30.0, Duration::from_secs(60))?;
            if r.exit_code != Some(0) || r.error.is_some() {
                return Err(format!("{}: `true` gave {r:?}", p.label()));
            }
            if keep {
                samples.push(r.ms);
            }
        }
        if keep {
            cli.ms.push(c.wall_ms);
            cli.own_cpu += c.cpu_ms;
            cli.engine_cpu += d2 - d1;
            local.push(l.wall_ms);
        }
    }
    let n = plan.b1_rounds.max(1) as f64;
    let cli_row = Row::new("B1", "docker exec C bash -lc true (CLI)", "ms", &cli.ms).note(format!(
        "docker CLI CPU {:.1} ms/call; engine CPU {:.1} ms/call",
        cli.own_cpu / n,
        cli.engine_cpu / n
    ));
    let local_row = Row::new("B1", "bash -c true (local, no sandbox)", "ms", &local);
    let peer_rows: Vec<Row> = peers
        .iter()
        .zip(&others)
        .map(|(p, s)| Row::new("B1", p.label(), "ms", s))
        .collect();
    let fastest_peer = peer_rows
        .iter()
        .min_by(|a, b| a.median.total_cmp(&b.median))
        .cloned();
    let mut rows = Vec::new();
    for ((rt, _), side) in executors.iter().zip(&runner) {
        let row = Row::new("B1", runner_side(*rt), "ms", &side.ms).versus(&cli_row);
        let below_cli = side.ms.median() <= 3.0 && row.ratio.is_some_and(|r| r <= 0.06);
        let mut note = format!(
            "runner CPU {:.2} ms/call ({:.0} % of its time); engine CPU {:.1} ms/call; {:.1}x local",
            side.own_cpu / n,
            100.0 * side.own_cpu / n / side.ms.median(),
            side.engine_cpu / n,
            side.ms.median() / local.median()
        );
        let row = match (&fastest_peer, rt) {
            // Issue 14: below the fastest peer (SWE-ReX's execute).
            (Some(fast), None) => {
                note += &format!(
                    "; {:.2}x the fastest peer ({}); issue 10's target (median <= 3 ms, <= 0.06x CLI) {}",
                    side.ms.median() / fast.median,
                    fast.side,
                    if below_cli { "met" } else { "not met" }
                );
                row.target("below the fastest peer", side.ms.median() < fast.median)
            }
            // Issue 10: below SWE-ReX's in-container execute (about 5 ms here).
            (None, None) => row.target("median <= 3 ms; <= 0.06x CLI", below_cli),
            (_, Some(_)) => row,
        };
        rows.push(row.note(note));
    }
    let runc = runner.first().map_or(f64::NAN, |s| s.ms.median());
    for (mut row, p) in peer_rows.into_iter().zip(peers.iter()) {
        row.ratio = Some(runc / row.median);
        let image = if p.tool == Tool::Mini {
            plan.image.clone()
        } else {
            SWEREX_IMAGE.to_string()
        };
        rows.push(row.note(format!(
            "runner/this peer in the ratio column; image {image}; the tool's own wall time per call, in its Python process; environment up in {:.0} ms",
            p.start_ms
        )));
    }
    rows.push(cli_row);
    rows.push(local_row);
    Ok(rows)
}

/// Phases of B2 on one side.
#[derive(Default)]
struct Cycle {
    whole: Samples,
    start: Samples,
    first: Samples,
    remove: Samples,
    own_cpu: f64,
}

/// B2: create, start, first command, remove; runner on each of `runtimes`
/// against `docker run --rm` on the same runtime, interleaved.
pub async fn b2(plan: &Plan, runtimes: &[Option<String>]) -> Result<Vec<Row>, String> {
    let mut runner: Vec<Cycle> = runtimes.iter().map(|_| Cycle::default()).collect();
    let mut cli: Vec<Samples> = runtimes.iter().map(|_| Samples::default()).collect();
    for round in 0..plan.warmup + plan.b2_rounds {
        let keep = round >= plan.warmup;
        for (i, rt) in runtimes.iter().enumerate() {
            let (cpu0, t0) = (self_cpu_ms(), Instant::now());
            let mut cfg = config(plan, &format!("bench-b2-{round}-{i}"));
            cfg.runtime = rt.clone();
            let ex = DockerExecutor::start(cfg)
                .await
                .map_err(|e| format!("starting the docker executor on {rt:?}: {e}"))?;
            let t1 = Instant::now();
            let out = run(&ex, "true", Duration::from_secs(30)).await;
            let t2 = Instant::now();
            let shut = ex.shutdown().await;
            let t3 = Instant::now();
            let cpu = self_cpu_ms() - cpu0;
            out?;
            shut.map_err(|e| format!("removing the sandbox: {e}"))?;
            let mut args = vec!["run", "--rm", "--network", "none", "--label", BENCH_LABEL];
            if let Some(r) = rt {
                args.extend(["--runtime", r.as_str()]);
            }
            args.extend([plan.image.as_str(), "true"]);
            let c = run_child(Command::new("docker").args(&args), false)?;
            ok(&c, "docker run --rm")?;
            if keep {
                let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
                let side = &mut runner[i];
                side.whole.push(ms(t0, t3));
                side.start.push(ms(t0, t1));
                side.first.push(ms(t1, t2));
                side.remove.push(ms(t2, t3));
                side.own_cpu += cpu;
                cli[i].push(c.wall_ms);
            }
        }
    }
    let n = plan.b2_rounds.max(1) as f64;
    let mut rows = Vec::new();
    for ((rt, side), cli) in runtimes.iter().zip(&runner).zip(&cli) {
        let cli_side = match rt {
            None => "docker run --rm --network none IMG true".to_string(),
            Some(r) => format!("docker run --rm --network none --runtime {r} IMG true"),
        };
        let cli_row = Row::new("B2", cli_side, "ms", cli);
        let row = Row::new("B2", runner_side(rt.as_deref()), "ms", &side.whole).versus(&cli_row);
        let note = format!(
            "phases (median): start {:.0} ms, first command {:.0} ms, remove {:.0} ms; runner CPU {:.1} ms/cycle ({:.0} % of its time)",
            side.start.median(),
            side.first.median(),
            side.remove.median(),
            side.own_cpu / n,
            100.0 * side.own_cpu / n / side.whole.median()
        );
        let met = row.ratio.is_some_and(|r| r <= 0.7);
        let row = if rt.is_none() {
            row.target("<= 0.7x", met)
        } else {
            row
        };
        rows.push(row.note(note));
        rows.push(cli_row);
    }
    Ok(rows)
}

/// B6: `sleep 600` with children, killed at a 1 s timeout.
pub async fn b6(plan: &Plan, peer: &str) -> Result<Vec<Row>, String> {
    let ex = DockerExecutor::start(config(plan, "bench-b6"))
        .await
        .map_err(|e| format!("starting the docker executor: {e}"))?;
    let result = b6_rounds(plan, &ex, peer).await;
    let shut = ex.shutdown().await;
    let rows = result?;
    shut.map_err(|e| format!("removing the B6 sandbox: {e}"))?;
    Ok(rows)
}

async fn b6_rounds(plan: &Plan, ex: &DockerExecutor, peer: &str) -> Result<Vec<Row>, String> {
    let (mut runner, mut cli) = (Samples::default(), Samples::default());
    let (mut runner_orphans, mut cli_orphans) = (0usize, 0usize);
    let id = ex.container_id().to_string();
    for _ in 0..plan.b6_rounds {
        let t0 = Instant::now();
        let out = run(ex, KILL_COMMAND, KILL_TIMEOUT).await?;
        let returned = t0.elapsed();
        if !out.timed_out {
            return Err(format!("the kill command was not timed out: {out:?}"));
        }
        // "No process left": the first `docker top` showing no sleep.
        let left = count_processes(&id, "sleep 600")?;
        runner_orphans += left;
        let gone = if left == 0 {
            returned
        } else {
            wait_gone(&id, t0)?
        };
        runner.push((gone.saturating_sub(KILL_TIMEOUT)).as_secs_f64() * 1e3);

        let c = run_child(
            Command::new("timeout").args([
                "-s",
                "KILL",
                "1",
                "docker",
                "exec",
                peer,
                "sh",
                "-c",
                KILL_COMMAND,
            ]),
            false,
        )?;
        cli.push((c.wall_ms - 1e3).max(0.0));
        cli_orphans += count_processes(peer, "sleep 600")?;
        docker_out(&["exec", peer, "killall", "-9", "sleep"])?;
    }
    let rounds = runner.0.len();
    let cli_row = Row::new("B6", "timeout -s KILL 1 docker exec (CLI pattern)", "ms", &cli)
        .note(format!(
            "client gone after the deadline; {} processes survived per call ({} in {rounds} calls), never reaped",
            cli_orphans / rounds.max(1),
            cli_orphans
        ));
    let met = runner_orphans == 0 && runner.p95() <= 20.0;
    let row = Row::new("B6", "runner docker executor", "ms", &runner)
        .target("0 orphans; p95 <= 20 ms", met)
        .note(format!(
            "deadline to no process left; {runner_orphans} orphans in {rounds} calls"
        ));
    Ok(vec![row, cli_row])
}

/// Polls until no `sleep 600` is left in `id`, for at most 10 s; returns
/// the time since `t0`.
fn wait_gone(id: &str, t0: Instant) -> Result<Duration, String> {
    while t0.elapsed() < Duration::from_secs(10) {
        if count_processes(id, "sleep 600")? == 0 {
            return Ok(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "processes of the killed command still run in {id} after 10 s"
    ))
}

/// Starts the peer container shared by B1, B5 and B6.
pub fn peer_container(plan: &Plan) -> Result<String, String> {
    start_peer_container(&plan.image)
}
