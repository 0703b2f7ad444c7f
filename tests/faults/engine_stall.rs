//! The engine stalls mid-suite (dockerd SIGSTOPped for 20 s, then
//! continued): runner never hangs past its timeouts, an attempt the stall
//! broke is an infrastructure error that `--retry-errors` runs again, the
//! suite ends with the verdicts of an undisturbed run, and nothing of it
//! is left on the engine after `runner gc`.
//!
//! The test owns the engine for those 20 s (on CI nothing else runs
//! then: the faults binary takes the eval lock, and binaries run one
//! after the other); the engine is continued on every exit path.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::midsuite::{eval, suite, undisturbed, verdicts, with_fault};
use crate::support::binary::{Dir, run};
use crate::support::eval::{leftovers, prelude};

/// How long the engine is stopped.
const STALL: Duration = Duration::from_secs(20);

/// The pid of the engine answering on /var/run/docker.sock.
pub fn engine_pid() -> Pid {
    let text = std::fs::read_to_string("/var/run/docker.pid")
        .expect("/var/run/docker.pid: this test stops the machine's own dockerd");
    Pid::from_raw(text.trim().parse().expect("a pid in /var/run/docker.pid"))
}

/// Keeps the engine stopped; continues it when dropped (a failing
/// assertion included).
struct Stopped(Pid);

impl Stopped {
    fn new(pid: Pid) -> Stopped {
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP dockerd");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

#[test]
fn a_stalled_engine_costs_time_not_verdicts_and_leaves_nothing() {
    let _serial = prelude();
    let d = Dir::new();
    suite(&d.path().join("suite"), 3);
    let (calm, expected) = undisturbed(&d, eval(&d, "calm", &[]));

    let engine = engine_pid();
    let (ran, pid) = with_fault(&d, eval(&d, "stalled", &[]), "stalled", || {
        let stopped = Instant::now();
        let _stall = Stopped::new(engine);
        std::thread::sleep(STALL.saturating_sub(stopped.elapsed()));
    });
    assert_eq!(verdicts(&d, "stalled", &ran), expected, "{}", ran.explain());
    assert_eq!(ran.code(), calm.code(), "{}", ran.explain());

    let gc = run(d.runner().args(["gc"]));
    assert_eq!(gc.code(), 0, "{}", gc.explain());
    let left = leftovers(pid);
    assert!(left.is_empty(), "left on the engine: {left:?}");
}
