//! The sandbox of a configuration: its backend and the backend-neutral
//! spec it starts from.

use std::sync::Arc;

use super::backend_for;
use crate::config::Config;
use crate::exec::backend::{Backend, SandboxSpec, WorkspaceSpec};
use crate::redact::Redactor;
use crate::workspace::Workspace;

/// The configured backend.
pub fn backend(config: &Config) -> Arc<dyn Backend> {
    backend_for(config.executor)
}

/// The sandbox of a run with `workspace` mounted as its working directory.
pub fn sandbox_spec(
    config: &Config,
    workspace: &Workspace,
    run_id: &str,
    redactor: &Redactor,
) -> SandboxSpec {
    let s = &config.sandbox;
    let defaults = SandboxSpec::new(&s.image, run_id);
    SandboxSpec {
        network: s.network,
        allowed_hosts: s.allowed_hosts.clone(),
        egress_network: s.egress_network.clone(),
        cpus: s.cpus,
        memory_bytes: s.memory_bytes,
        pids_limit: s.pids_limit,
        user: s.user.clone(),
        writable_rootfs: s.writable_rootfs,
        workspace: Some(WorkspaceSpec {
            host: workspace.path().to_path_buf(),
            mode: s.workspace_mode,
            exact: false,
        }),
        disk_bytes: s.disk_bytes,
        env: config.container_env(),
        redactor: redactor.clone(),
        max_run_time: config.max_time.unwrap_or(defaults.max_run_time),
        runtime: s.runtime.clone(),
        seccomp: s.seccomp.clone(),
        keep_background: config.keep_background,
        shell: config.shell,
        ..defaults
    }
}
