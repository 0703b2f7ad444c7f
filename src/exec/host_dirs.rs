//! Where runner keeps the host files a sandbox mounts (the supervisor's
//! binary, the supervisor's channel): under names that say nothing about
//! the host, since a sandbox reads its mount sources in
//! `/proc/self/mountinfo`. No home directory, no user name: a root runner
//! uses [`ROOT_DIR`], any other `$TMPDIR/runner-<uid>`. Each is a
//! directory of runner's own user that no one else may write, refused
//! when it is anything else (a link, another's, group- or world-writable);
//! nothing in it is ever followed from the sandbox (the mounts are
//! read-only and runner opens its files before the sandbox starts).
//!
//! `runner gc` finds runner's leftovers by these names.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A root runner's directory.
pub const ROOT_DIR: &str = "/run/runner";
/// Mode of [`ROOT_DIR`]: others may pass through (an engine with
/// userns-remap mounts from within the sandbox's user namespace) but not
/// list it.
pub const ROOT_DIR_MODE: u32 = 0o711;
/// Prefix, in the temporary directory, of a non-root runner's directory
/// (`runner-<uid>`, mode 0700).
pub const USER_DIR_PREFIX: &str = "runner-";
/// Prefix of an installed supervisor binary: `sv-<hash of the binary>`.
pub const SUPERVISOR_PREFIX: &str = "sv-";
/// Prefix of a run's channel directory (`ch-<random>`): removed with the
/// run; one left behind belongs to a runner that was killed.
pub const CHANNEL_PREFIX: &str = "ch-";
/// Where channel directories were before issue 21 (`$TMPDIR/runner-chan-*`),
/// for `runner gc` to recognise leftovers of older runners.
pub const LEGACY_CHANNEL_PREFIX: &str = "runner-chan-";

/// The directories runner's host files may go in, best first: for root
/// [`ROOT_DIR`], then (when `/run` cannot take it) the temporary
/// directory's `runner-0`; for another user `$TMPDIR/runner-<uid>`.
pub fn candidates() -> Vec<(PathBuf, u32)> {
    let uid = nix::unistd::geteuid().as_raw();
    let user = (
        std::env::temp_dir().join(format!("{USER_DIR_PREFIX}{uid}")),
        0o700,
    );
    if uid == 0 {
        vec![(PathBuf::from(ROOT_DIR), ROOT_DIR_MODE), user]
    } else {
        vec![user]
    }
}

/// The first of [`candidates`] that is (or could be made) a directory of
/// this user's that only it may write.
pub fn base() -> std::io::Result<PathBuf> {
    let mut last = None;
    for (dir, mode) in candidates() {
        match own_dir(&dir, mode) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no directory for runner's files")))
}

/// Makes `dir` with `mode` when missing and checks that it is a directory
/// of this user's that no one else may write: what the sandbox runs as its
/// main process comes from there.
pub fn own_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    let created = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir);
    created.map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    let meta = std::fs::symlink_metadata(dir)?;
    let mine = meta.uid() == nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || !mine || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory of this user's that only it may write",
                dir.display()
            ),
        ));
    }
    // A umask may have taken bits the mode gives (ROOT_DIR's search bits).
    if meta.mode() & 0o777 != mode {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directories_name_no_home_and_no_user() {
        for (dir, mode) in candidates() {
            let s = dir.display().to_string();
            assert!(!s.contains("/home") && !s.contains(".cache"), "{s}");
            assert_eq!(mode & 0o022, 0, "{s}");
            if let Ok(h) = std::env::var("HOME") {
                assert!(h.is_empty() || !s.starts_with(&h), "{s} is under HOME");
            }
        }
    }

    /// (Links and directories others may write are refused: the
    /// supervisor's `install_in` tests, which go through [`own_dir`].)
    #[test]
    fn a_fresh_directory_gets_its_mode_whatever_the_umask() {
        let base = tempfile::tempdir().unwrap();
        let fresh = base.path().join("fresh");
        own_dir(&fresh, 0o711).unwrap();
        let m = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(m, 0o711);
        own_dir(&fresh, 0o711).unwrap();
    }
}
