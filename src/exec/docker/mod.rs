//! The docker executor: one hardened container per run, through bollard.
//! Its main process (PID 1, no engine init) is runner's supervisor, which
//! runs each command (`bash -c`, or `sh -c`) as the sandbox user,
//! streams its output and kills what it leaves, without an exec
//! (see `run`); a control exec is used only when the supervisor cannot
//! finish a kill (`kill`). The container is tied to this process through
//! its attach stream and ends when the runner does (see `lifeline`);
//! starting it is `start`.

mod backend;
mod build;
mod channel;
/// Where the supervisor's channel is mounted in a sandbox (runner's own).
pub use channel::DIR_IN_SANDBOX as CHANNEL_DIR_IN_SANDBOX;
mod client;
mod config;
mod container;
mod copy;
mod dockerfile;
mod egress;
mod engine;
mod files;
mod gc;
mod hardening;
mod image;
mod kill;
mod launch;
mod lifeline;
mod oom;
mod overlay;
mod run;
mod seed;
mod services;
mod snapshot;
mod start;
mod upperdir;
mod workspace;

use client::ENGINE;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bollard::Docker;

pub use backend::{DockerBackend, docker_config};
pub use build::{ImageError, LABEL_TASK};
pub use client::connect;
pub use config::{
    CONTAINER_WORKDIR, DEFAULT_CPUS, DEFAULT_DISK_BYTES, DEFAULT_HOME_SIZE_BYTES, DEFAULT_IMAGE,
    DEFAULT_MAX_RUN_SECS, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS_LIMIT, DEFAULT_USER, DockerConfig,
    SANDBOX_HOME, Ulimits, WorkspaceMode, user_is_root,
};
// Every label name is public so tests build their queries and fakes on them.
pub use container::{
    LABEL_CREATED, LABEL_EXPIRES, LABEL_MANAGED, LABEL_OWNER_HOST, LABEL_OWNER_PID,
    LABEL_OWNER_START, LABEL_RUN_ID, MANAGED_VALUE,
};
pub use egress::{DEFAULT_EGRESS_NETWORK, EgressSpec, PROXY_IMAGE, PROXY_SERVICE};
pub use engine::{EngineInfo, Kernel, REGISTER_RUNTIME_HINT, RuntimeInfo, SandboxSecurity};
pub use gc::{GcReport, gc};
pub use hardening::{CAPABILITY_CEILING, NEVER_CAPS};
pub use seed::seed_workspace;
pub use services::{DockerServices, LABEL_SERVICE};
pub use snapshot::{
    LABEL_SNAPSHOT, SNAPSHOT_REPO, UPPER_WALK_BUDGET, engine_changes, upper_changes,
};
pub use workspace::recover_disks;

use super::{
    ExecError, ExecOutput, ExecRequest, Executor, Extras, FsChanges, FsChangesOf, Owner,
    ProcessInfo, Processes, SandboxInfo, ShellState, Snapshots, Users, Work,
};
use crate::exec::shell::ShellSession;
use crate::exec::supervisor::run::FileFailure;
use crate::exec::supervisor::{READY_LIMIT, run as sup_run};
use crate::redact::Redactor;
use client::{CALL_TIMEOUT, call, short};
use config::numeric_user;
use lifeline::Lifeline;
use oom::OomCounter;
use workspace::{Workspace, finish_disk};

/// The executor's error for a file request the sandbox refused.
fn file_error(what: &str, path: &str, max: u64, failure: FileFailure, message: &str) -> ExecError {
    let at = format!("cannot {what} '{path}' in the sandbox");
    match failure {
        // A link is not followed: to the reader it is no file at all.
        FileFailure::NotFound | FileFailure::Refused if what == "read" => {
            ExecError::Refused(format!("{at}: no such file"))
        }
        FileFailure::TooBig => ExecError::Refused(format!("{at}: larger than {max} bytes")),
        FileFailure::NotFound | FileFailure::Refused => {
            ExecError::Refused(format!("{at}: {message}"))
        }
        FileFailure::Io => ExecError::Workspace(format!("{at}: {message}")),
    }
}

/// A run's sandbox: one container, commands executed in it one at a time.
pub struct DockerExecutor {
    docker: Docker,
    id: String,
    user: String,
    /// Where bash is in the sandbox (`None`: commands run with `sh -c`).
    bash: Option<String>,
    /// The supervisor's pid in the sandbox, as its greeting said.
    supervisor_pid: u32,
    /// The persistent shell's state; `None` with `--shell fresh`.
    session: Option<ShellSession>,
    /// The supervisor's direct channel, when there is one (removed with
    /// the executor).
    _channel: Option<channel::Channel>,
    /// What it is: its workdir, loosenings and (once it runs) what
    /// confines it.
    info: SandboxInfo,
    memory_bytes: i64,
    pids_limit: i64,
    nproc: Option<i64>,
    keep_background: bool,
    workspace: Option<Workspace>,
    /// Bytes the workspace may hold; `None`: unbounded.
    disk_bytes: Option<u64>,
    /// The command environment (`K=V`), passed with each exec.
    env: Vec<String>,
    redactor: Redactor,
    /// What confines the container, read from the engine once it runs.
    security: Option<SandboxSecurity>,
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
    /// The run's labels, put on a snapshot so `runner gc` finds it.
    labels: std::collections::HashMap<String, String>,
    /// An allowlisted sandbox's proxy and network, removed after it (a
    /// drop without `finish` removes them too: `Egress` drops after this).
    egress: Option<egress::Egress>,
}

impl DockerExecutor {
    /// Waits for the supervisor's greeting, reads what confines the
    /// container and where to count OOM kills (inspects), and uploads the
    /// workspace in copy mode. No exec runs: the supervisor says whether
    /// the image has bash, and a fresh container's OOM-kill count is 0.
    async fn init(
        &mut self,
        engine: &EngineInfo,
        seccomp: &crate::exec::seccomp::Seccomp,
    ) -> Result<(), ExecError> {
        *self.oom_seen.get_mut() = Some(0);
        match self.lifeline.supervisor.ready(READY_LIMIT).await {
            Ok(hello) => {
                if let Some(c) = &self._channel {
                    c.seal();
                }
                self.bash = hello.bash;
                self.supervisor_pid = hello.pid;
                if self.session.is_some() && self.bash.is_none() {
                    return Err(ExecError::ShellUnavailable {
                        place: "the image",
                        detail: "it has no bash on its PATH".into(),
                    });
                }
            }
            Err(e) => {
                let words = self.lifeline.supervisor.last_words();
                let why = container::death_reason(&self.docker, &self.id, Some(&self.lifeline))
                    .await
                    .ok()
                    .flatten();
                return Err(ExecError::SandboxDied {
                    detail: format!(
                        "its supervisor did not start: {e}{}{}",
                        if words.is_empty() {
                            String::new()
                        } else {
                            format!(" ({words})")
                        },
                        why.map(|w| format!("; {w}")).unwrap_or_default()
                    ),
                });
            }
        }
        let security = engine::inspect_security(&self.docker, &self.id, engine, seccomp).await?;
        self.info.security = serde_json::to_value(&security).ok();
        self.security = Some(security);
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
        if let Some(Workspace::Copy {
            host,
            owner,
            root_writable,
        }) = &self.workspace
        {
            let (uid, gid) = numeric_user(&self.user).unwrap_or((0, 0));
            // Without the image's owner kept, the directory is the command
            // user's, as a bind-mounted one is: a root user without
            // capabilities cannot write into one the image gave another
            // user (a Harbor task's root agent on a remote engine).
            let owner = owner.unwrap_or(copy::DirOwner {
                uid,
                gid,
                mode: 0o755,
            });
            copy::upload_owned(
                &self.docker,
                &self.id,
                host,
                &self.info.workdir,
                owner,
                *root_writable,
            )
            .await?
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

    /// The error for a supervisor stream that ended: the sandbox died
    /// (with the engine's word on how), or its supervisor did.
    async fn died(&self, e: crate::exec::supervisor::StreamError) -> ExecError {
        run::stream_lost(&self.docker, &self.id, &self.lifeline, e).await
    }

    /// Waits for the sandbox's turn (commands and file requests run one at
    /// a time: a command's end kills everything else that runs) and
    /// checks the sandbox can still serve.
    async fn turn(&self) -> Result<tokio::sync::MutexGuard<'_, Option<u64>>, ExecError> {
        if self.removed.load(Ordering::SeqCst) {
            return Err(ExecError::SandboxDied {
                detail: format!("container {} was already shut down", short(&self.id)),
            });
        }
        let guard = self.oom_seen.lock().await;
        if let Some(detail) = self.unrecoverable() {
            return Err(ExecError::Unrecoverable { detail });
        }
        Ok(guard)
    }

    /// The error for a request the supervisor did not carry out.
    async fn run_failed(&self, e: sup_run::RunError) -> ExecError {
        match e {
            sup_run::RunError::Stream(e) => self.died(e).await,
            sup_run::RunError::Spawn(m) => ExecError::Spawn(m),
            e @ sup_run::RunError::NoAnswer(_) => ExecError::Unrecoverable {
                detail: e.to_string(),
            },
        }
    }

    /// Runs one command, as the sandbox user or `as_user` (see
    /// `Users::execute_as`).
    async fn run_command(
        &self,
        req: ExecRequest,
        as_user: Option<(u32, u32)>,
        switch_user: bool,
    ) -> Result<ExecOutput, ExecError> {
        self.run_command_with(req, as_user, switch_user, self.keep_background)
            .await
    }

    /// [`Self::run_command`], keeping background work or not.
    async fn run_command_with(
        &self,
        req: ExecRequest,
        as_user: Option<(u32, u32)>,
        switch_user: bool,
        keep_background: bool,
    ) -> Result<ExecOutput, ExecError> {
        let mut oom_seen = self.turn().await?;
        let target = run::Target {
            docker: &self.docker,
            id: &self.id,
            user: &self.user,
            bash: self.bash.as_deref(),
            session: self.session.as_ref(),
            memory_bytes: self.memory_bytes,
            pids_limit: self.pids_limit,
            nproc: self.nproc,
            workdir: &self.info.workdir,
            env: &self.env,
            redactor: &self.redactor,
            keep_background,
            oom: &self.oom,
            lifeline: &self.lifeline,
            as_user,
            switch_user,
        };
        let r = run::run(&target, &req, &mut oom_seen).await;
        if let Err(ExecError::Unrecoverable { detail }) = &r {
            self.set_unrecoverable(detail);
        }
        // Before the next command, or anyone on the host, can use it.
        if let Some(w) = &self.workspace {
            w.strip().await?;
        }
        r
    }

    fn set_unrecoverable(&self, detail: &str) {
        *self.unrecoverable.lock().unwrap_or_else(|e| e.into_inner()) = Some(detail.to_string());
    }

    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.id
    }

    /// The egress proxy's container id, for an allowlisted sandbox.
    pub fn egress_proxy_id(&self) -> Option<String> {
        self.egress.as_ref().and_then(|e| e.proxy_id())
    }

    /// The egress network, for an allowlisted sandbox.
    pub fn egress_network(&self) -> Option<String> {
        self.egress.as_ref().map(|e| e.network().to_string())
    }

    /// What confines the container (runtime, seccomp, AppArmor...), as
    /// the engine reported it at start.
    pub fn security(&self) -> Option<&SandboxSecurity> {
        self.security.as_ref()
    }

    /// Removes the container (after collecting the workspace in copy mode
    /// when `collect`) and hands the workspace back. Idempotent.
    async fn finish(&self, collect: bool) -> Result<(), ExecError> {
        let _one_at_a_time = self.finishing.lock().await;
        if self.removed.load(Ordering::SeqCst) {
            return Ok(());
        }
        if collect && let Some(Workspace::Copy { host, .. }) = &self.workspace {
            let limit = self.disk_bytes.unwrap_or(copy::MAX_COLLECT_BYTES);
            match copy::download(&self.docker, &self.id, host, &self.info.workdir, limit).await {
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
                    return Err(ExecError::Engine {
                        engine: ENGINE,
                        op: "collect the workspace",
                        detail: format!(
                            "{e}; container {} and its workspace volume are kept: \
                             copy the files out with `docker cp {}:{} DIR`, then `runner gc`",
                            short(&self.id),
                            short(&self.id),
                            self.info.workdir
                        ),
                    });
                }
            }
        }
        // If removal fails, `removed` stays false so Drop tries again.
        container::remove(&self.docker, &self.id).await?;
        self.removed.store(true, Ordering::SeqCst);
        // Nothing of the sandbox runs any more: the last word on what it left.
        let stripped = match &self.workspace {
            Some(w) => w.strip().await,
            None => Ok(()),
        };
        // The proxy and its network next; a failure is reported after the
        // work is handed back (Egress's drop tries the removal again).
        let egress_removed = match &self.egress {
            Some(e) => e.stop().await,
            None => Ok(()),
        };
        if let Some(Workspace::Disk { disk }) = &self.workspace {
            // Nothing of the sandbox runs any more: its work comes back.
            let taken = disk.lock().ok().and_then(|mut d| d.take());
            if let Some(d) = taken {
                finish_disk(d, collect).await?;
            }
        }
        stripped?;
        egress_removed
    }
}

#[async_trait]
impl Executor for DockerExecutor {
    fn info(&self) -> &SandboxInfo {
        &self.info
    }

    fn extras(&self) -> Extras<'_> {
        Extras {
            users: Some(self),
            processes: Some(self),
            shell: Some(self),
            changes: Some(self),
            snapshots: Some(self),
        }
    }

    async fn execute(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        self.run_command(req, None, false).await
    }

    async fn upload(
        &self,
        host: &std::path::Path,
        dest: &str,
        owner: Owner,
    ) -> Result<(), ExecError> {
        let _turn = self.turn().await?;
        let sup = &self.lifeline.supervisor;
        match owner {
            Owner::User => files::upload_dir(sup, &self.user, host, dest).await,
            Owner::Root => files::upload_dir_as(sup, (0, 0), Some((0, 0)), host, dest).await,
        }
    }

    async fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ExecError> {
        let _turn = self.turn().await?;
        let sup = &self.lifeline.supervisor;
        match sup_run::read_file(sup, path, max_bytes).await {
            Ok(Ok(data)) => Ok(data),
            Ok(Err((kind, message))) => Err(file_error("read", path, max_bytes, kind, &message)),
            Err(e) => Err(self.run_failed(e).await),
        }
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<(), ExecError> {
        let _turn = self.turn().await?;
        let sup = &self.lifeline.supervisor;
        match sup_run::write_file(sup, path, data).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err((kind, message))) => Err(file_error("write", path, 0, kind, &message)),
            Err(e) => Err(self.run_failed(e).await),
        }
    }

    async fn download_dir(
        &self,
        src: &str,
        host: &std::path::Path,
        max_bytes: u64,
    ) -> Result<(), ExecError> {
        let _turn = self.turn().await?;
        files::download_dir(&self.lifeline.supervisor, src, host, max_bytes).await
    }

    async fn close(&self, work: Work) -> Result<(), ExecError> {
        self.finish(work == Work::Keep).await
    }
}

#[async_trait]
impl Users for DockerExecutor {
    async fn execute_as(
        &self,
        user: (u32, u32),
        req: ExecRequest,
    ) -> Result<ExecOutput, ExecError> {
        self.run_command(req, Some(user), false).await
    }

    async fn execute_final(
        &self,
        user: (u32, u32),
        switch_user: bool,
        req: ExecRequest,
    ) -> Result<ExecOutput, ExecError> {
        // Not keeping background work: the supervisor kills every process
        // as the command exits, before it reports the exit.
        self.run_command_with(req, Some(user), switch_user, false)
            .await
    }
}

#[async_trait]
impl Processes for DockerExecutor {
    async fn processes(&self) -> Result<Vec<ProcessInfo>, ExecError> {
        let _turn = self.turn().await?;
        match sup_run::processes(&self.lifeline.supervisor).await {
            Ok(Ok(mut procs)) => {
                procs.retain(|p| p.pid != self.supervisor_pid);
                Ok(procs)
            }
            Ok(Err(why)) => Err(ExecError::Spawn(format!(
                "cannot list the processes of container {}: {why}",
                short(&self.id)
            ))),
            Err(e) => Err(self.run_failed(e).await),
        }
    }

    async fn kill_all(&self) -> Result<(), ExecError> {
        let _turn = self.turn().await?;
        let stuck = match sup_run::kill_all(&self.lifeline.supervisor).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(stuck)) => stuck,
            Err(e) => return Err(self.died(e).await),
        };
        // SIGKILL did not end them inside: the engine's turn, as root
        // (whose control exec kills every pid but PID 1).
        match kill::kill_command_processes(&self.docker, &self.id, "0:0", &[], self.pids_limit)
            .await
        {
            Ok(()) => Ok(()),
            Err(e) => {
                let detail = format!("{stuck}; {e}");
                self.set_unrecoverable(&detail);
                Err(ExecError::Unrecoverable { detail })
            }
        }
    }
}

#[async_trait]
impl ShellState for DockerExecutor {
    async fn restart_shell(&self) -> Result<(), ExecError> {
        let Some(session) = &self.session else {
            return Ok(());
        };
        let _turn = self.turn().await?;
        session.restart();
        // What the old shell left running goes with it.
        match sup_run::kill_all(&self.lifeline.supervisor).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(stuck)) => Err(ExecError::Unrecoverable { detail: stuck }),
            Err(e) => Err(self.died(e).await),
        }
    }
}

#[async_trait]
impl FsChangesOf for DockerExecutor {
    async fn changes(&self) -> Result<FsChanges, ExecError> {
        let _turn = self.turn().await?;
        snapshot::changes(&self.docker, &self.id).await
    }
}

#[async_trait]
impl Snapshots for DockerExecutor {
    async fn snapshot(&self) -> Result<String, ExecError> {
        let _turn = self.turn().await?;
        snapshot::commit(&self.docker, &self.id, &self.labels).await
    }
}

impl Drop for DockerExecutor {
    /// Panic path: removes the container from a thread with its own
    /// runtime, so it works even while the caller's runtime shuts down.
    fn drop(&mut self) {
        if self.removed.load(Ordering::SeqCst) {
            return;
        }
        // A disk is left mounted: it holds the work, and `runner gc` (or the
        // next start) copies it back. The copy-mode volume is anonymous and
        // goes with the container.
        let id = self.id.clone();
        client::cleanup_on_drop(
            "runner-docker-cleanup",
            format!("container {}", short(&id)),
            move |d| async move { container::remove(&d, &id).await },
        );
    }
}
