//! Findings 11 and 12 (issue 8): `--runtime` picks a container runtime the
//! engine has registered (runsc: gVisor), refuses one it has not, and
//! `run_started` records what the engine actually enforces on the sandbox
//! (runtime, seccomp, AppArmor, user namespaces...), checked here against
//! `docker info` and against what a command inside the sandbox sees.
//!
//! Needs Docker, `runner-sandbox:tiny` and runsc registered with the engine
//! as `.ci/run` does (`--network=none` among its runtimeArgs).

use std::path::Path;

use serde_json::{Value, json};

use crate::support::binary::{
    Dir, bash, first_tool_output, kv, of_type, outcome, read_jsonl, run, run_id_of, script,
};
use crate::support::docker::{TINY, containers_of_run, docker_cli, require_docker};

/// `docker info` as JSON.
fn engine_info() -> Value {
    serde_json::from_str(&docker_cli(&["info", "--format", "{{json .}}"]))
        .unwrap_or_else(|e| panic!("docker info is not JSON: {e}"))
}

/// Fails loudly unless runsc is registered the way `.ci/run` registers it.
fn require_runsc() -> Value {
    require_docker();
    let info = engine_info();
    let args = &info["Runtimes"]["runsc"]["runtimeArgs"];
    assert!(
        info["Runtimes"]["runsc"].is_object(),
        "runsc is not registered with the engine (docker info lists {}); \
         .ci/run installs and registers it",
        info["Runtimes"]
    );
    assert!(
        args.as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--network=none")),
        "runsc is registered without --network=none ({args}); .ci/run registers it with it"
    );
    info
}

/// `runner --provider scripted --script S --json --executor docker --image tiny`.
fn scripted_docker(d: &Dir, s: &str) -> std::process::Command {
    let mut c = d.scripted(s);
    c.args(["--executor", "docker", "--image", TINY]);
    c
}

/// What a command sees of its own confinement.
const SELF_PROBE: &str = "echo kernel_log=$(dmesg 2>/dev/null | head -n 1); echo release=$(uname -r); \
     echo seccomp=$(sed -n 's/^Seccomp:[[:space:]]*//p' /proc/self/status); \
     echo nnp=$(sed -n 's/^NoNewPrivs:[[:space:]]*//p' /proc/self/status); \
     echo lsm=$(cat /proc/self/attr/current 2>/dev/null || echo none)";

#[test]
fn runsc_runs_the_loop_under_gvisor_and_run_started_says_so() {
    let info = require_runsc();
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"tool_calls": [bash(SELF_PROBE)]}, {"text": "done", "expect": "release="}]),
    );
    let r = run(scripted_docker(&d, &s).args(["--runtime", "runsc", "probe"]));
    r.expect_code(0);
    let events = r.events();
    assert_eq!(outcome(&events), "completed", "{}", r.explain());
    let out = first_tool_output(&events);
    let p = kv(&out);
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("host kernel release")
        .trim()
        .to_string();
    // gVisor's own kernel answers: its log says so and its release is not
    // the host's.
    assert!(
        p.get("kernel_log").is_some_and(|l| l.contains("gVisor")),
        "{out}{}",
        r.explain()
    );
    assert_ne!(p.get("release"), Some(&host_release), "{out}");

    let started = of_type(&events, "run_started")[0];
    assert_eq!(started["config"]["runtime"], "runsc", "{started}");
    let sec = &started["config"]["sandbox_security"];
    assert_eq!(sec["runtime"], "runsc", "{sec}");
    assert_eq!(sec["kernel"], "gvisor", "{sec}");
    assert_eq!(
        sec["runtime_path"], info["Runtimes"]["runsc"]["path"],
        "{sec}"
    );
    assert_eq!(
        sec["runtime_args"], info["Runtimes"]["runsc"]["runtimeArgs"],
        "{sec}"
    );
    // The engine's seccomp profile is in the OCI spec, but runsc does not
    // load it: the record says so, and the sandbox shows no filter.
    assert!(
        sec["seccomp"]
            .as_str()
            .is_some_and(|s| s.starts_with("not applied")),
        "{sec}"
    );
    assert_eq!(p.get("seccomp").map(String::as_str), Some("0"), "{out}");
    assert_eq!(sec["network_mode"], "none", "{sec}");
    assert_eq!(sec["cap_drop"], json!(["ALL"]), "{sec}");
    assert_eq!(sec["readonly_rootfs"], true, "{sec}");
    assert_eq!(sec["no_new_privileges"], true, "{sec}");
    assert_eq!(
        sec["engine_security_options"], info["SecurityOptions"],
        "{sec}"
    );
}

#[test]
fn runc_security_facts_in_run_started_match_docker_info_and_the_sandbox() {
    require_docker();
    let info = engine_info();
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"tool_calls": [bash(SELF_PROBE)]}, {"text": "done", "expect": "release="}]),
    );
    let r = run(scripted_docker(&d, &s).args(["--runtime", "runc", "probe"]));
    r.expect_code(0);
    let events = r.events();
    let out = first_tool_output(&events);
    let p = kv(&out);
    let sec = &of_type(&events, "run_started")[0]["config"]["sandbox_security"];
    assert!(sec.is_object(), "no sandbox_security: {}", r.explain());

    let options: Vec<String> = info["SecurityOptions"]
        .as_array()
        .expect("SecurityOptions")
        .iter()
        .filter_map(|o| o.as_str().map(str::to_string))
        .collect();
    let has = |name: &str| {
        options
            .iter()
            .any(|o| o.split(',').any(|f| f == format!("name={name}")))
    };
    assert_eq!(
        sec["engine_security_options"], info["SecurityOptions"],
        "{sec}"
    );
    assert_eq!(sec["engine_version"], info["ServerVersion"], "{sec}");
    assert_eq!(sec["runtime"], "runc", "{sec}");
    assert_eq!(sec["kernel"], "host", "{sec}");
    assert_eq!(sec["userns"], has("userns"), "{sec}");
    assert_eq!(sec["rootless"], has("rootless"), "{sec}");
    assert_eq!(sec["selinux"], has("selinux"), "{sec}");
    assert_eq!(sec["cgroup_version"], info["CgroupVersion"], "{sec}");
    // Seccomp: runner's own profile (issue 21), which the engine holds
    // inline, and the kernel shows a filter.
    let profile = options
        .iter()
        .filter(|o| o.contains("name=seccomp"))
        .find_map(|o| o.split(',').find_map(|f| f.strip_prefix("profile=")))
        .map(str::to_string);
    match profile {
        Some(_) => {
            assert_eq!(sec["seccomp"], "runner", "{sec}");
            assert_eq!(
                sec["seccomp_profile_sha256"],
                runner::exec::seccomp::RUNNER_PROFILE.sha256(),
                "{sec}"
            );
            assert_eq!(p.get("seccomp").map(String::as_str), Some("2"), "{out}");
        }
        None => assert!(
            sec["seccomp"]
                .as_str()
                .is_some_and(|s| s.starts_with("none")),
            "{sec}"
        ),
    }
    // AppArmor: recorded only when the engine has it, and then the
    // sandbox's label names the profile.
    if has("apparmor") {
        let prof = sec["apparmor"].as_str().expect("apparmor profile recorded");
        assert!(
            p.get("lsm").is_some_and(|l| l.contains(prof)),
            "{out} vs {sec}"
        );
    } else {
        assert_eq!(sec["apparmor"], Value::Null, "{sec}");
        assert!(
            !p.get("lsm").is_some_and(|l| l.contains("docker-default")),
            "{out}"
        );
    }
    assert_eq!(sec["no_new_privileges"], true, "{sec}");
    assert_eq!(p.get("nnp").map(String::as_str), Some("1"), "{out}");
    assert_eq!(sec["privileged"], false, "{sec}");
    // The host's kernel answers under runc.
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("host kernel release")
        .trim()
        .to_string();
    assert_eq!(p.get("release"), Some(&host_release), "{out}");
}

#[test]
fn an_unregistered_runtime_exits_2_naming_the_registered_ones() {
    require_docker();
    let info = engine_info();
    let registered: Vec<String> = info["Runtimes"]
        .as_object()
        .expect("Runtimes")
        .keys()
        .cloned()
        .collect();
    let d = Dir::new();
    let s = script(&d, json!([{"tool_calls": [bash("echo never")]}]));
    let r = run(scripted_docker(&d, &s).args(["--runtime", "nosuch", "go"]));
    r.expect_code(2);
    let err = r.stderr();
    let line = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line{}", r.explain()));
    assert!(line.contains("'nosuch'"), "{}", r.explain());
    for name in &registered {
        assert!(
            line.contains(name.as_str()),
            "{name} not named{}",
            r.explain()
        );
    }
    let hint = err
        .lines()
        .find(|l| l.starts_with("hint:"))
        .unwrap_or_else(|| panic!("no hint line{}", r.explain()));
    assert!(
        hint.contains("daemon.json") && hint.contains("HUP"),
        "{}",
        r.explain()
    );
    // Nothing started: the trajectory ends with the error, no container.
    let traj = d.trajectory();
    assert_eq!(outcome(&traj), "error");
    let run_id = run_id_of(&traj);
    assert!(containers_of_run(&run_id).is_empty());

    // runner eval refuses it before any attempt.
    let task = d.path().join("tasks/t");
    write_task(&task, "true", "exit 0");
    let r = run(d
        .runner()
        .args(["eval", "--agent", "nop", "--runtime", "nosuch"])
        .arg(d.path().join("tasks")));
    r.expect_code(2);
    assert!(
        r.stderr().contains("'nosuch'") && r.stderr().contains("hint:"),
        "{}",
        r.explain()
    );
    let evals = std::fs::read_dir(d.path().join("runs"))
        .expect("runs/")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("eval-"))
        .count();
    assert_eq!(evals, 0, "no attempt may start{}", r.explain());
}

#[test]
fn bridge_network_with_a_runtime_that_forces_none_is_refused() {
    require_runsc();
    let d = Dir::new();
    let s = script(&d, json!([{"tool_calls": [bash("echo never")]}]));
    let r = run(scripted_docker(&d, &s).args(["--runtime", "runsc", "--network", "bridge", "go"]));
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("error: the container runtime 'runsc' cannot give the sandbox a network")
            && err.contains("--network=none"),
        "{}",
        r.explain()
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with("hint:") && l.contains("--network bridge")),
        "{}",
        r.explain()
    );
}

/// A Harbor task on the tiny image whose solution runs `solve` and whose
/// test.sh runs `check` (reward 1 when it succeeds).
fn write_task(dir: &Path, solve: &str, check: &str) {
    use std::os::unix::fs::PermissionsExt;
    let files = [
        ("instruction.md", "Record the kernel.\n".to_string()),
        (
            "task.toml",
            format!(
                "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n\
                 [environment]\ndocker_image = \"{TINY}\"\ncpus = 1\nmemory_mb = 256\nallow_internet = false\n"
            ),
        ),
        ("solution/solve.sh", format!("#!/bin/bash\n{solve}\n")),
        (
            "tests/test.sh",
            format!(
                "#!/bin/bash\nmkdir -p /logs/verifier\nif {check}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
            ),
        ),
    ];
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write task file");
        if rel.ends_with(".sh") {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }
}

#[test]
fn eval_runs_agent_and_verifier_on_runsc_and_reports_it() {
    require_runsc();
    let d = Dir::new();
    // The solution records the agent sandbox's kernel log; the verifier
    // passes only if that log and its own come from gVisor.
    write_task(
        &d.path().join("tasks/gvisor-both"),
        "dmesg | head -n 3 > kernel.txt",
        "grep -q gVisor /workspace/kernel.txt && dmesg | grep -q gVisor",
    );
    let r = run(d
        .runner()
        .args(["eval", "--agent", "oracle", "--runtime", "runsc"])
        .args(["--output-dir", "runs/eval", "--json", "report.json"])
        .args(["--junit", "junit.xml", "--summary", "summary.md"])
        .arg(d.path().join("tasks")));
    r.expect_code(0);
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("report.json")).expect("report.json"),
    )
    .expect("report is JSON");
    assert_eq!(report["suite"]["runtime"], "runsc", "{report}");
    let a = &report["attempts"][0];
    assert_eq!(a["status"], "pass", "{a}");
    assert_eq!(a["runtime"], "runsc", "{a}");
    let junit = std::fs::read_to_string(d.path().join("junit.xml")).expect("junit.xml");
    assert!(junit.contains("runtime: runsc"), "{junit}");
    let md = std::fs::read_to_string(d.path().join("summary.md")).expect("summary.md");
    assert!(md.contains("runtime runsc"), "{md}");
    let traj = read_jsonl(Path::new(
        a["trajectory"].as_str().expect("trajectory path"),
    ));
    let sec = &of_type(&traj, "run_started")[0]["config"]["run"]["sandbox_security"];
    assert_eq!(sec["kernel"], "gvisor", "{sec}");
}
