//! The supervisor's frames straight to runner, past the engine: with a
//! local engine, runner makes a FIFO in a private directory of the
//! supervisor's uid, bind-mounts it read-only into the sandbox, and reads
//! it itself; the attach stream then only carries runner's requests, the
//! supervisor's stderr and the lifeline. Copying a flood through dockerd's
//! attach costs about as much as through an exec; this does not.
//!
//! Only the supervisor can open it: the directory is 0700 and the FIFO
//! 0600, both of the supervisor's uid, which no command has (root in the
//! sandbox has no CAP_DAC_OVERRIDE). A verifier's test.sh may switch
//! users (it holds CAP_SETUID to drop the agent's code to an unprivileged
//! uid) and so could take the supervisor's uid: the FIFO's name is removed
//! as soon as the supervisor has opened it and said Ready, so there is
//! nothing left to open. runner opens its end before the sandbox starts
//! and never opens anything in the directory again; the mount is
//! read-only, so nothing in it can be replaced.

use std::path::{Path, PathBuf};

use runner_supervisor::protocol::SUPERVISOR_UID;
use tokio::net::unix::pipe;

/// Where the sandbox sees the directory.
pub const DIR_IN_SANDBOX: &str = "/.runner-out";
/// The FIFO's name in it.
const FIFO: &str = "out";

/// The host side: the directory (removed with this) and the read end.
pub struct Channel {
    dir: tempfile::TempDir,
}

impl Channel {
    /// Makes the directory and the FIFO and opens runner's end; `None`
    /// when this host cannot (runner is not root, so it cannot give them
    /// to the supervisor's uid): the attach stream carries the frames.
    pub fn open() -> Option<(Channel, pipe::Receiver)> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        match Self::make() {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!("no direct channel to the supervisor: {e}");
                None
            }
        }
    }

    fn make() -> std::io::Result<(Channel, pipe::Receiver)> {
        use std::os::unix::fs::PermissionsExt;
        // Under a neutral name (the sandbox sees it in its mountinfo) that
        // carries its owner, for gc.
        let dir = crate::exec::temp_dirs::create_in(
            &crate::exec::host_dirs::base()?,
            crate::exec::host_dirs::CHANNEL_PREFIX,
        )?;
        let fifo = dir.path().join(FIFO);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))?;
        let owner = Some(nix::unistd::Uid::from_raw(SUPERVISOR_UID));
        let group = Some(nix::unistd::Gid::from_raw(SUPERVISOR_UID));
        nix::unistd::chown(&fifo, owner, group)?;
        nix::unistd::chown(dir.path(), owner, group)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        // Read and write: no end-of-file before the supervisor opens it
        // (its death is told by the attach stream ending).
        let rx = pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(&fifo)?;
        Ok((Channel { dir }, rx))
    }

    /// The directory on the host, to mount at [`DIR_IN_SANDBOX`].
    pub fn host_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Removes the FIFO's name once the supervisor has opened it (it said
    /// Ready through it): both ends stay open, and nothing in the sandbox
    /// can open it again, not even a command that took the supervisor's
    /// uid (a verifier's test.sh may switch users).
    pub fn seal(&self) {
        if let Err(e) = std::fs::remove_file(self.dir.path().join(FIFO)) {
            tracing::warn!("cannot remove the supervisor's FIFO: {e}");
        }
    }

    /// The FIFO as the supervisor names it (`--out`).
    pub fn in_sandbox() -> PathBuf {
        Path::new(DIR_IN_SANDBOX).join(FIFO)
    }
}
