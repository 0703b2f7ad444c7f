//! The sandbox contract every backend implements, in the shape of Harbor's
//! `BaseEnvironment` and Inspect's sandboxes: a [`Backend`] prepares images
//! and starts sandboxes from a backend-neutral [`SandboxSpec`]; the
//! sandbox it returns is an [`Executor`]: it runs commands (timeout, output
//! cap, cancellation, kill of everything), moves directories in (never
//! following links), reports what it can do, and stops. The agent loop and
//! `runner eval` use only this; everything that names a container engine
//! lives under `exec/docker/`.
//!
//! A new backend is one folder under `exec/` implementing [`Backend`],
//! plus one line in runner's table of backends (`runtime::backends`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::seccomp::Seccomp;
use super::shell::ShellMode;
use super::{ExecError, Executor};
use crate::redact::Redactor;

/// Default image: the full one built by `sandbox/build-full.sh`.
pub const DEFAULT_IMAGE: &str = "runner-sandbox:bookworm";
/// Default CPU share of a sandbox, in CPUs.
pub const DEFAULT_CPUS: f64 = 1.0;
/// Default memory limit (no swap on top).
pub const DEFAULT_MEMORY_BYTES: i64 = 1 << 30;
/// Default maximum number of processes and threads in a sandbox.
pub const DEFAULT_PIDS_LIMIT: i64 = 256;
/// Default user of commands: the images' non-root `sandbox` user.
pub const DEFAULT_USER: &str = "1000:1000";
/// Default of what a sandbox may put on the host's disk (`--disk`).
pub const DEFAULT_DISK_BYTES: u64 = 10 << 30;
/// What a root task commonly needs of root, which a root sandbox user's
/// commands keep with [`SandboxSpec::root_caps`] (as Docker gives root):
/// owning and changing others' files, binding low ports, chroot. None of
/// them reaches runner's supervisor: no CAP_KILL, no CAP_SETUID or
/// CAP_SETGID (which would let a command take the supervisor's uid), no
/// CAP_DAC_OVERRIDE, no tracing.
pub const ROOT_TASK_CAPS: [&str; 5] = [
    "CHOWN",
    "FOWNER",
    "FSETID",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
];

/// Default longest life of a sandbox.
pub const DEFAULT_MAX_RUN_SECS: u64 = 4 * 3600;

/// The sandbox's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// No network at all (only loopback).
    #[default]
    None,
    /// The engine's default bridge: a loosening.
    Bridge,
    /// Only the names of [`SandboxSpec::allowed_hosts`], through a
    /// filtering proxy (see [`super::egress`]): a loosening.
    Allowlist,
}

/// How a host workspace reaches the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceMode {
    /// Bind for a local engine, copy for a remote one.
    #[default]
    Auto,
    /// Through the host filesystem (bounded by `--disk` when possible).
    Bind,
    /// Uploaded at start, downloaded at the end (remote engines).
    Copy,
}

/// The host workspace of a sandbox.
#[derive(Debug, Clone)]
pub struct WorkspaceSpec {
    /// The host directory.
    pub host: PathBuf,
    pub mode: WorkspaceMode,
    /// Start from exactly the host directory's content, with nothing of the
    /// image's own working directory (a verifier must not see files the
    /// agent deleted come back).
    pub exact: bool,
}

/// Everything a backend needs to start one sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// Image (or, for a backend without images, a name for the trajectory).
    pub image: String,
    pub cpus: f64,
    pub memory_bytes: i64,
    pub pids_limit: i64,
    /// What the sandbox may put on the host's disk; `None`: unbounded.
    pub disk_bytes: Option<u64>,
    pub network: Network,
    /// With [`Network::Allowlist`]: the host patterns the sandbox may
    /// reach, validated ([`super::egress::normalize_host_patterns`]).
    pub allowed_hosts: Vec<String>,
    /// With [`Network::Allowlist`]: the backend's network the proxy
    /// reaches out through; `None`: its default.
    pub egress_network: Option<String>,
    /// `uid:gid` commands run as.
    pub user: String,
    pub writable_rootfs: bool,
    pub workspace: Option<WorkspaceSpec>,
    /// Where commands start, as the sandbox sees it; `None`: the backend's
    /// default (the workspace).
    pub workdir: Option<String>,
    /// The command environment, on top of the sandbox's own.
    pub env: Vec<(String, String)>,
    /// The engine's runtime (`runsc`...); `None`: its default.
    pub runtime: Option<String>,
    /// Commands may switch to another user (the verifier runs the agent's
    /// code unprivileged): SETUID and SETGID, nothing else.
    pub switch_user: bool,
    /// A root user's commands keep [`ROOT_TASK_CAPS`] (a task's root, as
    /// Harbor's tasks expect it: `chown`, a service on port 80).
    pub root_caps: bool,
    /// Identifies the run in the backend's objects.
    pub run_id: String,
    /// Longest the sandbox may live.
    pub max_run_time: Duration,
    /// Secrets kept out of every command's output.
    pub redactor: Redactor,
    /// Leave what a command started in the background running after it
    /// exits; by default it is killed and the model is told.
    pub keep_background: bool,
    /// Whether `cd` and exported variables carry over between commands
    /// (see [`super::shell`]).
    pub shell: ShellMode,
    /// A copied workspace keeps the image's owner of the working
    /// directory (the tree uploaded as that owner's, and on a writable
    /// root the directory itself) instead of the command user's; with an
    /// `exact` copy the directory is otherwise root's. A root user without
    /// capabilities cannot then write into a directory the image gave to
    /// another user.
    pub keep_workdir_owner: bool,
    /// A task's internal service network ([`Services::network`]) to join
    /// instead of [`Network`]'s choice, with the alias `main`: the
    /// sidecars are reachable, nothing else is (the network is internal).
    pub join_network: Option<String>,
    /// The services on `join_network`, for the loosenings line.
    pub network_peers: Vec<String>,
    /// The system-call filter (`--seccomp`).
    pub seccomp: Seccomp,
}

impl SandboxSpec {
    /// A spec with runner's defaults for `image` and `run_id`.
    pub fn new(image: &str, run_id: &str) -> SandboxSpec {
        SandboxSpec {
            image: image.to_string(),
            cpus: DEFAULT_CPUS,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            pids_limit: DEFAULT_PIDS_LIMIT,
            disk_bytes: Some(DEFAULT_DISK_BYTES),
            network: Network::None,
            allowed_hosts: Vec::new(),
            egress_network: None,
            user: DEFAULT_USER.to_string(),
            writable_rootfs: false,
            workspace: None,
            workdir: None,
            env: Vec::new(),
            runtime: None,
            switch_user: false,
            root_caps: false,
            run_id: run_id.to_string(),
            max_run_time: Duration::from_secs(DEFAULT_MAX_RUN_SECS),
            redactor: Redactor::default(),
            keep_background: false,
            shell: ShellMode::Fresh,
            keep_workdir_owner: false,
            join_network: None,
            network_peers: Vec::new(),
            seccomp: Seccomp::Runner,
        }
    }

    /// Joins the task's service network of `services` (see
    /// [`SandboxSpec::join_network`]).
    pub fn join_services(&mut self, services: &dyn Services) {
        self.join_network = services.network();
        self.network_peers = services.names();
    }
}

/// The alias the main sandbox has on a task's service network, as
/// Compose names it.
pub const MAIN_SERVICE_ALIAS: &str = "main";

/// Whether `name` is a service name runner accepts: a DNS label (it is
/// the sidecar's host name on the service network), not `main`.
pub fn is_service_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name != MAIN_SERVICE_ALIAS
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Docker's healthcheck of a service (Compose's `healthcheck`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceHealthcheck {
    /// `["CMD", args...]` or `["CMD-SHELL", command]`.
    pub test: Vec<String>,
    pub interval: Duration,
    pub timeout: Duration,
    pub retries: u32,
    pub start_period: Duration,
}

/// One sidecar of a task (a database, a helper), its image ready.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSpec {
    /// The service name: its host name on the service network.
    pub name: String,
    pub image: String,
    /// Its environment (from the task's compose file, never the host's).
    pub env: Vec<(String, String)>,
    /// Replaces the image's `CMD`.
    pub command: Option<Vec<String>>,
    /// Replaces the image's `ENTRYPOINT`.
    pub entrypoint: Option<Vec<String>>,
    /// `user[:group]`; `None`: the image's.
    pub user: Option<String>,
    pub workdir: Option<String>,
    /// Waited for (healthy) before the services count as started.
    pub healthcheck: Option<ServiceHealthcheck>,
    /// Paths that get an anonymous volume of their own, removed with the
    /// service (Compose's named volumes of one service).
    pub volumes: Vec<String>,
    /// Root filesystem read-only (Compose's `read_only`).
    pub read_only: bool,
    /// An init process of the engine's as PID 1 (Compose's `init`).
    pub init: bool,
}

/// Everything a backend needs to start a task's sidecars, in start order.
#[derive(Debug, Clone)]
pub struct ServicesSpec {
    /// Identifies the run in the backend's objects.
    pub run_id: String,
    pub services: Vec<ServiceSpec>,
    /// Limits of EACH sidecar, as of the main sandbox.
    pub cpus: f64,
    pub memory_bytes: i64,
    pub pids_limit: i64,
    /// The engine's runtime (`runsc`...); `None`: its default.
    pub runtime: Option<String>,
    /// Longest the services may live.
    pub max_run_time: Duration,
    /// Secrets kept out of what the services print into error messages.
    pub redactor: Redactor,
    /// Longest one service may take to become healthy.
    pub health_timeout: Duration,
    /// The system-call filter, as of the main sandbox.
    pub seccomp: Seccomp,
}

impl ServicesSpec {
    /// A spec with runner's default limits.
    pub fn new(run_id: &str, services: Vec<ServiceSpec>) -> ServicesSpec {
        ServicesSpec {
            run_id: run_id.to_string(),
            services,
            cpus: DEFAULT_CPUS,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            pids_limit: DEFAULT_PIDS_LIMIT,
            runtime: None,
            max_run_time: Duration::from_secs(DEFAULT_MAX_RUN_SECS),
            redactor: Redactor::default(),
            health_timeout: Duration::from_secs(DEFAULT_HEALTH_TIMEOUT_SECS),
            seccomp: Seccomp::Runner,
        }
    }
}

/// Default longest wait for one service's healthcheck to pass.
pub const DEFAULT_HEALTH_TIMEOUT_SECS: u64 = 120;

/// A task's running sidecars and the network they share with the main
/// sandbox. [`Services::stop`] removes them; dropping without it removes
/// them too (from a thread of its own), and what a killed runner left is
/// removed by the next [`Backend::collect_garbage`].
#[async_trait]
pub trait Services: Send + Sync {
    /// The network the main sandbox joins ([`SandboxSpec::join_network`]).
    fn network(&self) -> Option<String>;
    /// The services' names, in start order.
    fn names(&self) -> Vec<String>;
    /// Removes every service and the network. Idempotent.
    async fn stop(&self) -> Result<(), ExecError>;
}

/// A backend that runs a task's sidecars (docker-compose tasks).
#[async_trait]
pub trait ServiceHost: Send + Sync {
    /// Starts a task's sidecars on a network of their own (see
    /// [`Services`]); their images must be ready
    /// ([`Backend::prepare_image`]).
    async fn start_services(&self, spec: ServicesSpec) -> Result<Arc<dyn Services>, ExecError>;
}

/// Where an image comes from.
#[derive(Debug, Clone)]
pub enum ImageSource<'a> {
    /// An image by reference, pulled when missing and a registry answers.
    Named(&'a str),
    /// Built from a directory holding a Dockerfile.
    Build {
        context: &'a Path,
        /// Longest the build may take.
        timeout: Duration,
        /// Recorded on the image (a task's name).
        label: &'a str,
        /// Where the build's whole output goes, when wanted (the eval
        /// output directory's `<task>/image-build.log`).
        log: Option<&'a Path>,
    },
}

/// What a backend can do, checked against a task's needs before anything
/// starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Capabilities {
    /// Short name ("docker", "local").
    pub name: &'static str,
    /// Whether commands are isolated from the host at all.
    pub isolated: bool,
    /// Network modes it can give.
    pub networks: Vec<Network>,
    /// Whether it builds and runs images.
    pub images: bool,
}

/// What seeding a workspace from an image found.
#[derive(Debug, Clone, PartialEq)]
pub struct Seeded {
    /// The image's working directory (where commands start).
    pub workdir: String,
    /// Entries refused (links out, devices...).
    pub skipped: usize,
    /// The user the image runs as (its `Config.User`, as written there:
    /// `name`, `uid`, `name:group`, `uid:gid`); `None` when unset.
    pub image_user: Option<String>,
    /// The image's `/etc/passwd` (see [`crate::exec::accounts`]); `None`
    /// when it is missing, a link (never followed), not a regular file or
    /// larger than [`MAX_ACCOUNTS_FILE_BYTES`].
    pub passwd: Option<String>,
    /// The image's `/etc/group`, on the same terms.
    pub group: Option<String>,
}

/// Largest `/etc/passwd` or `/etc/group` read out of an image.
pub const MAX_ACCOUNTS_FILE_BYTES: u64 = 1 << 20;

/// What a garbage sweep did (`runner gc`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cleanup {
    /// What was removed or given back, one line each
    /// ("removed container 1a2b...").
    pub done: Vec<String>,
    /// One line per object that should have gone but did not.
    pub errors: Vec<String>,
    /// A one-line total, when there is anything to sweep at all.
    pub summary: Option<String>,
}

/// A kind of sandbox.
#[async_trait]
pub trait Backend: Send + Sync {
    /// What it can do.
    fn capabilities(&self) -> Capabilities;

    /// Every way a sandbox started from `spec` would be weaker than the
    /// default one, one line each. Known before the start, so a run whose
    /// sandbox did not start still records them.
    fn loosenings(&self, _spec: &SandboxSpec) -> Vec<String> {
        Vec::new()
    }

    /// Whether it answers right now. A retry after an infrastructure
    /// error waits for it (an engine restarting); a backend that is always
    /// there answers at once.
    async fn answers(&self) -> bool {
        true
    }

    /// Removes what runs whose runner is gone (or whose time is up) left
    /// behind, and gives their work back.
    async fn collect_garbage(&self) -> Result<Cleanup, ExecError> {
        Ok(Cleanup::default())
    }

    /// Makes `source` available; returns the reference to start from.
    async fn prepare_image(&self, source: ImageSource<'_>) -> Result<String, ExecError>;

    /// What `image` names right now (for an engine: the image id), so that
    /// a reference moved to other content (a tag rebuilt) is told apart
    /// from the one seen before; `None` when the backend cannot say.
    /// `runner eval` seeds once per identity.
    async fn image_identity(&self, _image: &str) -> Result<Option<String>, ExecError> {
        Ok(None)
    }

    /// Removes an image this backend made for a run (a sandbox's
    /// [`crate::exec::Snapshots::snapshot`]); one already gone counts as removed. A
    /// backend without images has nothing to remove.
    async fn remove_image(&self, _image: &str) -> Result<(), ExecError> {
        Ok(())
    }

    /// Copies the image's directory `dir` (a task's own `workdir`), or
    /// its WORKDIR when `None` (a task's start state), into the empty host
    /// directory `host`; the result's `workdir` is the one copied. A
    /// backend without images leaves `host` as it is.
    async fn seed(
        &self,
        image: &str,
        dir: Option<&str>,
        host: &Path,
        run_id: &str,
    ) -> Result<Seeded, ExecError>;

    /// Starts one sandbox.
    async fn start(&self, spec: SandboxSpec) -> Result<Arc<dyn Executor>, ExecError>;

    /// Its sidecar services, when it can run a task's ([`ServiceHost`]).
    fn service_host(&self) -> Option<&dyn ServiceHost> {
        None
    }

    /// The runtime sandboxes will use for `requested` (the backend's
    /// default when `None`), refusing one it does not have; `Ok(None)` when
    /// the backend cannot say now (each start then reports its own error).
    async fn check_runtime(&self, requested: Option<&str>) -> Result<Option<String>, ExecError> {
        Ok(requested.map(str::to_string))
    }
}
