//! The local backend's supervisor: the binary embedded in runner
//! ([`crate::exec::supervisor::binary`]) started as runner's child in its
//! unconfined mode (`--host`: it keeps runner's uid, root included, and
//! drops nothing), speaking the protocol over its stdin and stdout, so
//! command semantics (sessions, the kill, drain bounds, the state
//! descriptor) exist once, in sandbox/supervisor.
//!
//! The binary is written to a file of its own in a fresh 0700 directory
//! (created exclusively, mode 0700), executed, and removed at once: the
//! running process keeps its inode, nothing stays on disk. It dies with
//! runner: when runner exits its end of stdin closes, and the supervisor
//! then kills what its commands left and exits.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};

use crate::exec::ExecError;
use crate::exec::supervisor::binary::SUPERVISOR;
use crate::exec::supervisor::{Chunk, READY_LIMIT, Supervisor};

/// How often a spawn that met ETXTBSY is tried again: another thread's
/// fork may hold the file's write descriptor for a moment (until its exec).
const SPAWN_TRIES: u32 = 20;
/// Between those tries.
const SPAWN_RETRY: Duration = Duration::from_millis(5);
/// Read size from the supervisor's stdout and stderr.
const READ_BYTES: usize = 64 * 1024;

/// A running supervisor on the host and the connection to it.
pub struct Host {
    pub supervisor: Supervisor,
    /// Held so tokio reaps it once it exits (after its stream closed).
    _child: Child,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

fn spawn_error(what: &str, e: impl std::fmt::Display) -> ExecError {
    ExecError::Spawn(format!("{what} the local supervisor: {e}"))
}

/// Starts the supervisor and waits for its greeting.
pub async fn start() -> Result<Host, ExecError> {
    let mut child = tokio::task::spawn_blocking(spawn)
        .await
        .map_err(|e| spawn_error("starting", e))??;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(spawn_error("starting", "its pipes are missing"));
    };
    let output = futures::stream::select(chunks(stdout, Chunk::Frames), chunks(stderr, Chunk::Log));
    let supervisor = Supervisor::connect(Box::pin(stdin), Box::pin(output));
    match supervisor.ready(READY_LIMIT).await {
        Ok(_) => Ok(Host {
            supervisor,
            _child: child,
        }),
        Err(e) => Err(spawn_error(
            "starting",
            format!("{e} ({})", supervisor.last_words()),
        )),
    }
}

/// Writes the binary to a private file and runs it (blocking). The spawn
/// returns once the exec is done, so the directory (and the file) go on
/// return: the process holds the inode.
fn spawn() -> Result<Child, ExecError> {
    // Under the local root's prefix: gc removes it should runner die
    // between the write and the removal below.
    let dir = crate::exec::temp_dirs::create(crate::exec::temp_dirs::LOCAL_ROOT_PREFIX)
        .map_err(|e| spawn_error("making a directory for", e))?;
    // Only runner's user may enter it, whatever the umask made it.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .map_err(|e| spawn_error("making a directory for", e))?;
    let path = dir.path().join("supervisor");
    write_binary(&path).map_err(|e| spawn_error("writing", e))?;
    let user = format!(
        "{}:{}",
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw()
    );
    let mut tries = 0;
    loop {
        let spawned = Command::new(&path)
            .args(["--host", "--user", &user])
            // Commands get exactly the environment each request names.
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(child) => return Ok(child),
            Err(e)
                if e.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32)
                    && tries < SPAWN_TRIES =>
            {
                tries += 1;
                std::thread::sleep(SPAWN_RETRY);
            }
            Err(e) => return Err(spawn_error("starting", e)),
        }
    }
}

/// The embedded binary as a new file (never an existing one) only its
/// owner may read, write or run.
fn write_binary(path: &Path) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(path)?;
    f.write_all(SUPERVISOR)?;
    f.sync_all()
}

/// What `r` yields, as chunks made by `wrap`. One buffer is read into
/// and its filled part split off, so a flood costs no allocation per read
/// once the reader has consumed the earlier chunks.
fn chunks<R: AsyncRead + Unpin + Send + 'static>(
    r: R,
    wrap: fn(Bytes) -> Chunk,
) -> impl Stream<Item = Result<Chunk, String>> + Send {
    let buf = bytes::BytesMut::with_capacity(READ_BYTES);
    futures::stream::unfold(Some((r, buf)), move |state| async move {
        let (mut r, mut buf) = state?;
        buf.reserve(READ_BYTES);
        match r.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => {
                let chunk = buf.split().freeze();
                Some((Ok(wrap(chunk)), Some((r, buf))))
            }
            Err(e) => Some((Err(e.to_string()), None)),
        }
    })
    .boxed()
}
