//! The local executor's file work: paths held to the workdir or the
//! sandbox's root, and reads, writes and copies that never follow a link
//! at the last step, done off the async threads.

use std::io;
use std::path::{Path, PathBuf};

use crate::exec::ExecError;

/// `path` (relative ones from `workdir`) when it lies in `workdir` or
/// `root`: host paths are the host's, so an absolute one elsewhere (a
/// task's /tests) would land in the host's root.
pub fn contained(workdir: &Path, root: Option<&Path>, path: &str) -> Result<PathBuf, ExecError> {
    // `..` is refused outright: the containment check below resolves
    // only what exists, so `missing/../../x` would pass it.
    if Path::new(path)
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(ExecError::PathOutside(
            "reach files through `..` (commands run on this host)",
        ));
    }
    let p = workdir.join(path);
    let in_root = root.is_some_and(|r| crate::workspace::is_inside(&p, r));
    if in_root || crate::workspace::is_inside(&p, workdir) {
        Ok(p)
    } else {
        Err(ExecError::PathOutside(
            "reach files outside its working directory (commands run on this host)",
        ))
    }
}

/// Bytes of the regular files under `dir`, links not followed.
fn tree_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = std::fs::symlink_metadata(entry.path())?;
        total = total.saturating_add(if meta.is_dir() {
            tree_bytes(&entry.path())?
        } else if meta.is_file() {
            meta.len()
        } else {
            0
        });
    }
    Ok(total)
}

/// Runs file work off the async threads.
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T, ExecError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ExecError::Spawn(format!("{what}: {e}")))?
        .map_err(ExecError::Io)
}

/// Copies the host directory `host` into `dest`.
pub async fn upload_dir(host: &Path, dest: PathBuf) -> Result<(), ExecError> {
    let host = host.to_path_buf();
    blocking("copying files", move || {
        std::fs::create_dir_all(&dest)?;
        crate::exec::tree::copy_tree(&host, &dest, None).map(|_| ())
    })
    .await
}

/// The regular file `path`, at most `max_bytes` of it.
pub async fn read_file(path: PathBuf, max_bytes: u64) -> Result<Vec<u8>, ExecError> {
    let shown = path.display().to_string();
    let data = blocking("reading a file", move || {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: a FIFO planted at the path must not hang the open.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
            .open(&path)?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        let mut data = Vec::new();
        f.take(max_bytes.saturating_add(1)).read_to_end(&mut data)?;
        Ok(data)
    })
    .await?;
    if u64::try_from(data.len()).unwrap_or(u64::MAX) > max_bytes {
        return Err(ExecError::Refused(format!(
            "cannot read '{shown}': larger than {max_bytes} bytes"
        )));
    }
    Ok(data)
}

/// Writes `data` as the file `path` (its directories made).
pub async fn write_file(path: PathBuf, data: &[u8]) -> Result<(), ExecError> {
    let data = data.to_vec();
    blocking("writing a file", move || {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)?;
        f.write_all(&data)
    })
    .await
}

/// Copies `src` to the host directory `host`, refused past `max_bytes`.
pub async fn download_dir(src: PathBuf, host: &Path, max_bytes: u64) -> Result<(), ExecError> {
    let host = host.to_path_buf();
    let report = blocking("copying files", move || {
        let size = tree_bytes(&src)?;
        if size > max_bytes {
            return Err(io::Error::other(format!(
                "{} holds {size} bytes, more than the {max_bytes} allowed",
                src.display()
            )));
        }
        crate::exec::tree::copy_tree(&src, &host, None)
    })
    .await?;
    if !report.skipped.is_empty() {
        tracing::warn!(skipped = ?report.skipped, "entries not copied (special files)");
    }
    Ok(())
}
