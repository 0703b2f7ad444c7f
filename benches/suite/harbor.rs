//! B3 against Harbor: `runner eval --agent oracle --jobs K` and Harbor's
//! own `harbor run --agent oracle --n-concurrent K` (as `make harbor`
//! installed it, sandbox/harbor/harbor.sh) on the same generated task
//! directories, interleaved, with each side's verdict per task compared.
//!
//! The tasks are Harbor's format with an environment/Dockerfile on
//! runner-sandbox:bookworm (no registry: Harbor builds its image from it);
//! every fourth one fails by design (its solution writes the wrong
//! answer), so agreement covers both verdicts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::Plan;
use crate::stats::{Row, Samples};
use crate::sys::{docker_out, run_child};

/// Generated task names start with this and the bench's pid, so the
/// Harbor projects and images they make are told apart from others'.
fn prefix() -> String {
    format!("rbench{}-", std::process::id())
}

fn fails_by_design(i: usize) -> bool {
    i % 4 == 3
}

fn write_tasks(dir: &Path, n: usize) -> Result<Vec<String>, String> {
    let w = |p: PathBuf, text: &str| {
        std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))
    };
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{}task-{i:02}", prefix());
        let t = dir.join(&name);
        for sub in ["solution", "tests", "environment"] {
            std::fs::create_dir_all(t.join(sub))
                .map_err(|e| format!("creating {}: {e}", t.display()))?;
        }
        w(t.join("instruction.md"), "Write `ok` to /app/out.txt.\n")?;
        w(
            t.join("task.toml"),
            "version = \"1.0\"\n\n[agent]\ntimeout_sec = 60.0\n\n[verifier]\ntimeout_sec = 60.0\n\n\
             [environment]\nnetwork_mode = \"no-network\"\n",
        )?;
        w(
            t.join("environment/Dockerfile"),
            "FROM runner-sandbox:bookworm\nWORKDIR /app\n",
        )?;
        let answer = if fails_by_design(i) { "no" } else { "ok" };
        w(
            t.join("solution/solve.sh"),
            &format!("#!/bin/bash\necho {answer} > /app/out.txt\n"),
        )?;
        w(
            t.join("tests/test.sh"),
            "#!/bin/bash\nmkdir -p /logs/verifier\n\
             if [ \"$(cat /app/out.txt 2>/dev/null)\" = ok ]; then r=1; else r=0; fi\n\
             echo $r > /logs/verifier/reward.txt\n",
        )?;
        names.push(name);
    }
    Ok(names)
}

/// Harbor's wrapper, checked by `--version`.
fn harbor(root: &Path) -> Result<(PathBuf, String), String> {
    let wrapper = root.join("sandbox/harbor/harbor.sh");
    let out = Command::new(&wrapper)
        .arg("--version")
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", wrapper.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "Harbor does not run ({}); run `make harbor`",
            err.lines().next().unwrap_or("no message")
        ));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok((wrapper, version))
}

type Verdicts = BTreeMap<String, &'static str>;

fn class(status: &str) -> &'static str {
    match status {
        "pass" => "pass",
        "fail" => "fail",
        _ => "error",
    }
}

/// One `runner eval` of the suite: wall ms, its CPU ms, verdicts by task,
/// and each attempt's verifier phase (ms, from its report).
fn run_runner(
    plan: &Plan,
    dir: &Path,
    out: &Path,
    jobs: usize,
) -> Result<(f64, f64, Verdicts, Vec<f64>), String> {
    let report = out.with_extension("json");
    let mut cmd = Command::new(&plan.runner_bin);
    cmd.arg("eval")
        .arg(dir)
        .args(["--agent", "oracle", "--jobs", &jobs.to_string()])
        .args(["--min-pass-rate", "0", "--json"])
        .arg(&report)
        .arg("--output-dir")
        .arg(out);
    let r = run_child(&mut cmd, false)?;
    if !r.status.success() {
        return Err(format!("runner eval --jobs {jobs} exited {}", r.status));
    }
    let text = std::fs::read_to_string(&report)
        .map_err(|e| format!("reading {}: {e}", report.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", report.display()))?;
    let mut verdicts = Verdicts::new();
    let mut verifier = Vec::new();
    for a in v["attempts"]
        .as_array()
        .ok_or("the report has no attempts")?
    {
        let task = a["task"].as_str().unwrap_or_default().to_string();
        verdicts.insert(task, class(a["status"].as_str().unwrap_or_default()));
        verifier.extend(a["phases"]["verifier_ms"].as_f64());
    }
    Ok((r.wall_ms, r.cpu_ms, verdicts, verifier))
}

/// Harbor's verdict of one trial's result.json: pass when its rewards are
/// valid and all >= 1, fail when valid and one is below, else error (the
/// mapping of tests/harbor/verdict.rs).
fn harbor_class(result: &Value) -> &'static str {
    let rewards: Vec<f64> = result["verifier_result"]["rewards"]
        .as_object()
        .map(|m| m.values().map(|v| v.as_f64().unwrap_or(f64::NAN)).collect())
        .unwrap_or_default();
    if result["reward_valid"].as_bool() != Some(true) || rewards.is_empty() {
        "error"
    } else if rewards.iter().all(|r| *r >= 1.0) {
        "pass"
    } else {
        "fail"
    }
}

/// One `harbor run` of the suite.
fn run_harbor(
    root: &Path,
    wrapper: &Path,
    dir: &Path,
    jobs_dir: &Path,
    name: &str,
    jobs: usize,
) -> Result<(f64, f64, Verdicts), String> {
    let mut cmd = Command::new(wrapper);
    cmd.current_dir(root)
        .env(
            "RUNNER_HARBOR_BIND",
            format!("{}:{}", dir.display(), jobs_dir.display()),
        )
        .args(["run", "--yes", "--quiet", "-e", "docker"])
        .args(["--n-concurrent", &jobs.to_string()])
        .arg("-p")
        .arg(dir)
        .args(["--agent", "oracle", "--jobs-dir"])
        .arg(jobs_dir)
        .args(["--job-name", name]);
    let r = run_child(&mut cmd, false)?;
    if !r.status.success() {
        return Err(format!(
            "harbor run --n-concurrent {jobs} exited {} (job {})",
            r.status,
            jobs_dir.join(name).display()
        ));
    }
    let job = jobs_dir.join(name);
    let mut verdicts = Verdicts::new();
    let rd = std::fs::read_dir(&job).map_err(|e| format!("{}: {e}", job.display()))?;
    for trial in rd.filter_map(Result::ok).map(|e| e.path()) {
        let path = trial.join("result.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let task = v["task_name"].as_str().unwrap_or_default().to_string();
        verdicts.insert(task, harbor_class(&v));
    }
    Ok((r.wall_ms, r.cpu_ms, verdicts))
}

/// Containers of this bench's Harbor projects still there (Harbor's
/// compose projects are named after the trial, lowercased).
fn harbor_leftovers() -> Result<Vec<String>, String> {
    let out = docker_out(&[
        "ps",
        "-a",
        "--filter",
        "label=com.docker.compose.project",
        "--format",
        "{{.ID}} {{.Label \"com.docker.compose.project\"}}",
    ])?;
    let p = prefix();
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, project)| project.starts_with(&p))
        .map(|(id, _)| id.to_string())
        .collect())
}

/// The `hb__` images now (Harbor's task images).
fn harbor_images() -> Vec<String> {
    docker_out(&["images", "--format", "{{.Repository}}:{{.Tag}}"])
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("hb__"))
        .map(str::to_string)
        .collect()
}

/// Tasks on which the two sides disagree.
fn disagreements(a: &Verdicts, b: &Verdicts) -> Vec<String> {
    let mut out = Vec::new();
    for (task, va) in a {
        match b.get(task) {
            Some(vb) if vb == va => {}
            Some(vb) => out.push(format!("{task}: runner {va}, Harbor {vb}")),
            None => out.push(format!("{task}: runner {va}, Harbor none")),
        }
    }
    for task in b.keys().filter(|t| !a.contains_key(*t)) {
        out.push(format!("{task}: runner none, Harbor {}", b[task]));
    }
    out
}

pub fn b3_harbor(plan: &Plan, root: &Path, tmp: &Path) -> Vec<Row> {
    match b3_harbor_rows(plan, root, tmp) {
        Ok(rows) => rows,
        Err(e) => vec![Row::unavailable(
            "B3",
            "Harbor: harbor run --agent oracle",
            e,
        )],
    }
}

fn b3_harbor_rows(plan: &Plan, root: &Path, tmp: &Path) -> Result<Vec<Row>, String> {
    let (wrapper, version) = harbor(root)?;
    let dir = tmp.join("b3h-tasks");
    let jobs_dir = tmp.join("b3h-jobs");
    std::fs::create_dir_all(&jobs_dir)
        .map_err(|e| format!("creating {}: {e}", jobs_dir.display()))?;
    let names = write_tasks(&dir, plan.b3h_tasks)?;
    let images_before = harbor_images();
    let result = measure(plan, root, &wrapper, &version, &dir, &jobs_dir, names.len());
    // Harbor's images of these tasks are removed; its leftovers counted.
    let left = harbor_leftovers();
    for id in left.iter().flatten() {
        let _ = docker_out(&["rm", "-f", id]);
    }
    for img in harbor_images()
        .into_iter()
        .filter(|i| !images_before.contains(i))
    {
        let _ = docker_out(&["rmi", "-f", &img]);
    }
    let mut rows = result?;
    rows.push(Row::info(
        "B3",
        "Harbor: containers left after its jobs",
        match &left {
            Ok(ids) => format!("{} (removed by the bench)", ids.len()),
            Err(e) => format!("not counted: {e}"),
        },
    ));
    Ok(rows)
}

fn measure(
    plan: &Plan,
    root: &Path,
    wrapper: &Path,
    version: &str,
    dir: &Path,
    jobs_dir: &Path,
    n: usize,
) -> Result<Vec<Row>, String> {
    // Warm-up: both build their images of the tasks once (the engine's
    // build cache then serves every later build of either).
    run_runner(plan, dir, &jobs_dir.join("runner-warmup"), 4)?;
    run_harbor(root, wrapper, dir, jobs_dir, "harbor-warmup", 4)?;
    let by_design: Verdicts = (0..n)
        .map(|i| {
            let v = if fails_by_design(i) { "fail" } else { "pass" };
            (format!("{}task-{i:02}", prefix()), v)
        })
        .collect();
    let mut rows = Vec::new();
    for &k in &plan.b3h_jobs {
        let (mut runner, mut peer) = (Samples::default(), Samples::default());
        let (mut runner_cpu, mut peer_cpu) = (0.0, 0.0);
        let mut notes = Vec::new();
        let mut agree = true;
        let mut verifier = Samples::default();
        for round in 0..plan.b3h_rounds {
            let out = jobs_dir.join(format!("runner-k{k}-{round}"));
            let (wall, cpu, rv, ver) = run_runner(plan, dir, &out, k)?;
            ver.into_iter().for_each(|ms| verifier.push(ms));
            let (hwall, hcpu, hv) = run_harbor(
                root,
                wrapper,
                dir,
                jobs_dir,
                &format!("harbor-k{k}-{round}"),
                k,
            )?;
            runner.push(n as f64 / (wall / 1e3));
            peer.push(n as f64 / (hwall / 1e3));
            runner_cpu += cpu / wall;
            peer_cpu += hcpu / hwall;
            let d = disagreements(&rv, &hv);
            let wrong: Vec<String> = disagreements(&by_design, &rv)
                .into_iter()
                .chain(disagreements(&by_design, &hv))
                .collect();
            agree &= d.is_empty();
            notes.extend(d);
            if !wrong.is_empty() {
                notes.push(format!("against the design: {}", wrong.join("; ")));
            }
        }
        let rounds = plan.b3h_rounds.max(1) as f64;
        let peer_row = Row::new(
            "B3",
            format!("K={k}: Harbor {version} harbor run --agent oracle --n-concurrent {k}"),
            "tasks/s",
            &peer,
        )
        .note(format!(
            "{n} tasks ({} fail by design); Harbor's own CPU {:.0} % of its time",
            (0..n).filter(|i| fails_by_design(*i)).count(),
            100.0 * peer_cpu / rounds
        ));
        let row = Row::new(
            "B3",
            format!("K={k}: runner eval --agent oracle --jobs {k} (same tasks)"),
            "tasks/s",
            &runner,
        )
        .versus(&peer_row);
        // Issue 24: 8x at K=1, 5x above; a bookworm task's verifier phase
        // (tamper evidence, test.sh, the reward) under 0.5 s.
        let goal = if k == 1 { 8.0 } else { 5.0 };
        let quick_verifier = verifier.median() < 500.0;
        let met = agree && quick_verifier && row.ratio.is_some_and(|r| r >= goal);
        let verdicts = if notes.is_empty() {
            format!("verdicts agree on all {n} tasks, every round")
        } else {
            format!("DISAGREE: {}", notes.join("; "))
        };
        rows.push(
            row.target(
                format!(">= {goal}x Harbor; verdicts agree; verifier phase < 0.5 s"),
                met,
            )
            .note(format!(
                "{verdicts}; runner's verifier phase per task median {:.0} ms, p95 {:.0} ms; runner's own CPU {:.0} % of its time",
                verifier.median(),
                verifier.p95(),
                100.0 * runner_cpu / rounds
            )),
        );
        rows.push(peer_row);
    }
    Ok(rows)
}
