//! What the engine actually enforces, read from it rather than assumed:
//! the registered container runtimes (checked before a sandbox starts) and
//! the security facts of a started container (seccomp, AppArmor, SELinux,
//! user namespaces, the runtime...), recorded in the trajectory.
//!
//! Engine-wide facts come from `GET /info` (`Runtimes`, `DefaultRuntime`,
//! `SecurityOptions`); per-container facts from `GET /containers/ID/json`
//! (`HostConfig.Runtime`, `HostConfig.SecurityOpt`, `AppArmorProfile`...).

use std::collections::BTreeMap;

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, SystemInfo};
use serde::Serialize;

use super::client::{CALL_TIMEOUT, call, short};
use crate::exec::ExecError;
use crate::exec::seccomp::{Seccomp, sha256_hex};

/// Whose kernel serves the sandbox's system calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// The host's, behind namespaces and cgroups (runc, crun).
    Host,
    /// gVisor's user-space kernel (runsc), between the sandbox and the host.
    Gvisor,
}

/// One runtime the engine has registered.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeInfo {
    /// The runtime's executable, as registered (may be a bare name on PATH).
    pub path: Option<String>,
    /// Arguments the engine passes to it (daemon.json `runtimeArgs`).
    pub args: Vec<String>,
}

impl RuntimeInfo {
    /// Whether this runtime is gVisor's `runsc`: its sandboxed processes
    /// talk to gVisor's user-space kernel, not to the host's.
    pub fn is_gvisor(&self, name: &str) -> bool {
        let base = self
            .path
            .as_deref()
            .and_then(|p| p.rsplit('/').next())
            .unwrap_or(name);
        base == "runsc"
    }

    /// Whether the registered arguments switch its network off whatever the
    /// container asks for (runsc `--network=none`).
    pub fn forces_no_network(&self) -> bool {
        let is_flag = |a: &str| a == "--network" || a == "-network";
        self.args.iter().enumerate().any(|(i, a)| {
            a == "--network=none"
                || a == "-network=none"
                || (is_flag(a) && self.args.get(i + 1).map(String::as_str) == Some("none"))
        })
    }

    /// Whether runsc applies the OCI seccomp profile inside the sandbox
    /// (it ignores it unless started with `--oci-seccomp`).
    fn applies_oci_seccomp(&self) -> bool {
        self.args
            .iter()
            .any(|a| a == "--oci-seccomp" || a == "-oci-seccomp" || a == "--oci-seccomp=true")
    }
}

/// The engine's answer to `GET /info`, as far as the sandbox is concerned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineInfo {
    pub version: Option<String>,
    /// The runtime used when a container names none.
    pub default_runtime: Option<String>,
    pub runtimes: BTreeMap<String, RuntimeInfo>,
    /// Raw `SecurityOptions`, e.g. `name=seccomp,profile=default`.
    pub security_options: Vec<String>,
    pub cgroup_version: Option<String>,
    /// `DockerRootDir`: with userns-remap it ends in `<uid>.<gid>`, the
    /// host ids the sandbox's root is.
    pub docker_root_dir: Option<String>,
}

/// How to make a runtime known to the engine, for error hints.
pub const REGISTER_RUNTIME_HINT: &str = "register it in /etc/docker/daemon.json under \"runtimes\", e.g. \
     {\"runtimes\": {\"runsc\": {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [\"--platform=ptrace\"]}}} \
     (keep the other keys), then reload the daemon with `sudo kill -HUP $(pidof dockerd)`; \
     `docker info` lists the registered runtimes";

/// How long a start may go by the engine's info another start read: a
/// suite starts sandboxes many times a second, and `GET /info` walks the
/// engine's state each time.
const INFO_FRESH_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The info last read, per engine (`DOCKER_HOST`), and when.
type InfoCache = std::sync::Mutex<Vec<(Option<String>, std::time::Instant, EngineInfo)>>;
static RECENT: InfoCache = std::sync::Mutex::new(Vec::new());

impl EngineInfo {
    /// The engine's info as read within the last [`INFO_FRESH_FOR`] by this
    /// process, else asked afresh.
    pub async fn recent(docker: &Docker) -> Result<EngineInfo, ExecError> {
        let host = super::client::docker_host();
        let fresh = RECENT.lock().ok().and_then(|c| {
            c.iter()
                .find(|(h, at, _)| *h == host && at.elapsed() < INFO_FRESH_FOR)
                .map(|(_, _, info)| info.clone())
        });
        if let Some(info) = fresh {
            return Ok(info);
        }
        let info = EngineInfo::read(docker).await?;
        if let Ok(mut c) = RECENT.lock() {
            c.retain(|(h, _, _)| *h != host);
            c.push((host, std::time::Instant::now(), info.clone()));
        }
        Ok(info)
    }

    /// Asks the engine.
    pub async fn read(docker: &Docker) -> Result<EngineInfo, ExecError> {
        let info = call("read engine info", "", CALL_TIMEOUT, docker.info()).await?;
        Ok(EngineInfo::from_system_info(info))
    }

    /// Keeps what matters of the engine's info.
    pub fn from_system_info(info: SystemInfo) -> EngineInfo {
        EngineInfo {
            version: info.server_version,
            default_runtime: info.default_runtime.filter(|r| !r.is_empty()),
            runtimes: info
                .runtimes
                .unwrap_or_default()
                .into_iter()
                .map(|(name, r)| {
                    (
                        name,
                        RuntimeInfo {
                            path: r.path,
                            args: r.runtime_args.unwrap_or_default(),
                        },
                    )
                })
                .collect(),
            security_options: info.security_options.unwrap_or_default(),
            cgroup_version: info
                .cgroup_version
                .map(|v| v.to_string())
                .filter(|v| !v.is_empty()),
            docker_root_dir: info.docker_root_dir,
        }
    }

    /// The kernel behind runtime `name` (the host's when it is unknown).
    pub fn kernel_of(&self, name: &str) -> Kernel {
        match self.runtimes.get(name) {
            Some(rt) if rt.is_gvisor(name) => Kernel::Gvisor,
            _ => Kernel::Host,
        }
    }

    /// Checks that `requested` (or the default runtime) is registered and
    /// can give the sandbox the `network` it asks for; returns the name of
    /// the runtime the container will use.
    pub fn check_runtime(
        &self,
        requested: Option<&str>,
        network: Option<&str>,
    ) -> Result<String, ExecError> {
        let name = match requested.or(self.default_runtime.as_deref()) {
            Some(n) => n.to_string(),
            // An engine that names no default uses runc.
            None => "runc".to_string(),
        };
        let Some(rt) = self.runtimes.get(&name) else {
            // Only a runtime asked for by name can be missing: the engine's
            // own default is whatever it uses.
            if requested.is_none() {
                return Ok(name);
            }
            return Err(ExecError::RuntimeUnavailable {
                runtime: name,
                registered: self.runtimes.keys().cloned().collect(),
                hint: format!(
                    "pick one of the registered runtimes with --runtime, or {REGISTER_RUNTIME_HINT}"
                ),
            });
        };
        if network.is_some_and(|n| n != "none") && rt.forces_no_network() {
            return Err(ExecError::RuntimeWithoutNetwork {
                runtime: name.clone(),
                args: rt.args.join(" "),
                hint: format!(
                    "drop --network bridge or --allow-host (the sandbox then has no network), or register '{name}' \
                     without --network=none in /etc/docker/daemon.json and reload the daemon \
                     (`sudo kill -HUP $(pidof dockerd)`)"
                ),
            });
        }
        Ok(name)
    }

    /// The fields of security option `name` (`name=seccomp,profile=default`
    /// gives `{profile: default}`), or `None` when the engine lacks it.
    /// Whether the engine remaps the sandbox's uids (userns-remap).
    pub fn remaps_users(&self) -> bool {
        self.option("userns").is_some()
    }

    /// With userns-remap: the host uid and gid of the sandbox's root (the
    /// start of the engine's subordinate range), read from the engine's
    /// root directory (`<data-root>/<uid>.<gid>`); `None` without a remap
    /// or when the engine does not say.
    pub fn remap(&self) -> Option<(u32, u32)> {
        if !self.remaps_users() {
            return None;
        }
        let dir = self.docker_root_dir.as_deref()?;
        let last = std::path::Path::new(dir).file_name()?.to_str()?;
        let (u, g) = last.split_once('.')?;
        Some((u.parse().ok()?, g.parse().ok()?))
    }

    fn option(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.security_options.iter().find_map(|opt| {
            let mut fields = BTreeMap::new();
            let mut this = None;
            for part in opt.split(',') {
                match part.split_once('=') {
                    Some(("name", v)) => this = Some(v.to_string()),
                    Some((k, v)) => {
                        fields.insert(k.to_string(), v.to_string());
                    }
                    // Engines before API 1.24 list bare names.
                    None => this = Some(part.to_string()),
                }
            }
            (this.as_deref() == Some(name)).then_some(fields)
        })
    }
}

/// What confines the sandbox's processes, as read from the engine and the
/// started container; recorded in `run_started` as `sandbox_security`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxSecurity {
    /// The container's runtime (`HostConfig.Runtime`).
    pub runtime: String,
    pub runtime_path: Option<String>,
    /// Arguments the engine passes to the runtime.
    pub runtime_args: Vec<String>,
    /// `host` (runc, crun: the host's kernel, behind namespaces) or
    /// `gvisor` (runsc: a user-space kernel between the sandbox and the host).
    pub kernel: Kernel,
    /// The seccomp filter on the sandbox's system calls: `runner` (runner's
    /// profile, the default), `default` (the engine's), `file <path>` (the
    /// user's), `unconfined`, `custom...` (a profile runner did not send),
    /// `none`, or why it is not applied.
    pub seccomp: String,
    /// SHA-256 of the profile the engine holds for the container (from its
    /// inspect), `None` when it uses its built-in one or none.
    pub seccomp_profile_sha256: Option<String>,
    /// The AppArmor profile (`AppArmorProfile`), `null` when none applies.
    pub apparmor: Option<String>,
    /// Whether the engine labels containers for SELinux.
    pub selinux: bool,
    /// Whether root in the sandbox is an unprivileged uid on the host
    /// (the engine's userns-remap).
    pub userns: bool,
    /// With `userns`: the host `uid:gid` the sandbox's root is (the
    /// engine's remapped range starts there).
    pub userns_remap: Option<String>,
    /// Whether the engine itself runs without root.
    pub rootless: bool,
    /// `private` or `host` cgroup namespace.
    pub cgroupns: String,
    pub cgroup_version: Option<String>,
    pub no_new_privileges: bool,
    pub privileged: bool,
    pub cap_drop: Vec<String>,
    pub cap_add: Vec<String>,
    pub readonly_rootfs: bool,
    pub network_mode: Option<String>,
    /// `HostConfig.SecurityOpt` as the engine stored it, an inline seccomp
    /// profile shown by its digest (`seccomp=sha256:<hex>`).
    pub security_opt: Vec<String>,
    /// The engine's `SecurityOptions`.
    pub engine_security_options: Vec<String>,
    pub engine_version: Option<String>,
}

impl SandboxSecurity {
    /// Combines the engine's facts with the container's inspect, and the
    /// profile runner asked for (named only when it is the one in force).
    pub fn new(
        engine: &EngineInfo,
        c: &ContainerInspectResponse,
        requested: &Seccomp,
    ) -> SandboxSecurity {
        let hc = c.host_config.clone().unwrap_or_default();
        let runtime = hc
            .runtime
            .clone()
            .filter(|r| !r.is_empty())
            .or_else(|| engine.default_runtime.clone())
            .unwrap_or_else(|| "runc".into());
        let rt = engine.runtimes.get(&runtime).cloned().unwrap_or_default();
        let gvisor = rt.is_gvisor(&runtime);
        let security_opt = hc.security_opt.clone().unwrap_or_default();
        let privileged = hc.privileged == Some(true);
        let (seccomp, profile_sha) =
            seccomp_in_force(engine, &security_opt, privileged, requested, &runtime, &rt);

        let apparmor = c
            .app_armor_profile
            .clone()
            .filter(|p| !p.is_empty())
            .map(|p| {
                if gvisor {
                    format!("{p} (not applied: runsc does not load AppArmor profiles)")
                } else {
                    p
                }
            });
        let userns = engine.option("userns").is_some()
            && hc.userns_mode.as_deref().filter(|m| !m.is_empty()) != Some("host");
        let cgroupns = hc
            .cgroupns_mode
            .map(|m| m.to_string())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| {
                if engine.option("cgroupns").is_some() {
                    "private".into()
                } else {
                    "host".into()
                }
            });
        let no_new_privileges = gvisor
            || security_opt.iter().any(|o| {
                o == "no-new-privileges"
                    || o == "no-new-privileges:true"
                    || o == "no-new-privileges=true"
            });
        SandboxSecurity {
            runtime,
            runtime_path: rt.path.clone(),
            runtime_args: rt.args.clone(),
            kernel: if gvisor { Kernel::Gvisor } else { Kernel::Host },
            seccomp,
            apparmor,
            selinux: engine.option("selinux").is_some(),
            userns,
            userns_remap: engine
                .remap()
                .filter(|_| userns)
                .map(|(u, g)| format!("{u}:{g}")),
            rootless: engine.option("rootless").is_some(),
            cgroupns,
            cgroup_version: engine.cgroup_version.clone(),
            no_new_privileges,
            privileged,
            cap_drop: hc.cap_drop.clone().unwrap_or_default(),
            cap_add: hc.cap_add.clone().unwrap_or_default(),
            readonly_rootfs: hc.readonly_rootfs == Some(true),
            network_mode: hc.network_mode.clone(),
            security_opt: security_opt
                .iter()
                .map(|o| match (o.strip_prefix("seccomp="), &profile_sha) {
                    (Some(v), Some(sha)) if v != "unconfined" => format!("seccomp=sha256:{sha}"),
                    _ => o.clone(),
                })
                .collect(),
            seccomp_profile_sha256: profile_sha,
            engine_security_options: engine.security_options.clone(),
            engine_version: engine.version.clone(),
        }
    }
}

/// A `HostConfig.SecurityOpt` value by key (`key=value` or `key:value`).
fn security_opt_value(security_opt: &[String], key: &str) -> Option<String> {
    security_opt.iter().find_map(|o| {
        o.strip_prefix(key)
            .and_then(|rest| rest.strip_prefix('=').or_else(|| rest.strip_prefix(':')))
            .map(str::to_string)
    })
}

/// The seccomp profile in force, as said in the report, and the digest of
/// an inline profile: the one runner asked for is named only when it is the
/// one the engine stored; gVisor without `--oci-seccomp` applies none.
fn seccomp_in_force(
    engine: &EngineInfo,
    security_opt: &[String],
    privileged: bool,
    requested: &Seccomp,
    runtime: &str,
    rt: &RuntimeInfo,
) -> (String, Option<String>) {
    let gvisor = rt.is_gvisor(runtime);
    let inline = security_opt_value(security_opt, "seccomp").filter(|v| v != "unconfined");
    let profile_sha = inline.as_deref().map(|v| sha256_hex(v.as_bytes()));
    let profile = match (
        privileged,
        security_opt_value(security_opt, "seccomp"),
        engine.option("seccomp"),
    ) {
        (true, _, _) => "unconfined (privileged)".to_string(),
        (_, Some(v), _) if v == "unconfined" => "unconfined".to_string(),
        (_, Some(_), _) => match requested.profile() {
            Some(p) if profile_sha.as_deref() == Some(p.sha256()) => requested.label(),
            _ => "custom (not the profile runner sent)".to_string(),
        },
        (_, None, Some(f)) => f
            .get("profile")
            .cloned()
            .unwrap_or_else(|| "default".into()),
        (_, None, None) => "none (the engine has no seccomp support)".to_string(),
    };
    let seccomp = if gvisor && !rt.applies_oci_seccomp() && !profile.starts_with("none") {
        format!(
            "not applied: runsc ignores the engine's seccomp profile ({profile}) unless \
             registered with --oci-seccomp; gVisor's kernel serves the sandbox's system calls"
        )
    } else {
        profile
    };
    (seccomp, profile_sha)
}

/// Reads the security facts of the started container `id`.
pub async fn inspect_security(
    docker: &Docker,
    id: &str,
    engine: &EngineInfo,
    requested: &Seccomp,
) -> Result<SandboxSecurity, ExecError> {
    let c = call(
        "inspect container",
        short(id),
        CALL_TIMEOUT,
        docker.inspect_container(id, None),
    )
    .await?;
    Ok(SandboxSecurity::new(engine, &c, requested))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::HostConfig;

    fn engine() -> EngineInfo {
        EngineInfo {
            version: Some("20.10.24".into()),
            default_runtime: Some("runc".into()),
            runtimes: BTreeMap::from([
                (
                    "runc".into(),
                    RuntimeInfo {
                        path: Some("runc".into()),
                        args: vec![],
                    },
                ),
                (
                    "runsc".into(),
                    RuntimeInfo {
                        path: Some("/usr/bin/runsc".into()),
                        args: vec!["--platform=ptrace".into(), "--network=none".into()],
                    },
                ),
            ]),
            security_options: vec!["name=seccomp,profile=default".into()],
            cgroup_version: Some("1".into()),
            docker_root_dir: Some("/var/lib/docker".into()),
        }
    }

    #[test]
    fn runtime_must_be_registered_and_able_to_network() {
        let e = engine();
        assert_eq!(e.check_runtime(None, None).ok(), Some("runc".into()));
        assert_eq!(
            e.check_runtime(Some("runsc"), None).ok(),
            Some("runsc".into())
        );
        match e.check_runtime(Some("nosuch"), None) {
            Err(ExecError::RuntimeUnavailable {
                runtime,
                registered,
                ..
            }) => {
                assert_eq!(runtime, "nosuch");
                assert_eq!(registered, ["runc", "runsc"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            e.check_runtime(Some("runsc"), Some("bridge")),
            Err(ExecError::RuntimeWithoutNetwork { .. })
        ));
        assert!(e.check_runtime(Some("runc"), Some("bridge")).is_ok());
        let split = RuntimeInfo {
            path: None,
            args: vec!["-network".into(), "none".into()],
        };
        assert!(split.forces_no_network());
        assert!(!RuntimeInfo::default().forces_no_network());
    }

    #[test]
    fn security_facts_follow_the_runtime() {
        let e = engine();
        let inspect = |runtime: &str| ContainerInspectResponse {
            app_armor_profile: Some(String::new()),
            host_config: Some(HostConfig {
                runtime: Some(runtime.into()),
                security_opt: Some(vec!["no-new-privileges:true".into()]),
                cap_drop: Some(vec!["ALL".into()]),
                readonly_rootfs: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        let runc = SandboxSecurity::new(&e, &inspect("runc"), &Seccomp::EngineDefault);
        assert_eq!(runc.kernel, Kernel::Host);
        assert_eq!(runc.seccomp, "default");
        assert_eq!(runc.seccomp_profile_sha256, None);
        assert_eq!(runc.apparmor, None);
        assert!(runc.no_new_privileges && !runc.userns && runc.readonly_rootfs);
        assert_eq!(runc.cgroupns, "host");
        let gv = SandboxSecurity::new(&e, &inspect("runsc"), &Seccomp::EngineDefault);
        assert_eq!(gv.kernel, Kernel::Gvisor);
        assert!(gv.seccomp.starts_with("not applied"), "{}", gv.seccomp);
        assert_eq!(gv.runtime_args, ["--platform=ptrace", "--network=none"]);
        let unconfined = ContainerInspectResponse {
            host_config: Some(HostConfig {
                security_opt: Some(vec!["seccomp=unconfined".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let u = SandboxSecurity::new(&e, &unconfined, &Seccomp::Runner);
        assert_eq!(
            (u.runtime.as_str(), u.seccomp.as_str()),
            ("runc", "unconfined")
        );
        assert!(!u.no_new_privileges);
    }

    #[test]
    fn an_inline_profile_is_named_only_when_it_is_the_one_sent() {
        let e = engine();
        let runner = crate::exec::seccomp::RUNNER_PROFILE.clone();
        let inspect = |opt: &str| ContainerInspectResponse {
            host_config: Some(HostConfig {
                security_opt: Some(vec!["no-new-privileges:true".into(), opt.into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let sent = inspect(&format!("seccomp={}", runner.json()));
        let s = SandboxSecurity::new(&e, &sent, &Seccomp::Runner);
        assert_eq!(s.seccomp, "runner");
        assert_eq!(s.seccomp_profile_sha256.as_deref(), Some(runner.sha256()));
        assert_eq!(
            s.security_opt,
            [
                "no-new-privileges:true".to_string(),
                format!("seccomp=sha256:{}", runner.sha256())
            ]
        );
        let other = SandboxSecurity::new(&e, &inspect("seccomp={}"), &Seccomp::Runner);
        assert!(other.seccomp.starts_with("custom"), "{}", other.seccomp);
        let mut rt = inspect(&format!("seccomp={}", runner.json()));
        if let Some(hc) = rt.host_config.as_mut() {
            hc.runtime = Some("runsc".into());
        }
        let gv = SandboxSecurity::new(&e, &rt, &Seccomp::Runner);
        assert!(
            gv.seccomp.starts_with("not applied: runsc"),
            "{}",
            gv.seccomp
        );
        assert!(gv.seccomp.contains("(runner)"), "{}", gv.seccomp);
    }

    #[test]
    fn the_remap_is_read_from_the_engines_root_directory() {
        let mut e = EngineInfo {
            security_options: vec!["name=userns".into()],
            docker_root_dir: Some("/var/lib/docker/100000.100000".into()),
            ..Default::default()
        };
        assert_eq!(e.remap(), Some((100000, 100000)));
        e.docker_root_dir = Some("/var/lib/docker".into());
        assert_eq!(e.remap(), None);
        e.security_options.clear();
        e.docker_root_dir = Some("/x/5.6".into());
        assert_eq!(e.remap(), None, "no userns option, no remap");
    }

    #[test]
    fn engine_options_parse_both_formats() {
        let e = EngineInfo {
            security_options: vec![
                "name=apparmor".into(),
                "name=userns".into(),
                "seccomp".into(),
            ],
            ..Default::default()
        };
        assert!(e.option("apparmor").is_some());
        assert!(e.option("userns").is_some());
        assert!(e.option("seccomp").is_some());
        assert!(e.option("selinux").is_none());
    }
}
