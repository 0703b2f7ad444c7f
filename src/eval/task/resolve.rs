//! Resolving one parsed task.toml into a [`Task`]'s fields: every key of
//! Harbor's schema is honoured or refused here, naming the file and the
//! key; keys Harbor does not know become warnings.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use super::*;

/// Resolves one parsed task.toml into a [`Task`]'s fields.
pub(super) struct Loader<'a> {
    pub(super) path: &'a Path,
    pub(super) raw: &'a toml::Table,
    pub(super) lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl Loader<'_> {
    fn invalid(&self, key: &str, message: impl fmt::Display) -> TaskError {
        TaskError::Invalid {
            path: self.path.to_path_buf(),
            message: format!("{key}: {message}"),
        }
    }

    fn refused(&self, key: &str, what: impl Into<String>, hint: impl Into<String>) -> TaskError {
        TaskError::Refused {
            path: self.path.to_path_buf(),
            key: key.to_string(),
            what: what.into(),
            hint: hint.into(),
        }
    }

    fn warn(&self, key: &str, what: &str) -> String {
        format!("{}: {key}: {what}", self.path.display())
    }

    fn positive(&self, key: &str, v: f64) -> Result<f64, TaskError> {
        if v > 0.0 && v.is_finite() {
            Ok(v)
        } else {
            Err(self.invalid(key, format!("must be > 0, got {v}")))
        }
    }

    fn timeout(&self, key: &str, v: f64) -> Result<f64, TaskError> {
        let v = self.positive(key, v)?;
        if v > MAX_TASK_TIMEOUT_SECS {
            return Err(self.invalid(
                key,
                format!("must be at most {MAX_TASK_TIMEOUT_SECS} (a week), got {v}"),
            ));
        }
        Ok(v)
    }

    /// A duration of seconds >= 0 and at most a week.
    fn seconds(&self, key: &str, v: f64) -> Result<Duration, TaskError> {
        if !(v.is_finite() && (0.0..=MAX_TASK_TIMEOUT_SECS).contains(&v)) {
            return Err(self.invalid(
                key,
                format!("must be between 0 and {MAX_TASK_TIMEOUT_SECS} (a week), got {v}"),
            ));
        }
        Ok(Duration::from_secs_f64(v))
    }

    pub(super) fn task(
        &self,
        dir: &Path,
        instruction: String,
        config: TaskToml,
    ) -> Result<Task, TaskError> {
        let mut warnings: Vec<String> = schema::unknown_keys(self.raw)
            .iter()
            .map(|k| self.warn(k, "not a key of Harbor's task.toml schema; ignored"))
            .collect();
        self.refusals(&config, &mut warnings)?;
        let env = &config.environment;
        self.environment_refusals(env, "environment")?;
        let memory_bytes = self.memory_bytes(env)?;
        let storage_bytes = self.storage_bytes(env)?;
        let network = self.baseline_network(env, "environment")?;
        let agent_network = self.network(
            "agent",
            config.agent.network_mode.as_deref(),
            config.agent.allowed_hosts.as_ref(),
        )?;
        let grading = self.grading(&config.verifier)?;
        let (verifier_image, separate_network) = self.verifier_environment(&config)?;
        let verifier_network = self
            .network(
                "verifier",
                config.verifier.network_mode.as_deref(),
                config.verifier.allowed_hosts.as_ref(),
            )?
            .or(separate_network);
        let verifier_build_dir = (grading == Some(GradingMode::Separate)
            && verifier_image.is_none()
            && dir.join("tests").join("Dockerfile").is_file())
        .then(|| dir.join("tests"));
        let compose_file = ["docker-compose.yaml", "docker-compose.yml"]
            .iter()
            .map(|f| dir.join("environment").join(f))
            .find(|p| p.is_file());
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "task".into());
        let agent_timeout_secs = self.timeout(
            "agent.timeout_sec",
            config
                .agent
                .timeout_sec
                .unwrap_or(DEFAULT_AGENT_TIMEOUT_SECS),
        )?;
        let verifier_timeout_secs = self.timeout(
            "verifier.timeout_sec",
            config
                .verifier
                .timeout_sec
                .unwrap_or(DEFAULT_VERIFIER_TIMEOUT_SECS),
        )?;
        let build_timeout_secs = self.timeout(
            "environment.build_timeout_sec",
            env.build_timeout_sec.unwrap_or(DEFAULT_BUILD_TIMEOUT_SECS),
        )?;
        let cpus = self.positive("environment.cpus", env.cpus.unwrap_or(DEFAULT_TASK_CPUS))?;
        Ok(Task {
            name,
            dir: dir.to_path_buf(),
            source_dir: dir.to_path_buf(),
            instruction,
            agent_timeout_secs,
            verifier_timeout_secs,
            build_timeout_secs,
            cpus,
            memory_bytes,
            allow_internet: agent_network.as_ref().unwrap_or(&network) == &TaskNetwork::Public,
            agent_user: self.user("agent.user", config.agent.user.as_deref())?,
            verifier_user: self.user("verifier.user", config.verifier.user.as_deref())?,
            workdir: self.workdir(env.workdir.as_deref())?,
            env: self.env("environment.env", &env.env)?,
            solution_env: self.env("solution.env", &config.solution.env)?,
            verifier_env: self.env("verifier.env", &config.verifier.env)?,
            grading,
            verifier_image,
            verifier_build_dir,
            storage_bytes,
            network,
            agent_network,
            verifier_network,
            healthcheck: self.healthcheck(env.healthcheck.as_ref())?,
            artifacts: config
                .artifacts
                .iter()
                .enumerate()
                .map(|(i, a)| self.artifact(i, a))
                .collect::<Result<_, _>>()?,
            compose_file,
            warnings,
            materialized: None,
            config,
        })
    }

    /// The keys of the whole file that runner refuses, and the ones that
    /// have no effect.
    fn refusals(&self, c: &TaskToml, warnings: &mut Vec<String>) -> Result<(), TaskError> {
        if c.steps.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(self.refused(
                "steps",
                "multi-step tasks ([[steps]]) are not supported yet",
                "grade each step as its own task, or run this task with Harbor",
            ));
        }
        if let Some(s) = &c.multi_step_reward_strategy {
            if !matches!(s.as_str(), "mean" | "final") {
                return Err(self.invalid(
                    "multi_step_reward_strategy",
                    format!("'{s}' is not one of mean, final"),
                ));
            }
            warnings.push(self.warn(
                "multi_step_reward_strategy",
                "has no effect: the task has no [[steps]]",
            ));
        }
        if !c.verifier.collect.is_empty() {
            return Err(self.refused(
                "verifier.collect",
                "collect hooks ([[verifier.collect]]) are not supported yet",
                "write the state test.sh needs to files under /logs/artifacts from the task itself",
            ));
        }
        Ok(())
    }

    /// The keys of an `[environment]` (or `[verifier.environment]`) that
    /// runner cannot give, under `prefix`.
    fn environment_refusals(
        &self,
        env: &EnvironmentSection,
        prefix: &str,
    ) -> Result<(), TaskError> {
        const NO_GPUS: &str = "needs GPUs; runner's engines give none";
        const GPU_HINT: &str =
            "run this task with Harbor on a GPU provider, or leave it out (--filter)";
        match env.gpus {
            Some(n) if n > 0 => {
                return Err(self.refused(&format!("{prefix}.gpus"), NO_GPUS, GPU_HINT));
            }
            Some(n) if n < 0 => {
                return Err(
                    self.invalid(&format!("{prefix}.gpus"), format!("must be >= 0, got {n}"))
                );
            }
            _ => {}
        }
        if env.gpu_types.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(self.refused(&format!("{prefix}.gpu_types"), NO_GPUS, GPU_HINT));
        }
        if env.tpu.is_some() {
            return Err(self.refused(
                &format!("{prefix}.tpu"),
                "needs a TPU; runner's engines give none",
                GPU_HINT,
            ));
        }
        if let Some(os) = &env.os {
            match os.to_ascii_lowercase().as_str() {
                "linux" => {}
                "windows" => {
                    return Err(self.refused(
                        &format!("{prefix}.os"),
                        "Windows containers are not supported",
                        "runner runs Linux containers only; run this task with Harbor on a Windows host",
                    ));
                }
                _ => {
                    return Err(self.invalid(
                        &format!("{prefix}.os"),
                        format!("'{os}' is not one of linux, windows"),
                    ));
                }
            }
        }
        if !env.mcp_servers.is_empty() {
            return Err(self.refused(
                &format!("{prefix}.mcp_servers"),
                "MCP servers are not supported yet",
                "remove [[environment.mcp_servers]] or run this task with Harbor",
            ));
        }
        if env.skills_dir.is_some() {
            return Err(self.refused(
                &format!("{prefix}.skills_dir"),
                "agent skills are not supported yet",
                "remove skills_dir, or put what the agent needs in the instruction",
            ));
        }
        Ok(())
    }

    fn memory_bytes(&self, env: &EnvironmentSection) -> Result<i64, TaskError> {
        let mb = self
            .legacy_size(
                "environment.memory",
                env.memory.as_deref(),
                env.memory_mb,
                "memory_mb",
            )?
            .unwrap_or(DEFAULT_TASK_MEMORY_MB);
        // A value past i64 bytes is refused rather than wrapped into a small limit.
        i64::try_from(mb)
            .ok()
            .and_then(|mb| mb.checked_mul(1 << 20))
            .ok_or_else(|| self.invalid("environment.memory_mb", format!("{mb} is too large")))
    }

    fn storage_bytes(&self, env: &EnvironmentSection) -> Result<Option<u64>, TaskError> {
        let mb = self.legacy_size(
            "environment.storage",
            env.storage.as_deref(),
            env.storage_mb,
            "storage_mb",
        )?;
        mb.map(|mb| {
            mb.checked_mul(1 << 20)
                .filter(|b| i64::try_from(*b).is_ok())
                .ok_or_else(|| self.invalid("environment.storage_mb", format!("{mb} is too large")))
        })
        .transpose()
    }

    /// MiB from `*_mb`, or from the older size string as Harbor maps it; both
    /// given and different is an error, as in Harbor.
    fn legacy_size(
        &self,
        key: &str,
        legacy: Option<&str>,
        mb: Option<u64>,
        mb_key: &str,
    ) -> Result<Option<u64>, TaskError> {
        let Some(s) = legacy else { return Ok(mb) };
        let parsed = harbor_size_mb(s)
            .ok_or_else(|| self.invalid(key, format!("'{s}' is not a size like 1G or 512M")))?;
        if let Some(mb) = mb.filter(|mb| *mb != parsed) {
            return Err(self.invalid(
                key,
                format!("'{s}' ({parsed} MB) conflicts with {mb_key} = {mb}; keep one"),
            ));
        }
        Ok(Some(parsed))
    }

    /// A phase's explicit policy, if any.
    fn network(
        &self,
        section: &str,
        mode: Option<&str>,
        hosts: Option<&Vec<String>>,
    ) -> Result<Option<TaskNetwork>, TaskError> {
        let parsed = match mode {
            None => None,
            Some("no-network") => Some(TaskNetwork::NoNetwork),
            Some("public") => Some(TaskNetwork::Public),
            Some("allowlist") => Some(TaskNetwork::Allowlist(
                self.allowed_hosts(section, hosts.map(Vec::as_slice).unwrap_or_default())?,
            )),
            Some(m) => {
                return Err(self.invalid(
                    &format!("{section}.network_mode"),
                    format!("'{m}' is not one of no-network, public, allowlist"),
                ));
            }
        };
        // As Harbor: the list belongs to the allowlist mode only.
        if hosts.is_some() && !matches!(parsed, Some(TaskNetwork::Allowlist(_))) {
            return Err(self.invalid(
                &format!("{section}.allowed_hosts"),
                "is only valid with network_mode = 'allowlist'",
            ));
        }
        Ok(parsed)
    }

    /// `allowed_hosts`, validated and normalized as Harbor does; IP
    /// addresses and CIDR ranges (which Harbor takes) are refused.
    fn allowed_hosts(&self, section: &str, hosts: &[String]) -> Result<Vec<String>, TaskError> {
        use crate::exec::egress::{HostPatternError, normalize_host_patterns};
        let key = format!("{section}.allowed_hosts");
        normalize_host_patterns(hosts).map_err(|e| match e {
            HostPatternError::Address(_) => self.refused(
                &key,
                format!("{e} (runner's proxy decides by the name asked for)"),
                "list the host names instead of addresses or CIDR ranges",
            ),
            HostPatternError::Path(ref p) if is_cidr(p) => self.refused(
                &key,
                format!("allowed host '{p}' is a CIDR range; runner's proxy admits names only"),
                "list the host names instead of addresses or CIDR ranges",
            ),
            HostPatternError::Port(ref p) if p.parse::<std::net::Ipv6Addr>().is_ok() => self
                .refused(
                    &key,
                    format!(
                        "allowed host '{p}' is an IP address; runner's proxy admits names only"
                    ),
                    "list the host names instead of addresses or CIDR ranges",
                ),
            e => self.invalid(&key, e),
        })
    }

    /// An environment's policy: `network_mode`, else the older
    /// `allow_internet` (as Harbor maps it), else public.
    fn baseline_network(
        &self,
        env: &EnvironmentSection,
        section: &str,
    ) -> Result<TaskNetwork, TaskError> {
        let explicit = self.network(
            section,
            env.network_mode.as_deref(),
            env.allowed_hosts.as_ref(),
        )?;
        let legacy = (env.allowed_hosts.is_none())
            .then_some(env.allow_internet)
            .flatten();
        Ok(explicit
            .or(legacy.map(|a| {
                if a {
                    TaskNetwork::Public
                } else {
                    TaskNetwork::NoNetwork
                }
            }))
            .unwrap_or_default())
    }

    fn grading(&self, v: &VerifierSection) -> Result<Option<GradingMode>, TaskError> {
        match (v.environment_mode.as_deref(), &v.environment) {
            (None, None) => Ok(None),
            (None, Some(_)) | (Some("separate"), _) => Ok(Some(GradingMode::Separate)),
            (Some("shared"), Some(_)) => Err(self.invalid(
                "verifier.environment_mode",
                "'shared' is incompatible with [verifier.environment]; omit the environment or set environment_mode = 'separate'",
            )),
            (Some("shared"), None) => Ok(Some(GradingMode::Shared)),
            (Some(m), _) => Err(self.invalid(
                "verifier.environment_mode",
                format!("'{m}' is not one of shared, separate (runner's snapshot and isolated are chosen with --grading)"),
            )),
        }
    }

    /// `[verifier.environment]`: its image and network policy; its other
    /// keys only as the task's own `[environment]` values.
    fn verifier_environment(
        &self,
        c: &TaskToml,
    ) -> Result<(Option<String>, Option<TaskNetwork>), TaskError> {
        let Some(venv) = &c.verifier.environment else {
            return Ok((None, None));
        };
        const PREFIX: &str = "verifier.environment";
        self.environment_refusals(venv, PREFIX)?;
        let network = self.baseline_network(venv, PREFIX)?;
        let raw = |t: Option<&toml::Value>, k: &str| {
            t.and_then(toml::Value::as_table)
                .and_then(|t| t.get(k))
                .cloned()
        };
        let top = self.raw.get("environment");
        let own = self.raw.get("verifier").and_then(|v| v.get("environment"));
        let handled = [
            "docker_image",
            "network_mode",
            "allowed_hosts",
            "allow_internet",
            "os",
            "gpus",
            "gpu_types",
            "tpu",
            "mcp_servers",
            "skills_dir",
        ];
        for key in schema::ENVIRONMENT.iter().filter(|k| !handled.contains(k)) {
            let mine = raw(own, key);
            if mine.is_some() && mine != raw(top, key) {
                return Err(self.refused(
                    &format!("{PREFIX}.{key}"),
                    "a separate verifier environment with its own value is not supported yet",
                    format!("runner's separate verifier uses the task's [environment]: give environment.{key} the same value, or remove this one"),
                ));
            }
        }
        Ok((venv.docker_image.clone(), Some(network)))
    }

    fn user(&self, key: &str, user: Option<&str>) -> Result<Option<String>, TaskError> {
        match user {
            Some(u) if u.trim().is_empty() || u.contains(['\0', '\n']) => {
                Err(self.invalid(key, format!("{u:?} is not a user name or uid")))
            }
            u => Ok(u.map(str::to_string)),
        }
    }

    fn workdir(&self, w: Option<&str>) -> Result<Option<String>, TaskError> {
        let Some(w) = w else { return Ok(None) };
        if !w.starts_with('/') || w.split('/').any(|p| p == "..") || w.contains('\0') {
            return Err(self.invalid(
                "environment.workdir",
                format!("'{w}' must be an absolute path without '..'"),
            ));
        }
        Ok(Some(w.to_string()))
    }

    fn env(
        &self,
        key: &str,
        table: &BTreeMap<String, String>,
    ) -> Result<Vec<(String, String)>, TaskError> {
        table
            .iter()
            .map(|(name, value)| {
                if name.is_empty() || name.contains(['=', '\0']) {
                    return Err(self.invalid(key, format!("{name:?} is not a variable name")));
                }
                if let Some((var, _)) = envsubst::template(value)
                    && crate::redact::is_credential_name(var)
                    && !envsubst::secret_allowed(var)
                    && (self.lookup)(var).is_some()
                {
                    return Err(TaskError::SecretVar {
                        path: self.path.to_path_buf(),
                        key: format!("{key}.{name}"),
                        var: var.to_string(),
                    });
                }
                let resolved =
                    envsubst::resolve(value, self.lookup).map_err(|var| TaskError::UnsetVar {
                        path: self.path.to_path_buf(),
                        key: format!("{key}.{name}"),
                        var,
                    })?;
                if resolved.contains('\0') {
                    return Err(
                        self.invalid(&format!("{key}.{name}"), "the value holds a NUL byte")
                    );
                }
                Ok((name.clone(), resolved))
            })
            .collect()
    }

    fn healthcheck(
        &self,
        h: Option<&HealthcheckSection>,
    ) -> Result<Option<Healthcheck>, TaskError> {
        let Some(h) = h else { return Ok(None) };
        const P: &str = "environment.healthcheck";
        if h.command.trim().is_empty() {
            return Err(self.invalid(&format!("{P}.command"), "must not be empty"));
        }
        let secs =
            |k: &str, v: Option<f64>, d: f64| self.seconds(&format!("{P}.{k}"), v.unwrap_or(d));
        let retries = h.retries.unwrap_or(3);
        Ok(Some(Healthcheck {
            command: h.command.clone(),
            interval: secs("interval_sec", h.interval_sec, 5.0)?,
            timeout: secs("timeout_sec", h.timeout_sec, 30.0)?,
            start_period: secs("start_period_sec", h.start_period_sec, 0.0)?,
            start_interval: secs("start_interval_sec", h.start_interval_sec, 5.0)?,
            retries: u32::try_from(retries).map_err(|_| {
                self.invalid(
                    &format!("{P}.retries"),
                    format!("must be between 0 and {}, got {retries}", u32::MAX),
                )
            })?,
        }))
    }

    /// One `artifacts` entry, checked as Harbor's `ArtifactConfig` is.
    fn artifact(&self, i: usize, v: &toml::Value) -> Result<Artifact, TaskError> {
        let key = format!("artifacts[{i}]");
        let bad = |k: &str, m: String| self.invalid(&format!("{key}{k}"), m);
        let string = |t: &toml::Table, k: &str| -> Result<Option<String>, TaskError> {
            match t.get(k) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(bad(&format!(".{k}"), "must be a string".into())),
            }
        };
        let mut a = match v {
            toml::Value::String(s) => Artifact {
                source: s.clone(),
                destination: None,
                exclude: Vec::new(),
                service: None,
            },
            toml::Value::Table(t) => {
                let source =
                    string(t, "source")?.ok_or_else(|| bad(".source", "is missing".into()))?;
                let exclude = match t.get("exclude") {
                    None => Vec::new(),
                    Some(toml::Value::Array(list)) => list
                        .iter()
                        .map(|e| e.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| bad(".exclude", "must be a list of strings".into()))?,
                    Some(_) => return Err(bad(".exclude", "must be a list of strings".into())),
                };
                Artifact {
                    source,
                    destination: string(t, "destination")?,
                    exclude,
                    service: string(t, "service")?,
                }
            }
            _ => return Err(bad("", "must be a path or a table with source".into())),
        };
        if a.source.split('/').any(|p| p == "..") {
            return Err(bad(
                ".source",
                format!("must not contain '..', got {:?}", a.source),
            ));
        }
        a.destination = a.destination.filter(|d| !d.is_empty());
        if let Some(d) = &a.destination {
            let parts: Vec<&str> = d
                .split('/')
                .filter(|p| !p.is_empty() && *p != ".")
                .collect();
            let problem = if d.contains('\\') {
                Some("must use '/' as the separator")
            } else if d.starts_with('/') {
                Some("must be a relative path")
            } else if parts.is_empty() {
                Some("must name a file or directory")
            } else if parts.contains(&"..") {
                Some("must not contain '..'")
            } else if d.trim_end_matches('/') == "manifest.json" {
                Some("'manifest.json' is reserved for the collection manifest")
            } else {
                None
            };
            if let Some(p) = problem {
                return Err(bad(".destination", format!("{p}, got {d:?}")));
            }
        }
        if let Some(s) = &a.service {
            let s = s.trim().to_string();
            let ok = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
            if !ok {
                return Err(bad(
                    ".service",
                    format!("{s:?} is not a Docker Compose service name"),
                ));
            }
            let drive = a.source.as_bytes();
            let windows_abs = drive.len() >= 3
                && drive[0].is_ascii_alphabetic()
                && drive[1] == b':'
                && (drive[2] == b'/' || drive[2] == b'\\');
            if s != "main" && !(a.source.starts_with('/') || windows_abs) {
                return Err(bad(
                    ".source",
                    format!(
                        "{:?} collected from service {s:?} must be an absolute path",
                        a.source
                    ),
                ));
            }
            a.service = Some(s);
        }
        Ok(a)
    }
}

/// Whether `p` is an IP range as Harbor takes them (`10.0.0.0/8`).
fn is_cidr(p: &str) -> bool {
    p.split_once('/').is_some_and(|(ip, len)| {
        ip.parse::<std::net::IpAddr>().is_ok() && len.parse::<u8>().is_ok()
    })
}
