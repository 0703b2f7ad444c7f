//! A task's sidecars (Compose services other than `main`) on a network of
//! their own: an `internal` bridge whose host side has no address
//! (`inhibit_ipv4`), so its containers reach each other and nothing else,
//! not even the host. The main sandbox joins it with the alias `main`.
//!
//! Each sidecar is hardened like the main sandbox where that does not break
//! common daemons: every capability dropped but the few a database's
//! entrypoint uses to take over its data directory and drop to its own
//! user ([`SIDECAR_CAPS`]), no new privileges, the run's limits, ulimits
//! and runtime, a small bounded log, auto-removal, and runner's labels with
//! an expiry.
//!
//! Sidecars run the image's own processes, so they cannot be tied to runner
//! the way the main sandbox is (its supervisor ends at the attach stream's
//! EOF). What a killed runner leaves, the next sweep ([`super::gc`])
//! removes: sidecar containers by their labels and names, then the network.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HealthConfig, HealthStatusEnum, HostConfig,
    HostConfigLogConfig, Mount, MountType, MountVolumeOptions, NetworkConnectRequest,
    NetworkCreateRequest, NetworkDisconnectRequest, NetworkingConfig, ResourcesUlimits,
};
use bollard::query_parameters::CreateContainerOptionsBuilder;

use super::client::{self, CALL_TIMEOUT, ENGINE, call, docker_err, status_of};
use super::config::{DockerConfig, Ulimits, is_plain_name};
use super::container::{self, name_prefix};
use super::engine::EngineInfo;
use crate::exec::ExecError;
use crate::exec::backend::{
    MAIN_SERVICE_ALIAS, ServiceHealthcheck, ServiceSpec, Services, ServicesSpec, is_service_name,
};

/// Label: the Compose service a sidecar container runs.
pub const LABEL_SERVICE: &str = "runner.service";

/// What sidecars keep of root's capabilities: enough for a database's
/// entrypoint to chown its data directory (CHOWN, FOWNER), read and write
/// files of its own user while still root (DAC_OVERRIDE) and drop to that
/// user (SETUID, SETGID, as `gosu`/`su-exec` do). Nothing that reaches the
/// kernel, the network stack or other processes (no NET_ADMIN, NET_RAW,
/// SYS_*, KILL, MKNOD). Ports below 1024 need no capability: the engine
/// opens them to every user in the container's own network namespace.
pub const SIDECAR_CAPS: [&str; 5] = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"];

/// Most bytes a sidecar's log may hold (the `local` driver, one file):
/// enough for the tail shown when it fails to start.
const SIDECAR_LOG_BYTES: &str = "1m";
/// Pause between health polls.
const HEALTH_POLL: Duration = Duration::from_millis(250);
/// Attempts at removing the network while an endpoint is going away.
const NETWORK_REMOVE_ATTEMPTS: usize = 10;
/// Pause between those attempts.
const NETWORK_REMOVE_PAUSE: Duration = Duration::from_millis(300);

/// The network name of run `run_id`: `runner-<run>-net-<8 hex>`.
pub(super) fn network_name(run_id: &str) -> String {
    format!("{}net-{:08x}", name_prefix(run_id), fastrand::u32(..))
}

/// The container name of service `service` of run `run_id`.
pub(super) fn service_container_name(run_id: &str, service: &str) -> String {
    format!(
        "{}svc-{service}-{:08x}",
        name_prefix(run_id),
        fastrand::u32(..)
    )
}

/// Whether `rest` (after a prefix) is `<8 hex>` exactly.
fn is_suffix(rest: &str) -> bool {
    rest.len() == 8 && rest.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `name` is one [`network_name`] gives to run `run_id`.
pub fn is_service_network_name(name: &str, run_id: &str) -> bool {
    name.strip_prefix(&name_prefix(run_id))
        .and_then(|r| r.strip_prefix("net-"))
        .is_some_and(is_suffix)
}

/// Whether `name` (maybe with the engine's leading `/`) is one
/// [`service_container_name`] gives to service `service` of run `run_id`.
pub fn is_service_container_name(name: &str, run_id: &str, service: &str) -> bool {
    name.trim_start_matches('/')
        .strip_prefix(&name_prefix(run_id))
        .and_then(|r| r.strip_prefix("svc-"))
        .and_then(|r| r.strip_prefix(service))
        .and_then(|r| r.strip_prefix('-'))
        .is_some_and(is_suffix)
}

/// Checks what the engine would accept but runner does not.
fn validate(spec: &ServicesSpec) -> Result<(), ExecError> {
    if spec.services.is_empty() {
        return Err(ExecError::Refused("no services to start".into()));
    }
    if !(spec.cpus > 0.0 && spec.cpus.is_finite()) || spec.memory_bytes < (6 << 20) {
        return Err(ExecError::Refused(format!(
            "service limits out of range: cpus {}, memory {} bytes",
            spec.cpus, spec.memory_bytes
        )));
    }
    if spec.pids_limit <= 0 {
        return Err(ExecError::Refused("pids_limit must be positive".into()));
    }
    if let Some(rt) = spec.runtime.as_deref()
        && !is_plain_name(rt)
    {
        return Err(ExecError::Refused(format!(
            "runtime name '{rt}' is not a plain name"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for s in &spec.services {
        if !is_service_name(&s.name) {
            return Err(ExecError::Refused(format!(
                "service name '{}' must be lowercase letters, digits, '-' or '_' (and not 'main')",
                s.name
            )));
        }
        if !seen.insert(s.name.as_str()) {
            return Err(ExecError::Refused(format!(
                "service '{}' given twice",
                s.name
            )));
        }
        if let Some((k, _)) = s.env.iter().find(|(k, _)| k.is_empty() || k.contains('=')) {
            return Err(ExecError::Refused(format!(
                "service '{}': invalid environment name '{k}'",
                s.name
            )));
        }
        if let Some(v) = s.volumes.iter().find(|v| !v.starts_with('/')) {
            return Err(ExecError::Refused(format!(
                "service '{}': volume path '{v}' is not absolute",
                s.name
            )));
        }
    }
    Ok(())
}

/// Nanoseconds of `d`, for the engine's duration fields.
fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The engine's healthcheck for `h`.
fn health_config(h: &ServiceHealthcheck) -> HealthConfig {
    HealthConfig {
        test: Some(h.test.clone()),
        interval: Some(nanos(h.interval)),
        timeout: Some(nanos(h.timeout)),
        retries: Some(i64::from(h.retries)),
        start_period: Some(nanos(h.start_period)),
        start_interval: None,
    }
}

/// The container spec of sidecar `s` on `network`.
pub fn sidecar_body(
    spec: &ServicesSpec,
    s: &ServiceSpec,
    network: &str,
    kernel: super::engine::Kernel,
) -> ContainerCreateBody {
    let cfg = DockerConfig {
        run_id: spec.run_id.clone(),
        max_run_time: spec.max_run_time,
        pids_limit: spec.pids_limit,
        labels: vec![(LABEL_SERVICE.to_string(), s.name.clone())],
        ..DockerConfig::default()
    };
    let labels = container::labels(&cfg);
    let limits = Ulimits::default();
    let ulimit = |name: &str, v: i64| ResourcesUlimits {
        name: Some(name.into()),
        soft: Some(v),
        hard: Some(v),
    };
    let mounts: Vec<Mount> = s
        .volumes
        .iter()
        .map(|target| Mount {
            target: Some(target.clone()),
            typ: Some(MountType::VOLUME),
            volume_options: Some(MountVolumeOptions {
                labels: Some(labels.clone()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    // Capabilities clamped to the ceiling, no new privileges and the
    // run's seccomp profile: `hardening::harden` below.
    let mut host_config = HostConfig {
        cap_add: Some(SIDECAR_CAPS.iter().map(|c| c.to_string()).collect()),
        readonly_rootfs: Some(s.read_only),
        network_mode: Some(network.to_string()),
        memory: Some(spec.memory_bytes),
        memory_swap: Some(spec.memory_bytes),
        nano_cpus: Some(crate::convert::i64_from_f64(spec.cpus * 1e9)),
        pids_limit: Some(container::host_pids_limit(&cfg, kernel)),
        ulimits: Some(vec![
            ulimit("nofile", limits.nofile),
            ulimit("fsize", limits.fsize_bytes),
            ulimit("core", limits.core_bytes),
        ]),
        init: Some(s.init),
        runtime: spec.runtime.clone(),
        mounts: (!mounts.is_empty()).then_some(mounts),
        log_config: Some(HostConfigLogConfig {
            typ: Some("local".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), SIDECAR_LOG_BYTES.to_string()),
                ("max-file".to_string(), "1".to_string()),
                ("compress".to_string(), "false".to_string()),
            ])),
        }),
        auto_remove: Some(true),
        ..Default::default()
    };
    super::hardening::harden(&mut host_config, &spec.seccomp);
    ContainerCreateBody {
        image: Some(s.image.clone()),
        entrypoint: s.entrypoint.clone(),
        cmd: s.command.clone(),
        user: s.user.clone(),
        working_dir: s.workdir.clone(),
        env: Some(container::exec_env(&s.env)),
        hostname: Some(s.name.clone()),
        labels: Some(labels),
        healthcheck: s.healthcheck.as_ref().map(health_config),
        host_config: Some(host_config),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.to_string(),
                EndpointSettings {
                    aliases: Some(vec![s.name.clone()]),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    }
}

/// The network's creation request: internal, and its bridge without an
/// address on the host, so nothing on it reaches the host either.
pub fn network_request(name: &str, run_id: &str, max_run_time: Duration) -> NetworkCreateRequest {
    let cfg = DockerConfig {
        run_id: run_id.to_string(),
        max_run_time,
        ..DockerConfig::default()
    };
    NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".into()),
        internal: Some(true),
        attachable: Some(false),
        enable_ipv6: Some(false),
        options: Some(HashMap::from([
            (
                "com.docker.network.bridge.inhibit_ipv4".to_string(),
                "true".to_string(),
            ),
            (
                "com.docker.network.bridge.enable_ip_masquerade".to_string(),
                "false".to_string(),
            ),
        ])),
        labels: Some(container::labels(&cfg)),
        ..Default::default()
    }
}

/// How long a sidecar without a healthcheck must keep running to count as
/// started.
const SETTLE: Duration = Duration::from_secs(1);

/// A task's running sidecars on the Docker engine.
pub struct DockerServices {
    docker: Docker,
    network: String,
    /// `(service, container id)`, in start order.
    containers: std::sync::Mutex<Vec<(String, String)>>,
    names: Vec<String>,
    finishing: tokio::sync::Mutex<()>,
    stopped: AtomicBool,
}

impl DockerServices {
    /// Creates the network, then starts each service in order, waiting for
    /// those with a healthcheck to be healthy; on any failure removes what
    /// it made.
    pub async fn start(spec: ServicesSpec) -> Result<DockerServices, ExecError> {
        validate(&spec)?;
        let docker = client::connect().await?;
        let engine = EngineInfo::recent(&docker).await?;
        let name = network_name(&spec.run_id);
        let runtime = engine.check_runtime(spec.runtime.as_deref(), Some(&name))?;
        let kernel = engine.kernel_of(&runtime);
        call(
            "create network",
            &name,
            CALL_TIMEOUT,
            docker.create_network(network_request(&name, &spec.run_id, spec.max_run_time)),
        )
        .await?;
        let services = DockerServices {
            docker,
            network: name,
            containers: std::sync::Mutex::new(Vec::new()),
            names: spec.services.iter().map(|s| s.name.clone()).collect(),
            finishing: tokio::sync::Mutex::new(()),
            stopped: AtomicBool::new(false),
        };
        for s in &spec.services {
            if let Err(e) = services.start_one(&spec, s, kernel).await {
                if let Err(c) = services.remove_all().await {
                    tracing::warn!("removing the services of a failed start: {c}");
                }
                return Err(e);
            }
        }
        Ok(services)
    }

    /// Creates, starts and (with a healthcheck) waits for one service.
    async fn start_one(
        &self,
        spec: &ServicesSpec,
        s: &ServiceSpec,
        kernel: super::engine::Kernel,
    ) -> Result<(), ExecError> {
        let name = service_container_name(&spec.run_id, &s.name);
        let body = sidecar_body(spec, s, &self.network, kernel);
        let opts = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = call(
            "create service container",
            &s.name,
            CALL_TIMEOUT,
            self.docker.create_container(Some(opts), body),
        )
        .await?;
        self.lock().push((s.name.clone(), created.id.clone()));
        call(
            "start service container",
            &s.name,
            CALL_TIMEOUT,
            self.docker.start_container(&created.id, None),
        )
        .await?;
        self.wait_ready(spec, s, &created.id).await
    }

    /// Waits until `id` is running and, with a healthcheck, healthy.
    async fn wait_ready(
        &self,
        spec: &ServicesSpec,
        s: &ServiceSpec,
        id: &str,
    ) -> Result<(), ExecError> {
        let deadline = tokio::time::Instant::now() + spec.health_timeout;
        // Without a healthcheck, "running" once is not enough: a sidecar
        // that exits at once may not have yet; still running a moment
        // later, it counts as up.
        let mut seen_running = false;
        loop {
            let info =
                match tokio::time::timeout(CALL_TIMEOUT, self.docker.inspect_container(id, None))
                    .await
                {
                    Ok(Ok(info)) => info,
                    Ok(Err(e)) if status_of(&e) == Some(404) => {
                        return Err(self.failed(spec, s, id, "exited and was removed").await);
                    }
                    Ok(Err(e)) => return Err(docker_err("inspect service", &s.name, &e)),
                    Err(_) => {
                        return Err(ExecError::EngineTimeout {
                            engine: ENGINE,
                            op: "inspect service",
                            secs: CALL_TIMEOUT.as_secs(),
                        });
                    }
                };
            let state = info.state.unwrap_or_default();
            if state.running != Some(true) {
                let why = format!("exited with code {}", state.exit_code.unwrap_or(-1));
                return Err(self.failed(spec, s, id, &why).await);
            }
            if s.healthcheck.is_none() {
                if seen_running {
                    return Ok(());
                }
                seen_running = true;
                tokio::time::sleep(SETTLE).await;
                continue;
            }
            match state.health.and_then(|h| h.status) {
                Some(HealthStatusEnum::HEALTHY) => return Ok(()),
                Some(HealthStatusEnum::UNHEALTHY) => {
                    return Err(self.failed(spec, s, id, "is unhealthy").await);
                }
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                let why = format!("was not healthy within {}s", spec.health_timeout.as_secs());
                return Err(self.failed(spec, s, id, &why).await);
            }
            tokio::time::sleep(HEALTH_POLL).await;
        }
    }

    /// The error for service `s` that did not come up, with its log's tail.
    async fn failed(&self, spec: &ServicesSpec, s: &ServiceSpec, id: &str, why: &str) -> ExecError {
        let tail = client::log_tail(&self.docker, id).await;
        let tail = spec.redactor.redact(&tail).into_owned();
        ExecError::Refused(format!(
            "the task's service '{}' (image {}) {why}{}",
            s.name,
            s.image,
            if tail.trim().is_empty() {
                String::new()
            } else {
                format!("; its last output:\n{}", tail.trim_end())
            }
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, String)>> {
        self.containers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ids of the services' containers, in start order.
    pub fn container_ids(&self) -> Vec<String> {
        self.lock().iter().map(|(_, id)| id.clone()).collect()
    }

    /// Removes the containers, then the network.
    async fn remove_all(&self) -> Result<(), ExecError> {
        let ids = self.container_ids();
        remove_everything(&self.docker, &ids, &self.network).await
    }
}

/// Removes the containers `ids` and then `network` (forcing out whatever
/// is still attached to it: it is this run's). Gone objects count as
/// removed.
pub(super) async fn remove_everything(
    docker: &Docker,
    ids: &[String],
    network: &str,
) -> Result<(), ExecError> {
    let mut first_error = None;
    for id in ids {
        if let Err(e) = container::remove(docker, id).await {
            first_error.get_or_insert(e);
        }
    }
    if let Err(e) = remove_network(docker, network).await {
        first_error.get_or_insert(e);
    }
    first_error.map_or(Ok(()), Err)
}

/// Removes a runner network, disconnecting what is still attached first;
/// `Ok(false)` when it was already gone. An endpoint that is still going
/// away (a container being removed) is waited for briefly.
pub async fn remove_network(docker: &Docker, network: &str) -> Result<bool, ExecError> {
    let mut attempt = 1;
    loop {
        match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_network(network, None)).await {
            Ok(Ok(info)) => {
                for id in info.containers.unwrap_or_default().into_keys() {
                    let req = NetworkDisconnectRequest {
                        container: id,
                        force: Some(true),
                    };
                    let _ =
                        tokio::time::timeout(CALL_TIMEOUT, docker.disconnect_network(network, req))
                            .await;
                }
            }
            Ok(Err(e)) if status_of(&e) == Some(404) => return Ok(false),
            _ => {}
        }
        match tokio::time::timeout(CALL_TIMEOUT, docker.remove_network(network)).await {
            Ok(Ok(())) => return Ok(true),
            Ok(Err(e)) if status_of(&e) == Some(404) => return Ok(false),
            Ok(Err(e)) if attempt < NETWORK_REMOVE_ATTEMPTS => {
                tracing::debug!("network {network} not removed yet: {e}");
                attempt += 1;
                tokio::time::sleep(NETWORK_REMOVE_PAUSE).await;
            }
            Ok(Err(e)) => return Err(docker_err("remove network", network, &e)),
            Err(_) => {
                return Err(ExecError::EngineTimeout {
                    engine: ENGINE,
                    op: "remove network",
                    secs: CALL_TIMEOUT.as_secs(),
                });
            }
        }
    }
}

/// Connects the main sandbox `id` to the service network `network` with
/// the alias `main` (when it has a network of its own as well).
pub async fn connect_main(docker: &Docker, id: &str, network: &str) -> Result<(), ExecError> {
    let req = NetworkConnectRequest {
        container: id.to_string(),
        endpoint_config: Some(EndpointSettings {
            aliases: Some(vec![MAIN_SERVICE_ALIAS.to_string()]),
            ..Default::default()
        }),
    };
    call(
        "connect to the service network",
        network,
        CALL_TIMEOUT,
        docker.connect_network(network, req),
    )
    .await
}

#[async_trait]
impl Services for DockerServices {
    fn network(&self) -> Option<String> {
        Some(self.network.clone())
    }

    fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    async fn stop(&self) -> Result<(), ExecError> {
        let _one_at_a_time = self.finishing.lock().await;
        if self.stopped.load(Ordering::SeqCst) {
            return Ok(());
        }
        // If removal fails, `stopped` stays false so Drop tries again.
        self.remove_all().await?;
        self.stopped.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for DockerServices {
    /// Without `stop` (a panic, a cancelled attempt): removes everything
    /// from a thread with its own runtime, so it works even while the
    /// caller's runtime shuts down.
    fn drop(&mut self) {
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        let ids = self.container_ids();
        let network = self.network.clone();
        client::cleanup_on_drop(
            "runner-services-cleanup",
            format!("the services of network {network}"),
            move |d| async move { remove_everything(&d, &ids, &network).await },
        );
    }
}

#[cfg(test)]
mod tests;
