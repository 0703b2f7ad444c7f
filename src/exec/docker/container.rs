//! The run's container: its hardened spec, labels, creation and removal.

use super::client::ENGINE;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, HostConfigLogConfig, Mount, MountType,
    MountVolumeOptions, NetworkingConfig, ResourcesUlimits,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};

use super::client::{CALL_TIMEOUT, call, short, status_of};
use super::config::{
    DEFAULT_HOME_SIZE_BYTES, DEFAULT_RUN_SIZE_BYTES, DockerConfig, EXPIRY_MARGIN_SECS, SANDBOX_HOME,
};
use super::engine::Kernel;
use super::lifeline::{Ending, Lifeline};
use crate::exec::ExecError;
use crate::exec::backend::MAIN_SERVICE_ALIAS;
use crate::exec::supervisor::binary::{
    DIR_IN_SANDBOX as SUPERVISOR_DIR, IN_SANDBOX as SUPERVISOR_IN_SANDBOX,
};

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

/// The labels every runner object carries.
pub fn labels(cfg: &DockerConfig) -> HashMap<String, String> {
    let created = now_secs();
    // Saturating: --max-time is the user's number, and may be huge.
    let expires = created
        .saturating_add(cfg.max_run_time.as_secs())
        .saturating_add(EXPIRY_MARGIN_SECS);
    let pid = std::process::id();
    let mut l: HashMap<String, String> = cfg.labels.iter().cloned().collect();
    l.insert(LABEL_MANAGED.into(), MANAGED_VALUE.into());
    l.insert(LABEL_RUN_ID.into(), cfg.run_id.clone());
    l.insert(LABEL_OWNER_PID.into(), pid.to_string());
    l.insert(
        LABEL_OWNER_START.into(),
        crate::exec::liveness::process_start(pid).unwrap_or_default(),
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
    /// A runner-labelled anonymous volume, removed with the container (so
    /// also when the engine auto-removes it after runner died).
    Volume,
}

/// Host pids per sandboxed task under gVisor's ptrace platform: each task
/// costs a stub process plus sentry threads on the host (8 were measured
/// per sleeping task, up to 15 per task of a running fork bomb).
const GVISOR_HOST_PIDS_PER_TASK: i64 = 20;
/// Host pids of gVisor's sentry and gofer themselves (54 were measured idle).
const GVISOR_SENTRY_PIDS: i64 = 256;

/// Tasks of the command user that only runner's control execs may use
/// under gVisor: commands are held to `pids_limit` (see
/// [`command_nproc`]), the container's RLIMIT_NPROC is this much higher,
/// so the kill protocol's exec still starts when a fork bomb is at the limit.
const GVISOR_NPROC_CONTROL_HEADROOM: i64 = 16;

/// The RLIMIT_NPROC each command lowers itself to before it starts, when
/// the kernel counts it per sandbox (gVisor); `None` with the host's
/// kernel, whose pids cgroup does that job.
pub fn command_nproc(cfg: &DockerConfig, kernel: Kernel) -> Option<i64> {
    (kernel == Kernel::Gvisor).then_some(cfg.pids_limit)
}

/// The pids limit of the container's host cgroup. With the host's kernel
/// it counts the sandbox's own processes. Under gVisor it counts the
/// sentry's host threads, and reaching it kills the whole sandbox (the Go
/// runtime cannot make a thread), so it is sized to stay out of reach and
/// the sandbox's task count is bounded inside gVisor by RLIMIT_NPROC
/// instead (see [`spec`]).
pub fn host_pids_limit(cfg: &DockerConfig, kernel: Kernel) -> i64 {
    match kernel {
        Kernel::Host => cfg.pids_limit,
        Kernel::Gvisor => cfg
            .pids_limit
            .saturating_mul(GVISOR_HOST_PIDS_PER_TASK)
            .saturating_add(GVISOR_SENTRY_PIDS),
    }
}

/// The capabilities the supervisor needs (and only it keeps: commands get
/// none, see `sandbox/supervisor`): to kill every command process, to
/// switch to the sandbox user, and to empty the commands' bounding set;
/// and root's file capabilities, which it only lends a verifier's last
/// command (`Users::execute_final`). All under the ceiling
/// (`hardening::CAPABILITY_CEILING`): no DAC_READ_SEARCH, whose
/// `open_by_handle_at` leaves any bind mount (DAC_OVERRIDE already lets a
/// root verifier read every file; Harbor's root verifier runs without it).
pub(super) const SUPERVISOR_CAPS: [&str; 8] = [
    "KILL",
    "SETUID",
    "SETGID",
    "SETPCAP",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
];

/// The supervisor's command line: who commands run as, when the sandbox
/// expires, and the capabilities commands keep (`cfg.cap_add`).
fn supervisor_args(cfg: &DockerConfig, uid: u32, gid: u32) -> Vec<String> {
    let expiry = cfg
        .max_run_time
        .as_secs()
        .saturating_add(EXPIRY_MARGIN_SECS);
    let mut args = vec![
        "--user".to_string(),
        format!("{uid}:{gid}"),
        "--expiry".to_string(),
        expiry.to_string(),
    ];
    let caps: Vec<String> = cfg
        .cap_add
        .iter()
        .filter(|c| super::hardening::allowed(c))
        .filter_map(|c| super::hardening::cap_number(c))
        .map(|n| n.to_string())
        .collect();
    if !caps.is_empty() {
        args.push("--caps".into());
        args.push(caps.join(","));
    }
    args
}

/// Builds the hardened container spec. The main process (PID 1) is the
/// supervisor, mounted read-only from `supervisor` on the host (or, with
/// `None`, uploaded into a volume of its own before the start): it starts
/// as root with [`SUPERVISOR_CAPS`] only, moves to a uid of its own and
/// runs commands as `user` (numeric `uid:gid`) with no capabilities, so
/// they can neither signal nor trace it; the kill protocol's fallback
/// `kill -9 -1` spares it too. `user` owns the HOME tmpfs; `kernel` is
/// what the runtime puts under the sandbox.
pub fn spec(
    cfg: &DockerConfig,
    user: (u32, u32),
    mount: &WorkspaceMount<'_>,
    kernel: Kernel,
    supervisor: Option<&str>,
    channel: Option<&str>,
) -> ContainerCreateBody {
    let (uid, gid) = user;
    let tmpfs = tmpfs(cfg, uid, gid);
    let mounts = mounts(cfg, mount, supervisor, channel);
    let host_config = host_config(cfg, kernel, tmpfs, mounts);
    ContainerCreateBody {
        image: Some(cfg.image.clone()),
        entrypoint: Some(vec![SUPERVISOR_IN_SANDBOX.into()]),
        cmd: Some(supervisor_cmd(cfg, uid, gid, channel)),
        open_stdin: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        stdin_once: Some(true),
        user: Some("0:0".into()),
        working_dir: Some(cfg.workdir.clone()),
        // Only HOME: the command environment (`cfg.env`, which may hold
        // credentials) goes with each exec, where `docker inspect` of the
        // container does not show it.
        env: Some(vec![format!("HOME={SANDBOX_HOME}")]),
        labels: Some(labels(cfg)),
        network_disabled: Some(cfg.network.is_none() && cfg.join_network.is_none()),
        networking_config: main_alias(cfg),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// The tmpfs mounts: HOME (owned by `uid:gid`) and, on a read-only root,
/// /tmp and /run.
fn tmpfs(cfg: &DockerConfig, uid: u32, gid: u32) -> HashMap<String, String> {
    let mut tmpfs = HashMap::new();
    // Exec allowed like /workspace, so `pip install --user` scripts in
    // ~/.local/bin run.
    let owner = format!("uid={uid},gid={gid},mode=700");
    tmpfs.insert(
        SANDBOX_HOME.to_string(),
        format!("rw,nosuid,nodev,exec,size={DEFAULT_HOME_SIZE_BYTES},{owner}"),
    );
    if !cfg.writable_rootfs {
        // Executable, as on a writable root (the engine's tmpfs is noexec
        // unless told): builds and test harnesses run what they put there.
        tmpfs.insert(
            "/tmp".to_string(),
            format!("rw,nosuid,nodev,exec,size={},mode=1777", cfg.tmp_size_bytes),
        );
        tmpfs.insert(
            "/run".to_string(),
            format!("rw,nosuid,nodev,noexec,size={DEFAULT_RUN_SIZE_BYTES},mode=755"),
        );
    }
    tmpfs
}

/// The mounts: the workspace (bind, volume or none), the supervisor's
/// binary and the direct channel's directory.
fn mounts(
    cfg: &DockerConfig,
    mount: &WorkspaceMount<'_>,
    supervisor: Option<&str>,
    channel: Option<&str>,
) -> Option<Vec<Mount>> {
    let mut mounts = match mount {
        WorkspaceMount::None => None,
        WorkspaceMount::Bind(src) => Some(vec![Mount {
            target: Some(cfg.workdir.clone()),
            source: Some((*src).into()),
            typ: Some(MountType::BIND),
            read_only: Some(false),
            ..Default::default()
        }]),
        // No source: an anonymous volume, which `rm -v` and AutoRemove
        // take along with the container.
        WorkspaceMount::Volume => Some(vec![Mount {
            target: Some(cfg.workdir.clone()),
            typ: Some(MountType::VOLUME),
            read_only: Some(false),
            volume_options: Some(MountVolumeOptions {
                no_copy: cfg.volume_no_copy.then_some(true),
                labels: Some(labels(cfg)),
                ..Default::default()
            }),
            ..Default::default()
        }]),
    };
    mounts.get_or_insert_with(Vec::new).push(match supervisor {
        // The host's copy, read-only.
        Some(path) => Mount {
            target: Some(SUPERVISOR_IN_SANDBOX.into()),
            source: Some(path.into()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        },
        // A remote engine: an anonymous volume the binary is uploaded
        // into before the start (`create_and_start`).
        None => Mount {
            target: Some(SUPERVISOR_DIR.into()),
            typ: Some(MountType::VOLUME),
            volume_options: Some(MountVolumeOptions {
                labels: Some(labels(cfg)),
                ..Default::default()
            }),
            ..Default::default()
        },
    });
    if let Some(dir) = channel {
        mounts.get_or_insert_with(Vec::new).push(Mount {
            target: Some(super::channel::DIR_IN_SANDBOX.into()),
            source: Some(dir.into()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
    mounts
}

/// The ulimits: open files, file size, core size and, under gVisor, the
/// number of tasks.
fn ulimits(cfg: &DockerConfig, kernel: Kernel) -> Vec<ResourcesUlimits> {
    let ulimit = |name: &str, v: i64| ResourcesUlimits {
        name: Some(name.into()),
        soft: Some(v),
        hard: Some(v),
    };
    let mut ulimits = vec![
        ulimit("nofile", cfg.ulimits.nofile),
        ulimit("fsize", cfg.ulimits.fsize_bytes),
        ulimit("core", cfg.ulimits.core_bytes),
    ];
    if kernel == Kernel::Gvisor {
        // gVisor counts RLIMIT_NPROC per uid inside the sandbox, so it
        // bounds the command's tasks like the pids cgroup does with the
        // host's kernel (where it would count the uid host-wide instead).
        // Root is exempt, as in Linux: a root fork bomb under gVisor ends
        // the sandbox at the host pids limit, the host unaffected.
        ulimits.push(ulimit(
            "nproc",
            cfg.pids_limit.saturating_add(GVISOR_NPROC_CONTROL_HEADROOM),
        ));
    }
    ulimits
}

/// The host config: capabilities, read-only root, network, resource
/// limits, no engine init, no log, auto-removal; then hardened.
fn host_config(
    cfg: &DockerConfig,
    kernel: Kernel,
    tmpfs: HashMap<String, String>,
    mounts: Option<Vec<Mount>>,
) -> HostConfig {
    let host_config = HostConfig {
        cap_add: Some(
            SUPERVISOR_CAPS
                .iter()
                .map(|c| c.to_string())
                .chain(cfg.cap_add.iter().cloned())
                .collect(),
        ),
        // No new privileges and the run's seccomp profile, set by
        // `hardening::harden` below; the engine's AppArmor default stays
        // (what is actually in force is read back by
        // `engine::inspect_security`).
        readonly_rootfs: Some(!cfg.writable_rootfs),
        tmpfs: (!tmpfs.is_empty()).then_some(tmpfs),
        // A network of its own first; the service network is then
        // connected after the creation (`services::connect_main`).
        network_mode: Some(
            cfg.network
                .clone()
                .or_else(|| cfg.join_network.clone())
                .unwrap_or_else(|| "none".into()),
        ),
        memory: Some(cfg.memory_bytes),
        memory_swap: Some(cfg.memory_bytes),
        nano_cpus: Some(crate::convert::i64_from_f64(cfg.cpus * 1e9)),
        pids_limit: Some(host_pids_limit(cfg, kernel)),
        ulimits: Some(ulimits(cfg, kernel)),
        // The supervisor is PID 1 and reaps what is orphaned: an init of
        // the engine's would hold the supervisor's capabilities in a
        // process a root command may trace.
        init: Some(false),
        runtime: cfg.runtime.clone(),
        mounts,
        // No log: the engine would otherwise write the whole stream (every
        // command's output, every file read) to disk, unredacted and
        // unbounded. Attaching does not need it.
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        // The container goes away as soon as its main process ends: when
        // runner dies (stdin EOF) or at expiry.
        auto_remove: Some(true),
        ..Default::default()
    };
    let mut host_config = host_config;
    super::hardening::harden(&mut host_config, &cfg.seccomp);
    host_config
}

/// The supervisor's arguments, with `--out` when the direct channel is
/// mounted.
fn supervisor_cmd(cfg: &DockerConfig, uid: u32, gid: u32, channel: Option<&str>) -> Vec<String> {
    let mut args = supervisor_args(cfg, uid, gid);
    if channel.is_some() {
        args.push("--out".into());
        args.push(
            super::channel::Channel::in_sandbox()
                .to_string_lossy()
                .into_owned(),
        );
    }
    args
}

/// On a task's service network the sandbox is `main`, as Compose
/// names it, so sidecars can reach it too.
fn main_alias(cfg: &DockerConfig) -> Option<NetworkingConfig> {
    cfg.join_network
        .as_ref()
        .filter(|_| cfg.network.is_none())
        .map(|net| NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                net.clone(),
                EndpointSettings {
                    aliases: Some(vec![MAIN_SERVICE_ALIAS.to_string()]),
                    ..Default::default()
                },
            )])),
        })
}

/// The environment of each command's exec: `env` in order (a HOME in it
/// overrides the container's).
pub fn exec_env(env: &[(String, String)]) -> Vec<String> {
    env.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Container names must be unique; the run id plus randomness is.
pub fn container_name(run_id: &str) -> String {
    format!("{}{:08x}", name_prefix(run_id), fastrand::u32(..))
}

/// `runner-<run id, made safe>-`, the start of a sandbox's name.
pub(super) fn name_prefix(run_id: &str) -> String {
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
    format!("runner-{clean}-")
}

/// Suffixes of the names of runner's never-started helper containers of a
/// run (seeding a workspace, reading an image directory's owner).
pub const HELPER_SUFFIXES: [&str; 2] = ["-seed", "-owner"];

/// Whether `name` (as the engine lists it, maybe with a leading `/`) is one
/// [`container_name`] gives to run `run_id`, or that name with one of
/// [`HELPER_SUFFIXES`]. Labels are inherited from an image (a committed
/// sandbox passes its labels to every container made from it, build
/// containers included); the name is not.
pub fn is_sandbox_name(name: &str, run_id: &str) -> bool {
    name.trim_start_matches('/')
        .strip_prefix(&name_prefix(run_id))
        .is_some_and(|rest| {
            let rest = HELPER_SUFFIXES
                .iter()
                .find_map(|s| rest.strip_suffix(s))
                .unwrap_or(rest);
            rest.len() == 8 && rest.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// Creates the container, ties it to this process (see `lifeline`) and
/// starts it; removes it again if that fails. A runner killed between the
/// creation and the attach (milliseconds) leaves a container that never
/// started; the next sweep removes it.
pub async fn create_and_start(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
    upload: Option<(&str, &[u8])>,
    fifo: &mut Option<tokio::net::unix::pipe::Receiver>,
) -> Result<(String, Lifeline), ExecError> {
    // Well before the creation: the daemon's clock may lag ours, and the
    // container filter leaves nothing older to replay anyway.
    let since = now_secs().saturating_sub(600);
    let opts = CreateContainerOptionsBuilder::new().name(name).build();
    let created = call(
        "create container",
        name,
        CALL_TIMEOUT,
        docker.create_container(Some(opts), body),
    )
    .await?;
    let id = created.id;
    if let Some((dest, tar)) = upload {
        let opts = UploadToContainerOptionsBuilder::new().path(dest).build();
        let sent = call(
            "upload the supervisor",
            short(&id),
            CALL_TIMEOUT,
            docker.upload_to_container(&id, Some(opts), bollard::body_full(tar.to_vec().into())),
        )
        .await;
        if let Err(e) = sent {
            let _ = remove(docker, &id).await;
            return Err(e);
        }
    }
    let lifeline = match Lifeline::attach(docker, &id, since, fifo.take()).await {
        Ok(l) => l,
        Err(e) => {
            let _ = remove(docker, &id).await;
            return Err(e);
        }
    };
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
    Ok((id, lifeline))
}

/// Force-removes a container with its anonymous volumes; a container that
/// is already gone counts as removed, and one the engine is already
/// removing (auto-remove after it stopped, or gc) is waited for.
pub async fn remove(docker: &Docker, id: &str) -> Result<(), ExecError> {
    let opts = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match tokio::time::timeout(CALL_TIMEOUT, docker.remove_container(id, Some(opts))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if status_of(&e) == Some(404) => Ok(()),
        Ok(Err(e)) if status_of(&e) == Some(409) => {
            wait_gone(docker, id).await;
            Ok(())
        }
        Ok(Err(e)) => Err(super::client::docker_err("remove container", short(id), &e)),
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op: "remove container",
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}

/// Waits (bounded) until the engine no longer knows the container.
async fn wait_gone(docker: &Docker, id: &str) {
    let until = tokio::time::Instant::now() + CALL_TIMEOUT;
    while tokio::time::Instant::now() < until {
        match docker.inspect_container(id, None).await {
            Err(e) if status_of(&e) == Some(404) => return,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Why a container is no longer running, or `None` if it still is. A
/// container that is gone (the engine removes a stopped one at once) is
/// described from the engine's events, when `lifeline` has them.
pub async fn death_reason(
    docker: &Docker,
    id: &str,
    lifeline: Option<&Lifeline>,
) -> Result<Option<String>, ExecError> {
    let info = match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_container(id, None)).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) if status_of(&e) == Some(404) => {
            let ending = match lifeline {
                Some(l) => l.ending(DEATH_EVENT_WAIT).await,
                None => Ending::default(),
            };
            return Ok(Some(describe_end(id, &ending, true)));
        }
        Ok(Err(e)) => {
            return Err(super::client::docker_err(
                "inspect container",
                short(id),
                &e,
            ));
        }
        Err(_) => {
            return Err(ExecError::EngineTimeout {
                engine: ENGINE,
                op: "inspect container",
                secs: CALL_TIMEOUT.as_secs(),
            });
        }
    };
    let state = info.state.unwrap_or_default();
    if state.running == Some(true) && state.paused != Some(true) {
        return Ok(None);
    }
    if state.running == Some(true) {
        return Ok(Some(format!(
            "container {} is paused (`docker pause`); nothing can run in it",
            short(id)
        )));
    }
    let mut oom = state.oom_killed == Some(true);
    if !oom && state.exit_code == Some(137) {
        // The engine may mark an OOM kill only after the exit (seen under
        // gVisor, whose sentry the host's OOM killer takes): its `oom`
        // event, or a second look, says.
        let until = tokio::time::Instant::now() + DEATH_EVENT_WAIT;
        while !oom && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
            oom = lifeline.is_some_and(|l| l.oom_seen());
        }
        if !oom
            && let Ok(Ok(again)) =
                tokio::time::timeout(CALL_TIMEOUT, docker.inspect_container(id, None)).await
        {
            oom = again.state.and_then(|s| s.oom_killed) == Some(true);
        }
    }
    let ending = Ending {
        exit_code: state.exit_code,
        oom,
    };
    let mut why = describe_end(id, &ending, false);
    if let Some(err) = state.error.filter(|e| !e.is_empty()) {
        why.push_str(&format!(": {err}"));
    }
    Ok(Some(why))
}

/// How long to wait for the engine's `die` event of a vanished container.
const DEATH_EVENT_WAIT: Duration = Duration::from_secs(1);

/// Says how a container ended; `gone` when the engine already removed it
/// (as it does at once with auto-remove).
fn describe_end(id: &str, ending: &Ending, gone: bool) -> String {
    let how = match ending.exit_code {
        Some(137) if ending.oom => "was killed by the memory limit (the kernel's OOM killer \
             took its main process; under gVisor a sandbox over its limit ends as a whole)"
            .to_string(),
        Some(137) => {
            "was killed (SIGKILL: `docker kill`, `docker rm -f` or the engine)".to_string()
        }
        Some(c) => format!("stopped (its main process exited with code {c})"),
        None => "stopped".to_string(),
    };
    if gone {
        format!(
            "container {} is gone: it {how} and the engine removed it",
            short(id)
        )
    } else {
        format!("container {} {how}", short(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_containers_are_described_from_their_events() {
        let oom = Ending {
            exit_code: Some(137),
            oom: true,
        };
        let gone = |e: &Ending| describe_end("abc", e, true);
        assert!(gone(&oom).contains("memory limit"));
        let killed = Ending {
            exit_code: Some(137),
            oom: false,
        };
        assert!(gone(&killed).contains("SIGKILL"));
        assert!(gone(&Ending::default()).contains("is gone"));
    }

    #[test]
    fn home_is_a_tmpfs_owned_by_the_command_user_and_env_stays_out_of_the_spec() {
        let cfg = DockerConfig {
            env: vec![
                ("LANG".into(), "C.UTF-8".into()),
                ("DEPLOY_TOKEN".into(), "dt-secret".into()),
            ],
            ..Default::default()
        };
        let body = spec(
            &cfg,
            (1234, 5678),
            &WorkspaceMount::None,
            Kernel::Host,
            Some("/sup"),
            None,
        );
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

    #[test]
    fn the_sandbox_holds_only_capabilities_under_the_ceiling_and_runners_filter() {
        let cfg = DockerConfig {
            cap_add: vec![
                "SETUID".into(),
                "DAC_READ_SEARCH".into(),
                "SYS_ADMIN".into(),
            ],
            ..Default::default()
        };
        for c in SUPERVISOR_CAPS {
            assert!(super::super::hardening::allowed(c), "{c}");
        }
        let body = spec(
            &cfg,
            (0, 0),
            &WorkspaceMount::None,
            Kernel::Host,
            Some("/sup"),
            None,
        );
        let hc = body.host_config.unwrap_or_default();
        let caps = hc.cap_add.unwrap_or_default();
        assert_eq!(caps.len(), SUPERVISOR_CAPS.len(), "{caps:?}");
        assert!(
            !caps
                .iter()
                .any(|c| c == "DAC_READ_SEARCH" || c == "SYS_ADMIN")
        );
        let opts = hc.security_opt.unwrap_or_default();
        assert!(opts.contains(&"no-new-privileges:true".to_string()));
        assert!(opts.iter().any(|o| o.starts_with("seccomp={")), "{opts:?}");
        // Commands keep only what is under the ceiling too.
        let args = body.cmd.unwrap_or_default().join(" ");
        assert!(args.ends_with("--caps 7"), "{args}");
    }

    #[test]
    fn a_joined_service_network_replaces_none_with_the_alias_main() {
        let cfg = DockerConfig {
            join_network: Some("runner-r-net-0a1b2c3d".into()),
            network_peers: vec!["db".into()],
            ..Default::default()
        };
        let body = spec(
            &cfg,
            (1000, 1000),
            &WorkspaceMount::None,
            Kernel::Host,
            Some("/sup"),
            None,
        );
        assert_eq!(body.network_disabled, Some(false));
        let hc = body.host_config.clone().unwrap_or_default();
        assert_eq!(hc.network_mode.as_deref(), Some("runner-r-net-0a1b2c3d"));
        let aliases = body
            .networking_config
            .and_then(|n| n.endpoints_config)
            .and_then(|e| e.get("runner-r-net-0a1b2c3d").cloned())
            .and_then(|e| e.aliases);
        assert_eq!(aliases, Some(vec!["main".to_string()]));
        let l = cfg.loosenings();
        assert_eq!(
            l,
            ["joined the task's internal service network runner-r-net-0a1b2c3d (sidecars: db)"]
        );
        assert!(cfg.validate(None).is_ok());
        // With a network of its own, the service network is connected
        // after the creation.
        let both = DockerConfig {
            network: Some("bridge".into()),
            ..cfg.clone()
        };
        assert!(both.validate(None).is_ok());
        let b = spec(
            &both,
            (1000, 1000),
            &WorkspaceMount::None,
            Kernel::Host,
            Some("/sup"),
            None,
        );
        assert_eq!(
            b.host_config.and_then(|h| h.network_mode).as_deref(),
            Some("bridge")
        );
        assert!(b.networking_config.is_none());
        assert_eq!(both.loosenings().len(), 2);
        let host = DockerConfig {
            join_network: Some("host".into()),
            ..Default::default()
        };
        assert!(host.validate(None).is_err());
        // Without one, nothing changes.
        let plain = spec(
            &DockerConfig::default(),
            (1000, 1000),
            &WorkspaceMount::None,
            Kernel::Host,
            Some("/sup"),
            None,
        );
        assert_eq!(plain.network_disabled, Some(true));
        assert!(plain.networking_config.is_none());
    }

    #[test]
    fn gvisor_bounds_tasks_with_nproc_and_keeps_the_host_limit_out_of_reach() {
        let cfg = DockerConfig {
            pids_limit: 100,
            runtime: Some("runsc".into()),
            ..Default::default()
        };
        let limits = |kernel| {
            let hc = spec(
                &cfg,
                (1000, 1000),
                &WorkspaceMount::None,
                kernel,
                Some("/sup"),
                None,
            )
            .host_config
            .unwrap_or_default();
            let nproc = hc
                .ulimits
                .unwrap_or_default()
                .into_iter()
                .find(|u| u.name.as_deref() == Some("nproc"))
                .and_then(|u| u.hard);
            (hc.pids_limit, nproc, hc.runtime)
        };
        assert_eq!(
            limits(Kernel::Host),
            (Some(100), None, Some("runsc".into()))
        );
        let (host, nproc, _) = limits(Kernel::Gvisor);
        assert_eq!(nproc, Some(100 + GVISOR_NPROC_CONTROL_HEADROOM));
        assert!(host.is_some_and(|h| h >= 100 * 15 + 54), "{host:?}");
        assert_eq!(command_nproc(&cfg, Kernel::Gvisor), Some(100));
        assert_eq!(command_nproc(&cfg, Kernel::Host), None);
    }
}
