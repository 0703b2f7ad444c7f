//! One service's mapping read into [`MainService`] or [`Sidecar`], and the
//! sidecars' start order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::fields::{build_of, depends_on, env_of, healthcheck, volumes};
use super::keys::check_keys;
use super::{ComposeError, MainService, Sidecar, SidecarImage, values};
use crate::exec::backend::MAIN_SERVICE_ALIAS;

/// Parsing state for one file.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a Path,
    pub(super) task_dir: &'a Path,
    pub(super) vars: &'a BTreeMap<String, String>,
    pub(super) warnings: Vec<String>,
}

impl Ctx<'_> {
    pub(super) fn invalid(&self, place: &str, detail: impl Into<String>) -> ComposeError {
        ComposeError::Invalid {
            path: self.file.to_path_buf(),
            place: place.to_string(),
            detail: detail.into(),
        }
    }

    pub(super) fn refused(&self, service: &str, key: &str, why: impl Into<String>) -> ComposeError {
        ComposeError::Refused {
            path: self.file.to_path_buf(),
            service: service.to_string(),
            key: key.to_string(),
            why: why.into(),
        }
    }

    /// The directory relative paths of the file are resolved against.
    pub(super) fn base(&self) -> PathBuf {
        self.file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.task_dir.join("environment"))
    }

    /// `rel`, resolved against the file's directory, if it stays inside the
    /// task directory (lexically; [`start`] checks links too).
    pub(super) fn inside(&self, svc: &str, key: &str, rel: &str) -> Result<PathBuf, ComposeError> {
        let p = Path::new(rel);
        if p.is_absolute() {
            return Err(self.refused(svc, key, format!("'{rel}' is an absolute path on the host")));
        }
        let mut out = self.base();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(n) => out.push(n),
                _ => {}
            }
        }
        if !out.starts_with(self.task_dir) {
            return Err(self.refused(svc, key, format!("'{rel}' leaves the task directory")));
        }
        // The names stay inside, but a link they pass may not (`up/../x`
        // with `up -> ..`): where the path exists, where it really is counts.
        let real = |p: &Path| std::fs::canonicalize(p).ok();
        if let (Some(real_out), Some(root)) = (real(&out), real(self.task_dir))
            && !real_out.starts_with(&root)
        {
            return Err(self.refused(
                svc,
                key,
                format!("'{rel}' leaves the task directory through a link"),
            ));
        }
        Ok(out)
    }
}

/// Interpolates every string of `v` in place.
pub(super) fn interpolate_all(
    v: &mut Value,
    ctx: &mut Ctx<'_>,
    unset: &mut Vec<String>,
) -> Result<(), String> {
    match v {
        Value::String(s) => *s = values::interpolate(s, ctx.vars, unset)?,
        Value::Array(a) => {
            for x in a {
                interpolate_all(x, ctx, unset)?;
            }
        }
        Value::Object(m) => {
            for x in m.values_mut() {
                interpolate_all(x, ctx, unset)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A scalar as Compose reads it into a string.
pub(super) fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(super) fn parse_main(v: &Value, ctx: &mut Ctx<'_>) -> Result<MainService, ComposeError> {
    let name = MAIN_SERVICE_ALIAS;
    let Value::Object(body) = v else {
        return Ok(MainService::default());
    };
    check_keys(name, body, ctx)?;
    for key in ["command", "entrypoint", "healthcheck", "init", "read_only"] {
        if body.contains_key(key) {
            ctx.warnings.push(format!(
                "service 'main': `{key}` left out: runner's supervisor runs the agent's sandbox"
            ));
        }
    }
    if let Some(vols) = body.get("volumes").and_then(Value::as_array)
        && !vols.is_empty()
    {
        return Err(ctx.refused(
            name,
            "volumes",
            "the agent's sandbox gets no volumes (its work directory is runner's)",
        ));
    }
    Ok(MainService {
        env: env_of(name, body, ctx)?,
        working_dir: string_key(name, body, "working_dir", ctx)?,
        user: string_key(name, body, "user", ctx)?,
        image: string_key(name, body, "image", ctx)?,
        build: body
            .get("build")
            .map(|b| build_of(name, b, ctx))
            .transpose()?,
        depends_on: depends_on(name, body, ctx)?,
    })
}

pub(super) fn parse_sidecar(
    name: &str,
    v: &Value,
    ctx: &mut Ctx<'_>,
) -> Result<Sidecar, ComposeError> {
    if !crate::exec::backend::is_service_name(name) {
        return Err(ctx.invalid(
            &format!("service '{name}'"),
            "a service name must be lowercase letters, digits, '-' or '_'",
        ));
    }
    let Value::Object(body) = v else {
        return Err(ctx.invalid(&format!("service '{name}'"), "expected a mapping"));
    };
    check_keys(name, body, ctx)?;
    let image = match (body.get("build"), string_key(name, body, "image", ctx)?) {
        (Some(b), _) => build_of(name, b, ctx)?,
        (None, Some(image)) => SidecarImage::Named(image),
        (None, None) => {
            return Err(ctx.invalid(&format!("service '{name}'"), "neither `image` nor `build`"));
        }
    };
    let bool_key = |key: &str| body.get(key).and_then(Value::as_bool).unwrap_or(false);
    Ok(Sidecar {
        name: name.to_string(),
        image,
        env: env_of(name, body, ctx)?,
        command: words_key(name, body, "command", ctx)?,
        entrypoint: words_key(name, body, "entrypoint", ctx)?,
        user: string_key(name, body, "user", ctx)?,
        working_dir: string_key(name, body, "working_dir", ctx)?,
        healthcheck: body
            .get("healthcheck")
            .map(|h| healthcheck(name, h, ctx))
            .transpose()?
            .flatten(),
        depends_on: depends_on(name, body, ctx)?,
        volumes: volumes(name, body, ctx)?,
        read_only: bool_key("read_only"),
        init: bool_key("init"),
    })
}

pub(super) fn string_key(
    svc: &str,
    body: &serde_json::Map<String, Value>,
    key: &str,
    ctx: &Ctx<'_>,
) -> Result<Option<String>, ComposeError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => scalar(v)
            .map(Some)
            .ok_or_else(|| ctx.invalid(&format!("service '{svc}': `{key}`"), "expected a string")),
    }
}

/// A command or entrypoint: a list, or a string split like a shell does.
pub(super) fn words_key(
    svc: &str,
    body: &serde_json::Map<String, Value>,
    key: &str,
    ctx: &Ctx<'_>,
) -> Result<Option<Vec<String>>, ComposeError> {
    let place = format!("service '{svc}': `{key}`");
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => values::split_words(s)
            .map(Some)
            .map_err(|e| ctx.invalid(&place, e)),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| scalar(x).ok_or_else(|| ctx.invalid(&place, "expected strings")))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(ctx.invalid(&place, "expected a string or a list")),
    }
}

/// Orders the sidecars so each comes after what it depends on.
pub(super) fn start_order(
    mut left: Vec<Sidecar>,
    ctx: &Ctx<'_>,
) -> Result<Vec<Sidecar>, ComposeError> {
    let names: BTreeSet<String> = left.iter().map(|s| s.name.clone()).collect();
    for s in &left {
        for d in &s.depends_on {
            if d == MAIN_SERVICE_ALIAS {
                return Err(ctx.refused(&s.name, "depends_on", "sidecars start before `main`"));
            }
            if !names.contains(d) {
                return Err(ctx.invalid(
                    &format!("service '{}': `depends_on`", s.name),
                    format!("no service '{d}'"),
                ));
            }
        }
    }
    let mut out: Vec<Sidecar> = Vec::new();
    while !left.is_empty() {
        let ready = left.iter().position(|s| {
            s.depends_on
                .iter()
                .all(|d| out.iter().any(|o| &o.name == d))
        });
        match ready {
            Some(i) => out.push(left.remove(i)),
            None => {
                let cycle: Vec<String> = left.iter().map(|s| s.name.clone()).collect();
                return Err(
                    ctx.invalid("depends_on", format!("a cycle among {}", cycle.join(", ")))
                );
            }
        }
    }
    Ok(out)
}
