//! Finding 7, gc: a zombie owner counts as dead, and the sweep never
//! removes what is not a runner sandbox, such as the containers of another
//! process's running image build that inherited runner's labels from
//! their base image.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use runner::exec::docker::{
    LABEL_CREATED, LABEL_EXPIRES, LABEL_MANAGED, LABEL_OWNER_HOST, LABEL_OWNER_PID,
    LABEL_OWNER_START, LABEL_RUN_ID, LABEL_TASK, MANAGED_VALUE, gc,
};

use crate::support::docker::{TINY, docker_cli, host_name};
use crate::support::executor::{docker, run_id};
use crate::support::serial::serial;

/// Field `n` (1-based, as in proc(5)) of /proc/PID/stat.
fn stat_field(pid: u32, n: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(n - 3).unwrap().to_string()
}

/// The labels runner puts on a sandbox owned by `pid`.
fn owner_labels(run_id: &str, pid: u32, start: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_string(), MANAGED_VALUE.to_string()),
        (LABEL_RUN_ID.to_string(), run_id.to_string()),
        (LABEL_OWNER_PID.to_string(), pid.to_string()),
        (LABEL_OWNER_START.to_string(), start.to_string()),
        (LABEL_OWNER_HOST.to_string(), host_name()),
        (LABEL_CREATED.to_string(), "1".to_string()),
        (LABEL_EXPIRES.to_string(), "99999999999".to_string()),
    ])
}

async fn create(d: &Docker, name: &str, labels: HashMap<String, String>) -> String {
    let body = ContainerCreateBody {
        image: Some(TINY.into()),
        cmd: Some(vec!["sleep".into(), "600".into()]),
        labels: Some(labels),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::new().name(name).build();
    d.create_container(Some(opts), body).await.unwrap().id
}

async fn exists(d: &Docker, id: &str) -> bool {
    d.inspect_container(id, None).await.is_ok()
}

async fn remove(d: &Docker, id: &str) {
    let opts = RemoveContainerOptionsBuilder::new().force(true).build();
    let _ = d.remove_container(id, Some(opts)).await;
}

#[tokio::test]
async fn gc_treats_a_zombie_owner_as_dead() {
    let _s = serial();
    let d = docker().await;
    // A child that exits and is not waited for stays a zombie.
    let mut zombie = Command::new("true").spawn().unwrap();
    let pid = zombie.id();
    let until = Instant::now() + Duration::from_secs(5);
    while stat_field(pid, 3) != "Z" {
        assert!(Instant::now() < until, "the child never became a zombie");
        std::thread::sleep(Duration::from_millis(10));
    }
    let start = stat_field(pid, 22);
    let run_id = run_id("sec-gc-zombie");
    let id = create(
        &d,
        &format!("runner-{run_id}-0000beef"),
        owner_labels(&run_id, pid, &start),
    )
    .await;
    let report = gc(&d).await.unwrap();
    let left = exists(&d, &id).await;
    remove(&d, &id).await;
    zombie.wait().unwrap();
    assert!(
        !left,
        "the container of a zombie owner was kept: {report:?}"
    );
}

#[tokio::test]
async fn gc_spares_containers_that_merely_carry_runner_labels() {
    let _s = serial();
    let d = docker().await;
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let run_id = run_id("sec-gc-copied");
    // What every container made from a `docker commit` of a sandbox
    // carries: the labels of a dead owner, under a name runner never gives.
    let copied = create(
        &d,
        &format!("{run_id}-copied"),
        owner_labels(&run_id, dead, "1"),
    )
    .await;
    // A build container of a runner-built image: runner's label, no owner.
    let mut build_labels = HashMap::new();
    build_labels.insert(LABEL_MANAGED.to_string(), MANAGED_VALUE.to_string());
    build_labels.insert(LABEL_TASK.to_string(), "t".to_string());
    let build = create(&d, &format!("{run_id}-build"), build_labels).await;
    let report = gc(&d).await.unwrap();
    remove(&d, &copied).await;
    remove(&d, &build).await;
    // Judged by what this pass removed: runners of older versions on the
    // same engine may sweep these objects themselves.
    for id in [&copied, &build] {
        assert!(
            !report.containers_removed.contains(id),
            "gc removed a non-sandbox {id}: {report:?}"
        );
    }
}

/// Removes the test's images and every container of its run id, also when
/// the test panics (a build step the engine never started stays `Created`).
struct BuildLeftovers {
    run_id: String,
    tag: String,
}

impl Drop for BuildLeftovers {
    fn drop(&mut self) {
        let ids = docker_cli(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label={LABEL_RUN_ID}={}", self.run_id),
        ]);
        for id in ids.split_whitespace() {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
        let _ = Command::new("docker")
            .args([
                "rmi",
                "-f",
                &format!("{}:step", self.tag),
                &format!("{}:base", self.tag),
            ])
            .output();
    }
}

/// Runs `docker build` with the classic builder (as `runner eval` does).
fn build(dir: &std::path::Path, tag: &str) -> Command {
    let mut c = Command::new("docker");
    c.env("DOCKER_BUILDKIT", "0")
        // --force-rm: a step that fails (or never starts) leaves no
        // container behind either.
        .args(["build", "-q", "--force-rm", "-t", tag, "."])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[tokio::test]
async fn gc_during_a_build_from_a_labelled_image_leaves_the_build_alone() {
    let _s = serial();
    let d = docker().await;
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let run_id = run_id("sec-gc-build");
    let tag = format!("runner-test-{}", run_id.to_lowercase());
    let _leftovers = BuildLeftovers {
        run_id: run_id.clone(),
        tag: tag.clone(),
    };
    let base = tempfile::tempdir().unwrap();
    // A base image carrying a dead runner's labels, as a committed
    // sandbox would: the build's containers inherit them.
    let labels: Vec<String> = owner_labels(&run_id, dead, "1")
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    std::fs::write(
        base.path().join("Dockerfile"),
        format!("FROM {TINY}\nLABEL {}\n", labels.join(" ")),
    )
    .unwrap();
    let out = build(base.path(), &format!("{tag}:base")).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let step = tempfile::tempdir().unwrap();
    std::fs::write(
        step.path().join("Dockerfile"),
        format!("FROM {tag}:base\nRUN sleep 4 # {run_id}\n"),
    )
    .unwrap();
    let building = build(step.path(), &format!("{tag}:step")).spawn().unwrap();
    // Wait for the build's container, then sweep.
    let until = Instant::now() + Duration::from_secs(20);
    let step_container = loop {
        let ps = docker_cli(&[
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("label={LABEL_RUN_ID}={run_id}"),
        ]);
        if let Some(id) = ps.lines().next() {
            break id.to_string();
        }
        assert!(Instant::now() < until, "the build never started its step");
        std::thread::sleep(Duration::from_millis(100));
    };
    let report = gc(&d).await.unwrap();
    let done = building.wait_with_output().unwrap();
    eprintln!(
        "gc during the build: {report:?}; the build {}",
        if done.status.success() {
            "succeeded".to_string()
        } else {
            format!("failed: {}", String::from_utf8_lossy(&done.stderr))
        }
    );
    // Judged by what this pass removed: a runner of an older version on
    // the same engine may still sweep the build's container itself.
    assert!(
        !report.containers_removed.contains(&step_container),
        "gc removed the running build's container: {report:?}"
    );
}
