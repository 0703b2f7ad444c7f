//! The supervisor's static binary, built by build.rs and embedded in
//! runner, and its installed copy on the host (what a sandbox mounts
//! read-only). The local backend runs a private copy of its own (see
//! `exec::local`'s `host`).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// The binary itself.
pub const SUPERVISOR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/runner-supervisor"));
/// A hash of [`SUPERVISOR`], which names its installed copy.
const HASH: &str = env!("RUNNER_SUPERVISOR_HASH");
/// The directory sandboxes see it in.
pub const DIR_IN_SANDBOX: &str = "/.runner";
/// Where sandboxes see it.
pub const IN_SANDBOX: &str = "/.runner/supervisor";
/// Its file name in [`DIR_IN_SANDBOX`].
pub const FILE_NAME: &str = "supervisor";

/// The host path of the installed supervisor, written (atomically, mode
/// 0555) when this build's copy is not there yet.
pub fn installed() -> std::io::Result<PathBuf> {
    let mut last = None;
    for (dir, _) in crate::exec::host_dirs::candidates() {
        match install_in(&dir) {
            Ok(p) => return Ok(p),
            Err(e) => {
                tracing::debug!("cannot install the supervisor in {}: {e}", dir.display());
                last = Some(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", dir.display()),
                ));
            }
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no directory to install it in")))
}

/// The supervisor as a tar holding [`FILE_NAME`] (mode 0555, root's), for
/// an engine that cannot see the host's files.
pub fn archive() -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(u64::try_from(SUPERVISOR.len()).unwrap_or(u64::MAX));
    header.set_mode(0o555);
    header.set_uid(0);
    header.set_gid(0);
    header.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut header, FILE_NAME, SUPERVISOR)?;
    b.into_inner()
}

/// Installs the copy in `dir` (see [`crate::exec::host_dirs`]: the
/// sandbox sees this path in its mountinfo), named by its hash alone.
fn install_in(dir: &std::path::Path) -> std::io::Result<PathBuf> {
    let mode = crate::exec::host_dirs::candidates()
        .into_iter()
        .find(|(d, _)| d == dir)
        .map_or(0o700, |(_, m)| m);
    crate::exec::host_dirs::own_dir(dir, mode)?;
    let path = dir.join(format!(
        "{}{HASH}",
        crate::exec::host_dirs::SUPERVISOR_PREFIX
    ));
    if let Ok(meta) = std::fs::symlink_metadata(&path)
        && meta.is_file()
        && meta.len() == u64::try_from(SUPERVISOR.len()).unwrap_or(0)
    {
        return Ok(path);
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(SUPERVISOR)?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o555))?;
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// What the sandbox runs as its main process never comes from a
    /// directory someone else may write: a planted, world-writable
    /// `$TMPDIR/runner-UID` (or a link in its place) is refused.
    #[test]
    fn a_directory_others_may_write_or_a_link_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(install_in(&open).is_err());
        let link = base.path().join("link");
        let mine = base.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        assert!(install_in(&link).is_err());
        // A directory of its own works, and the copy is whole and 0555.
        let p = install_in(&mine).unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o555);
        assert_eq!(meta.len(), u64::try_from(SUPERVISOR.len()).unwrap());
    }
}
