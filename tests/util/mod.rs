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
}

impl Dir {
    pub fn new() -> Self {
        Dir {
            tmp: tempfile::Builder::new()
                .prefix("runner-test-")
                .tempdir()
                .expect("create a temp dir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
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
            .env("HOME", self.path())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    /// The single run directory under `runs/`.
    pub fn run_dir(&self) -> PathBuf {
        let mut dirs: Vec<_> = std::fs::read_dir(self.path().join("runs"))
            .expect("runs/ exists")
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
