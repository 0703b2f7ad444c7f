//! User namespaces (issue 21): with an engine that runs with
//! `--userns-remap`, root in the sandbox is an unprivileged uid of the
//! engine's range on the host. runner reads that from the engine (its
//! `SecurityOptions` and root directory) and records it in
//! `sandbox_security`; a bind workspace is used as the range's ids see it.
//!
//! The shared engine is left alone: the test starts a second `dockerd` of
//! its own (`support::second_engine`), loads `runner-sandbox:tiny` into it
//! and stops it at the end. Needs root, dockerd and the tiny image.

use serde_json::{Value, json};

use crate::support::binary::{Dir, bash, first_tool_output, of_type, outcome, run, script};
use crate::support::docker::{TINY, require_images, runtime_args, test_runtime};
use crate::support::second_engine::SecondEngine;

/// The host ids of the sandbox's root: the engine's root directory ends in
/// `<uid>.<gid>` under a remap.
fn remap_of(engine: &SecondEngine) -> (u32, u32) {
    let out = engine.docker(&["info", "--format", "{{.DockerRootDir}}"]);
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let last = dir.rsplit('/').next().unwrap_or_default().to_string();
    let (u, g) = last
        .split_once('.')
        .unwrap_or_else(|| panic!("no remap in the engine's root {dir:?}:\n{}", engine.log()));
    (u.parse().expect("uid"), g.parse().expect("gid"))
}

/// `runner` on `engine` as root with `ws` as a bind workspace and `extra`.
fn root_run(
    d: &Dir,
    engine: &SecondEngine,
    ws: &std::path::Path,
    command: &str,
    extra: &[&str],
) -> crate::support::binary::Ran {
    let s = script(
        d,
        json!([{"tool_calls": [bash(command)]}, {"text": "done"}]),
    );
    let mut c = d.scripted(&s);
    c.env("DOCKER_HOST", engine.host())
        .args(["--executor", "docker", "--image", TINY, "--user", "0:0"])
        .args(runtime_args())
        .arg("--workspace")
        .arg(ws)
        .args(extra)
        .arg("probe");
    run(&mut c)
}

#[test]
fn under_userns_remap_root_in_the_sandbox_is_a_remapped_uid_on_the_host() {
    let _g = crate::support::serial::serial();
    require_images(&[TINY]);
    let engine = SecondEngine::start(&["--userns-remap=default"]);
    let info = engine.docker(&["info", "--format", "{{json .SecurityOptions}}"]);
    let options = String::from_utf8_lossy(&info.stdout).to_string();
    assert!(
        options.contains("name=userns"),
        "{options}\n{}",
        engine.log()
    );
    engine.load(TINY);
    let (uid, gid) = remap_of(&engine);
    assert_ne!(uid, 0, "the remap starts at root");

    // Root in the sandbox is the range's first uid on the host: the
    // kernel's map says so, and the file it makes on the workspace disk
    // (mounted on the host while the run goes on) is that uid's there.
    let d = Dir::new();
    let ws = tempfile::tempdir().expect("workspace");
    let r = root_run(
        &d,
        &engine,
        ws.path(),
        "id -u; cat /proc/self/uid_map; echo hi > /workspace/made-by-root && \
         stat -c %u /workspace/made-by-root && echo made",
        &[],
    );
    r.expect_code(0);
    let events = r.events();
    assert_eq!(outcome(&events), "completed", "{}", r.explain());
    let out = first_tool_output(&events);
    assert!(out.starts_with("0\n") && out.contains("made"), "{out}");
    let map: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    // gVisor shows its own identity map inside (`0 0 4294967295`): there
    // the remap is checked through the engine's record below.
    if test_runtime().as_deref() != Some("runsc") {
        assert_eq!(
            map.get(..2),
            Some(&["0", uid.to_string().as_str()][..]),
            "root inside is uid {uid} outside: {out}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made-by-root"))
            .ok()
            .as_deref(),
        Some("hi\n"),
        "the work comes back: {}",
        r.explain()
    );
    let sec: Value = of_type(&events, "run_started")[0]["config"]["sandbox_security"].clone();
    assert_eq!(sec["userns"], true, "{sec}");
    assert_eq!(sec["userns_remap"], format!("{uid}:{gid}"), "{sec}");

    // A workspace of the host's root, bound as it is, cannot be the
    // sandbox's: refused, saying what to do.
    let d = Dir::new();
    let mine = tempfile::tempdir().expect("root's workspace");
    let r = root_run(&d, &engine, mine.path(), "true", &["--disk", "unlimited"]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("userns-remap") && err.contains("hint:"),
        "{}",
        r.explain()
    );

    // With the size-limited disk (runner as root, the default), the disk
    // is given to the remapped ids and the work comes back to the
    // workspace's owner.
    let d = Dir::new();
    let r = root_run(
        &d,
        &engine,
        mine.path(),
        "echo on-disk > /workspace/f && echo ok",
        &[],
    );
    r.expect_code(0);
    assert_eq!(outcome(&r.events()), "completed", "{}", r.explain());
    let back = mine.path().join("f");
    assert_eq!(
        std::fs::read_to_string(&back).ok().as_deref(),
        Some("on-disk\n"),
        "{}",
        r.explain()
    );
    drop(engine);
}
