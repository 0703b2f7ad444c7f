//! A link in a task directory that leaves it is refused when the task is
//! loaded, naming the link, and the host file it points at is never read:
//! its content is nowhere in runner's output or reports. Run against the
//! real engine: on a runner that followed such links, these suites ran
//! (the env_file's host content became a sidecar's environment).

use std::path::Path;

use crate::support::binary::{Dir, Ran, walk};
use crate::support::docker::TINY;
use crate::support::eval::{eval, prelude, task, toml};

/// A host file outside the task, holding a line no task has.
fn canary(d: &Dir, name: &str) -> (std::path::PathBuf, String) {
    let outside = d.path().join("host");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let secret = format!("canary-{}-{}", std::process::id(), name.len());
    let p = outside.join(name);
    std::fs::write(&p, format!("LEAKED={secret}\n")).expect("write canary");
    (p, secret)
}

/// Exit 2, an `error:` line naming `link` and saying it leaves the task
/// directory, a hint; `secret` in no output and no file runner wrote.
fn assert_refused(d: &Dir, ran: &Ran, link: &str, secret: &str) {
    assert_eq!(ran.code(), 2, "{}", ran.explain());
    let err = ran.stderr();
    let line = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("an error line{}", ran.explain()));
    assert!(
        line.contains(link) && line.contains("outside the task directory"),
        "{link}{}",
        ran.explain()
    );
    assert!(
        err.lines().any(|l| l.starts_with("hint: ")),
        "{}",
        ran.explain()
    );
    assert!(!ran.stdout().contains(secret) && !err.contains(secret));
    for f in walk(d.path()) {
        if f.starts_with(d.path().join("host")) {
            continue;
        }
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "the host file's content is in {}",
            f.display()
        );
    }
}

fn link(to: &Path, at: &Path) {
    if let Some(p) = at.parent() {
        std::fs::create_dir_all(p).expect("mkdir");
    }
    std::os::unix::fs::symlink(to, at).expect("link");
}

#[test]
fn a_compose_env_file_linked_out_of_the_task_is_refused_and_never_read() {
    let _g = prelude();
    let d = Dir::new();
    let (host_env, secret) = canary(&d, "host.env");
    let compose = format!(
        "services:\n  main:\n    depends_on: [kv]\n  kv:\n    image: {TINY}\n    command: [\"sleep\", \"300\"]\n    env_file: host.env\n"
    );
    let t = task(
        d.path(),
        "t",
        &[
            ("instruction.md", "nothing to do\n"),
            (
                "task.toml",
                "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n",
            ),
            ("environment/Dockerfile", &format!("FROM {TINY}\n")),
            ("environment/docker-compose.yaml", &compose),
            (
                "tests/test.sh",
                "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n",
            ),
        ],
    );
    link(&host_env, &t.join("environment/host.env"));
    let ran = eval(&d, &["t", "--agent", "nop"]);
    assert_refused(&d, &ran, "environment/host.env", &secret);
}

#[test]
fn a_dockerfile_test_or_solution_linked_out_of_the_task_is_refused() {
    let _g = prelude();
    for at in [
        "environment/Dockerfile",
        "tests/test.sh",
        "solution/solve.sh",
    ] {
        let d = Dir::new();
        let (host_file, secret) = canary(&d, "file");
        // Runnable as what it stands for, so a runner that followed the
        // link would have gone on with it.
        let content = if at.ends_with("Dockerfile") {
            format!("FROM {TINY}\n# {secret}\n")
        } else {
            format!(
                "#!/bin/sh\n# {secret}\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n"
            )
        };
        std::fs::write(&host_file, content).expect("write");
        let dockerfile = format!("FROM {TINY}\n");
        let mut files = vec![
            ("instruction.md", "nothing to do\n"),
            (
                "task.toml",
                "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n",
            ),
            ("environment/Dockerfile", dockerfile.as_str()),
            (
                "tests/test.sh",
                "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n",
            ),
            ("solution/solve.sh", "true\n"),
        ];
        files.retain(|(p, _)| *p != at);
        let t = task(d.path(), "t", &files);
        link(&host_file, &t.join(at));
        let ran = eval(&d, &["t", "--agent", "oracle"]);
        assert_refused(&d, &ran, at, &secret);
    }
}

#[test]
fn a_tests_directory_linked_out_of_the_task_is_refused() {
    let _g = prelude();
    let d = Dir::new();
    let (secret_file, secret) = canary(&d, "secret.txt");
    let host_dir = secret_file.parent().expect("parent").to_path_buf();
    let test_sh = host_dir.join("test.sh");
    std::fs::write(
        &test_sh,
        "mkdir -p /logs/verifier; cat /tests/secret.txt; echo 1 > /logs/verifier/reward.txt\n",
    )
    .expect("write");
    let t = task(
        d.path(),
        "t",
        &[
            ("instruction.md", "nothing to do\n"),
            ("task.toml", &toml(TINY, 60, 60)),
        ],
    );
    link(&host_dir, &t.join("tests"));
    let ran = eval(&d, &["t", "--agent", "nop"]);
    assert_refused(&d, &ran, "t/tests", &secret);
    // A system directory too, named as such.
    std::fs::remove_file(t.join("tests")).expect("rm link");
    link(Path::new("/etc"), &t.join("tests"));
    let ran = eval(&d, &["t", "--agent", "nop"]);
    assert_refused(&d, &ran, "t/tests", &secret);
    assert!(ran.stderr().contains("/etc"), "{}", ran.explain());
}
