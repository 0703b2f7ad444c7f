//! The keys of a service that take more than a string: environment and
//! env files, build, healthcheck, depends_on, volumes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::service::{Ctx, scalar};
use super::{ComposeError, SidecarImage, values};
use crate::exec::backend::ServiceHealthcheck;

/// `env_file` then `environment` (list `K=V` or map); a name without a
/// value takes the caller's variable of that name, never the host's.
pub(super) fn env_of(
    svc: &str,
    body: &serde_json::Map<String, Value>,
    ctx: &mut Ctx<'_>,
) -> Result<Vec<(String, String)>, ComposeError> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        env.retain(|(e, _)| *e != k);
        env.push((k, v));
    };
    let files: Vec<String> = match body.get("env_file") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| scalar(x).or_else(|| x.get("path").and_then(scalar)))
            .collect(),
        Some(x) => scalar(x).into_iter().collect(),
    };
    for f in files {
        let path = ctx.inside(svc, "env_file", &f)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ctx.invalid(&format!("service '{svc}': `env_file` {f}"), e.to_string()))?;
        for (k, v) in values::env_file(&text)
            .map_err(|e| ctx.invalid(&format!("service '{svc}': `env_file` {f}"), e))?
        {
            set(&mut env, k, v);
        }
    }
    let from_vars = |k: &str, ctx: &mut Ctx<'_>| match ctx.vars.get(k) {
        Some(v) => Some(v.clone()),
        None => {
            ctx.warnings.push(format!(
                "service '{svc}': `environment` {k} has no value and is left out \
                 (the host's environment is never passed)"
            ));
            None
        }
    };
    match body.get("environment") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for item in a {
                let Some(item) = scalar(item) else {
                    return Err(
                        ctx.invalid(&format!("service '{svc}': `environment`"), "expected K=V")
                    );
                };
                match item.split_once('=') {
                    Some((k, v)) => set(&mut env, k.to_string(), v.to_string()),
                    None => {
                        if let Some(v) = from_vars(&item, ctx) {
                            set(&mut env, item, v);
                        }
                    }
                }
            }
        }
        Some(Value::Object(m)) => {
            for (k, v) in m {
                match scalar(v) {
                    Some(v) => set(&mut env, k.clone(), v),
                    None => {
                        if let Some(v) = from_vars(k, ctx) {
                            set(&mut env, k.clone(), v);
                        }
                    }
                }
            }
        }
        Some(_) => {
            return Err(ctx.invalid(
                &format!("service '{svc}': `environment`"),
                "expected a list or a map",
            ));
        }
    }
    if let Some((k, _)) = env
        .iter()
        .find(|(k, _)| k.is_empty() || k.contains(char::is_whitespace))
    {
        return Err(ctx.invalid(
            &format!("service '{svc}': `environment`"),
            format!("invalid name '{k}'"),
        ));
    }
    Ok(env)
}

/// `build: DIR` or `build: {context, dockerfile}`, inside the task.
pub(super) fn build_of(
    svc: &str,
    v: &Value,
    ctx: &mut Ctx<'_>,
) -> Result<SidecarImage, ComposeError> {
    let (context, dockerfile) = match v {
        Value::String(s) => (s.clone(), None),
        Value::Object(m) => {
            for k in m.keys() {
                match k.as_str() {
                    "context" | "dockerfile" => {}
                    "args"
                        if m.get("args").is_some_and(|a| {
                            a.as_object().is_some_and(|o| !o.is_empty())
                                || a.as_array().is_some_and(|l| !l.is_empty())
                        }) =>
                    {
                        return Err(ctx.refused(
                            svc,
                            "build.args",
                            "build arguments are not supported",
                        ));
                    }
                    "dockerfile_inline" | "ssh" | "secrets" | "additional_contexts" | "network" => {
                        return Err(ctx.refused(
                            svc,
                            &format!("build.{k}"),
                            "not supported by runner's builds",
                        ));
                    }
                    other => ctx
                        .warnings
                        .push(format!("service '{svc}': `build.{other}` left out")),
                }
            }
            (
                m.get("context")
                    .and_then(scalar)
                    .unwrap_or_else(|| ".".into()),
                m.get("dockerfile").and_then(scalar),
            )
        }
        _ => {
            return Err(ctx.invalid(
                &format!("service '{svc}': `build`"),
                "expected a path or a mapping",
            ));
        }
    };
    if let Some(d) = dockerfile.as_deref()
        && d != "Dockerfile"
    {
        return Err(ctx.refused(
            svc,
            "build.dockerfile",
            format!("'{d}': the Dockerfile must be called Dockerfile at the context's root"),
        ));
    }
    Ok(SidecarImage::Build {
        context: ctx.inside(svc, "build.context", &context)?,
        dockerfile,
    })
}

/// Compose's healthcheck; `None` when disabled.
pub(super) fn healthcheck(
    svc: &str,
    v: &Value,
    ctx: &Ctx<'_>,
) -> Result<Option<ServiceHealthcheck>, ComposeError> {
    let place = format!("service '{svc}': `healthcheck`");
    let Value::Object(m) = v else {
        return Err(ctx.invalid(&place, "expected a mapping"));
    };
    if m.get("disable").and_then(Value::as_bool) == Some(true) {
        return Ok(None);
    }
    let test = match m.get("test") {
        Some(Value::String(s)) => vec!["CMD-SHELL".to_string(), s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(scalar).collect(),
        _ => return Err(ctx.invalid(&place, "`test` missing")),
    };
    match test.first().map(String::as_str) {
        Some("NONE") => return Ok(None),
        Some("CMD" | "CMD-SHELL") if test.len() > 1 => {}
        _ => return Err(ctx.invalid(&place, "`test` must start with CMD, CMD-SHELL or NONE")),
    }
    // Docker's defaults.
    let dur = |key: &str, default: Duration| -> Result<Duration, ComposeError> {
        m.get(key)
            .and_then(scalar)
            .map_or(Ok(default), |s| values::duration(&s))
            .map_err(|e| ctx.invalid(&format!("{place}.{key}"), e))
    };
    let retries = match m.get("retries") {
        None => 3,
        Some(r) => r
            .as_u64()
            .and_then(|r| u32::try_from(r).ok())
            .ok_or_else(|| ctx.invalid(&format!("{place}.retries"), "expected a number"))?,
    };
    for k in m.keys() {
        if !matches!(
            k.as_str(),
            "test" | "interval" | "timeout" | "retries" | "start_period" | "disable"
        ) {
            return Err(ctx.invalid(&place, format!("unsupported key `{k}`")));
        }
    }
    Ok(Some(ServiceHealthcheck {
        test,
        interval: dur("interval", Duration::from_secs(30))?,
        timeout: dur("timeout", Duration::from_secs(30))?,
        retries,
        start_period: dur("start_period", Duration::ZERO)?,
    }))
}

/// `depends_on` as a list or a map of conditions.
pub(super) fn depends_on(
    svc: &str,
    body: &serde_json::Map<String, Value>,
    ctx: &Ctx<'_>,
) -> Result<Vec<String>, ComposeError> {
    match body.get("depends_on") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => Ok(a.iter().filter_map(scalar).collect()),
        Some(Value::Object(m)) => {
            for (dep, cond) in m {
                let c = cond.get("condition").and_then(scalar);
                if c.as_deref() == Some("service_completed_successfully") {
                    return Err(ctx.refused(
                        svc,
                        &format!("depends_on.{dep}.condition"),
                        "one-shot services (service_completed_successfully) are not supported",
                    ));
                }
            }
            Ok(m.keys().cloned().collect())
        }
        Some(_) => Err(ctx.invalid(
            &format!("service '{svc}': `depends_on`"),
            "expected a list or a map",
        )),
    }
}

/// The source and target of one `volumes` entry.
pub(super) fn volume_entry(v: &Value) -> Option<(Option<String>, String, Option<String>)> {
    match v {
        Value::String(s) => {
            let parts: Vec<&str> = s.split(':').collect();
            match parts.as_slice() {
                [t] => Some((None, t.to_string(), None)),
                [src, t, ..] => Some((Some(src.to_string()), t.to_string(), None)),
                [] => None,
            }
        }
        Value::Object(m) => Some((
            m.get("source").and_then(scalar),
            m.get("target").and_then(scalar)?,
            m.get("type").and_then(scalar),
        )),
        _ => None,
    }
}

/// A sidecar's volumes: anonymous ones and named ones of its own become
/// anonymous volumes of the container; host paths are refused.
pub(super) fn volumes(
    svc: &str,
    body: &serde_json::Map<String, Value>,
    ctx: &Ctx<'_>,
) -> Result<Vec<String>, ComposeError> {
    let Some(list) = body.get("volumes") else {
        return Ok(Vec::new());
    };
    let Value::Array(list) = list else {
        return Err(ctx.invalid(&format!("service '{svc}': `volumes`"), "expected a list"));
    };
    let mut out = Vec::new();
    for v in list {
        let Some((src, target, typ)) = volume_entry(v) else {
            return Err(ctx.invalid(
                &format!("service '{svc}': `volumes`"),
                "expected SOURCE:TARGET",
            ));
        };
        let host = typ.as_deref() == Some("bind")
            || src
                .as_deref()
                .is_some_and(|s| s.starts_with(['/', '.', '~']));
        if host || typ.as_deref().is_some_and(|t| t != "volume") {
            return Err(ctx.refused(
                svc,
                "volumes",
                format!(
                    "'{}' is not a volume of the service's own (host paths, tmpfs and others are refused)",
                    src.unwrap_or(target)
                ),
            ));
        }
        if !target.starts_with('/') {
            return Err(ctx.invalid(
                &format!("service '{svc}': `volumes`"),
                format!("'{target}' is not absolute"),
            ));
        }
        out.push(target);
    }
    Ok(out)
}

/// Refuses a named volume used by two services: each service's volumes
/// are its own here.
pub(super) fn check_volumes_shared(
    services: &serde_json::Map<String, Value>,
    ctx: &Ctx<'_>,
) -> Result<(), ComposeError> {
    let mut users: BTreeMap<String, String> = BTreeMap::new();
    for (svc, body) in services {
        for v in body
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some((Some(name), _, _)) = volume_entry(v)
                && let Some(first) = users.insert(name.clone(), svc.clone())
                && first != *svc
            {
                return Err(ctx.refused(
                    svc,
                    "volumes",
                    format!(
                        "volume '{name}' is shared with service '{first}'; shared volumes are not supported"
                    ),
                ));
            }
        }
    }
    Ok(())
}
