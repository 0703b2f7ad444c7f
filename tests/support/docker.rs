//! The Docker engine as the tests see it: the sandbox images, the one
//! preflight, the docker CLI, the runtime under test, and queries on
//! runner's labels. Other processes (other runners, other test suites,
//! image builds) share the engine, so every query here is narrowed to label
//! values a test created itself: a run id it was given, or the pid of a
//! runner it spawned.

use std::process::Command;

use runner::exec::docker::{
    LABEL_MANAGED, LABEL_OWNER_HOST, LABEL_OWNER_PID, LABEL_RUN_ID, MANAGED_VALUE,
};
use serde_json::Value;

/// The small sandbox image (busybox + bash), built by `make sandbox-image`.
pub const TINY: &str = "runner-sandbox:tiny";
/// The full sandbox image (Debian bookworm with python3, git, pytest),
/// built by `make sandbox-image`.
pub const BOOKWORM: &str = "runner-sandbox:bookworm";

/// What to do when the engine is not there.
const NO_ENGINE_HINT: &str = "hint: start the Docker daemon (or set DOCKER_HOST); \
     these tests fail, never skip, without it; `make test-unit` runs the tests that need no Docker";

/// The preflight of every test that needs Docker: panics, saying what to
/// do, unless the docker CLI reaches a running engine that has `images`.
pub fn require_images(images: &[&str]) {
    let mut args = vec!["image", "inspect", "--format", "{{.Id}}"];
    args.extend(images);
    let out = Command::new("docker").args(&args).output();
    let out = match out {
        Ok(o) if o.status.success() => return,
        Ok(o) => o,
        Err(e) => panic!(
            "this test needs the docker CLI and a running Docker engine: cannot run docker: {e}\n\
             hint: install Docker (apt-get install docker.io); `make test-unit` runs the tests \
             that need no Docker"
        ),
    };
    // Tell a missing engine from a missing image.
    let engine = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output();
    match engine {
        Ok(o) if o.status.success() => panic!(
            "this test needs the images {images:?}: {}\nhint: run `make sandbox-image`",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Ok(o) => panic!(
            "this test needs a running Docker engine: {}\n{NO_ENGINE_HINT}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("this test needs a running Docker engine: {e}\n{NO_ENGINE_HINT}"),
    }
}

/// [`require_images`] for the tiny image, which most docker tests use.
pub fn require_docker() {
    require_images(&[TINY]);
}

/// Runs the docker CLI, returning trimmed stdout; panics with its stderr
/// when it fails.
pub fn docker_cli(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("the docker CLI is needed for this test: {e}"));
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The container runtime docker tests run on: `RUNNER_TEST_RUNTIME` (e.g.
/// `runsc`, which `make test` sets for its second pass), or the engine's
/// default when unset.
pub fn test_runtime() -> Option<String> {
    std::env::var("RUNNER_TEST_RUNTIME")
        .ok()
        .filter(|r| !r.is_empty())
}

/// `--runtime NAME` for [`test_runtime`], or nothing.
pub fn runtime_args() -> Vec<String> {
    test_runtime()
        .map(|r| vec!["--runtime".to_string(), r])
        .unwrap_or_default()
}

/// Whether the engine starts [`test_runtime`] with its network switched
/// off whatever the container asks (runsc registered with `--network=none`,
/// as `.ci/run` does), read from `docker info`.
pub fn test_runtime_forces_no_network() -> bool {
    let Some(rt) = test_runtime() else {
        return false;
    };
    let runtimes: Value =
        serde_json::from_str(&docker_cli(&["info", "--format", "{{json .Runtimes}}"]))
            .unwrap_or_else(|e| panic!("docker info .Runtimes is not JSON: {e}"));
    runtimes[rt.as_str()]["runtimeArgs"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == "--network=none"))
}

/// This host's name, as runner records it in its owner label.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| panic!("cannot read the host name: {e}"))
}

/// Runner's objects listed by `list` (a docker CLI listing printing ids
/// or names with `-q`) that carry every label of `labels`.
fn labelled(list: &[&str], labels: &[(&str, String)]) -> Vec<String> {
    let filters: Vec<String> = std::iter::once(format!("label={LABEL_MANAGED}={MANAGED_VALUE}"))
        .chain(labels.iter().map(|(k, v)| format!("label={k}={v}")))
        .collect();
    let mut args = list.to_vec();
    args.push("-q");
    for f in &filters {
        args.extend(["--filter", f.as_str()]);
    }
    docker_cli(&args)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The labels naming the objects of the runner process `pid` of this host.
fn owner(pid: u32) -> [(&'static str, String); 2] {
    [
        (LABEL_OWNER_PID, pid.to_string()),
        (LABEL_OWNER_HOST, host_name()),
    ]
}

/// Ids of the containers (running or not) of the run `run_id`.
pub fn containers_of_run(run_id: &str) -> Vec<String> {
    labelled(
        &["ps", "-a", "--no-trunc"],
        &[(LABEL_RUN_ID, run_id.into())],
    )
}

/// Names of the volumes of the run `run_id`.
pub fn volumes_of_run(run_id: &str) -> Vec<String> {
    labelled(&["volume", "ls"], &[(LABEL_RUN_ID, run_id.into())])
}

/// Ids of the containers (running or not) of the runner process `pid`,
/// which the test spawned.
pub fn containers_of_owner(pid: u32) -> Vec<String> {
    labelled(&["ps", "-a", "--no-trunc"], &owner(pid))
}

/// Ids of the running containers of the runner process `pid`.
pub fn running_containers_of_owner(pid: u32) -> Vec<String> {
    labelled(&["ps", "--no-trunc"], &owner(pid))
}

/// Names of the volumes of the runner process `pid`.
pub fn volumes_of_owner(pid: u32) -> Vec<String> {
    labelled(&["volume", "ls"], &owner(pid))
}

/// Whether a process whose command line contains `needle` runs in a
/// sandbox of the runner with pid `owner`, as `ps` inside the container
/// sees it: a gVisor sandbox's processes are not the host's, so
/// [`super::binary::process_alive`] cannot see them.
pub fn sandbox_process_alive(owner: u32, needle: &str) -> bool {
    running_containers_of_owner(owner).iter().any(|id| {
        // A container on its way out answers with an error: nothing runs.
        Command::new("docker")
            .args(["exec", id, "ps", "-o", "args"])
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.contains(needle) && !l.contains("ps -o"))
            })
    })
}

/// Names of the networks of the runner process `pid` (a compose task's
/// per-attempt network).
pub fn networks_of_owner(pid: u32) -> Vec<String> {
    labelled(&["network", "ls"], &owner(pid))
}
