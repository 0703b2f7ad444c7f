//! A Docker engine of a test's own, beside the shared one: its own
//! `dockerd` (data root, exec root, pid file and unix socket under a temp
//! dir, its own containerd and network namespace, no bridge, no iptables,
//! the vfs driver), for settings a test must not change on the engine
//! other engineers use (`--userns-remap`). It is stopped (by its own pid)
//! and everything of it removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::docker::{docker_cli, test_runtime};

/// Longest wait for the engine to answer.
const START_LIMIT: Duration = Duration::from_secs(90);

pub struct SecondEngine {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl SecondEngine {
    /// Starts `dockerd` with `extra` flags; panics (with its log) when it
    /// does not answer within [`START_LIMIT`]. The runtime under test
    /// (`RUNNER_TEST_RUNTIME`) is registered as the shared engine has it.
    pub fn start(extra: &[&str]) -> SecondEngine {
        assert!(
            nix::unistd::geteuid().is_root(),
            "a second engine needs root (dockerd); run this test as root"
        );
        let dir = tempfile::Builder::new()
            .prefix("runner-test-engine-")
            .tempdir()
            .expect("engine dir");
        let p = dir.path();
        // A configuration of its own: the host's daemon.json names the
        // shared engine's data root and storage driver.
        let mut conf = json!({});
        if let Some(rt) = test_runtime().filter(|r| r != "runc") {
            let runtimes: Value =
                serde_json::from_str(&docker_cli(&["info", "--format", "{{json .Runtimes}}"]))
                    .expect("docker info .Runtimes");
            let r = &runtimes[rt.as_str()];
            conf["runtimes"] = json!({ rt: {"path": r["path"], "runtimeArgs": r["runtimeArgs"]} });
        }
        std::fs::write(p.join("daemon.json"), conf.to_string()).expect("daemon.json");
        let log = std::fs::File::create(p.join("dockerd.log")).expect("log");
        let path = |name: &str| p.join(name).display().to_string();
        // In a network namespace of its own: a dockerd started with
        // `--bridge=none` deletes the host's `docker0` (moby's
        // removeDefaultBridgeInterface), which is the shared engine's bridge.
        // unshare execs dockerd, so the child's pid is dockerd's.
        let child = Command::new("unshare")
            .args(["--net", "--", "dockerd"])
            .args(["--config-file", &path("daemon.json")])
            .args(["--data-root", &path("data")])
            .args(["--exec-root", &path("exec")])
            .args(["--pidfile", &path("dockerd.pid")])
            .args(["-H", &format!("unix://{}", path("docker.sock"))])
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .args(["--storage-driver", "vfs"])
            .args(["--cgroup-parent", "runner-test-engine"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start dockerd: {e}"));
        let engine = SecondEngine {
            dir,
            child: Some(child),
        };
        let start = Instant::now();
        while start.elapsed() < START_LIMIT {
            if engine
                .docker(&["version", "--format", "{{.Server.Version}}"])
                .status
                .success()
            {
                return engine;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!(
            "the test's dockerd did not answer in {START_LIMIT:?}:\n{}",
            engine.log()
        );
    }

    /// `DOCKER_HOST` for this engine.
    pub fn host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// The engine's unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("docker.sock")
    }

    /// The engine's log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default()
    }

    /// Runs the docker CLI against this engine.
    pub fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .env("DOCKER_HOST", self.host())
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("the docker CLI is needed: {e}"))
    }

    /// Copies `image` from the shared engine into this one.
    pub fn load(&self, image: &str) {
        let mut save = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker save");
        let out = Command::new("docker")
            .env("DOCKER_HOST", self.host())
            .arg("load")
            .stdin(save.stdout.take().expect("save's stdout"))
            .output()
            .expect("docker load");
        let saved = save.wait().expect("docker save");
        assert!(saved.success(), "docker save {image} failed");
        assert!(
            out.status.success(),
            "loading {image} into the test's engine: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
        unmount_under(self.dir.path());
    }
}

/// Lazily unmounts whatever the engine left mounted under `dir`, deepest
/// first, so the temp dir can go.
fn unmount_under(dir: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut under: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(PathBuf::from))
        .filter(|m| m.starts_with(dir))
        .collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in under {
        let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        self.stop();
    }
}
