//! What a sandbox changed, and keeping it: the diff of the container's
//! filesystem against its image (tamper evidence for grading; read from
//! its overlay upper directory when it can be, else the engine's)
//! and a commit of the container to an image a new sandbox starts from
//! (the `snapshot` grading mode). Neither sees mounts: the workspace, HOME
//! and /tmp tmpfs are not in them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ChangeType, ContainerConfig, DriverData, FilesystemChange};
use bollard::query_parameters::{CommitContainerOptionsBuilder, RemoveImageOptionsBuilder};

use super::client::{CALL_TIMEOUT, ENGINE, call, docker_err, short, status_of};
use super::upperdir;
use crate::exec::{ChangeKind, ExecError, FsChange, FsChanges, MAX_FS_CHANGES};

/// Repository of snapshot images; `runner gc` removes only images tagged
/// in it (labels alone are inherited by images built from one).
pub const SNAPSHOT_REPO: &str = "runner-snapshot";
/// Label on snapshot images: the run whose sandbox was committed.
pub const LABEL_SNAPSHOT: &str = "runner.snapshot-of";
/// Longest a commit may take (it writes the whole diff as a layer).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Longest the walk of a sandbox's upper directory may take; past it the
/// engine's diff is asked instead (which takes longer still).
pub const UPPER_WALK_BUDGET: Duration = Duration::from_secs(5);
/// Storage drivers whose upper directory is walked: fuse-overlayfs, whose
/// engine diff is the naive one (a walk of the whole image) that
/// [`super::upperdir`] reproduces, checked against the engine entry by
/// entry. Not overlay2: its engine diff already reads only the upper
/// directory, and lists differently (an opaque directory as deleted then
/// added, any copied-up file as modified), so walking it would change the
/// evidence for no gain.
const WALKED_DRIVERS: [&str; 1] = ["fuse-overlayfs"];

/// The container's filesystem changes, at most [`MAX_FS_CHANGES`]: read
/// from its overlay upper directory on this host when the engine is here
/// and uses fuse-overlayfs (see [`super::upperdir`]; milliseconds), else
/// the engine's diff (on fuse-overlayfs a walk of the whole image:
/// seconds on a Debian image).
pub async fn changes(docker: &Docker, id: &str) -> Result<FsChanges, ExecError> {
    match upper_changes(docker, id).await {
        Ok(found) => return Ok(found),
        Err(why) => tracing::debug!(
            container = short(id),
            "filesystem changes from the engine's diff: {why}"
        ),
    }
    engine_changes(docker, id).await
}

/// The engine's own diff of the container, at most [`MAX_FS_CHANGES`].
pub async fn engine_changes(docker: &Docker, id: &str) -> Result<FsChanges, ExecError> {
    let list = call(
        "list filesystem changes",
        short(id),
        CALL_TIMEOUT,
        docker.container_changes(id),
    )
    .await?
    .unwrap_or_default();
    Ok(bounded(list, MAX_FS_CHANGES))
}

/// The changes read from the container's upper directory, or why they
/// cannot be (the caller then asks the engine).
pub async fn upper_changes(docker: &Docker, id: &str) -> Result<FsChanges, String> {
    if !super::client::engine_is_local() {
        return Err("the engine is not on this host".into());
    }
    let info = call(
        "inspect container",
        short(id),
        CALL_TIMEOUT,
        docker.inspect_container(id, None),
    )
    .await
    .map_err(|e| e.to_string())?;
    let (upper, lowers) = overlay_layers(info.graph_driver)?;
    let bounds = upperdir::Bounds {
        keep: MAX_FS_CHANGES,
        budget: UPPER_WALK_BUDGET,
    };
    tokio::task::spawn_blocking(move || upperdir::changes(&upper, &lowers, bounds))
        .await
        .map_err(|e| format!("the walk of the upper directory failed: {e}"))?
        .map_err(|e| format!("the walk of the upper directory gave up: {e}"))
}

/// The upper directory and the lower layers (topmost first) of a
/// container's overlay, from its storage driver's data, when it is one
/// whose upper directory is read.
fn overlay_layers(driver: Option<DriverData>) -> Result<(PathBuf, Vec<PathBuf>), String> {
    let driver = driver.ok_or("the engine names no storage driver")?;
    if !WALKED_DRIVERS.contains(&driver.name.as_str()) {
        return Err(format!(
            "storage driver {} is not one whose upper directory is read",
            driver.name
        ));
    }
    let upper = driver
        .data
        .get("UpperDir")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .ok_or("the engine names no upper directory")?;
    let mut lowers = Vec::new();
    for p in driver
        .data
        .get("LowerDir")
        .into_iter()
        .flat_map(|l| l.split(':'))
    {
        let p = PathBuf::from(p);
        if !p.is_absolute() {
            return Err(format!(
                "lower layer {} is not an absolute path",
                p.display()
            ));
        }
        lowers.push(p);
    }
    Ok((upper, lowers))
}

/// The engine's kinds: 0 modified, 1 added, 2 deleted.
fn kind_of(kind: ChangeType) -> ChangeKind {
    match kind {
        ChangeType::_0 => ChangeKind::Modified,
        ChangeType::_1 => ChangeKind::Added,
        ChangeType::_2 => ChangeKind::Deleted,
    }
}

/// Keeps the first `max` changes and counts the rest.
fn bounded(list: Vec<FilesystemChange>, max: usize) -> FsChanges {
    let omitted = list.len().saturating_sub(max);
    let changes = list
        .into_iter()
        .take(max)
        .map(|c| FsChange {
            kind: kind_of(c.kind),
            path: c.path,
        })
        .collect();
    FsChanges { changes, omitted }
}

/// A tag of [`SNAPSHOT_REPO`] for a snapshot of run `run_id`.
fn snapshot_tag(run_id: &str) -> String {
    let clean: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(100)
        .collect();
    format!("{clean}-{:08x}", fastrand::u32(..))
}

/// Commits container `id` (paused meanwhile) to an image tagged in
/// [`SNAPSHOT_REPO`] and labelled with `labels` (the run's, so `runner gc`
/// removes it once the run is dead); returns the image id. Its entrypoint,
/// command, environment, user and working directory are the original
/// image's, not the sandbox's supervisor and settings, so the snapshot is
/// that image plus the filesystem changes. The engine still fills what the
/// image leaves empty from the container (an image without a command gets
/// the supervisor's arguments, an empty user becomes `0:0`, the same user,
/// and the container's HOME is added to an environment without one); a
/// sandbox started from it replaces all of that anyway.
pub async fn commit(
    docker: &Docker,
    id: &str,
    labels: &HashMap<String, String>,
) -> Result<String, ExecError> {
    let info = call(
        "inspect container",
        short(id),
        CALL_TIMEOUT,
        docker.inspect_container(id, None),
    )
    .await?;
    let image = info.image.ok_or_else(|| ExecError::Engine {
        engine: ENGINE,
        op: "snapshot",
        detail: format!("container {} names no image", short(id)),
    })?;
    let base = call(
        "inspect image",
        short(&image),
        CALL_TIMEOUT,
        docker.inspect_image(&image),
    )
    .await?
    .config
    .unwrap_or_default();
    let run_id = labels
        .get(super::container::LABEL_RUN_ID)
        .cloned()
        .unwrap_or_default();
    let mut all = base.labels.clone().unwrap_or_default();
    all.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    all.insert(LABEL_SNAPSHOT.into(), run_id.clone());
    let config = ContainerConfig {
        // Empty, not absent: the engine fills an absent one from the
        // container (the supervisor).
        entrypoint: Some(base.entrypoint.unwrap_or_default()),
        cmd: base.cmd,
        env: base.env,
        user: base.user,
        working_dir: base.working_dir,
        labels: Some(all),
        ..Default::default()
    };
    let tag = snapshot_tag(&run_id);
    let opts = CommitContainerOptionsBuilder::new()
        .container(id)
        .repo(SNAPSHOT_REPO)
        .tag(&tag)
        .comment("runner: snapshot of a sandbox")
        .pause(true)
        .build();
    let made = call(
        "commit the sandbox",
        short(id),
        COMMIT_TIMEOUT,
        docker.commit_container(opts, config),
    )
    .await?;
    Ok(made.id)
}

/// Removes an image (not forced, so one a container still uses stays,
/// with an error; its untagged parents go); one already gone counts as
/// removed.
pub async fn remove_image(docker: &Docker, image: &str) -> Result<(), ExecError> {
    let opts = RemoveImageOptionsBuilder::new()
        .force(false)
        .noprune(false)
        .build();
    match tokio::time::timeout(CALL_TIMEOUT, docker.remove_image(image, Some(opts), None)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if status_of(&e) == Some(404) => Ok(()),
        Ok(Err(e)) => Err(docker_err("remove image", image, &e)),
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op: "remove image",
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}

/// Whether an image listed with `tags` is a snapshot runner made: tagged
/// in [`SNAPSHOT_REPO`] (an image built from one inherits its labels, not
/// its tag).
pub fn is_snapshot_image(labels: &HashMap<String, String>, tags: &[String]) -> bool {
    labels.contains_key(LABEL_SNAPSHOT)
        && tags
            .iter()
            .any(|t| t.starts_with(&format!("{SNAPSHOT_REPO}:")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_is_mapped_and_bounded() {
        let list: Vec<FilesystemChange> = [
            ("/etc", ChangeType::_0),
            ("/etc/x", ChangeType::_1),
            ("/bin/y", ChangeType::_2),
        ]
        .into_iter()
        .map(|(p, k)| FilesystemChange {
            path: p.into(),
            kind: k,
        })
        .collect();
        let all = bounded(list.clone(), 10);
        assert_eq!(all.omitted, 0);
        assert_eq!(
            all.iter().map(|c| c.kind).collect::<Vec<_>>(),
            [ChangeKind::Modified, ChangeKind::Added, ChangeKind::Deleted]
        );
        let cut = bounded(list, 2);
        assert_eq!((cut.len(), cut.omitted), (2, 1));
        assert_eq!(
            serde_json::to_string(&cut[1]).unwrap(),
            r#"{"kind":"added","path":"/etc/x"}"#
        );
    }

    #[test]
    fn only_an_overlay_with_absolute_layer_paths_is_walked() {
        let driver = |name: &str, data: &[(&str, &str)]| {
            Some(DriverData {
                name: name.into(),
                data: data
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            })
        };
        let (upper, lowers) = overlay_layers(driver(
            "fuse-overlayfs",
            &[
                ("UpperDir", "/u/diff"),
                ("LowerDir", "/a-init/diff:/b/diff"),
            ],
        ))
        .expect("an overlay");
        assert_eq!(upper, PathBuf::from("/u/diff"));
        assert_eq!(lowers, [PathBuf::from("/a-init/diff"), "/b/diff".into()]);
        // No lower layer (an image of nothing) is still an overlay.
        let (_, none) =
            overlay_layers(driver("fuse-overlayfs", &[("UpperDir", "/u")])).expect("ok");
        assert!(none.is_empty());
        for bad in [
            None,
            driver("btrfs", &[("UpperDir", "/u")]),
            // Its engine diff is already quick and lists differently.
            driver("overlay2", &[("UpperDir", "/u"), ("LowerDir", "/l")]),
            driver("fuse-overlayfs", &[("LowerDir", "/l")]),
            driver("fuse-overlayfs", &[("UpperDir", "u/diff")]),
            driver(
                "fuse-overlayfs",
                &[("UpperDir", "/u"), ("LowerDir", "/l:rel")],
            ),
        ] {
            assert!(overlay_layers(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn snapshots_are_told_by_tag_and_label() {
        let l = HashMap::from([(LABEL_SNAPSHOT.to_string(), "r".to_string())]);
        let tag = format!("{SNAPSHOT_REPO}:{}", snapshot_tag("2026/x y"));
        assert!(tag.starts_with("runner-snapshot:2026-x-y-"), "{tag}");
        assert!(is_snapshot_image(&l, &[tag]));
        assert!(!is_snapshot_image(&l, &["mine:latest".into()]));
        assert!(!is_snapshot_image(
            &HashMap::new(),
            &["runner-snapshot:x".into()]
        ));
    }
}
