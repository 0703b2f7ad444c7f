//! Versions of every tool a run compares runner with, for the results.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// The first line a command prints, or why there is none.
fn first_line(cmd: &mut Command) -> String {
    match cmd.stdin(Stdio::null()).stderr(Stdio::null()).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("?")
            .trim()
            .to_string(),
        Ok(out) => format!("not available ({})", out.status),
        Err(e) => format!("not available ({e})"),
    }
}

/// mini-swe-agent and SWE-ReX from the peers' venv, Harbor from its root,
/// runsc from the host, the docker CLI.
pub fn take(root: &Path) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    let python = root.join("target/peers/venv/bin/python");
    for (name, dist) in [("mini-swe-agent", "mini-swe-agent"), ("swe-rex", "swe-rex")] {
        let line = if python.is_file() {
            first_line(Command::new(&python).args([
                "-c",
                &format!("import importlib.metadata as m; print(m.version('{dist}'))"),
            ]))
        } else {
            "not installed (run `make bench-peers`)".to_string()
        };
        v.insert(name.to_string(), line);
    }
    v.insert(
        "harbor".into(),
        first_line(
            Command::new(root.join("sandbox/harbor/harbor.sh"))
                .arg("--version")
                .current_dir(root),
        ),
    );
    v.insert(
        "runsc".into(),
        first_line(Command::new("runsc").arg("--version")),
    );
    v.insert(
        "docker CLI".into(),
        first_line(Command::new("docker").args(["version", "--format", "{{.Client.Version}}"])),
    );
    v
}
