//! A nosuid, nodev view of a host directory, for the engine to bind-mount
//! as a sandbox's workspace. Docker's bind mounts take the flags of their
//! source's mount and its API (1.41) has no option to add nosuid, so the
//! directory is first bind-mounted onto a private temporary mount point
//! and that mount remounted nosuid,nodev; a bind of it keeps those flags.
//! Not recursive: a mount inside the directory (with flags of its own) is
//! not carried into the sandbox.
//!
//! The host's view is only needed while the engine sets the container up:
//! once it runs, the container's mount namespace holds its own copy, and
//! [`NosuidView::detach`] takes the host's away, so a runner killed later
//! leaves no mount of the user's directory behind in the temp directory.
//! One killed in between leaves a view named for its pid, which
//! [`sweep_dead`] (at every start and `runner gc`) unmounts and removes,
//! never walking into it: a recursive removal of a view still mounted
//! would delete the user's files.

use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use tempfile::TempDir;

/// Prefix of a view's mount point in the temp directory.
pub const VIEW_PREFIX: &str = "runner-bind-";

/// A mounted view; unmounted (lazily) and removed when dropped.
#[derive(Debug)]
pub struct NosuidView {
    dir: Option<TempDir>,
    mount: PathBuf,
    mounted: bool,
}

impl NosuidView {
    /// Mounts `host` at a new mount point, nosuid and nodev. Needs root
    /// (CAP_SYS_ADMIN): otherwise the error is the kernel's EPERM.
    pub fn new(host: &Path) -> io::Result<NosuidView> {
        let pid = std::process::id();
        let start = super::liveness::process_start(pid).unwrap_or_default();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{VIEW_PREFIX}{pid}-{start}-"))
            .tempdir()?;
        let point = dir.path().join("ws");
        std::fs::create_dir(&point)?;
        let none: Option<&str> = None;
        mount(Some(host), &point, none, MsFlags::MS_BIND, none).map_err(io::Error::from)?;
        let mut view = NosuidView {
            dir: Some(dir),
            mount: point,
            mounted: true,
        };
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        mount(none, &view.mount, none, flags, none).map_err(|e| {
            view.detach();
            io::Error::from(e)
        })?;
        Ok(view)
    }

    /// The mount point to give the engine.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Takes the host's mount away (the sandbox keeps its own copy).
    pub fn detach(&mut self) {
        if self.mounted {
            if let Err(e) = umount2(&self.mount, MntFlags::MNT_DETACH) {
                tracing::warn!("unmounting the view {}: {e}", self.mount.display());
            }
            self.mounted = false;
        }
    }
}

impl Drop for NosuidView {
    fn drop(&mut self) {
        self.detach();
        // Only the empty mount point is left; never a walk into a mount.
        if let Some(d) = self.dir.take() {
            let _ = std::fs::remove_dir(&self.mount);
            let _ = std::fs::remove_dir(d.path());
            let _ = d.keep();
        }
    }
}

/// Unmounts and removes the views of runners that are gone; the names of
/// those removed.
pub fn sweep_dead() -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return out;
    };
    let me = nix::unistd::geteuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(VIEW_PREFIX) else {
            continue;
        };
        let mut parts = rest.splitn(3, '-');
        let (Some(pid), Some(start)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let dir = e.path();
        // Only a real directory of this user's, of a runner that is gone.
        let ours = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if !ours || super::liveness::is_alive(pid, Some(start)) {
            continue;
        }
        let point = dir.join("ws");
        let _ = umount2(&point, MntFlags::MNT_DETACH);
        if std::fs::remove_dir(&point).is_ok() || !point.exists() {
            let _ = std::fs::remove_dir(&dir);
            out.push(dir);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_is_nosuid_and_goes_without_touching_the_directory() {
        if !nix::unistd::geteuid().is_root() {
            // Mounting needs root; the docker tests run it for real.
            assert!(NosuidView::new(Path::new("/tmp")).is_err());
            return;
        }
        let host = tempfile::tempdir().expect("tempdir");
        std::fs::write(host.path().join("f"), "x").expect("write");
        let mut view = NosuidView::new(host.path()).expect("mount");
        let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let line = info
            .lines()
            .find(|l| l.contains(&format!(" {} ", view.path().display())))
            .expect("the view is mounted");
        assert!(line.contains("nosuid") && line.contains("nodev"), "{line}");
        assert!(view.path().join("f").is_file());
        let point = view.path().to_path_buf();
        view.detach();
        assert!(!point.join("f").exists());
        drop(view);
        assert!(!point.exists());
        assert!(host.path().join("f").is_file(), "the directory was touched");

        // A view left mounted by a runner that died is unmounted, not
        // emptied.
        let dead = std::env::temp_dir().join(format!(
            "{VIEW_PREFIX}4194303-1-test{:08x}",
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(dead.join("ws")).expect("mkdir");
        let none: Option<&str> = None;
        mount(
            Some(host.path()),
            &dead.join("ws"),
            none,
            MsFlags::MS_BIND,
            none,
        )
        .expect("mount");
        assert!(sweep_dead().contains(&dead));
        assert!(!dead.exists());
        assert!(host.path().join("f").is_file(), "the sweep emptied a view");
    }
}
