//! Seeding a host workspace from an image: the files an image ships in its
//! working directory (a task's starting state) are hidden by the bind
//! mount of the run's workspace, so they are copied out first, through a
//! created (never started) labelled container and the archive API,
//! extracted safely. The same container gives the image's accounts
//! (`/etc/passwd`, `/etc/group`), read as data and never followed.

use std::io::Read;

use std::path::Path;

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
};
use futures::StreamExt;

use super::client::{CALL_TIMEOUT, ENGINE, call, docker_err, short, status_of};
use super::config::{CONTAINER_WORKDIR, DockerConfig};
use super::container::{container_name, labels, remove};
use super::{copy, image};
use crate::exec::ExecError;

use crate::exec::backend::{MAX_ACCOUNTS_FILE_BYTES, Seeded};

/// A labelled container of `image_ref` that is never started, named
/// `<run>-<what>`, to read the image's files through the archive API.
async fn probe_container(
    docker: &bollard::Docker,
    image_ref: &str,
    run_id: &str,
    what: &str,
) -> Result<bollard::models::ContainerCreateResponse, ExecError> {
    let cfg = DockerConfig {
        image: image_ref.to_string(),
        run_id: run_id.to_string(),
        ..DockerConfig::default()
    };
    let name = format!("{}-{what}", container_name(run_id));
    // Never started; hardened all the same, as every container runner makes.
    let mut host_config = bollard::models::HostConfig::default();
    super::hardening::harden(&mut host_config, &cfg.seccomp);
    let body = ContainerCreateBody {
        host_config: Some(host_config),
        image: Some(image_ref.to_string()),
        entrypoint: Some(vec!["true".into()]),
        cmd: Some(vec![]),
        labels: Some(labels(&cfg)),
        network_disabled: Some(true),
        ..Default::default()
    };
    let opts = CreateContainerOptionsBuilder::new().name(&name).build();
    call(
        "create container",
        &name,
        CALL_TIMEOUT,
        docker.create_container(Some(opts), body),
    )
    .await
}

/// Copies the image's working directory (or `dir`, when given) into the
/// empty host directory `host`; a directory missing from the image leaves
/// it empty.
pub async fn seed_workspace(
    image_ref: &str,
    dir: Option<&str>,
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
    let image_user = info
        .config
        .as_ref()
        .and_then(|c| c.user.clone())
        .filter(|u| !u.trim().is_empty());
    let workdir = dir
        .map(str::to_string)
        .or_else(|| info.config.and_then(|c| c.working_dir))
        .filter(|w| w.starts_with('/') && w.len() > 1)
        .map(|w| w.trim_end_matches('/').to_string())
        .unwrap_or_else(|| CONTAINER_WORKDIR.to_string());
    let created = probe_container(&docker, image_ref, run_id, "seed").await?;
    let result = copy::download(
        &docker,
        &created.id,
        host,
        &workdir,
        copy::MAX_COLLECT_BYTES,
    )
    .await;
    let passwd = small_file(&docker, &created.id, "/etc/passwd").await;
    let group = small_file(&docker, &created.id, "/etc/group").await;
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
        image_user,
        passwd: passwd?,
        group: group?,
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
    let created = probe_container(docker, image_ref, run_id, "owner").await?;
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

/// The regular file `path` of the container `id` as text, through the
/// archive API: `None` when it is missing, a link (the archive holds the
/// link itself, which is not followed), anything but a regular file, or
/// larger than [`MAX_ACCOUNTS_FILE_BYTES`] (the download stops there).
async fn small_file(docker: &Docker, id: &str, path: &str) -> Result<Option<String>, ExecError> {
    let opts = DownloadFromContainerOptionsBuilder::new()
        .path(path)
        .build();
    let mut stream = docker.download_from_container(id, Some(opts));
    // Room for the tar's headers (a long name's too) and padding.
    let limit = MAX_ACCOUNTS_FILE_BYTES + (64 << 10);
    let mut tar = Vec::new();
    loop {
        let chunk = match tokio::time::timeout(CALL_TIMEOUT, stream.next()).await {
            Err(_) => {
                return Err(ExecError::EngineTimeout {
                    engine: ENGINE,
                    op: "read the image's accounts",
                    secs: CALL_TIMEOUT.as_secs(),
                });
            }
            Ok(None) => break,
            // No such file in the image.
            Ok(Some(Err(e))) if status_of(&e) == Some(404) => return Ok(None),
            Ok(Some(Err(e))) => return Err(docker_err("read the image's accounts", short(id), &e)),
            Ok(Some(Ok(c))) => c,
        };
        if u64::try_from(tar.len() + chunk.len()).unwrap_or(u64::MAX) > limit {
            return Ok(None);
        }
        tar.extend_from_slice(&chunk);
    }
    Ok(regular_file_of_tar(&tar, MAX_ACCOUNTS_FILE_BYTES))
}

/// The content of the first entry of `tar` when it is a regular file of at
/// most `max` bytes (decoded lossily), else `None`.
fn regular_file_of_tar(tar: &[u8], max: u64) -> Option<String> {
    let mut archive = tar::Archive::new(tar);
    let entry = archive.entries().ok()?.next()?.ok()?;
    let header = entry.header();
    if !header.entry_type().is_file() || header.size().ok()? > max {
        return None;
    }
    let mut data = Vec::new();
    entry
        .take(max.saturating_add(1))
        .read_to_end(&mut data)
        .ok()?;
    if u64::try_from(data.len()).ok()? > max {
        return None;
    }
    Some(String::from_utf8_lossy(&data).into_owned())
}

#[cfg(test)]
mod tests {
    use super::regular_file_of_tar;

    fn tar_of(kind: tar::EntryType, data: &[u8]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(u64::try_from(data.len()).unwrap());
        h.set_mode(0o644);
        if kind == tar::EntryType::Symlink {
            h.set_size(0);
            b.append_link(&mut h, "passwd", "/host/secret").unwrap();
        } else {
            b.append_data(&mut h, "passwd", data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn only_a_small_regular_file_is_read() {
        let file = tar_of(tar::EntryType::Regular, b"root:x:0:0::/root:/bin/sh\n");
        assert_eq!(
            regular_file_of_tar(&file, 100).as_deref(),
            Some("root:x:0:0::/root:/bin/sh\n")
        );
        assert_eq!(regular_file_of_tar(&file, 5), None, "too big");
        let link = tar_of(tar::EntryType::Symlink, b"");
        assert_eq!(regular_file_of_tar(&link, 100), None, "a link");
        let dir = tar_of(tar::EntryType::Directory, b"");
        assert_eq!(regular_file_of_tar(&dir, 100), None, "a directory");
        assert_eq!(regular_file_of_tar(b"", 100), None, "no entry");
    }
}
