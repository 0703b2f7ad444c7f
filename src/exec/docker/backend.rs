//! The docker backend: [`Backend`] for the engine, mapping the neutral
//! [`SandboxSpec`] onto a hardened [`DockerConfig`].

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use super::config::{CONTAINER_WORKDIR, DockerConfig, WorkspaceMode as DockerMode};
use super::engine::EngineInfo;
use super::{DockerExecutor, build, client, gc, image, seed};
use crate::exec::backend::{
    Backend, Capabilities, Cleanup, ImageSource, Network, SandboxSpec, Seeded, ServiceHost,
    Services, ServicesSpec, WorkspaceMode,
};
use crate::exec::{ExecError, Executor};
use crate::plural::count_of;

/// Hardened containers on the Docker engine (DOCKER_HOST or the local
/// socket).
#[derive(Debug, Clone, Copy, Default)]
pub struct DockerBackend;

/// The docker executor's configuration for `spec`.
pub fn docker_config(spec: &SandboxSpec) -> DockerConfig {
    DockerConfig {
        image: spec.image.clone(),
        network: match spec.network {
            Network::None | Network::Allowlist => None,
            Network::Bridge => Some("bridge".into()),
        },
        egress: (spec.network == Network::Allowlist).then(|| super::egress::EgressSpec {
            hosts: spec.allowed_hosts.clone(),
            via: spec.egress_network.clone(),
        }),
        cpus: spec.cpus,
        memory_bytes: spec.memory_bytes,
        pids_limit: spec.pids_limit,
        user: spec.user.clone(),
        writable_rootfs: spec.writable_rootfs,
        workspace: spec.workspace.as_ref().map(|w| w.host.clone()),
        workspace_mode: match spec.workspace.as_ref().map(|w| w.mode) {
            Some(WorkspaceMode::Bind) => DockerMode::Bind,
            Some(WorkspaceMode::Copy) => DockerMode::Copy,
            Some(WorkspaceMode::Auto) | None => DockerMode::Auto,
        },
        disk_bytes: spec.disk_bytes,
        workdir: spec
            .workdir
            .clone()
            .unwrap_or_else(|| CONTAINER_WORKDIR.to_string()),
        cap_add: {
            let mut caps: Vec<String> = Vec::new();
            if spec.switch_user {
                caps.extend(["SETUID".into(), "SETGID".into()]);
            }
            if spec.root_caps && super::config::user_is_root(&spec.user) {
                caps.extend(
                    crate::exec::backend::ROOT_TASK_CAPS
                        .iter()
                        .map(|c| c.to_string()),
                );
            }
            caps
        },
        volume_no_copy: spec.workspace.as_ref().is_some_and(|w| w.exact),
        env: spec.env.clone(),
        redactor: spec.redactor.clone(),
        run_id: spec.run_id.clone(),
        max_run_time: spec.max_run_time,
        runtime: spec.runtime.clone(),
        keep_background: spec.keep_background,
        keep_workdir_owner: spec.keep_workdir_owner,
        shell: spec.shell,
        join_network: spec.join_network.clone(),
        seccomp: spec.seccomp.clone(),
        network_peers: spec.network_peers.clone(),
        ..DockerConfig::default()
    }
}

#[async_trait]
impl Backend for DockerBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "docker",
            isolated: true,
            networks: vec![Network::None, Network::Bridge, Network::Allowlist],
            images: true,
        }
    }

    fn loosenings(&self, spec: &SandboxSpec) -> Vec<String> {
        docker_config(spec).loosenings()
    }

    async fn collect_garbage(&self) -> Result<Cleanup, ExecError> {
        let docker = client::connect().await?;
        let report = gc::gc(&docker).await?;
        // After the sandboxes are gone, their work can come back.
        let disks = super::recover_disks(&docker).await;
        let mut done: Vec<String> = disks
            .restored
            .iter()
            .map(|ws| format!("gave a dead run's work back to {}", ws.display()))
            .collect();
        done.extend(
            report
                .containers_removed
                .iter()
                .map(|c| format!("removed container {c}")),
        );
        done.extend(
            report
                .volumes_removed
                .iter()
                .map(|v| format!("removed volume {v}")),
        );
        done.extend(
            report
                .images_removed
                .iter()
                .map(|i| format!("removed snapshot image {i}"))
                .chain(
                    report
                        .networks_removed
                        .iter()
                        .map(|n| format!("removed network {n}")),
                ),
        );
        let mut errors = report.errors;
        errors.extend(disks.errors);
        Ok(Cleanup {
            done,
            errors,
            summary: Some(format!(
                "removed {}, {}, {} and {}",
                count_of(report.containers_removed.len(), "container", "containers"),
                count_of(report.volumes_removed.len(), "volume", "volumes"),
                count_of(report.networks_removed.len(), "network", "networks"),
                count_of(
                    report.images_removed.len(),
                    "snapshot image",
                    "snapshot images"
                )
            )),
        })
    }

    async fn prepare_image(&self, source: ImageSource<'_>) -> Result<String, ExecError> {
        let docker = client::connect().await?;
        match source {
            ImageSource::Named(name) => {
                image::ensure_image(&docker, name).await?;
                Ok(name.to_string())
            }
            ImageSource::Build {
                context,
                timeout,
                label,
                log,
            } => build::build_cached(
                &docker,
                context,
                timeout,
                label,
                &std::collections::HashMap::new(),
                log,
            )
            .await
            .map_err(|e| ExecError::ImageUnavailable {
                image: context.display().to_string(),
                detail: e.to_string(),
                hint: "fix the Dockerfile (the build's log says where it failed), or give the \
                       task an [environment] docker_image"
                    .into(),
            }),
        }
    }

    async fn remove_image(&self, image: &str) -> Result<(), ExecError> {
        let docker = client::connect().await?;
        super::snapshot::remove_image(&docker, image).await
    }

    async fn seed(
        &self,
        image: &str,
        dir: Option<&str>,
        host: &Path,
        run_id: &str,
    ) -> Result<Seeded, ExecError> {
        seed::seed_workspace(image, dir, host, run_id).await
    }

    async fn image_identity(&self, image: &str) -> Result<Option<String>, ExecError> {
        let docker = client::connect().await?;
        let info = client::call(
            "inspect image",
            image,
            client::CALL_TIMEOUT,
            docker.inspect_image(image),
        )
        .await?;
        Ok(info.id)
    }

    async fn start(&self, spec: SandboxSpec) -> Result<Arc<dyn Executor>, ExecError> {
        Ok(Arc::new(DockerExecutor::start(docker_config(&spec)).await?))
    }

    fn service_host(&self) -> Option<&dyn ServiceHost> {
        Some(self)
    }

    async fn answers(&self) -> bool {
        client::connect().await.is_ok()
    }

    async fn check_runtime(&self, requested: Option<&str>) -> Result<Option<String>, ExecError> {
        let requested = requested.filter(|r| !r.is_empty());
        let Ok(docker) = client::connect().await else {
            return Ok(None);
        };
        let Ok(engine) = EngineInfo::read(&docker).await else {
            return Ok(None);
        };
        Ok(Some(engine.check_runtime(requested, None)?))
    }
}

#[async_trait]
impl ServiceHost for DockerBackend {
    async fn start_services(&self, spec: ServicesSpec) -> Result<Arc<dyn Services>, ExecError> {
        Ok(Arc::new(super::DockerServices::start(spec).await?))
    }
}
