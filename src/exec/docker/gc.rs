//! Garbage collection of runner sandboxes (containers, their volumes and
//! snapshot images)
//! whose owner died (on this host) or whose expiry passed. A sandbox ends
//! itself when its runner dies (see `lifeline`); this sweeps what that
//! cannot cover: a container created but never started, one kept after a
//! failed copy-back, an engine that kept a dead runner's connection.
//!
//! A task's sidecars and their network (see `services`) are swept the same
//! way: they cannot end with their runner by themselves.
//!
//! Only sandboxes are touched: the owner labels must all be there, and a
//! container must carry the name runner gave it, since labels also reach
//! containers runner never made (from an image built on a committed
//! sandbox, for instance another process's running image build).

use super::client::ENGINE;
use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, ListNetworksOptionsBuilder,
    ListVolumesOptionsBuilder, RemoveVolumeOptionsBuilder,
};

use super::client::{CALL_TIMEOUT, call, docker_err, short, status_of};
use super::container::{
    LABEL_EXPIRES, LABEL_MANAGED, LABEL_OWNER_HOST, LABEL_OWNER_PID, LABEL_OWNER_START,
    LABEL_RUN_ID, MANAGED_VALUE, host_name, is_sandbox_name, now_secs, remove,
};
use super::services::{
    LABEL_SERVICE, is_service_container_name, is_service_network_name, remove_network,
};
use super::snapshot::{LABEL_SNAPSHOT, is_snapshot_image, remove_image};
use crate::exec::ExecError;
use crate::exec::liveness;

/// What a gc pass removed, and what it could not.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct GcReport {
    /// Ids of removed containers.
    pub containers_removed: Vec<String>,
    /// Names of removed volumes.
    pub volumes_removed: Vec<String>,
    /// Ids of removed snapshot images (see `snapshot`).
    pub images_removed: Vec<String>,
    /// Names of removed service networks (see `services`).
    pub networks_removed: Vec<String>,
    /// One line per object that should have gone but did not.
    pub errors: Vec<String>,
}

/// Whether an object with these labels is a runner sandbox's: every owner
/// label is there.
fn has_owner_labels(labels: &HashMap<String, String>) -> bool {
    [
        LABEL_RUN_ID,
        LABEL_OWNER_PID,
        LABEL_OWNER_HOST,
        LABEL_EXPIRES,
    ]
    .iter()
    .all(|k| labels.get(*k).is_some_and(|v| !v.is_empty()))
}

/// Whether a container is a sandbox or a task's sidecar: owner labels,
/// and the name runner gave it for that run (and service).
pub fn is_sandbox_container(labels: &HashMap<String, String>, names: &[String]) -> bool {
    let Some(run_id) = labels.get(LABEL_RUN_ID) else {
        return false;
    };
    let service = labels.get(LABEL_SERVICE);
    has_owner_labels(labels)
        && names.iter().any(|n| match service {
            Some(s) => is_service_container_name(n, run_id, s),
            None => is_sandbox_name(n, run_id),
        })
}

/// Whether a network is a task's service network: owner labels, and the
/// name runner gave it for that run.
fn is_service_network(labels: &HashMap<String, String>, name: &str) -> bool {
    labels
        .get(LABEL_RUN_ID)
        .is_some_and(|run_id| has_owner_labels(labels) && is_service_network_name(name, run_id))
}

/// Whether an object with these labels is abandoned: its owner process on
/// this host is gone, a zombie, or its pid now belongs to another process.
/// Owners elsewhere cannot be checked, so their objects wait for expiry; a
/// live owner here keeps its objects even past expiry (another run's sweep
/// must never pull a long run's sandbox or workspace from under it).
/// Objects without the owner labels are not runner sandboxes: never.
pub fn is_abandoned(labels: &HashMap<String, String>, now: u64, this_host: &str) -> bool {
    if !has_owner_labels(labels) {
        return false;
    }
    let expired = labels
        .get(LABEL_EXPIRES)
        .and_then(|e| e.parse::<u64>().ok())
        .is_some_and(|e| e <= now);
    let pid = labels
        .get(LABEL_OWNER_PID)
        .and_then(|p| p.parse::<u32>().ok());
    let local = labels.get(LABEL_OWNER_HOST).map(String::as_str) == Some(this_host);
    let Some(pid) = pid.filter(|_| local) else {
        return expired;
    };
    !liveness::is_alive(pid, labels.get(LABEL_OWNER_START).map(String::as_str))
}

/// Removes abandoned runner containers (sandboxes and sidecars), then
/// service networks, then volumes.
pub async fn gc(docker: &Docker) -> Result<GcReport, ExecError> {
    let mut report = GcReport::default();
    let now = now_secs();
    let host = host_name();
    let containers = list_runner_containers(docker).await?;
    for c in containers {
        let (Some(id), Some(labels)) = (c.id, c.labels) else {
            continue;
        };
        let names = c.names.unwrap_or_default();
        if !is_sandbox_container(&labels, &names) || !is_abandoned(&labels, now, &host) {
            continue;
        }
        match remove(docker, &id).await {
            Ok(()) => report.containers_removed.push(id),
            Err(e) => report.errors.push(format!("container {}: {e}", short(&id))),
        }
    }
    // After the containers, so no sidecar holds the network any more (a
    // dead run's sandbox goes by itself; one still going is disconnected).
    let opts = ListNetworksOptionsBuilder::new()
        .filters(&managed_filter())
        .build();
    let networks = call(
        "list networks",
        "",
        CALL_TIMEOUT,
        docker.list_networks(Some(opts)),
    )
    .await?;
    for n in networks {
        let (Some(name), Some(labels)) = (n.name, n.labels) else {
            continue;
        };
        if !is_service_network(&labels, &name) || !is_abandoned(&labels, now, &host) {
            continue;
        }
        match remove_network(docker, &name).await {
            Ok(true) => report.networks_removed.push(name),
            Ok(false) => {}
            Err(e) => report.errors.push(format!("network {name}: {e}")),
        }
    }
    let opts = ListVolumesOptionsBuilder::new()
        .filters(&managed_filter())
        .build();
    let volumes = call(
        "list volumes",
        "",
        CALL_TIMEOUT,
        docker.list_volumes(Some(opts)),
    )
    .await?;
    for v in volumes.volumes.unwrap_or_default() {
        if !is_abandoned(&v.labels, now, &host) {
            continue;
        }
        match remove_volume(docker, &v.name).await {
            Ok(true) => report.volumes_removed.push(v.name),
            Ok(false) => {}
            Err(e) => report.errors.push(format!("volume {}: {e}", v.name)),
        }
    }
    sweep_snapshots(docker, now, &host, &mut report).await?;
    Ok(report)
}

/// Removes the snapshot images of dead runs (after their containers, so
/// none uses them any more). An image a container still uses stays, with
/// an error line.
async fn sweep_snapshots(
    docker: &Docker,
    now: u64,
    host: &str,
    report: &mut GcReport,
) -> Result<(), ExecError> {
    let mut filters = managed_filter();
    if let Some(l) = filters.get_mut("label") {
        l.push(LABEL_SNAPSHOT.to_string());
    }
    let opts = ListImagesOptionsBuilder::new().filters(&filters).build();
    let images = call(
        "list images",
        "",
        CALL_TIMEOUT,
        docker.list_images(Some(opts)),
    )
    .await?;
    for i in images {
        if !is_snapshot_image(&i.labels, &i.repo_tags) || !is_abandoned(&i.labels, now, host) {
            continue;
        }
        match remove_image(docker, &i.id).await {
            Ok(()) => report.images_removed.push(i.id),
            Err(e) => report.errors.push(format!("image {}: {e}", short(&i.id))),
        }
    }
    Ok(())
}

/// Every runner-labelled container on the engine, running or not.
async fn list_runner_containers(
    docker: &Docker,
) -> Result<Vec<bollard::models::ContainerSummary>, ExecError> {
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&managed_filter())
        .build();
    call(
        "list containers",
        "",
        CALL_TIMEOUT,
        docker.list_containers(Some(opts)),
    )
    .await
}

/// The label filter that selects runner's objects.
fn managed_filter() -> HashMap<String, Vec<String>> {
    HashMap::from([(
        "label".to_string(),
        vec![format!("{LABEL_MANAGED}={MANAGED_VALUE}")],
    )])
}

/// Run ids of every runner container on the engine, running or not.
pub async fn run_ids_with_containers(
    docker: &Docker,
) -> Result<std::collections::HashSet<String>, ExecError> {
    let containers = list_runner_containers(docker).await?;
    Ok(containers
        .into_iter()
        .filter_map(|c| c.labels?.get(LABEL_RUN_ID).cloned())
        .collect())
}

/// Attempts at removing a volume that is still in use.
const VOLUME_REMOVE_ATTEMPTS: usize = 5;
/// Pause between those attempts.
const VOLUME_REMOVE_PAUSE: Duration = Duration::from_millis(300);

/// Removes a volume; `Ok(false)` when it was already gone. Every run sweeps
/// at start, so another runner may be removing the same abandoned objects
/// right now: a volume can vanish under us (404) or still be held by a
/// container someone else is removing (409), which is retried briefly.
async fn remove_volume(docker: &Docker, name: &str) -> Result<bool, ExecError> {
    let mut attempt = 1;
    loop {
        let opts = RemoveVolumeOptionsBuilder::new().force(true).build();
        match tokio::time::timeout(CALL_TIMEOUT, docker.remove_volume(name, Some(opts))).await {
            Ok(Ok(())) => return Ok(true),
            Ok(Err(e)) if status_of(&e) == Some(404) => return Ok(false),
            Ok(Err(e)) if status_of(&e) == Some(409) && attempt < VOLUME_REMOVE_ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(VOLUME_REMOVE_PAUSE).await;
            }
            Ok(Err(e)) => return Err(docker_err("remove volume", name, &e)),
            Err(_) => {
                return Err(ExecError::EngineTimeout {
                    engine: ENGINE,
                    op: "remove volume",
                    secs: CALL_TIMEOUT.as_secs(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, String)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn abandonment_rules() {
        let me = std::process::id();
        let start = liveness::process_start(me).unwrap();
        let host = "h";
        let live = labels(&[
            (LABEL_RUN_ID, "r".into()),
            (LABEL_OWNER_HOST, host.into()),
            (LABEL_OWNER_PID, me.to_string()),
            (LABEL_OWNER_START, start.clone()),
            (LABEL_EXPIRES, "2000".into()),
        ]);
        assert!(!is_abandoned(&live, 1000, host));
        assert!(
            !is_abandoned(&live, 2000, host),
            "expired but its owner is alive here"
        );
        assert!(
            is_abandoned(&live, 2000, "other-host"),
            "expired, owner elsewhere"
        );
        let mut reused = live.clone();
        reused.insert(LABEL_OWNER_START.into(), "1".into());
        assert!(is_abandoned(&reused, 1000, host), "pid reused");
        assert!(
            !is_abandoned(&reused, 1000, "other-host"),
            "not ours to judge"
        );
        let mut dead = live.clone();
        dead.insert(LABEL_OWNER_PID.into(), "4194303".into());
        assert!(is_abandoned(&dead, 1000, host));
        // No owner labels (an image build's container): never.
        let build = labels(&[(LABEL_EXPIRES, "1".into())]);
        assert!(!is_abandoned(&build, 1000, host));
    }

    #[test]
    fn only_containers_named_by_runner_are_sandboxes() {
        let l = labels(&[
            (LABEL_RUN_ID, "20260101-x".into()),
            (LABEL_OWNER_HOST, "h".into()),
            (LABEL_OWNER_PID, "1".into()),
            (LABEL_EXPIRES, "1".into()),
        ]);
        let named = |n: &str| vec![n.to_string()];
        assert!(is_sandbox_container(
            &l,
            &named("/runner-20260101-x-0a1b2c3d")
        ));
        // The run's helper containers (seeding, an owner lookup) too.
        for helper in [
            "/runner-20260101-x-0a1b2c3d-seed",
            "/runner-20260101-x-0a1b2c3d-owner",
        ] {
            assert!(is_sandbox_container(&l, &named(helper)), "{helper}");
        }
        assert!(!is_sandbox_container(
            &l,
            &named("/runner-20260101-x-0a1b2c3d-other")
        ));
        assert!(!is_sandbox_container(&l, &named("/eager_hopper")));
        assert!(!is_sandbox_container(&l, &named("/runner-20260101-x-zz")));
        assert!(!is_sandbox_container(
            &labels(&[]),
            &named("/runner-r-0a1b2c3d")
        ));
        // A sidecar: its service label and the name runner gave it.
        let mut svc = l.clone();
        svc.insert(LABEL_SERVICE.into(), "db".into());
        assert!(is_sandbox_container(
            &svc,
            &named("/runner-20260101-x-svc-db-0a1b2c3d")
        ));
        assert!(!is_sandbox_container(
            &svc,
            &named("/runner-20260101-x-svc-cache-0a1b2c3d")
        ));
        assert!(!is_sandbox_container(
            &svc,
            &named("/runner-20260101-x-0a1b2c3d")
        ));
        assert!(is_service_network(&l, "runner-20260101-x-net-0a1b2c3d"));
        assert!(!is_service_network(&l, "runner-20260101-x-net-zz"));
        assert!(!is_service_network(&labels(&[]), "runner-r-net-0a1b2c3d"));
    }
}
