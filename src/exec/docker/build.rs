//! Building an image from a directory with a Dockerfile (a task's
//! `environment/`), once, cached under a tag derived from the directory's
//! content, the ids of the images it builds on and the build arguments, so
//! an unchanged task is not rebuilt on the next run and one whose base
//! image was rebuilt is.

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
    build_args: &HashMap<String, String>,
    log: Option<&Path>,
) -> Result<String, ImageError> {
    let dockerfile = context.join("Dockerfile");
    if !dockerfile.is_file() {
        return Err(ImageError::NoImage(context.to_path_buf()));
    }
    let text = std::fs::read_to_string(&dockerfile).map_err(|source| ImageError::Context {
        path: dockerfile.clone(),
        source,
    })?;
    let (content, tar) = {
        let d = context.to_path_buf();
        tokio::task::spawn_blocking(move || context_tar(&d))
            .await
            .map_err(|e| ImageError::Docker(e.to_string()))??
    };
    let mut bases = Vec::new();
    for image in super::dockerfile::base_images(&text, build_args) {
        let id = base_id(docker, &image).await;
        bases.push((image, id));
    }
    let tag = cache_tag(content, &bases, build_args);
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    let log = log.map(BuildLog::create);
    let built = build(docker, &tag, label, build_args, tar, log.as_ref());
    match tokio::time::timeout(timeout, built).await {
        Ok(r) => r.map(|()| tag),
        Err(_) => Err(ImageError::Timeout {
            tag,
            secs: timeout.as_secs(),
        }),
    }
}

/// The id of the local image `image`, pulled first when missing; `None`
/// when it cannot be had (the build then reports why).
async fn base_id(docker: &Docker, image: &str) -> Option<String> {
    if let Ok(info) = docker.inspect_image(image).await {
        return info.id;
    }
    if let Err(e) = super::image::ensure_image(docker, image).await {
        tracing::debug!("base image {image} is not available before the build: {e}");
        return None;
    }
    docker.inspect_image(image).await.ok().and_then(|i| i.id)
}

/// The cache tag of a build: the context's content hash, each base image
/// with the id it has now, and the build arguments (sorted).
fn cache_tag(
    content: u64,
    bases: &[(String, Option<String>)],
    build_args: &HashMap<String, String>,
) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    content.hash(&mut hasher);
    bases.hash(&mut hasher);
    let mut args: Vec<_> = build_args.iter().collect();
    args.sort();
    args.hash(&mut hasher);
    format!("{TASK_IMAGE_REPO}:{:016x}", hasher.finish())
}

/// Builds with the classic builder, network off, intermediate containers
/// always removed, the image labelled as runner's.
async fn build(
    docker: &Docker,
    tag: &str,
    task: &str,
    build_args: &HashMap<String, String>,
    context: Vec<u8>,
    log: Option<&BuildLog>,
) -> Result<(), ImageError> {
    let failed = |detail: String| ImageError::Build {
        tag: tag.to_string(),
        detail: match log.and_then(BuildLog::path) {
            Some(p) => format!("{detail} (whole build log: {})", p.display()),
            None => detail,
        },
    };
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
        .buildargs(build_args)
        .build();
    let mut stream = docker.build_image(opts, None, Some(bollard::body_full(context.into())));
    let mut tail: Vec<String> = Vec::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| {
            if let Some(l) = log {
                l.line(&format!("error: {e}"));
            }
            failed(e.to_string())
        })?;
        if let Some(msg) = info.error_detail.and_then(|d| d.message) {
            if let Some(l) = log {
                l.line(&format!("error: {}", msg.trim_end()));
            }
            return Err(failed(msg.trim().to_string()));
        }
        if let Some(s) = info.stream {
            if let Some(l) = log.filter(|_| !s.trim().is_empty()) {
                l.line(s.trim_end_matches('\n'));
            }
            tail.push(s.trim_end().to_string());
            if tail.len() > 5 {
                tail.remove(0);
            }
        }
    }
    if docker.inspect_image(tag).await.is_err() {
        return Err(failed(format!(
            "no image produced; last output: {}",
            tail.join(" | ")
        )));
    }
    Ok(())
}

/// A build's whole output, written as it comes. A log that cannot be
/// opened is a warning: the build goes on without it.
pub struct BuildLog {
    file: Option<std::sync::Mutex<std::fs::File>>,
    path: PathBuf,
}

impl BuildLog {
    /// Creates (truncates) the log at `path`, never through a link there.
    pub fn create(path: &Path) -> BuildLog {
        use std::os::unix::fs::OpenOptionsExt as _;
        let opened = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(path)
            });
        let file = match opened {
            Ok(f) => Some(std::sync::Mutex::new(f)),
            Err(e) => {
                tracing::warn!("cannot write the build log {}: {e}", path.display());
                None
            }
        };
        BuildLog {
            file,
            path: path.to_path_buf(),
        }
    }

    /// Where it is, when it could be opened.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|_| self.path.as_path())
    }

    fn line(&self, text: &str) {
        use std::io::Write as _;
        if let Some(Ok(mut f)) = self.file.as_ref().map(|f| f.lock()) {
            let _ = writeln!(f, "{text}");
        }
    }
}

/// Tars `dir` (links kept as links) and hashes the paths, modes and
/// contents. The hash is std's SipHash with fixed keys: stable for a given
/// toolchain, and a change only costs a rebuild.
fn context_tar(dir: &Path) -> Result<(u64, Vec<u8>), ImageError> {
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
    Ok((hasher.finish(), data))
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
