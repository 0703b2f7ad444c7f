//! Driving the `runner` binary as a user does. When a check fails, the
//! command, its directory, stdout and stderr are printed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::docker::{TINY, require_docker, runtime_args};

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

/// Runs `cmd` to its end, capturing stdout and stderr.
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

/// Writes a scripted model's turns to `script.json` in `dir`; returns its path.
pub fn script(dir: &Dir, turns: Value) -> String {
    dir.write("script.json", &turns.to_string())
        .display()
        .to_string()
}

/// A scripted `bash` tool call running `cmd`.
pub fn bash(cmd: &str) -> Value {
    json!({"name": "bash", "input": {"command": cmd}})
}

/// The `key=value` lines of a text (a probe's output), trimmed.
pub fn kv(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Every regular file under `dir`, recursively; links are not followed.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(walk(&p)),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
    out
}

/// Events of a given type.
pub fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// The output of the run's first `tool_result` (a probe's), empty when
/// there is none.
pub fn first_tool_output(events: &[Value]) -> String {
    of_type(events, "tool_result")
        .first()
        .and_then(|e| e["output"].as_str())
        .unwrap_or_default()
        .to_string()
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
                    TINY.into(),
                ]
            }
        };
        if self == Exec::Docker {
            a.extend(runtime_args());
        }
        a
    }
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

/// Sends SIGINT (Ctrl-C) to process `pid`.
pub fn sigint(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits i32")),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("send SIGINT");
}

/// The child's exit status once it ends within `limit`; `None` (after
/// killing it, so nothing lingers) when it did not.
pub fn wait_within(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let waited = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return Some(st);
        }
        if waited.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether some trajectory under `dir/runs` has an event of type `ty`.
pub fn some_trajectory_has(dir: &Path, ty: &str) -> bool {
    let needle = format!("\"{ty}\"");
    std::fs::read_dir(dir.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            std::fs::read_to_string(e.path().join("trajectory.jsonl"))
                .is_ok_and(|t| t.contains(&needle))
        })
}
