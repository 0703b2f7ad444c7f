//! Starting a run's sandbox: the engine checks, the sweep of abandoned
//! containers, the image, the egress proxy, the workspace, the supervisor's
//! binary and channel, then the container itself and its first handshake.

use std::sync::atomic::AtomicBool;

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use tokio::net::unix::pipe;

use super::config::numeric_user;
use super::container::{self, WorkspaceMount};
use super::lifeline::Lifeline;
use super::oom::OomCounter;
use super::workspace::{Workspace, finish_disk, prepare_bind};
use super::{
    DockerConfig, DockerExecutor, EngineInfo, Kernel, channel, client, egress, gc, image,
    recover_disks, seed, services, user_is_root,
};
use crate::exec::shell::{ShellMode, ShellSession};
use crate::exec::supervisor::binary as supervisor_binary;
use crate::exec::{ExecError, SandboxInfo};

/// What a sandbox of `cfg` is before it runs (what confines it is read
/// once it does).
fn info_of(cfg: &DockerConfig, loosenings: Vec<String>) -> SandboxInfo {
    SandboxInfo {
        kind: "docker",
        workdir: cfg.workdir.clone(),
        root: None,
        security: None,
        loosenings,
    }
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
        let engine = EngineInfo::recent(&docker).await?;
        let network = cfg
            .join_network
            .as_deref()
            .or(cfg.network.as_deref())
            .or(cfg.egress.as_ref().map(|_| "egress"));
        let runtime = engine.check_runtime(cfg.runtime.as_deref(), network)?;
        let kernel = engine.kernel_of(&runtime);
        sweep(&docker).await;
        image::ensure_image(&docker, &cfg.image).await?;
        let mut loosenings = cfg.loosenings();
        let (cfg, egress) = with_egress(&docker, cfg, kernel).await?;

        let copy = cfg.workspace.is_some() && cfg.copy_mode(host.as_deref());
        let mut user = cfg.user.clone();
        let name = container::container_name(&cfg.run_id);
        let workspace =
            workspace_of(&docker, &cfg, copy, &engine, &mut user, &mut loosenings).await?;
        let src = workspace.as_ref().and_then(Workspace::bind_source);
        let mount = match (&workspace, &src) {
            (None, _) => WorkspaceMount::None,
            (Some(_), Some(src)) => WorkspaceMount::Bind(src),
            (Some(_), None) => WorkspaceMount::Volume,
        };
        let ids = sandbox_ids(&user)?;
        let (supervisor, upload) = supervisor_source()?;
        let upload = upload
            .as_deref()
            .map(|tar| (supervisor_binary::DIR_IN_SANDBOX, tar));
        let (chan, mut fifo) = direct_channel(&runtime, kernel, &engine);
        let chan_dir = chan
            .as_ref()
            .map(|c| c.host_dir().to_string_lossy().into_owned());
        let mut body = container::spec(
            &cfg,
            ids,
            &mount,
            kernel,
            supervisor.as_deref(),
            chan_dir.as_deref(),
        );
        if let (Some(_), Some(hc)) = (&egress, body.host_config.as_mut()) {
            // Names the engine's DNS does not know go nowhere: see
            // `egress::SANDBOX_DNS`.
            hc.dns = Some(vec![egress::SANDBOX_DNS.to_string()]);
        }
        let bound_root = bound_root(&cfg, &mut body);
        let created = create_bounded(
            &docker,
            &name,
            body,
            upload,
            &mut fifo,
            bound_root,
            &mut loosenings,
        )
        .await;
        let (id, lifeline) = started_or_cleaned(created, &workspace).await?;
        let mut exec = DockerExecutor {
            docker,
            id,
            user,
            bash: None,
            supervisor_pid: 1,
            session: (cfg.shell == ShellMode::Persistent)
                .then(|| ShellSession::new(cfg.workdir.clone())),
            _channel: chan,
            info: info_of(&cfg, loosenings),
            memory_bytes: cfg.memory_bytes,
            // The container's own limit, which the kill protocol raises
            // briefly when a fork bomb has filled it.
            pids_limit: container::host_pids_limit(&cfg, kernel),
            nproc: container::command_nproc(&cfg, kernel),
            keep_background: cfg.keep_background,
            workspace,
            disk_bytes: cfg.disk_bytes,
            env: container::exec_env(&cfg.env),
            redactor: cfg.redactor.clone(),
            security: None,
            oom: OomCounter::InContainer,
            lifeline,
            oom_seen: tokio::sync::Mutex::new(None),
            unrecoverable: std::sync::Mutex::new(None),
            finishing: tokio::sync::Mutex::new(()),
            removed: AtomicBool::new(false),
            labels: container::labels(&cfg),
            egress,
        };
        exec.make_ready(&cfg, &engine).await?;
        Ok(exec)
    }

    /// Joins the task's service network (for a sandbox with a network of
    /// its own) and waits for the supervisor, before any command runs; on
    /// a failure the sandbox is removed.
    async fn make_ready(
        &mut self,
        cfg: &DockerConfig,
        engine: &EngineInfo,
    ) -> Result<(), ExecError> {
        if let (Some(_), Some(net)) = (&cfg.network, &cfg.join_network)
            && let Err(e) = services::connect_main(&self.docker, &self.id, net).await
        {
            let _ = self.finish(false).await;
            return Err(e);
        }
        if let Err(e) = self.init(engine, &cfg.seccomp).await {
            let _ = self.finish(false).await;
            return Err(e);
        }
        Ok(())
    }
}

/// How often a process sweeps abandoned sandboxes as it starts its own: a
/// suite starts hundreds, and a sweep lists every object of the engine.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// When this process last swept.
static LAST_SWEEP: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// Whether a start should sweep now: the first of the process, then at
/// most once every [`SWEEP_EVERY`] (claimed, so concurrent starts sweep
/// once).
fn sweep_due() -> bool {
    let Ok(mut last) = LAST_SWEEP.lock() else {
        return true;
    };
    let now = std::time::Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < SWEEP_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}

/// Removes abandoned containers and workspace disks (see [`sweep_due`]);
/// a failure is logged, not fatal.
async fn sweep(docker: &Docker) {
    if !sweep_due() {
        return;
    }
    match gc::gc(docker).await {
        Ok(r) if !r.containers_removed.is_empty() => {
            tracing::info!(
                removed = r.containers_removed.len(),
                "gc removed abandoned containers"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("gc failed: {e}"),
    }
    recover_disks(docker).await;
}

/// An allowlist: the proxy and its network first; the sandbox then joins
/// that network only, its commands pointed at the proxy. Dropped on any
/// failure later, they are removed with it.
async fn with_egress(
    docker: &Docker,
    cfg: DockerConfig,
    kernel: Kernel,
) -> Result<(DockerConfig, Option<egress::Egress>), ExecError> {
    match &cfg.egress {
        None => Ok((cfg, None)),
        Some(spec) => {
            let eg = egress::Egress::start(docker, &cfg, spec, kernel).await?;
            let mut env = egress::proxy_env();
            env.extend(cfg.env.iter().cloned());
            let cfg = DockerConfig {
                network: Some(eg.network().to_string()),
                env,
                ..cfg
            };
            Ok((cfg, Some(eg)))
        }
    }
}

/// The run's workspace: none, a copy uploaded into a volume, or a bind
/// mount of the host's directory (which may change `user` and add to
/// `loosenings`).
async fn workspace_of(
    docker: &Docker,
    cfg: &DockerConfig,
    copy: bool,
    engine: &EngineInfo,
    user: &mut String,
    loosenings: &mut Vec<String>,
) -> Result<Option<Workspace>, ExecError> {
    Ok(match &cfg.workspace {
        None => None,
        Some(p) if copy => {
            let host_dir = p.canonicalize()?;
            // An exact copy (a verifier's) starts from an empty volume,
            // which the engine makes root's: on request the upload
            // gives the tree the image's owner of the directory back.
            let owner = if cfg.keep_workdir_owner {
                seed::image_dir_owner(docker, &cfg.image, &cfg.workdir, &cfg.run_id).await?
            } else {
                None
            };
            Some(Workspace::Copy {
                host: host_dir,
                owner,
                root_writable: cfg.writable_rootfs,
            })
        }
        Some(p) => {
            let host_dir = p.canonicalize()?;
            let ws = prepare_bind(cfg, &host_dir, user, loosenings, engine.remap()).await?;
            Some(ws)
        }
    })
}

/// The sandbox user as numbers: root, or a numeric `UID:GID`.
fn sandbox_ids(user: &str) -> Result<(u32, u32), ExecError> {
    let ids = if user_is_root(user) {
        Some((0, 0))
    } else {
        numeric_user(user)
    };
    ids.ok_or_else(|| {
        ExecError::Refused(format!(
            "the sandbox user '{user}' is not numeric UID:GID (or root); \
             give --user as numbers, e.g. 1000:1000"
        ))
    })
}

/// A local engine mounts the host's copy of the supervisor (its path); a
/// remote one gets it uploaded into the created container (the archive).
fn supervisor_source() -> Result<(Option<String>, Option<Vec<u8>>), ExecError> {
    if client::engine_is_local() {
        let path = supervisor_binary::installed().map_err(|e| {
            ExecError::Workspace(format!(
                "cannot install the sandbox supervisor on the host: {e}"
            ))
        })?;
        Ok((Some(path.to_string_lossy().into_owned()), None))
    } else {
        Ok((None, Some(supervisor_binary::archive()?)))
    }
}

/// The frames past the engine, when it is local and runs the host's
/// kernel (gVisor's file proxy is not asked to carry a FIFO). Not with user
/// namespaces (the supervisor's uid is another on the host) nor with a
/// runtime other than runc (a VM runtime's kernel is not runner's).
fn direct_channel(
    runtime: &str,
    kernel: Kernel,
    engine: &EngineInfo,
) -> (Option<channel::Channel>, Option<pipe::Receiver>) {
    let plain = matches!(runtime, "runc" | "crun");
    let chan =
        (client::engine_is_local() && kernel == Kernel::Host && plain && !engine.remaps_users())
            .then(channel::Channel::open)
            .flatten();
    match chan {
        Some((c, rx)) => (Some(c), Some(rx)),
        None => (None, None),
    }
}

/// Asks the engine to bound a writable root at `--disk`; whether it was
/// asked.
fn bound_root(cfg: &DockerConfig, body: &mut ContainerCreateBody) -> bool {
    let bound_root = cfg.writable_rootfs && cfg.disk_bytes.is_some();
    if let (true, Some(size), Some(hc)) = (bound_root, cfg.disk_bytes, body.host_config.as_mut()) {
        // The engine bounds a writable root only on storage drivers
        // with quotas (overlay2 on xfs with pquota, btrfs, zfs...).
        hc.storage_opt = Some(std::collections::HashMap::from([(
            "size".to_string(),
            size.to_string(),
        )]));
    }
    bound_root
}

/// Creates and starts the container; when the storage driver refuses the
/// root's bound, again without it, said in `loosenings`.
async fn create_bounded(
    docker: &Docker,
    name: &str,
    mut body: ContainerCreateBody,
    upload: Option<(&str, &[u8])>,
    fifo: &mut Option<pipe::Receiver>,
    bound_root: bool,
    loosenings: &mut Vec<String>,
) -> Result<(String, Lifeline), ExecError> {
    let unbounded = || {
        "writes to the writable root filesystem are not bounded by --disk: \
         this engine's storage driver has no quotas"
            .to_string()
    };
    // Known to refuse: not asked again (a refused create costs the engine
    // a layer made and removed).
    if bound_root && refuses_root_bound() {
        if let Some(hc) = body.host_config.as_mut() {
            hc.storage_opt = None;
        }
        loosenings.push(unbounded());
        return container::create_and_start(docker, name, body, upload, fifo).await;
    }
    let created = container::create_and_start(docker, name, body.clone(), upload, fifo).await;
    if bound_root && matches!(&created, Err(e) if e.to_string().contains("storage-opt")) {
        note_refused_root_bound();
        if let Some(hc) = body.host_config.as_mut() {
            hc.storage_opt = None;
        }
        loosenings.push(unbounded());
        return container::create_and_start(docker, name, body, upload, fifo).await;
    }
    created
}

/// The engines (by `DOCKER_HOST`) whose storage driver refused to bound a
/// container's root, as this process found.
static REFUSED_ROOT_BOUND: std::sync::Mutex<Vec<Option<String>>> =
    std::sync::Mutex::new(Vec::new());

fn refuses_root_bound() -> bool {
    let host = client::docker_host();
    REFUSED_ROOT_BOUND.lock().is_ok_and(|r| r.contains(&host))
}

fn note_refused_root_bound() {
    let host = client::docker_host();
    if let Ok(mut r) = REFUSED_ROOT_BOUND.lock()
        && !r.contains(&host)
    {
        r.push(host);
    }
}

/// The started container, the workspace told so; or the error, the
/// workspace's disk removed first.
async fn started_or_cleaned(
    created: Result<(String, Lifeline), ExecError>,
    workspace: &Option<Workspace>,
) -> Result<(String, Lifeline), ExecError> {
    match created {
        Ok(c) => {
            if let Some(w) = workspace {
                w.started();
            }
            Ok(c)
        }
        Err(e) => {
            if let Some(Workspace::Disk { disk }) = workspace
                && let Some(d) = disk.lock().ok().and_then(|mut d| d.take())
                && let Err(d) = finish_disk(d, false).await
            {
                tracing::warn!("removing the workspace disk of a sandbox that did not start: {d}");
            }
            Err(e)
        }
    }
}
