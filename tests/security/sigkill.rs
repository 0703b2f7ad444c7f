//! Finding 7: a runner killed with SIGKILL left its container (and its
//! volume in copy mode) until a later sweep or `runner gc`. The sandbox
//! now ends itself when its runner dies: its main process reads a stream
//! from the runner and exits at EOF, and the engine removes the container
//! with its anonymous workspace volume.
//!
//! Other runners on the same engine sweep abandoned objects when they
//! start, which would hide a leak; so besides counting what is left, the
//! test checks from the engine's events that each container ended by
//! itself (its main process exited 0), not by someone's force removal.

use std::collections::HashMap;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use runner::exec::docker::{LABEL_MANAGED, LABEL_OWNER_PID, MANAGED_VALUE};

use crate::support::binary::{Dir, Exec};
use crate::support::docker::{containers_of_owner, volumes_of_owner};
use crate::support::serial::serial;

/// Exit codes of `die` events of runner containers, by owner pid.
type Deaths = Arc<Mutex<HashMap<String, Vec<String>>>>;

/// Follows the engine's `die` events of runner containers.
fn watch_deaths() -> (std::process::Child, Deaths) {
    let mut child = Command::new("docker")
        .args([
            "events",
            "--filter",
            "type=container",
            "--filter",
            "event=die",
            "--filter",
            &format!("label={LABEL_MANAGED}={MANAGED_VALUE}"),
            "--format",
            "{{json .}}",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("docker events");
    let deaths: Deaths = Arc::default();
    let out = child.stdout.take().expect("stdout");
    let sink = Arc::clone(&deaths);
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let attrs = &v["Actor"]["Attributes"];
            let pid = attrs[LABEL_OWNER_PID].as_str().unwrap_or("").to_string();
            let code = attrs["exitCode"].as_str().unwrap_or("?").to_string();
            sink.lock().unwrap().entry(pid).or_default().push(code);
        }
    });
    (child, deaths)
}

/// The engine's state of container `id` (`created`, `running`...).
fn container_status(id: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{.State.Status}}", id])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Containers and volumes owned by the runner process `pid`.
fn objects_of(pid: u32) -> (Vec<String>, Vec<String>) {
    (containers_of_owner(pid), volumes_of_owner(pid))
}

#[test]
fn sigkill_at_20_random_points_leaves_no_container_and_no_volume() {
    let _s = serial();
    let (mut events, deaths) = watch_deaths();
    let d = Dir::new();
    let script = d
        .write(
            "script.json",
            &json!([
                {"tool_calls": [{"name": "bash", "input": {"command": "echo one > a.txt"}}]},
                {"tool_calls": [{"name": "bash", "input": {"command": "sleep 0.3; cat a.txt"}}]},
                {"tool_calls": [{"name": "bash", "input": {"command": "sleep 1000 & echo two >> a.txt"}}]},
                {"tool_calls": [{"name": "bash", "input": {"command": "sleep 0.3; ls"}}]},
                {"tool_calls": [{"name": "bash", "input": {"command": "sleep 1.5"}}]},
                {"text": "done"}
            ])
            .to_string(),
        )
        .display()
        .to_string();
    let runner = |copy: bool| {
        let mut c = d.scripted(&script);
        c.args(Exec::Docker.args());
        if copy {
            c.args(["--workspace-mode", "copy"]);
        }
        c.arg("go").stdout(Stdio::null()).stderr(Stdio::null());
        c
    };
    // How long a whole run takes, to spread the kills over it.
    let t = Instant::now();
    let status = runner(true).status().expect("run runner");
    assert!(status.success(), "the unkilled run failed: {status:?}");
    let span = t.elapsed();
    eprintln!("a whole run takes {span:?}");

    let mut leaks = Vec::new();
    let mut never_started = Vec::new();
    let mut landed = 0;
    // Kills after which the container's main process exited 0 by itself
    // (a sweep or a force removal shows exit code 137).
    let mut self_ended = 0;
    for i in 0..20 {
        let copy = i % 2 == 1;
        let delay = span.mul_f64(0.9 * fastrand::f64());
        let mut child = runner(copy).spawn().expect("spawn runner");
        let pid = child.id();
        std::thread::sleep(delay);
        let had = objects_of(pid);
        let running = matches!(child.try_wait(), Ok(None));
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        let hit = running && !had.0.is_empty();
        if hit {
            landed += 1;
        }
        // A short wait, and no gc.
        let until = Instant::now() + Duration::from_secs(10);
        let left = loop {
            let left = objects_of(pid);
            if (left.0.is_empty() && left.1.is_empty()) || Instant::now() > until {
                break left;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        std::thread::sleep(Duration::from_millis(300));
        let died = deaths
            .lock()
            .unwrap()
            .get(&pid.to_string())
            .cloned()
            .unwrap_or_default();
        eprintln!(
            "kill {i:2} after {:>5} ms (copy={copy}): before {} containers {} volumes; left {} containers {} volumes; exit codes {died:?}",
            delay.as_millis(),
            had.0.len(),
            had.1.len(),
            left.0.len(),
            left.1.len(),
        );
        // The documented gap (README, Security): a kill between creating
        // the container and starting it leaves it `created`, with nothing
        // running that could end it; the next runner's start or `runner
        // gc` sweeps it. That case is counted, and must be swept below.
        let unstarted = !left.0.is_empty()
            && left
                .0
                .iter()
                .all(|id| container_status(id).as_deref() == Some("created"));
        if unstarted {
            never_started.push(pid);
        } else if !left.0.is_empty() || !left.1.is_empty() {
            leaks.push(format!("pid {pid}: {left:?}"));
        }
        if hit && died.iter().any(|c| c == "0") {
            self_ended += 1;
        }
    }
    let _ = events.kill();
    let _ = events.wait();
    eprintln!(
        "{landed} of 20 kills landed while a container existed; {self_ended} of those ended by themselves"
    );
    assert!(leaks.is_empty(), "left after SIGKILL: {leaks:#?}");
    if !never_started.is_empty() {
        eprintln!(
            "{} kills landed between creating and starting a container; runner gc must sweep them",
            never_started.len()
        );
        let gc = d.runner().arg("gc").output().expect("runner gc");
        for pid in &never_started {
            let left = objects_of(*pid);
            assert!(
                left.0.is_empty() && left.1.is_empty(),
                "runner gc left the never-started sandbox of pid {pid}: {left:?}\n{}",
                String::from_utf8_lossy(&gc.stderr)
            );
        }
    }
    assert!(
        self_ended * 2 >= landed,
        "most sandboxes must end by themselves, not be swept: {self_ended} of {landed}"
    );
    assert!(
        landed >= 8,
        "too few kills hit a live sandbox ({landed}); the test proves little"
    );
}

/// When copying the workspace back fails, the container (and its volume,
/// the only copy of the work) must outlive the runner for the user to
/// rescue it, although it otherwise ends with the runner.
#[tokio::test]
async fn a_failed_copy_back_keeps_the_container_after_the_runner_is_gone() {
    use runner::exec::ExecutorExt;
    use runner::exec::docker::WorkspaceMode;

    use crate::support::executor::{cfg, docker, run, start};

    let _s = serial();
    let _d = docker().await;
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mut c = cfg("sec-keep");
    c.workspace = Some(ws.clone());
    c.workspace_mode = WorkspaceMode::Copy;
    let ex = start(c).await;
    let id = ex.container_id().to_string();
    run(&ex, "echo precious > work.txt", 10.0).await;
    // The host directory goes away: the copy back cannot land.
    std::fs::remove_dir_all(&ws).unwrap();
    let err = ex.shutdown().await.expect_err("the copy back must fail");
    eprintln!("{err}");
    assert!(err.to_string().contains("are kept"), "{err}");
    drop(ex);
    // The runner's connection is closed now; the container must stay.
    std::thread::sleep(Duration::from_secs(2));
    let kept = Command::new("docker")
        .args(["exec", &id, "cat", "/workspace/work.txt"])
        .output()
        .unwrap();
    let _ = Command::new("docker")
        .args(["rm", "-f", "-v", &id])
        .output();
    assert_eq!(
        String::from_utf8_lossy(&kept.stdout),
        "precious\n",
        "{}",
        String::from_utf8_lossy(&kept.stderr)
    );
}
