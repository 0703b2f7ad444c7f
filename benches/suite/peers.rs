//! The Python peers (mini-swe-agent, SWE-ReX) as `make bench-peers`
//! installs them under target/peers (bench/peers/install.sh), each driven
//! through bench/peers/driver.py: one process per tool, the tool's own
//! environment started by the tool, one JSON line per request and reply
//! (bench/peers/README.md). The bench times nothing of the driver itself:
//! each reply carries the wall time of the tool's call, measured around it
//! in the driver.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::sys::BENCH_LABEL;

/// How long a tool may take to bring its environment up.
const READY_DEADLINE: Duration = Duration::from_secs(180);

/// The tools the driver speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// mini-swe-agent's `DockerEnvironment.execute`: a `docker exec` per call.
    Mini,
    /// SWE-ReX `DockerDeployment` + `runtime.execute`: its server in the
    /// container, a fresh process per call.
    SwerexExec,
    /// SWE-ReX `run_in_session`: one bash session kept across calls.
    SwerexSession,
}

impl Tool {
    pub const ALL: [Tool; 3] = [Tool::Mini, Tool::SwerexExec, Tool::SwerexSession];

    fn arg(self) -> &'static str {
        match self {
            Tool::Mini => "mini",
            Tool::SwerexExec => "swerex-exec",
            Tool::SwerexSession => "swerex-session",
        }
    }

    /// The row label, with the package's version (none: not installed).
    pub fn label(self, version: &str) -> String {
        if version.is_empty() {
            return match self {
                Tool::Mini => "mini-swe-agent DockerEnvironment.execute".into(),
                Tool::SwerexExec => "SWE-ReX execute (server in the container)".into(),
                Tool::SwerexSession => "SWE-ReX run_in_session".into(),
            };
        }
        match self {
            Tool::Mini => format!("mini-swe-agent {version} DockerEnvironment.execute"),
            Tool::SwerexExec => format!("SWE-ReX {version} execute (server in the container)"),
            Tool::SwerexSession => format!("SWE-ReX {version} run_in_session"),
        }
    }
}

/// Where the peers are installed, or why they are not.
pub struct Install {
    python: PathBuf,
    driver: PathBuf,
}

impl Install {
    /// The venv and driver, when bench/peers/install.sh has finished.
    pub fn find(root: &Path) -> Result<Install, String> {
        let marker = root.join("target/peers/.installed");
        let python = root.join("target/peers/venv/bin/python");
        let driver = root.join("bench/peers/driver.py");
        if !marker.is_file() || !python.is_file() {
            return Err("the peers are not installed (run `make bench-peers`)".into());
        }
        if !driver.is_file() {
            return Err(format!("{} is missing", driver.display()));
        }
        Ok(Install { python, driver })
    }
}

/// One reply to a `call`.
#[derive(Debug, Clone, Deserialize)]
pub struct Call {
    pub ms: f64,
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub output: String,
    #[serde(default)]
    pub output_bytes: u64,
    pub error: Option<String>,
}

/// A running driver: one tool, its environment up.
pub struct Peer {
    pub tool: Tool,
    pub version: String,
    /// The container the tool started (id or name).
    pub container: String,
    /// How long the tool took to bring its environment up.
    pub start_ms: f64,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Peer {
    /// Starts the driver for `tool` on `image` and waits for its ready line.
    pub fn start(install: &Install, tool: Tool, image: &str) -> Result<Peer, String> {
        let mut child = Command::new(&install.python)
            .arg(&install.driver)
            .arg(tool.arg())
            .args(["--image", image, "--label", BENCH_LABEL])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", install.python.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("the driver has no stdout")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut peer = Peer {
            tool,
            version: String::new(),
            container: String::new(),
            start_ms: 0.0,
            child,
            stdin,
            lines,
        };
        let ready = peer.reply(READY_DEADLINE)?;
        if ready["ready"] != true {
            return Err(format!(
                "{} did not start: {}",
                tool.arg(),
                ready["error"].as_str().unwrap_or("no reason given")
            ));
        }
        peer.version = ready["version"].as_str().unwrap_or("?").to_string();
        peer.container = ready["container"].as_str().unwrap_or_default().to_string();
        peer.start_ms = ready["start_ms"].as_f64().unwrap_or(f64::NAN);
        Ok(peer)
    }

    pub fn label(&self) -> String {
        self.tool.label(&self.version)
    }

    fn send(&mut self, request: &Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("the driver's stdin is closed")?;
        writeln!(stdin, "{request}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("{}: writing to the driver: {e}", self.tool.arg()))
    }

    /// The next JSON line, within `deadline`.
    fn reply(&mut self, deadline: Duration) -> Result<Value, String> {
        match self.lines.recv_timeout(deadline) {
            Ok(line) => serde_json::from_str(&line).map_err(|e| {
                format!(
                    "{}: a reply that is not JSON ({e}): {line}",
                    self.tool.arg()
                )
            }),
            Err(RecvTimeoutError::Timeout) => {
                Err(format!("{}: no reply in {deadline:?}", self.tool.arg()))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(format!("{}: the driver exited", self.tool.arg()))
            }
        }
    }

    /// Runs `command` once through the tool with the tool's own timeout;
    /// Err when no reply came within `deadline` (the driver is then killed).
    pub fn call(
        &mut self,
        command: &str,
        timeout: f64,
        deadline: Duration,
    ) -> Result<Call, String> {
        self.send(&json!({"op": "call", "command": command, "timeout": timeout}))?;
        match self.reply(deadline) {
            Ok(v) => serde_json::from_value(v)
                .map_err(|e| format!("{}: a call reply without its fields: {e}", self.tool.arg())),
            Err(e) => {
                self.kill();
                Err(e)
            }
        }
    }

    /// The driver's peak RSS so far, KiB.
    pub fn max_rss_kib(&mut self) -> Result<u64, String> {
        self.send(&json!({"op": "rss"}))?;
        let v = self.reply(Duration::from_secs(10))?;
        v["max_rss_kib"]
            .as_u64()
            .ok_or_else(|| format!("{}: no max_rss_kib in {v}", self.tool.arg()))
    }

    /// Tears the tool's environment down as the tool does; the wall time.
    pub fn close(mut self) -> Result<f64, String> {
        self.send(&json!({"op": "close"}))?;
        let v = self.reply(Duration::from_secs(60));
        self.stdin = None;
        let _ = self.child.wait();
        let v = v?;
        match v["error"].as_str() {
            Some(e) => Err(format!("{}: close failed: {e}", self.tool.arg())),
            None => Ok(v["ms"].as_f64().unwrap_or(f64::NAN)),
        }
    }

    /// Stops the driver without asking the tool to clean up (what a user
    /// gets when the tool hangs); its container, if any, is left behind.
    pub fn kill(&mut self) {
        self.stdin = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// Whether container `id` still exists (any state) and whether it runs.
pub fn container_state(id: &str) -> Option<bool> {
    if id.is_empty() {
        return None;
    }
    crate::sys::docker_out(&["inspect", "--format", "{{.State.Running}}", id])
        .ok()
        .map(|s| s.trim() == "true")
}

/// The image bench/peers/install.sh builds for SWE-ReX (its server
/// installed offline from PyPI wheels, on runner-sandbox:bookworm).
pub const SWEREX_IMAGE: &str = "runner-bench-swerex:1.4.0";
