//! A Harbor task with `network_mode = "allowlist"`: with `--allow-internet`
//! its sandbox reaches its `allowed_hosts` only (here a server of the
//! test's own network, given with `--egress-network`), and the attempt
//! records that; without the flag it has no network at all. Nothing of the
//! proxy or its network is left.

use crate::support::binary::Dir;
use crate::support::egress::World;
use crate::support::eval::{assert_clean, eval_cmd, prelude, report, run_with_pid};

const TASK: &str = "fetch-allowed";
const VERIFIER_TASK: &str = "verifier-allowlist";

fn fixture(task: &str) -> std::path::PathBuf {
    crate::fidelity::fixtures().join("allowlist").join(task)
}

/// The one attempt of `task` in the report.
fn attempt_of(d: &Dir, ran: &crate::support::binary::Ran, task: &str) -> serde_json::Value {
    let r = report(d, ran);
    crate::fidelity::attempt(&r, task, ran).clone()
}

/// The one attempt of [`TASK`].
fn only_attempt(d: &Dir, ran: &crate::support::binary::Ran) -> serde_json::Value {
    attempt_of(d, ran, TASK)
}

#[test]
fn an_allowlisted_task_reaches_its_hosts_only_with_allow_internet() {
    let _s = prelude();
    let world = World::new("eval");
    let path = fixture(TASK);
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

#[test]
fn the_verifiers_own_allowlist_applies_to_a_verifier_sandbox_of_its_own() {
    let _s = prelude();
    let world = World::new("verifier");
    let path = fixture(VERIFIER_TASK);
    let path = path.to_str().expect("utf-8 path");
    let args = |grading: &'static str| {
        vec![
            path.to_string(),
            "--agent".into(),
            "oracle".into(),
            "--allow-internet".into(),
            "--egress-network".into(),
            world.network.clone(),
            "--grading".into(),
            grading.into(),
        ]
    };
    // A fresh verifier sandbox: the allowlist of `[verifier]`.
    let d = Dir::new();
    let a = args("isolated");
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let (ran, pid) = run_with_pid(eval_cmd(&d, &refs));
    let at = attempt_of(&d, &ran, VERIFIER_TASK);
    let why = crate::fidelity::describe(&at, &ran);
    assert_eq!(at["status"], "pass", "{why}");
    assert!(
        at["network"]
            .as_str()
            .unwrap_or_default()
            .starts_with("none"),
        "the agent phase has none: {why}"
    );
    assert_clean(pid, &ran.desc);
    // Shared mode: test.sh runs in the agent's sandbox, which has none.
    let d = Dir::new();
    let a = args("shared");
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let (ran, pid) = run_with_pid(eval_cmd(&d, &refs));
    let at = attempt_of(&d, &ran, VERIFIER_TASK);
    let why = crate::fidelity::describe(&at, &ran);
    assert_eq!(at["status"], "fail", "{why}");
    assert_clean(pid, &ran.desc);
}
