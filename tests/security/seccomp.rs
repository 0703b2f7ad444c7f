//! Finding 1 (issue 21): the capability ceiling and runner's seccomp
//! profile. A root command (an agent's, or test.sh as eval's verifier) once
//! held CAP_DAC_READ_SEARCH, so the engine's profile let it call
//! `open_by_handle_at`: a handle to inode 2 through the bind-mounted
//! /etc/hostname opened the host's `/` (the "Shocker" escape). Here the
//! escape is attempted for real against a marker file on the host, and the
//! calls runner's profile denies are made from inside
//! (`tests/fixtures/boundary/probe.py`, through Python's ctypes).
//!
//! Needs Docker and `runner-sandbox:bookworm` (python3). Under
//! `RUNNER_TEST_RUNTIME=runsc` the engine's filter is not applied (gVisor
//! serves the calls itself): the escape and the capabilities are checked
//! there, the filtered calls only on the host's kernel.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::binary::{
    Dir, bash, first_tool_output, kv, of_type, outcome, run, script, walk,
};
use crate::support::docker::{BOOKWORM, require_images, runtime_args, test_runtime};
use crate::support::eval::{eval, prelude, report, statuses, task, toml};

const PROBE: &str = include_str!("../fixtures/boundary/probe.py");

/// CAP_DAC_READ_SEARCH's bit in /proc/self/status's capability masks.
const DAC_READ_SEARCH_BIT: u64 = 1 << 2;

/// The calls runner's profile denies whatever capability is held.
const FILTERED: [&str; 9] = [
    "name_to_handle_at",
    "io_uring_setup",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "shocker",
];

/// A host file with content of its own, and its path relative to the
/// host's `/` (what a handle to the host's root reaches).
struct Marker {
    _dir: tempfile::TempDir,
    content: String,
    relative: String,
}

fn marker() -> Marker {
    let dir = tempfile::Builder::new()
        .prefix("runner-test-marker-")
        .tempdir()
        .expect("marker dir");
    let content = format!("HOST-ONLY-{:x}", fastrand::u64(..));
    let path = dir.path().join("secret.txt");
    std::fs::write(&path, &content).expect("write marker");
    let relative = path
        .display()
        .to_string()
        .trim_start_matches('/')
        .to_string();
    Marker {
        _dir: dir,
        content,
        relative,
    }
}

/// The shell command that runs the probe against `m`, its output going
/// to `redirect` (e.g. `> FILE`, or nothing).
fn probe_command(m: &Marker, redirect: &str) -> String {
    format!("python3 - {} {redirect} <<'PY'\n{PROBE}\nPY", m.relative)
}

fn on_gvisor() -> bool {
    test_runtime().as_deref() == Some("runsc")
}

/// The checks every principal must pass: the escape fails and reads
/// nothing of the host, no DAC_READ_SEARCH in any mask, and (with the
/// host's kernel) every filtered call is refused by the filter.
fn assert_contained(out: &str, m: &Marker, who: &str) {
    let p: HashMap<String, String> = kv(out);
    assert!(
        !out.contains(&m.content),
        "{who} read the host's marker through open_by_handle_at:\n{out}"
    );
    assert_ne!(
        p.get("shocker").map(String::as_str),
        Some("ok"),
        "{who}: open_by_handle_at opened the host's root:\n{out}"
    );
    for mask in ["capbnd", "capeff", "capprm"] {
        let v = p
            .get(mask)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .unwrap_or_else(|| panic!("{who}: no {mask} in the probe's output:\n{out}"));
        assert_eq!(
            v & DAC_READ_SEARCH_BIT,
            0,
            "{who}: {mask} {v:#x} holds CAP_DAC_READ_SEARCH:\n{out}"
        );
    }
    if !on_gvisor() {
        for call in FILTERED {
            let r = p.get(call).map(String::as_str);
            assert!(
                matches!(r, Some("EPERM") | Some("ENOSYS")),
                "{who}: {call} was not refused by the filter ({r:?}):\n{out}"
            );
        }
    }
}

/// `runner --json` with the scripted model on the bookworm image, as root.
fn root_agent(d: &Dir, command: &str, extra: &[&str]) -> crate::support::binary::Ran {
    let s = script(
        d,
        json!([{"tool_calls": [bash(command)]}, {"text": "done"}]),
    );
    let mut c = d.scripted(&s);
    c.args(["--executor", "docker", "--image", BOOKWORM, "--user", "0:0"])
        .args(runtime_args())
        .args(extra)
        .arg("probe");
    run(&mut c)
}

/// The first tool result's output and run_started's sandbox_security.
fn result_and_security(r: &crate::support::binary::Ran) -> (String, Value) {
    let events = r.events();
    assert_eq!(outcome(&events), "completed", "{}", r.explain());
    let out = first_tool_output(&events);
    let started = of_type(&events, "run_started")[0].clone();
    (out, started["config"]["sandbox_security"].clone())
}

#[test]
fn a_root_agent_cannot_open_the_hosts_root_by_handle_nor_reach_the_filtered_calls() {
    let _g = crate::support::serial::shared();
    require_images(&[BOOKWORM]);
    let m = marker();
    let d = Dir::new();
    let r = root_agent(&d, &probe_command(&m, ""), &[]);
    r.expect_code(0);
    let (out, security) = result_and_security(&r);
    assert_contained(&out, &m, "a root agent");
    if on_gvisor() {
        assert!(
            security["seccomp"]
                .as_str()
                .is_some_and(|s| s.starts_with("not applied: runsc")),
            "{security}"
        );
    } else {
        assert_eq!(security["seccomp"], "runner", "{security}");
    }
    assert_eq!(
        security["seccomp_profile_sha256"],
        runner::exec::seccomp::RUNNER_PROFILE.sha256(),
        "{security}"
    );
    let caps: Vec<&str> = security["cap_add"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(!caps.contains(&"DAC_READ_SEARCH"), "{security}");
}

#[test]
fn a_root_verifier_holds_no_dac_read_search_and_cannot_open_the_hosts_root() {
    let _g = prelude();
    // In every grading mode test.sh runs as root with the files'
    // capabilities runner lends it (issue 21: in each one it read the
    // host's files through open_by_handle_at).
    for mode in ["shared", "separate", "snapshot", "isolated"] {
        verifier_in_mode(mode);
    }
}

fn verifier_in_mode(mode: &str) {
    let m = marker();
    let d = Dir::new();
    let test_sh = format!(
        "#!/bin/bash\nmkdir -p /logs/verifier\n{}\n\
         cat /logs/verifier/probe.txt\n\
         if grep -q '^shocker=ok' /logs/verifier/probe.txt; then echo 0; else echo 1; fi \
         > /logs/verifier/reward.txt\n",
        probe_command(&m, "> /logs/verifier/probe.txt 2>&1")
    );
    task(
        &d.path().join("tasks"),
        "shocker",
        &[
            ("instruction.md", "Nothing to do.\n"),
            ("task.toml", &toml(BOOKWORM, 60, 60)),
            ("solution/solve.sh", "#!/bin/bash\ntrue\n"),
            ("tests/test.sh", &test_sh),
        ],
    );
    let r = eval(&d, &["tasks", "--agent", "oracle", "--grading", mode]);
    let rep = report(&d, &r);
    let probe = walk(&d.path().join("runs/eval"))
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "verifier.log"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_else(|| {
            panic!(
                "{mode}: no verifier.log in the attempt's directory{}",
                r.explain()
            )
        });
    assert_contained(&probe, &m, &format!("a root test.sh ({mode} grading)"));
    assert_eq!(
        statuses(&rep),
        vec![("shocker".to_string(), "pass".to_string(), Some(1.0))],
        "{mode}: {}",
        r.explain()
    );
    // The report says which filter held the attempt.
    let a = &rep["attempts"][0];
    if on_gvisor() {
        assert!(
            a["seccomp"]
                .as_str()
                .is_some_and(|s| s.starts_with("not applied: runsc")),
            "{a}"
        );
    } else {
        assert_eq!(a["seccomp"], "runner", "{mode}: {a}");
    }
    assert_eq!(
        a["seccomp_profile_sha256"],
        runner::exec::seccomp::RUNNER_PROFILE.sha256(),
        "{mode}: {a}"
    );
}

/// A profile of the user's: runner's with `uname` taken out, so a command
/// shows whether it is the one in force.
fn profile_without_uname(dir: &Path) -> std::path::PathBuf {
    let mut p: Value =
        serde_json::from_str(runner::exec::seccomp::RUNNER_PROFILE.json()).expect("profile");
    for rule in p["syscalls"].as_array_mut().expect("syscalls") {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|n| n != "uname");
        }
    }
    let path = dir.join("no-uname.json");
    std::fs::write(&path, p.to_string()).expect("write profile");
    path
}

#[test]
fn seccomp_file_is_applied_and_default_is_recorded_as_a_loosening() {
    let _g = crate::support::serial::shared();
    require_images(&[BOOKWORM]);
    let d = Dir::new();
    let file = profile_without_uname(d.path());
    let file_arg = file.display().to_string();
    let r = root_agent(
        &d,
        "uname -s; echo rc=$?",
        &["--seccomp", file_arg.as_str()],
    );
    r.expect_code(0);
    let (out, security) = result_and_security(&r);
    if on_gvisor() {
        // runsc applies no engine profile (gVisor serves the calls): the
        // record says so and names the one it was given.
        let s = security["seccomp"].as_str().unwrap_or_default();
        assert!(
            s.starts_with("not applied: runsc") && s.contains(&file_arg),
            "{security}"
        );
    } else {
        assert!(out.contains("rc=1") && !out.contains("Linux"), "{out}");
        assert_eq!(
            security["seccomp"],
            format!("file {file_arg}"),
            "{security}"
        );
    }
    let text = std::fs::read(&file).expect("profile");
    assert_eq!(
        security["seccomp_profile_sha256"],
        runner::exec::seccomp::sha256_hex(&text),
        "{security}"
    );
    let started = of_type(&r.events(), "run_started")[0].clone();
    let loosenings = started["config"]["loosenings"].to_string();
    assert!(loosenings.contains("seccomp"), "{started}");

    let d = Dir::new();
    let m = marker();
    let r = root_agent(&d, &probe_command(&m, ""), &["--seccomp", "default"]);
    r.expect_code(0);
    let (out, security) = result_and_security(&r);
    // The engine's own profile: io_uring is open again, the escape is not
    // (no CAP_DAC_READ_SEARCH under the ceiling).
    assert!(!out.contains(&m.content), "{out}");
    assert_ne!(
        kv(&out).get("shocker").map(String::as_str),
        Some("ok"),
        "{out}"
    );
    if on_gvisor() {
        let s = security["seccomp"].as_str().unwrap_or_default();
        assert!(s.starts_with("not applied: runsc"), "{security}");
    } else {
        assert_eq!(
            kv(&out).get("io_uring_setup").map(String::as_str),
            Some("ok"),
            "{out}"
        );
        assert_eq!(security["seccomp"], "default", "{security}");
        assert!(security["seccomp_profile_sha256"].is_null(), "{security}");
    }
    let started = of_type(&r.events(), "run_started")[0].clone();
    assert!(
        started["config"]["loosenings"]
            .to_string()
            .contains("seccomp: the engine's default profile"),
        "{started}"
    );
}

#[test]
fn a_seccomp_file_that_is_not_a_profile_is_refused_with_a_hint() {
    let d = Dir::new();
    for (name, text) in [("bad.json", "{not json"), ("list.json", "[1, 2]")] {
        let path = d.write(name, text);
        let s = script(&d, json!([{"text": "done"}]));
        let mut c = d.scripted(&s);
        c.args(["--executor", "docker", "--seccomp"])
            .arg(&path)
            .arg("probe");
        let r = run(&mut c);
        r.expect_code(2);
        let err = r.stderr();
        assert!(
            err.contains("error:") && err.contains(name) && err.contains("hint:"),
            "{}",
            r.explain()
        );
    }
    let s = script(&d, json!([{"text": "done"}]));
    let r =
        run(d
            .scripted(&s)
            .args(["--executor", "docker", "--seccomp", "missing.json", "probe"]));
    r.expect_code(2);
    assert!(r.stderr().contains("hint:"), "{}", r.explain());
}
