//! Helpers for tests that drive the `runner` binary as a user does. When a
//! check fails, the command, its directory, stdout and stderr are printed.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A scratch directory to run `runner` in, with its own `runs/`.
pub struct Dir {
    pub tmp: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Dir {
    pub fn new() -> Self {
        Dir {
            tmp: tempfile::Builder::new()
                .prefix("runner-test-")
                .tempdir()
                .expect("create a temp dir"),
            home: tempfile::Builder::new()
                .prefix("runner-test-home-")
                .tempdir()
                .expect("create a temp HOME"),
        }
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// The HOME of runner in this directory's runs: a directory of its own
    /// beside this one (runner refuses its home as a workspace, and a test
    /// may use this directory as one).
    pub fn home(&self) -> PathBuf {
        self.home.path().to_path_buf()
    }

    /// Writes a file relative to the directory.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).expect("write test file");
        p
    }

    /// A `runner` command that runs in this directory with a clean
    /// environment (PATH and HOME only), so the host's settings don't leak
    /// into the test.
    pub fn runner(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_runner"));
        c.current_dir(self.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            // A home of its own, beside (not equal to) the directory a test
            // may use as the workspace: runner refuses the home itself.
            .env("HOME", self.home())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    /// `runner --provider scripted --script SCRIPT --json`, ready for more
    /// flags and the task.
    pub fn scripted(&self, script: &str) -> Command {
        let mut c = self.runner();
        c.args(["--provider", "scripted", "--script", script, "--json"]);
        c
    }

    /// The single run directory: under `runs/` here, or, when this
    /// directory was the workspace, in runner's state directory in HOME.
    pub fn run_dir(&self) -> PathBuf {
        let here = self.path().join("runs");
        let base = if here.exists() {
            here
        } else {
            self.home().join(".local/state/runner/runs")
        };
        let mut dirs: Vec<_> = std::fs::read_dir(&base)
            .unwrap_or_else(|e| panic!("{} exists: {e}", base.display()))
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(dirs.len(), 1, "expected one run dir, got {dirs:?}");
        dirs.remove(0)
    }

    /// Every event of the run's trajectory (each line must parse).
    pub fn trajectory(&self) -> Vec<Value> {
        read_jsonl(&self.run_dir().join("trajectory.jsonl"))
    }
}

/// Parses a JSON lines file; panics naming the bad line.
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// Runs `cmd` and returns its output, describing it on failure.
pub struct Ran {
    pub out: Output,
    pub desc: String,
    pub elapsed: Duration,
}

impl Ran {
    pub fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    /// Asserts the exit code, printing everything when it differs.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code(), code, "{}", self.explain());
        self
    }

    pub fn explain(&self) -> String {
        format!(
            "\ncommand: {}\nexit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n",
            self.desc,
            self.out.status,
            self.stdout(),
            self.stderr()
        )
    }

    /// The JSON lines on stdout (with --json).
    pub fn events(&self) -> Vec<Value> {
        self.stdout()
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!("stdout line is not JSON {l:?}: {e}{}", self.explain())
                })
            })
            .collect()
    }
}

pub fn run(cmd: &mut Command) -> Ran {
    let desc = format!("{cmd:?}");
    let start = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    Ran {
        out,
        desc,
        elapsed: start.elapsed(),
    }
}

/// Events of a given type.
pub fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// The outcome recorded in the last event, which must be `run_finished`.
pub fn outcome(events: &[Value]) -> String {
    let last = events.last().expect("at least one event");
    assert_eq!(last["type"], "run_finished", "last event: {last}");
    last["outcome"].as_str().unwrap_or_default().to_string()
}

/// Whether any process's command line contains `needle`.
pub fn process_alive(needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    for e in entries.flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                return true;
            }
        }
    }
    false
}

/// Whether a process whose command line contains `needle` runs in a
/// sandbox of the runner with pid `owner`, as `ps` inside the container
/// sees it: a gVisor sandbox's processes are not the host's, so
/// [`process_alive`] cannot see them.
pub fn sandbox_process_alive(owner: u32, needle: &str) -> bool {
    let label = format!("label=runner.owner-pid={owner}");
    let ids = docker(&[
        "ps",
        "-q",
        "--filter",
        "label=runner.managed-by=runner",
        "--filter",
        &label,
    ]);
    ids.lines().any(|id| {
        // A container on its way out answers with an error: nothing runs.
        Command::new("docker")
            .args(["exec", id, "ps", "-o", "args"])
            .output()
            .is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.contains(needle) && !l.contains("ps -o"))
            })
    })
}

/// The sandbox image binary tests use (busybox + bash, built by
/// `make sandbox-image`).
pub const TINY_IMAGE: &str = "runner-sandbox:tiny";

/// Where a binary test runs commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exec {
    Local,
    Docker,
}

impl Exec {
    /// The flags selecting this executor. For docker this first checks that
    /// the engine and the tiny image are there, failing (never skipping)
    /// with what to do otherwise, and adds `--runtime` from
    /// `RUNNER_TEST_RUNTIME` (see [`runtime_args`]).
    pub fn args(self) -> Vec<String> {
        let mut a: Vec<String> = match self {
            Exec::Local => vec!["--executor".into(), "local".into()],
            Exec::Docker => {
                require_docker();
                vec![
                    "--executor".into(),
                    "docker".into(),
                    "--image".into(),
                    TINY_IMAGE.into(),
                ]
            }
        };
        if self == Exec::Docker {
            a.extend(runtime_args());
        }
        a
    }
}

/// The container runtime docker tests run on: `RUNNER_TEST_RUNTIME` (e.g.
/// `runsc`, which `make test` sets for its second pass), or the engine's
/// default when unset.
pub fn test_runtime() -> Option<String> {
    std::env::var("RUNNER_TEST_RUNTIME")
        .ok()
        .filter(|r| !r.is_empty())
}

/// Whether the engine starts [`test_runtime`] with its network switched
/// off whatever the container asks (runsc registered with `--network=none`,
/// as `.ci/run` does), read from `docker info`.
pub fn test_runtime_forces_no_network() -> bool {
    let Some(rt) = test_runtime() else {
        return false;
    };
    let runtimes: Value =
        serde_json::from_str(&docker(&["info", "--format", "{{json .Runtimes}}"]))
            .unwrap_or_else(|e| panic!("docker info .Runtimes is not JSON: {e}"));
    runtimes[rt.as_str()]["runtimeArgs"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == "--network=none"))
}

/// `--runtime NAME` for [`test_runtime`], or nothing.
pub fn runtime_args() -> Vec<String> {
    test_runtime()
        .map(|r| vec!["--runtime".to_string(), r])
        .unwrap_or_default()
}

/// Runs the docker CLI, returning trimmed stdout; panics with its stderr
/// when it fails.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("the docker CLI is needed for this test: {e}"));
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Panics unless the Docker engine answers and the tiny image exists.
pub fn require_docker() {
    let info = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", TINY_IMAGE])
        .output();
    match info {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "this test needs a running Docker engine and the image {TINY_IMAGE} \
             (make sandbox-image): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("this test needs the docker CLI and a running engine: {e}"),
    }
}

/// Ids of runner-labelled objects (`ps` for containers, `volume` for
/// volumes), narrowed to one run when `run_id` is given.
pub fn docker_labelled(kind: &str, run_id: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = match kind {
        "ps" => vec!["ps".into(), "-aq".into()],
        "volume" => vec!["volume".into(), "ls".into(), "-q".into()],
        other => panic!("unknown docker object kind {other}"),
    };
    args.extend(["--filter".into(), "label=runner.managed-by=runner".into()]);
    if let Some(id) = run_id {
        args.extend(["--filter".into(), format!("label=runner.run-id={id}")]);
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&refs)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Runner-labelled containers (running or not) of a run.
pub fn docker_labelled_containers(run_id: &str) -> Vec<String> {
    docker_labelled("ps", Some(run_id))
}

/// Runner-labelled containers (`ps`) or volumes (`volume`) created before
/// `before` (unix seconds) whose owner process is gone: what a `runner gc`
/// started at `before` must leave none of. Objects of live runners (other
/// tests on the same engine) and newer ones do not count.
pub fn abandoned_runner_objects(kind: &str, before: u64) -> Vec<String> {
    let (list, id): (&[&str], &str) = match kind {
        "ps" => (&["ps", "-a"], ".ID"),
        "volume" => (&["volume", "ls"], ".Name"),
        other => panic!("unknown docker object kind {other}"),
    };
    let format = format!(
        "{{{{{id}}}}} {{{{.Label \"runner.owner-pid\"}}}} {{{{.Label \"runner.created\"}}}}"
    );
    let mut args = list.to_vec();
    args.extend([
        "--filter",
        "label=runner.managed-by=runner",
        "--format",
        &format,
    ]);
    docker(&args)
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let pid = f.get(1).copied().unwrap_or("");
            let created: u64 = f.get(2).and_then(|c| c.parse().ok()).unwrap_or(0);
            let owner_gone = pid.is_empty() || !Path::new(&format!("/proc/{pid}")).exists();
            owner_gone && created < before
        })
        .map(str::to_string)
        .collect()
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The run id recorded in `run_started`.
pub fn run_id_of(events: &[Value]) -> String {
    let started = of_type(events, "run_started");
    let first = started.first().expect("a run_started event");
    first["run_id"]
        .as_str()
        .expect("run_started.run_id is a string")
        .to_string()
}

/// A `runner` started in the background with `--json`, whose events are
/// read as they come, for tests that act on a run while it is going.
pub struct Live {
    pub child: std::process::Child,
    pub desc: String,
    events: std::sync::mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Live {
    /// Spawns `cmd` (which must print events with `--json`).
    pub fn spawn(cmd: &mut Command) -> Live {
        let desc = format!("{cmd:?}");
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(e) => panic!("stdout line is not JSON {line:?}: {e}"),
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            use std::io::Read;
            let mut s = String::new();
            let _ = std::io::BufReader::new(stderr).read_to_string(&mut s);
            s
        });
        Live {
            child,
            desc,
            events: rx,
            seen: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// Waits for the first event of type `ty` (already seen or new).
    pub fn wait_for(&mut self, ty: &str, limit: Duration) -> Value {
        if let Some(e) = self.seen.iter().find(|e| e["type"] == ty) {
            return e.clone();
        }
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) => {
                    self.seen.push(e.clone());
                    if e["type"] == ty {
                        return e;
                    }
                }
                Err(_) => panic!(
                    "no {ty} event within {limit:?} from {}; events so far: {:#?}",
                    self.desc, self.seen
                ),
            }
        }
    }

    /// Waits up to `limit` for the process to exit (killing it after that)
    /// and returns its exit status, every event and its stderr.
    pub fn finish(mut self, limit: Duration) -> Finished {
        let until = Instant::now() + limit;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) | Err(_) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("{} did not exit within {limit:?}", self.desc);
                }
            }
        };
        // The reader thread ends at EOF, which follows the exit.
        while let Ok(e) = self.events.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(e);
        }
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        Finished {
            status,
            events: self.seen,
            stderr,
            desc: self.desc,
        }
    }
}

/// How a [`Live`] run ended.
pub struct Finished {
    pub status: std::process::ExitStatus,
    pub events: Vec<Value>,
    pub stderr: String,
    pub desc: String,
}

impl Finished {
    pub fn explain(&self) -> String {
        format!(
            "\ncommand: {}\nexit: {:?}\n--- events ---\n{:#?}\n--- stderr ---\n{}\n",
            self.desc, self.status, self.events, self.stderr
        )
    }

    /// Asserts the exit code, printing everything when it differs.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.status.code(), Some(code), "{}", self.explain());
        self
    }
}

/// Peak resident memory (VmHWM) of a live process in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
