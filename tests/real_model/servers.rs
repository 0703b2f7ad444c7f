//! The real servers of this test (sandbox/real-model/servers.sh) and the
//! recording proxy put between runner and them
//! (tests/fixtures/llm-vectors/record_local_servers.py), each stopped by a
//! drop guard.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/real-model, where `make test-real-model` installs and reports.
pub fn dest() -> PathBuf {
    repo().join("target/real-model")
}

const HINT: &str = "hint: run `make test-real-model` (it installs the venv with \
    sandbox/real-model/install.sh, then runs this test)";

/// The llama.cpp servers and LiteLLM's proxy, up; stopped on drop.
pub struct Servers {
    state: PathBuf,
    pub env: HashMap<String, String>,
}

impl Servers {
    /// Starts them; panics (never skips) when the venv is not installed.
    pub fn start() -> Servers {
        let stamp = dest().join(".installed");
        assert!(
            stamp.is_file() && dest().join("venv/bin/python").is_file(),
            "the real-model venv is not installed ({} is missing)\n{HINT}",
            stamp.display()
        );
        let state = dest().join("servers-test");
        let out = Command::new("bash")
            .arg(repo().join("sandbox/real-model/servers.sh"))
            .arg("start")
            .arg(&state)
            .stdin(Stdio::null())
            .output()
            .expect("run sandbox/real-model/servers.sh");
        let mut servers = Servers {
            state: state.clone(),
            env: HashMap::new(),
        };
        assert!(
            out.status.success(),
            "sandbox/real-model/servers.sh start failed:\n{}{}\n{HINT}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(state.join("servers.env")).expect("read servers.env");
        servers.env = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        servers
    }

    pub fn get(&self, key: &str) -> &str {
        self.env
            .get(key)
            .unwrap_or_else(|| panic!("servers.env has no {key}"))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo().join("sandbox/real-model/servers.sh"))
            .arg("stop")
            .arg(&self.state)
            .stdin(Stdio::null())
            .status();
    }
}

/// The recording proxy in front of one server, for one run; killed on drop.
pub struct Recording {
    child: Child,
    pub out: PathBuf,
    pub url: String,
}

impl Recording {
    /// A proxy to `upstream` (scheme, host and port) writing to `out`.
    pub fn start(upstream: &str, out: &Path) -> Recording {
        let _ = std::fs::remove_file(out);
        let mut child = Command::new("python3")
            .arg(repo().join("tests/fixtures/llm-vectors/record_local_servers.py"))
            .args(["proxy", "--upstream", upstream, "--out"])
            .arg(out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the recording proxy (python3)");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("the proxy's stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the proxy's first line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the recording proxy said {line:?}"))
            .to_string();
        Recording {
            child,
            out: out.to_path_buf(),
            url,
        }
    }

    /// The requests runner sent, waiting up to `secs` for at least `n`: an
    /// exchange is written once the upstream ends its stream, which may be
    /// after runner has read what it needed and exited.
    pub fn wait_requests(&self, n: usize, secs: u64) -> Vec<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let got = self.requests();
            if got.len() >= n || std::time::Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// The requests runner sent, in order (bodies as JSON).
    pub fn requests(&self) -> Vec<Value> {
        let text = match std::fs::read_to_string(&self.out) {
            Ok(t) => t,
            Err(_) => return Vec::new(),
        };
        let v: Value = serde_json::from_str(&text).expect("the recording is JSON");
        v["interactions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|i| i["request"]["body"].clone())
            .collect()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
