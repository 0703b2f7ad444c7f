use super::*;
use crate::exec::backend::ServiceSpec;
use crate::exec::docker::engine::Kernel;

fn service(name: &str) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        image: "runner-sandbox:tiny".into(),
        env: vec![("POSTGRES_PASSWORD".into(), "x".into())],
        command: Some(vec!["httpd".into(), "-f".into()]),
        entrypoint: None,
        user: None,
        workdir: None,
        healthcheck: Some(ServiceHealthcheck {
            test: vec!["CMD".into(), "true".into()],
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            retries: 3,
            start_period: Duration::ZERO,
        }),
        volumes: vec!["/data".into()],
        read_only: false,
        init: false,
    }
}

#[test]
fn names_are_recognised_only_in_their_own_shape() {
    let n = network_name("20260101-x");
    assert!(is_service_network_name(&n, "20260101-x"), "{n}");
    assert!(!is_service_network_name(&n, "20260101-y"));
    assert!(!is_service_network_name(
        "runner-20260101-x-net-zz",
        "20260101-x"
    ));
    let c = service_container_name("r1", "db");
    assert!(
        is_service_container_name(&format!("/{c}"), "r1", "db"),
        "{c}"
    );
    assert!(!is_service_container_name(&c, "r1", "cache"));
    // Not a sandbox's name, so the sandbox sweep never mistakes it.
    assert!(!container::is_sandbox_name(&c, "r1"));
    assert!(is_service_name("db") && is_service_name("redis-cache"));
    assert!(!is_service_name("main") && !is_service_name("Db") && !is_service_name("a b"));
}

#[test]
fn sidecars_are_hardened_and_limited() {
    let spec = ServicesSpec {
        cpus: 0.5,
        memory_bytes: 256 << 20,
        pids_limit: 64,
        runtime: Some("runc".into()),
        ..ServicesSpec::new("r1", vec![service("db")])
    };
    let body = sidecar_body(&spec, &spec.services[0], "net1", Kernel::Host);
    let hc = body.host_config.clone().unwrap_or_default();
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    assert_eq!(hc.cap_add.unwrap_or_default().len(), SIDECAR_CAPS.len());
    assert_eq!(
        hc.security_opt,
        Some(vec![
            "no-new-privileges:true".into(),
            format!("seccomp={}", crate::exec::seccomp::RUNNER_PROFILE.json())
        ])
    );
    assert_eq!(hc.memory, Some(256 << 20));
    assert_eq!(hc.memory_swap, Some(256 << 20));
    assert_eq!(hc.nano_cpus, Some(500_000_000));
    assert_eq!(hc.pids_limit, Some(64));
    assert_eq!(hc.network_mode.as_deref(), Some("net1"));
    assert_eq!(hc.auto_remove, Some(true));
    assert_eq!(hc.runtime.as_deref(), Some("runc"));
    assert_eq!(hc.privileged, Some(false));
    let labels = body.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(LABEL_SERVICE).map(String::as_str), Some("db"));
    assert!(labels.contains_key(container::LABEL_EXPIRES));
    let aliases = body
        .networking_config
        .and_then(|n| n.endpoints_config)
        .and_then(|e| e.get("net1").cloned())
        .and_then(|e| e.aliases);
    assert_eq!(aliases, Some(vec!["db".to_string()]));
    let health = body.healthcheck.unwrap_or_default();
    assert_eq!(health.interval, Some(1_000_000_000));
    assert_eq!(health.retries, Some(3));
}

#[test]
fn the_network_is_internal_without_a_host_address() {
    let req = network_request("runner-r-net-00000000", "r", Duration::from_secs(60));
    assert_eq!(req.internal, Some(true));
    let opts = req.options.unwrap_or_default();
    assert_eq!(
        opts.get("com.docker.network.bridge.inhibit_ipv4")
            .map(String::as_str),
        Some("true")
    );
    assert!(
        req.labels
            .unwrap_or_default()
            .contains_key(container::LABEL_OWNER_PID)
    );
}

#[test]
fn bad_specs_are_refused() {
    let ok = ServicesSpec::new("r", vec![service("db")]);
    assert!(validate(&ok).is_ok());
    for bad in [
        ServicesSpec::new("r", vec![]),
        ServicesSpec::new("r", vec![service("main")]),
        ServicesSpec::new("r", vec![service("db"), service("db")]),
        ServicesSpec {
            runtime: Some("host;x".into()),
            ..ServicesSpec::new("r", vec![service("db")])
        },
    ] {
        assert!(matches!(validate(&bad), Err(ExecError::Refused(_))));
    }
}
