//! A remote engine whose connection drops mid-suite: a second dockerd of
//! the test's own, reached over TCP through a proxy the test cuts (the
//! workspace in copy mode, as for any `tcp://` engine).
//!
//! - A short cut: the attempts it broke are infrastructure errors naming
//!   the engine, `--retry-errors` runs them again once the engine answers,
//!   and the suite ends with the verdicts of an undisturbed run.
//! - A cut that lasts past the suite (no retries): every attempt it broke
//!   is such an error, runner exits non-zero, and `--resume` once the
//!   connection is back ends with the undisturbed verdicts.
//!
//! After `runner gc` the engine holds nothing of runner's.

use std::time::Duration;

use crate::cut_proxy::CutProxy;
use crate::midsuite::{eval, retried, suite, undisturbed, verdicts, with_fault};
use crate::support::binary::{Dir, Ran, run};
use crate::support::docker::TINY;
use crate::support::eval::prelude;
use crate::support::second_engine::SecondEngine;
use crate::tasks::eval_oracle;

/// The test's engine stores images on vfs, which has no quotas for a
/// bounded disk.
const REMOTE: &[&str] = &["--disk", "unlimited"];
/// How long the short cut lasts.
const SHORT_CUT: Duration = Duration::from_secs(10);

/// What of runner's the engine still holds: containers, volumes and
/// networks with runner's labels.
fn runner_objects(engine: &SecondEngine) -> Vec<String> {
    let mut out = Vec::new();
    let label = "label=runner.managed-by";
    for args in [
        ["container", "ls", "-aq", "--filter", label],
        ["volume", "ls", "-q", "--filter", label],
        ["network", "ls", "-q", "--filter", label],
    ] {
        let kind = args[0];
        let o = engine.docker(&args);
        let listed = String::from_utf8_lossy(&o.stdout).into_owned();
        out.extend(listed.lines().map(|l| format!("{kind} {l}")));
    }
    out
}

/// Whether an error names the engine (Docker).
fn names_engine(e: &str) -> bool {
    e.contains("Docker")
}

fn explain_errors(ran: &Ran, d: &Dir, out: &str) -> String {
    format!("{:?}{}", retried(d, out), ran.explain())
}

#[test]
fn a_cut_connection_to_a_remote_engine_is_retried_or_resumed_to_the_undisturbed_verdicts() {
    let _serial = prelude();
    let engine = SecondEngine::start(&[]);
    engine.load(TINY);
    let proxy = CutProxy::start(&engine.socket());
    let d = Dir::new();
    suite(&d.path().join("suite"), 3);
    let remote = |mut c: std::process::Command| {
        c.env("DOCKER_HOST", proxy.host());
        c
    };
    let (calm, expected) = undisturbed(&d, remote(eval(&d, "calm", REMOTE)));

    // A short cut, retried.
    let (ran, _) = with_fault(&d, remote(eval(&d, "short", REMOTE)), "short", || {
        proxy.cut();
        std::thread::sleep(SHORT_CUT);
        proxy.restore();
    });
    assert_eq!(verdicts(&d, "short", &ran), expected, "{}", ran.explain());
    assert_eq!(ran.code(), calm.code(), "{}", ran.explain());
    let errors = retried(&d, "short");
    assert!(
        !errors.is_empty() && errors.iter().all(|e| names_engine(e)),
        "the cut broke attempts, each retried after an error naming the engine: {}",
        explain_errors(&ran, &d, "short")
    );

    // A cut to the end, then --resume.
    let no_retry = |flag: &str| {
        remote(eval_oracle(
            &d,
            "2",
            (flag, std::path::Path::new("long")),
            "long.json",
            &["--retry-errors", "0", REMOTE[0], REMOTE[1]],
        ))
    };
    let (cut, _) = with_fault(&d, no_retry("--output-dir"), "long", || proxy.cut());
    assert_ne!(cut.code(), 0, "{}", cut.explain());
    let broken: Vec<_> = verdicts(&d, "long", &cut)
        .into_iter()
        .filter(|(_, s)| s == "error")
        .collect();
    assert!(
        !broken.is_empty(),
        "the cut broke attempts{}",
        cut.explain()
    );
    assert!(
        names_engine(&cut.stderr()),
        "runner's errors name the engine{}",
        cut.explain()
    );
    proxy.restore();
    let resumed = run(&mut no_retry("--resume"));
    assert_eq!(
        verdicts(&d, "long", &resumed),
        expected,
        "{}",
        resumed.explain()
    );
    assert_eq!(resumed.code(), calm.code(), "{}", resumed.explain());

    let gc = run(remote(d.runner()).args(["gc"]));
    assert_eq!(gc.code(), 0, "{}", gc.explain());
    let left = runner_objects(&engine);
    assert!(left.is_empty(), "left on the remote engine: {left:?}");
}
