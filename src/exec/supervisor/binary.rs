//! The supervisor's static binary, built by build.rs and embedded in
//! runner, and its installed copy on the host (what a sandbox mounts
//! read-only).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;

/// The binary itself.
pub const SUPERVISOR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/runner-supervisor"));
/// A hash of [`SUPERVISOR`], which names its installed copy.
const HASH: &str = env!("RUNNER_SUPERVISOR_HASH");
/// Where sandboxes see it.
pub const IN_SANDBOX: &str = "/.runner-supervisor";

/// Where the installed copies live: a directory of runner's own, 0700,
/// under the user's cache (`$XDG_CACHE_HOME/runner`, `~/.cache/runner`).
fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RUNNER_CACHE_DIR") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("runner")
}

/// The host path of the installed supervisor, written (atomically, mode
/// 0555) when this build's copy is not there yet.
pub fn installed() -> std::io::Result<PathBuf> {
    let dir = dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let path = dir.join(format!("supervisor-{HASH}"));
    if let Ok(meta) = std::fs::symlink_metadata(&path)
        && meta.is_file()
        && meta.len() == u64::try_from(SUPERVISOR.len()).unwrap_or(0)
    {
        return Ok(path);
    }
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)?;
    tmp.write_all(SUPERVISOR)?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o555))?;
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(path)
}
