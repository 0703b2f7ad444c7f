//! A docker-compose task's sidecars: reachable from the main sandbox by
//! their service name on an internal network of their own, limited and
//! hardened like it, and gone after `stop`, a failed start, a drop, or
//! (through the next sweep) a SIGKILLed runner. Every query is narrowed to
//! the run id or the network this test made; the only traffic is between
//! the test's own containers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use runner::eval::compose;
use runner::exec::ExecError;
use runner::exec::backend::{
    Backend, SandboxSpec, ServiceHealthcheck, ServiceSpec, Services, ServicesSpec,
};
use runner::exec::docker::{DockerBackend, DockerServices, LABEL_SERVICE, gc};

use crate::support::docker::{TINY, test_runtime, test_runtime_forces_no_network};
use crate::support::executor::*;
use crate::support::serial::serial;
use runner::exec::ExecutorExt;
use runner::exec::backend::ServiceHost;

/// A sidecar serving `pong` over HTTP on port 8080, healthy once it answers.
fn web(name: &str) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        image: TINY.into(),
        env: vec![("GREETING".into(), "pong".into())],
        command: None,
        entrypoint: Some(vec![
            "sh".into(),
            "-c".into(),
            "mkdir -p /tmp/www && echo $GREETING > /tmp/www/index.html && \
             exec httpd -f -p 8080 -h /tmp/www"
                .into(),
        ]),
        user: None,
        workdir: None,
        healthcheck: Some(ServiceHealthcheck {
            test: vec![
                "CMD".into(),
                "wget".into(),
                "-q".into(),
                "-O".into(),
                "/dev/null".into(),
                "http://127.0.0.1:8080/".into(),
            ],
            interval: Duration::from_millis(300),
            timeout: Duration::from_secs(2),
            retries: 20,
            start_period: Duration::ZERO,
        }),
        volumes: vec!["/data".into()],
        read_only: false,
        init: false,
    }
}

fn spec(run_id: &str, services: Vec<ServiceSpec>) -> ServicesSpec {
    ServicesSpec {
        cpus: 0.5,
        memory_bytes: 128 << 20,
        pids_limit: 64,
        runtime: test_runtime(),
        health_timeout: Duration::from_secs(30),
        ..ServicesSpec::new(run_id, services)
    }
}

/// Whether the engine still knows network `name`.
async fn network_exists(d: &Docker, name: &str) -> bool {
    d.inspect_network(name, None).await.is_ok()
}

/// Asserts nothing of run `run_id` and its network `net` is left.
async fn assert_gone(d: &Docker, run_id: &str, net: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !containers_of(d, run_id).await.is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "containers of {run_id} left"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!network_exists(d, net).await, "network {net} left");
}

/// The runtime under test cannot give any network: the start is refused,
/// naming it (nothing else of these tests can run there).
async fn refused_without_network(run_id: &str) -> bool {
    if !test_runtime_forces_no_network() {
        return false;
    }
    let err = DockerBackend
        .start_services(spec(run_id, vec![web("db")]))
        .await
        .err()
        .expect("a runtime without network must refuse services");
    assert!(
        matches!(err, ExecError::RuntimeWithoutNetwork { .. }),
        "{err}"
    );
    true
}

#[tokio::test]
async fn a_compose_sidecar_answers_the_main_sandbox_by_name_on_an_internal_network() {
    let _s = serial();
    let d = docker().await;
    let id = run_id("svc-reach");
    if refused_without_network(&id).await {
        return;
    }
    // A task whose sidecar is built from a directory of its own.
    let task = tempfile::tempdir().unwrap();
    let env_dir = task.path().join("environment");
    std::fs::create_dir_all(env_dir.join("db")).unwrap();
    std::fs::write(
        env_dir.join("db/Dockerfile"),
        format!("FROM {TINY}\nRUN mkdir -p /www && echo pong-from-build > /www/index.html\n"),
    )
    .unwrap();
    std::fs::write(
        env_dir.join("docker-compose.yaml"),
        r#"
services:
  main:
    environment: [DB_URL=http://db:8080/]
    depends_on:
      db: {condition: service_healthy}
  db:
    build: ./db
    command: ["httpd", "-f", "-p", "8080", "-h", "/www"]
    ports: ["8080:8080"]
    healthcheck:
      test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/"]
      interval: 300ms
      retries: 20
"#,
    )
    .unwrap();
    let parsed = compose::load(task.path(), &BTreeMap::new())
        .unwrap()
        .expect("the compose file is found");
    assert!(
        parsed.warnings.iter().any(|w| w.contains("`ports`")),
        "{:?}",
        parsed.warnings
    );
    let backend = DockerBackend;
    let services = compose::start(
        &parsed,
        task.path(),
        &backend,
        spec(&id, Vec::new()),
        Duration::from_secs(300),
    )
    .await
    .unwrap_or_else(|e| panic!("starting the services failed: {e}"));
    let net = services.network().expect("a network to join");
    assert_eq!(services.names(), ["db"]);

    let info = d.inspect_network(&net, None).await.unwrap();
    assert_eq!(info.internal, Some(true), "the network must be internal");
    assert_eq!(
        info.options
            .unwrap_or_default()
            .get("com.docker.network.bridge.inhibit_ipv4")
            .map(String::as_str),
        Some("true"),
        "the host side of the bridge must have no address"
    );

    let mut sandbox = SandboxSpec::new(TINY, &id);
    sandbox.runtime = test_runtime();
    sandbox.env = parsed.main_env().to_vec();
    sandbox.join_services(services.as_ref());
    let loosenings = backend.loosenings(&sandbox);
    assert!(
        loosenings
            .iter()
            .any(|l| l.contains("joined the task's internal service network") && l.contains("db")),
        "{loosenings:?}"
    );
    let main = backend.start(sandbox).await.unwrap();
    let out = main
        .execute(req("wget -q -O - \"$DB_URL\"", 20.0))
        .await
        .unwrap();
    assert_eq!(out.output.trim(), "pong-from-build", "{out:?}");
    main.discard().await.unwrap();
    services.stop().await.unwrap();
    services.stop().await.expect("a second stop is a no-op");
    assert_gone(&d, &id, &net).await;
}

#[tokio::test]
async fn sidecars_get_the_limits_and_hardening_of_the_run() {
    let _s = serial();
    let d = docker().await;
    let id = run_id("svc-limits");
    if refused_without_network(&id).await {
        return;
    }
    let services = DockerServices::start(spec(&id, vec![web("db")]))
        .await
        .unwrap_or_else(|e| panic!("starting the services failed: {e}"));
    let net = services.network().unwrap();
    let ids = services.container_ids();
    assert_eq!(ids.len(), 1);
    let c = d.inspect_container(&ids[0], None).await.unwrap();
    let hc = c.host_config.unwrap_or_default();
    assert_eq!(hc.memory, Some(128 << 20));
    assert_eq!(hc.memory_swap, Some(128 << 20));
    assert_eq!(hc.nano_cpus, Some(500_000_000));
    assert!(
        hc.pids_limit.is_some_and(|p| p >= 64),
        "{:?}",
        hc.pids_limit
    );
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    let opts = hc.security_opt.unwrap_or_default();
    assert!(opts.iter().any(|o| o.starts_with("no-new-privileges")));
    // runner's seccomp profile holds the sidecars too (issue 21).
    assert!(
        opts.contains(&format!(
            "seccomp={}",
            runner::exec::seccomp::RUNNER_PROFILE.json()
        )),
        "the sidecar is not under runner's profile"
    );
    assert_eq!(hc.privileged, Some(false));
    assert_eq!(hc.network_mode.as_deref(), Some(net.as_str()));
    assert_eq!(hc.auto_remove, Some(true));
    assert_eq!(hc.log_config.and_then(|l| l.typ).as_deref(), Some("local"));
    if let Some(rt) = test_runtime() {
        assert_eq!(hc.runtime.as_deref(), Some(rt.as_str()));
    }
    let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(labels.get(LABEL_SERVICE).map(String::as_str), Some("db"));
    assert!(labels.contains_key(runner::exec::docker::LABEL_EXPIRES));
    let health = c.state.and_then(|s| s.health).and_then(|h| h.status);
    assert_eq!(
        health,
        Some(bollard::models::HealthStatusEnum::HEALTHY),
        "start returns once the healthcheck passed"
    );
    services.stop().await.unwrap();
    assert_gone(&d, &id, &net).await;
}

#[tokio::test]
async fn an_unhealthy_or_exiting_sidecar_fails_the_start_and_leaves_nothing() {
    let _s = serial();
    let d = docker().await;
    for (case, service) in [
        ("unhealthy", {
            let mut s = web("db");
            if let Some(h) = s.healthcheck.as_mut() {
                h.test = vec!["CMD".into(), "false".into()];
                h.retries = 1;
            }
            s
        }),
        ("exits", {
            let mut s = web("db");
            s.entrypoint = Some(vec![
                "sh".into(),
                "-c".into(),
                "echo boom-bye; exit 3".into(),
            ]);
            s.healthcheck = None;
            s
        }),
    ] {
        let id = run_id(&format!("svc-{case}"));
        if refused_without_network(&id).await {
            return;
        }
        let err = DockerBackend
            .start_services(spec(&id, vec![service]))
            .await
            .err()
            .unwrap_or_else(|| panic!("{case}: the start must fail"));
        let msg = err.to_string();
        assert!(msg.contains("service 'db'"), "{case}: {msg}");
        if case == "unhealthy" {
            assert!(msg.contains("unhealthy"), "{msg}");
        }
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !containers_of(&d, &id).await.is_empty() {
            assert!(std::time::Instant::now() < until, "{case}: containers left");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            networks_of(&d, &id).await.is_empty(),
            "{case}: network left"
        );
    }
}

#[tokio::test]
async fn dropping_the_services_without_stop_removes_them() {
    let _s = serial();
    let d = docker().await;
    let id = run_id("svc-drop");
    if refused_without_network(&id).await {
        return;
    }
    let services: Arc<dyn Services> = DockerBackend
        .start_services(spec(&id, vec![web("db"), web("cache")]))
        .await
        .unwrap();
    let net = services.network().unwrap();
    assert_eq!(containers_of(&d, &id).await.len(), 2);
    drop(services);
    assert_gone(&d, &id, &net).await;
}

/// Names of the networks of run `run_id`.
async fn networks_of(d: &Docker, run_id: &str) -> Vec<String> {
    use bollard::query_parameters::ListNetworksOptionsBuilder;
    let filter = std::collections::HashMap::from([(
        "label".to_string(),
        vec![format!("{}={run_id}", runner::exec::docker::LABEL_RUN_ID)],
    )]);
    let opts = ListNetworksOptionsBuilder::new().filters(&filter).build();
    d.list_networks(Some(opts))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|n| n.name)
        .collect()
}

/// Child half of the SIGKILL test: starts services, reports the network,
/// hangs.
#[tokio::test]
#[ignore = "helper run as a child process by services_of_a_sigkilled_runner_go_with_the_next_gc"]
async fn helper_start_services_and_hang() {
    let Ok(id) = std::env::var("RUNNER_TEST_HELPER") else {
        return;
    };
    let services = DockerServices::start(spec(&id, vec![web("db")]))
        .await
        .unwrap();
    println!("STARTED {}", services.network().unwrap());
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
    drop(services);
}

#[tokio::test]
async fn services_of_a_sigkilled_runner_go_with_the_next_gc() {
    use std::io::BufRead;
    let _s = serial();
    let d = docker().await;
    let id = run_id("svc-sigkill");
    if refused_without_network(&id).await {
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "services::helper_start_services_and_hang",
            "--ignored",
            "--nocapture",
        ])
        .env("RUNNER_TEST_HELPER", &id)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let net = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("STARTED ").map(str::to_string))
        .expect("the helper did not start its services");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    // Nothing could clean up in the killed process: the sidecar runs on.
    assert_eq!(containers_of(&d, &id).await.len(), 1);
    assert!(network_exists(&d, &net).await);
    let report = gc(&d).await.unwrap();
    assert!(
        report.networks_removed.contains(&net),
        "the sweep must remove the dead run's network: {report:?}"
    );
    assert_gone(&d, &id, &net).await;
}

#[tokio::test]
async fn a_build_context_that_leaves_the_task_through_a_link_is_refused() {
    let _s = serial();
    let task = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("Dockerfile"), format!("FROM {TINY}\n")).unwrap();
    let env_dir = task.path().join("environment");
    std::fs::create_dir_all(&env_dir).unwrap();
    std::os::unix::fs::symlink(outside.path(), env_dir.join("db")).unwrap();
    std::fs::write(
        env_dir.join("docker-compose.yaml"),
        "services:\n  main: {}\n  db:\n    build: ./db\n",
    )
    .unwrap();
    // Refused when the task is read, before any build starts.
    let err = compose::load(task.path(), &BTreeMap::new())
        .expect_err("a linked-out context must be refused at load");
    assert!(
        err.to_string().contains("leaves the task directory"),
        "{err}"
    );
}

#[tokio::test]
async fn a_sandbox_with_a_network_of_its_own_joins_the_services_too() {
    let _s = serial();
    let d = docker().await;
    let id = run_id("svc-bridge");
    if refused_without_network(&id).await {
        return;
    }
    let services = DockerServices::start(spec(&id, vec![web("db")]))
        .await
        .unwrap_or_else(|e| panic!("starting the services failed: {e}"));
    let net = services.network().unwrap();
    let mut c = cfg("svc-bridge");
    c.run_id = id.clone();
    c.network = Some("bridge".into());
    c.join_network = Some(net.clone());
    c.network_peers = services.names();
    let ex = start(c).await;
    // Only the test's own sidecar is asked.
    let out = run(&ex, "wget -q -O - http://db:8080/", 20.0).await;
    assert_eq!(out.output.trim(), "pong", "{out:?}");
    let info = d.inspect_container(ex.container_id(), None).await.unwrap();
    let nets = info
        .network_settings
        .and_then(|n| n.networks)
        .unwrap_or_default();
    assert!(
        nets.contains_key("bridge") && nets.contains_key(&net),
        "{:?}",
        nets.keys()
    );
    let aliases = nets
        .get(&net)
        .and_then(|e| e.aliases.clone())
        .unwrap_or_default();
    assert!(aliases.iter().any(|a| a == "main"), "{aliases:?}");
    ex.shutdown().await.unwrap();
    services.stop().await.unwrap();
    assert_gone(&d, &id, &net).await;
}
