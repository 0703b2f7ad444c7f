//! The docker executor: one hardened container per run, through bollard.
//! Each command is an exec of `bash -c` (or `sh -c`) in /workspace under a
//! small launcher; the container idles under Docker's init between
//! commands, tied to this process so it ends when the runner does (see
//! `lifeline`).

mod client;
mod config;
mod container;
mod copy;
mod gc;
mod image;
mod kill;
mod launch;
mod lifeline;
mod oom;
mod owner;
mod run;
mod seed;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;

pub use client::connect;
pub use config::{
    CONTAINER_WORKDIR, DEFAULT_CPUS, DEFAULT_HOME_SIZE_BYTES, DEFAULT_IMAGE, DEFAULT_MEMORY_BYTES,
    DEFAULT_PIDS_LIMIT, DEFAULT_USER, DockerConfig, SANDBOX_HOME, Ulimits, WorkspaceMode,
};
pub use container::{LABEL_MANAGED, LABEL_OWNER_PID, LABEL_RUN_ID, MANAGED_VALUE};
pub use gc::{GcReport, gc};
pub use seed::{Seeded, seed_workspace};

use super::{ExecError, ExecOutput, ExecRequest, Executor};
use client::{CALL_TIMEOUT, call, short};
use config::{numeric_user, user_is_root};
use container::WorkspaceMount;
use lifeline::Lifeline;
use oom::OomCounter;

/// Longest the panic-path cleanup may block a dropping thread.
const DROP_CLEANUP_LIMIT: Duration = Duration::from_secs(40);

/// How the host workspace is tied to the container.
#[derive(Debug, Clone)]
enum Workspace {
    /// Bind-mounted; `restore` is the owner to give the tree back at the end.
    Bind {
        host: PathBuf,
        restore: Option<(u32, u32)>,
    },
    /// Copied through an anonymous volume that goes with the container.
    Copy { host: PathBuf },
}

/// A run's sandbox: one container, commands executed in it one at a time.
pub struct DockerExecutor {
    docker: Docker,
    id: String,
    user: String,
    /// The idle processes, which the kill spares when commands run as root.
    idle_pids: Vec<u32>,
    workdir: String,
    memory_bytes: i64,
    pids_limit: i64,
    keep_background: bool,
    loosenings: Vec<String>,
    workspace: Option<Workspace>,
    oom: OomCounter,
    /// Held open for the executor's lifetime: the container ends when it
    /// closes.
    lifeline: Lifeline,
    /// OOM kills already accounted for; the lock also keeps commands
    /// sequential, which the kill protocol relies on.
    oom_seen: tokio::sync::Mutex<Option<u64>>,
    /// Set when a kill could not be verified: no command runs any more.
    unrecoverable: std::sync::Mutex<Option<String>>,
    finishing: tokio::sync::Mutex<()>,
    removed: AtomicBool,
}

impl DockerExecutor {
    /// Validates `cfg`, sweeps abandoned containers, makes sure the image is
    /// there, and creates and starts the run's container.
    pub async fn start(cfg: DockerConfig) -> Result<DockerExecutor, ExecError> {
        let host = client::docker_host();
        cfg.validate(host.as_deref())?;
        let docker = client::connect().await?;
        match gc::gc(&docker).await {
            Ok(r) if !r.containers_removed.is_empty() => {
                tracing::info!(
                    removed = r.containers_removed.len(),
                    "gc removed abandoned containers"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("gc failed: {e}"),
        }
        image::ensure_image(&docker, &cfg.image).await?;

        let copy = cfg.workspace.is_some() && cfg.copy_mode(host.as_deref());
        let euid = nix::unistd::geteuid();
        let mut user = cfg.user.clone();
        if cfg.workspace.is_some() && !copy && !euid.is_root() && !user_is_root(&user) {
            // Without root we cannot chown the workspace to the sandbox
            // user, so the sandbox runs as us instead.
            user = format!("{}:{}", euid.as_raw(), nix::unistd::getegid().as_raw());
        }
        let name = container::container_name(&cfg.run_id);
        let workspace = match &cfg.workspace {
            None => None,
            Some(p) => {
                let host_dir = p.canonicalize()?;
                Some(if copy {
                    Workspace::Copy { host: host_dir }
                } else {
                    let restore = give_to_sandbox(&host_dir, &user)?;
                    Workspace::Bind {
                        host: host_dir,
                        restore,
                    }
                })
            }
        };
        let src;
        let mount = match &workspace {
            None => WorkspaceMount::None,
            Some(Workspace::Bind { host, .. }) => {
                src = host.to_string_lossy().into_owned();
                WorkspaceMount::Bind(&src)
            }
            Some(Workspace::Copy { .. }) => WorkspaceMount::Volume,
        };
        let body = container::spec(&cfg, &user, &mount);
        let created = container::create_and_start(&docker, &name, body).await;
        let (id, lifeline) = match created {
            Ok(c) => c,
            Err(e) => {
                release_workspace(workspace.as_ref()).await;
                return Err(e);
            }
        };
        let mut exec = DockerExecutor {
            docker,
            id,
            user,
            idle_pids: Vec::new(),
            workdir: cfg.workdir.clone(),
            memory_bytes: cfg.memory_bytes,
            pids_limit: cfg.pids_limit,
            keep_background: cfg.keep_background,
            loosenings: cfg.loosenings(),
            workspace,
            oom: OomCounter::InContainer,
            lifeline,
            oom_seen: tokio::sync::Mutex::new(None),
            unrecoverable: std::sync::Mutex::new(None),
            finishing: tokio::sync::Mutex::new(()),
            removed: AtomicBool::new(false),
        };
        if let Err(e) = exec.init().await {
            let _ = exec.finish(false).await;
            return Err(e);
        }
        Ok(exec)
    }

    /// Finds where to count OOM kills (one inspect), learns the idle pids
    /// when they are needed, and uploads the workspace in copy mode. No
    /// exec runs otherwise: the shell is chosen inside each command's exec
    /// (see `launch::LAUNCH`), and a fresh container's OOM-kill count is 0,
    /// so neither needs a probe (an exec costs as much as a command).
    async fn init(&mut self) -> Result<(), ExecError> {
        *self.oom_seen.get_mut() = Some(0);
        let info = call(
            "inspect container",
            short(&self.id),
            CALL_TIMEOUT,
            self.docker.inspect_container(&self.id, None),
        )
        .await?;
        let pid = info.state.and_then(|s| s.pid);
        self.oom = OomCounter::locate(&self.id, pid, client::engine_is_local());
        if let OomCounter::Host(path) = &self.oom {
            tracing::debug!(
                container = short(&self.id),
                "counting OOM kills in {}",
                path.display()
            );
        }
        if user_is_root(&self.user) {
            self.idle_pids = kill::find_idle_pids(&self.docker, &self.id).await?;
        }
        if let Some(Workspace::Copy { host, .. }) = &self.workspace {
            let (uid, gid) = numeric_user(&self.user).unwrap_or((0, 0));
            copy::upload_to(&self.docker, &self.id, host, &self.workdir, uid, gid).await?;
        }
        Ok(())
    }

    /// Why no further command may run, once a kill could not be verified.
    fn unrecoverable(&self) -> Option<String> {
        self.unrecoverable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.id
    }

    /// Every way this sandbox is weaker than the default, for the trajectory.
    pub fn loosenings(&self) -> Vec<String> {
        self.loosenings.clone()
    }

    /// Copies the content of the host directory `host` into the existing
    /// directory `dest` of the container (archive API; links are not
    /// followed), owned by the sandbox user.
    pub async fn upload_dir(&self, host: &std::path::Path, dest: &str) -> Result<(), ExecError> {
        let (uid, gid) = numeric_user(&self.user).unwrap_or((0, 0));
        copy::upload_to(&self.docker, &self.id, host, dest, uid, gid).await
    }

    /// Removes the container without collecting the workspace (copy mode
    /// leaves the host directory as it was). Idempotent.
    pub async fn discard(&self) -> Result<(), ExecError> {
        self.finish(false).await
    }

    /// Removes the container (after collecting the workspace in copy mode
    /// when `collect`) and hands the workspace back. Idempotent.
    async fn finish(&self, collect: bool) -> Result<(), ExecError> {
        let _one_at_a_time = self.finishing.lock().await;
        if self.removed.load(Ordering::SeqCst) {
            return Ok(());
        }
        if collect && let Some(Workspace::Copy { host, .. }) = &self.workspace {
            match copy::download(&self.docker, &self.id, host, &self.workdir).await {
                Ok(rep) if !rep.skipped.is_empty() => tracing::warn!(
                    skipped = ?rep.skipped,
                    "workspace entries not collected (links out, devices or unsafe paths)"
                ),
                Ok(_) => {}
                Err(e) => {
                    // The volume holds the only copy of the agent's work:
                    // keep it (and the container) rather than lose it; the
                    // container stays after this runner exits, until its
                    // expiry or `runner gc`.
                    if let Err(k) = self.lifeline.keep().await {
                        tracing::warn!("cannot keep container {}: {k}", short(&self.id));
                    }
                    self.removed.store(true, Ordering::SeqCst);
                    return Err(ExecError::Docker {
                        op: "collect the workspace",
                        detail: format!(
                            "{e}; container {} and its workspace volume are kept: \
                             copy the files out with `docker cp {}:{} DIR`, then `runner gc`",
                            short(&self.id),
                            short(&self.id),
                            self.workdir
                        ),
                    });
                }
            }
        }
        // If removal fails, `removed` stays false so Drop tries again.
        container::remove(&self.docker, &self.id).await?;
        self.removed.store(true, Ordering::SeqCst);
        release_workspace(self.workspace.as_ref()).await;
        Ok(())
    }
}

/// Bind mode as root: chown the tree to the sandbox user so it can write,
/// returning the original owner to restore at the end.
fn give_to_sandbox(host: &std::path::Path, user: &str) -> Result<Option<(u32, u32)>, ExecError> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() || user_is_root(user) {
        return Ok(None);
    }
    let Some((uid, gid)) = numeric_user(user) else {
        return Ok(None);
    };
    let meta = std::fs::symlink_metadata(host)?;
    owner::chown_tree(host, uid, gid)?;
    Ok(Some((meta.uid(), meta.gid())))
}

/// Gives the bind-mounted tree back to its owner (the copy-mode volume is
/// anonymous and went with the container). Only called once the container
/// is gone, so nothing races it.
async fn release_workspace(ws: Option<&Workspace>) {
    if let Some(Workspace::Bind {
        host,
        restore: Some((uid, gid)),
    }) = ws
    {
        let (host, uid, gid) = (host.clone(), *uid, *gid);
        let r = tokio::task::spawn_blocking(move || owner::chown_tree(&host, uid, gid)).await;
        if !matches!(r, Ok(Ok(0))) {
            tracing::warn!("could not give every workspace entry back to its owner: {r:?}");
        }
    }
}

#[async_trait]
impl Executor for DockerExecutor {
    fn kind(&self) -> &'static str {
        "docker"
    }

    fn workdir(&self) -> String {
        self.workdir.clone()
    }

    async fn execute(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        if self.removed.load(Ordering::SeqCst) {
            return Err(ExecError::SandboxDied {
                detail: format!("container {} was already shut down", short(&self.id)),
            });
        }
        let mut oom_seen = self.oom_seen.lock().await;
        if let Some(detail) = self.unrecoverable() {
            return Err(ExecError::Unrecoverable { detail });
        }
        let target = run::Target {
            docker: &self.docker,
            id: &self.id,
            user: &self.user,
            spare: &self.idle_pids,
            memory_bytes: self.memory_bytes,
            pids_limit: self.pids_limit,
            workdir: &self.workdir,
            keep_background: self.keep_background,
            oom: &self.oom,
            lifeline: Some(&self.lifeline),
        };
        let r = run::run(&target, &req, &mut oom_seen).await;
        if let Err(ExecError::Unrecoverable { detail }) = &r {
            *self.unrecoverable.lock().unwrap_or_else(|e| e.into_inner()) = Some(detail.clone());
        }
        r
    }

    async fn shutdown(&self) -> Result<(), ExecError> {
        self.finish(true).await
    }
}

impl Drop for DockerExecutor {
    /// Panic path: removes the container from a thread with its own
    /// runtime, so it works even while the caller's runtime shuts down.
    fn drop(&mut self) {
        if self.removed.load(Ordering::SeqCst) {
            return;
        }
        let id = self.id.clone();
        let ws = self.workspace.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("runner-docker-cleanup".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                if let Ok(rt) = rt {
                    rt.block_on(async {
                        match client::connect().await {
                            Ok(d) => {
                                if let Err(e) = container::remove(&d, &id).await {
                                    tracing::error!("leaving container {}: {e}", short(&id));
                                }
                                release_workspace(ws.as_ref()).await;
                            }
                            Err(e) => tracing::error!("leaving container {}: {e}", short(&id)),
                        }
                    });
                }
                let _ = tx.send(());
            });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(DROP_CLEANUP_LIMIT);
        }
    }
}
