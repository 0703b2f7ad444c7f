//! `runner eval` grades as Harbor grades: each example task whose checked
//! state Harbor keeps (files under /etc, /usr/local/bin, $HOME or outside
//! WORKDIR, a package in site-packages, a service the agent left running, a
//! sidecar, named metrics, task.toml's workdir, env and agent user) passes
//! with its reference solution and fails untouched, in the default grading
//! mode, `shared` (test.sh in the agent's own container after the agent
//! phase). Every task was checked by hand to behave so when graded the way
//! Harbor grades: solve.sh then test.sh in one container, test.sh alone in
//! a fresh one. `--grading isolated` (a pristine image plus WORKDIR) loses
//! that state, so its verdicts differ observably.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::binary::{Dir, Ran};
use crate::support::docker::docker_cli;
use crate::support::eval::{assert_clean, eval_cmd, prelude, report, run_with_pid};

pub(crate) fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/tasks")
}

pub(crate) fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/eval")
}

/// One `runner eval` of `paths` with `args` (and `env` added to runner's
/// clean environment): its result and its JSON report, whose task images
/// `images` records. Asserts the run left no container, volume or network
/// behind.
pub(crate) fn graded(
    d: &Dir,
    images: &mut Images,
    paths: &[&Path],
    args: &[&str],
    env: &[(&str, &str)],
) -> (Ran, Value) {
    let mut all: Vec<&str> = paths
        .iter()
        .map(|p| p.to_str().expect("utf-8 path"))
        .collect();
    all.extend_from_slice(args);
    all.extend_from_slice(&["--jobs", "2"]);
    let mut cmd = eval_cmd(d, &all);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (ran, pid) = run_with_pid(cmd);
    let r = report(d, &ran);
    images.saw(&r);
    assert_clean(pid, &ran.desc);
    (ran, r)
}

/// The one attempt of `task` in the report.
pub(crate) fn attempt<'a>(r: &'a Value, task: &str, ran: &Ran) -> &'a Value {
    let all = r["attempts"].as_array().expect("attempts");
    let mine: Vec<&Value> = all.iter().filter(|a| a["task"] == task).collect();
    assert_eq!(
        mine.len(),
        1,
        "one attempt of {task}: {all:#?}{}",
        ran.explain()
    );
    mine[0]
}

/// An attempt as a failure message shows it: its JSON and the verifier's
/// log (test.sh's output), with the run's output.
pub(crate) fn describe(a: &Value, ran: &Ran) -> String {
    let log = a["verifier_log"]
        .as_str()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| format!("({p}: {e})")))
        .unwrap_or_else(|| "(no verifier_log)".into());
    format!(
        "\nattempt: {a:#}\n--- verifier log ---\n{log}{}",
        ran.explain()
    )
}

/// The task images on the engine (`runner-task:TAG`) when it was made;
/// on drop it removes the ones a report named that were not there then.
/// They are a cache other processes may share: it removes none it did not
/// see built.
pub(crate) struct Images {
    cached: Vec<String>,
    seen: Vec<String>,
}

impl Images {
    pub(crate) fn new() -> Images {
        Images {
            cached: task_images(),
            seen: Vec::new(),
        }
    }

    /// Records the task images the report's attempts ran on.
    pub(crate) fn saw(&mut self, r: &Value) {
        for a in r["attempts"].as_array().into_iter().flatten() {
            if let Some(i) = a["image"].as_str()
                && i.starts_with("runner-task:")
                && !self.cached.iter().any(|c| c == i)
                && !self.seen.iter().any(|s| s == i)
            {
                self.seen.push(i.to_string());
            }
        }
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        if !self.seen.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["image", "rm"])
                .args(&self.seen)
                .output();
        }
    }
}

fn task_images() -> Vec<String> {
    docker_cli(&[
        "images",
        "runner-task",
        "--format",
        "{{.Repository}}:{{.Tag}}",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

/// Grades `dir` with `agent`; asserts the exit code, the status, that the
/// default mode (`shared`) graded it, and returns the attempt.
fn expect(
    images: &mut Images,
    dir: &Path,
    agent: &str,
    env: &[(&str, &str)],
    (code, status): (i32, &str),
) -> (Value, Ran) {
    let name = dir.file_name().and_then(|n| n.to_str()).expect("task name");
    let d = Dir::new();
    let (ran, r) = graded(&d, images, &[dir], &["--agent", agent], env);
    let a = attempt(&r, name, &ran).clone();
    assert_eq!(
        (ran.code(), a["status"].as_str().unwrap_or_default()),
        (code, status),
        "{name} with --agent {agent}: exit code and status{}",
        describe(&a, &ran)
    );
    // The task's own mode: Harbor's default, shared, unless it says separate.
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap_or_default();
    let mode = if toml.contains("environment_mode = \"separate\"") {
        "separate"
    } else {
        "shared"
    };
    assert_eq!(
        a["grading"],
        mode,
        "{name}: graded in the task's mode{}",
        describe(&a, &ran)
    );
    (a, ran)
}

/// The example `name` passes with `--agent oracle` (reward 1) and fails
/// with `--agent nop` (reward 0).
fn oracle_passes_and_nop_fails(name: &str) {
    let _g = prelude();
    let dir = examples().join(name);
    let mut images = Images::new();
    let (a, ran) = expect(&mut images, &dir, "oracle", &[], (0, "pass"));
    assert_eq!(a["reward"].as_f64(), Some(1.0), "{}", describe(&a, &ran));
    let (a, ran) = expect(&mut images, &dir, "nop", &[], (1, "fail"));
    assert_eq!(a["reward"].as_f64(), Some(0.0), "{}", describe(&a, &ran));
}

macro_rules! oracle_passes_nop_fails {
    ($($test:ident => $task:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                oracle_passes_and_nop_fails($task);
            }
        )*
    };
}

oracle_passes_nop_fails! {
    etc_config_oracle_passes_nop_fails => "etc-config",
    usr_local_bin_oracle_passes_nop_fails => "usr-local-bin",
    home_dotfile_oracle_passes_nop_fails => "home-dotfile",
    outside_workdir_oracle_passes_nop_fails => "outside-workdir",
    site_packages_oracle_passes_nop_fails => "site-packages",
    agent_service_oracle_passes_nop_fails => "agent-service",
    sidecar_oracle_passes_nop_fails => "sidecar",
    custom_workdir_oracle_passes_nop_fails => "custom-workdir",
    agent_user_oracle_passes_nop_fails => "agent-user",
    chown_files_oracle_passes_nop_fails => "chown-files",
    separate_artifacts_oracle_passes_nop_fails => "separate-artifacts",
}

#[test]
fn task_env_reaches_agent_oracle_and_verifier_with_host_defaults() {
    let _g = prelude();
    let dir = examples().join("task-env");
    let mut images = Images::new();
    // RUNNER_TEST_GREETING unset (runner runs with a clean environment):
    // `${RUNNER_TEST_GREETING:-hello}` is "hello" for the agent and the
    // verifier alike.
    let (a, ran) = expect(&mut images, &dir, "oracle", &[], (0, "pass"));
    assert_eq!(a["reward"].as_f64(), Some(1.0), "{}", describe(&a, &ran));
    // Set on the host, it is substituted into [environment] env and
    // [verifier] env: the oracle writes "hey, world" and test.sh expects it.
    let (a, ran) = expect(
        &mut images,
        &dir,
        "oracle",
        &[("RUNNER_TEST_GREETING", "hey")],
        (0, "pass"),
    );
    assert_eq!(a["reward"].as_f64(), Some(1.0), "{}", describe(&a, &ran));
    let (a, ran) = expect(&mut images, &dir, "nop", &[], (1, "fail"));
    assert_eq!(a["reward"].as_f64(), Some(0.0), "{}", describe(&a, &ran));
}

#[test]
fn named_metrics_are_kept_and_pass_only_when_all_are_one() {
    let _g = prelude();
    let mut images = Images::new();
    let dir = examples().join("named-metrics");
    let (a, ran) = expect(&mut images, &dir, "oracle", &[], (0, "pass"));
    assert_eq!(
        a["metrics"],
        json!({"correct": 1.0, "style": 1.0}),
        "reward.json's named metrics are kept{}",
        describe(&a, &ran)
    );
    let (a, ran) = expect(&mut images, &dir, "nop", &[], (1, "fail"));
    assert_eq!(
        a["metrics"],
        json!({"correct": 0.0, "style": 0.0}),
        "{}",
        describe(&a, &ran)
    );
    // Correct but undocumented: {"correct": 1, "style": 0} fails (every
    // metric must be >= 1); it is neither a pass nor a reward of 0.5.
    let dir = fixtures().join("named-metrics-partial");
    let (a, ran) = expect(&mut images, &dir, "oracle", &[], (1, "fail"));
    assert_eq!(
        a["metrics"],
        json!({"correct": 1.0, "style": 0.0}),
        "{}",
        describe(&a, &ran)
    );
    assert_ne!(
        a["reward"].as_f64(),
        Some(0.5),
        "named metrics are not averaged into a reward{}",
        describe(&a, &ran)
    );
}

#[test]
fn isolated_grading_loses_state_outside_workdir_that_shared_grading_keeps() {
    let _g = prelude();
    let names = ["etc-config", "usr-local-bin", "outside-workdir"];
    let dirs: Vec<PathBuf> = names.iter().map(|n| examples().join(n)).collect();
    let paths: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let mut images = Images::new();

    // The default, shared: every oracle passes.
    let d = Dir::new();
    let (ran, r) = graded(&d, &mut images, &paths, &["--agent", "oracle"], &[]);
    for name in names {
        let a = attempt(&r, name, &ran);
        assert_eq!(
            (a["status"].as_str(), a["grading"].as_str()),
            (Some("pass"), Some("shared")),
            "{name}{}",
            describe(a, &ran)
        );
    }
    ran.expect_code(0);

    // Isolated (a pristine image plus WORKDIR): the state the oracle left
    // under /etc, /usr/local/bin and /data is gone, so each fails; the
    // report says which mode graded.
    let d = Dir::new();
    let (ran, r) = graded(
        &d,
        &mut images,
        &paths,
        &["--agent", "oracle", "--grading", "isolated"],
        &[],
    );
    for name in names {
        let a = attempt(&r, name, &ran);
        assert_eq!(
            (a["status"].as_str(), a["grading"].as_str()),
            (Some("fail"), Some("isolated")),
            "{name}{}",
            describe(a, &ran)
        );
        assert_eq!(a["reward"].as_f64(), Some(0.0), "{}", describe(a, &ran));
    }
    ran.expect_code(1);
}
