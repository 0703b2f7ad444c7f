//! Finding 8 (issue 21): a sandbox reads its mount sources in
//! `/proc/self/mountinfo`; those of runner's own files (the supervisor's
//! binary, the supervisor's channel) once named the host's home
//! (`/root/.cache/runner/supervisor-<hash>`) and `/tmp/runner-chan-*`.
//! They now live under neutral names (`runner::exec::host_dirs`). What the
//! engine itself mounts (`/var/lib/docker/containers/<id>/hostname`, and
//! with a network `hosts` and `resolv.conf`) is the only other host path
//! left, as the README says.
//!
//! Needs Docker and `runner-sandbox:tiny`; runs on the runtime under test.

use serde_json::json;

use crate::support::binary::{Dir, bash, first_tool_output, outcome, run, script};
use crate::support::docker::{TINY, require_images, runtime_args};

/// Words no mount source of a sandbox may hold.
const HOST_WORDS: [&str; 5] = ["/root", "/home", "runner-chan", ".cache", "supervisor-"];

/// The engine's own files, the one host path the sandbox still sees.
const ENGINE_FILES: [&str; 3] = ["/hostname", "/hosts", "/resolv.conf"];

/// Each mount's root within its filesystem (the host path of a bind
/// mount) and its source, as `root source` lines.
fn mount_sources(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            Some(format!(
                "{} {}",
                fields.get(3)?,
                fields.get(dash + 2).unwrap_or(&"")
            ))
        })
        .collect()
}

fn mountinfo_as(user: &str) -> String {
    let d = Dir::new();
    let s = script(
        &d,
        json!([{"tool_calls": [bash("cat /proc/self/mountinfo")]}, {"text": "done"}]),
    );
    let r = run(d
        .scripted(&s)
        .args(["--executor", "docker", "--image", TINY, "--user", user])
        .args(runtime_args())
        .arg("probe"));
    r.expect_code(0);
    let events = r.events();
    assert_eq!(outcome(&events), "completed", "{}", r.explain());
    first_tool_output(&events)
}

#[test]
fn mount_sources_inside_the_sandbox_name_no_home_and_no_runner_temp_dir() {
    let _g = crate::support::serial::shared();
    require_images(&[TINY]);
    for user in ["1000:1000", "0:0"] {
        let info = mountinfo_as(user);
        let sources = mount_sources(&info);
        assert!(sources.len() > 3, "no mountinfo as {user}:\n{info}");
        for line in &sources {
            for word in HOST_WORDS {
                assert!(
                    !line.contains(word),
                    "as {user}, a mount source names {word:?}: {line}\n{info}"
                );
            }
            // Host paths of the engine's: only its three network files.
            if line.contains("/var/lib/docker") {
                assert!(
                    ENGINE_FILES.iter().any(|f| line.contains(f)),
                    "as {user}, an engine path beyond its network files: {line}\n{info}"
                );
            }
        }
    }
}
