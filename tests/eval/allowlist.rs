//! A Harbor task with `network_mode = "allowlist"`: with `--allow-internet`
//! its sandbox reaches its `allowed_hosts` only (here a server of the
//! test's own network, given with `--egress-network`), and the attempt
//! records that; without the flag it has no network at all. Nothing of the
//! proxy or its network is left.

use crate::support::binary::Dir;
use crate::support::egress::World;
use crate::support::eval::{assert_clean, eval_cmd, prelude, report, run_with_pid};

const TASK: &str = "fetch-allowed";

fn fixture() -> std::path::PathBuf {
    crate::fidelity::fixtures().join("allowlist")
}

/// The one attempt of the report, with its verifier log for messages.
fn only_attempt(d: &Dir, ran: &crate::support::binary::Ran) -> serde_json::Value {
    let r = report(d, ran);
    crate::fidelity::attempt(&r, TASK, ran).clone()
}

#[test]
fn an_allowlisted_task_reaches_its_hosts_only_with_allow_internet() {
    let _s = prelude();
    let world = World::new("eval");
    let path = fixture();
    let path = path.to_str().expect("utf-8 path");

    let d = Dir::new();
    let cmd = eval_cmd(
        &d,
        &[
            path,
            "--agent",
            "oracle",
            "--allow-internet",
            "--egress-network",
            &world.network,
        ],
    );
    let (ran, pid) = run_with_pid(cmd);
    let a = only_attempt(&d, &ran);
    let why = crate::fidelity::describe(&a, &ran);
    assert_eq!(a["status"], "pass", "{why}");
    assert_eq!(a["reward"].as_f64(), Some(1.0), "{why}");
    let note = a["network"].as_str().unwrap_or_default();
    assert!(
        note.contains("allowlist") && note.contains("allowed.runner-test"),
        "the attempt's network names the hosts: {note}{why}"
    );
    ran.expect_code(0);
    assert_clean(pid, &ran.desc);

    // Without --allow-internet: no network, the fetch fails, and the note
    // says how to give the hosts.
    let d = Dir::new();
    let cmd = eval_cmd(
        &d,
        &[
            path,
            "--agent",
            "oracle",
            "--egress-network",
            &world.network,
        ],
    );
    let (ran, pid) = run_with_pid(cmd);
    let a = only_attempt(&d, &ran);
    let why = crate::fidelity::describe(&a, &ran);
    assert_eq!(a["status"], "fail", "{why}");
    let note = a["network"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("none") && note.contains("--allow-internet"),
        "{note}{why}"
    );
    assert_clean(pid, &ran.desc);
}
