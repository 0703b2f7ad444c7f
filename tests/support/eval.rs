//! `runner eval` as a user runs it: task directories, the command with its
//! reports, the reports read back, and the check that a suite left nothing
//! on the engine.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::RwLockWriteGuard;

use serde_json::Value;

use super::binary::{Dir, Ran, run};
use super::docker::{
    BOOKWORM, TINY, containers_of_owner, networks_of_owner, require_images, volumes_of_owner,
};

/// Runs an eval test alone (timing tests must not share 2 cores with
/// another suite) after the preflight for both sandbox images.
pub fn prelude() -> RwLockWriteGuard<'static, ()> {
    let guard = super::serial::serial();
    require_images(&[TINY, BOOKWORM]);
    guard
}

/// Writes a task directory `root/name` from (relative path, content) pairs;
/// `.sh` files are made executable.
pub fn task(root: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = root.join(name);
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write task file");
        if rel.ends_with(".sh") {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }
    dir
}

/// A task.toml on `image` with the given timeouts.
pub fn toml(image: &str, agent_secs: u32, verifier_secs: u32) -> String {
    format!(
        "[agent]\ntimeout_sec = {agent_secs}\n[verifier]\ntimeout_sec = {verifier_secs}\n\
         [environment]\ndocker_image = \"{image}\"\ncpus = 1\nmemory_mb = 256\nallow_internet = false\n"
    )
}

/// Runs `runner eval ARGS --output-dir runs/eval --json report.json
/// --junit junit.xml --summary summary.md` in `d`.
pub fn eval(d: &Dir, args: &[&str]) -> Ran {
    run(&mut eval_cmd(d, args))
}

/// The command [`eval`] runs, for tests that spawn it themselves.
pub fn eval_cmd(d: &Dir, args: &[&str]) -> Command {
    let mut c = d.runner();
    c.arg("eval").args(args).args([
        "--output-dir",
        "runs/eval",
        "--json",
        "report.json",
        "--junit",
        "junit.xml",
        "--summary",
        "summary.md",
    ]);
    // RUNNER_TEST_RUNTIME=runsc runs the suites' sandboxes on gVisor.
    c.args(super::docker::runtime_args());
    c
}

/// The JSON report, which must parse.
pub fn report(d: &Dir, ran: &Ran) -> Value {
    let p = d.path().join("report.json");
    let text =
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {p:?}: {e}{}", ran.explain()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("report.json: {e}{}", ran.explain()))
}

/// The attempts of the report as (task, status, reward).
pub fn statuses(r: &Value) -> Vec<(String, String, Option<f64>)> {
    r["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            (
                a["task"].as_str().unwrap_or_default().to_string(),
                a["status"].as_str().unwrap_or_default().to_string(),
                a["reward"].as_f64(),
            )
        })
        .collect()
}

/// Containers, volumes and networks still labelled with runner pid `pid`.
pub fn leftovers(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, ids) in [
        ("ps", containers_of_owner(pid)),
        ("volume", volumes_of_owner(pid)),
        ("network", networks_of_owner(pid)),
    ] {
        out.extend(ids.into_iter().map(|l| format!("{kind}: {l}")));
    }
    out
}

/// The pid that labelled a run's objects: read from a trajectory's
/// `run_started` is not possible, so tests spawn the binary themselves and
/// use the child's pid; this asserts nothing is left for it.
pub fn assert_clean(pid: u32, ran_desc: &str) {
    let left = leftovers(pid);
    assert!(left.is_empty(), "left behind by {ran_desc}: {left:?}");
}

/// Runs a prepared command, returning its result and the child's pid.
pub fn run_with_pid(mut cmd: Command) -> (Ran, u32) {
    use std::time::Instant;
    let desc = format!("{cmd:?}");
    let start = Instant::now();
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let pid = child.id();
    let out = child.wait_with_output().expect("wait");
    (
        Ran {
            out,
            desc,
            elapsed: start.elapsed(),
        },
        pid,
    )
}
