//! Seeding a host workspace from an image: the files an image ships in its
//! working directory (a task's starting state) are hidden by the bind
//! mount of the run's workspace, so they are copied out first, through a
//! created (never started) labelled container and the archive API,
//! extracted safely.

use std::path::Path;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::CreateContainerOptionsBuilder;

use super::client::{CALL_TIMEOUT, call};
use super::config::{CONTAINER_WORKDIR, DockerConfig};
use super::container::{container_name, labels, remove};
use super::{copy, image};
use crate::exec::ExecError;

use crate::exec::backend::Seeded;

/// Copies the image's working directory into the empty host directory
/// `host`; a directory missing from the image leaves it empty.
pub async fn seed_workspace(
    image_ref: &str,
    host: &Path,
    run_id: &str,
) -> Result<Seeded, ExecError> {
    let docker = super::client::connect().await?;
    image::ensure_image(&docker, image_ref).await?;
    let info = call(
        "inspect image",
        image_ref,
        CALL_TIMEOUT,
        docker.inspect_image(image_ref),
    )
    .await?;
    let workdir = info
        .config
        .and_then(|c| c.working_dir)
        .filter(|w| w.starts_with('/') && w.len() > 1)
        .map(|w| w.trim_end_matches('/').to_string())
        .unwrap_or_else(|| CONTAINER_WORKDIR.to_string());
    let cfg = DockerConfig {
        image: image_ref.to_string(),
        run_id: run_id.to_string(),
        ..DockerConfig::default()
    };
    let name = format!("{}-seed", container_name(run_id));
    let body = ContainerCreateBody {
        image: Some(image_ref.to_string()),
        entrypoint: Some(vec!["true".into()]),
        cmd: Some(vec![]),
        labels: Some(labels(&cfg)),
        network_disabled: Some(true),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::new().name(&name).build();
    let created = call(
        "create container",
        &name,
        CALL_TIMEOUT,
        docker.create_container(Some(opts), body),
    )
    .await?;
    let result = copy::download(
        &docker,
        &created.id,
        host,
        &workdir,
        copy::MAX_COLLECT_BYTES,
    )
    .await;
    let removed = remove(&docker, &created.id).await;
    let report = match result {
        Ok(r) => r,
        // No such directory in the image: nothing to seed.
        Err(ExecError::Engine { detail, .. }) if detail.contains("404") => {
            copy::CollectReport::default()
        }
        Err(e) => return Err(e),
    };
    removed?;
    Ok(Seeded {
        workdir,
        skipped: report.skipped.len(),
    })
}

/// Most bytes of an image directory's archive read to find its own entry
/// (the first one; a PAX header may come before it).
const OWNER_PROBE_BYTES: usize = 64 << 10;

/// The owner and mode of the directory `dir` in `image_ref` (from the
/// first entry of its archive, read through a created, never started,
/// labelled container); `None` when the image has no such directory.
pub async fn image_dir_owner(
    docker: &bollard::Docker,
    image_ref: &str,
    dir: &str,
    run_id: &str,
) -> Result<Option<copy::DirOwner>, ExecError> {
    use futures::StreamExt;
    let cfg = DockerConfig {
        image: image_ref.to_string(),
        run_id: run_id.to_string(),
        ..DockerConfig::default()
    };
    let name = format!("{}-owner", container_name(run_id));
    let body = ContainerCreateBody {
        image: Some(image_ref.to_string()),
        entrypoint: Some(vec!["true".into()]),
        cmd: Some(vec![]),
        labels: Some(labels(&cfg)),
        network_disabled: Some(true),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::new().name(&name).build();
    let created = call(
        "create container",
        &name,
        CALL_TIMEOUT,
        docker.create_container(Some(opts), body),
    )
    .await?;
    let opts = bollard::query_parameters::DownloadFromContainerOptionsBuilder::new()
        .path(dir)
        .build();
    let mut head: Vec<u8> = Vec::new();
    let mut failed = None;
    {
        let mut stream = docker.download_from_container(&created.id, Some(opts));
        while head.len() < OWNER_PROBE_BYTES {
            match tokio::time::timeout(CALL_TIMEOUT, stream.next()).await {
                Ok(Some(Ok(chunk))) => head.extend_from_slice(&chunk),
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    failed = Some(e);
                    break;
                }
                // What came so far may hold the entry; else no owner.
                Err(_) => break,
            }
        }
    }
    remove(docker, &created.id).await?;
    if let Some(e) = failed {
        if super::client::status_of(&e) == Some(404) {
            return Ok(None);
        }
        return Err(super::client::docker_err(
            "read an image directory",
            dir,
            &e,
        ));
    }
    let mut archive = tar::Archive::new(&head[..]);
    let first = archive
        .entries()
        .ok()
        .and_then(|mut e| e.next())
        .and_then(Result::ok);
    Ok(first.and_then(|e| {
        let h = e.header();
        if !h.entry_type().is_dir() {
            return None;
        }
        Some(copy::DirOwner {
            uid: u32::try_from(h.uid().ok()?).ok()?,
            gid: u32::try_from(h.gid().ok()?).ok()?,
            mode: h.mode().ok()?,
        })
    }))
}
