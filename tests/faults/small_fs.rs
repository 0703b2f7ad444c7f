//! A small ext4 filesystem of the test's own, loop-mounted, to fill up:
//! grown again to give the space back, unmounted and deleted on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted filesystem image of a few MiB.
pub struct SmallFs {
    _dir: tempfile::TempDir,
    image: PathBuf,
    mount: PathBuf,
}

fn sh(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed (this test needs root, mkfs.ext4, resize2fs and loop devices): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl SmallFs {
    /// `mib` MiB of ext4, mounted at a fresh directory.
    pub fn new(mib: u64) -> SmallFs {
        let dir = tempfile::Builder::new()
            .prefix("runner-fault-fs-")
            .tempdir()
            .unwrap();
        let image = dir.path().join("fs.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(mib << 20).unwrap();
        drop(f);
        // No journal and no reserved blocks: every byte is the test's to fill.
        sh(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-O", "^has_journal", "-m", "0"])
            .arg(&image));
        sh(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount));
        SmallFs {
            _dir: dir,
            image,
            mount,
        }
    }

    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Grows the filesystem to `mib` MiB (unmounted for the while, then
    /// mounted again at the same place): the space comes back with what is
    /// on it untouched.
    pub fn grow(&self, mib: u64) {
        sh(Command::new("umount").arg(&self.mount));
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.image)
            .unwrap();
        f.set_len(mib << 20).unwrap();
        drop(f);
        sh(Command::new("e2fsck").args(["-f", "-y"]).arg(&self.image));
        sh(Command::new("resize2fs").arg(&self.image));
        sh(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&self.image)
            .arg(&self.mount));
    }

    /// Free bytes on it now.
    pub fn free_bytes(&self) -> u64 {
        let s = nix::sys::statvfs::statvfs(&self.mount).unwrap();
        s.blocks_available() * s.fragment_size()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}
