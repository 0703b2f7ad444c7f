//! The docker executor: one hardened container per run, through bollard.
//! Each command is an exec of `bash -c` (or `sh -c`) in /workspace; the
//! container idles under Docker's init between commands.

mod client;
mod config;
mod container;
mod copy;
mod engine;
mod gc;
mod image;
mod kill;
mod owner;
mod run;
mod seed;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::query_parameters::RemoveVolumeOptionsBuilder;

pub use client::connect;
pub use config::{
    CONTAINER_WORKDIR, DEFAULT_CPUS, DEFAULT_HOME_SIZE_BYTES, DEFAULT_IMAGE, DEFAULT_MEMORY_BYTES,
    DEFAULT_PIDS_LIMIT, DEFAULT_USER, DockerConfig, SANDBOX_HOME, Ulimits, WorkspaceMode,
};
pub use container::{LABEL_MANAGED, LABEL_OWNER_PID, LABEL_RUN_ID, MANAGED_VALUE};
pub use engine::{EngineInfo, Kernel, REGISTER_RUNTIME_HINT, RuntimeInfo, SandboxSecurity};
pub use gc::{GcReport, gc};
pub use seed::{Seeded, seed_workspace};

use super::{ExecError, ExecOutput, ExecRequest, Executor};
use client::{CALL_TIMEOUT, call, short};
use config::{numeric_user, user_is_root};
use container::WorkspaceMount;

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
    /// Copied through the labelled volume `volume`.
    Copy { host: PathBuf, volume: String },
}

/// A run's sandbox: one container, commands executed in it one at a time.
pub struct DockerExecutor {
    docker: Docker,
    id: String,
    user: String,
    idle_pid: Option<u32>,
    workdir: String,
    memory_bytes: i64,
    pids_limit: i64,
    nproc: Option<i64>,
    loosenings: Vec<String>,
    workspace: Option<Workspace>,
    /// What confines the container, read from the engine once it runs.
    security: Option<SandboxSecurity>,
    /// OOM kills already accounted for; the lock also keeps commands
    /// sequential, which the kill protocol relies on.
    oom_seen: tokio::sync::Mutex<Option<u64>>,
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
        // Before anything is made: the runtime must exist and be able to
        // give the network asked for.
        let engine = EngineInfo::read(&docker).await?;
        let runtime = engine.check_runtime(cfg.runtime.as_deref(), cfg.network.as_deref())?;
        let kernel = engine.kernel_of(&runtime);
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
                    let volume = format!("{name}-ws");
                    copy::create_volume(&docker, &cfg, &volume).await?;
                    Workspace::Copy {
                        host: host_dir,
                        volume,
                    }
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
            Some(Workspace::Copy { volume, .. }) => WorkspaceMount::Volume(volume),
        };
        let body = container::spec(&cfg, &user, &mount, kernel);
        let created = container::create_and_start(&docker, &name, body).await;
        let id = match created {
            Ok(id) => id,
            Err(e) => {
                release_workspace(&docker, workspace.as_ref()).await;
                return Err(e);
            }
        };
        let mut exec = DockerExecutor {
            docker,
            id,
            user,
            idle_pid: None,
            workdir: cfg.workdir.clone(),
            memory_bytes: cfg.memory_bytes,
            // The container's own limit, which the kill protocol raises
            // briefly when a fork bomb has filled it.
            pids_limit: container::host_pids_limit(&cfg, kernel),
            nproc: container::command_nproc(&cfg, kernel),
            loosenings: cfg.loosenings(),
            workspace,
            security: None,
            oom_seen: tokio::sync::Mutex::new(None),
            finishing: tokio::sync::Mutex::new(()),
            removed: AtomicBool::new(false),
        };
        if let Err(e) = exec.init(&engine).await {
            let _ = exec.finish(false).await;
            return Err(e);
        }
        Ok(exec)
    }

    /// Learns the idle pid when it is needed, and uploads the workspace in
    /// copy mode. No exec runs otherwise: the shell is chosen inside each
    /// command's exec (see `run::LAUNCH`), and a fresh container's OOM-kill
    /// count is 0, so neither needs a probe (an exec costs as much as a
    /// command).
    async fn init(&mut self, engine: &EngineInfo) -> Result<(), ExecError> {
        *self.oom_seen.get_mut() = Some(0);
        self.security = Some(engine::inspect_security(&self.docker, &self.id, engine).await?);
        if user_is_root(&self.user) {
            self.idle_pid = kill::find_idle_pid(&self.docker, &self.id).await?;
        }
        if let Some(Workspace::Copy { host, .. }) = &self.workspace {
            let (uid, gid) = numeric_user(&self.user).unwrap_or((0, 0));
            copy::upload_to(&self.docker, &self.id, host, &self.workdir, uid, gid).await?;
        }
        Ok(())
    }

    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.id
    }

    /// What confines the container (runtime, seccomp, AppArmor...), as
    /// the engine reported it at start.
    pub fn security(&self) -> Option<&SandboxSecurity> {
        self.security.as_ref()
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
                    // keep it (and the container) rather than lose it.
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
        release_workspace(&self.docker, self.workspace.as_ref()).await;
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

/// Gives the bind-mounted tree back to its owner, or removes the copy-mode
/// volume. Only called once the container is gone, so nothing races it.
async fn release_workspace(docker: &Docker, ws: Option<&Workspace>) {
    match ws {
        Some(Workspace::Bind {
            host,
            restore: Some((uid, gid)),
        }) => {
            let (host, uid, gid) = (host.clone(), *uid, *gid);
            let r = tokio::task::spawn_blocking(move || owner::chown_tree(&host, uid, gid)).await;
            if !matches!(r, Ok(Ok(0))) {
                tracing::warn!("could not give every workspace entry back to its owner: {r:?}");
            }
        }
        Some(Workspace::Copy { volume, .. }) => {
            let opts = RemoveVolumeOptionsBuilder::new().force(true).build();
            let r = call(
                "remove volume",
                volume,
                CALL_TIMEOUT,
                docker.remove_volume(volume, Some(opts)),
            )
            .await;
            if let Err(e) = r {
                tracing::warn!("{e}");
            }
        }
        _ => {}
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
        let target = run::Target {
            docker: &self.docker,
            id: &self.id,
            user: &self.user,
            idle_pid: self.idle_pid,
            memory_bytes: self.memory_bytes,
            pids_limit: self.pids_limit,
            nproc: self.nproc,
            workdir: &self.workdir,
        };
        run::run(&target, &req, &mut oom_seen).await
    }

    fn sandbox_security(&self) -> Option<serde_json::Value> {
        self.security
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
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
                                release_workspace(&d, ws.as_ref()).await;
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
