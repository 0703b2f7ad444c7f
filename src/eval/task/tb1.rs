//! Terminal-Bench 1 task dirs (task.yaml, docker-compose.yaml, Dockerfile,
//! run-tests.sh, solution.sh, tests/), mapped to Harbor's layout as Harbor's
//! own migration (`harbor/mappers/terminal_bench.py`) maps them, into a
//! fresh directory that the loaded [`Task`] keeps alive:
//!
//! - instruction.md from `instruction`; task.toml with `[agent] timeout_sec`
//!   = `max_agent_timeout_sec` (default 360), `[verifier] timeout_sec` =
//!   `max_test_timeout_sec` (default 60) and the rest as `[metadata]`;
//! - tests/ from tests/, and tests/test.sh = run-tests.sh with `$TEST_DIR`
//!   replaced by `/tests` and a suffix writing 1 or 0 to
//!   /logs/verifier/reward.txt from its exit code;
//! - solution/solve.sh from solution.sh (solution.yaml is refused, as Harbor
//!   refuses it);
//! - environment/ from the main compose service's build context (or the
//!   Dockerfile), the Dockerfile extended with the service's environment,
//!   working_dir, expose, entrypoint and platform, and every other file;
//! - environment/docker-compose.yaml when the compose file cannot collapse
//!   into the Dockerfile (sidecars, other keys): the main service replaced
//!   by Harbor's, the others kept. It is written as JSON, which is YAML.
//!
//! Links are copied as links, and only when they stay inside the task dir;
//! a file the mapping reads or rewrites must be a regular file.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Task, TaskError};

const REWARD_LOGGING_SUFFIX: &str = "
_EXIT_CODE=$?
if [ $_EXIT_CODE -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit $_EXIT_CODE
";
const DEFAULT_VOLUMES: [&str; 2] = [
    "${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}",
    "${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}",
];
const DEFAULT_ENV: &str = "TEST_DIR=${T_BENCH_TEST_DIR}";
const DOCKERFILE_FIELDS: [&str; 5] = [
    "environment",
    "working_dir",
    "expose",
    "entrypoint",
    "platform",
];
const IGNORED_FIELDS: [&str; 6] = [
    "build",
    "image",
    "container_name",
    "command",
    "volumes",
    "environment",
];
const HARBOR_REPLACES: [&str; 7] = [
    "build",
    "image",
    "container_name",
    "command",
    "environment",
    "volumes",
    "deploy",
];

/// task.yaml; other keys are ignored, as in Harbor.
#[derive(Debug, Deserialize)]
struct TaskYaml {
    instruction: String,
    author_name: Option<String>,
    author_email: Option<String>,
    difficulty: Option<String>,
    category: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    estimated_duration_sec: Option<f64>,
    expert_time_estimate_min: Option<f64>,
    junior_time_estimate_min: Option<f64>,
    max_agent_timeout_sec: Option<f64>,
    max_test_timeout_sec: Option<f64>,
}

/// A YAML mapping in its order.
#[derive(Debug, Default)]
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::default())
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = m.next_entry::<String, Value>()? {
                    out.push(kv);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
struct ComposeServices {
    #[serde(default)]
    services: Option<Ordered>,
}

/// Maps the Terminal-Bench 1 task in `src` into a fresh directory and loads
/// it; the task keeps `src`'s name and records it as `source_dir`.
pub fn load(src: &Path) -> Result<Task, TaskError> {
    super::links::refuse_links_out(src)?;
    let tmp =
        crate::exec::temp_dirs::create(crate::exec::temp_dirs::TB1_PREFIX).map_err(|source| {
            TaskError::Write {
                path: std::env::temp_dir(),
                source,
            }
        })?;
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "task".into());
    let dest = tmp.path().join(&name);
    map(src, &dest)?;
    let mut task = Task::load(&dest)?;
    task.name = name;
    task.source_dir = src.to_path_buf();
    task.materialized = Some(Arc::new(tmp));
    Ok(task)
}

fn invalid(path: &Path, message: impl Into<String>) -> TaskError {
    TaskError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> TaskError + '_ {
    move |source| TaskError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads a file the mapping needs: a regular file, not a link.
fn read_regular(path: &Path) -> Result<String, TaskError> {
    let meta = std::fs::symlink_metadata(path).map_err(|source| TaskError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(invalid(path, "must be a regular file (not a link)"));
    }
    std::fs::read_to_string(path).map_err(|source| TaskError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `dst` anew: whatever is there (a link included) is replaced, never
/// written through.
fn write_new(dst: &Path, content: &str) -> Result<(), TaskError> {
    remove_non_dir(dst)?;
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p).map_err(write_err(p))?;
    }
    std::fs::write(dst, content).map_err(write_err(dst))
}

fn remove_non_dir(dst: &Path) -> Result<(), TaskError> {
    match std::fs::symlink_metadata(dst) {
        Ok(m) if !m.is_dir() => std::fs::remove_file(dst).map_err(write_err(dst)),
        _ => Ok(()),
    }
}

fn set_executable(path: &Path) -> Result<(), TaskError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(write_err(path))?;
    let mut perm = meta.permissions();
    perm.set_mode(perm.mode() | 0o111);
    std::fs::set_permissions(path, perm).map_err(write_err(path))
}

/// Copies the tree at `root/rel` to `dst`: directories, regular files, and
/// links that stay inside `root` (as links); anything else is refused.
/// `skip` sees each path relative to `root`.
pub(super) fn copy_tree(
    root: &Path,
    rel: &Path,
    dst: &Path,
    skip: &dyn Fn(&Path) -> bool,
) -> Result<(), TaskError> {
    let src = root.join(rel);
    let mut entries: Vec<_> = std::fs::read_dir(&src)
        .map_err(|source| TaskError::Read {
            path: src.clone(),
            source,
        })?
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    std::fs::create_dir_all(dst).map_err(write_err(dst))?;
    for e in entries {
        let rel = rel.join(e.file_name());
        if skip(&rel) {
            continue;
        }
        copy_entry(root, &rel, &dst.join(e.file_name()), skip)?;
    }
    Ok(())
}

fn copy_entry(
    root: &Path,
    rel: &Path,
    dst: &Path,
    skip: &dyn Fn(&Path) -> bool,
) -> Result<(), TaskError> {
    let src = root.join(rel);
    let meta = std::fs::symlink_metadata(&src).map_err(|source| TaskError::Read {
        path: src.clone(),
        source,
    })?;
    let ft = meta.file_type();
    if ft.is_dir() {
        remove_non_dir(dst)?;
        copy_tree(root, rel, dst, skip)
    } else if ft.is_file() {
        remove_non_dir(dst)?;
        if let Some(p) = dst.parent() {
            std::fs::create_dir_all(p).map_err(write_err(p))?;
        }
        std::fs::copy(&src, dst).map(|_| ()).map_err(write_err(dst))
    } else if ft.is_symlink() {
        let target = std::fs::read_link(&src).map_err(|source| TaskError::Read {
            path: src.clone(),
            source,
        })?;
        if !super::links::link_stays_inside(rel, &target) {
            return Err(invalid(
                &src,
                format!(
                    "is a link to {} outside the task directory; refused",
                    target.display()
                ),
            ));
        }
        remove_non_dir(dst)?;
        std::os::unix::fs::symlink(&target, dst).map_err(write_err(dst))
    } else {
        Err(invalid(&src, "is not a file, directory or link; refused"))
    }
}

/// A compose build context as a path inside the task dir ("." for the
/// task dir itself).
fn context_of(service: &Value, compose: &Path) -> Result<String, TaskError> {
    let raw = match service.get("build") {
        Some(Value::Object(b)) => b.get("context").and_then(Value::as_str).unwrap_or("."),
        Some(Value::String(s)) => s.as_str(),
        _ => ".",
    };
    let p = Path::new(raw);
    if p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(invalid(
            compose,
            format!("build context '{raw}' must stay inside the task directory"),
        ));
    }
    let norm: PathBuf = p.components().filter(|c| *c != Component::CurDir).collect();
    let s = norm.to_string_lossy().into_owned();
    Ok(if s.is_empty() { ".".into() } else { s })
}

/// `str(value)` as Python gives it, for the scalars compose files hold.
fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

/// The lines Harbor appends to the Dockerfile for the main service.
fn dockerfile_additions(service: &Value) -> Vec<String> {
    let mut out = vec!["ENV TEST_DIR=/tests".to_string()];
    match service.get("environment") {
        Some(Value::Array(list)) => {
            for e in list.iter().map(py_str).filter(|e| e != DEFAULT_ENV) {
                out.push(format!("ENV {e}"));
            }
        }
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let e = format!("{k}={}", py_str(v));
                if e != DEFAULT_ENV {
                    out.push(format!("ENV {e}"));
                }
            }
        }
        _ => {}
    }
    if let Some(Value::String(w)) = service.get("working_dir")
        && !w.contains("${")
    {
        out.push(format!("WORKDIR {w}"));
    }
    match service.get("expose") {
        Some(Value::Array(ports)) => {
            out.extend(ports.iter().map(|p| format!("EXPOSE {}", py_str(p))))
        }
        Some(p) => out.push(format!("EXPOSE {}", py_str(p))),
        None => {}
    }
    if let Some(ep) = service.get("entrypoint") {
        let items = match ep {
            Value::Array(list) => list.clone(),
            other => vec![other.clone()],
        };
        let json: Vec<String> = items.iter().map(Value::to_string).collect();
        out.push(format!("ENTRYPOINT [{}]", json.join(", ")));
    }
    out
}

/// The Dockerfile with the main service's settings, as Harbor writes it.
fn extend_dockerfile(content: &str, service: &Value) -> String {
    let mut content = content.to_string();
    if let Some(platform) = service.get("platform").map(py_str) {
        let with = regex::Regex::new(r"(?m)^(FROM\s+)--platform=\S+\s+(.+)$").ok();
        let without = regex::Regex::new(r"(?m)^FROM\s+(.+)$").ok();
        if let (Some(with), Some(without)) = (with, without) {
            if with.is_match(&content) {
                let rep = format!("${{1}}--platform={platform} ${{2}}");
                content = with.replace_all(&content, rep.as_str()).into_owned();
            } else {
                content = without
                    .replace_all(&content, |c: &regex::Captures<'_>| {
                        if c[1].starts_with("--platform") {
                            c[0].to_string()
                        } else {
                            format!("FROM --platform={platform} {}", &c[1])
                        }
                    })
                    .into_owned();
            }
        }
    }
    if !content.ends_with('\n') {
        content.push('\n');
    }
    content.push_str("\n# Mapped from docker-compose.yaml\n");
    content.push_str(&dockerfile_additions(service).join("\n"));
    content.push('\n');
    content
}

fn can_collapse(top: &Ordered, services: &Ordered) -> bool {
    if services.0.len() != 1 || top.0.iter().any(|(k, _)| k != "services" && k != "version") {
        return false;
    }
    let Some(Value::Object(service)) = services.0.first().map(|(_, s)| s) else {
        return false;
    };
    service.iter().all(|(k, v)| {
        let allowed =
            DOCKERFILE_FIELDS.contains(&k.as_str()) || IGNORED_FIELDS.contains(&k.as_str());
        let default_volumes = k != "volumes"
            || v.as_array().is_some_and(|vs| {
                vs.iter()
                    .all(|x| x.as_str().is_some_and(|x| DEFAULT_VOLUMES.contains(&x)))
            });
        allowed && default_volumes
    })
}

/// Harbor's compose file for a task whose compose file does not collapse.
fn harbor_compose(
    top: &Ordered,
    services: &Ordered,
    main_name: &str,
    main: &Value,
) -> Result<String, serde_json::Error> {
    let mut converted = Map::new();
    for (k, v) in &top.0 {
        if k != "services" && k != "version" {
            converted.insert(k.clone(), v.clone());
        }
    }
    let mut harbor_main = json!({
        "build": {"context": "${CONTEXT_DIR}"},
        "image": "${MAIN_IMAGE_NAME}",
        "command": ["sh", "-c", "sleep infinity"],
        "environment": ["TEST_DIR=${TEST_DIR}"],
        "deploy": {"resources": {"limits": {"cpus": "${CPUS}", "memory": "${MEMORY}"}}},
    });
    if let (Value::Object(hm), Value::Object(m)) = (&mut harbor_main, main) {
        for (k, v) in m {
            if !HARBOR_REPLACES.contains(&k.as_str()) {
                hm.insert(k.clone(), v.clone());
            }
        }
    }
    let mut svcs = Map::new();
    svcs.insert("main".into(), harbor_main);
    for (name, svc) in &services.0 {
        if name != main_name {
            svcs.insert(name.clone(), svc.clone());
        }
    }
    converted.insert("services".into(), Value::Object(svcs));
    let text = serde_json::to_string_pretty(&Value::Object(converted))?;
    Ok(text.replace("${T_BENCH_TASK_DOCKER_NAME_PREFIX}", "hb") + "\n")
}

fn yaml_err(path: &Path, e: &serde_saphyr::Error) -> TaskError {
    let text = e.without_snippet().to_string();
    let text = text.trim();
    TaskError::Yaml {
        path: path.to_path_buf(),
        message: text
            .strip_prefix("error: ")
            .unwrap_or(text)
            .replace('\n', " "),
    }
}

/// Writes the Harbor form of the Terminal-Bench 1 task in `src` to `dest`
/// (which must not exist).
pub fn map(src: &Path, dest: &Path) -> Result<(), TaskError> {
    if src.join("solution.yaml").exists() {
        return Err(TaskError::Refused {
            path: src.to_path_buf(),
            key: "solution.yaml".into(),
            what: "solution.yaml is not supported (Harbor's migration refuses it too)".into(),
            hint: "convert it to solution.sh: the commands it lists, in order".into(),
        });
    }
    let yaml_path = src.join("task.yaml");
    let cfg: TaskYaml =
        serde_saphyr::from_str(&read_regular(&yaml_path)?).map_err(|e| yaml_err(&yaml_path, &e))?;
    let env_dir = dest.join("environment");
    let tests_dir = dest.join("tests");
    for d in [&env_dir, &tests_dir] {
        std::fs::create_dir_all(d).map_err(write_err(d))?;
    }

    // docker-compose.yaml: the main service's build context and Dockerfile.
    let compose_path = src.join("docker-compose.yaml");
    if !compose_path.exists() {
        return Err(invalid(
            src,
            "docker-compose.yaml is missing (a Terminal-Bench 1 task has one)",
        ));
    }
    let compose_text = read_regular(&compose_path)?;
    let top: Ordered =
        serde_saphyr::from_str(&compose_text).map_err(|e| yaml_err(&compose_path, &e))?;
    let services = serde_saphyr::from_str::<ComposeServices>(&compose_text)
        .map_err(|e| yaml_err(&compose_path, &e))?
        .services
        .unwrap_or_default();
    let mut handled: BTreeSet<String> = [
        "docker-compose.yaml",
        "task.yaml",
        "solution.sh",
        "run-tests.sh",
        "tests",
    ]
    .map(String::from)
    .into();
    if let Some((main_name, main)) = services
        .0
        .iter()
        .find(|(n, _)| n == "client")
        .or_else(|| services.0.first())
    {
        let compose = Compose {
            path: &compose_path,
            top: &top,
            services: &services,
        };
        map_main_service(src, &env_dir, &compose, main_name, main, &mut handled)?;
    }

    // solution.sh -> solution/solve.sh
    if src.join("solution.sh").exists() {
        let solve = dest.join("solution").join("solve.sh");
        write_new(&solve, &read_regular(&src.join("solution.sh"))?)?;
        set_executable(&solve)?;
    }
    map_tests(src, &tests_dir)?;

    // Every other file goes to environment/.
    let skip = |rel: &Path| {
        rel.components()
            .next()
            .is_some_and(|c| handled.contains(c.as_os_str().to_string_lossy().as_ref()))
    };
    copy_tree(src, Path::new(""), &env_dir, &skip)?;

    let mut instruction = cfg.instruction.clone();
    if !instruction.ends_with('\n') {
        instruction.push('\n');
    }
    write_new(&dest.join("instruction.md"), &instruction)?;
    write_new(&dest.join("task.toml"), &task_toml(&cfg))?;
    Ok(())
}

/// The parsed docker-compose.yaml of a Terminal-Bench 1 task.
struct Compose<'a> {
    path: &'a Path,
    top: &'a Ordered,
    services: &'a Ordered,
}

/// The main service's build context and Dockerfile into `env_dir` (with
/// the tests and solution.sh it copies), and the other services' contexts
/// and a Harbor compose file when the compose file cannot collapse into
/// the Dockerfile; what it took goes into `handled`.
fn map_main_service(
    src: &Path,
    env_dir: &Path,
    compose: &Compose<'_>,
    main_name: &str,
    main: &Value,
    handled: &mut BTreeSet<String>,
) -> Result<(), TaskError> {
    let context = context_of(main, compose.path)?;
    let dockerfile = env_dir.join("Dockerfile");
    if context == "." {
        handled.insert("Dockerfile".into());
        if src.join("Dockerfile").exists() {
            let text = read_regular(&src.join("Dockerfile"))?;
            write_new(&dockerfile, &text)?;
        }
    } else {
        handled.insert(first_component(&context));
        if src.join(&context).is_dir() {
            copy_tree(src, Path::new(&context), env_dir, &|_| false)?;
        }
    }
    if std::fs::symlink_metadata(&dockerfile).is_ok() {
        let text = read_regular(&dockerfile)?;
        let refers = |what: &str| {
            ["COPY ", "COPY ./", "ADD ", "ADD ./"]
                .iter()
                .any(|p| text.contains(&format!("{p}{what}")))
        };
        if refers("tests") && src.join("tests").is_dir() && !env_dir.join("tests").exists() {
            copy_entry(src, Path::new("tests"), &env_dir.join("tests"), &|_| false)?;
        }
        if refers("solution.sh")
            && src.join("solution.sh").exists()
            && !env_dir.join("solution.sh").exists()
        {
            copy_entry(
                src,
                Path::new("solution.sh"),
                &env_dir.join("solution.sh"),
                &|_| false,
            )?;
        }
        write_new(&dockerfile, &extend_dockerfile(&text, main))?;
    }
    if !can_collapse(compose.top, compose.services) {
        for (name, svc) in &compose.services.0 {
            if name == main_name {
                continue;
            }
            let ctx = context_of(svc, compose.path)?;
            if ctx != "." && src.join(&ctx).is_dir() {
                if !env_dir.join(&ctx).exists() {
                    copy_tree(src, Path::new(&ctx), &env_dir.join(&ctx), &|_| false)?;
                }
                handled.insert(first_component(&ctx));
            }
        }
        let text = harbor_compose(compose.top, compose.services, main_name, main)
            .map_err(|e| invalid(compose.path, e.to_string()))?;
        write_new(&env_dir.join("docker-compose.yaml"), &text)?;
    }
    Ok(())
}

/// tests/ -> tests/, then run-tests.sh -> tests/test.sh writing the reward.
fn map_tests(src: &Path, tests_dir: &Path) -> Result<(), TaskError> {
    let src_tests = src.join("tests");
    if std::fs::symlink_metadata(&src_tests).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(invalid(&src_tests, "is a link; refused"));
    }
    if src_tests.is_dir() {
        copy_tree(src, Path::new("tests"), tests_dir, &|_| false)?;
    }
    let run_tests = src.join("run-tests.sh");
    if !run_tests.exists() {
        return Err(invalid(
            src,
            "run-tests.sh is missing (a Terminal-Bench 1 task has one)",
        ));
    }
    let mut test_sh = read_regular(&run_tests)?;
    if !test_sh.ends_with('\n') {
        test_sh.push('\n');
    }
    test_sh.push_str(REWARD_LOGGING_SUFFIX);
    let test_path = tests_dir.join("test.sh");
    write_new(&test_path, &test_sh.replace("$TEST_DIR", "/tests"))?;
    set_executable(&test_path)?;

    Ok(())
}

fn first_component(p: &str) -> String {
    Path::new(p)
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// task.toml as Harbor's mapper writes it (values it leaves out when None
/// are left out here too).
fn task_toml(c: &TaskYaml) -> String {
    let mut meta = toml::Table::new();
    let s =
        |v: &Option<String>, d: &str| toml::Value::String(v.clone().unwrap_or_else(|| d.into()));
    meta.insert("author_name".into(), s(&c.author_name, "unknown"));
    meta.insert("author_email".into(), s(&c.author_email, "unknown"));
    meta.insert("difficulty".into(), s(&c.difficulty, "unknown"));
    meta.insert("category".into(), s(&c.category, "software_engineering"));
    meta.insert(
        "tags".into(),
        toml::Value::Array(c.tags.iter().cloned().map(toml::Value::String).collect()),
    );
    for (k, v) in [
        ("estimated_duration_sec", c.estimated_duration_sec),
        ("expert_time_estimate_min", c.expert_time_estimate_min),
        ("junior_time_estimate_min", c.junior_time_estimate_min),
    ] {
        if let Some(v) = v {
            meta.insert(k.into(), toml::Value::Float(v));
        }
    }
    let section = |secs: f64| {
        let mut t = toml::Table::new();
        t.insert("timeout_sec".into(), toml::Value::Float(secs));
        toml::Value::Table(t)
    };
    let mut root = toml::Table::new();
    root.insert("schema_version".into(), toml::Value::String("1.4".into()));
    root.insert("metadata".into(), toml::Value::Table(meta));
    root.insert(
        "verifier".into(),
        section(c.max_test_timeout_sec.unwrap_or(60.0)),
    );
    root.insert(
        "agent".into(),
        section(c.max_agent_timeout_sec.unwrap_or(360.0)),
    );
    root.to_string()
}
