//! A size-limited filesystem for a run's workspace (`--disk`): a sparse
//! file formatted as ext4 (no journal, no reserved blocks, no resize
//! inode, inode tables not zeroed) and loop-mounted on the host with nosuid and nodev. The sandbox
//! gets the mount point as its workspace; a write past the size fails with
//! "No space left on device" inside the sandbox, and the host's disk holds
//! at most the image's size. The user's own directory is copied in at the
//! start and the result copied back at the end ([`super::tree`]), so the
//! sandbox never writes the user's tree, and nothing is chowned behind the
//! user's back.
//!
//! Cost: making and mounting the filesystem takes ~60 ms; copying the
//! workspace in and out takes time in proportion to its size. It needs root
//! (mount) and e2fsprogs' `mkfs.ext4`.
//!
//! A runner killed with SIGKILL leaves its disk mounted, with the agent's
//! work in it: [`recover_abandoned`] (run by `runner gc` and at every start)
//! copies that work back into the run's workspace and removes the disk.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::liveness;
use super::tree;

/// Prefix of a disk's state directory in the temp directory.
pub const STATE_PREFIX: &str = "runner-disk-";
/// Smallest disk runner makes: ext4 needs room for its own metadata.
pub const MIN_DISK_BYTES: u64 = 16 << 20;

/// Why a disk could not be made, used or released.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("a size-limited workspace (--disk) needs root to mount its filesystem")]
    NotRoot,
    #[error("cannot run {tool}: {detail}")]
    Tool { tool: &'static str, detail: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("the workspace does not fit in --disk {size_mib} MiB: {detail}")]
    TooLarge { size_mib: u64, detail: String },
}

impl DiskError {
    fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> DiskError {
        let what = what.into();
        move |source| DiskError::Io { what, source }
    }
}

/// What a disk's state directory records for recovery.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    pid: u32,
    start: Option<String>,
    run_id: String,
    /// The host directory the work goes back to.
    workspace: PathBuf,
    /// Owner of the entries copied back.
    owner: Option<(u32, u32)>,
}

/// A mounted, size-limited workspace filesystem.
#[derive(Debug)]
pub struct Disk {
    dir: PathBuf,
    mount: PathBuf,
    size_bytes: u64,
    state: State,
    released: bool,
}

fn run_tool(tool: &'static str, cmd: &mut Command) -> Result<(), DiskError> {
    let out = cmd.output().map_err(|e| DiskError::Tool {
        tool,
        detail: format!("{e} (install it: e2fsprogs provides mkfs.ext4, util-linux mount)"),
    })?;
    if out.status.success() {
        return Ok(());
    }
    Err(DiskError::Tool {
        tool,
        detail: format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

fn image(dir: &Path) -> PathBuf {
    dir.join("disk.img")
}

fn mount_image(dir: &Path, mount: &Path) -> Result<(), DiskError> {
    run_tool(
        "mount",
        Command::new("mount")
            .arg("-o")
            // noinit_itable: the kernel would otherwise zero the inode
            // tables in the background, making the sparse image real.
            .arg("loop,nosuid,nodev,noatime,noinit_itable")
            .arg(image(dir))
            .arg(mount),
    )
}

impl Disk {
    /// Whether disks can be made here (runner runs as root).
    pub fn supported() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// Makes a disk of `size_bytes` whose root belongs to `sandbox_owner`,
    /// and copies the content of `workspace` into it (owned by
    /// `sandbox_owner`). `workspace_owner` owns what comes back.
    pub fn create(
        size_bytes: u64,
        run_id: &str,
        workspace: &Path,
        sandbox_owner: (u32, u32),
        workspace_owner: Option<(u32, u32)>,
    ) -> Result<Disk, DiskError> {
        if !Disk::supported() {
            return Err(DiskError::NotRoot);
        }
        let size_bytes = size_bytes.max(MIN_DISK_BYTES);
        // Named with its owner: a runner killed before it wrote the
        // state is still known dead, and its directory removed by gc.
        let dir = super::temp_dirs::create(STATE_PREFIX)
            .map_err(DiskError::io("creating the disk's directory"))?
            .keep();
        let mount = dir.join("mnt");
        let state = State {
            pid: std::process::id(),
            start: liveness::process_start(std::process::id()),
            run_id: run_id.to_string(),
            workspace: workspace.to_path_buf(),
            owner: workspace_owner,
        };
        let mut disk = Disk {
            dir,
            mount,
            size_bytes,
            state,
            released: true,
        };
        let made = disk.make(sandbox_owner);
        if let Err(e) = made {
            disk.remove_files();
            return Err(e);
        }
        disk.released = false;
        let (uid, gid) = sandbox_owner;
        if let Err(e) = tree::copy_tree(workspace, &disk.mount, Some((uid, gid))) {
            let err = if e.kind() == io::ErrorKind::StorageFull
                || e.to_string().contains("No space left")
            {
                DiskError::TooLarge {
                    size_mib: size_bytes >> 20,
                    detail: e.to_string(),
                }
            } else {
                DiskError::io(format!("copying {} into the disk", workspace.display()))(e)
            };
            if let Err(e) = disk.release_without_copy() {
                tracing::warn!("removing the disk after a failed copy-in: {e}");
            }
            return Err(err);
        }
        Ok(disk)
    }

    fn make(&self, owner: (u32, u32)) -> Result<(), DiskError> {
        let img = image(&self.dir);
        let f = std::fs::File::create(&img).map_err(DiskError::io("creating the disk image"))?;
        f.set_len(self.size_bytes)
            .map_err(DiskError::io("sizing the disk image"))?;
        drop(f);
        run_tool(
            "mkfs.ext4",
            Command::new("mkfs.ext4")
                // No resize inode either: the disk is never grown, and
                // its reserved blocks were 95 % of what mkfs wrote (and
                // synced) before the sandbox could start.
                .args(["-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode"])
                .arg("-E")
                .arg(format!(
                    "root_owner={}:{},nodiscard,lazy_itable_init=1",
                    owner.0, owner.1
                ))
                .arg(&img),
        )?;
        std::fs::create_dir(&self.mount).map_err(DiskError::io("creating the mount point"))?;
        let text = serde_json::to_string(&self.state).map_err(io::Error::other);
        text.and_then(|t| std::fs::write(self.dir.join("state.json"), t))
            .map_err(DiskError::io("writing the disk's state"))?;
        mount_image(&self.dir, &self.mount)?;
        // An empty workspace, as the sandbox expects.
        let _ = std::fs::remove_dir(self.mount.join("lost+found"));
        Ok(())
    }

    /// Where the filesystem is mounted on the host: the sandbox's workspace.
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// Its size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Copies the work back into the workspace, then unmounts and removes
    /// the disk. Only called once nothing in the sandbox runs any more. On a
    /// failed copy the disk stays (and is named in the error) so nothing is
    /// lost.
    pub fn finish(mut self) -> Result<tree::CopyReport, DiskError> {
        let report = tree::replace_contents(&self.state.workspace, &self.mount, self.state.owner)
            .map_err(|e| {
                DiskError::io(format!(
                    "copying the work back into {} (it is kept in {})",
                    self.state.workspace.display(),
                    self.mount.display()
                ))(e)
            });
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                // Leave it mounted for `runner gc` to retry.
                self.released = true;
                return Err(e);
            }
        };
        self.release_without_copy()?;
        Ok(report)
    }

    /// Unmounts and removes the disk, dropping its content.
    pub fn release_without_copy(&mut self) -> Result<(), DiskError> {
        if self.released {
            return Ok(());
        }
        unmount(&self.mount)?;
        self.released = true;
        self.remove_files();
        Ok(())
    }

    fn remove_files(&self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

fn unmount(mount: &Path) -> Result<(), DiskError> {
    // A sandbox just removed may hold the mount for a moment more (its
    // processes still dying): busy is retried for a while.
    let until = std::time::Instant::now() + UNMOUNT_BUSY_LIMIT;
    loop {
        match nix::mount::umount(mount) {
            // EINVAL: not mounted (any more).
            Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {
                return Ok(());
            }
            Err(nix::errno::Errno::EBUSY) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => {
                return Err(DiskError::io(format!("unmounting {}", mount.display()))(
                    io::Error::from(e),
                ));
            }
        }
    }
}

/// How long an unmount may wait for a sandbox's mount to be let go.
const UNMOUNT_BUSY_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

fn is_mounted(mount: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = mount.to_string_lossy();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| m == want)
}

/// What a recovery pass did.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Workspaces that got a dead run's work back.
    pub restored: Vec<PathBuf>,
    /// One line per disk that could not be recovered.
    pub errors: Vec<String>,
}

/// Finds disks whose runner died (SIGKILL, crash), copies their work back
/// into the run's workspace when it still exists, and removes them. Disks
/// of live runners on this host are never touched, nor those for which
/// `in_use(run_id)` says a sandbox of that run still exists (its work may
/// still be changing).
pub fn recover_abandoned(in_use: &dyn Fn(&str) -> bool) -> Recovered {
    let mut out = Recovered::default();
    if !Disk::supported() {
        return out;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(STATE_PREFIX) {
            continue;
        }
        let dir = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        // Only directories runner (root) made itself.
        if !meta.is_dir() || std::os::unix::fs::MetadataExt::uid(&meta) != 0 {
            continue;
        }
        let Some(state) = std::fs::read_to_string(dir.join("state.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<State>(&t).ok())
        else {
            // No state yet: its runner died making it, before anything
            // was mounted or copied in.
            if let Err(e) = super::temp_dirs::remove_unfinished(&dir, STATE_PREFIX) {
                out.errors.push(e);
            }
            continue;
        };
        if liveness::is_alive(state.pid, state.start.as_deref()) || in_use(&state.run_id) {
            continue;
        }
        match recover_one(&dir, state) {
            Ok(Some(ws)) => out.restored.push(ws),
            Ok(None) => {}
            Err(e) => out.errors.push(format!("{}: {e}", dir.display())),
        }
    }
    out
}

fn recover_one(dir: &Path, state: State) -> Result<Option<PathBuf>, DiskError> {
    // One recoverer at a time: `runner gc` and every sandbox start of every
    // runner on this host sweep, and two copying the same work back at once
    // would trip over each other's staging. A second one waits for the
    // first, so that when it returns the work is back.
    let handle = std::fs::File::open(dir).map_err(DiskError::io("opening a dead run's disk"))?;
    let _lock = nix::fcntl::Flock::lock(handle, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| DiskError::io("locking a dead run's disk")(io::Error::from(e)))?;
    // Finished by the one that held the lock before.
    if !dir.join("state.json").exists() {
        return Ok(None);
    }
    let mount = dir.join("mnt");
    if !is_mounted(&mount) {
        if !image(dir).exists() {
            std::fs::remove_dir_all(dir).map_err(DiskError::io("removing a broken disk"))?;
            return Ok(None);
        }
        std::fs::create_dir_all(&mount).map_err(DiskError::io("creating the mount point"))?;
        mount_image(dir, &mount)?;
    }
    let mut disk = Disk {
        dir: dir.to_path_buf(),
        mount,
        size_bytes: 0,
        state: state.clone(),
        released: false,
    };
    if state.workspace.is_dir() {
        disk.finish()?;
        Ok(Some(state.workspace))
    } else {
        disk.release_without_copy()?;
        Ok(None)
    }
}
