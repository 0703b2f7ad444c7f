//! The engine restarts mid-suite (dockerd stopped with SIGTERM, as an
//! upgrade or a service manager stops it, and started again with the same
//! command line): the attempts it broke end as infrastructure errors
//! naming the engine, `--retry-errors` runs them again once the engine
//! answers, the suite ends with the verdicts of an undisturbed run, and
//! nothing of it is left on the engine after `runner gc`.
//!
//! The test owns the engine while it restarts (on CI nothing else runs
//! then: the faults binary takes the eval lock, and binaries run one
//! after the other); the engine is started again on every exit path.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::engine_stall::engine_pid;
use crate::midsuite::{eval, retried, suite, undisturbed, verdicts, with_fault};
use crate::support::binary::{Dir, run};
use crate::support::eval::{leftovers, prelude};

/// How long the engine stays down between its stop and its start.
const DOWN: Duration = Duration::from_secs(5);
/// Longest wait for the engine to exit, and to answer again.
const LIMIT: Duration = Duration::from_secs(90);

/// How the running engine was started: its command line, environment,
/// working directory and log (its stdout).
struct Engine {
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    log: Option<PathBuf>,
}

impl Engine {
    fn of(pid: Pid) -> Engine {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let split = |name: &str| -> Vec<OsString> {
            std::fs::read(proc.join(name))
                .unwrap_or_else(|e| panic!("{name} of dockerd {pid}: {e}"))
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| OsString::from_vec(s.to_vec()))
                .collect()
        };
        let env = split("environ")
            .into_iter()
            .filter_map(|kv| {
                let kv = kv.into_vec();
                let eq = kv.iter().position(|b| *b == b'=')?;
                Some((
                    OsString::from_vec(kv[..eq].to_vec()),
                    OsString::from_vec(kv[eq + 1..].to_vec()),
                ))
            })
            .collect();
        let log = std::fs::read_link(proc.join("fd/1"))
            .ok()
            .filter(|p| p.is_absolute() && p.is_file());
        Engine {
            argv: split("cmdline"),
            env,
            cwd: std::fs::read_link(proc.join("cwd")).unwrap_or_else(|_| "/".into()),
            log,
        }
    }

    /// Starts it again, in a session of its own (it outlives the test),
    /// and waits until it answers.
    fn start(&self) {
        let out = || match &self.log {
            Some(p) => std::fs::OpenOptions::new()
                .append(true)
                .open(p)
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
            None => Stdio::null(),
        };
        let mut child = Command::new("setsid")
            .args(&self.argv)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(out())
            .stderr(out())
            .process_group(0)
            .spawn()
            .expect("start dockerd again");
        let t0 = Instant::now();
        while !answers() {
            assert!(
                t0.elapsed() < LIMIT,
                "dockerd did not answer {LIMIT:?} after it was started again ({:?})",
                self.argv
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // setsid has exec'd dockerd or forked and exited; either way it is
        // not waited for here.
        let _ = child.try_wait();
    }
}

fn answers() -> bool {
    Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The engine stopped; started again when dropped (a failing assertion
/// included).
struct Down(Engine);

impl Down {
    fn stop() -> Down {
        let pid = engine_pid();
        let engine = Engine::of(pid);
        kill(pid, Signal::SIGTERM).expect("SIGTERM dockerd");
        let t0 = Instant::now();
        while PathBuf::from(format!("/proc/{pid}")).exists() {
            assert!(t0.elapsed() < LIMIT, "dockerd {pid} did not exit");
            std::thread::sleep(Duration::from_millis(100));
        }
        Down(engine)
    }
}

impl Drop for Down {
    fn drop(&mut self) {
        if !answers() {
            self.0.start();
        }
    }
}

#[test]
fn an_engine_restart_mid_suite_is_retried_to_the_undisturbed_verdicts() {
    let _serial = prelude();
    let d = Dir::new();
    suite(&d.path().join("suite"), 4);
    let (calm, expected) = undisturbed(&d, eval(&d, "calm", &[]));

    let (ran, pid) = with_fault(&d, eval(&d, "restarted", &[]), "restarted", || {
        let down = Down::stop();
        std::thread::sleep(DOWN);
        drop(down);
    });
    assert_eq!(
        verdicts(&d, "restarted", &ran),
        expected,
        "{}",
        ran.explain()
    );
    assert_eq!(ran.code(), calm.code(), "{}", ran.explain());
    let errors = retried(&d, "restarted");
    assert!(
        !errors.is_empty(),
        "the restart broke at least one attempt, which was retried{}",
        ran.explain()
    );
    for e in &errors {
        assert!(
            e.contains("Docker"),
            "a broken try's error names the engine: {e}{}",
            ran.explain()
        );
    }
    assert!(
        ran.stderr().contains("retrying"),
        "runner said it retries{}",
        ran.explain()
    );

    let gc = run(d.runner().args(["gc"]));
    assert_eq!(gc.code(), 0, "{}", gc.explain());
    let left = leftovers(pid);
    assert!(left.is_empty(), "left on the engine: {left:?}");
}
