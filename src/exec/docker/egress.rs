//! An egress allowlist on the engine: the sandbox sits alone on an
//! `internal` network of its run (no gateway, its bridge without an address
//! on the host, as `services` makes them), whose only other member is a
//! filtering proxy (tinyproxy, image [`PROXY_IMAGE`] built by
//! `sandbox/build-proxy.sh`) that is also on the egress network (the
//! engine's `bridge` unless `--egress-network` says otherwise). Commands
//! get `http_proxy`/`https_proxy` pointing at it.
//!
//! The proxy decides by the name the client asked for: the CONNECT target,
//! or the host of an absolute URI (the Host header of a relative one), by
//! anchored regular expressions runner writes from the validated patterns
//! (see [`crate::exec::egress`]); it refuses everything else, IP literals
//! included, and never looks up a name's address to decide. It does not
//! see inside TLS: a client that CONNECTs to an allowed name may speak to
//! it with any SNI (it still reaches only that name's address).
//!
//! The proxy and the network are removed with the sandbox
//! ([`Egress::stop`], or from a thread of its own on drop); what a killed
//! runner leaves, `gc` removes: the proxy is labelled and named as a
//! sidecar of the run ([`PROXY_SERVICE`]) and the network as a service
//! network.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, HostConfigLogConfig, NetworkConnectRequest,
    NetworkingConfig, ResourcesUlimits,
};
use bollard::query_parameters::CreateContainerOptionsBuilder;

use super::client::{self, CALL_TIMEOUT, ENGINE, call, docker_err, short, status_of};
use super::config::{DockerConfig, Ulimits};
use super::container;
use super::engine::Kernel;
use super::services::{LABEL_SERVICE, network_request, remove_everything};
use crate::exec::ExecError;

/// The proxy's image, built locally by `sandbox/build-proxy.sh`.
pub const PROXY_IMAGE: &str = "runner-proxy:bookworm";
/// The proxy's name on the sandbox's network, and its sidecar label.
pub const PROXY_SERVICE: &str = "runner-egress-proxy";
/// The port the proxy listens on.
pub const PROXY_PORT: u16 = 3128;
/// The upstream resolver of an allowlisted sandbox's DNS. The engine's
/// embedded DNS answers the names of its network (the proxy's) itself and
/// forwards the rest upstream; a `--dns` on the loopback is dialled in the
/// sandbox's own namespace, where nothing answers, so no name leaves
/// through DNS. Without it an engine older than Docker 26 forwards from
/// the host's namespace when the host's resolver is on its loopback
/// (systemd-resolved), even for an internal network.
pub const SANDBOX_DNS: &str = "127.0.0.1";
/// The network the proxy reaches out through unless told otherwise.
pub const DEFAULT_EGRESS_NETWORK: &str = "bridge";
/// The proxy's memory limit.
const PROXY_MEMORY_BYTES: i64 = 64 << 20;
/// The proxy's process limit.
const PROXY_PIDS_LIMIT: i64 = 64;
/// The proxy's CPU share.
const PROXY_CPUS: f64 = 0.5;
/// Most connections the proxy serves at once.
const PROXY_MAX_CLIENTS: u32 = 64;
/// Idle seconds after which the proxy drops a connection.
const PROXY_IDLE_SECS: u32 = 600;
/// Where the proxy's configuration is written at start (a tmpfs).
const CONF_DIR: &str = "/run/proxy";
/// Size of that tmpfs.
const CONF_TMPFS: &str = "rw,noexec,nosuid,size=1m,uid=65534,gid=65534,mode=0700";
/// The proxy's user: nobody.
const PROXY_USER: &str = "65534:65534";
/// What tinyproxy logs once it accepts connections.
const READY_LINE: &str = "Accepting connections";
/// Longest wait for the proxy to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause between readiness polls.
const READY_POLL: Duration = Duration::from_millis(100);
/// Most bytes of the proxy's log kept by the engine.
const PROXY_LOG_BYTES: &str = "1m";

/// What an allowlisted sandbox needs of the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EgressSpec {
    /// Validated, normalized patterns (see [`crate::exec::egress`]).
    pub hosts: Vec<String>,
    /// The network the proxy reaches out through; `None`:
    /// [`DEFAULT_EGRESS_NETWORK`].
    pub via: Option<String>,
}

impl EgressSpec {
    /// The network the proxy reaches out through.
    pub fn via(&self) -> &str {
        self.via.as_deref().unwrap_or(DEFAULT_EGRESS_NETWORK)
    }
}

/// The anchored, case-insensitive extended regular expression of one
/// validated pattern: `^name$`, or for `*.domain` one or more labels
/// before it. Patterns are validated to DNS names first, so only `.`
/// needs escaping; it is escaped whatever else comes.
pub fn filter_rule(pattern: &str) -> String {
    let escape = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c.to_string()
                } else {
                    format!("\\{c}")
                }
            })
            .collect::<String>()
    };
    match pattern.strip_prefix("*.") {
        Some(domain) => format!("^([a-z0-9_-]+\\.)+{}$", escape(domain)),
        None => format!("^{}$", escape(pattern)),
    }
}

/// tinyproxy's filter file: one rule per pattern (none: nothing passes).
pub fn filter_file(hosts: &[String]) -> String {
    hosts.iter().map(|h| filter_rule(h) + "\n").collect()
}

/// tinyproxy's configuration: the filter decides by host name only
/// (`FilterURLs No`), denies what no rule admits, and only clients of
/// `clients` (the sandbox's network) may use the proxy. Any port is
/// allowed (no `ConnectPort` line), as in Harbor.
pub fn tinyproxy_conf(clients: Option<&str>) -> String {
    let mut c = format!(
        "Port {PROXY_PORT}\n\
         Timeout {PROXY_IDLE_SECS}\n\
         MaxClients {PROXY_MAX_CLIENTS}\n\
         Filter \"{CONF_DIR}/filter\"\n\
         FilterType ere\n\
         FilterURLs No\n\
         FilterDefaultDeny Yes\n\
         FilterCaseSensitive No\n\
         DisableViaHeader Yes\n\
         XTinyproxy No\n\
         LogLevel Info\n"
    );
    if let Some(net) = clients {
        c.push_str(&format!("Allow {net}\n"));
    }
    c
}

/// The command environment of an allowlisted sandbox: the proxy for
/// every client that honours the usual variables, nothing for loopback.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://{PROXY_SERVICE}:{PROXY_PORT}");
    let mut env: Vec<(String, String)> = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"]
        .iter()
        .map(|k| (k.to_string(), url.clone()))
        .collect();
    for k in ["no_proxy", "NO_PROXY"] {
        env.push((k.to_string(), "localhost,127.0.0.1".to_string()));
    }
    env
}

/// The proxy container's spec, on the sandbox's `network`, hardened: no
/// capabilities, no new privileges, read-only root with a small tmpfs for
/// its configuration, nobody's uid, small limits, the run's runtime and
/// labels (with the sandbox's expiry), auto-removed.
pub fn proxy_body(
    cfg: &DockerConfig,
    egress: &EgressSpec,
    network: &str,
    clients: Option<&str>,
    kernel: Kernel,
) -> ContainerCreateBody {
    let labelled = DockerConfig {
        run_id: cfg.run_id.clone(),
        max_run_time: cfg.max_run_time,
        pids_limit: PROXY_PIDS_LIMIT,
        labels: vec![(LABEL_SERVICE.to_string(), PROXY_SERVICE.to_string())],
        ..DockerConfig::default()
    };
    let limits = Ulimits::default();
    let ulimit = |name: &str, v: i64| ResourcesUlimits {
        name: Some(name.into()),
        soft: Some(v),
        hard: Some(v),
    };
    // No capabilities, no new privileges, the run's seccomp profile:
    // `hardening::harden` below.
    let mut host_config = HostConfig {
        readonly_rootfs: Some(true),
        tmpfs: Some(HashMap::from([(
            CONF_DIR.to_string(),
            CONF_TMPFS.to_string(),
        )])),
        network_mode: Some(network.to_string()),
        memory: Some(PROXY_MEMORY_BYTES),
        memory_swap: Some(PROXY_MEMORY_BYTES),
        nano_cpus: Some(crate::convert::i64_from_f64(PROXY_CPUS * 1e9)),
        pids_limit: Some(container::host_pids_limit(&labelled, kernel)),
        ulimits: Some(vec![
            ulimit("nofile", limits.nofile),
            ulimit("fsize", 1 << 20),
            ulimit("core", 0),
        ]),
        init: Some(false),
        runtime: cfg.runtime.clone(),
        log_config: Some(HostConfigLogConfig {
            typ: Some("local".into()),
            config: Some(HashMap::from([
                ("max-size".to_string(), PROXY_LOG_BYTES.to_string()),
                ("max-file".to_string(), "1".to_string()),
                ("compress".to_string(), "false".to_string()),
            ])),
        }),
        auto_remove: Some(true),
        ..Default::default()
    };
    super::hardening::harden(&mut host_config, &cfg.seccomp);
    // The configuration travels in the environment (nothing secret: the
    // names and the network) and is written into the tmpfs by the start
    // command: the image holds no policy of its own.
    let start = format!(
        "printf '%s' \"$RUNNER_PROXY_CONF\" > {CONF_DIR}/tinyproxy.conf && \
         printf '%s' \"$RUNNER_PROXY_FILTER\" > {CONF_DIR}/filter && \
         exec tinyproxy -d -c {CONF_DIR}/tinyproxy.conf"
    );
    ContainerCreateBody {
        image: Some(PROXY_IMAGE.to_string()),
        entrypoint: Some(vec!["/bin/sh".into(), "-c".into()]),
        cmd: Some(vec![start]),
        user: Some(PROXY_USER.into()),
        env: Some(vec![
            format!("RUNNER_PROXY_CONF={}", tinyproxy_conf(clients)),
            format!("RUNNER_PROXY_FILTER={}", filter_file(&egress.hosts)),
        ]),
        hostname: Some(PROXY_SERVICE.into()),
        labels: Some(container::labels(&labelled)),
        host_config: Some(host_config),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.to_string(),
                EndpointSettings {
                    aliases: Some(vec![PROXY_SERVICE.to_string()]),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    }
}

/// A run's egress: its internal network and the proxy on it.
pub struct Egress {
    docker: Docker,
    network: String,
    proxy: std::sync::Mutex<Option<String>>,
    finishing: tokio::sync::Mutex<()>,
    stopped: AtomicBool,
}

impl Egress {
    /// Creates the network and starts the proxy on it and on the egress
    /// network; waits until it accepts connections. On failure removes
    /// what it made.
    pub async fn start(
        docker: &Docker,
        cfg: &DockerConfig,
        egress: &EgressSpec,
        kernel: Kernel,
    ) -> Result<Egress, ExecError> {
        proxy_image_present(docker).await?;
        check_egress_network(docker, egress.via()).await?;
        let name = super::services::network_name(&cfg.run_id);
        call(
            "create network",
            &name,
            CALL_TIMEOUT,
            docker.create_network(network_request(&name, &cfg.run_id, cfg.max_run_time)),
        )
        .await?;
        let made = Egress {
            docker: docker.clone(),
            network: name,
            proxy: std::sync::Mutex::new(None),
            finishing: tokio::sync::Mutex::new(()),
            stopped: AtomicBool::new(false),
        };
        if let Err(e) = made.start_proxy(cfg, egress, kernel).await {
            if let Err(c) = made.stop().await {
                tracing::warn!("removing the egress proxy of a failed start: {c}");
            }
            return Err(e);
        }
        Ok(made)
    }

    /// The internal network the sandbox joins.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// The proxy's container id, once created.
    pub fn proxy_id(&self) -> Option<String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.proxy.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn start_proxy(
        &self,
        cfg: &DockerConfig,
        egress: &EgressSpec,
        kernel: Kernel,
    ) -> Result<(), ExecError> {
        let clients = self.subnet().await;
        let body = proxy_body(cfg, egress, &self.network, clients.as_deref(), kernel);
        let name = super::services::service_container_name(&cfg.run_id, PROXY_SERVICE);
        let opts = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = call(
            "create the egress proxy",
            &name,
            CALL_TIMEOUT,
            self.docker.create_container(Some(opts), body),
        )
        .await?;
        *self.lock() = Some(created.id.clone());
        // The engine takes one network at creation: the way out is
        // connected before the start.
        let req = NetworkConnectRequest {
            container: created.id.clone(),
            endpoint_config: Some(EndpointSettings::default()),
        };
        call(
            "connect the egress proxy",
            egress.via(),
            CALL_TIMEOUT,
            self.docker.connect_network(egress.via(), req),
        )
        .await?;
        call(
            "start the egress proxy",
            short(&created.id),
            CALL_TIMEOUT,
            self.docker.start_container(&created.id, None),
        )
        .await?;
        self.wait_ready(&created.id).await
    }

    /// The sandbox network's subnet, which alone may use the proxy;
    /// `None` when the engine does not say (the network has no other
    /// member but the sandbox anyway).
    async fn subnet(&self) -> Option<String> {
        let info = tokio::time::timeout(
            CALL_TIMEOUT,
            self.docker.inspect_network(&self.network, None),
        )
        .await
        .ok()?
        .ok()?;
        info.ipam?
            .config?
            .into_iter()
            .find_map(|c| c.subnet)
            .filter(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_hexdigit() || ".:/".contains(c))
            })
    }

    /// Waits until the proxy logs that it accepts connections.
    async fn wait_ready(&self, id: &str) -> Result<(), ExecError> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            let log = client::log_tail(&self.docker, id).await;
            if log.contains(READY_LINE) {
                return Ok(());
            }
            let running =
                match tokio::time::timeout(CALL_TIMEOUT, self.docker.inspect_container(id, None))
                    .await
                {
                    Ok(Ok(info)) => info.state.and_then(|s| s.running) == Some(true),
                    Ok(Err(e)) if status_of(&e) == Some(404) => false,
                    Ok(Err(e)) => return Err(docker_err("inspect the egress proxy", id, &e)),
                    Err(_) => {
                        return Err(ExecError::EngineTimeout {
                            engine: ENGINE,
                            op: "inspect the egress proxy",
                            secs: CALL_TIMEOUT.as_secs(),
                        });
                    }
                };
            if !running || tokio::time::Instant::now() >= deadline {
                let why = if running {
                    format!(
                        "did not accept connections within {}s",
                        READY_TIMEOUT.as_secs()
                    )
                } else {
                    "exited".to_string()
                };
                return Err(ExecError::SandboxDied {
                    detail: format!(
                        "the egress proxy ({PROXY_IMAGE}) {why}{}",
                        if log.trim().is_empty() {
                            String::new()
                        } else {
                            format!("; its last output:\n{}", log.trim_end())
                        }
                    ),
                });
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// Removes the proxy, then the network. Idempotent.
    pub async fn stop(&self) -> Result<(), ExecError> {
        let _one_at_a_time = self.finishing.lock().await;
        if self.stopped.load(Ordering::SeqCst) {
            return Ok(());
        }
        let ids: Vec<String> = self.proxy_id().into_iter().collect();
        // If removal fails, `stopped` stays false so Drop tries again.
        remove_everything(&self.docker, &ids, &self.network).await?;
        self.stopped.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for Egress {
    /// Without `stop` (a panic, a failed start, a cancelled run): removes
    /// the proxy and the network from a thread with its own runtime.
    fn drop(&mut self) {
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        let ids: Vec<String> = self.proxy_id().into_iter().collect();
        let network = self.network.clone();
        client::cleanup_on_drop(
            "runner-egress-cleanup",
            format!("the egress proxy of network {network}"),
            move |d| async move { remove_everything(&d, &ids, &network).await },
        );
    }
}

/// The proxy's image must be here: it is built locally, never pulled.
async fn proxy_image_present(docker: &Docker) -> Result<(), ExecError> {
    match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_image(PROXY_IMAGE)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if status_of(&e) == Some(404) => Err(ExecError::ProxyImageMissing {
            image: PROXY_IMAGE.to_string(),
            hint: "build it with `make sandbox-image` (or `sudo bash sandbox/build-proxy.sh`)"
                .into(),
        }),
        Ok(Err(e)) => Err(docker_err("inspect image", PROXY_IMAGE, &e)),
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op: "inspect image",
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}

/// What to do about an egress network that cannot be used.
const EGRESS_NETWORK_HINT: &str = "give --egress-network the name of an existing, non-internal \
     network (`docker network ls`), or leave it out to use the engine's bridge";

/// The egress network must exist and must not be internal (the proxy
/// would have no way out).
async fn check_egress_network(docker: &Docker, via: &str) -> Result<(), ExecError> {
    match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_network(via, None)).await {
        Ok(Ok(info)) if info.internal == Some(true) => Err(ExecError::EgressNetwork {
            network: via.to_string(),
            detail: "it is internal: the proxy would have no way out".into(),
            hint: EGRESS_NETWORK_HINT.into(),
        }),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if status_of(&e) == Some(404) => Err(ExecError::EgressNetwork {
            network: via.to_string(),
            detail: "the engine has no such network".into(),
            hint: EGRESS_NETWORK_HINT.into(),
        }),
        Ok(Err(e)) => Err(docker_err("inspect network", via, &e)),
        Err(_) => Err(ExecError::EngineTimeout {
            engine: ENGINE,
            op: "inspect network",
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_anchored_and_escaped() {
        assert_eq!(filter_rule("pypi.org"), "^pypi\\.org$");
        assert_eq!(
            filter_rule("*.example.com"),
            "^([a-z0-9_-]+\\.)+example\\.com$"
        );
        assert_eq!(filter_file(&[]), "");
        assert_eq!(
            filter_file(&["a.com".into(), "*.b.org".into()]),
            "^a\\.com$\n^([a-z0-9_-]+\\.)+b\\.org$\n"
        );
        // Whatever got past validation stays a literal.
        assert_eq!(filter_rule("a|b.*"), "^a\\|b\\.\\*$");
    }

    #[test]
    fn the_rules_admit_what_harbors_matching_admits() {
        // The proxy's rules (ERE, case-insensitive) against the reference
        // semantics of `exec::egress::host_matches`.
        let patterns = ["pypi.org", "*.example.com", "allowed.runner-test"];
        let names = [
            "pypi.org",
            "PYPI.ORG",
            "files.pypi.org",
            "pypi.org.evil.com",
            "xpypi.org",
            "a.example.com",
            "a.b.example.com",
            "example.com",
            "badexample.com",
            ".example.com",
            "example.com.evil.org",
            "allowed.runner-test",
            "allowed.runner-test.",
            "alias-of-allowed.runner-test",
            "10.0.0.1",
        ];
        for p in patterns {
            let re = regex::RegexBuilder::new(&filter_rule(p))
                .case_insensitive(true)
                .build()
                .expect("a valid rule");
            for n in names {
                assert_eq!(
                    re.is_match(n),
                    crate::exec::egress::host_matches(p, n),
                    "{p} vs {n}"
                );
            }
        }
    }

    #[test]
    fn the_configuration_denies_by_default_and_names_its_clients() {
        let c = tinyproxy_conf(Some("172.30.0.0/16"));
        for line in [
            "FilterDefaultDeny Yes",
            "FilterURLs No",
            "FilterType ere",
            "Allow 172.30.0.0/16",
            "Port 3128",
        ] {
            assert!(c.lines().any(|l| l == line), "{line} in\n{c}");
        }
        assert!(!c.contains("ConnectPort"), "every port, as in Harbor");
        assert!(!tinyproxy_conf(None).contains("Allow"));
    }

    #[test]
    fn the_proxy_is_hardened_and_labelled_as_a_sidecar_of_the_run() {
        let cfg = DockerConfig {
            run_id: "r1".into(),
            runtime: Some("runsc".into()),
            ..DockerConfig::default()
        };
        let spec = EgressSpec {
            hosts: vec!["a.com".into()],
            via: None,
        };
        let b = proxy_body(&cfg, &spec, "runner-r1-net-0a1b2c3d", None, Kernel::Host);
        let hc = b.host_config.clone().unwrap_or_default();
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(hc.cap_add, None);
        assert_eq!(hc.readonly_rootfs, Some(true));
        assert_eq!(hc.privileged, Some(false));
        let opts = hc.security_opt.unwrap_or_default();
        assert!(opts.contains(&"no-new-privileges:true".to_string()));
        assert!(
            opts.contains(&format!(
                "seccomp={}",
                crate::exec::seccomp::RUNNER_PROFILE.json()
            )),
            "the run's profile applies to the proxy too"
        );
        assert_eq!(hc.memory, Some(PROXY_MEMORY_BYTES));
        assert_eq!(hc.runtime.as_deref(), Some("runsc"));
        assert_eq!(hc.network_mode.as_deref(), Some("runner-r1-net-0a1b2c3d"));
        assert_eq!(b.user.as_deref(), Some(PROXY_USER));
        let labels = b.labels.unwrap_or_default();
        assert_eq!(
            labels.get(LABEL_SERVICE).map(String::as_str),
            Some(PROXY_SERVICE)
        );
        assert!(
            b.env
                .unwrap_or_default()
                .iter()
                .any(|e| e == "RUNNER_PROXY_FILTER=^a\\.com$\n")
        );
        assert_eq!(spec.via(), "bridge");
    }

    #[test]
    fn commands_are_pointed_at_the_proxy() {
        let env: HashMap<String, String> = proxy_env().into_iter().collect();
        assert_eq!(
            env.get("https_proxy").map(String::as_str),
            Some("http://runner-egress-proxy:3128")
        );
        assert_eq!(env.get("HTTP_PROXY"), env.get("http_proxy"));
        assert_eq!(
            env.get("NO_PROXY").map(String::as_str),
            Some("localhost,127.0.0.1")
        );
    }
}
