//! A task's `environment/docker-compose.yaml` (or `.yml`): the `main`
//! service (the agent's sandbox) and its sidecars (a database, a helper).
//!
//! Harbor merges the task's file over its own base, where `main` is built
//! from `environment/Dockerfile` (or is the task's prebuilt image) and
//! idles under `sleep infinity`; the task's file adds services and may
//! override `main`'s keys. Runner reads the same file, keeps of `main`
//! what shapes the agent's environment (`environment`, `env_file`,
//! `working_dir`, `user`, and reports `image`/`build` for the caller to
//! decide on), and runs the sidecars through [`crate::exec::backend::ServiceHost`]
//! on a per-attempt internal network.
//!
//! What would break the sandbox or cannot be honoured is refused, naming
//! the service and the key; what is harmless to leave out is listed in
//! [`Compose::warnings`] (unknown keys too). Interpolation (`${VAR}`) reads
//! only the variables the caller hands over, never the host's environment.

mod fields;
mod keys;
mod service;
mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::exec::ExecError;
use crate::exec::backend::{
    Backend, ImageSource, MAIN_SERVICE_ALIAS, ServiceHealthcheck, ServiceSpec, Services,
    ServicesSpec,
};
use fields::check_volumes_shared;
use service::{Ctx, interpolate_all, parse_main, parse_sidecar, start_order};

/// The file names looked for in `environment/`, in order.
pub const COMPOSE_FILES: [&str; 2] = ["docker-compose.yaml", "docker-compose.yml"];

/// Why a compose file cannot be used (exit 2 before anything starts).
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not valid YAML: {detail}", path.display())]
    Parse { path: PathBuf, detail: String },
    /// A key runner will not honour, for the reason given.
    #[error("{}: service '{service}': `{key}` is refused: {why}", path.display())]
    Refused {
        path: PathBuf,
        service: String,
        key: String,
        why: String,
    },
    #[error("{}: {place}: {detail}", path.display())]
    Invalid {
        path: PathBuf,
        place: String,
        detail: String,
    },
}

impl ComposeError {
    /// What the task's author can do.
    pub fn hint(&self) -> &'static str {
        match self {
            ComposeError::Refused { .. } => {
                "remove the key from the task's docker-compose file; runner's sandbox cannot give it \
                 (see README, Eval: docker-compose tasks)"
            }
            _ => "fix the task's environment/docker-compose.yaml",
        }
    }
}

/// Where a sidecar's image comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum SidecarImage {
    /// An image that must be on the engine already (no registry is asked
    /// unless the backend can).
    Named(String),
    /// Built from a directory of the task (inside it, checked).
    Build {
        context: PathBuf,
        dockerfile: Option<String>,
    },
}

/// What a sidecar waits for before it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Sidecar {
    pub name: String,
    pub image: SidecarImage,
    pub env: Vec<(String, String)>,
    pub command: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub user: Option<String>,
    pub working_dir: Option<String>,
    pub healthcheck: Option<ServiceHealthcheck>,
    /// Services started (and healthy, when they have a healthcheck) first.
    pub depends_on: Vec<String>,
    /// Targets of its own volumes (anonymous, removed with it).
    pub volumes: Vec<String>,
    pub read_only: bool,
    pub init: bool,
}

/// The agent's service, as far as the compose file shapes it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MainService {
    /// `environment` and `env_file`, in order (the later wins).
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    /// `image`, after interpolation: Harbor's base names it
    /// `${MAIN_IMAGE_NAME}` (its build of environment/Dockerfile); another
    /// name means a prebuilt image the task wants instead.
    pub image: Option<String>,
    /// `build`: Harbor's base builds environment/Dockerfile; a task may
    /// point it elsewhere (checked to stay inside the task).
    pub build: Option<SidecarImage>,
    pub depends_on: Vec<String>,
}

/// A parsed compose file.
#[derive(Debug, Clone, PartialEq)]
pub struct Compose {
    pub file: PathBuf,
    pub main: MainService,
    /// In start order (every service after those it depends on).
    pub sidecars: Vec<Sidecar>,
    /// Keys left out (harmless here) and unknown keys, one line each.
    pub warnings: Vec<String>,
}

impl Compose {
    /// `main`'s environment from the compose file.
    pub fn main_env(&self) -> &[(String, String)] {
        &self.main.env
    }

    /// The sidecars' names, in start order.
    pub fn sidecar_names(&self) -> Vec<String> {
        self.sidecars.iter().map(|s| s.name.clone()).collect()
    }
}

/// The task's compose file, if it has one.
pub fn find(task_dir: &Path) -> Option<PathBuf> {
    COMPOSE_FILES
        .iter()
        .map(|f| task_dir.join("environment").join(f))
        .find(|p| p.is_file())
}

/// Reads and parses the task's compose file; `Ok(None)` without one.
/// `vars` are the only variables `${...}` may name.
pub fn load(
    task_dir: &Path,
    vars: &BTreeMap<String, String>,
) -> Result<Option<Compose>, ComposeError> {
    let Some(file) = find(task_dir) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&file).map_err(|source| ComposeError::Read {
        path: file.clone(),
        source,
    })?;
    parse(&text, &file, task_dir, vars).map(Some)
}

/// Parses the text of a compose file found at `file` in task `task_dir`.
pub fn parse(
    text: &str,
    file: &Path,
    task_dir: &Path,
    vars: &BTreeMap<String, String>,
) -> Result<Compose, ComposeError> {
    let mut doc: Value = serde_saphyr::from_str(text).map_err(|e| ComposeError::Parse {
        path: file.to_path_buf(),
        detail: e.to_string(),
    })?;
    let mut ctx = Ctx {
        file,
        task_dir,
        vars,
        warnings: Vec::new(),
    };
    let mut unset = Vec::new();
    interpolate_all(&mut doc, &mut ctx, &mut unset).map_err(|e| ctx.invalid("interpolation", e))?;
    if !unset.is_empty() {
        ctx.warnings.push(format!(
            "variables not set, read as empty: {}",
            unset.join(", ")
        ));
    }
    let Value::Object(top) = doc else {
        return Err(ctx.invalid("the file", "expected a mapping with `services`"));
    };
    for key in top.keys() {
        match key.as_str() {
            "services" | "volumes" | "version" | "name" => {}
            "networks" => ctx
                .warnings
                .push("top-level `networks` left out: services share one internal network".into()),
            "secrets" | "configs" | "include" => {
                return Err(ctx.refused("(top level)", key, "it reads files from the host"));
            }
            k if k.starts_with("x-") => {}
            k => ctx
                .warnings
                .push(format!("unknown top-level key `{k}` left out")),
        }
    }
    let Some(Value::Object(services)) = top.get("services") else {
        return Err(ctx.invalid("the file", "no `services` mapping"));
    };
    let Some(main) = services.get(MAIN_SERVICE_ALIAS) else {
        return Err(ctx.invalid(
            "services",
            "no `main` service (the agent's container must be called `main`)",
        ));
    };
    let main = parse_main(main, &mut ctx)?;
    let mut sidecars = Vec::new();
    for (name, body) in services {
        if name != MAIN_SERVICE_ALIAS {
            sidecars.push(parse_sidecar(name, body, &mut ctx)?);
        }
    }
    check_volumes_shared(services, &ctx)?;
    let sidecars = start_order(sidecars, &ctx)?;
    Ok(Compose {
        file: file.to_path_buf(),
        main,
        sidecars,
        warnings: ctx.warnings,
    })
}

/// The default longest build of one sidecar image.
pub const DEFAULT_SIDECAR_BUILD_SECS: u64 = 600;

/// No sidecars: nothing runs, no network to join.
struct NoServices;

#[async_trait]
impl Services for NoServices {
    fn network(&self) -> Option<String> {
        None
    }
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
    async fn stop(&self) -> Result<(), ExecError> {
        Ok(())
    }
}

/// Makes each sidecar's image ready (a build context is checked again with
/// links resolved) and starts the sidecars with `base`'s limits; with no
/// sidecars, returns services with no network. Join the main sandbox with
/// [`crate::exec::backend::SandboxSpec::join_services`].
pub async fn start(
    compose: &Compose,
    task_dir: &Path,
    backend: &dyn Backend,
    base: ServicesSpec,
    build_timeout: Duration,
) -> Result<Arc<dyn Services>, ExecError> {
    if compose.sidecars.is_empty() {
        return Ok(Arc::new(NoServices));
    }
    let Some(host) = backend.service_host() else {
        return Err(ExecError::Incapable {
            backend: backend.capabilities().name,
            what: "run a task's sidecar services",
            hint: "docker-compose tasks need --executor docker",
        });
    };
    let root = task_dir.canonicalize()?;
    let mut services = Vec::new();
    for s in &compose.sidecars {
        let image = match &s.image {
            SidecarImage::Named(name) => backend.prepare_image(ImageSource::Named(name)).await?,
            SidecarImage::Build { context, .. } => {
                let real = context.canonicalize().map_err(|e| {
                    ExecError::Refused(format!(
                        "service '{}': build context {}: {e}",
                        s.name,
                        context.display()
                    ))
                })?;
                if !real.starts_with(&root) {
                    return Err(ExecError::Refused(format!(
                        "service '{}': build context {} leaves the task directory through a link",
                        s.name,
                        context.display()
                    )));
                }
                let label = format!("compose:{}", s.name);
                backend
                    .prepare_image(ImageSource::Build {
                        context: &real,
                        timeout: build_timeout,
                        label: &label,
                        log: None,
                    })
                    .await?
            }
        };
        services.push(ServiceSpec {
            name: s.name.clone(),
            image,
            env: s.env.clone(),
            command: s.command.clone(),
            entrypoint: s.entrypoint.clone(),
            user: s.user.clone(),
            workdir: s.working_dir.clone(),
            healthcheck: s.healthcheck.clone(),
            volumes: s.volumes.clone(),
            read_only: s.read_only,
            init: s.init,
        });
    }
    host.start_services(ServicesSpec { services, ..base }).await
}

#[cfg(test)]
mod tests;
