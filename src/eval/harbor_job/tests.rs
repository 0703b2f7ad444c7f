use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::*;
use crate::eval::outcome::{ErrorKind, Status};

#[test]
fn trial_names_are_the_task_and_the_attempt_cut_as_harbor_cuts_them() {
    assert_eq!(trial_name("fizzbuzz-script", 1), "fizzbuzz-script__a1");
    assert_eq!(trial_name("fizzbuzz-script", 12), "fizzbuzz-script__a12");
    // Cut to 32 characters and stripped of trailing '_' and '-': a hash of
    // the whole name keeps two such tasks apart.
    let long_a = "a-very-long-task-name-that-goes-on-and-on";
    let long_b = "a-very-long-task-name-that-goes-on-and-off";
    let (a, b) = (trial_name(long_a, 1), trial_name(long_b, 1));
    assert!(a.starts_with("a-very-long-task-name-that-goes__a1-"), "{a}");
    assert_ne!(a, b);
    assert_eq!(
        a.len(),
        "a-very-long-task-name-that-goes".len() + "__a1-".len() + 8
    );
    assert_ne!(trial_name("x-", 1), trial_name("x", 1));
    // Characters, not bytes.
    let wide = "é".repeat(40);
    assert!(trial_name(&wide, 3).starts_with(&format!("{}__a3-", "é".repeat(32))));
    // The same suite gives the same names and ids.
    assert_eq!(trial_name(long_a, 1), a);
    assert_eq!(derived_uuid(&["job", "s"]), derived_uuid(&["job", "s"]));
    let id = derived_uuid(&["trial", "s", &a]);
    assert_eq!(id.len(), 36);
    assert_eq!(&id[14..15], "8", "version 8: {id}");
}

fn meta(agent: AgentKind) -> HarborJobMeta {
    let t = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
        .expect("time")
        .with_timezone(&Utc);
    HarborJobMeta {
        agent,
        model: None,
        suite_id: "eval-test".into(),
        started_at: t,
        finished_at: t + chrono::Duration::seconds(30),
        n_attempts: 2,
        jobs: 2,
        docker: true,
        cpus: None,
        memory_mb: None,
        agent_timeout_secs: None,
        verifier_timeout_secs: Some(30.0),
    }
}

fn info(name: &str) -> TaskInfo {
    TaskInfo {
        name: name.into(),
        harbor_name: name.into(),
        path: PathBuf::from(format!("/tasks/{name}")),
        source: Some("tasks".into()),
        checksum: "c".repeat(64),
    }
}

fn attempt(task: &str, n: u32, status: Status, reward: Option<f64>, run_dir: PathBuf) -> Attempt {
    let mut a = Attempt::not_run(task, n, run_dir, status, String::new());
    a.agent_outcome = "completed".into();
    a.started_at = Some(meta(AgentKind::Oracle).started_at);
    a.phases.setup_ms = 1000;
    a.phases.agent_ms = 2000;
    a.phases.verifier_ms = 3000;
    a.phases.total_ms = 6500;
    if let Some(r) = reward {
        a.metrics = BTreeMap::from([("reward".to_string(), r)]);
        a.reward = Some(r);
    }
    a
}

fn read(p: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json")
}

#[test]
fn a_suite_becomes_a_job_with_harbors_stats() {
    let base = tempfile::tempdir().expect("tempdir");
    // One run directory with a verifier log, a reward file, outputs and a
    // link the layout must not follow.
    let run = base.path().join("runs/t1/1");
    std::fs::create_dir_all(run.join("outputs")).expect("mkdir");
    std::fs::write(run.join("verifier.log"), "ok\n").expect("write");
    std::fs::write(run.join("reward.txt"), "1\n").expect("write");
    std::fs::write(run.join("trajectory.jsonl"), "{}\n").expect("write");
    std::fs::write(run.join("outputs/oracle.log"), "solved\n").expect("write");
    std::os::unix::fs::symlink("/etc/passwd", run.join("outputs/passwd")).expect("link");

    let mut error = attempt("t2", 1, Status::Error, None, base.path().join("none"));
    error.error_kind = Some(ErrorKind::Task);
    error.error = Some("test.sh wrote no reward file (...)".into());
    let mut timed_out = attempt("t2", 2, Status::Fail, None, base.path().join("none"));
    timed_out.failure = Some("the verifier did not finish within 30s; agent: completed".into());
    let never = Attempt::not_run(
        "t3",
        1,
        base.path().join("none"),
        Status::Interrupted,
        String::new(),
    );
    let attempts = vec![
        attempt("t1", 1, Status::Pass, Some(1.0), run.clone()),
        attempt("t1", 2, Status::Fail, Some(0.0), base.path().join("none")),
        error,
        timed_out,
        never,
    ];
    let dir = base.path().join("jobs/suite");
    let tasks = [info("t1"), info("t2"), info("t3")];
    let redactor = Redactor::new(vec![]).expect("redactor");
    write(
        &dir,
        &attempts,
        &tasks,
        &meta(AgentKind::Oracle),
        &redactor,
        false,
    )
    .expect("writes");

    let job = read(&dir.join("result.json"));
    assert_eq!(job["n_total_trials"], 5);
    let stats = &job["stats"];
    assert_eq!(stats["n_completed_trials"], 4, "{stats}");
    assert_eq!(
        stats["n_pending_trials"], 1,
        "the attempt that never started"
    );
    assert_eq!(stats["n_errored_trials"], 2);
    let evals = &stats["evals"]["oracle__tasks"];
    assert_eq!(evals["n_trials"], 2, "two trials with a valid reward");
    assert_eq!(evals["metrics"][0]["mean"], 0.5);
    // pass@2 over t1 (one pass in two): 1 - (1/2 * 0/1) = 1.
    assert_eq!(evals["pass_at_k"]["2"], 1.0);
    assert_eq!(evals["reward_stats"]["reward"]["1.0"][0], "t1__a1");
    assert_eq!(
        evals["exception_stats"]["RewardFileNotFoundError"][0],
        "t2__a1"
    );
    assert_eq!(
        evals["exception_stats"]["VerifierTimeoutError"][0],
        "t2__a2"
    );
    assert!(!dir.join("t3__a1").exists());

    let t1 = read(&dir.join("t1__a1/result.json"));
    assert_eq!(t1["verifier_result"]["rewards"]["reward"], 1.0);
    assert_eq!(t1["reward_valid"], true);
    assert_eq!(
        t1["agent_execution"]["started_at"],
        "2026-12-01T10:00:01.000000Z"
    );
    assert_eq!(t1["verifier"]["finished_at"], "2026-12-01T10:00:06.000000Z");
    assert_eq!(t1["finished_at"], "2026-12-01T10:00:06.500000Z");
    assert_eq!(t1["config"], read(&dir.join("t1__a1/config.json")));
    let trial = dir.join("t1__a1");
    for (file, want) in [
        ("verifier/test-stdout.txt", "ok\n"),
        ("verifier/reward.txt", "1\n"),
        ("agent/trajectory.jsonl", "{}\n"),
        ("agent/outputs/oracle.log", "solved\n"),
    ] {
        assert_eq!(
            std::fs::read_to_string(trial.join(file)).expect(file),
            want,
            "{file}"
        );
    }
    assert!(
        std::fs::symlink_metadata(trial.join("agent/outputs/passwd")).is_err(),
        "a link of the run directory is never copied"
    );
    let e = read(&dir.join("t2__a1/result.json"));
    assert_eq!(e["exception_info"]["policy"]["has_valid_reward"], false);
    assert!(e["verifier_result"].is_null());
    assert!(
        std::fs::read_to_string(dir.join("t2__a1/exception.txt"))
            .expect("exception.txt")
            .starts_with("RewardFileNotFoundError: test.sh wrote no reward file")
    );
    // Nothing but the job is left next to it.
    let siblings: Vec<_> = std::fs::read_dir(base.path().join("jobs"))
        .expect("read")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(siblings, ["suite"]);
}

#[test]
fn an_existing_job_is_never_overwritten() {
    let base = tempfile::tempdir().expect("tempdir");
    let dir = base.path().join("job");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("result.json"), "{\"old\": true}").expect("write");
    let redactor = Redactor::new(vec![]).expect("redactor");
    let err = write(&dir, &[], &[], &meta(AgentKind::Nop), &redactor, false).expect_err("refused");
    assert!(matches!(err, HarborJobError::Exists(_)), "{err}");
    assert!(err.hint().contains("new directory"));
    assert_eq!(
        std::fs::read_to_string(dir.join("result.json")).expect("read"),
        "{\"old\": true}"
    );
    assert_eq!(
        std::fs::read_dir(base.path()).expect("read").count(),
        1,
        "no temporary directory is left"
    );
    assert!(matches!(
        check_target(std::path::Path::new("/"), false),
        Err(HarborJobError::BadPath(_))
    ));
    // An empty directory is replaced.
    let empty = base.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    write(&empty, &[], &[], &meta(AgentKind::Nop), &redactor, false).expect("writes");
    assert_eq!(read(&empty.join("result.json"))["n_total_trials"], 0);
    // A resume replaces a layout runner wrote, and only such a one.
    let err = write(&dir, &[], &[], &meta(AgentKind::Nop), &redactor, true).expect_err("refused");
    assert!(matches!(err, HarborJobError::Exists(_)), "{err}");
    write(&empty, &[], &[], &meta(AgentKind::Oracle), &redactor, true).expect("replaces");
    assert_eq!(read(&empty.join("result.json"))["n_total_trials"], 0);
    assert_eq!(
        std::fs::read_dir(base.path()).expect("read").count(),
        2,
        "nothing is left beside the jobs"
    );
}

#[test]
fn secrets_in_errors_are_redacted_from_the_layout() {
    let base = tempfile::tempdir().expect("tempdir");
    let mut a = attempt("t", 1, Status::Error, None, base.path().join("none"));
    a.error = Some("image: pull failed with token sk-secret-123".into());
    let dir = base.path().join("job");
    let redactor = Redactor::new(vec!["sk-secret-123".into()]).expect("redactor");
    write(
        &dir,
        &[a],
        &[info("t")],
        &meta(AgentKind::Nop),
        &redactor,
        false,
    )
    .expect("writes");
    for f in ["t__a1/result.json", "t__a1/exception.txt"] {
        let text = std::fs::read_to_string(dir.join(f)).expect(f);
        assert!(!text.contains("sk-secret-123"), "{f}: {text}");
        assert!(text.contains("RunnerInfrastructureError"), "{f}: {text}");
    }
}

#[test]
fn a_task_found_in_a_directory_of_tasks_has_that_directory_as_its_source() {
    let base = tempfile::tempdir().expect("tempdir");
    let suite = base.path().join("suite");
    for (name, extra) in [("one", "[task]\nname = \"org/one-pkg\"\n"), ("two", "")] {
        let t = suite.join(name);
        std::fs::create_dir_all(t.join("tests")).expect("mkdir");
        std::fs::write(t.join("instruction.md"), "Do it.\n").expect("write");
        std::fs::write(
            t.join("task.toml"),
            format!("{extra}[environment]\ndocker_image = \"runner-sandbox:bookworm\"\n"),
        )
        .expect("write");
        std::fs::write(
            t.join("tests/test.sh"),
            "echo 1 > /logs/verifier/reward.txt\n",
        )
        .expect("write");
    }
    let paths = [suite.clone(), suite.join("two")];
    let tasks = crate::eval::task::discover(&paths[..1]).expect("tasks");
    let infos = TaskInfo::of_all(&tasks, &paths[..1]).expect("infos");
    assert_eq!(infos.len(), 2);
    assert_eq!(infos[0].source.as_deref(), Some("suite"));
    assert_eq!(infos[0].harbor_name, "org/one-pkg", "[task] name wins");
    assert_eq!(infos[1].harbor_name, "two");
    assert_eq!(infos[0].checksum.len(), 64);
    assert_ne!(infos[0].checksum, infos[1].checksum);
    // Given by its own path: no source (Harbor's `adhoc`).
    let tasks = crate::eval::task::discover(&paths[1..]).expect("tasks");
    let infos = TaskInfo::of_all(&tasks, &paths[1..]).expect("infos");
    assert_eq!(infos[0].source, None);
    assert_eq!(infos[0].path, suite.join("two"));
}
