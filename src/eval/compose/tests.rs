use super::*;

fn parse_in(dir: &Path, text: &str) -> Result<Compose, ComposeError> {
    let file = dir.join("environment").join("docker-compose.yaml");
    let vars = BTreeMap::from([
        ("MAIN_IMAGE_NAME".to_string(), "task-img".to_string()),
        ("DB_PASS".to_string(), "s3cret".to_string()),
    ]);
    parse(text, &file, dir, &vars)
}

fn parse_ok(text: &str) -> Compose {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("environment/db")).unwrap();
    parse_in(dir.path(), text).unwrap()
}

fn refused(text: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    match parse_in(dir.path(), text) {
        Err(ComposeError::Refused { service, key, .. }) => (service, key),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const FULL: &str = r#"
version: "3.8"
services:
  main:
    image: ${MAIN_IMAGE_NAME}
    build:
      context: .
    environment:
      - DB_HOST=db
      - DB_PASS
    working_dir: /srv/app
    user: "1000:1000"
    depends_on:
      db:
        condition: service_healthy
    ports: ["8080:8080"]
  cache:
    image: runner-sandbox:tiny
    command: nc -lk -p 6379 -e echo "PONG"
    depends_on: [db]
  db:
    build: ./db
    environment:
      POSTGRES_PASSWORD: ${DB_PASS}
      PORT: 5432
      FROM_HOST:
    entrypoint: ["/bin/sh", "-c"]
    healthcheck:
      test: ["CMD-SHELL", "nc -z localhost 5432"]
      interval: 1s
      timeout: 5s
      retries: 30
      start_period: 1m
    volumes:
      - pgdata:/var/lib/postgresql/data
      - /scratch
    restart: always
    weird_key: 1
volumes:
  pgdata:
"#;

#[test]
fn a_full_file_is_read_as_compose_reads_it() {
    let c = parse_ok(FULL);
    assert_eq!(c.main.image.as_deref(), Some("task-img"));
    assert_eq!(
        c.main.env,
        [
            ("DB_HOST".to_string(), "db".to_string()),
            ("DB_PASS".into(), "s3cret".into())
        ]
    );
    assert_eq!(c.main.working_dir.as_deref(), Some("/srv/app"));
    assert_eq!(c.main.user.as_deref(), Some("1000:1000"));
    assert_eq!(c.main.depends_on, ["db"]);
    // db first: cache depends on it.
    assert_eq!(c.sidecar_names(), ["db", "cache"]);
    let db = &c.sidecars[0];
    assert!(
        matches!(&db.image, SidecarImage::Build { context, dockerfile: None } if context.ends_with("environment/db"))
    );
    assert!(
        db.env
            .contains(&("POSTGRES_PASSWORD".into(), "s3cret".into()))
    );
    assert!(db.env.contains(&("PORT".into(), "5432".into())));
    assert!(
        !db.env.iter().any(|(k, _)| k == "FROM_HOST"),
        "never the host's"
    );
    assert_eq!(db.entrypoint, Some(vec!["/bin/sh".into(), "-c".into()]));
    let h = db.healthcheck.clone().unwrap();
    assert_eq!(h.test, ["CMD-SHELL", "nc -z localhost 5432"]);
    assert_eq!(
        (h.interval, h.timeout, h.retries, h.start_period),
        (
            Duration::from_secs(1),
            Duration::from_secs(5),
            30,
            Duration::from_secs(60)
        )
    );
    assert_eq!(db.volumes, ["/var/lib/postgresql/data", "/scratch"]);
    let cache = &c.sidecars[1];
    assert_eq!(
        cache.image,
        SidecarImage::Named("runner-sandbox:tiny".into())
    );
    assert_eq!(
        cache.command,
        Some(vec![
            "nc".into(),
            "-lk".into(),
            "-p".into(),
            "6379".into(),
            "-e".into(),
            "echo".into(),
            "PONG".into()
        ])
    );
    let w = c.warnings.join("\n");
    for needle in [
        "`ports`",
        "`restart`",
        "unknown key `weird_key`",
        "FROM_HOST",
    ] {
        assert!(w.contains(needle), "{needle} not in {w}");
    }
}

#[test]
fn what_would_break_the_sandbox_is_refused_by_service_and_key() {
    let svc = |body: &str| format!("services:\n  main: {{}}\n  db:\n    image: x\n{body}");
    for (body, key) in [
        ("    privileged: true\n", "privileged"),
        ("    network_mode: host\n", "network_mode"),
        ("    pid: host\n", "pid"),
        ("    ipc: host\n", "ipc"),
        ("    cap_add: [NET_ADMIN]\n", "cap_add"),
        ("    security_opt: [seccomp=unconfined]\n", "security_opt"),
        ("    devices: [/dev/kvm]\n", "devices"),
        ("    extra_hosts: [\"h:host-gateway\"]\n", "extra_hosts"),
        ("    volumes: [\"/etc:/host-etc\"]\n", "volumes"),
        ("    volumes: [\"./data:/data\"]\n", "volumes"),
        (
            "    volumes: [{type: bind, source: x, target: /x}]\n",
            "volumes",
        ),
        ("    build: ../../outside\n", "build.context"),
        ("    build: /abs\n", "build.context"),
        (
            "    build: {context: ., dockerfile: Other.Dockerfile}\n",
            "build.dockerfile",
        ),
        ("    env_file: ../../secrets.env\n", "env_file"),
        (
            "    depends_on: {main: {condition: service_started}}\n",
            "depends_on",
        ),
    ] {
        let (service, got) = refused(&svc(body));
        assert_eq!((service.as_str(), got.as_str()), ("db", key), "{body}");
    }
    let (s, k) = refused("services:\n  main:\n    volumes: [\"/:/host\"]\n");
    assert_eq!((s.as_str(), k.as_str()), ("main", "volumes"));
    let (s, k) = refused(
        "services:\n  main: {}\n  a:\n    image: x\n    volumes: [v:/a]\n  b:\n    image: x\n    volumes: [v:/b]\n",
    );
    assert_eq!((s.as_str(), k.as_str()), ("b", "volumes"));
    let (_, k) = refused("services:\n  main: {}\nsecrets:\n  s:\n    file: /etc/shadow\n");
    assert_eq!(k, "secrets");
}

#[test]
fn broken_files_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let err = |t: &str| parse_in(dir.path(), t).unwrap_err().to_string();
    assert!(err("services: [").contains("not valid YAML"));
    assert!(err("services:\n  db:\n    image: x\n").contains("no `main` service"));
    assert!(err("services:\n  main: {}\n  db: {}\n").contains("neither `image` nor `build`"));
    assert!(err("services:\n  main: {}\n  Db:\n    image: x\n").contains("lowercase"));
    assert!(
        err("services:\n  main: {}\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n")
            .contains("cycle")
    );
    assert!(
        err("services:\n  main: {}\n  a:\n    image: x\n    depends_on: [zz]\n")
            .contains("no service 'zz'")
    );
    assert!(err("services:\n  main:\n    image: ${NEED:?set NEED}\n").contains("set NEED"));
    assert!(
        err("services:\n  main: {}\n  a:\n    image: x\n    healthcheck: {test: [CMD], interval: 1x}\n")
            .contains("healthcheck")
    );
}

#[test]
fn env_files_are_read_from_inside_the_task_without_expansion() {
    let dir = tempfile::tempdir().unwrap();
    let env_dir = dir.path().join("environment");
    std::fs::create_dir_all(&env_dir).unwrap();
    std::fs::write(env_dir.join("db.env"), "A=1\nB=$HOME\n").unwrap();
    let c = parse_in(
        dir.path(),
        "services:\n  main: {}\n  db:\n    image: x\n    env_file: db.env\n    environment: {A: 2}\n    healthcheck: {disable: true, test: [CMD, x]}\n",
    )
    .unwrap();
    assert_eq!(
        c.sidecars[0].env,
        [
            ("B".to_string(), "$HOME".to_string()),
            ("A".into(), "2".into())
        ]
    );
    assert_eq!(c.sidecars[0].healthcheck, None);
}

#[test]
fn the_file_is_found_under_either_name() {
    let dir = tempfile::tempdir().unwrap();
    assert!(load(dir.path(), &BTreeMap::new()).unwrap().is_none());
    std::fs::create_dir_all(dir.path().join("environment")).unwrap();
    std::fs::write(
        dir.path().join("environment/docker-compose.yml"),
        "services:\n  main: {}\n",
    )
    .unwrap();
    let c = load(dir.path(), &BTreeMap::new()).unwrap().unwrap();
    assert!(c.sidecars.is_empty() && c.file.ends_with("docker-compose.yml"));
}
