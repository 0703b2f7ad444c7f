//! How a run's host workspace is tied to its container: bind-mounted as
//! it is, through a size-limited filesystem (`--disk`), or copied through
//! a volume; and giving dead runs' disks back.

use std::path::PathBuf;

use bollard::Docker;

use super::config::{DockerConfig, numeric_user, user_is_root};
use super::gc;
use crate::exec::ExecError;
use crate::exec::disk::Disk;

/// How the host workspace is tied to the container.
#[derive(Debug)]
pub(super) enum Workspace {
    /// Bind-mounted as it is (`--disk unlimited`, or runner is not root):
    /// commands run as the directory's owner; nothing is chowned.
    Bind { host: PathBuf },
    /// Copied into a size-limited filesystem which is bind-mounted, and
    /// copied back when the sandbox ends (`None` once it has been).
    Disk {
        disk: std::sync::Mutex<Option<Disk>>,
    },
    /// Copied through an anonymous volume that goes with the container.
    Copy {
        host: PathBuf,
        /// With `keep_workdir_owner`: the image's owner of the directory,
        /// given to the uploaded tree and, on a writable root, to the
        /// directory itself (an exact copy's empty volume is root's).
        owner: Option<super::copy::DirOwner>,
        root_writable: bool,
    },
}

/// How many uids an engine's userns-remap range holds (Docker's default
/// `dockremap` range).
const REMAP_RANGE: u32 = 65536;

/// Bind-mounts the workspace: through a size-limited filesystem when a
/// limit is set and runner can mount one, else as it is (a loosening),
/// with commands running as the directory's owner so nothing is chowned.
/// With userns-remap (`remap`: the host ids of the sandbox's root) the
/// disk is given to the sandbox user's host ids, and a workspace bound as
/// it is must belong to a uid of the remapped range, which the commands
/// then run as (inside, that uid less the range's start).
pub(super) async fn prepare_bind(
    cfg: &DockerConfig,
    host_dir: &std::path::Path,
    user: &mut String,
    loosenings: &mut Vec<String>,
    remap: Option<(u32, u32)>,
) -> Result<Workspace, ExecError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(host_dir)?;
    let dir_owner = (meta.uid(), meta.gid());
    match cfg.disk_bytes {
        Some(size) if Disk::supported() => {
            let (uid, gid) = numeric_user(user).unwrap_or((0, 0));
            let (ub, gb) = remap.unwrap_or((0, 0));
            let sandbox_owner = (uid.saturating_add(ub), gid.saturating_add(gb));
            let (host, run_id) = (host_dir.to_path_buf(), cfg.run_id.clone());
            let disk = tokio::task::spawn_blocking(move || {
                Disk::create(size, &run_id, &host, sandbox_owner, Some(dir_owner))
            })
            .await
            .map_err(|e| ExecError::Spawn(format!("making the workspace disk: {e}")))?
            .map_err(|e| ExecError::Workspace(e.to_string()))?;
            Ok(Workspace::Disk {
                disk: std::sync::Mutex::new(Some(disk)),
            })
        }
        limit => {
            if limit.is_some() {
                loosenings.push(
                    "workspace size not bounded: the size-limited filesystem (--disk) needs root"
                        .to_string(),
                );
            }
            let inside = match remap {
                None => dir_owner,
                Some(base) => {
                    inside_ids(dir_owner, base).ok_or_else(|| ExecError::RemappedWorkspace {
                        path: host_dir.display().to_string(),
                        uid: dir_owner.0,
                        gid: dir_owner.1,
                        base_uid: base.0,
                        base_gid: base.1,
                    })?
                }
            };
            *user = format!("{}:{}", inside.0, inside.1);
            if user_is_root(user) && !loosenings.iter().any(|l| l.contains("as root")) {
                loosenings.push(format!(
                    "commands run as root ('{user}'): the bind-mounted workspace {} is owned by root",
                    host_dir.display()
                ));
            }
            Ok(Workspace::Bind {
                host: host_dir.to_path_buf(),
            })
        }
    }
}

/// The sandbox's ids of host ids `owner` under a remap starting at
/// `base`, `None` outside its range.
fn inside_ids(owner: (u32, u32), base: (u32, u32)) -> Option<(u32, u32)> {
    let shift = |id: u32, b: u32| id.checked_sub(b).filter(|i| *i < REMAP_RANGE);
    Some((shift(owner.0, base.0)?, shift(owner.1, base.1)?))
}

/// Copies a disk's work back (when `collect`) and removes it.
pub(super) async fn finish_disk(disk: Disk, collect: bool) -> Result<(), ExecError> {
    let r = tokio::task::spawn_blocking(move || {
        let mut disk = disk;
        if collect {
            disk.finish().map(|rep| {
                if !rep.skipped.is_empty() {
                    tracing::warn!(skipped = ?rep.skipped, "workspace entries not copied back (special files)");
                }
            })
        } else {
            disk.release_without_copy()
        }
    })
    .await
    .map_err(|e| ExecError::Spawn(format!("collecting the workspace: {e}")))?;
    r.map_err(|e| ExecError::Workspace(e.to_string()))
}

/// Gives dead runs' work back to their workspaces and removes their disks
/// (see [`crate::exec::disk::recover_abandoned`]).
pub async fn recover_disks(docker: &Docker) -> crate::exec::disk::Recovered {
    // Runs that still have a container (a dead runner's sandbox that has
    // not ended yet) keep their disk until it has.
    let busy = match gc::run_ids_with_containers(docker).await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!("not recovering workspace disks: {e}");
            return crate::exec::disk::Recovered::default();
        }
    };
    let r = tokio::task::spawn_blocking(move || {
        crate::exec::disk::recover_abandoned(&|id| busy.contains(id))
    })
    .await
    .unwrap_or_default();
    for ws in &r.restored {
        tracing::warn!("gave a dead run's work back to {}", ws.display());
    }
    for e in &r.errors {
        tracing::warn!("recovering a dead run's workspace disk: {e}");
    }
    r
}

#[cfg(test)]
mod tests {
    use super::inside_ids;

    #[test]
    fn remapped_owners_are_shifted_into_the_range_or_refused() {
        let base = (100_000, 100_000);
        assert_eq!(inside_ids((100_000, 100_000), base), Some((0, 0)));
        assert_eq!(inside_ids((101_000, 101_000), base), Some((1000, 1000)));
        assert_eq!(inside_ids((0, 0), base), None);
        assert_eq!(inside_ids((1000, 1000), base), None);
        assert_eq!(inside_ids((165_536, 100_000), base), None);
    }
}
