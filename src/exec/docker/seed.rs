//! Seeding a host workspace from an image: the files an image ships in
//! /workspace (a task's starting state) are hidden by the bind mount of the
//! run's workspace, so they are copied out first, through a created (never
//! started) labelled container and the archive API, extracted safely.

use std::path::Path;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::CreateContainerOptionsBuilder;

use super::client::{CALL_TIMEOUT, call};
use super::config::DockerConfig;
use super::container::{container_name, labels, remove};
use super::{copy, image};
use crate::exec::ExecError;

/// Copies the image's /workspace into the empty host directory `host`;
/// an image without /workspace leaves it empty. Returns how many entries
/// were refused (links out, devices...).
pub async fn seed_workspace(
    image_ref: &str,
    host: &Path,
    run_id: &str,
) -> Result<usize, ExecError> {
    let docker = super::client::connect().await?;
    image::ensure_image(&docker, image_ref).await?;
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
    let result = copy::download(&docker, &created.id, host).await;
    let removed = remove(&docker, &created.id).await;
    let report = match result {
        Ok(r) => r,
        // No /workspace in the image: nothing to seed.
        Err(ExecError::Docker { detail, .. }) if detail.contains("404") => {
            copy::CollectReport::default()
        }
        Err(e) => return Err(e),
    };
    removed?;
    Ok(report.skipped.len())
}
