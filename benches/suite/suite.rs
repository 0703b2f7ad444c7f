//! B3: suite throughput on trivial oracle tasks, `runner eval --jobs K`
//! against a shell loop / `xargs -P K` of `docker run --rm`; and the same
//! suite as 2 concurrent shards (`--shard 1/2`, `--shard 2/2`, `--jobs
//! J/2` each) against one process with `--jobs J`.
//!
//! Isolated on purpose: `runner eval` is built on another branch. When the
//! binary has no `eval` subcommand, the runner side is reported as not
//! available and the peer side is still measured.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::Plan;
use crate::stats::{Row, Samples};
use crate::sys::{BENCH_LABEL, run_child};

/// Writes `n` Harbor-style tasks whose oracle solution passes.
pub fn make_tasks(dir: &Path, n: usize, image: &str) -> Result<(), String> {
    let w = |p: PathBuf, text: &str| {
        std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))
    };
    for i in 0..n {
        let t = dir.join(format!("task-{i:03}"));
        for sub in ["solution", "tests"] {
            std::fs::create_dir_all(t.join(sub))
                .map_err(|e| format!("creating {}: {e}", t.display()))?;
        }
        w(
            t.join("instruction.md"),
            "Write `ok` to /workspace/out.txt.\n",
        )?;
        w(
            t.join("task.toml"),
            &format!(
                "version = \"1.0\"\n\n[agent]\ntimeout_sec = 60.0\n\n[verifier]\ntimeout_sec = 60.0\n\n\
                 [environment]\ndocker_image = \"{image}\"\n"
            ),
        )?;
        w(
            t.join("solution/solve.sh"),
            "#!/bin/bash\necho ok > /workspace/out.txt\n",
        )?;
        w(
            t.join("tests/test.sh"),
            "#!/bin/bash\nmkdir -p /logs/verifier\n\
             if [ \"$(cat /workspace/out.txt 2>/dev/null)\" = ok ]; then r=1; else r=0; fi\n\
             echo $r > /logs/verifier/reward.txt\n",
        )?;
    }
    Ok(())
}

/// The peer's unit of work: one task solved and tested in one
/// `docker run --rm`, printing the reward. Written to `one`, run as
/// `sh ONE TASK_DIR`.
fn write_peer_task_script(one: &Path, image: &str) -> Result<(), String> {
    let text = format!(
        "exec docker run --rm --network none --label {BENCH_LABEL} -v \"$1\":/task:ro {image} \\\n  \
         bash -c 'bash /task/solution/solve.sh && bash /task/tests/test.sh && cat /logs/verifier/reward.txt'\n"
    );
    std::fs::write(one, text).map_err(|e| format!("writing {}: {e}", one.display()))
}

/// The peer at K: a shell loop (K = 1) or `xargs -P K`; `$0` is the task
/// directory, `$1` the one-task script.
fn peer_script(jobs: usize) -> String {
    if jobs == 1 {
        "for d in \"$0\"/task-*; do sh \"$1\" \"$d\"; done".to_string()
    } else {
        format!("ls -d \"$0\"/task-* | xargs -P {jobs} -n 1 sh \"$1\"")
    }
}

/// Whether this runner binary has the `eval` subcommand.
fn eval_available(plan: &Plan) -> Result<(), String> {
    let out = Command::new(&plan.runner_bin)
        .args(["help", "eval"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", plan.runner_bin.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(err
        .lines()
        .next()
        .unwrap_or("`runner help eval` failed")
        .to_string())
}

/// Tasks per second of one side at one K.
fn throughput(n: usize, wall_ms: f64) -> f64 {
    n as f64 / (wall_ms / 1e3)
}

/// The smallest K whose doubling gains less than 10 % throughput.
fn flattens(ks: &[usize], tput: &[f64]) -> Option<usize> {
    ks.iter()
        .zip(tput.windows(2))
        .find(|(_, w)| w[1] < w[0] * 1.1)
        .map(|(k, _)| *k)
}

pub fn b3(plan: &Plan, tmp: &Path) -> Result<Vec<Row>, String> {
    let dir = tmp.join("b3-tasks");
    make_tasks(&dir, plan.b3_tasks, &plan.image)?;
    let one = tmp.join("b3-one-task.sh");
    write_peer_task_script(&one, &plan.image)?;
    let eval = eval_available(plan);
    let n = plan.b3_tasks;
    let mut rows = Vec::new();
    let (mut peer_med, mut runner_med) = (Vec::new(), Vec::new());
    for &k in &plan.b3_jobs {
        let (mut runner, mut peer) = (Samples::default(), Samples::default());
        for _ in 0..plan.b3_rounds {
            if eval.is_ok() {
                let t0 = Instant::now();
                let mut cmd = Command::new(&plan.runner_bin);
                cmd.arg("eval")
                    .arg(&dir)
                    .args(["--agent", "oracle", "--jobs", &k.to_string()])
                    .current_dir(tmp);
                let r = run_child(&mut cmd, false)?;
                // Exit 0 means every task passed: `--min-pass-rate`
                // defaults to 1.0. Run directories go under `tmp`.
                if !r.status.success() {
                    return Err(format!("runner eval --jobs {k} exited {}", r.status));
                }
                runner.push(throughput(n, t0.elapsed().as_secs_f64() * 1e3));
            }
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &peer_script(k)]).arg(&dir).arg(&one);
            let p = run_child(&mut cmd, true)?;
            let passed = String::from_utf8_lossy(&p.stdout)
                .lines()
                .filter(|l| l.trim() == "1")
                .count();
            if !p.status.success() || passed != n {
                return Err(format!(
                    "peer at K={k}: {passed} of {n} tasks passed, exit {}",
                    p.status
                ));
            }
            peer.push(throughput(n, p.wall_ms));
        }
        let side = if k == 1 {
            "shell loop of docker run --rm".to_string()
        } else {
            format!("xargs -P {k} docker run --rm")
        };
        let peer_row = Row::new("B3", format!("K={k}: {side}"), "tasks/s", &peer);
        peer_med.push(peer_row.median);
        match &eval {
            Ok(()) => {
                let row = Row::new(
                    "B3",
                    format!("K={k}: runner eval --jobs {k}"),
                    "tasks/s",
                    &runner,
                );
                runner_med.push(row.median);
                // Throughput: higher is better, so the ratio is runner/peer.
                let met = row.median >= peer_row.median;
                rows.push(row.versus(&peer_row).target(">= 1.0x peer", met));
            }
            Err(why) => rows.push(Row::unavailable(
                "B3",
                format!("K={k}: runner eval --jobs {k}"),
                why.clone(),
            )),
        }
        rows.push(peer_row.note(format!("{n} tasks, solve + test in one container each")));
    }
    let flat = |t: &[f64]| {
        if t.is_empty() {
            return "n/a".to_string();
        }
        flattens(&plan.b3_jobs, t).map_or("not within the Ks run".into(), |k| format!("K={k}"))
    };
    rows.push(Row::info(
        "B3",
        "where throughput flattens (doubling K gains < 10 %)",
        format!("runner {}, peer {}", flat(&runner_med), flat(&peer_med)),
    ));
    match eval {
        Ok(()) => rows.extend(shards(plan, &dir, tmp)?),
        Err(why) => rows.push(Row::unavailable("B3", "2 concurrent shards", why)),
    }
    Ok(rows)
}

/// `runner eval` of the bench suite with `--jobs jobs` and `extra` flags,
/// run directories under `out`, ready to spawn.
fn eval_cmd(
    plan: &Plan,
    dir: &Path,
    tmp: &Path,
    jobs: usize,
    out: &Path,
    extra: &[&str],
) -> Command {
    let mut cmd = Command::new(&plan.runner_bin);
    cmd.arg("eval")
        .arg(dir)
        .args(["--agent", "oracle", "--jobs", &jobs.to_string()])
        .args(extra)
        .arg("--output-dir")
        .arg(out)
        .current_dir(tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Wall time of the two shards run at once, both of which must pass.
fn shard_pair(
    plan: &Plan,
    dir: &Path,
    tmp: &Path,
    half: usize,
    round: usize,
) -> Result<f64, String> {
    let t0 = Instant::now();
    let mut children = Vec::new();
    for i in 1..=2 {
        let out = tmp.join(format!("b3-shards-{round}/shard-{i}"));
        let shard = format!("{i}/2");
        let mut cmd = eval_cmd(plan, dir, tmp, half, &out, &["--shard", &shard]);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run runner eval --shard {shard}: {e}"))?;
        children.push((shard, child));
    }
    // Both are waited for before judging either: none is left running.
    let waited: Vec<(String, std::io::Result<std::process::ExitStatus>)> = children
        .into_iter()
        .map(|(s, mut c)| (s, c.wait()))
        .collect();
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    for (shard, status) in waited {
        match status {
            Ok(st) if st.success() => {}
            Ok(st) => return Err(format!("runner eval --shard {shard} exited {st}")),
            Err(e) => return Err(format!("waiting for runner eval --shard {shard}: {e}")),
        }
    }
    Ok(wall)
}

/// The sharding row: the suite as 2 shards at once, `--jobs J/2` each,
/// against one process with `--jobs J` (the same total jobs), interleaved.
fn shards(plan: &Plan, dir: &Path, tmp: &Path) -> Result<Vec<Row>, String> {
    let (n, j) = (plan.b3_tasks, plan.b3_shard_jobs);
    let half = (j / 2).max(1);
    let (mut one, mut two) = (Samples::default(), Samples::default());
    for round in 0..plan.b3_rounds {
        let out = tmp.join(format!("b3-single-{round}"));
        let t0 = Instant::now();
        let status = eval_cmd(plan, dir, tmp, j, &out, &[])
            .status()
            .map_err(|e| format!("cannot run runner eval --jobs {j}: {e}"))?;
        if !status.success() {
            return Err(format!("runner eval --jobs {j} exited {status}"));
        }
        one.push(throughput(n, t0.elapsed().as_secs_f64() * 1e3));
        two.push(throughput(n, shard_pair(plan, dir, tmp, half, round)?));
    }
    let single = Row::new(
        "B3",
        format!("{n} tasks: one runner eval --jobs {j}"),
        "tasks/s",
        &one,
    );
    let sharded = Row::new(
        "B3",
        format!("{n} tasks: 2 concurrent shards, --jobs {half} each"),
        "tasks/s",
        &two,
    )
    .versus(&single)
    .note(format!(
        "ratio: shards / one process, same total jobs ({j}) on one engine"
    ));
    Ok(vec![sharded, single])
}

/// runner eval of the bench's trivial tasks on each runtime (runc, the
/// engine's default, and gVisor's runsc), interleaved, at each K of
/// `plan.b3h_jobs`: what the stronger boundary costs a suite.
pub fn b3_runtimes(
    plan: &Plan,
    tmp: &Path,
    runtimes: &[Option<String>],
) -> Result<Vec<Row>, String> {
    let n = plan.b3rt_tasks;
    let dir = tmp.join("b3rt-tasks");
    make_tasks(&dir, n, &plan.image)?;
    let mut rows = Vec::new();
    for &k in &plan.b3h_jobs {
        let mut samples: Vec<Samples> = runtimes.iter().map(|_| Samples::default()).collect();
        let mut cpu: Vec<f64> = runtimes.iter().map(|_| 0.0).collect();
        for round in 0..plan.b3_rounds {
            for (i, rt) in runtimes.iter().enumerate() {
                let out = tmp.join(format!("b3rt-{k}-{round}-{i}"));
                let mut extra = Vec::new();
                if let Some(r) = rt {
                    extra.extend(["--runtime", r.as_str()]);
                }
                let r = run_child(&mut eval_cmd(plan, &dir, tmp, k, &out, &extra), false)?;
                if !r.status.success() {
                    return Err(format!(
                        "runner eval --jobs {k} on {} exited {}",
                        rt.as_deref().unwrap_or("runc"),
                        r.status
                    ));
                }
                samples[i].push(throughput(n, r.wall_ms));
                cpu[i] += r.cpu_ms / r.wall_ms;
            }
        }
        let base = Row::new("B3", "", "tasks/s", &samples[0]);
        for (i, rt) in runtimes.iter().enumerate() {
            let side = match rt {
                None => format!("K={k}: runner eval --jobs {k} on runc ({n} trivial tasks)"),
                Some(r) => {
                    format!("K={k}: runner eval --jobs {k} --runtime {r} ({n} trivial tasks)")
                }
            };
            let mut row = Row::new("B3", side, "tasks/s", &samples[i]).note(format!(
                "runner's own CPU {:.0} % of its time",
                100.0 * cpu[i] / plan.b3_rounds.max(1) as f64
            ));
            if i > 0 {
                row = row.versus(&base);
                row.note += "; ratio: this runtime / runc";
            }
            rows.push(row);
        }
    }
    Ok(rows)
}
