//! An allowlisted sandbox (`--allow-host`, a task's `network_mode =
//! "allowlist"`) reaches the names it was given through the filtering
//! proxy, and nothing else: not other names, not IP literals, not another
//! name of an allowed server's address, not any address directly. Only the
//! test's own network and servers are contacted (see `support::egress`).

use runner::exec::docker::{DockerConfig, EgressSpec};

use crate::support::docker::{BOOKWORM, test_runtime_forces_no_network};
use crate::support::egress::{ALLOWED_BODY, PROBE, World, exists, results};
use crate::support::executor::{cfg, docker, run, start};
use crate::support::serial::serial;
use runner::exec::ExecutorExt;

/// The DNS probe (see the fixture's comment).
const DNS_PROBE: &str = include_str!("../fixtures/egress/dns.py");

/// On a runtime registered with `--network=none` (Debian's runsc here) no
/// sandbox can have a network, an allowlisted one neither: the start is
/// refused before anything is made, saying so. True when it was.
async fn refused_by_the_runtime(c: &DockerConfig) -> bool {
    if !test_runtime_forces_no_network() {
        return false;
    }
    let run_id = c.run_id.clone();
    let err = runner::exec::docker::DockerExecutor::start(c.clone())
        .await
        .err()
        .expect("a runtime without networks refuses an allowlist");
    assert!(
        err.to_string()
            .contains("cannot give the sandbox a network")
            && err.hint().is_some_and(|h| h.contains("--allow-host")),
        "{err}"
    );
    let d = docker().await;
    assert!(
        crate::support::executor::containers_of(&d, &run_id)
            .await
            .is_empty(),
        "nothing is made"
    );
    true
}

/// The sandbox of these tests: bookworm (python3), allowlisted.
fn allowlisted(test: &str, world: &World, hosts: &[&str]) -> DockerConfig {
    DockerConfig {
        image: BOOKWORM.into(),
        egress: Some(EgressSpec {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            via: Some(world.network.clone()),
        }),
        ..cfg(test)
    }
}

#[tokio::test]
async fn only_the_allowed_names_get_through_the_proxy() {
    let _s = serial();
    let world = World::new("names");
    let d = docker().await;
    let c = allowlisted(
        "egress-names",
        &world,
        &["allowed.runner-test", "*.wild.runner-test"],
    );
    if refused_by_the_runtime(&c).await {
        return;
    }
    let run_id = c.run_id.clone();
    let ex = start(c).await;
    let proxy = ex
        .egress_proxy_id()
        .expect("an allowlisted sandbox has a proxy");
    let network = ex.egress_network().expect("and a network of its own");
    assert!(
        ex.loosenings()
            .iter()
            .any(|l| l.contains("allowed.runner-test, *.wild.runner-test")),
        "the loosenings name the hosts: {:?}",
        ex.loosenings()
    );
    // The proxy as the engine runs it: hardened like a sandbox.
    let inspect =
        |fmt: &str| crate::support::docker::docker_cli(&["inspect", "--format", fmt, &proxy]);
    assert_eq!(inspect("{{json .HostConfig.CapDrop}}"), "[\"ALL\"]");
    assert_eq!(inspect("{{json .HostConfig.CapAdd}}"), "null");
    assert_eq!(inspect("{{.HostConfig.ReadonlyRootfs}}"), "true");
    assert_eq!(inspect("{{.HostConfig.Privileged}}"), "false");
    assert!(inspect("{{json .HostConfig.SecurityOpt}}").contains("no-new-privileges"));
    assert_eq!(inspect("{{.Config.User}}"), "65534:65534");
    assert_eq!(inspect("{{.HostConfig.Memory}}"), (64u64 << 20).to_string());
    assert!(
        inspect("{{.HostConfig.PidsLimit}}")
            .parse::<i64>()
            .is_ok_and(|p| p > 0)
    );
    let nets = inspect("{{json .NetworkSettings.Networks}}");
    assert!(
        nets.contains(&network) && nets.contains(&world.network),
        "the proxy is on the sandbox's network and the way out: {nets}"
    );
    let sandbox_nets = crate::support::docker::docker_cli(&[
        "inspect",
        "--format",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
        ex.container_id(),
    ]);
    assert_eq!(
        sandbox_nets.trim(),
        network,
        "the sandbox is on its network only"
    );
    let internal = crate::support::docker::docker_cli(&[
        "network",
        "inspect",
        "--format",
        "{{.Internal}}",
        &network,
    ]);
    assert_eq!(internal, "true");
    let cmd = format!(
        "cat > /tmp/probe.py <<'PY'\n{PROBE}PY\npython3 /tmp/probe.py {}",
        world.allowed_ip
    );
    let out = run(&ex, &cmd, 120.0).await;
    let r = results(&out.output);
    let is = |case: &str, want: &str| {
        assert_eq!(
            r.get(case).map(String::as_str),
            Some(want),
            "{case} in\n{}",
            out.output
        );
    };
    let refused = |case: &str| {
        let got = r.get(case).map(String::as_str).unwrap_or("");
        assert!(
            got.starts_with("403"),
            "{case} must be refused by the proxy, got {got:?} in\n{}",
            out.output
        );
    };
    let ok = format!("200 {ALLOWED_BODY}");
    is("allowed", &ok);
    is("allowed-upper-case", &ok);
    is("wildcard-below", &ok);
    is("connect-allowed", &format!("tunnel {ALLOWED_BODY}"));
    for case in [
        "denied",
        "ip-literal",
        "decimal-ip",
        "other-alias",
        "userinfo",
        "wildcard-bare",
        "connect-denied",
        "connect-ip",
    ] {
        refused(case);
    }
    // No way around the proxy: the network is internal.
    for case in ["direct-ip", "direct-no-proxy"] {
        let got = r.get(case).map(String::as_str).unwrap_or("");
        assert!(
            got.starts_with("ERR"),
            "{case} must not connect, got {got:?} in\n{}",
            out.output
        );
    }
    // A client of its own (git over HTTP) honours the proxy variables: the
    // allowed server's repository clones, the denied one's does not.
    let out = run(
        &ex,
        "cd /tmp && git clone -q http://allowed.runner-test:8000/repo.git a && cat a/README; \
         git clone -q http://denied.runner-test:8000/repo.git d; echo denied-exit=$?",
        120.0,
    )
    .await;
    assert!(
        out.output.contains(ALLOWED_BODY) && out.output.contains("denied-exit=128"),
        "{}",
        out.output
    );
    assert!(
        out.output.contains("403"),
        "git names the refusal: {}",
        out.output
    );
    // Only the sandbox's network may use the proxy: the test's network
    // (the proxy's way out) is refused by its ACL.
    let proxy_ip = crate::support::docker::docker_cli(&[
        "inspect",
        "--format",
        &format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            world.network
        ),
        &proxy,
    ]);
    let from_outside = crate::support::docker::docker_cli(&[
        "run",
        "--rm",
        "--network",
        &world.network,
        "--cap-drop",
        "ALL",
        BOOKWORM,
        "python3",
        "-c",
        &format!(
            "import urllib.request as u, urllib.error as e\n\
             o = u.build_opener(u.ProxyHandler({{'http': 'http://{proxy_ip}:3128'}}))\n\
             try:\n    print(o.open('http://allowed.runner-test:8000/', timeout=5).status)\n\
             except e.HTTPError as x:\n    print(x.code)\n"
        ),
    ]);
    assert_eq!(
        from_outside.trim(),
        "403",
        "the proxy serves its sandbox only"
    );

    // DNS: the proxy's name resolves; any other name is forwarded only to
    // the sandbox's own loopback. Checked on the container first, so the
    // query below cannot go anywhere else.
    let dns = crate::support::docker::docker_cli(&[
        "inspect",
        "--format",
        "{{json .HostConfig.Dns}}",
        ex.container_id(),
    ]);
    assert_eq!(dns, "[\"127.0.0.1\"]", "the sandbox's upstream DNS");
    let out = run(
        &ex,
        &format!("cat > /tmp/dns.py <<'PY'\n{DNS_PROBE}PY\npython3 /tmp/dns.py"),
        60.0,
    )
    .await;
    let r = results(&out.output);
    assert!(
        r.get("proxy-name")
            .is_some_and(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok()),
        "{}",
        out.output
    );
    assert_eq!(
        r.get("canary").map(String::as_str),
        Some("unresolved"),
        "{}",
        out.output
    );
    assert_eq!(
        r.get("canary-on-loopback").map(String::as_str),
        Some("True"),
        "{}",
        out.output
    );

    ex.shutdown().await.expect("shutdown");
    drop(ex);
    assert!(
        !exists("container", &proxy),
        "the proxy is removed with the sandbox"
    );
    assert!(!exists("network", &network), "and so is its network");
    assert!(
        crate::support::executor::containers_of(&d, &run_id)
            .await
            .is_empty(),
        "nothing of {run_id} is left"
    );
}

#[tokio::test]
async fn a_dropped_sandbox_takes_its_proxy_and_network_along() {
    let _s = serial();
    let world = World::new("drop");
    let c = allowlisted("egress-drop", &world, &["allowed.runner-test"]);
    if refused_by_the_runtime(&c).await {
        return;
    }
    let ex = start(c).await;
    let proxy = ex.egress_proxy_id().expect("a proxy");
    let network = ex.egress_network().expect("a network");
    assert!(exists("container", &proxy) && exists("network", &network));
    // No shutdown: the panic and Ctrl-C path.
    drop(ex);
    assert!(!exists("container", &proxy), "proxy left after a drop");
    assert!(!exists("network", &network), "network left after a drop");
}

#[tokio::test]
async fn an_empty_allowlist_admits_nothing_and_a_missing_egress_network_is_named() {
    let _s = serial();
    let world = World::new("empty");
    let c = allowlisted("egress-empty", &world, &[]);
    if refused_by_the_runtime(&c).await {
        return;
    }
    let ex = start(c).await;
    let out = run(
        &ex,
        "python3 -c \"import urllib.request as u, urllib.error as e\ntry: u.urlopen('http://allowed.runner-test:8000/', timeout=5)\nexcept e.HTTPError as x: print('code', x.code)\"",
        60.0,
    )
    .await;
    assert!(out.output.contains("code 403"), "{}", out.output);
    ex.shutdown().await.expect("shutdown");

    let mut c = allowlisted("egress-missing", &world, &["allowed.runner-test"]);
    let gone = format!("{}-gone", world.network);
    c.egress = Some(EgressSpec {
        hosts: vec!["allowed.runner-test".into()],
        via: Some(gone.clone()),
    });
    let run_id = c.run_id.clone();
    let err = runner::exec::docker::DockerExecutor::start(c)
        .await
        .err()
        .expect("a missing egress network is refused");
    assert!(err.to_string().contains(&gone), "{err}");
    assert!(
        err.hint().is_some_and(|h| h.contains("--egress-network")),
        "{err}"
    );
    let d = docker().await;
    assert!(
        crate::support::executor::containers_of(&d, &run_id)
            .await
            .is_empty()
    );
}

/// A world a killed test left (no drop runs after SIGKILL) is removed by
/// the next one, found by the dead owner pid in its name; a live owner's is
/// kept.
#[test]
fn a_world_left_by_a_killed_test_is_swept_and_a_live_ones_kept() {
    let mut gone = std::process::Command::new("true").spawn().expect("spawn");
    let dead_pid = gone.id();
    gone.wait().expect("wait");
    let tag = |pid: u32| format!("sweep-{pid}-{:08x}", fastrand::u32(..));
    let dead = format!("runner-test-egress-{}", tag(dead_pid));
    let live = format!("runner-test-egress-{}", tag(std::process::id()));
    for n in [&dead, &live] {
        crate::support::docker::docker_cli(&["network", "create", n]);
    }
    assert_eq!(crate::support::egress::owner_of(&dead), Some(dead_pid));
    crate::support::egress::sweep_dead_worlds();
    let (dead_left, live_left) = (exists("network", &dead), exists("network", &live));
    let _ = std::process::Command::new("docker")
        .args(["network", "rm", &dead, &live])
        .output();
    assert!(!dead_left, "{dead} of a dead test is still there");
    assert!(live_left, "{live} of this live test was removed");
}
