//! Issue 21, finding 9: runners killed with SIGKILL left their temporary
//! directories (`runner-chan-*`, `runner-ws-*`, `runner-seed-*`) behind,
//! and `runner gc` removed none of them. Here runs and eval suites on the
//! real engine are SIGKILLed at random points, with a temp directory of
//! the test's own (TMPDIR), then `runner gc` runs there: nothing of the
//! dead runners may remain, and the directories of a runner still going
//! must be untouched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use runner::exec::{host_dirs, temp_dirs};

use crate::support::binary::{Dir, Exec};
use crate::support::docker::TINY;
use crate::support::serial::serial;

/// The directories runner's temporary directories are made in: the
/// test's TMPDIR, and where channels go (`/run/runner` for root).
fn bases(tmp: &Path) -> Vec<PathBuf> {
    let mut v = vec![tmp.to_path_buf()];
    v.extend(host_dirs::candidates().into_iter().map(|(d, _)| d));
    v
}

/// The temporary directories of the runner `pid`: each kind's prefix, then
/// the owner's pid (see `runner::exec::temp_dirs`).
fn dirs_of(tmp: &Path, pid: u32) -> BTreeSet<PathBuf> {
    let kinds = [
        temp_dirs::WORKSPACE_PREFIX,
        temp_dirs::SEED_PREFIX,
        temp_dirs::TB1_PREFIX,
        temp_dirs::LOCAL_ROOT_PREFIX,
        host_dirs::CHANNEL_PREFIX,
    ];
    let mut out = BTreeSet::new();
    for base in bases(tmp) {
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if kinds
                .iter()
                .any(|k| name.starts_with(&format!("{k}{pid}.")))
            {
                out.insert(e.path());
            }
        }
    }
    out
}

fn with_tmp(mut c: Command, tmp: &Path) -> Command {
    c.env("TMPDIR", tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Kills `child` with SIGKILL after `delay`, and reaps it; its pid.
fn kill_after(mut child: Child, delay: Duration) -> u32 {
    std::thread::sleep(delay);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    child.id()
}

#[test]
fn gc_removes_the_temp_dirs_of_sigkilled_runners_and_spares_a_live_ones() {
    let _s = serial();
    let d = Dir::new();
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).expect("mkdir tmp");
    let script = |cmds: &[&str]| {
        let mut turns: Vec<_> = cmds
            .iter()
            .map(|c| json!({"tool_calls": [{"name": "bash", "input": {"command": c}}]}))
            .collect();
        turns.push(json!({"text": "done"}));
        let name = format!("script-{}.json", cmds.len());
        d.write(&name, &json!(turns).to_string())
            .display()
            .to_string()
    };
    let run_cmd = |script: &str| {
        let mut c = d.scripted(script);
        c.args(Exec::Docker.args()).arg("go");
        with_tmp(c, &tmp)
    };
    let short = script(&["echo one > a.txt", "sleep 0.5; cat a.txt", "sleep 1"]);
    let long = script(&["sleep 120"]);

    // A runner still going, with its sandbox up.
    let on_gvisor = crate::support::docker::test_runtime().as_deref() == Some("runsc");
    let mut live = run_cmd(&long).spawn().expect("spawn the live runner");
    let until = Instant::now() + Duration::from_secs(60);
    let live_dirs = loop {
        let now = dirs_of(&tmp, live.id());
        let has = |k: &str| {
            now.iter()
                .any(|p| p.to_string_lossy().contains(&format!("/{k}")))
        };
        // The direct channel is runc's only (README: the supervisor).
        let channel = has(host_dirs::CHANNEL_PREFIX) || on_gvisor;
        if channel && has(temp_dirs::WORKSPACE_PREFIX) {
            break now;
        }
        assert!(
            Instant::now() < until,
            "the live runner made no channel and workspace: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    // Runs and suites killed at random points.
    let t = Instant::now();
    let status = run_cmd(&short).status().expect("run");
    assert!(status.success(), "the unkilled run failed: {status:?}");
    let span = t.elapsed();
    let mut killed = Vec::new();
    for _ in 0..6 {
        let child = run_cmd(&short).spawn().expect("spawn");
        killed.push(kill_after(child, span.mul_f64(0.2 + 0.7 * fastrand::f64())));
    }
    let suite = d.path().join("suite/t");
    for (rel, text) in [
        ("instruction.md", "nothing to do\n"),
        (
            "task.toml",
            &format!(
                "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n[environment]\ndocker_image = \"{TINY}\"\n"
            )[..],
        ),
        (
            "tests/test.sh",
            "sleep 5; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n",
        ),
    ] {
        let p = suite.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    for i in 0..2 {
        let mut c = d.runner();
        c.args([
            "eval",
            "suite",
            "--agent",
            "nop",
            "--output-dir",
            &format!("runs/e{i}"),
        ]);
        let child = with_tmp(c, &tmp).spawn().expect("spawn eval");
        killed.push(kill_after(
            child,
            Duration::from_millis(1500 + fastrand::u64(0..2000)),
        ));
    }

    let left: BTreeSet<PathBuf> = killed.iter().flat_map(|p| dirs_of(&tmp, *p)).collect();
    eprintln!("left by the killed runners: {left:?}");
    for kind in [
        host_dirs::CHANNEL_PREFIX,
        temp_dirs::WORKSPACE_PREFIX,
        temp_dirs::SEED_PREFIX,
    ] {
        if kind == host_dirs::CHANNEL_PREFIX && on_gvisor {
            continue;
        }
        assert!(
            left.iter()
                .any(|p| p.to_string_lossy().contains(&format!("/{kind}"))),
            "no kill left a {kind}* directory ({left:?}); the test proves little"
        );
    }
    let gc = d
        .runner()
        .env("TMPDIR", &tmp)
        .arg("gc")
        .output()
        .expect("runner gc");
    let still: Vec<&PathBuf> = left
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect();
    assert!(
        still.is_empty(),
        "runner gc left the dead runners' {still:?}\n{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let live_running = matches!(live.try_wait(), Ok(None));
    for p in &live_dirs {
        assert!(
            p.exists(),
            "runner gc removed the live runner's {}",
            p.display()
        );
    }
    assert!(
        live_running,
        "the live runner ended before gc: the check proves little"
    );

    // Killed in turn, its directories go at the next gc.
    live.kill().expect("SIGKILL");
    let _ = live.wait();
    let _ = d
        .runner()
        .env("TMPDIR", &tmp)
        .arg("gc")
        .output()
        .expect("runner gc");
    let remaining = dirs_of(&tmp, live.id());
    assert!(
        remaining.is_empty(),
        "left after the second gc: {remaining:?}"
    );
}
