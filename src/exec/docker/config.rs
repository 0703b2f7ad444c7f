//! What the caller chooses about the sandbox, its defaults, and the checks
//! that refuse configurations which would hand the host to the sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::exec::ExecError;
pub use crate::exec::backend::{
    DEFAULT_CPUS, DEFAULT_DISK_BYTES, DEFAULT_IMAGE, DEFAULT_MAX_RUN_SECS, DEFAULT_MEMORY_BYTES,
    DEFAULT_PIDS_LIMIT, DEFAULT_USER,
};
use crate::redact::Redactor;

/// Size of the writable /tmp tmpfs when the root filesystem is read-only.
pub const DEFAULT_TMP_SIZE_BYTES: u64 = 64 << 20;
/// Size of the writable /run tmpfs when the root filesystem is read-only.
pub const DEFAULT_RUN_SIZE_BYTES: u64 = 16 << 20;
/// HOME of commands in the container: a small tmpfs owned by the command
/// user, so `git config --global`, `pip install --user` and `~/.cache` work
/// on a read-only root. The host's HOME means nothing in the container.
pub const SANDBOX_HOME: &str = "/home/sandbox";
/// Size of the HOME tmpfs.
pub const DEFAULT_HOME_SIZE_BYTES: u64 = 16 << 20;
/// Default open files limit (soft = hard).
pub const DEFAULT_NOFILE: i64 = 1024;
/// Default largest file a command may write.
pub const DEFAULT_FSIZE_BYTES: i64 = 1 << 30;
/// Added to the maximum run time before a container counts as expired.
pub const EXPIRY_MARGIN_SECS: u64 = 600;
/// Where the workspace appears inside the container.
pub const CONTAINER_WORKDIR: &str = "/workspace";

/// How the workspace reaches the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceMode {
    /// Bind-mount the host directory (the engine must be on this host).
    Bind,
    /// Upload a tar at start, download it back at shutdown (remote engines).
    Copy,
    /// Copy when DOCKER_HOST points to another machine (tcp://, ssh://),
    /// bind otherwise.
    #[default]
    Auto,
}

/// Resource limits applied through ulimits.
#[derive(Debug, Clone, PartialEq)]
pub struct Ulimits {
    /// Open files (soft = hard).
    pub nofile: i64,
    /// Largest file size in bytes.
    pub fsize_bytes: i64,
    /// Core dump size in bytes (0: none).
    pub core_bytes: i64,
}

impl Default for Ulimits {
    fn default() -> Self {
        Ulimits {
            nofile: DEFAULT_NOFILE,
            fsize_bytes: DEFAULT_FSIZE_BYTES,
            core_bytes: 0,
        }
    }
}

/// Everything the docker executor needs to start a run's container.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// Image to run (pulled if missing locally and a registry is reachable).
    pub image: String,
    /// `None` means no network at all; `Some("bridge")` is a loosening.
    pub network: Option<String>,
    /// CPU share, in CPUs.
    pub cpus: f64,
    /// Memory limit in bytes; swap is set equal so nothing swaps.
    pub memory_bytes: i64,
    /// Maximum processes and threads.
    pub pids_limit: i64,
    /// `uid:gid` commands run as; root is a loosening.
    pub user: String,
    /// Writable root filesystem (a loosening); otherwise read-only with
    /// small tmpfs mounts on /tmp and /run.
    pub writable_rootfs: bool,
    /// Size of the /tmp tmpfs when the root is read-only.
    pub tmp_size_bytes: u64,
    /// Host directory that becomes /workspace; `None` leaves the image's.
    pub workspace: Option<PathBuf>,
    /// How the workspace reaches the container.
    pub workspace_mode: WorkspaceMode,
    /// Most bytes the workspace may hold (`--disk`): a bind workspace is
    /// copied into a filesystem of this size ([`crate::exec::disk`]) and a
    /// copy-mode workspace is refused back past it. `None`: unbounded (a
    /// loosening; the workspace is then bind-mounted as it is).
    pub disk_bytes: Option<u64>,
    /// Absolute path of the workspace inside the container, where commands
    /// start (an eval task's image `WORKDIR`); default /workspace.
    pub workdir: String,
    /// Capabilities given back after dropping all (a loosening); the eval
    /// verifier takes SETUID and SETGID so its tests can run the agent's
    /// code as an unprivileged user.
    pub cap_add: Vec<String>,
    /// What commands inherit from the calls before (see `exec::shell`).
    pub shell: crate::exec::shell::ShellMode,
    /// Copy mode only: start the volume empty instead of filled with the
    /// image's /workspace, so the container sees exactly the uploaded tree
    /// (a verifier must not see files the agent deleted come back).
    pub volume_no_copy: bool,
    /// The only environment commands get (on top of the image's); the
    /// runner's own environment is never inherited. It is passed with each
    /// command's exec, never in the container's configuration, so `docker
    /// inspect` does not show it. HOME is [`SANDBOX_HOME`] unless set here.
    pub env: Vec<(String, String)>,
    /// Secrets to redact from every command's output while it streams.
    pub redactor: Redactor,
    /// Identifies the run in labels and container names.
    pub run_id: String,
    /// Extra labels (the `runner.*` ones are always set and win).
    pub labels: Vec<(String, String)>,
    /// ulimits for every process in the container.
    pub ulimits: Ulimits,
    /// Longest the run may last; sets the container's expiry.
    pub max_run_time: Duration,
    /// The engine's container runtime (`runsc` for gVisor, `crun`...);
    /// `None` uses the engine's default. Checked against the registered
    /// runtimes before the container is made.
    pub runtime: Option<String>,
    /// Leave what a command started in the background running after it
    /// exits; by default it is killed and the model is told.
    pub keep_background: bool,
    /// Copy mode only: the uploaded workspace gets the image's owner of
    /// `workdir` (see [`crate::exec::backend::SandboxSpec`]).
    pub keep_workdir_owner: bool,
    /// A task's internal service network to join (alias `main`) instead of
    /// `network`; see `services`.
    pub join_network: Option<String>,
    /// The sidecars on `join_network`, for the loosenings line.
    pub network_peers: Vec<String>,
    /// An egress allowlist: the sandbox sits on an internal network whose
    /// only way out is a filtering proxy (see `egress`); `network` is then
    /// `None`.
    pub egress: Option<super::egress::EgressSpec>,
    /// The seccomp filter of this container and of every one started
    /// beside it (sidecars, the egress proxy).
    pub seccomp: crate::exec::seccomp::Seccomp,
}

impl Default for DockerConfig {
    fn default() -> Self {
        DockerConfig {
            image: DEFAULT_IMAGE.to_string(),
            network: None,
            cpus: DEFAULT_CPUS,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            pids_limit: DEFAULT_PIDS_LIMIT,
            user: DEFAULT_USER.to_string(),
            writable_rootfs: false,
            tmp_size_bytes: DEFAULT_TMP_SIZE_BYTES,
            workspace: None,
            workspace_mode: WorkspaceMode::Auto,
            disk_bytes: Some(DEFAULT_DISK_BYTES),
            workdir: CONTAINER_WORKDIR.to_string(),
            cap_add: Vec::new(),
            shell: crate::exec::shell::ShellMode::Fresh,
            volume_no_copy: false,
            env: Vec::new(),
            redactor: Redactor::default(),
            run_id: "run".to_string(),
            labels: Vec::new(),
            ulimits: Ulimits::default(),
            max_run_time: Duration::from_secs(DEFAULT_MAX_RUN_SECS),
            runtime: None,
            keep_background: false,
            keep_workdir_owner: false,
            join_network: None,
            network_peers: Vec::new(),
            egress: None,
            seccomp: crate::exec::seccomp::Seccomp::Runner,
        }
    }
}

impl DockerConfig {
    /// Every way this configuration is weaker than the default sandbox,
    /// one line each, for the trajectory.
    pub fn loosenings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(net) = self.network.as_deref().filter(|n| *n != "none") {
            out.push(format!(
                "network '{net}' enabled: the sandbox can reach other hosts"
            ));
        }
        if let Some(e) = &self.egress {
            out.push(format!(
                "egress allowlist: only {} through a filtering proxy (via network '{}')",
                if e.hosts.is_empty() {
                    "nothing".to_string()
                } else {
                    e.hosts.join(", ")
                },
                e.via()
            ));
        }
        if let Some(net) = &self.join_network {
            out.push(format!(
                "joined the task's internal service network {net} (sidecars: {})",
                self.network_peers.join(", ")
            ));
        }
        if self.writable_rootfs {
            out.push("root filesystem writable".to_string());
        }
        if !self.cap_add.is_empty() {
            out.push(format!("capabilities added: {}", self.cap_add.join(", ")));
        }
        if user_is_root(&self.user) {
            out.push(format!("commands run as root ('{}')", self.user));
        }
        out.extend(self.seccomp.loosening());
        if self.disk_bytes.is_none() && self.workspace.is_some() {
            out.push("workspace size not bounded (--disk unlimited)".to_string());
        }
        out
    }

    /// Whether the workspace is copied rather than bind-mounted, resolving
    /// `Auto` from DOCKER_HOST.
    pub fn copy_mode(&self, docker_host: Option<&str>) -> bool {
        match self.workspace_mode {
            WorkspaceMode::Bind => false,
            WorkspaceMode::Copy => true,
            WorkspaceMode::Auto => docker_host
                .map(|h| h.starts_with("tcp://") || h.starts_with("ssh://"))
                .unwrap_or(false),
        }
    }

    /// Checks values that Docker would accept but that break the sandbox.
    pub fn validate(&self, docker_host: Option<&str>) -> Result<(), ExecError> {
        if self.image.trim().is_empty() {
            return Err(ExecError::Refused("no image given".into()));
        }
        if !(self.cpus > 0.0 && self.cpus.is_finite()) {
            return Err(ExecError::Refused(format!(
                "cpus must be > 0, got {}",
                self.cpus
            )));
        }
        if self.memory_bytes < (6 << 20) {
            return Err(ExecError::Refused(format!(
                "memory limit {} bytes is below Docker's minimum of 6 MiB",
                self.memory_bytes
            )));
        }
        let wd = Path::new(&self.workdir);
        if !wd.is_absolute()
            || wd.parent().is_none()
            || wd
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(ExecError::Refused(format!(
                "workdir '{}' must be an absolute path below /",
                self.workdir
            )));
        }
        if let Some(rt) = self.runtime.as_deref()
            && (rt.is_empty()
                || !rt
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
        {
            return Err(ExecError::Refused(format!(
                "runtime name '{rt}' is not a plain name (letters, digits, '-', '_', '.')"
            )));
        }
        if self.pids_limit <= 0 {
            return Err(ExecError::Refused("pids_limit must be positive".into()));
        }
        if let Some(net) = self.network.as_deref()
            && (net == "host" || net.starts_with("container:"))
        {
            return Err(ExecError::Refused(format!(
                "network '{net}' shares a namespace with the host or another container"
            )));
        }
        if let Some(net) = self.join_network.as_deref()
            && !is_plain_name(net)
        {
            return Err(ExecError::Refused(format!(
                "service network name '{net}' is not a plain name"
            )));
        }
        if let Some(e) = &self.egress {
            if self.network.is_some() {
                return Err(ExecError::Refused(
                    "an egress allowlist and a network of its own exclude each other".into(),
                ));
            }
            if let Some(via) = e.via.as_deref()
                && via != "bridge"
                && !is_plain_name(via)
            {
                return Err(ExecError::Refused(format!(
                    "egress network name '{via}' is not a plain name"
                )));
            }
            // The patterns become the proxy's rules: checked again here,
            // whoever built the configuration.
            for h in &e.hosts {
                crate::exec::egress::normalize_host_pattern(h)
                    .map_err(|err| ExecError::Refused(err.to_string()))?;
            }
        }
        for (k, _) in &self.env {
            if k.is_empty() || k.contains('=') {
                return Err(ExecError::Refused(format!(
                    "invalid environment name '{k}'"
                )));
            }
        }
        if let Some(ws) = &self.workspace {
            check_workspace(ws, docker_host)?;
        }
        Ok(())
    }
}

/// Whether `name` is a plain engine object name (letters, digits, `-`,
/// `_`, `.`), so it cannot mean `host` or `container:ID`.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "host"
        && name != "none"
        && name != "bridge"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// True when a `user` string names uid 0 (or `root`, or is empty, which
/// means the image's default, usually root).
pub fn user_is_root(user: &str) -> bool {
    let name = user.split(':').next().unwrap_or("");
    name.is_empty() || name == "0" || name == "root"
}

/// Parses `uid:gid` (numeric); `None` for names, which we cannot chown to.
pub fn numeric_user(user: &str) -> Option<(u32, u32)> {
    let (u, g) = user.split_once(':').unwrap_or((user, user));
    Some((u.parse().ok()?, g.parse().ok()?))
}

/// Refuses a workspace that is a system directory, or that contains the
/// Docker socket (mounting it would give the sandbox the whole host).
fn check_workspace(ws: &Path, docker_host: Option<&str>) -> Result<(), ExecError> {
    let canon = ws.canonicalize().map_err(|e| {
        ExecError::Refused(format!("workspace {} is not usable: {e}", ws.display()))
    })?;
    if !canon.is_dir() {
        return Err(ExecError::Refused(format!(
            "workspace {} is not a directory",
            ws.display()
        )));
    }
    if let Some(why) = crate::workspace::refusal(&canon, &[]) {
        return Err(ExecError::Refused(format!("workspace {why}")));
    }
    let mut sockets: Vec<PathBuf> = vec!["/var/run/docker.sock".into(), "/run/docker.sock".into()];
    if let Some(p) = docker_host.and_then(|h| h.strip_prefix("unix://")) {
        sockets.push(p.into());
    }
    for sock in sockets {
        // Compare both the literal and the resolved path: /var/run is
        // usually a link to /run.
        let resolved = sock.canonicalize().unwrap_or_else(|_| sock.clone());
        for s in [&sock, &resolved] {
            if s.starts_with(&canon) {
                return Err(ExecError::Refused(format!(
                    "workspace {} contains the Docker socket {}",
                    canon.display(),
                    s.display()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_socket_parents_and_root() {
        for p in ["/", "/var", "/run", "/var/run", "/etc"] {
            let err = check_workspace(Path::new(p), None).unwrap_err();
            assert!(matches!(err, ExecError::Refused(_)), "{p}");
        }
        let tmp = tempfile::tempdir().unwrap();
        check_workspace(tmp.path(), None).unwrap();
        let host = format!("unix://{}/d.sock", tmp.path().display());
        assert!(check_workspace(tmp.path(), Some(&host)).is_err());
    }

    #[test]
    fn loosenings_listed() {
        assert!(DockerConfig::default().loosenings().is_empty());
        let c = DockerConfig {
            network: Some("bridge".into()),
            writable_rootfs: true,
            user: "0:0".into(),
            ..Default::default()
        };
        assert_eq!(c.loosenings().len(), 3);
    }

    #[test]
    fn auto_mode_follows_docker_host() {
        let c = DockerConfig::default();
        assert!(c.copy_mode(Some("tcp://127.0.0.1:2375")));
        assert!(!c.copy_mode(Some("unix:///var/run/docker.sock")));
        assert!(!c.copy_mode(None));
        assert_eq!(numeric_user("1000:1000"), Some((1000, 1000)));
        assert!(user_is_root("root") && user_is_root("0:0") && !user_is_root("1000"));
    }
}
