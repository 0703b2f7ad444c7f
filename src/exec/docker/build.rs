//! Building an image from a directory with a Dockerfile (a task's
//! `environment/`), once, cached under a tag derived from the directory's
//! content, so an unchanged task is not rebuilt on the next run.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures::StreamExt;

use super::container::{LABEL_MANAGED, MANAGED_VALUE};

/// Repository of the images built for tasks.
pub const TASK_IMAGE_REPO: &str = "runner-task";
/// Label on task images: the task's name.
pub const LABEL_TASK: &str = "runner.task";

/// Why a task has no image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{0}: no Dockerfile")]
    NoImage(PathBuf),
    #[error("cannot read the build context {path}: {source}")]
    Context {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("building {tag} failed: {detail}")]
    Build { tag: String, detail: String },
    #[error("building {tag} took longer than {secs}s (environment.build_timeout_sec)")]
    Timeout { tag: String, secs: u64 },
    #[error("Docker: {0}")]
    Docker(String),
}

/// Builds `context` (a directory with a Dockerfile) unless an image of the
/// same content is cached; returns its tag.
pub async fn build_cached(
    docker: &Docker,
    context: &Path,
    timeout: Duration,
    label: &str,
) -> Result<String, ImageError> {
    if !context.join("Dockerfile").is_file() {
        return Err(ImageError::NoImage(context.to_path_buf()));
    }
    let (tag, tar) = {
        let d = context.to_path_buf();
        tokio::task::spawn_blocking(move || context_tar(&d))
            .await
            .map_err(|e| ImageError::Docker(e.to_string()))??
    };
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    match tokio::time::timeout(timeout, build(docker, &tag, label, tar)).await {
        Ok(r) => r.map(|()| tag),
        Err(_) => Err(ImageError::Timeout {
            tag,
            secs: timeout.as_secs(),
        }),
    }
}

/// Builds with the classic builder, network off, intermediate containers
/// always removed, the image labelled as runner's.
async fn build(docker: &Docker, tag: &str, task: &str, context: Vec<u8>) -> Result<(), ImageError> {
    let labels = HashMap::from([
        (LABEL_MANAGED.to_string(), MANAGED_VALUE.to_string()),
        (LABEL_TASK.to_string(), task.to_string()),
    ]);
    let opts = BuildImageOptionsBuilder::new()
        .t(tag)
        .rm(true)
        .forcerm(true)
        .networkmode("none")
        .labels(&labels)
        .build();
    let mut stream = docker.build_image(opts, None, Some(bollard::body_full(context.into())));
    let mut tail: Vec<String> = Vec::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| ImageError::Build {
            tag: tag.to_string(),
            detail: e.to_string(),
        })?;
        if let Some(msg) = info.error_detail.and_then(|d| d.message) {
            return Err(ImageError::Build {
                tag: tag.to_string(),
                detail: msg.trim().to_string(),
            });
        }
        if let Some(s) = info.stream {
            tail.push(s.trim_end().to_string());
            if tail.len() > 5 {
                tail.remove(0);
            }
        }
    }
    if docker.inspect_image(tag).await.is_err() {
        return Err(ImageError::Build {
            tag: tag.to_string(),
            detail: format!("no image produced; last output: {}", tail.join(" | ")),
        });
    }
    Ok(())
}

/// Tars `dir` (links kept as links) and derives the cache tag from the
/// paths, modes and contents. The hash is std's SipHash with fixed keys:
/// stable for a given toolchain, and a change only costs a rebuild.
fn context_tar(dir: &Path) -> Result<(String, Vec<u8>), ImageError> {
    let err = |source| ImageError::Context {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    walk(dir, Path::new(""), &mut files).map_err(err)?;
    files.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    for rel in &files {
        let full = dir.join(rel);
        rel.hash(&mut hasher);
        let meta = std::fs::symlink_metadata(&full).map_err(err)?;
        if meta.is_file() {
            std::fs::read(&full).map_err(err)?.hash(&mut hasher);
        } else if meta.file_type().is_symlink() {
            std::fs::read_link(&full).map_err(err)?.hash(&mut hasher);
        }
        builder.append_path_with_name(&full, rel).map_err(err)?;
    }
    let data = builder.into_inner().map_err(err)?;
    Ok((format!("{TASK_IMAGE_REPO}:{:016x}", hasher.finish()), data))
}

fn walk(base: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(base.join(rel))? {
        let entry = entry?;
        let r = rel.join(entry.file_name());
        let ft = entry.file_type()?;
        out.push(r.clone());
        if ft.is_dir() {
            walk(base, &r, out)?;
        }
    }
    Ok(())
}
