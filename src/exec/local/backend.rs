//! The local backend: no images, no isolation; its sandbox is a
//! [`LocalExecutor`] in the workspace.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::{LocalConfig, LocalExecutor};
use crate::exec::backend::{Backend, Capabilities, ImageSource, Network, SandboxSpec, Seeded};
use crate::exec::{ExecError, Executor};

/// The local backend: commands run on this host, in the workspace. It has
/// no images: an image name is only recorded, and seeding leaves the
/// workspace as it is. NOT a sandbox (see the module comment); eval on it
/// is for tests of the sandbox seam.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalBackend;

#[async_trait]
impl Backend for LocalBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            name: "local",
            isolated: false,
            networks: vec![Network::Bridge],
            images: false,
        }
    }

    async fn prepare_image(&self, source: ImageSource<'_>) -> Result<String, ExecError> {
        match source {
            ImageSource::Named(name) => Ok(name.to_string()),
            ImageSource::Build { .. } => Err(ExecError::Incapable {
                backend: "local",
                what: "build images",
                hint: "use --executor docker for a task with an environment/Dockerfile",
            }),
        }
    }

    async fn seed(
        &self,
        _image: &str,
        _dir: Option<&str>,
        host: &Path,
        _run_id: &str,
    ) -> Result<Seeded, ExecError> {
        Ok(Seeded {
            workdir: host.display().to_string(),
            skipped: 0,
            image_user: None,
            passwd: None,
            group: None,
        })
    }

    async fn start(&self, spec: SandboxSpec) -> Result<Arc<dyn Executor>, ExecError> {
        // Host processes reach whatever the host reaches: no list of
        // names can be held to.
        if spec.network == Network::Allowlist {
            return Err(ExecError::NoAllowlist {
                backend: "local",
                hint: "use --executor docker for --allow-host (or a task's network_mode = \"allowlist\")",
            });
        }
        let workdir = match (&spec.workdir, &spec.workspace) {
            (Some(w), _) => PathBuf::from(w),
            (None, Some(ws)) => ws.host.clone(),
            (None, None) => std::env::current_dir()?,
        };
        let executor = LocalExecutor::new(LocalConfig {
            workdir,
            env: spec.env.clone(),
            keep_background: spec.keep_background,
            shell: spec.shell,
        })
        .with_redactor(spec.redactor.clone())
        .with_root()?;
        executor.check_shell()?;
        Ok(Arc::new(executor))
    }
}
