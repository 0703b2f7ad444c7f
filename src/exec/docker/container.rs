//! The run's container: its hardened spec, labels, creation and removal.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, MountVolumeOptions, ResourcesUlimits,
};
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};

use super::client::{CALL_TIMEOUT, call, short, status_of};
use super::config::{
    DEFAULT_HOME_SIZE_BYTES, DEFAULT_RUN_SIZE_BYTES, DockerConfig, EXPIRY_MARGIN_SECS,
    SANDBOX_HOME, numeric_user,
};
use crate::exec::ExecError;

/// Label marking every object the runner creates.
pub const LABEL_MANAGED: &str = "runner.managed-by";
/// Value of `LABEL_MANAGED`.
pub const MANAGED_VALUE: &str = "runner";
/// Label: the run id.
pub const LABEL_RUN_ID: &str = "runner.run-id";
/// Label: pid of the runner process that owns the object.
pub const LABEL_OWNER_PID: &str = "runner.owner-pid";
/// Label: start time (clock ticks since boot) of the owner, to detect pid reuse.
pub const LABEL_OWNER_START: &str = "runner.owner-start";
/// Label: host name of the owner; pids mean nothing on another host.
pub const LABEL_OWNER_HOST: &str = "runner.owner-host";
/// Label: creation time, unix seconds.
pub const LABEL_CREATED: &str = "runner.created";
/// Label: time after which gc removes the object, unix seconds.
pub const LABEL_EXPIRES: &str = "runner.expires";

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// This host's name, as the kernel knows it.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Start time of a process in clock ticks since boot (field 22 of
/// /proc/PID/stat), or `None` if it does not exist.
pub fn process_start(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it are
    // counted from the closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19).map(str::to_string)
}

/// The labels every runner object carries.
pub fn labels(cfg: &DockerConfig) -> HashMap<String, String> {
    let created = now_secs();
    let expires = created + cfg.max_run_time.as_secs() + EXPIRY_MARGIN_SECS;
    let pid = std::process::id();
    let mut l: HashMap<String, String> = cfg.labels.iter().cloned().collect();
    l.insert(LABEL_MANAGED.into(), MANAGED_VALUE.into());
    l.insert(LABEL_RUN_ID.into(), cfg.run_id.clone());
    l.insert(LABEL_OWNER_PID.into(), pid.to_string());
    l.insert(
        LABEL_OWNER_START.into(),
        process_start(pid).unwrap_or_default(),
    );
    l.insert(LABEL_OWNER_HOST.into(), host_name());
    l.insert(LABEL_CREATED.into(), created.to_string());
    l.insert(LABEL_EXPIRES.into(), expires.to_string());
    l
}

/// How the workspace is attached to the container.
pub enum WorkspaceMount<'a> {
    /// Nothing: the image's own /workspace.
    None,
    /// Bind-mount this host directory.
    Bind(&'a str),
    /// Mount this (runner-labelled) named volume.
    Volume(&'a str),
}

/// Builds the hardened container spec. The main process is an idle `sleep`
/// under Docker's init, running as root without capabilities: commands run
/// as `cfg.user` through exec, so they cannot signal it (signalling another
/// uid needs CAP_KILL), and the kill protocol's `kill -9 -1` spares it.
/// `user` is who commands run as (it owns the HOME tmpfs).
pub fn spec(cfg: &DockerConfig, user: &str, mount: &WorkspaceMount<'_>) -> ContainerCreateBody {
    let mut tmpfs = HashMap::new();
    // Exec allowed like /workspace, so `pip install --user` scripts in
    // ~/.local/bin run.
    let owner = match numeric_user(user) {
        Some((uid, gid)) => format!("uid={uid},gid={gid},mode=700"),
        // A user name we cannot resolve here: any uid may write, sticky.
        None => "mode=1777".to_string(),
    };
    tmpfs.insert(
        SANDBOX_HOME.to_string(),
        format!("rw,nosuid,nodev,exec,size={DEFAULT_HOME_SIZE_BYTES},{owner}"),
    );
    if !cfg.writable_rootfs {
        tmpfs.insert(
            "/tmp".to_string(),
            format!("rw,nosuid,nodev,size={},mode=1777", cfg.tmp_size_bytes),
        );
        tmpfs.insert(
            "/run".to_string(),
            format!("rw,nosuid,nodev,noexec,size={DEFAULT_RUN_SIZE_BYTES},mode=755"),
        );
    }
    let mounts = match mount {
        WorkspaceMount::None => None,
        WorkspaceMount::Bind(src) => Some(vec![Mount {
            target: Some(cfg.workdir.clone()),
            source: Some((*src).into()),
            typ: Some(MountType::BIND),
            read_only: Some(false),
            ..Default::default()
        }]),
        WorkspaceMount::Volume(name) => Some(vec![Mount {
            target: Some(cfg.workdir.clone()),
            source: Some((*name).into()),
            typ: Some(MountType::VOLUME),
            read_only: Some(false),
            volume_options: cfg.volume_no_copy.then(|| MountVolumeOptions {
                no_copy: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }]),
    };
    let ulimit = |name: &str, v: i64| ResourcesUlimits {
        name: Some(name.into()),
        soft: Some(v),
        hard: Some(v),
    };
    let host_config = HostConfig {
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: (!cfg.cap_add.is_empty()).then(|| cfg.cap_add.clone()),
        // Only adds no-new-privileges; Docker's default seccomp and
        // AppArmor profiles stay because they are not overridden here.
        security_opt: Some(vec!["no-new-privileges:true".into()]),
        privileged: Some(false),
        readonly_rootfs: Some(!cfg.writable_rootfs),
        tmpfs: (!tmpfs.is_empty()).then_some(tmpfs),
        network_mode: Some(cfg.network.clone().unwrap_or_else(|| "none".into())),
        memory: Some(cfg.memory_bytes),
        memory_swap: Some(cfg.memory_bytes),
        nano_cpus: Some((cfg.cpus * 1e9) as i64),
        pids_limit: Some(cfg.pids_limit),
        ulimits: Some(vec![
            ulimit("nofile", cfg.ulimits.nofile),
            ulimit("fsize", cfg.ulimits.fsize_bytes),
            ulimit("core", cfg.ulimits.core_bytes),
        ]),
        init: Some(true),
        mounts,
        ..Default::default()
    };
    // The idle process ends by itself at expiry, so a container orphaned by
    // a killed runner stops even if nobody runs gc.
    let idle_secs = cfg.max_run_time.as_secs() + EXPIRY_MARGIN_SECS;
    ContainerCreateBody {
        image: Some(cfg.image.clone()),
        entrypoint: Some(vec!["sleep".into()]),
        cmd: Some(vec![idle_secs.to_string()]),
        user: Some("0:0".into()),
        working_dir: Some(cfg.workdir.clone()),
        // Only HOME: the command environment (`cfg.env`, which may hold
        // credentials) goes with each exec, where `docker inspect` of the
        // container does not show it.
        env: Some(vec![format!("HOME={SANDBOX_HOME}")]),
        labels: Some(labels(cfg)),
        network_disabled: Some(cfg.network.is_none()),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// The environment of each command's exec: `env` in order (a HOME in it
/// overrides the container's).
pub fn exec_env(env: &[(String, String)]) -> Vec<String> {
    env.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Container names must be unique; the run id plus randomness is.
pub fn container_name(run_id: &str) -> String {
    let clean: String = run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!("runner-{clean}-{:08x}", fastrand::u32(..))
}

/// Creates and starts the container; removes it again if start fails.
pub async fn create_and_start(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
) -> Result<String, ExecError> {
    let opts = CreateContainerOptionsBuilder::new().name(name).build();
    let created = call(
        "create container",
        name,
        CALL_TIMEOUT,
        docker.create_container(Some(opts), body),
    )
    .await?;
    let id = created.id;
    if let Err(e) = call(
        "start container",
        short(&id),
        CALL_TIMEOUT,
        docker.start_container(&id, None),
    )
    .await
    {
        let _ = remove(docker, &id).await;
        return Err(e);
    }
    Ok(id)
}

/// Force-removes a container with its anonymous volumes; a container that
/// is already gone counts as removed.
pub async fn remove(docker: &Docker, id: &str) -> Result<(), ExecError> {
    let opts = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match tokio::time::timeout(CALL_TIMEOUT, docker.remove_container(id, Some(opts))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if status_of(&e) == Some(404) => Ok(()),
        // 409: removal already in progress (for example by gc).
        Ok(Err(e)) if status_of(&e) == Some(409) => Ok(()),
        Ok(Err(e)) => Err(super::client::docker_err("remove container", short(id), &e)),
        Err(_) => Err(ExecError::DockerTimeout {
            op: "remove container",
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}

/// Why a container is no longer running, or `None` if it still is.
pub async fn death_reason(docker: &Docker, id: &str) -> Result<Option<String>, ExecError> {
    let info = match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_container(id, None)).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) if status_of(&e) == Some(404) => {
            return Ok(Some(format!("container {} was removed", short(id))));
        }
        Ok(Err(e)) => {
            return Err(super::client::docker_err(
                "inspect container",
                short(id),
                &e,
            ));
        }
        Err(_) => {
            return Err(ExecError::DockerTimeout {
                op: "inspect container",
                secs: CALL_TIMEOUT.as_secs(),
            });
        }
    };
    let state = info.state.unwrap_or_default();
    if state.running == Some(true) && state.paused != Some(true) {
        return Ok(None);
    }
    let mut why = format!(
        "container {} is no longer running (exit code {})",
        short(id),
        state.exit_code.unwrap_or(-1)
    );
    if state.oom_killed == Some(true) {
        why.push_str(", killed by the memory limit");
    }
    if let Some(err) = state.error.filter(|e| !e.is_empty()) {
        why.push_str(&format!(": {err}"));
    }
    Ok(Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_a_tmpfs_owned_by_the_command_user_and_env_stays_out_of_the_spec() {
        let cfg = DockerConfig {
            env: vec![
                ("LANG".into(), "C.UTF-8".into()),
                ("DEPLOY_TOKEN".into(), "dt-secret".into()),
            ],
            ..Default::default()
        };
        let body = spec(&cfg, "1234:5678", &WorkspaceMount::None);
        let env = body.env.unwrap_or_default();
        assert_eq!(env, [format!("HOME={SANDBOX_HOME}")]);
        let tmpfs = body.host_config.and_then(|h| h.tmpfs).unwrap_or_default();
        let home = tmpfs.get(SANDBOX_HOME).cloned().unwrap_or_default();
        assert!(home.contains("uid=1234,gid=5678,mode=700"), "{home}");
        assert_eq!(
            exec_env(&cfg.env),
            ["LANG=C.UTF-8".to_string(), "DEPLOY_TOKEN=dt-secret".into()]
        );
    }
}
