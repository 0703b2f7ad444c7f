//! Changing the owner of a bind-mounted workspace tree without ever
//! following a link the sandbox made.
//!
//! Every directory is opened relative to its already-open parent with
//! O_NOFOLLOW|O_DIRECTORY, and every entry is changed with
//! fchownat(AT_SYMLINK_NOFOLLOW) relative to that fd. A sandbox swapping a
//! directory for a link mid-walk makes the open fail (the entry is skipped);
//! it can never redirect us outside the tree.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Deepest directory nesting we descend into (each level holds one fd).
const MAX_DEPTH: usize = 128;

/// Sets owner `uid:gid` on `root` and everything below it; returns how
/// many entries could not be changed.
pub fn chown_tree(root: &Path, uid: u32, gid: u32) -> std::io::Result<u64> {
    let c = CString::new(root.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("path contains NUL"))?;
    // SAFETY: c is a valid C string; the returned fd is owned below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let dir = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: dir is an open directory fd.
    if unsafe { libc::fchown(dir.as_raw_fd(), uid, gid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut failures = 0;
    walk(&dir, uid, gid, 0, &mut failures);
    Ok(failures)
}

fn walk(dir: &OwnedFd, uid: u32, gid: u32, depth: usize, failures: &mut u64) {
    // Listing through /proc/self/fd reads the directory this fd refers to;
    // it does not resolve the original path again.
    let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
        *failures += 1;
        return;
    };
    for entry in entries.flatten() {
        let Ok(name) = CString::new(entry.file_name().as_bytes()) else {
            continue;
        };
        // SAFETY: valid dir fd and C string; AT_SYMLINK_NOFOLLOW changes a
        // link itself, never its target.
        let rc = unsafe {
            libc::fchownat(
                dir.as_raw_fd(),
                name.as_ptr(),
                uid,
                gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            *failures += 1;
        }
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if !is_dir {
            continue;
        }
        if depth >= MAX_DEPTH {
            *failures += 1;
            continue;
        }
        // SAFETY: valid dir fd and C string; O_NOFOLLOW makes a link
        // swapped in since the listing fail instead of being followed.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            *failures += 1;
            continue;
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        let sub = unsafe { OwnedFd::from_raw_fd(fd) };
        walk(&sub, uid, gid, depth + 1, failures);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn never_follows_links() {
        if !nix::unistd::geteuid().is_root() {
            return; // chown to another uid needs root
        }
        let outside = tempfile::tempdir().unwrap();
        let canary = outside.path().join("canary");
        std::fs::write(&canary, "x").unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join("d")).unwrap();
        std::fs::write(ws.path().join("d/f"), "y").unwrap();
        std::os::unix::fs::symlink(&canary, ws.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("dirlink")).unwrap();
        assert_eq!(super::chown_tree(ws.path(), 4321, 4321).unwrap(), 0);
        assert_eq!(std::fs::metadata(&canary).unwrap().uid(), 0);
        assert_eq!(std::fs::metadata(outside.path()).unwrap().uid(), 0);
        assert_eq!(
            std::fs::symlink_metadata(ws.path().join("link"))
                .unwrap()
                .uid(),
            4321
        );
        assert_eq!(
            std::fs::metadata(ws.path().join("d/f")).unwrap().uid(),
            4321
        );
    }
}
