//! A world for egress allowlist tests: a non-internal bridge network of
//! the test's own, an "allowed" server (aliases `allowed.runner-test`,
//! `alias-of-allowed.runner-test`, `a.wild.runner-test`,
//! `wild.runner-test`) and a "denied" one (`denied.runner-test`), each
//! `python3 -m http.server` of the bookworm image answering its own name
//! (`index.html`) and serving a git repository (`repo.git`, dumb HTTP).
//! Nothing else is ever contacted. Dropping it removes the servers and the
//! network, also when the test failed; what a killed test process left
//! (no drop runs after SIGKILL) is removed by the next world, which finds
//! it by the owner pid in its names.

use std::process::Command;
use std::time::{Duration, Instant};

use super::docker::{BOOKWORM, docker_cli, require_images};

/// The port the servers listen on.
pub const PORT: u16 = 8000;
/// What the allowed server answers.
pub const ALLOWED_BODY: &str = "ALLOWED-SERVER";
/// What the denied server answers.
pub const DENIED_BODY: &str = "DENIED-SERVER";
/// The egress proxy's image, built by `make sandbox-image`.
pub const PROXY: &str = "runner-proxy:bookworm";
/// The probe run in the sandbox (see the fixture's comment).
pub const PROBE: &str = include_str!("../fixtures/egress/probe.py");

/// The test's network and servers.
pub struct World {
    pub network: String,
    servers: Vec<String>,
    /// The allowed server's address on `network`.
    pub allowed_ip: String,
}

impl World {
    /// Creates the network and starts both servers, waiting until they
    /// answer.
    pub fn new(test: &str) -> World {
        require_images(&[BOOKWORM, PROXY]);
        sweep_dead_worlds();
        let tag = format!("{test}-{}-{:08x}", std::process::id(), fastrand::u32(..));
        let network = format!("runner-test-egress-{tag}");
        docker_cli(&["network", "create", "--driver", "bridge", &network]);
        let mut world = World {
            network,
            servers: Vec::new(),
            allowed_ip: String::new(),
        };
        let allowed = world.server(
            &format!("runner-test-allowed-{tag}"),
            ALLOWED_BODY,
            &[
                "allowed.runner-test",
                "alias-of-allowed.runner-test",
                "a.wild.runner-test",
                "wild.runner-test",
            ],
        );
        world.server(
            &format!("runner-test-denied-{tag}"),
            DENIED_BODY,
            &["denied.runner-test"],
        );
        let fmt = format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            world.network
        );
        world.allowed_ip = docker_cli(&["inspect", "--format", &fmt, &allowed])
            .trim()
            .to_string();
        assert!(
            world.allowed_ip.parse::<std::net::Ipv4Addr>().is_ok(),
            "the allowed server's address: {:?}",
            world.allowed_ip
        );
        world
    }

    /// Starts one server with `aliases` on the network, answering `body`.
    fn server(&mut self, name: &str, body: &str, aliases: &[&str]) -> String {
        let mut args: Vec<String> = [
            "run",
            "-d",
            "--name",
            name,
            "--network",
            &self.network,
            "--user",
            "1000:1000",
            "--cap-drop",
            "ALL",
            "--memory",
            "128m",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for a in aliases {
            args.extend(["--network-alias".to_string(), a.to_string()]);
        }
        args.extend([
            BOOKWORM.to_string(),
            "sh".into(),
            "-c".into(),
            // A page, and a git repository served over git's dumb HTTP
            // protocol (a package-manager-like client through the proxy).
            format!(
                "set -e; mkdir -p /tmp/www /tmp/src && echo {body} > /tmp/www/index.html && \
                 cd /tmp/src && git init -q && echo {body} > README && git add README && \
                 git -c user.name=t -c user.email=t@t commit -qm init && \
                 git clone -q --bare /tmp/src /tmp/www/repo.git && \
                 git -C /tmp/www/repo.git update-server-info && \
                 exec python3 -m http.server {PORT} --directory /tmp/www"
            ),
        ]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        docker_cli(&refs);
        self.servers.push(name.to_string());
        // Up once it answers itself on loopback.
        let deadline = Instant::now() + Duration::from_secs(30);
        let check =
            format!("import urllib.request as u; u.urlopen('http://127.0.0.1:{PORT}/', timeout=2)");
        while Command::new("docker")
            .args(["exec", name, "python3", "-c", &check])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            assert!(Instant::now() < deadline, "server {name} did not come up");
            std::thread::sleep(Duration::from_millis(200));
        }
        name.to_string()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for s in &self.servers {
            let _ = Command::new("docker").args(["rm", "-f", s]).output();
        }
        let _ = Command::new("docker")
            .args(["network", "rm", &self.network])
            .output();
    }
}

/// The name prefixes of a world's objects; each name ends in
/// `-{test}-{owner pid}-{8 hex digits}`.
const CONTAINER_PREFIXES: [&str; 2] = ["runner-test-allowed-", "runner-test-denied-"];
const NETWORK_PREFIX: &str = "runner-test-egress-";

/// The test process that made the world object `name`, read from its name.
pub fn owner_of(name: &str) -> Option<u32> {
    let mut parts = name.rsplitn(3, '-');
    let random = parts.next()?;
    let pid = parts.next()?;
    parts.next()?;
    (random.len() == 8 && random.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| pid.parse().ok())
        .flatten()
}

/// Removes the servers and networks of worlds whose test process is gone.
pub fn sweep_dead_worlds() {
    let dead = |name: &str| {
        owner_of(name).is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    let names = |args: &[&str]| -> Vec<String> {
        Command::new("docker")
            .args(args)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for c in names(&["ps", "-a", "--format", "{{.Names}}"]) {
        if CONTAINER_PREFIXES.iter().any(|p| c.starts_with(p)) && dead(&c) {
            let _ = Command::new("docker").args(["rm", "-f", &c]).output();
        }
    }
    for n in names(&["network", "ls", "--format", "{{.Name}}"]) {
        if n.starts_with(NETWORK_PREFIX) && dead(&n) {
            let _ = Command::new("docker").args(["network", "rm", &n]).output();
        }
    }
}

/// The probe's lines as `(case, result)`.
pub fn results(output: &str) -> std::collections::HashMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Whether a docker object (container or network) still exists.
pub fn exists(kind: &str, name: &str) -> bool {
    Command::new("docker")
        .args([kind, "inspect", name])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}
