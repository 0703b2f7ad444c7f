//! Every key of Harbor's task.toml schema: an implemented key's value
//! reaches its field, a refused key's error names it; and the
//! Terminal-Bench 1 mapping.

use std::path::Path;
use std::time::Duration;

use super::*;

/// A Harbor task dir with this task.toml.
fn dir_with(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("instruction.md"), "x\n").expect("write");
    std::fs::create_dir(dir.path().join("tests")).expect("mkdir");
    std::fs::write(dir.path().join("tests/test.sh"), "true\n").expect("write");
    std::fs::write(dir.path().join("task.toml"), toml).expect("write");
    dir
}

fn vars(name: &str) -> Option<String> {
    match name {
        "HOST_WORD" => Some("t0ken".into()),
        "JUDGE_API_KEY" => Some("sk-host-secret".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn load(toml: &str) -> Result<Task, TaskError> {
    let d = dir_with(toml);
    Task::load_with(d.path(), &vars)
}

fn ok(toml: &str) -> Task {
    load(toml).unwrap_or_else(|e| panic!("{toml:?} loads: {e}"))
}

/// The error for `toml`, checked to name task.toml and `key`.
fn err(toml: &str, key: &str) -> TaskError {
    let e = load(toml).expect_err(toml);
    let msg = e.to_string();
    assert!(msg.contains("task.toml"), "names the file: {msg}");
    assert!(msg.contains(key), "names {key}: {msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
    e
}

/// A refusal of `key`, with a hint.
fn refused(toml: &str, key: &str) -> (String, String) {
    match err(toml, key) {
        e @ TaskError::Refused { .. } => {
            let hint = e.hint().expect("a hint");
            (e.to_string(), hint)
        }
        other => panic!("{toml:?} refused, got {other:?}"),
    }
}

#[test]
fn defaults_of_an_empty_task_toml() {
    let t = ok("");
    assert_eq!(t.agent_user, None);
    assert_eq!(t.verifier_user, None);
    assert_eq!(t.workdir, None);
    assert!(t.env.is_empty() && t.solution_env.is_empty() && t.verifier_env.is_empty());
    assert_eq!(t.grading, None);
    assert_eq!(t.verifier_image, None);
    assert_eq!(t.storage_bytes, None);
    assert_eq!(t.network, TaskNetwork::Public);
    assert_eq!((t.agent_network, t.verifier_network), (None, None));
    assert!(t.allow_internet);
    assert_eq!(t.healthcheck, None);
    assert!(t.artifacts.is_empty());
    assert_eq!(t.compose_file, None);
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    assert_eq!(t.source_dir, t.dir);
}

#[test]
fn accepted_keys_without_fields_load_silently() {
    let t = ok("schema_version = \"1.4\"\nsource = \"tb2\"\n\
         [task]\nname = \"org/x\"\nauthors = [{ name = \"A\" }]\n\
         [metadata]\nanything = { nested = [1, 2] }\n\
         [environment]\ndocker_image = \"img:1\"\nos = \"Linux\"\ngpus = 0\ngpu_types = []\nmcp_servers = []\n\
         [verifier]\ncollect = []\n");
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    assert_eq!(t.config.environment.docker_image.as_deref(), Some("img:1"));
    assert_eq!(t.config.schema_version.as_deref(), Some("1.4"));
    let t = ok("version = \"1.0\"\n");
    assert_eq!(t.config.version.as_deref(), Some("1.0"));
}

#[test]
fn users_are_names_or_uids() {
    let t = ok("[agent]\nuser = \"agent\"\n[verifier]\nuser = 0\n");
    assert_eq!(t.agent_user.as_deref(), Some("agent"));
    assert_eq!(t.verifier_user.as_deref(), Some("0"));
    assert_eq!(t.config.verifier.user.as_deref(), Some("0"));
    let t = ok("[agent]\nuser = 1000\n");
    assert_eq!(t.agent_user.as_deref(), Some("1000"));
    err("[agent]\nuser = -1\n", "user");
    err("[verifier]\nuser = \"\"\n", "verifier.user");
    err("[agent]\nuser = 1.5\n", "user");
}

#[test]
fn workdir_is_absolute_without_dotdot() {
    assert_eq!(
        ok("[environment]\nworkdir = \"/srv/app\"\n")
            .workdir
            .as_deref(),
        Some("/srv/app")
    );
    err("[environment]\nworkdir = \"app\"\n", "environment.workdir");
    err(
        "[environment]\nworkdir = \"/app/../etc\"\n",
        "environment.workdir",
    );
}

#[test]
fn env_tables_resolve_templates_from_the_host() {
    let t = ok(
        "[environment.env]\nLIT = \"plain\"\nTOK = \"${HOST_WORD}\"\nDEF = \"${NOPE:-fallback}\"\nSETEMPTY = \"${EMPTY:-unused}\"\n\
         [solution.env]\nS = \"${HOST_WORD:-x}\"\n\
         [verifier.env]\nV = \"${NOPE:-v}\"\nEMBED = \"a${HOST_WORD}\"\n",
    );
    let pairs = |v: &[(String, String)]| {
        v.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        pairs(&t.env),
        ["DEF=fallback", "LIT=plain", "SETEMPTY=", "TOK=t0ken"]
    );
    assert_eq!(pairs(&t.solution_env), ["S=t0ken"]);
    // Only whole-value templates are resolved, as in Harbor.
    assert_eq!(pairs(&t.verifier_env), ["EMBED=a${HOST_WORD}", "V=v"]);
    // The raw table stays as written, for redaction.
    assert_eq!(t.config.verifier.env["V"], "${NOPE:-v}");
}

#[test]
fn an_unset_variable_without_default_names_file_key_and_variable() {
    for (section, key) in [
        ("environment.env", "environment.env.A"),
        ("solution.env", "solution.env.A"),
        ("verifier.env", "verifier.env.A"),
    ] {
        let e = err(&format!("[{section}]\nA = \"${{NOT_EXPORTED}}\"\n"), key);
        let msg = e.to_string();
        assert!(msg.contains("NOT_EXPORTED"), "{msg}");
        let hint = e.hint().expect("hint");
        assert!(hint.contains("export NOT_EXPORTED"), "{hint}");
    }
    err("[environment.env]\n\"A=B\" = \"x\"\n", "environment.env");
}

#[test]
fn grading_mode_from_the_verifier_section() {
    assert_eq!(
        ok("[verifier]\nenvironment_mode = \"shared\"\n").grading,
        Some(GradingMode::Shared)
    );
    assert_eq!(
        ok("[verifier]\nenvironment_mode = \"separate\"\n").grading,
        Some(GradingMode::Separate)
    );
    let t = ok("[verifier.environment]\ndocker_image = \"verifier:1\"\n");
    assert_eq!(t.grading, Some(GradingMode::Separate));
    assert_eq!(t.verifier_image.as_deref(), Some("verifier:1"));
    // A separate verifier environment has its own network policy (public
    // by default).
    assert_eq!(t.verifier_network, Some(TaskNetwork::Public));
    err(
        "[verifier]\nenvironment_mode = \"shared\"\n[verifier.environment]\ndocker_image = \"v\"\n",
        "verifier.environment_mode",
    );
    err(
        "[verifier]\nenvironment_mode = \"snapshot\"\n",
        "verifier.environment_mode",
    );
}

#[test]
fn separate_verifier_environment_keys_map_or_are_refused_by_name() {
    let t =
        ok("[environment]\ncpus = 2\n[verifier.environment]\ncpus = 2\nallow_internet = false\n");
    assert_eq!(t.verifier_network, Some(TaskNetwork::NoNetwork));
    assert_eq!(t.network, TaskNetwork::Public);
    let (msg, hint) = refused(
        "[environment]\ncpus = 2\n[verifier.environment]\ncpus = 4\n",
        "verifier.environment.cpus",
    );
    assert!(hint.contains("environment.cpus"), "{msg} / {hint}");
    refused(
        "[verifier.environment]\nmemory_mb = 512\n",
        "verifier.environment.memory_mb",
    );
    refused(
        "[verifier.environment]\ngpus = 1\n",
        "verifier.environment.gpus",
    );
    let t = ok("[verifier]\nenvironment_mode = \"separate\"\n");
    assert_eq!(t.verifier_build_dir, None);
}

#[test]
fn a_separate_verifier_built_from_tests_dockerfile_is_found() {
    let d = dir_with("[verifier]\nenvironment_mode = \"separate\"\n");
    std::fs::write(d.path().join("tests/Dockerfile"), "FROM x\n").expect("write");
    let t = Task::load_with(d.path(), &vars).expect("loads");
    assert_eq!(t.verifier_build_dir, Some(d.path().join("tests")));
}

#[test]
fn storage_in_mb_or_the_older_size() {
    assert_eq!(
        ok("[environment]\nstorage_mb = 100\n").storage_bytes,
        Some(100 << 20)
    );
    assert_eq!(
        ok("[environment]\nstorage = \"10G\"\n").storage_bytes,
        Some(10 << 30)
    );
    assert_eq!(
        ok("[environment]\nstorage = \"1.5g\"\nstorage_mb = 1536\n").storage_bytes,
        Some(1536 << 20)
    );
    err(
        "[environment]\nstorage = \"1G\"\nstorage_mb = 10\n",
        "environment.storage",
    );
    err("[environment]\nstorage = \"lots\"\n", "environment.storage");
    err(
        &format!("[environment]\nstorage_mb = {}\n", 1u64 << 44),
        "environment.storage_mb",
    );
}

#[test]
fn memory_older_form_as_harbor_reads_it() {
    assert_eq!(ok("[environment]\nmemory = \"1G\"\n").memory_bytes, 1 << 30);
    assert_eq!(
        ok("[environment]\nmemory = \"512M\"\n").memory_bytes,
        512 << 20
    );
    err(
        "[environment]\nmemory = \"1G\"\nmemory_mb = 512\n",
        "environment.memory",
    );
    assert_eq!(harbor_size_mb("2048k"), Some(2));
    assert_eq!(harbor_size_mb("2"), None);
    assert_eq!(harbor_size_mb("-1G"), None);
    assert_eq!(harbor_size_mb("infG"), None);
}

#[test]
fn network_modes_and_the_older_allow_internet() {
    let t = ok("[environment]\nnetwork_mode = \"no-network\"\n");
    assert_eq!(t.network, TaskNetwork::NoNetwork);
    assert!(!t.allow_internet);
    let t = ok("[environment]\nallow_internet = false\n");
    assert_eq!(t.network, TaskNetwork::NoNetwork);
    // network_mode wins over the older key, as in Harbor.
    let t = ok("[environment]\nallow_internet = false\nnetwork_mode = \"public\"\n");
    assert_eq!(t.network, TaskNetwork::Public);
    let t = ok(
        "[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"public\"\n[verifier]\nnetwork_mode = \"no-network\"\n",
    );
    assert_eq!(t.agent_network, Some(TaskNetwork::Public));
    assert_eq!(t.verifier_network, Some(TaskNetwork::NoNetwork));
    assert!(t.allow_internet, "the agent phase's network decides");
    assert_eq!(t.effective_verifier_network(), TaskNetwork::NoNetwork);
    err(
        "[environment]\nnetwork_mode = \"open\"\n",
        "environment.network_mode",
    );
}

#[test]
fn allowlists_map_to_their_hosts_per_phase() {
    let t = ok(
        "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"PyPI.org.\", \"*.example.com\"]\n",
    );
    let hosts = vec!["pypi.org".to_string(), "*.example.com".to_string()];
    assert_eq!(t.network, TaskNetwork::Allowlist(hosts.clone()));
    assert_eq!(
        t.effective_agent_network(),
        TaskNetwork::Allowlist(hosts.clone())
    );
    assert_eq!(
        t.effective_verifier_network(),
        TaskNetwork::Allowlist(hosts)
    );
    assert!(!t.allow_internet, "an allowlist is not the public network");
    // Phase overrides, as `public` and `no-network` are.
    let t = ok(
        "[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n[verifier]\nnetwork_mode = \"public\"\n",
    );
    assert_eq!(
        t.effective_agent_network(),
        TaskNetwork::Allowlist(vec!["pypi.org".into()])
    );
    assert_eq!(t.effective_verifier_network(), TaskNetwork::Public);
    assert_eq!(t.network, TaskNetwork::NoNetwork);
    // Harbor: an allowlist may name nothing (nothing passes).
    let t = ok("[agent]\nnetwork_mode = \"allowlist\"\n");
    assert_eq!(t.agent_network, Some(TaskNetwork::Allowlist(Vec::new())));
}

#[test]
fn allowed_hosts_outside_an_allowlist_or_not_names_are_errors() {
    for (toml, key) in [
        (
            "[verifier]\nallowed_hosts = [\"example.com\"]\n",
            "verifier.allowed_hosts",
        ),
        (
            "[environment]\nnetwork_mode = \"public\"\nallowed_hosts = [\"example.com\"]\n",
            "environment.allowed_hosts",
        ),
        (
            "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"https://example.com\"]\n",
            "agent.allowed_hosts",
        ),
        (
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a*.example.com\"]\n",
            "environment.allowed_hosts",
        ),
    ] {
        let e = err(toml, key);
        assert!(matches!(e, TaskError::Invalid { .. }), "{toml:?}: {e:?}");
    }
    // Addresses and ranges, which Harbor takes: refused, with what to do.
    for entry in ["10.0.0.1", "10.0.0.0/8", "2001:db8::1"] {
        let (msg, hint) = refused(
            &format!(
                "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"{entry}\"]\n"
            ),
            "environment.allowed_hosts",
        );
        assert!(msg.contains(entry) && msg.contains("names only"), "{msg}");
        assert!(hint.contains("host names"), "{hint}");
    }
}

#[test]
fn healthcheck_defaults_values_and_bounds() {
    let t = ok("[environment.healthcheck]\ncommand = \"test -f /ready\"\n");
    assert_eq!(
        t.healthcheck,
        Some(Healthcheck {
            command: "test -f /ready".into(),
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
            start_period: Duration::ZERO,
            start_interval: Duration::from_secs(5),
            retries: 3,
        })
    );
    let t = ok(
        "[environment.healthcheck]\ncommand = \"true\"\ninterval_sec = 0.5\ntimeout_sec = 2\nstart_period_sec = 10\nstart_interval_sec = 1\nretries = 7\n",
    );
    let h = t.healthcheck.expect("healthcheck");
    assert_eq!(
        (
            h.interval,
            h.timeout,
            h.start_period,
            h.start_interval,
            h.retries
        ),
        (
            Duration::from_millis(500),
            Duration::from_secs(2),
            Duration::from_secs(10),
            Duration::from_secs(1),
            7
        )
    );
    for bad in [
        "interval_sec = -1",
        "timeout_sec = inf",
        "start_period_sec = nan",
        "start_interval_sec = 1e20",
        "retries = -1",
    ] {
        let key = bad.split(' ').next().expect("key");
        err(
            &format!("[environment.healthcheck]\ncommand = \"true\"\n{bad}\n"),
            &format!("environment.healthcheck.{key}"),
        );
    }
    err("[environment.healthcheck]\ninterval_sec = 1\n", "command");
}

#[test]
fn artifacts_validated_as_harbor_does() {
    let t = ok(
        "artifacts = [\"/app/out\", { source = \"/var/log/db\", destination = \"db\", exclude = [\"*.tmp\"], service = \" db \" }, { source = \"rel\", destination = \"\" }]\n",
    );
    assert_eq!(
        t.artifacts,
        [
            Artifact {
                source: "/app/out".into(),
                destination: None,
                exclude: vec![],
                service: None
            },
            Artifact {
                source: "/var/log/db".into(),
                destination: Some("db".into()),
                exclude: vec!["*.tmp".into()],
                service: Some("db".into())
            },
            Artifact {
                source: "rel".into(),
                destination: None,
                exclude: vec![],
                service: None
            },
        ]
    );
    for (toml, key) in [
        ("artifacts = [\"/app/../etc\"]\n", "artifacts[0].source"),
        (
            "artifacts = [{ source = \"/a\", destination = \"/abs\" }]\n",
            "artifacts[0].destination",
        ),
        (
            "artifacts = [{ source = \"/a\", destination = \"x/../../y\" }]\n",
            "artifacts[0].destination",
        ),
        (
            "artifacts = [{ source = \"/a\", destination = \"manifest.json/\" }]\n",
            "artifacts[0].destination",
        ),
        (
            "artifacts = [{ source = \"/a\", destination = \"a\\\\b\" }]\n",
            "artifacts[0].destination",
        ),
        (
            "artifacts = [{ source = \"/a\", destination = \".\" }]\n",
            "artifacts[0].destination",
        ),
        (
            "artifacts = [\"/ok\", { source = \"/a\", service = \"-db\" }]\n",
            "artifacts[1].service",
        ),
        (
            "artifacts = [{ source = \"rel\", service = \"db\" }]\n",
            "artifacts[0].source",
        ),
        (
            "artifacts = [{ destination = \"x\" }]\n",
            "artifacts[0].source",
        ),
        ("artifacts = [1]\n", "artifacts[0]"),
        (
            "artifacts = [{ source = \"/a\", exclude = \"x\" }]\n",
            "artifacts[0].exclude",
        ),
    ] {
        err(toml, key);
    }
    // "main" is the agent's container: a relative source is fine there.
    ok("artifacts = [{ source = \"rel\", service = \"main\" }]\n");
}

#[test]
fn a_compose_file_is_detected() {
    for name in ["docker-compose.yaml", "docker-compose.yml"] {
        let d = dir_with("");
        std::fs::create_dir(d.path().join("environment")).expect("mkdir");
        std::fs::write(d.path().join("environment").join(name), "services: {}\n").expect("write");
        let t = Task::load_with(d.path(), &vars).expect("loads");
        assert_eq!(
            t.compose_file,
            Some(d.path().join("environment").join(name))
        );
    }
}

#[test]
fn keys_outside_harbors_schema_are_warned_by_path() {
    let t = ok(
        "colour = 1\n[environment]\ncpu = 2\n[environment.healthcheck]\ncommand = \"true\"\nperiod = 1\n",
    );
    assert_eq!(t.warnings.len(), 3, "{:?}", t.warnings);
    for key in [
        "colour",
        "environment.cpu",
        "environment.healthcheck.period",
    ] {
        assert!(
            t.warnings
                .iter()
                .any(|w| w.contains(&format!(": {key}: ")) && w.contains("task.toml")),
            "{key}: {:?}",
            t.warnings
        );
    }
    let t = ok("multi_step_reward_strategy = \"final\"\n");
    assert!(
        t.warnings[0].contains("multi_step_reward_strategy") && t.warnings[0].contains("no effect"),
        "{:?}",
        t.warnings
    );
    err(
        "multi_step_reward_strategy = \"best\"\n",
        "multi_step_reward_strategy",
    );
}

#[test]
fn keys_runner_cannot_honour_are_refused_by_name() {
    for (toml, key, says) in [
        (
            "[environment]\ngpus = 1\n",
            "environment.gpus",
            "needs GPUs",
        ),
        (
            "[environment]\ngpu_types = [\"H100\"]\n",
            "environment.gpu_types",
            "needs GPUs",
        ),
        (
            "[environment.tpu]\ntype = \"v6e\"\ntopology = \"2x4\"\n",
            "environment.tpu",
            "TPU",
        ),
        (
            "[environment]\nos = \"windows\"\n",
            "environment.os",
            "Windows",
        ),
        (
            "[[environment.mcp_servers]]\nname = \"m\"\nurl = \"http://x\"\n",
            "environment.mcp_servers",
            "MCP",
        ),
        (
            "[environment]\nskills_dir = \"/skills\"\n",
            "environment.skills_dir",
            "skills",
        ),
        ("[[steps]]\nname = \"one\"\n", "steps", "multi-step"),
        (
            "[[verifier.collect]]\ncommand = \"true\"\n",
            "verifier.collect",
            "collect",
        ),
    ] {
        let (msg, hint) = refused(toml, key);
        assert!(msg.contains(says), "{msg}");
        assert!(!hint.is_empty());
    }
    err("[environment]\ngpus = -1\n", "environment.gpus");
    err("[environment]\nos = \"plan9\"\n", "environment.os");
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tb1/hello-tb1")
}

#[test]
fn a_terminal_bench_1_task_maps_as_harbors_migration_maps_it() {
    let src = fixture();
    let t = tb1::load(&src).expect("the fixture maps");
    assert_eq!(t.name, "hello-tb1");
    assert_eq!(t.source_dir, src);
    assert_ne!(t.dir, src);
    assert_eq!(
        t.instruction,
        "Create /app/hello.txt containing \"Hello, world!\".\n"
    );
    assert_eq!(
        (t.agent_timeout_secs, t.verifier_timeout_secs),
        (120.0, 30.0)
    );
    assert_eq!(t.config.metadata["difficulty"].as_str(), Some("easy"));
    assert_eq!(
        t.config.metadata["author_name"].as_str(),
        Some("Runner Tests")
    );
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    let read = |p: &str| std::fs::read_to_string(t.dir.join(p)).expect(p);
    let test_sh = read("tests/test.sh");
    assert!(
        test_sh.starts_with("#!/bin/sh\ngrep -qx \"Hello, world!\" /app/hello.txt && test -f /tests/test_outputs.py\n"),
        "{test_sh}"
    );
    assert!(
        test_sh.contains("echo 1 > /logs/verifier/reward.txt"),
        "{test_sh}"
    );
    assert!(test_sh.ends_with("exit $_EXIT_CODE\n"), "{test_sh}");
    assert_eq!(
        read("tests/test_outputs.py"),
        std::fs::read_to_string(src.join("tests/test_outputs.py")).expect("read")
    );
    assert_eq!(
        read("solution/solve.sh"),
        "#!/bin/sh\necho \"Hello, world!\" > /app/hello.txt\n"
    );
    use std::os::unix::fs::PermissionsExt;
    for exe in ["tests/test.sh", "solution/solve.sh"] {
        let mode = std::fs::metadata(t.dir.join(exe))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "{exe} is executable");
    }
    assert_eq!(
        read("environment/Dockerfile"),
        "FROM runner-sandbox:tiny\nCOPY data /app/data\n\n# Mapped from docker-compose.yaml\nENV TEST_DIR=/tests\nENV GREETING=hello\nWORKDIR /app\n"
    );
    assert_eq!(read("environment/data/input.txt"), "input\n");
    // The default compose file collapses into the Dockerfile.
    assert_eq!(t.compose_file, None);
    for gone in [
        "environment/docker-compose.yaml",
        "environment/task.yaml",
        "environment/run-tests.sh",
        "environment/solution.sh",
        "environment/tests",
    ] {
        assert!(!t.dir.join(gone).exists(), "{gone}");
    }
    // The mapped copy lives as long as the task.
    let dir = t.dir.clone();
    let clone = t.clone();
    drop(t);
    assert!(dir.exists());
    drop(clone);
    assert!(!dir.exists());
}

/// A Terminal-Bench 1 task in a temp dir, from the fixture plus `extra`.
fn tb1_with(extra: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    let dst = d.path().join("mytask");
    tb1::copy_tree(&fixture(), Path::new(""), &dst, &|_| false).expect("copy");
    for (p, text) in extra {
        let p = dst.join(p);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    d
}

#[test]
fn a_compose_file_with_a_sidecar_becomes_harbors_compose_file() {
    let d = tb1_with(&[
        (
            "docker-compose.yaml",
            "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n    depends_on: [db]\n    platform: linux/amd64\n    entrypoint: [\"/bin/sh\", \"-c\"]\n  db:\n    build:\n      context: ./db\n    container_name: ${T_BENCH_TASK_DOCKER_NAME_PREFIX}__db\n",
        ),
        ("db/Dockerfile", "FROM postgres\n"),
    ]);
    let t = tb1::load(&d.path().join("mytask")).expect("maps");
    let compose = t.compose_file.clone().expect("a compose file");
    let v: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&compose).expect("read")).expect("yaml");
    let main = &v["services"]["main"];
    assert_eq!(main["image"], "${MAIN_IMAGE_NAME}");
    assert_eq!(main["build"]["context"], "${CONTEXT_DIR}");
    assert_eq!(main["depends_on"], serde_json::json!(["db"]));
    assert_eq!(v["services"]["db"]["container_name"], "hb__db");
    assert!(v["services"].get("client").is_none());
    assert_eq!(
        std::fs::read_to_string(t.dir.join("environment/db/Dockerfile")).expect("read"),
        "FROM postgres\n"
    );
    let dockerfile = std::fs::read_to_string(t.dir.join("environment/Dockerfile")).expect("read");
    assert!(
        dockerfile.starts_with("FROM --platform=linux/amd64 runner-sandbox:tiny\n"),
        "{dockerfile}"
    );
    assert!(
        dockerfile.contains("ENTRYPOINT [\"/bin/sh\", \"-c\"]\n"),
        "{dockerfile}"
    );
}

#[test]
fn terminal_bench_1_refusals_name_the_file() {
    let d = tb1_with(&[("solution.yaml", "- command: true\n")]);
    let e = tb1::load(&d.path().join("mytask")).expect_err("solution.yaml");
    assert!(e.to_string().contains("solution.yaml"), "{e}");
    assert!(e.hint().is_some_and(|h| h.contains("solution.sh")));

    let d = tb1_with(&[]);
    std::os::unix::fs::symlink("/etc/passwd", d.path().join("mytask/data/leak")).expect("link");
    let e = tb1::load(&d.path().join("mytask")).expect_err("a link out");
    assert!(
        e.to_string().contains("leak") && e.to_string().contains("outside"),
        "{e}"
    );

    let d = tb1_with(&[]);
    std::os::unix::fs::symlink("input.txt", d.path().join("mytask/data/alias")).expect("link");
    let t = tb1::load(&d.path().join("mytask")).expect("a link inside is copied as a link");
    let link = t.dir.join("environment/data/alias");
    assert_eq!(
        std::fs::read_link(&link).expect("a link"),
        Path::new("input.txt")
    );

    let d = tb1_with(&[]);
    std::fs::remove_file(d.path().join("mytask/run-tests.sh")).expect("rm");
    let e = tb1::load(&d.path().join("mytask")).expect_err("no run-tests.sh");
    assert!(e.to_string().contains("run-tests.sh"), "{e}");

    let d = tb1_with(&[("task.yaml", "instruction: [unclosed\n")]);
    let e = tb1::load(&d.path().join("mytask")).expect_err("bad yaml");
    assert!(e.to_string().contains("task.yaml"), "{e}");

    let d = tb1_with(&[(
        "docker-compose.yaml",
        "services:\n  client:\n    build: ../elsewhere\n",
    )]);
    let e = tb1::load(&d.path().join("mytask")).expect_err("context outside");
    assert!(e.to_string().contains("build context"), "{e}");
}

#[test]
fn discover_takes_terminal_bench_1_dirs_as_paths_and_in_suites() {
    let d = tb1_with(&[]);
    let harbor = d.path().join("harbor-task");
    std::fs::create_dir_all(harbor.join("tests")).expect("mkdir");
    std::fs::write(harbor.join("instruction.md"), "x\n").expect("write");
    std::fs::write(harbor.join("tests/test.sh"), "true\n").expect("write");
    std::fs::create_dir(d.path().join("notes")).expect("mkdir");
    let tasks = discover(&[d.path().to_path_buf()]).expect("a suite");
    let names: Vec<&str> = tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["harbor-task", "mytask"]);
    let tasks = discover(&[d.path().join("mytask")]).expect("one task");
    assert_eq!(tasks[0].name, "mytask");
    assert_eq!(tasks[0].source_dir, d.path().join("mytask"));
}

#[test]
fn an_unknown_layout_names_what_was_found_and_what_was_expected() {
    let d = tempfile::tempdir().expect("tempdir");
    for i in 0..10 {
        std::fs::write(d.path().join(format!("file{i}.txt")), "").expect("write");
    }
    std::fs::create_dir(d.path().join("bin")).expect("mkdir");
    let e = discover(&[d.path().to_path_buf()]).expect_err("no tasks");
    let msg = e.to_string();
    assert!(
        msg.contains("instruction.md")
            && msg.contains("tests/test.sh")
            && msg.contains("task.yaml"),
        "{msg}"
    );
    assert!(msg.contains("file0.txt") && msg.contains("bin/"), "{msg}");
    assert!(msg.contains("and 3 more"), "{msg}");
    assert!(!msg.contains("file7.txt"), "at most eight: {msg}");
    assert!(e.hint().is_some());
    let empty = tempfile::tempdir().expect("tempdir");
    let e = discover(&[empty.path().to_path_buf()]).expect_err("empty");
    assert!(e.to_string().contains("an empty directory"), "{e}");
}

#[test]
fn a_secret_named_host_variable_is_refused_naming_the_key_and_the_variable() {
    let e = err(
        "[verifier.env]\nKEY = \"${JUDGE_API_KEY}\"\n",
        "verifier.env.KEY",
    );
    assert!(matches!(e, TaskError::SecretVar { .. }), "{e:?}");
    assert!(e.to_string().contains("JUDGE_API_KEY"), "{e}");
    assert!(!e.to_string().contains("sk-host-secret"), "{e}");
    assert!(
        e.hint()
            .is_some_and(|h| h.contains("--pass-env JUDGE_API_KEY"))
    );
    // Unset on the host, its default is no secret of runner's.
    let t = ok("[verifier.env]\nKEY = \"${RUNNER_UNSET_API_KEY:-none}\"\n");
    assert_eq!(
        t.verifier_env,
        vec![("KEY".to_string(), "none".to_string())]
    );
}
