//! B1, B2, B6: the docker executor in-process against the docker CLI.

use std::process::Command;
use std::time::{Duration, Instant};

use runner::exec::docker::{DockerConfig, DockerExecutor};
use runner::exec::{ExecOutput, ExecRequest, Executor};
use tokio_util::sync::CancellationToken;

use crate::Plan;
use crate::stats::{Row, Samples};
use crate::sys::{
    BENCH_LABEL, count_processes, docker_out, engine_cpu_ms, run_child, self_cpu_ms,
    start_peer_container,
};

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

/// B1: one `true` in a warm sandbox.
pub async fn b1(plan: &Plan, peer: &str) -> Result<Vec<Row>, String> {
    let ex = DockerExecutor::start(config(plan, "bench-b1"))
        .await
        .map_err(|e| format!("starting the docker executor: {e}"))?;
    let ids = [ex.container_id().to_string(), peer.to_string()];
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let engine = || engine_cpu_ms(&ids);
    let (mut runner, mut cli, mut local) =
        (Samples::default(), Samples::default(), Samples::default());
    let (mut own_cpu, mut daemon_runner, mut daemon_cli, mut cli_cpu) = (0.0, 0.0, 0.0, 0.0);
    let result = async {
        for round in 0..plan.warmup + plan.b1_rounds {
            let keep = round >= plan.warmup;
            // Engine first: scanning /proc must not count as runner CPU.
            let d0 = engine();
            let (cpu0, t0) = (self_cpu_ms(), Instant::now());
            let out = run(&ex, "true", Duration::from_secs(30)).await?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let cpu = self_cpu_ms() - cpu0;
            if out.exit_code != Some(0) {
                return Err(format!("`true` in the sandbox exited {:?}", out.exit_code));
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
            if keep {
                runner.push(ms);
                own_cpu += cpu;
                daemon_runner += d1 - d0;
                cli.push(c.wall_ms);
                cli_cpu += c.cpu_ms;
                daemon_cli += d2 - d1;
                local.push(l.wall_ms);
            }
        }
        Ok(())
    }
    .await;
    let shut = ex.shutdown().await;
    result?;
    shut.map_err(|e| format!("removing the B1 sandbox: {e}"))?;
    let n = runner.0.len() as f64;
    let cli_row = Row::new("B1", "docker exec C bash -lc true (CLI)", "ms", &cli).note(format!(
        "docker CLI CPU {:.1} ms/call; engine CPU {:.1} ms/call",
        cli_cpu / n,
        daemon_cli / n
    ));
    let local_row = Row::new("B1", "bash -c true (local, no sandbox)", "ms", &local);
    let runner_row = Row::new("B1", "runner docker executor", "ms", &runner).versus(&cli_row);
    // Issue 10: below SWE-ReX's in-container execute (about 5 ms here).
    let met = runner.median() <= 3.0 && runner_row.ratio.is_some_and(|r| r <= 0.06);
    let runner_row = runner_row
        .target("median <= 3 ms; <= 0.06x CLI", met)
        .note(format!(
            "runner CPU {:.2} ms/call; engine CPU {:.1} ms/call; {:.1}x local",
            own_cpu / n,
            daemon_runner / n,
            runner.median() / local.median()
        ));
    Ok(vec![runner_row, cli_row, local_row])
}

/// B2: create, start, first command, remove.
pub async fn b2(plan: &Plan) -> Result<Vec<Row>, String> {
    let (mut runner, mut cli) = (Samples::default(), Samples::default());
    let (mut start, mut first, mut remove) =
        (Samples::default(), Samples::default(), Samples::default());
    let mut own_cpu = 0.0;
    for round in 0..plan.warmup + plan.b2_rounds {
        let keep = round >= plan.warmup;
        let (cpu0, t0) = (self_cpu_ms(), Instant::now());
        let ex = DockerExecutor::start(config(plan, &format!("bench-b2-{round}")))
            .await
            .map_err(|e| format!("starting the docker executor: {e}"))?;
        let t1 = Instant::now();
        let out = run(&ex, "true", Duration::from_secs(30)).await;
        let t2 = Instant::now();
        let shut = ex.shutdown().await;
        let t3 = Instant::now();
        let cpu = self_cpu_ms() - cpu0;
        out?;
        shut.map_err(|e| format!("removing the sandbox: {e}"))?;
        let c = run_child(
            Command::new("docker").args([
                "run",
                "--rm",
                "--network",
                "none",
                "--label",
                BENCH_LABEL,
                &plan.image,
                "true",
            ]),
            false,
        )?;
        ok(&c, "docker run --rm")?;
        if keep {
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            runner.push(ms(t0, t3));
            start.push(ms(t0, t1));
            first.push(ms(t1, t2));
            remove.push(ms(t2, t3));
            own_cpu += cpu;
            cli.push(c.wall_ms);
        }
    }
    let n = runner.0.len() as f64;
    let cli_row = Row::new("B2", "docker run --rm --network none IMG true", "ms", &cli);
    let row = Row::new("B2", "runner docker executor", "ms", &runner).versus(&cli_row);
    let met = row.ratio.is_some_and(|r| r <= 0.7);
    let row = row.target("<= 0.7x", met).note(format!(
        "phases (median): start {:.0} ms, first command {:.0} ms, remove {:.0} ms; runner CPU {:.1} ms/cycle",
        start.median(),
        first.median(),
        remove.median(),
        own_cpu / n
    ));
    Ok(vec![row, cli_row])
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
